//! `llmroute usage`: the records `chat` wrote, reported, exported, and checked against the
//! ledger's spend counters.

use serde_json::Value;

use crate::support::*;

const TENANTS: &str = "tenants:
  tiers:
    pro: { rpm: 500, budget: { daily_usd: 50, monthly_usd: 500 } }
  members:
    acme: pro
";

/// A scene with `extra` configuration whose provider answers `calls` times with `ok.json`.
async fn answering_scene(extra: &str, calls: u64) -> (Scene, wiremock::MockServer) {
    let server = wiremock::MockServer::start().await;
    let s = scene_with(
        &[(
            "oa",
            "openai",
            format!("{}/v1", server.uri()),
            "gpt-test",
            2.0,
            8.0,
            "rpm: 100",
        )],
        extra,
    );
    let ok = wiremock::ResponseTemplate::new(200)
        .set_body_raw(fixture("openai/ok.json"), "application/json");
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ok)
        .expect(calls)
        .mount(&server)
        .await;
    (s, server)
}

async fn chats(s: &Scene, tenants: &[&str]) {
    for tenant in tenants {
        let mut cmd = s.llmroute(&["oa"]);
        cmd.args([
            "chat",
            "--tenant",
            tenant,
            "--no-stream",
            "--max-tokens",
            "1",
            "-p",
        ])
        .arg(s.prompt("Hi"));
        run_async(cmd, 0).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_waits_out_a_silent_sinks_timeout_and_leaves_its_record_in_the_spill_file() {
    // A PostgreSQL that takes the connection (the kernel's backlog) and never answers, with a
    // write timeout longer than the ten seconds the chat waits for its settlements: the record
    // reaches the spill file only when that timeout ends, and the chat waits for it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let extra =
        format!("usage:\n  sink: postgres://llmroute@127.0.0.1:{port}/test\n  timeout_ms: 11000\n");
    let (s, _server) = answering_scene(&extra, 1).await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--no-stream", "--max-tokens", "1", "-p"])
        .arg(s.prompt("Hi"));
    run_async(cmd, 0).await;
    let spill = std::fs::read_to_string(s.dir.path().join("state/usage.spill")).unwrap();
    let record: Value = serde_json::from_str(spill.lines().next().unwrap()).unwrap();
    assert_eq!(record["outcome"], "ok", "{spill}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_without_a_tenant_are_charged_to_no_budget_whatever_the_default_tier() {
    let extra = format!("{TENANTS}  default_tier: pro\n");
    let (s, _server) = answering_scene(&extra, 2).await;
    chats(&s, &["acme"]).await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--no-stream", "--max-tokens", "1", "-p"])
        .arg(s.prompt("Hi"));
    run_async(cmd, 0).await;

    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--check"]);
    let check = run_async(cmd, 0).await.0;
    assert!(
        check.contains("ok: every tenant's records add up"),
        "{check}"
    );
    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--by", "tenant"]);
    let table = run_async(cmd, 0).await.0;
    assert!(table.contains("acme (pro): busiest day"), "{table}");
    assert!(!table.contains("- (pro)"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn chats_leave_records_that_usage_reports_exports_and_checks() {
    let (s, _server) = answering_scene(TENANTS, 3).await;
    chats(&s, &["acme", "acme", "globex"]).await;
    assert!(s.dir.path().join("state/usage.sqlite").exists());

    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--json", "--by", "tenant"]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    let t = &v["totals"];
    assert_eq!(
        (t["requests"].as_u64(), t["ok"].as_u64()),
        (Some(3), Some(3))
    );
    // 1117 prompt tokens at $2 and 46 completion tokens at $8 per million, each.
    assert_eq!(t["cost_micros"].as_u64(), Some(3 * 2_602));
    assert_eq!(t["prompt_tokens"].as_u64(), Some(3 * 1_117));
    let rows = v["rows"].as_array().unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r["key"][0].as_str().unwrap()).collect();
    assert_eq!(keys, ["acme", "globex"]);
    assert_eq!(rows[0]["requests"].as_u64(), Some(2));
    assert_eq!(v["budgets"][0]["tenant"], "acme");

    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--csv", "--by", "model,outcome"]);
    let csv = run_async(cmd, 0).await.0;
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("model,outcome,requests,ok,failed"),
        "{csv}"
    );
    assert!(lines[1].starts_with("gpt-test,ok,3,3,0,0,3351,"), "{csv}");
    assert_eq!(lines.len(), 2, "{csv}");
    let p99 = lines[0]
        .split(',')
        .position(|c| c == "latency_p99_ms")
        .unwrap();
    let ttft = lines[0]
        .split(',')
        .position(|c| c == "ttft_p50_ms")
        .unwrap();
    let cells: Vec<&str> = lines[1].split(',').collect();
    let max = lines[0]
        .split(',')
        .position(|c| c == "max_latency_ms")
        .unwrap();
    assert_eq!(cells[p99], cells[max], "the p99 of 3 is the slowest: {csv}");
    assert_eq!(cells[ttft], "", "no streamed request: {csv}");

    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--by", "tenant"]);
    let table = run_async(cmd, 0).await.0;
    assert!(
        table.contains("3 requests (3 ok, 0 failed, 0 cancelled)"),
        "{table}"
    );
    assert!(table.contains("cost per hour"), "{table}");
    assert!(
        table.contains("P95 MS") && table.contains(", p50 "),
        "{table}"
    );
    assert!(table.contains("acme") && table.contains('█'), "{table}");
    assert!(table.contains("acme (pro): busiest day"), "{table}");

    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--check"]);
    let check = run_async(cmd, 0).await.0;
    assert!(
        check.contains("acme") && check.contains("$0.005204"),
        "{check}"
    );
    assert!(
        check.contains("ok: every tenant's records add up"),
        "{check}"
    );

    // The model filter matches what was asked for or what served.
    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--json", "--model", "chat"]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    assert_eq!(v["totals"]["requests"].as_u64(), Some(3));
    let mut cmd = s.llmroute(&[]);
    cmd.args([
        "usage",
        "--json",
        "--model",
        "other",
        "--since",
        "2026-01-01",
    ]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    assert_eq!(v["totals"]["requests"].as_u64(), Some(0));
}

/// A scene whose provider is never called.
fn unreachable_scene() -> Scene {
    scene(&[(
        "oa",
        "openai",
        "http://127.0.0.1:9/v1".to_owned(),
        "gpt-test",
        2.0,
        8.0,
        "rpm: 100",
    )])
}

#[test]
fn bad_periods_and_groupings_name_the_flag() {
    let s = unreachable_scene();
    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--since", "yesterday"]);
    let (_, err) = run(&mut cmd, 2);
    assert!(err.contains("--since: `yesterday` is not a time"), "{err}");
    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--by", "week"]);
    let (_, err) = run(&mut cmd, 2);
    assert!(err.contains("--by: unknown grouping `week`"), "{err}");
    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--since", "1h", "--until", "2h"]);
    let (_, err) = run(&mut cmd, 2);
    assert!(err.contains("is not before --until"), "{err}");
    let mut cmd = s.llmroute(&[]);
    cmd.env("LLMROUTE_USAGE", "mysql://x").args(["usage"]);
    let (_, err) = run(&mut cmd, 2);
    assert!(err.contains("LLMROUTE_USAGE: unknown sink"), "{err}");
    // libpq's settings are no URL, and may hold a password: not shown.
    let mut cmd = s.llmroute(&[]);
    cmd.env("LLMROUTE_USAGE", "host=db user=app password=s3cret-planted")
        .args(["usage"]);
    let (_, err) = run(&mut cmd, 2);
    assert!(err.contains("LLMROUTE_USAGE: unknown sink"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    // A PostgreSQL URL that is no URL is a configuration error too, never showing a password.
    let mut cmd = s.llmroute(&[]);
    cmd.env("LLMROUTE_USAGE", "postgres://u:s3cret-planted@db:99999/x")
        .args(["usage"]);
    let (_, err) = run(&mut cmd, 2);
    assert!(
        err.contains("not a PostgreSQL URL") && err.contains("$LLMROUTE_USAGE"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    // `--check` compares the day and the month: a period or a model it would not honour is
    // refused, not ignored.
    for flag in [
        &["--since", "7d"][..],
        &["--until", "1h"],
        &["--model", "gpt-test"],
    ] {
        let mut cmd = s.llmroute(&[]);
        cmd.args(["usage", "--check"]).args(flag);
        let (_, err) = run(&mut cmd, 2);
        assert!(
            err.contains("cannot be used with") && err.contains(flag[0]),
            "{flag:?}: {err}"
        );
    }
}

#[test]
fn a_sink_that_cannot_be_read_is_exit_5_and_never_shows_its_password() {
    let s = unreachable_scene();
    let mut cmd = s.llmroute(&[]);
    cmd.env(
        "LLMROUTE_USAGE",
        "postgres://llmroute:planted-S3CRET@127.0.0.1:9/llm",
    )
    .args(["usage"]);
    let (out, err) = run(&mut cmd, 5);
    assert!(
        err.contains("usage sink postgres://llmroute:***@127.0.0.1:9/llm"),
        "{err}"
    );
    assert!(!out.contains("S3CRET") && !err.contains("S3CRET"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn chats_leave_records_in_postgres_that_usage_and_check_read() {
    let pg = llmroute_tests::TestPostgres::new();
    let usage = format!("usage:\n  sink: {}\n  schema: {}\n", pg.url(), pg.schema());
    let (s, _server) = answering_scene(&format!("{TENANTS}{usage}"), 2).await;
    chats(&s, &["acme", "acme"]).await;
    assert!(!s.dir.path().join("state/usage.sqlite").exists());

    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--json", "--by", "tenant"]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    assert_eq!(v["totals"]["requests"].as_u64(), Some(2));
    assert_eq!(v["totals"]["cost_micros"].as_u64(), Some(2 * 2_602));
    assert_eq!(v["rows"][0]["key"][0], "acme");

    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--check"]);
    let check = run_async(cmd, 0).await.0;
    assert!(check.contains("$0.005204"), "{check}");
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_check_reconciles_to_the_micro_dollar_with_cache_writes_and_price_bands() {
    let server = wiremock::MockServer::start().await;
    let s = scene_with(
        &[(
            "an",
            "anthropic",
            server.uri(),
            "claude-test",
            3.0,
            15.0,
            "rpm: 100",
        )],
        TENANTS,
    );
    // A band above 3,000 prompt tokens: the cache-write answer's 3,550 are billed at it.
    let yaml = std::fs::read_to_string(&s.config).unwrap();
    let banded = "price: { input: 3, output: 15, above: [{ prompt_tokens: 3000, input: 6, \
                  output: 22.5 }] }";
    std::fs::write(
        &s.config,
        yaml.replace("price: { input: 3, output: 15 }", banded),
    )
    .unwrap();
    let writes = wiremock::ResponseTemplate::new(200)
        .set_body_raw(fixture("anthropic/cache_writes.json"), "application/json");
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(writes)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    let plain = wiremock::ResponseTemplate::new(200)
        .set_body_raw(fixture("anthropic/ok.json"), "application/json");
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(plain)
        .mount(&server)
        .await;
    for _ in 0..2 {
        let mut cmd = s.llmroute(&["an"]);
        cmd.args([
            "chat",
            "--tenant",
            "acme",
            "--no-stream",
            "--max-tokens",
            "1",
            "-p",
        ])
        .arg(s.prompt("Hi"));
        run_async(cmd, 0).await;
    }
    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--json"]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    // At the band: 50 x $6, 1,000 x $7.50, 2,000 x $12, 500 x $0.60, 200 x $22.50; below it
    // (ok.json's 2,009): 21 x $3, 188 x $3.75, 1,800 x $0.30, 393 x $15, per million.
    let band = 50 * 6 + 1_000 * 15 / 2 + 2_000 * 12 + 500 * 6 / 10 + 200 * 45 / 2;
    let base = 21 * 3 + 188 * 15 / 4 + 1_800 * 3 / 10 + 393 * 15;
    let cost = v["totals"]["cost_micros"].as_u64();
    assert_eq!(cost, Some(band + base), "{v}");
    let mut cmd = s.llmroute(&[]);
    cmd.args(["usage", "--check"]);
    let check = run_async(cmd, 0).await.0;
    assert!(
        check.contains("ok: every tenant's records add up"),
        "{check}"
    );
}
