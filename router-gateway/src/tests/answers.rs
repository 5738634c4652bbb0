//! Answers in OpenAI's shapes over a real socket: whole and streamed, tools, headers passed on,
//! `null` fields.

use super::*;

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
    // It did not wait: no time waited, no place in a line.
    assert_eq!(response.headers()["x-llmroute-waited-ms"], "0");
    assert!(!response.headers().contains_key("x-llmroute-queue-position"));
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
    let metrics = r.metrics_text().await;
    let completed = r#"llmroute_streams_total{ended="completed"} 1"#;
    assert!(metrics.contains(completed), "{metrics}");
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
async fn an_answer_that_waited_in_line_says_its_place_and_its_wait() {
    use router_core::ledger::{ActualUsage, Admission, Need};
    let upstream = MockServer::start().await;
    let yaml = yaml_over(&upstream.uri(), "", "").replace(
        "price: { input: 2, output: 8 } }",
        "price: { input: 2, output: 8 }, limits: { concurrency: 1 } }",
    );
    let r = start_yaml(upstream, &yaml).await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    // Nobody waits: no wait, no place.
    let response = r.post(Some(ACME), &hello()).await;
    assert_eq!(response.headers()["x-llmroute-waited-ms"], "0");
    assert!(!response.headers().contains_key("x-llmroute-queue-position"));
    // The one slot taken, a request waits in line, first.
    let d = r.router.registry().resolve("small")[0];
    let ledger = r.router.ledger();
    let ttl = std::time::Duration::from_secs(600);
    let Ok(Admission::Granted(held)) = ledger.admit(&Need::new(1, ttl), &[d]).await else {
        panic!("the slot is free");
    };
    let post = r
        .http
        .post(format!("{}/v1/chat/completions", r.base))
        .bearer_auth(ACME)
        .json(&hello())
        .send();
    let waiting = tokio::spawn(post);
    while ledger.snapshot(&[d]).await.unwrap()[0].line.waiting == 0 {
        tokio::task::yield_now().await;
    }
    // The caller's quota shows the line.
    let quota = r.get_json(ACME, "/v1/quota").await;
    assert_eq!(quota["deployments"][0]["line"]["waiting"], 1);
    assert!(quota["deployments"][0]["line"]["oldest_wait_secs"].is_f64());
    // The settlement wakes it.
    assert!(ledger.settle(&held, ActualUsage::default()).await.unwrap());
    let response = waiting.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-llmroute-queue-position"], "0");
    let waited = response.headers()["x-llmroute-waited-ms"].to_str().unwrap();
    assert!(waited.parse::<u64>().is_ok(), "{waited}");
    let metrics = r.metrics_text().await;
    assert!(
        metrics.contains("llmroute_line_wait_seconds_count 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("llmroute_line_waiting{deployment=\"oa/small\",class=\"interactive\"} 0"),
        "{metrics}"
    );
}
