//! Every failure: one line on stderr that says what to do, and its documented exit status.

use wiremock::matchers::method;
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

fn one_line(stderr: &str) -> &str {
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
    stderr.trim_end()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_prompt_file_exits_2_naming_it() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p", "no-such-prompt.txt"]);
    let line = run_async(cmd, 2).await.1;
    assert!(
        one_line(&line).contains("cannot read prompt file no-such-prompt.txt"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_yaml_exits_2_with_file_and_line() {
    let (s, _server) = openai_scene("rpm: 10").await;
    std::fs::write(
        &s.config,
        "providers:\n  - name: x\n    api: openai\n    bogus: 1\n",
    )
    .unwrap();
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert!(one_line(&line).contains("providers.yaml:4"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_model_exits_2_listing_the_known_ones() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-m", "gpt-9", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert_eq!(
        one_line(&line),
        "llmroute: unknown model `gpt-9`; known models and aliases: chat, gpt-test"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_key_set_exits_2_naming_the_variables() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&[]);
    cmd.args(["chat", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert_eq!(
        one_line(&line),
        "llmroute: no API key set for `chat`: set OA_KEY"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_unreachable_exits_5_naming_the_url_without_its_password() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://admin:planted-pw-42@{}/0",
        closed.local_addr().unwrap()
    );
    drop(closed);
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["--state", &url, "chat", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 5).await.1;
    let line = one_line(&line);
    assert!(line.contains("redis://admin:***@127.0.0.1:"), "{line}");
    assert!(!line.contains("planted-pw-42"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_capacity_before_the_deadline_exits_3_saying_when() {
    let (s, server) = openai_scene("rpm: 1").await;
    let ok = ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(ok)
        .expect(1)
        .mount(&server)
        .await;
    let mut first = s.llmroute(&["oa"]);
    first
        .args(["chat", "--no-stream", "-p"])
        .arg(s.prompt("Hi"));
    run_async(first, 0).await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--timeout", "2", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 3).await.1;
    let line = one_line(&line);
    assert!(
        line.contains("no capacity before the deadline; retry after"),
        "{line}"
    );
    assert!(line.contains("oa/gpt-test: rpm full"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_error_exits_4() {
    let (s, server) = openai_scene("rpm: 10").await;
    let bad = ResponseTemplate::new(400)
        .set_body_raw(fixture("openai/bad_request_400.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(bad)
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 4).await.1;
    assert!(
        one_line(&line).starts_with("llmroute: oa/gpt-test: invalid (HTTP 400)"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_or_reserved_header_exits_2_naming_it_and_never_its_value() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--header", "nonsense", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert!(
        one_line(&line).contains("--header \"nonsense\": write it as NAME=VALUE"),
        "{line}"
    );
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--header", "x-api-key=sk-elsewhere", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert!(one_line(&line).contains("`x-api-key`"), "{line}");
    assert!(!line.contains("sk-elsewhere"), "{line}");
}
