//! `llmroute chat` against mock upstreams: output, `--json`, stdin, `-v`, and limits shared by
//! separate processes through the embedded store.

use serde_json::Value;
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

const OPENAI_PATH: &str = "/v1/chat/completions";

fn sse(path: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(fixture(path), "text/event-stream")
}

fn json(path: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(fixture(path), "application/json")
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_streams_the_completion_to_stdout() {
    let (s, server) = openai_scene("rpm: 100").await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(sse("openai/stream.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p"]).arg(s.prompt("Say hello"));
    let (stdout, stderr) = run_async(cmd, 0).await;
    assert_eq!(stdout, "Hello!\n");
    assert_eq!(stderr, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_no_stream_prints_the_whole_answer() {
    let (s, server) = openai_scene("rpm: 100").await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(json("openai/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--no-stream", "-p"])
        .arg(s.prompt("Say hello"));
    assert_eq!(
        run_async(cmd, 0).await.0,
        "Hello! How can I help you today?\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_json_has_the_documented_fields() {
    let (s, server) = openai_scene("rpm: 100").await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(json("openai/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--json", "-p"])
        .arg(s.prompt("Say hello"));
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    assert_eq!(v["provider"], "oa");
    assert_eq!(v["model"], "gpt-test");
    assert_eq!(v["content"], "Hello! How can I help you today?");
    assert_eq!(v["usage"]["prompt_tokens"], 1117);
    assert_eq!(v["usage"]["completion_tokens"], 46);
    assert_eq!(v["usage"]["total_tokens"], 1163);
    assert!((v["cost_usd"].as_f64().unwrap() - (1117.0 * 2.0 + 46.0 * 8.0) / 1e6).abs() < 1e-12);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(v["attempts"][0]["outcome"], "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_reads_the_prompt_from_stdin_and_sends_the_system_message() {
    let (s, server) = openai_scene("rpm: 100").await;
    let expected = serde_json::json!({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?\n"},
    ]});
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_partial_json(expected))
        .respond_with(json("openai/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--no-stream", "--system", "Be brief.", "-p", "-"])
        .write_stdin("What is 2+2?\n");
    run_async(cmd, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn verbose_reports_candidates_failover_and_the_choice_on_stderr() {
    let (cheap, dear) = (MockServer::start().await, MockServer::start().await);
    let s = scene(&[
        (
            "cheap",
            "openai",
            format!("{}/v1", cheap.uri()),
            "small",
            0.1,
            0.2,
            "rpm: 100",
        ),
        (
            "dear",
            "openai",
            format!("{}/v1", dear.uri()),
            "large",
            5.0,
            20.0,
            "rpm: 100",
        ),
    ]);
    let limited = ResponseTemplate::new(429)
        .set_body_raw(fixture("openai/rate_limit_429.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(limited.insert_header("retry-after", "20"))
        .expect(1)
        .mount(&cheap)
        .await;
    Mock::given(method("POST"))
        .respond_with(json("openai/ok.json"))
        .expect(1)
        .mount(&dear)
        .await;
    let mut cmd = s.llmroute(&["cheap", "dear"]);
    cmd.args(["chat", "--no-stream", "-v", "-p"])
        .arg(s.prompt("Hi"));
    let (stdout, stderr) = run_async(cmd, 0).await;
    assert_eq!(stdout, "Hello! How can I help you today?\n");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines[0].contains("candidates, cheapest first"), "{stderr}");
    assert!(
        lines[1].contains("cheap/small") && lines[2].contains("dear/large"),
        "{stderr}"
    );
    assert!(
        stderr.contains("attempt 1: cheap/small rate_limited (HTTP 429)"),
        "{stderr}"
    );
    assert!(stderr.contains("cooling it down 20.0s"), "{stderr}");
    assert!(
        stderr.contains("attempt 2: dear/large answered"),
        "{stderr}"
    );
    assert!(!stderr.contains("S3CRET"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn eight_parallel_processes_share_the_cheap_deployments_limit() {
    let (cheap, dear) = (MockServer::start().await, MockServer::start().await);
    let s = scene(&[
        (
            "cheap",
            "openai",
            format!("{}/v1", cheap.uri()),
            "small",
            0.1,
            0.2,
            "rpm: 5",
        ),
        (
            "dear",
            "openai",
            format!("{}/v1", dear.uri()),
            "large",
            5.0,
            20.0,
            "rpm: 1000",
        ),
    ]);
    Mock::given(method("POST"))
        .respond_with(json("openai/ok.json"))
        .expect(5)
        .mount(&cheap)
        .await;
    Mock::given(method("POST"))
        .respond_with(json("openai/ok.json"))
        .expect(3)
        .mount(&dear)
        .await;
    let prompt = s.prompt("Hi");
    let mut children = Vec::new();
    for _ in 0..8 {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin!("llmroute"));
        cmd.arg("--config")
            .arg(&s.config)
            .env("LLMROUTE_STATE_DIR", s.dir.path().join("state"));
        cmd.env("CHEAP_KEY", "k1")
            .env("DEAR_KEY", "k2")
            .env_remove("REDIS_URL");
        cmd.args(["chat", "--json", "-p"]).arg(&prompt);
        children.push(
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut providers: Vec<String> = Vec::new();
    for o in &outputs {
        assert!(o.status.success(), "stderr: {}", text(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        providers.push(v["provider"].as_str().unwrap().to_owned());
    }
    providers.sort();
    assert_eq!(
        providers,
        ["cheap"; 5]
            .into_iter()
            .chain(["dear"; 3])
            .collect::<Vec<_>>()
    );
}
