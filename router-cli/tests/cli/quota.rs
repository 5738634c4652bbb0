//! `llmroute quota` reports what the chats before it used, from the embedded store and from Redis.

use serde_json::Value;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// `llmroute quota --json` in scene `s`, parsed.
async fn quota_json(s: &Scene) -> Value {
    let mut cmd = s.llmroute(&[]);
    cmd.args(["quota", "--json"]);
    serde_json::from_str(&run_async(cmd, 0).await.0).unwrap()
}

/// `llmroute quota` in scene `s`: its table.
async fn quota_table(s: &Scene) -> String {
    let mut cmd = s.llmroute(&[]);
    cmd.args(["quota"]);
    run_async(cmd, 0).await.0
}

async fn three_chats_then_quota(state: Option<&str>) {
    let (s, server) = openai_scene("rpm: 100, tpm: 100000, concurrency: 4").await;
    let ok = ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(ok)
        .expect(3)
        .mount(&server)
        .await;
    let with_state = |mut cmd: assert_cmd::Command| {
        if let Some(url) = state {
            cmd.args(["--state", url]);
        }
        cmd
    };
    for _ in 0..3 {
        let mut cmd = with_state(s.llmroute(&["oa"]));
        // A max_tokens under the 46 used: what stays counted is the provider's usage.
        cmd.args(["chat", "--no-stream", "--max-tokens", "1", "-p"])
            .arg(s.prompt("Hi"));
        run_async(cmd, 0).await;
    }
    let mut cmd = with_state(s.llmroute(&[]));
    cmd.args(["quota", "--json"]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    let d = &v["deployments"][0];
    assert_eq!(
        (d["provider"].as_str(), d["model"].as_str()),
        (Some("oa"), Some("gpt-test"))
    );
    // Nobody waits in its line.
    assert_eq!(d["line"]["waiting"].as_u64(), Some(0));
    assert!(d["line"]["oldest_wait_secs"].is_null());
    assert_eq!(
        (d["rpm"]["used"].as_u64(), d["rpm"]["limit"].as_u64()),
        (Some(3), Some(100))
    );
    assert_eq!(
        (d["tpm"]["used"].as_u64(), d["tpm"]["limit"].as_u64()),
        (Some(3 * 1163), Some(100_000))
    );
    assert_eq!(
        (
            d["concurrency"]["in_flight"].as_u64(),
            d["concurrency"]["limit"].as_u64()
        ),
        (Some(0), Some(4))
    );
    assert_eq!(d["cooldown_secs"], Value::Null);
    assert_eq!(d["price"]["input_per_mtok"].as_f64(), Some(2.0));

    let mut cmd = with_state(s.llmroute(&[]));
    cmd.args(["quota"]);
    let table = run_async(cmd, 0).await.0;
    assert!(
        table.contains("oa/gpt-test") && table.contains("3/100") && table.contains("3489/100000"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_reports_n_chats_from_the_embedded_store() {
    three_chats_then_quota(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_reports_n_chats_from_redis() {
    let redis = llmroute_tests::redis_server();
    three_chats_then_quota(Some(&redis.url)).await;
}

#[test]
fn completions_print_a_script() {
    let (stdout, _) = run(llmroute().args(["completions", "bash"]), 0);
    assert!(
        stdout.contains("llmroute") && stdout.contains("quota"),
        "{stdout}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn completions_that_cannot_be_written_fail_with_a_message() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmroute"))
        .args(["completions", "bash"])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot write output"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

const TENANTS: &str = "tenants:
  tiers:
    free: { rpm: 10, budget: { daily_usd: 0.003 } }
    pro: { rpm: 500, concurrency: 20, budget: { daily_usd: 50, monthly_usd: 500 } }
  members:
    acme: pro
    tiny: free
";

async fn tenant_scene() -> (Scene, MockServer) {
    let server = MockServer::start().await;
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
        TENANTS,
    );
    let ok = ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(ok)
        .mount(&server)
        .await;
    (s, server)
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_for_a_tenant_matches_what_was_admitted_and_settled() {
    let (s, _server) = tenant_scene().await;
    for _ in 0..2 {
        let mut cmd = s.llmroute(&["oa"]);
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
    cmd.args(["quota", "--tenant", "acme", "--json"]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    let t = &v["tenant"];
    assert_eq!(
        (t["name"].as_str(), t["tier"].as_str()),
        (Some("acme"), Some("pro"))
    );
    assert_eq!(
        (t["rpm"]["used"].as_u64(), t["rpm"]["limit"].as_u64()),
        (Some(2), Some(500))
    );
    assert_eq!(t["tpm"]["used"].as_u64(), Some(2 * 1163));
    assert_eq!(t["concurrency"]["in_flight"].as_u64(), Some(0));
    // Each chat cost 1117 x $2 + 46 x $8 per Mtok = $0.002602.
    assert_eq!(t["spend"]["today_usd"].as_f64(), Some(0.005204));
    assert_eq!(t["spend"]["month_usd"].as_f64(), Some(0.005204));
    assert_eq!(t["spend"]["daily_budget_usd"].as_f64(), Some(50.0));
    assert!(t["spend"]["projected_month_usd"].as_f64().unwrap() >= 0.005204);
    let mut cmd = s.llmroute(&[]);
    cmd.args(["quota", "--tenant", "acme"]);
    let text = run_async(cmd, 0).await.0;
    assert!(
        text.contains("tenant acme (tier pro)") && text.contains("spent today $0.005204 of $50.00"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exhausted_budget_exits_3_with_the_reset_time() {
    let (s, _server) = tenant_scene().await;
    let mut first = s.llmroute(&["oa"]);
    first
        .args(["chat", "--tenant", "tiny", "--no-stream", "-p"])
        .arg(s.prompt("Hi"));
    run_async(first, 0).await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--tenant", "tiny", "-p"])
        .arg(s.prompt("Hi"));
    let stderr = run_async(cmd, 3).await.1;
    assert!(stderr.starts_with("llmroute: tenant `tiny`: oa/gpt-test: tenant daily budget cannot cover it; the budget resets in "), "{stderr}");
}

#[test]
fn simulate_is_labelled_and_deterministic_for_a_seed() {
    let args = [
        "--config",
        "",
        "simulate",
        "--duration",
        "5m",
        "--rps",
        "30",
        "--burstiness",
        "1",
        "--json",
    ];
    let config = example();
    let json = |seed: &str| {
        let mut cmd = llmroute();
        cmd.args(&args[..1])
            .arg(&config)
            .args(&args[2..])
            .args(["--seed", seed]);
        run(&mut cmd, 0).0
    };
    let (a, b, c) = (json("7"), json("7"), json("8"));
    assert_eq!(a, b, "same seed, same report");
    assert_ne!(a, c, "another seed, another report");
    let v: Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["simulation"], true);
    let mut text = llmroute();
    text.args(&args[..1])
        .arg(&config)
        .args(&args[2..args.len() - 1]);
    let (out, _) = run(&mut text, 0);
    assert!(
        out.starts_with("llmroute simulate — SIMULATION") && out.trim_end().ends_with("differ."),
        "{out}"
    );
}

#[test]
fn simulate_html_writes_the_page_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("sim.html");
    let mut cmd = llmroute();
    cmd.arg("--config")
        .arg(example())
        .args(["simulate", "--duration", "2m", "--rps", "20", "--html"])
        .arg(&page);
    let (out, _) = run(&mut cmd, 0);
    assert!(out.starts_with("llmroute simulate — SIMULATION"), "{out}");
    let said = format!(
        "page:      {} (the same SIMULATION as HTML)",
        page.display()
    );
    assert!(out.contains(&said), "{out}");
    assert!(out.trim_end().ends_with("differ."), "{out}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<svg") && html.contains("SIMULATION"));
    for name in [
        "openai/gpt-4o-mini",
        "gemini/gemini-2.5-flash-lite",
        "anthropic/claude-haiku-4-5",
    ] {
        assert!(html.contains(name), "no {name} in the page");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_shows_what_the_provider_last_reported() {
    let (s, server) = openai_scene("rpm: 1000").await;
    let ok = ResponseTemplate::new(200)
        .set_body_raw(fixture("openai/ok.json"), "application/json")
        .insert_header("x-ratelimit-limit-requests", "5000")
        .insert_header("x-ratelimit-remaining-requests", "4321")
        .insert_header("x-ratelimit-reset-requests", "12ms")
        .insert_header("x-ratelimit-limit-tokens", "800000")
        .insert_header("x-ratelimit-remaining-tokens", "765432")
        .insert_header("x-ratelimit-reset-tokens", "2s");
    Mock::given(method("POST"))
        .respond_with(ok)
        .expect(1)
        .mount(&server)
        .await;
    let mut chat = s.llmroute(&["oa"]);
    chat.args(["chat", "--no-stream", "-p"]).arg(s.prompt("Hi"));
    run_async(chat, 0).await;
    let v = quota_json(&s).await;
    let r = &v["deployments"][0]["provider_reported"];
    assert_eq!(
        (
            r["requests_remaining"].as_u64(),
            r["tokens_remaining"].as_u64()
        ),
        (Some(4321), Some(765_432))
    );
    let table = quota_table(&s).await;
    assert!(table.contains("4321 req, 765432 tok left"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_shows_input_and_output_tokens_against_itpm_and_otpm() {
    let server = MockServer::start().await;
    let limits = "rpm: 50, itpm: 30000, otpm: 8000";
    let s = scene(&[(
        "an",
        "anthropic",
        server.uri(),
        "claude-test",
        3.0,
        15.0,
        limits,
    )]);
    let ok = ResponseTemplate::new(200)
        .set_body_raw(fixture("anthropic/ok.json"), "application/json")
        .insert_header("anthropic-ratelimit-input-tokens-remaining", "29900")
        .insert_header(
            "anthropic-ratelimit-input-tokens-reset",
            "2099-01-01T00:00:00Z",
        )
        .insert_header("anthropic-ratelimit-output-tokens-remaining", "7900")
        .insert_header(
            "anthropic-ratelimit-output-tokens-reset",
            "2099-01-01T00:00:00Z",
        );
    Mock::given(method("POST"))
        .respond_with(ok)
        .expect(1)
        .mount(&server)
        .await;
    let mut chat = s.llmroute(&["an"]);
    chat.args(["chat", "--no-stream", "-p"]).arg(s.prompt("Hi"));
    run_async(chat, 0).await;
    // The provider reports more left than the ledger believes (its 209 uncached input
    // tokens; the 1,800 cache reads count against no limit): nothing is filled in.
    let v = quota_json(&s).await;
    let d = &v["deployments"][0];
    let (input, output) = (d["itpm"]["used"].as_u64(), d["otpm"]["used"].as_u64());
    assert_eq!(
        output,
        Some(393),
        "the completion settles against otpm: {d}"
    );
    assert_eq!(d["otpm"]["limit"].as_u64(), Some(8000));
    assert_eq!(d["itpm"]["limit"].as_u64(), Some(30_000));
    let input = input.expect("itpm is configured, so it is shown");
    assert_eq!(d["tpm"]["used"].as_u64(), Some(input + 393));
    let r = &d["provider_reported"];
    assert_eq!(
        (
            r["input_tokens_remaining"].as_u64(),
            r["output_tokens_remaining"].as_u64()
        ),
        (Some(29_900), Some(7_900))
    );
    let table = quota_table(&s).await;
    let want = [
        "itpm".to_string(),
        "otpm".into(),
        format!("{input}/30000"),
        "393/8000".into(),
        "29900 in tok, 7900 out tok".into(),
    ];
    for w in want {
        assert!(table.contains(&w), "no {w:?} in:\n{table}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_without_itpm_or_otpm_shows_no_such_columns() {
    let (s, _server) = openai_scene("rpm: 100, tpm: 1000").await;
    let v = quota_json(&s).await;
    let d = &v["deployments"][0];
    assert_eq!((d.get("itpm"), d.get("otpm")), (None, None), "{d}");
    let table = quota_table(&s).await;
    assert!(
        !table.contains("itpm") && !table.contains("otpm"),
        "{table}"
    );
}

/// Seconds from now to the next midnight in Tokyo (UTC+9 all year: 15:00 UTC).
fn to_tokyo_midnight() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    (86_400 - (now + 9 * 3600) % 86_400) % 86_400
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_shows_per_day_limits_and_a_full_day_refuses_with_the_reset() {
    let limits = "rpm: 100, rpd: 1, tpd: 100000, day_resets: Asia/Tokyo";
    let (s, server) = openai_scene(limits).await;
    let ok = ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(ok)
        .expect(1)
        .mount(&server)
        .await;
    let mut chat = s.llmroute(&["oa"]);
    chat.args(["chat", "--no-stream", "-p"]).arg(s.prompt("Hi"));
    run_async(chat, 0).await;
    let v = quota_json(&s).await;
    let d = &v["deployments"][0];
    assert_eq!(
        (d["rpd"]["used"].as_u64(), d["rpd"]["limit"].as_u64()),
        (Some(1), Some(1))
    );
    // The day counts the tokens the minute window keeps: for an OpenAI-compatible
    // deployment, the reservation (max_tokens is counted at arrival) when it exceeds the use.
    let kept = d["tpm"]["used"].as_u64();
    assert!(kept >= Some(1163), "{d}");
    assert_eq!(
        (d["tpd"]["used"].as_u64(), d["tpd"]["limit"].as_u64()),
        (kept, Some(100_000)),
        "{d}"
    );
    let resets = d["day_resets_in_secs"].as_f64().unwrap() as u64;
    assert!(resets.abs_diff(to_tokyo_midnight()) <= 2, "{d}");
    let table = quota_table(&s).await;
    let tpd = format!("{}/100000", kept.unwrap());
    for want in ["rpd", "tpd", "day resets", "1/1", &tpd] {
        assert!(table.contains(want), "no {want:?} in:\n{table}");
    }
    // The day's one request is used: the next chat is refused at once, with the reset.
    let mut chat = s.llmroute(&["oa"]);
    chat.args(["chat", "--no-stream", "--timeout", "2", "-p"])
        .arg(s.prompt("Hi"));
    let (_, stderr) = run_async(chat, 3).await;
    assert!(stderr.contains("rpd full until it resets in"), "{stderr}");
}
