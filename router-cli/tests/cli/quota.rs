//! `llmroute quota` reports what the chats before it used, from the embedded store and from Redis.

use serde_json::Value;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

async fn three_chats_then_quota(state: Option<&str>) {
    let server = MockServer::start().await;
    let s = scene(&[(
        "oa",
        "openai",
        format!("{}/v1", server.uri()),
        "gpt-test",
        2.0,
        8.0,
        "rpm: 100, tpm: 100000, concurrency: 4",
    )]);
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
        cmd.args(["chat", "--no-stream", "-p"]).arg(s.prompt("Hi"));
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
    cmd.args(["quota", "--tenant", "acme"]);
    let table = run_async(cmd, 0).await.0;
    assert!(
        table.contains("oa/gpt-test") && table.contains("3/100") && table.contains("3489/100000"),
        "{table}"
    );
    assert!(table.contains("tenant: acme"), "{table}");
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
