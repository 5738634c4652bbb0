//! Refusals over a real socket: keys, full tiers and budgets, bad bodies, unknown paths and
//! methods, slow headers; each in OpenAI's error shape, counted under the caller's tenant.

use super::*;

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
    let retry = retry_after_secs(&response);
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
    let text = r.metrics_text().await;
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
