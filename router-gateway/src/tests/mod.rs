//! The gateway over a real socket, against wiremock upstreams: whole and streamed answers,
//! tools, keys, refusals with `Retry-After`, the body limit.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use router_core::config::Registry;
use router_sdk::StaticKeys;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue};
use futures_util::stream::StreamExt;
use router_sdk::Router;

use super::*;
use crate::cut::Streams;
use crate::routes::request_id_of;

/// A key of tenant `acme` (tier `pro`), one of `ghost` (no tier), one limited to `small`.
const ACME: &str = "llmr-acme-test-key";
const GHOST: &str = "llmr-ghost-test-key";
const NARROW: &str = "llmr-narrow-test-key";
/// A second provider's key: 40 characters, as a provider that echoes keys would be given.
const AN_SECRET: &str = "sk-ant-api03-Zq9XwV2pLm7RtY4uK8sN1bC6dF3";

struct Running {
    base: String,
    upstream: MockServer,
    router: Router,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
    cut: Cut,
}

impl Running {
    /// `GET path` with `key`, read as JSON.
    async fn get_json(&self, key: &str, path: &str) -> Value {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(key);
        response.send().await.unwrap().json().await.unwrap()
    }

    /// `ACME`'s request of `body` that may take 1 s at most.
    async fn post_with_deadline_1s(&self, body: &Value) -> reqwest::Response {
        let url = format!("{}/v1/chat/completions", self.base);
        let req = self
            .http
            .post(url)
            .bearer_auth(ACME)
            .header("x-llmroute-timeout", "1");
        req.json(body).send().await.unwrap()
    }

    async fn post(&self, key: Option<&str>, body: &Value) -> reqwest::Response {
        let mut req = self.http.post(format!("{}/v1/chat/completions", self.base));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        req.json(body).send().await.unwrap()
    }
}

/// A gateway on a free port over one OpenAI upstream (`small`, alias `chat`), tiers `pro`
/// (with `tier_extra`) and the three keys, configured with `extra` YAML.
async fn start(tier_extra: &str, extra: &str) -> Running {
    let upstream = MockServer::start().await;
    let base = upstream.uri();
    start_over(upstream, &base, tier_extra, extra).await
}

/// Like [`start`], with the provider at `provider_base` instead of the mock server.
async fn start_over(
    upstream: MockServer,
    provider_base: &str,
    tier_extra: &str,
    extra: &str,
) -> Running {
    let yaml = format!(
        "defaults: {{ model: chat }}\n\
         providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }} }}\n\
         tenants:\n  tiers:\n    pro: {{ {tier_extra} }}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n    - {{ sha256: {}, tenant: ghost }}\n    \
         - {{ sha256: {}, tenant: acme, models: [small] }}\n{extra}",
        provider_base,
        hash_key(ACME),
        hash_key(GHOST),
        hash_key(NARROW),
    );
    start_yaml(upstream, &yaml).await
}

/// A gateway on a free port configured by `yaml`, whose providers' keys are in `OA_KEY`
/// (`sk-upstream-S3CRET`) and `AN_KEY` ([`AN_SECRET`]).
async fn start_yaml(upstream: MockServer, yaml: &str) -> Running {
    let registry = Registry::from_yaml_str(yaml, "gateway.yaml").unwrap();
    let keys = StaticKeys::new()
        .with("OA_KEY", "sk-upstream-S3CRET")
        .with("AN_KEY", AN_SECRET);
    let router = Router::builder(registry)
        .keys(Arc::new(keys))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let apps = apps(router.clone(), Auth::Keys);
    let app = apps.api.merge(apps.metrics);
    let done = tokio::spawn(serve(listener, app, async {
        let _ = stopped.await;
    }));
    Running {
        base,
        upstream,
        router,
        http: reqwest::Client::new(),
        stop: Some(stop),
        done,
        cut: apps.cut,
    }
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../router-sdk/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap()
}

async fn upstream_answers(r: &Running, fixture_name: &str, content_type: &str) {
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(fixture(fixture_name), content_type))
        .mount(&r.upstream)
        .await;
}

fn hello() -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "Hello"}]})
}

#[tokio::test]
async fn a_whole_answer_in_openai_shape_with_the_router_headers() {
    let r = start("", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let response = r.post(Some(ACME), &hello()).await;
    assert_eq!(response.status(), 200);
    let h = response.headers().clone();
    assert_eq!(h["x-llmroute-provider"], "oa");
    assert_eq!(h["x-llmroute-model"], "small");
    assert!(h.contains_key("x-request-id") && h.contains_key("x-llmroute-cost-usd"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["id"], "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello! How can I help you today?"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["usage"]["prompt_tokens_details"]["cached_tokens"],
        1024
    );
    assert_eq!(body["usage"]["total_tokens"], 1163);
}

#[tokio::test]
async fn a_streamed_answer_ends_with_usage_and_done() {
    let r = start("", "").await;
    upstream_answers(&r, "openai/stream.sse", "text/event-stream").await;
    let mut body = hello();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = r.post(Some(ACME), &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let said: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(said, "Hello!");
    // One completion, one `id` on every chunk (the upstream's own, `chatcmpl-123`, comes only
    // with the end).
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-") && id != "chatcmpl-123", "{id}");
    for chunk in &chunks {
        assert_eq!(chunk["id"], id, "{chunk}");
    }
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn configured_headers_are_passed_on_and_others_are_not() {
    let r = start("", "  forward_headers: [X-Bench-Id, traceparent]\n").await;
    Mock::given(method("POST"))
        .and(wiremock::matchers::header("x-bench-id", "b-7"))
        .and(wiremock::matchers::header("traceparent", "00-abc-def-01"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json"),
        )
        .expect(1)
        .mount(&r.upstream)
        .await;
    let response = r
        .http
        .post(format!("{}/v1/chat/completions", r.base))
        .bearer_auth(ACME)
        .header("x-bench-id", "b-7")
        .header("traceparent", "00-abc-def-01")
        .header("x-private", "not for the provider")
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen = &r.upstream.received_requests().await.unwrap()[0];
    assert!(seen.headers.get("x-private").is_none());
    // The caller's key never goes upstream: the provider gets the configured key.
    assert_ne!(
        seen.headers["authorization"],
        format!("Bearer {ACME}").as_str()
    );
}

#[tokio::test]
async fn tools_go_upstream_and_tool_calls_come_back() {
    let r = start("", "").await;
    Mock::given(method("POST"))
        .and(body_partial_json(json!({
            "tools": [{"type": "function", "function": {"name": "get_current_weather"}}],
            "tool_choice": "auto",
        })))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(fixture("openai/tool_calls.json"), "application/json"),
        )
        .expect(1)
        .mount(&r.upstream)
        .await;
    let body = json!({
        "model": "chat",
        "messages": [{"role": "user", "content": "Weather in Boston?"}],
        "tools": [{"type": "function", "function": {"name": "get_current_weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}],
        "tool_choice": "auto",
    });
    let response = r.post(Some(ACME), &body).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(
        message["tool_calls"][0]["function"]["name"],
        "get_current_weather"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn keys_decide_who_may_call_what() {
    let r = start("", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let cases: [(Option<&str>, u16, &str); 3] = [
        (None, 401, "invalid_api_key"),
        (Some("llmr-not-a-key"), 401, "invalid_api_key"),
        (Some(GHOST), 403, "unknown_tenant"),
    ];
    for (key, status, code) in cases {
        let response = r.post(key, &hello()).await;
        assert_eq!(response.status(), status, "{key:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code);
        // The presented key is never echoed.
        assert!(!body.to_string().contains("llmr-"), "{body}");
    }
    // The narrow key may use `small` only.
    let response = r.post(Some(NARROW), &hello()).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    let mut small = hello();
    small["model"] = json!("small");
    assert_eq!(r.post(Some(NARROW), &small).await.status(), 200);
    let models = r.get_json(NARROW, "/v1/models").await;
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    assert_eq!(models["data"][0]["id"], "small");
    // One model, as OpenAI's `models.retrieve` asks for it: only one the key may use.
    let one = r.get_json(NARROW, "/v1/models/small").await;
    assert_eq!(
        one,
        json!({"id": "small", "object": "model", "created": 0, "owned_by": "llmroute"})
    );
    for (key, name) in [(NARROW, "chat"), (ACME, "nope"), (ACME, "small/extra")] {
        let url = format!("{}/v1/models/{name}", r.base);
        let response = r.http.get(url).bearer_auth(key).send().await.unwrap();
        assert_eq!(response.status(), 404, "{name}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "model_not_found", "{name}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{name}`"))
        );
    }
    assert_eq!(r.get_json(ACME, "/v1/models/chat").await["id"], "chat");
    // The caller's quota: its tier, use and spend, and every deployment.
    let quota = r.get_json(ACME, "/v1/quota").await;
    assert_eq!(quota["tenant"]["name"], "acme");
    assert_eq!(quota["tenant"]["tier"], "pro");
    assert_eq!(quota["tenant"]["rpm"]["used"], 1);
    assert_eq!(quota["deployments"][0]["model"], "small");
    let anonymous = r
        .http
        .get(format!("{}/v1/quota", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test]
async fn a_full_tier_is_429_with_retry_after() {
    let r = start("rpm: 1, tpm: 100000", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let first = r.post(Some(ACME), &hello()).await;
    assert_eq!(first.status(), 200);
    // The tier's limits and what is left of them, in OpenAI's header names.
    let h = first.headers();
    assert_eq!(h["x-ratelimit-limit-requests"], "1");
    assert_eq!(h["x-ratelimit-remaining-requests"], "0");
    assert_eq!(h["x-ratelimit-limit-tokens"], "100000");
    let left: u64 = h["x-ratelimit-remaining-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(left < 100_000 - 1117, "{left}");
    assert_eq!(h["x-ratelimit-reset-requests"], "60s");
    let response = r.post_with_deadline_1s(&hello()).await;
    assert_eq!(response.status(), 429);
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=61).contains(&retry), "{retry}");
    assert!(response.headers().contains_key("retry-after-ms"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant rpm"),
        "{body}"
    );
}

#[tokio::test]
async fn an_exhausted_budget_is_429_insufficient_quota() {
    // Each request is estimated well under the $0.003 a day; the first answer's real cost
    // ($0.0026) leaves too little for the second.
    let r = start("budget: { daily_usd: 0.003 }", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let mut short = hello();
    short["max_tokens"] = json!(50);
    assert_eq!(r.post(Some(ACME), &short).await.status(), 200);
    let response = r.post(Some(ACME), &short).await;
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_quota");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant `acme`"),
        "{body}"
    );
}

#[tokio::test]
async fn bad_bodies_are_400_naming_the_field_and_large_ones_413() {
    let r = start("", "  body_limit_bytes: 2000\n").await;
    let cases = [
        (json!({"model": "chat"}), "missing field `messages`"),
        (
            json!({"model": "chat", "messages": [{"role": "robot", "content": "x"}]}),
            "`messages[0].role`",
        ),
        (
            json!({"model": "chat", "messages": [{"role": "user", "content": "x"}], "n": 2}),
            "`n`",
        ),
    ];
    for (body, words) in cases {
        let response = r.post(Some(ACME), &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{message}");
    }
    let mut big = hello();
    big["messages"][0]["content"] = json!("x".repeat(5000));
    let response = r.post(Some(ACME), &big).await;
    assert_eq!(response.status(), 413);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("x-request-id"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "body_too_large");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2000 bytes") && message.contains("`gateway.body_limit_bytes`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_caller_without_a_key_is_refused_before_its_body_is_read() {
    let r = start("", "").await;
    // A body that starts and never ends: read first, it would hold the request forever.
    let first = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(
        b"{\"model\": \"chat\", ",
    ))]);
    let endless = first.chain(futures_util::stream::pending());
    let request = r
        .http
        .post(format!("{}/v1/chat/completions", r.base))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(endless))
        .send();
    let response = tokio::time::timeout(std::time::Duration::from_secs(30), request)
        .await
        .expect("answered without the body")
        .unwrap();
    assert_eq!(response.status(), 401);
}

#[tokio::test]
async fn a_connection_that_never_sends_its_whole_headers_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let r = start("", "").await;
    let addr = r.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // Virtual time from here: the gateway's header timer, not the test, decides.
    tokio::time::pause();
    let mut answer = Vec::new();
    let read = socket.read_to_end(&mut answer);
    let closed = tokio::time::timeout(HEADER_READ_TIMEOUT * 4, read).await;
    assert!(
        closed.is_ok(),
        "still open after {:?}",
        HEADER_READ_TIMEOUT * 4
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
}

#[tokio::test]
async fn unknown_paths_and_wrong_methods_are_openai_errors() {
    let r = start("", "").await;
    let send = |method: reqwest::Method, path: &str| {
        let request = r.http.request(method, format!("{}{path}", r.base));
        request.bearer_auth(ACME).send()
    };
    // (method, path, status, code, words the message has, the `Allow` header)
    let cases = [
        (
            reqwest::Method::GET,
            "/v1/nope",
            404_u16,
            "unknown_path",
            vec!["`GET /v1/nope`", "POST /v1/chat/completions"],
            None,
        ),
        // A client whose base URL lacks `/v1`.
        (
            reqwest::Method::POST,
            "/chat/completions",
            404,
            "unknown_path",
            vec!["`POST /chat/completions`", "base URL ends in `/v1`"],
            None,
        ),
        (
            reqwest::Method::GET,
            "/v1/chat/completions",
            405,
            "method_not_allowed",
            vec!["`/v1/chat/completions` does not take GET", "POST"],
            Some("POST"),
        ),
        (
            reqwest::Method::POST,
            "/v1/models",
            405,
            "method_not_allowed",
            vec!["`/v1/models` does not take POST", "as GET"],
            Some("GET"),
        ),
        (
            reqwest::Method::DELETE,
            "/healthz",
            405,
            "method_not_allowed",
            vec!["as GET"],
            Some("GET"),
        ),
        (
            reqwest::Method::POST,
            "/metrics",
            405,
            "method_not_allowed",
            vec!["`/metrics` does not take POST", "as GET"],
            Some("GET"),
        ),
    ];
    for (method, path, status, code, words, allow) in cases {
        let response = send(method.clone(), path).await.unwrap();
        assert_eq!(response.status(), status, "{method} {path}");
        let h = response.headers().clone();
        assert_eq!(h["content-type"], "application/json", "{method} {path}");
        assert!(h.contains_key("x-request-id"), "{method} {path}");
        if let Some(allow) = allow {
            let allowed = h["allow"].to_str().unwrap();
            assert!(allowed.contains(allow), "{method} {path}: {allowed}");
        }
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{method} {path}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let message = body["error"]["message"].as_str().unwrap();
        for word in words {
            assert!(message.contains(word), "{method} {path}: {message}");
        }
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_read_in_any_case() {
    let r = start("", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let send = |authorization: String| {
        let request = r
            .http
            .post(url.as_str())
            .header("authorization", authorization);
        request.json(&hello()).send()
    };
    for scheme in ["Bearer ", "bearer ", "BEARER ", "bEaReR   "] {
        let response = send(format!("{scheme}{ACME}")).await.unwrap();
        assert_eq!(response.status(), 200, "{scheme:?}");
    }
    // Another scheme, or a bare key, is refused without echoing what was sent.
    for authorization in [format!("Basic {ACME}"), ACME.to_owned()] {
        let response = send(authorization).await.unwrap();
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("`Bearer` scheme"), "{message}");
        assert!(!body.to_string().contains("llmr-"), "{body}");
    }
    let response = send("bearer ".to_owned()).await.unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("no API key"), "{message}");
}

#[tokio::test]
async fn nulls_are_fields_left_out() {
    let r = start("", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let mut body = hello();
    for field in [
        "tools",
        "tool_choice",
        "stream",
        "stream_options",
        "metadata",
        "logprobs",
    ] {
        body[field] = Value::Null;
    }
    body["messages"][0]["tool_calls"] = Value::Null;
    let response = r.post(Some(ACME), &body).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    // The passed-on `null` is left out upstream too.
    let seen = &r.upstream.received_requests().await.unwrap()[0];
    let sent: Value = serde_json::from_slice(&seen.body).unwrap();
    assert!(sent.get("logprobs").is_none(), "{sent}");
}

#[tokio::test]
async fn refusals_after_the_key_count_under_its_tenant() {
    let r = start("", "  body_limit_bytes: 2000\n").await;
    let bad = json!({"model": "chat"});
    assert_eq!(r.post(Some(ACME), &bad).await.status(), 400);
    // On a connection of its own: the gateway may close it, the body being left unread.
    let mut big = hello();
    big["messages"][0]["content"] = json!("x".repeat(5000));
    let too_large = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", r.base))
        .bearer_auth(ACME)
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(too_large.status(), 413);
    // The narrow key may not use `chat`.
    assert_eq!(r.post(Some(NARROW), &hello()).await.status(), 404);
    // No key: no tenant.
    assert_eq!(r.post(None, &bad).await.status(), 401);
    let text = r
        .http
        .get(format!("{}/metrics", r.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"llmroute_requests_total{tenant="acme",provider="-",model="-",outcome="invalid_request"} 1"#,
        r#"llmroute_requests_total{tenant="acme",provider="-",model="-",outcome="body_too_large"} 1"#,
        r#"llmroute_requests_total{tenant="acme",provider="-",model="-",outcome="model_not_found"} 1"#,
        r#"llmroute_requests_total{tenant="-",provider="-",model="-",outcome="invalid_api_key"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(
        !text.contains(r#"tenant="-",provider="-",model="-",outcome="invalid_request""#),
        "{text}"
    );
}

#[tokio::test]
async fn shutdown_lets_the_server_end() {
    let mut r = start("", "").await;
    let health = r
        .http
        .get(format!("{}/healthz", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = r
        .http
        .get(format!("{}/readyz", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    r.stop.take().unwrap().send(()).unwrap();
    r.done.await.unwrap().unwrap();
}

#[tokio::test]
async fn metrics_count_requests_tokens_cost_and_refusals() {
    let r = start("rpm: 1", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    assert_eq!(r.post(Some(ACME), &hello()).await.status(), 200);
    let refused = r.post_with_deadline_1s(&hello()).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(r.post(Some("llmr-nobody"), &hello()).await.status(), 401);
    let text = r
        .http
        .get(format!("{}/metrics", r.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"llmroute_requests_total{tenant="acme",provider="oa",model="small",outcome="ok"} 1"#,
        r#"llmroute_requests_total{tenant="acme",provider="-",model="-",outcome="rate_limit_exceeded"} 1"#,
        r#"llmroute_requests_total{tenant="-",provider="-",model="-",outcome="invalid_api_key"} 1"#,
        r#"llmroute_tokens_total{tenant="acme",provider="oa",model="small",kind="cached"} 1024"#,
        r#"llmroute_tokens_total{tenant="acme",provider="oa",model="small",kind="completion"} 46"#,
        r#"llmroute_upstream_attempts_total{deployment="oa/small",outcome="ok"} 1"#,
        r#"llmroute_deployment_in_flight{deployment="oa/small"} 0"#,
        "llmroute_admission_wait_seconds_count 1",
        "llmroute_router_added_seconds_count 1",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(text.contains("llmroute_cost_usd_total{"), "{text}");
    assert!(
        !text.contains(ACME) && !text.contains("Hello"),
        "no key, no prompt"
    );
}

/// An upstream that answers one streamed request by hand: it says when the request arrived,
/// sends the first SSE event, and the rest only when told; it says when the gateway hung up.
struct HeldUpstream {
    base: String,
    arrived: tokio::sync::mpsc::Receiver<()>,
    go: Option<tokio::sync::oneshot::Sender<()>>,
    hung_up: tokio::sync::mpsc::Receiver<()>,
}

async fn held_upstream() -> HeldUpstream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (arrived_tx, arrived) = tokio::sync::mpsc::channel(1);
    let (hung_tx, hung_up) = tokio::sync::mpsc::channel(1);
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The headers and the JSON body (the body ends the request's first read burst).
        while !String::from_utf8_lossy(&seen).contains("\"messages\"") {
            let n = socket.read(&mut buf).await.unwrap();
            seen.extend_from_slice(&buf[..n]);
        }
        arrived_tx.send(()).await.unwrap();
        let first = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n";
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(first.as_bytes()).await.unwrap();
        let rest = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo!\"},\"finish_reason\":\"stop\"}]}\n\n\
                    data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        tokio::select! {
            _ = go_rx => {
                socket.write_all(rest.as_bytes()).await.unwrap();
            }
            // The gateway hung up: reading gives the end of the stream.
            _ = socket.read(&mut buf) => {
                let _ = hung_tx.send(()).await;
            }
        }
    });
    HeldUpstream {
        base,
        arrived,
        go: Some(go),
        hung_up,
    }
}

fn streamed_hello() -> Value {
    let mut body = hello();
    body["stream"] = json!(true);
    body
}

/// What the ledger holds in flight over every deployment.
async fn in_flight(router: &Router) -> u64 {
    let all: Vec<_> = router.registry().deployment_ids().collect();
    let snaps = router.ledger().snapshot(&all).await.unwrap();
    snaps.iter().map(|s| s.usage.in_flight).sum()
}

#[tokio::test]
async fn shutdown_lets_a_stream_in_flight_finish() {
    let mut held = held_upstream().await;
    let mut r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let request = r
        .http
        .post(url)
        .bearer_auth(ACME)
        .json(&streamed_hello())
        .send();
    let client = tokio::spawn(async move { request.await.unwrap().text().await.unwrap() });
    held.arrived.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 1);
    // Stop accepting while the stream is open; it still completes.
    r.stop.take().unwrap().send(()).unwrap();
    held.go.take().unwrap().send(()).unwrap();
    let text = client.await.unwrap();
    assert!(
        text.contains("lo!") && text.trim_end().ends_with("data: [DONE]"),
        "{text}"
    );
    r.done.await.unwrap().unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_cut_ends_the_streams_and_answers_in_flight_and_settles_them() {
    // A stream in flight: its first chunk is out, the rest held upstream.
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let mut streaming = r
        .http
        .post(&url)
        .bearer_auth(ACME)
        .json(&streamed_hello())
        .send()
        .await
        .unwrap();
    let first = streaming.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Hel"));
    assert_eq!(in_flight(&r.router).await, 1);
    r.cut.now();
    // The stream ends with the error and no `[DONE]`; the upstream call is dropped.
    let mut rest = String::new();
    while let Some(chunk) = streaming.chunk().await.unwrap() {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(rest.contains("\"gateway_stopping\""), "{rest}");
    assert!(!rest.contains("[DONE]"), "{rest}");
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
    // A request after the cut is refused before it reserves anything.
    let refused = r.post(Some(ACME), &hello()).await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "gateway_stopping");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway.grace_secs")
    );
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_cut_drops_a_stream_no_one_polls_and_settles_it() {
    // A relay whose client stopped reading is not polled once the buffers are full: the cut
    // must end its stream all the same. Here no one polls it at all.
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let mut req = router_sdk::ChatRequest::new("Hi");
    req.model = Some("chat".into());
    let stream = r.router.chat_stream(req).await.unwrap();
    held.arrived.recv().await.unwrap();
    let slot = r.cut.streams.hold(stream);
    assert_eq!(in_flight(&r.router).await, 1);
    r.cut.now();
    assert!(slot.lock().unwrap().is_none());
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_client_gone_before_its_answer_is_counted_and_settled() {
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let request = r.http.post(url).bearer_auth(ACME).json(&hello()).send();
    let client = tokio::spawn(request);
    held.arrived.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 1);
    client.abort();
    // The handler is dropped with the connection, and the provider call with it.
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
    let metrics = r
        .http
        .get(format!("{}/metrics", r.base))
        .send()
        .await
        .unwrap();
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains("outcome=\"client_closed\"") && text.contains("tenant=\"acme\""),
        "{text}"
    );
}

#[tokio::test]
async fn a_stream_no_one_reads_is_dropped_past_its_deadline_and_settled() {
    // A client that stopped reading leaves its relay unpolled: past the request's deadline the
    // stream is dropped all the same, which hangs up on the provider and settles it.
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let mut req = router_sdk::ChatRequest::new("Hi");
    req.model = Some("chat".into());
    req.deadline = Some(std::time::Duration::from_secs(1));
    let stream = r.router.chat_stream(req).await.unwrap();
    held.arrived.recv().await.unwrap();
    let slot = r.cut.streams.hold(stream);
    let _expiry = Streams::expire_unread(&slot);
    assert_eq!(in_flight(&r.router).await, 1);
    held.hung_up.recv().await.unwrap();
    assert!(slot.lock().unwrap().is_none());
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_cut_refuses_a_whole_answer_in_flight_and_settles_it() {
    let r = start("", "").await;
    // The upstream answers after a minute: the request is in flight when the cut comes.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(fixture("openai/ok.json"), "application/json")
                .set_delay(std::time::Duration::from_secs(60)),
        )
        .mount(&r.upstream)
        .await;
    let url = format!("{}/v1/chat/completions", r.base);
    let request = r.http.post(url).bearer_auth(ACME).json(&hello()).send();
    let client = tokio::spawn(request);
    // Wait until the provider has the request (and the ledger its reservation).
    let arrived = async {
        while r
            .upstream
            .received_requests()
            .await
            .unwrap_or_default()
            .is_empty()
        {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), arrived)
        .await
        .expect("the provider never got the request");
    assert_eq!(in_flight(&r.router).await, 1);
    r.cut.now();
    let response = client.await.unwrap().unwrap();
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "gateway_stopping");
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_client_gone_mid_stream_cancels_the_upstream_call_and_settles() {
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let mut response = r
        .http
        .post(url)
        .bearer_auth(ACME)
        .json(&streamed_hello())
        .send()
        .await
        .unwrap();
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Hel"));
    assert_eq!(in_flight(&r.router).await, 1);
    drop(response);
    // The gateway drops the stream, which closes the upstream call and settles at once.
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn usage_shows_a_key_its_own_tenants_records_only_on_sqlite() {
    usage_shows_a_key_its_own_tenants_records_only(None).await;
}

#[tokio::test]
async fn usage_shows_a_key_its_own_tenants_records_only_on_postgres() {
    usage_shows_a_key_its_own_tenants_records_only(Some(llmroute_tests::TestPostgres::new())).await;
}

/// Records to SQLite, or to PostgreSQL when `pg` is given.
async fn usage_shows_a_key_its_own_tenants_records_only(pg: Option<llmroute_tests::TestPostgres>) {
    use router_core::config::{UsageSettings, UsageSink};
    let dir = tempfile::tempdir().unwrap();
    let mut settings = match &pg {
        None => UsageSettings::with_sink(UsageSink::Sqlite(Some(dir.path().join("u.sqlite")))),
        Some(pg) => {
            let mut s = UsageSettings::with_sink(UsageSink::Postgres(pg.url().to_owned()));
            s.schema = pg.schema().to_owned();
            s
        }
    };
    settings.spill = Some(dir.path().join("u.spill"));
    let env = router_sdk::store::Environment::fixed::<&str>(&[], None);
    let recorder = router_sdk::usage::open(&settings, &env).unwrap().unwrap();
    let upstream = MockServer::start().await;
    let yaml = format!(
        "defaults: {{ model: chat }}\n\
         providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }} }}\n\
         tenants:\n  default_tier: pro\n  tiers:\n    pro: {{ rpm: 100 }}\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n    - {{ sha256: {}, tenant: globex }}\n",
        upstream.uri(),
        hash_key(ACME),
        hash_key(GHOST),
    );
    let registry = Registry::from_yaml_str(&yaml, "gateway.yaml").unwrap();
    let keys = StaticKeys::new().with("OA_KEY", "sk-upstream-S3CRET");
    let router = Router::builder(registry)
        .keys(Arc::new(keys))
        .usage(recorder.clone())
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        app(router.clone(), Auth::Keys),
        std::future::pending(),
    ));
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json"),
        )
        .mount(&upstream)
        .await;
    let http = reqwest::Client::new();
    for key in [ACME, ACME, GHOST] {
        let sent = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&hello())
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 200);
    }
    recorder.flush().await;
    let get = |key: &'static str, query: &'static str| {
        let http = http.clone();
        let url = format!("{base}/v1/usage{query}");
        async move { http.get(url).bearer_auth(key).send().await.unwrap() }
    };

    let acme: Value = get(ACME, "?by=tenant,model").await.json().await.unwrap();
    assert_eq!(acme["tenant"], "acme");
    assert_eq!(acme["totals"]["requests"], 2);
    let rows = acme["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["key"], json!(["acme", "small"]));
    let globex: Value = get(GHOST, "").await.json().await.unwrap();
    assert_eq!(globex["totals"]["requests"], 1);

    let refused = get(ACME, "?tenant=globex").await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "other_tenant");
    let own: Value = get(ACME, "?tenant=acme&since=1h")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(own["totals"]["requests"], 2);
    let bad = get(ACME, "?by=week").await;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`by`: unknown grouping `week`")
    );
    assert_eq!(
        http.get(format!("{base}/v1/usage"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(
        metrics.contains("llmroute_usage_records_total{to=\"sink\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("llmroute_usage_sink_down 0"), "{metrics}");

    // The records name the key by a prefix of its hash, never the key.
    let stored = match &pg {
        None => rusqlite_free_read(&dir.path().join("u.sqlite")),
        Some(pg) => {
            let sql = format!("SELECT key_id FROM \"{}\".usage_records", pg.schema());
            let rows = pg.client().await.query(&sql, &[]).await.unwrap();
            let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            ids.join(" ")
        }
    };
    assert!(stored.contains(&hash_key(ACME)[..12]));
    assert!(!stored.contains(ACME) && !stored.contains("S3CRET"));
}

/// The SQLite file's bytes as text (records are stored as plain text columns).
fn rusqlite_free_read(path: &std::path::Path) -> String {
    let mut text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    let wal = path.with_extension("sqlite-wal");
    if let Ok(bytes) = std::fs::read(wal) {
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    text
}

#[test]
fn a_request_id_with_a_control_character_is_replaced_by_a_new_one() {
    let mut h = HeaderMap::new();
    h.insert("x-request-id", HeaderValue::from_static("abc\tdef"));
    let id = request_id_of(&h);
    assert_ne!(id, "abc\tdef");
    assert_eq!(id.len(), 16, "a new id: {id}");
    h.insert("x-request-id", HeaderValue::from_static("abc-def"));
    assert_eq!(request_id_of(&h), "abc-def");
}

mod hardening;
