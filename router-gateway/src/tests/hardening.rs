//! What hostile or careless callers and providers send, over a real socket: bodies that never
//! finish, oversized declared lengths, bytes after the JSON, provider text that echoes a key,
//! restricted keys reading quotas, rate-limit headers, broken streams.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::ratelimit::HEADROOM_FRESH;

/// Sends `head` (request line and headers, without the blank line) and `body` on a new
/// connection, then reads until the gateway closes it; `None` if it is still open after
/// `within` of virtual time (the clock is paused once the bytes are out, so the gateway's own
/// timers decide).
async fn raw_exchange(r: &Running, head: &str, body: &[u8], within: Duration) -> Option<String> {
    let addr = r.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(format!("{head}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    socket.write_all(body).await.unwrap();
    tokio::time::pause();
    let mut answer = Vec::new();
    let read = socket.read_to_end(&mut answer);
    let closed = tokio::time::timeout(within, read).await.ok()?;
    closed.unwrap();
    Some(String::from_utf8_lossy(&answer).into_owned())
}

fn chat_head(content_length: usize) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ACME}\r\n\
         Content-Type: application/json\r\nContent-Length: {content_length}"
    )
}

#[tokio::test]
async fn a_body_that_never_finishes_gets_408_and_its_connection_closed() {
    let r = start("", "  body_timeout_secs: 5\n").await;
    let part = br#"{"model": "chat", "#;
    let answer = raw_exchange(&r, &chat_head(200), part, Duration::from_secs(60))
        .await
        .expect("the connection is closed once the body timeout passes");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains(r#""code":"body_timeout""#), "{answer}");
    assert!(answer.contains("`gateway.body_timeout_secs`"), "{answer}");
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_before_any_body_is_read() {
    let r = start("", "  body_limit_bytes: 2000\n").await;
    // No byte of the body is sent: the answer cannot wait for it.
    let answer = raw_exchange(&r, &chat_head(5_000_000), b"", Duration::from_secs(1))
        .await
        .expect("answered and closed at once");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains(r#""code":"body_too_large""#), "{answer}");
}

#[tokio::test]
async fn bytes_after_the_json_body_are_refused() {
    let r = start("", "").await;
    let one = hello().to_string();
    for body in [
        format!("{one}xx"),
        format!("{one}{one}"),
        format!("{one}\n[]"),
    ] {
        let response = r
            .http
            .post(format!("{}/v1/chat/completions", r.base))
            .bearer_auth(ACME)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("one JSON object alone"), "{message}");
    }
    // Whitespace after the object is no second value.
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let response = r
        .http
        .post(format!("{}/v1/chat/completions", r.base))
        .bearer_auth(ACME)
        .header("content-type", "application/json")
        .body(format!("{one} \r\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// A gateway over two providers at one mock server: `oa` (OpenAI, model `small`, alias `chat`)
/// and `an` (Anthropic, model `opus`, alias `deep`), tier `pro` with `tier` and deployments'
/// limits `limits`; `ACME` may use everything, `NARROW` only `small`.
async fn two_providers(tier: &str, limits: &str) -> Running {
    let upstream = MockServer::start().await;
    let base = upstream.uri();
    let yaml = format!(
        "defaults: {{ model: chat }}\n\
         providers:\n\
         \x20 - name: oa\n    api: openai\n    base_url: {base}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }}, \
         limits: {{ {limits} }} }}\n\
         \x20 - name: an\n    api: anthropic\n    base_url: {base}\n    api_key_env: AN_KEY\n    \
         models:\n      - {{ name: opus, aliases: [deep], price: {{ input: 15, output: 75 }}, \
         limits: {{ {limits} }} }}\n\
         tenants:\n  tiers:\n    pro: {{ {tier} }}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n    \
         - {{ sha256: {}, tenant: acme, models: [small] }}\n",
        hash_key(ACME),
        hash_key(NARROW),
    );
    start_yaml(upstream, &yaml).await
}

#[tokio::test]
async fn a_restricted_key_sees_only_its_models_deployments_in_the_quota() {
    let r = two_providers("", "rpm: 100").await;
    let models = |quota: &Value| -> Vec<String> {
        let rows = quota["deployments"].as_array().unwrap();
        rows.iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d["provider"].as_str().unwrap(),
                    d["model"].as_str().unwrap()
                )
            })
            .collect()
    };
    let narrow = r.get_json(NARROW, "/v1/quota").await;
    assert_eq!(models(&narrow), ["oa/small"], "{narrow}");
    let listed = r.get_json(NARROW, "/v1/models").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");
    let full = r.get_json(ACME, "/v1/quota").await;
    assert_eq!(models(&full), ["oa/small", "an/opus"], "{full}");
}

/// Fails if `text` holds any run of [`router_sdk::MASKED_RUN`] characters of `key`.
#[track_caller]
fn assert_no_piece_of(key: &str, text: &str) {
    for piece in key.as_bytes().windows(router_sdk::MASKED_RUN) {
        let piece = std::str::from_utf8(piece).unwrap();
        assert!(
            !text.contains(piece),
            "`{piece}` of the key shows in: {text}"
        );
    }
}

/// The upstream of `r` answers Anthropic requests with `status` and an Anthropic error of
/// `kind` saying `message`.
async fn anthropic_refuses(r: &Running, status: u16, kind: &str, message: &str) {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(&r.upstream)
        .await;
}

async fn ask_deep(r: &Running) -> (u16, Value) {
    let body = json!({"model": "deep", "messages": [{"role": "user", "content": "Hi"}]});
    let response = r.post(Some(ACME), &body).await;
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn a_provider_echoing_a_cut_key_reaches_neither_the_tenant_nor_the_log() {
    let (logs, _capture) = llmroute_tests::Logs::capture();
    let r = two_providers("", "rpm: 100").await;
    // 36 of the key's 40 characters and `...`, as a provider that truncates keys it echoes.
    let echoed = format!(
        "invalid x-api-key {}... for this model; see the docs",
        &AN_SECRET[..36]
    );
    anthropic_refuses(&r, 400, "invalid_request_error", &echoed).await;
    let (status, body) = ask_deep(&r).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "provider_refused");
    let message = body["error"]["message"].as_str().unwrap();
    // What happened, not the provider's words.
    assert!(message.contains("an/opus refused the request"), "{message}");
    assert!(
        message.contains("HTTP 400, `invalid_request_error`"),
        "{message}"
    );
    assert!(!message.contains("see the docs"), "{message}");
    assert_no_piece_of(AN_SECRET, &body.to_string());
    // The operator's log has the provider's words, the key masked.
    let logged = logs.text();
    assert!(logged.contains("see the docs"), "{logged}");
    assert_no_piece_of(AN_SECRET, &logged);
}

#[tokio::test]
async fn a_tenant_never_learns_a_key_variable_or_a_provider_its_key_may_not_use() {
    let r = two_providers("", "rpm: 100").await;
    // The provider refuses the gateway's key: the tenant hears of an account problem only.
    anthropic_refuses(&r, 401, "authentication_error", "invalid x-api-key").await;
    let (status, body) = ask_deep(&r).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "provider_account");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(!message.contains("AN_KEY"), "{message}");
    assert!(
        message.contains("HTTP 401, `authentication_error`"),
        "{message}"
    );
    // A provider the key may not use is not named, not even as a hint.
    let url = format!("{}/v1/chat/completions", r.base);
    let response = r
        .http
        .post(url)
        .bearer_auth(NARROW)
        .header("x-llmroute-providers", "nope")
        .json(&json!({"model": "small", "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("name any of: oa"), "{message}");
}

#[tokio::test]
async fn a_missing_provider_key_is_not_named_to_the_tenant() {
    let upstream = MockServer::start().await;
    let yaml = format!(
        "providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    \
         api_key_env: OA_UNSET_KEY\n    models:\n      - {{ name: small, price: {{ input: 1, output: 1 }} }}\n\
         tenants:\n  default_tier: free\n  tiers:\n    free: {{}}\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n",
        upstream.uri(),
        hash_key(ACME),
    );
    let r = start_yaml(upstream, &yaml).await;
    let body = json!({"model": "small", "messages": [{"role": "user", "content": "Hi"}]});
    let response = r.post(Some(ACME), &body).await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "no_provider_key");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(!message.contains("OA_UNSET_KEY"), "{message}");
}

/// The `data:` payloads of an SSE answer.
fn sse_data(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect()
}

/// `ACME`'s streamed request ends with a `stream_broken` error event saying `how`, and the
/// gateway counts the attempt as `stream_broken`.
async fn assert_stream_broken(r: &Running, how: &str) {
    let mut body = hello();
    body["stream"] = json!(true);
    let response = r.post(Some(ACME), &body).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let data = sse_data(&text);
    assert_ne!(data.last(), Some(&"[DONE]"), "{text}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "stream_broken", "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains(how), "{message}");
    let metrics = r.metrics_text().await;
    let broken =
        r#"llmroute_upstream_attempts_total{deployment="oa/small",outcome="stream_broken"} 1"#;
    assert!(metrics.contains(broken), "{metrics}");
    let ended = r#"llmroute_streams_total{ended="broken"} 1"#;
    assert!(metrics.contains(ended), "{metrics}");
    assert_eq!(super::in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_stream_whose_upstream_closes_mid_way_ends_as_stream_broken() {
    let events = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let provider = llmroute_tests::breaking_upstream(events).await;
    let r = start_over(MockServer::start().await, &provider, "", "").await;
    assert_stream_broken(&r, "closed the connection mid-stream").await;
}

#[tokio::test]
async fn a_stream_that_ends_without_a_finish_ends_as_stream_broken() {
    let r = start("", "").await;
    let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(cut, "text/event-stream"))
        .mount(&r.upstream)
        .await;
    assert_stream_broken(&r, "ended the stream without a finish").await;
}

/// A header of `response` as a number.
fn number(response: &reqwest::Response, name: &str) -> u64 {
    let value = response.headers().get(name);
    let value = value.unwrap_or_else(|| panic!("no `{name}`: {:?}", response.headers()));
    value.to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn concurrent_requests_each_get_the_counts_their_own_admission_left() {
    let r = start("rpm: 100, tpm: 1000000", "").await;
    // Answers come once every request has been admitted: a count read after the answer
    // would be the same for all.
    let slow = ResponseTemplate::new(200)
        .set_body_raw(fixture("openai/ok.json"), "application/json")
        .set_delay(Duration::from_millis(300));
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(slow)
        .mount(&r.upstream)
        .await;
    let body = hello();
    let calls = (0..10).map(|_| r.post(Some(ACME), &body));
    let responses = futures_util::future::join_all(calls).await;
    let mut left: Vec<u64> = responses
        .iter()
        .map(|response| {
            assert_eq!(response.status(), 200);
            assert_eq!(number(response, "x-ratelimit-limit-requests"), 100);
            number(response, "x-ratelimit-remaining-requests")
        })
        .collect();
    left.sort_unstable();
    assert_eq!(left, (90..100).collect::<Vec<u64>>());
    let mut tokens: Vec<u64> = responses
        .iter()
        .map(|response| number(response, "x-ratelimit-remaining-tokens"))
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 10, "each its own count: {tokens:?}");
}

#[tokio::test]
async fn a_429_carries_the_rate_limit_headers_as_the_refusal_found_them() {
    let r = start("rpm: 2", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    for _ in 0..2 {
        assert_eq!(r.post(Some(ACME), &hello()).await.status(), 200);
    }
    let refused = r.post_with_deadline_1s(&hello()).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(number(&refused, "x-ratelimit-limit-requests"), 2);
    assert_eq!(number(&refused, "x-ratelimit-remaining-requests"), 0);
    assert_eq!(refused.headers()["x-ratelimit-reset-requests"], "60s");
    // The tier sets no tpm: no token headers.
    assert!(!refused.headers().contains_key("x-ratelimit-limit-tokens"));
}

#[tokio::test]
async fn a_caller_without_tier_limits_gets_its_models_headroom() {
    // `chat` is served by oa/small alone (rpm 3); the tier limits nothing.
    let r = two_providers("", "rpm: 3").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    for before in 0..3_u64 {
        let response = r.post(Some(ACME), &hello()).await;
        assert_eq!(response.status(), 200);
        assert_eq!(number(&response, "x-ratelimit-limit-requests"), 3);
        // Read beside the admission: before it or after it, never after a later one.
        let left = number(&response, "x-ratelimit-remaining-requests");
        assert!(
            (2 - before..=3 - before).contains(&left),
            "{before}: {left}"
        );
        assert!(!response.headers().contains_key("x-ratelimit-limit-tokens"));
    }
    let refused = r.post_with_deadline_1s(&hello()).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(number(&refused, "x-ratelimit-limit-requests"), 3);
    assert_eq!(number(&refused, "x-ratelimit-remaining-requests"), 0);
}

#[tokio::test]
async fn a_models_headroom_is_read_once_a_second_and_counted_down_between() {
    let r = two_providers("", "rpm: 100").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let first = r.post(Some(ACME), &hello()).await;
    let read = number(&first, "x-ratelimit-remaining-requests");
    // Another instance admits 5 requests: the reading, reused for a second, does not see them;
    // this gateway's own next request counts one down from it.
    let small = r.router.registry().resolve("small");
    for _ in 0..5 {
        let need = router_core::ledger::Need::new(10, Duration::from_secs(60));
        let admitted = r.router.ledger().admit(&need, &small).await.unwrap();
        assert!(matches!(
            admitted,
            router_core::ledger::Admission::Granted(_)
        ));
    }
    let second = r.post(Some(ACME), &hello()).await;
    assert_eq!(
        number(&second, "x-ratelimit-remaining-requests"),
        read - 1,
        "a reading reused within {HEADROOM_FRESH:?}"
    );
}
