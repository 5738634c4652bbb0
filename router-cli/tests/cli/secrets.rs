//! Planted API keys and Redis passwords never show, whatever is logged: `RUST_LOG=trace` (every
//! crate, HTTP client included), `-vv`, text or JSON lines.

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// The logging setups each test runs under: (flags before the command, RUST_LOG).
const LOGGING: [(&[&str], Option<&str>); 4] = [
    (&["-vv"], None),
    (&["-vvv"], Some("trace")),
    (&["--log-format", "json"], Some("trace")),
    (&["-v", "--log-format", "json"], Some("debug")),
];

#[track_caller]
fn assert_no_secret(secret: &str, stdout: &str, stderr: &str) {
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(!line.contains(secret), "{secret} leaked: {line}");
    }
}

/// One upstream of wire format `api` that answers `status` with fixture `body`.
async fn upstream(api: &str, status: u16, body: &str) -> (MockServer, String) {
    let server = MockServer::start().await;
    let kind = if body.ends_with(".sse") {
        "text/event-stream"
    } else {
        "application/json"
    };
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status).set_body_raw(fixture(body), kind))
        .mount(&server)
        .await;
    let base = match api {
        "anthropic" => server.uri(),
        "gemini" => format!("{}/v1beta", server.uri()),
        _ => format!("{}/v1", server.uri()),
    };
    (server, base)
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_never_logs_a_key_of_any_wire_format_at_trace() {
    for api in ["openai", "anthropic", "gemini"] {
        for (stream, body) in [(false, "ok.json"), (true, "stream.sse")] {
            let (_server, base) = upstream(api, 200, &format!("{api}/{body}")).await;
            let s = scene(&[("up", api, base, "m-test", 1.0, 2.0, "rpm: 100")]);
            for (flags, rust_log) in LOGGING {
                let mut cmd = s.llmroute(&["up"]);
                if let Some(filter) = rust_log {
                    cmd.env("RUST_LOG", filter);
                }
                cmd.args(flags).arg("chat").arg("-p").arg(s.prompt("Hi"));
                if !stream {
                    cmd.arg("--no-stream");
                }
                let (stdout, stderr) = run_async(cmd, 0).await;
                assert!(!stdout.is_empty(), "{api} answered nothing");
                if rust_log == Some("trace") {
                    assert!(stderr.lines().count() > 3, "trace logged little: {stderr}");
                }
                assert_no_secret("S3CRET", &stdout, &stderr);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_provider_never_logs_its_key_at_trace() {
    let (_cheap, cheap_base) = upstream("openai", 429, "openai/rate_limit_429.json").await;
    let (_dear, dear_base) = upstream("anthropic", 401, "anthropic/auth_401.json").await;
    let s = scene(&[
        ("cheap", "openai", cheap_base, "small", 0.1, 0.2, "rpm: 100"),
        (
            "dear",
            "anthropic",
            dear_base,
            "large",
            5.0,
            20.0,
            "rpm: 100",
        ),
    ]);
    for (flags, rust_log) in LOGGING {
        let mut cmd = s.llmroute(&["cheap", "dear"]);
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        cmd.args(flags).args(["chat", "-p"]).arg(s.prompt("Hi"));
        let (stdout, stderr) = run_async(cmd, 4).await;
        assert_no_secret("S3CRET", &stdout, &stderr);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_redis_never_logs_its_password_at_trace() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://admin:planted-pw-42@{}/0",
        closed.local_addr().unwrap()
    );
    drop(closed);
    for (flags, rust_log) in LOGGING {
        let mut cmd = s.llmroute(&["oa"]);
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        cmd.args(flags).args(["--state", &url, "quota"]);
        let (stdout, stderr) = run_async(cmd, 5).await;
        assert_no_secret("planted-pw-42", &stdout, &stderr);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_echoing_its_key_cut_short_shows_no_piece_of_it() {
    // The provider echoes all but the key's last three characters, then `...`.
    let key = "sk-planted-up-S3CRET";
    let body = serde_json::json!({"error": {
        "message": format!("Incorrect API key provided: {}...", &key[..key.len() - 3]),
        "type": "invalid_request_error",
    }});
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_json(body))
        .mount(&server)
        .await;
    let base = format!("{}/v1", server.uri());
    let s = scene(&[("up", "openai", base, "m-test", 1.0, 2.0, "rpm: 100")]);
    for (flags, rust_log) in LOGGING {
        let mut cmd = s.llmroute(&["up"]);
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        cmd.args(flags)
            .args(["chat", "--json", "-p"])
            .arg(s.prompt("Hi"));
        let (stdout, stderr) = run_async(cmd, 4).await;
        assert!(
            stderr.contains("Incorrect API key provided: ***"),
            "{stderr}"
        );
        for piece in key.as_bytes().windows(router_sdk::MASKED_RUN) {
            let piece = std::str::from_utf8(piece).unwrap();
            assert_no_secret(piece, &stdout, &stderr);
        }
    }
}
