//! Traces through a real collector (`llmroute_tests::otlp`, on the official OTLP messages): a
//! request's server span joins the caller's trace, each provider call is a client span under
//! it whose id the provider got in `traceparent`, with the GenAI conventions' attributes and
//! llmroute's; no prompt, answer or key in any span unless `capture_content` records the prompt
//! and the answer, and never a key or a provider's message; a collector that is down or hangs
//! costs requests nothing.

use llmroute_tests::otlp::{Answer, Collector, attribute, hex, span_attribute};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

use super::*;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// The caller's `traceparent`, sampled or not.
fn traceparent(sampled: bool) -> String {
    let flags = if sampled { "01" } else { "00" };
    format!("00-{CALLER_TRACE}-{CALLER_SPAN}-{flags}")
}

/// A gateway over one OpenAI upstream whose spans go to `collector`, sent every 20 ms, with
/// `telemetry` YAML (its `endpoint` is set here).
async fn traced(collector: &Collector, telemetry: &str) -> Running {
    let upstream = MockServer::start().await;
    let extra = format!("telemetry:\n  endpoint: {}\n{telemetry}", collector.url);
    let yaml = yaml_over(&upstream.uri(), "rpm: 1000", &extra);
    let mut registry = Registry::from_yaml_str(&yaml, "gateway.yaml").unwrap();
    registry.telemetry.batch_delay = Duration::from_millis(20);
    let router = router_builder(registry).build().await.unwrap();
    serve_router(upstream, router, |access| access).await
}

/// `ACME`'s chat request of `body`, with `traceparent` when given.
async fn post_traced(r: &Running, body: &Value, parent: Option<&str>) -> reqwest::Response {
    let mut req = r.http.post(format!("{}/v1/chat/completions", r.base));
    if let Some(parent) = parent {
        req = req.header("traceparent", parent);
    }
    req.bearer_auth(ACME).json(body).send().await.unwrap()
}

fn is_server(span: &Span) -> bool {
    span.kind == SpanKind::Server as i32
}

/// Every attribute value of `spans`, as text.
fn every_value(spans: &[Span]) -> String {
    let mut all = String::new();
    for span in spans {
        for kv in &span.attributes {
            all.push_str(&attribute(std::slice::from_ref(kv), &kv.key).unwrap_or_default());
            all.push('\n');
        }
        all.push_str(&span.name);
    }
    all
}

#[tokio::test]
async fn a_whole_answer_is_a_server_span_in_the_callers_trace_with_a_client_span_per_call() {
    let mut collector = Collector::start(Answer::Accept).await;
    let r = traced(&collector, "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let mut body = hello();
    body["max_tokens"] = json!(64);
    let parent = traceparent(true);
    let response = post_traced(&r, &body, Some(&parent)).await;
    assert_eq!(response.status(), 200);
    // The call and the server span, in the order they end: the server span first.
    let spans = collector.spans_until(|s| !is_server(s)).await;
    let [server, call] = &spans[..] else {
        panic!("{spans:?}")
    };
    assert!(is_server(server), "{server:?}");
    assert_eq!(hex(&server.trace_id), CALLER_TRACE);
    assert_eq!(hex(&server.parent_span_id), CALLER_SPAN);
    assert_eq!(server.name, "chat chat");
    let s = |key| span_attribute(server, key);
    assert_eq!(s("gen_ai.operation.name").as_deref(), Some("chat"));
    assert_eq!(s("gen_ai.request.model").as_deref(), Some("chat"));
    assert_eq!(s("gen_ai.response.model").as_deref(), Some("small"));
    assert_eq!(s("gen_ai.provider.name").as_deref(), Some("openai"));
    assert_eq!(s("gen_ai.request.max_tokens").as_deref(), Some("64"));
    assert_eq!(s("gen_ai.usage.input_tokens").as_deref(), Some("1117"));
    assert_eq!(s("gen_ai.usage.output_tokens").as_deref(), Some("46"));
    assert_eq!(s("gen_ai.response.finish_reasons").as_deref(), Some("stop"));
    assert_eq!(s("llmroute.tenant").as_deref(), Some("acme"));
    assert_eq!(s("llmroute.key_id").map(|k| k.len()), Some(12));
    assert_eq!(s("llmroute.deployment").as_deref(), Some("oa/small"));
    assert_eq!(s("llmroute.attempts").as_deref(), Some("1"));
    assert_eq!(s("llmroute.outcome").as_deref(), Some("ok"));
    assert_eq!(s("llmroute.waited_ms").as_deref(), Some("0"));
    assert_eq!(s("http.response.status_code").as_deref(), Some("200"));
    assert!(s("llmroute.cost_usd").is_some());
    assert!(server.status.is_none(), "{server:?}");
    // The provider call: under the server span, and the provider got its id.
    assert_eq!(call.kind, SpanKind::Client as i32);
    assert_eq!(call.trace_id, server.trace_id);
    assert_eq!(call.parent_span_id, server.span_id);
    assert_eq!(
        span_attribute(call, "llmroute.attempt").as_deref(),
        Some("1")
    );
    assert_eq!(
        span_attribute(call, "gen_ai.request.model").as_deref(),
        Some("small")
    );
    let seen = &r.upstream.received_requests().await.unwrap()[0];
    let sent = seen.headers.get("traceparent").unwrap().to_str().unwrap();
    assert_eq!(sent, format!("00-{CALLER_TRACE}-{}-01", hex(&call.span_id)));
    assert!(call.start_time_unix_nano >= server.start_time_unix_nano);
    assert!(call.end_time_unix_nano <= server.end_time_unix_nano);
    // Neither the prompt, nor the answer, nor a key.
    let all = every_value(&spans);
    for secret in ["Hello", "How can I help", ACME, "sk-upstream-S3CRET"] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
}

#[tokio::test]
async fn a_stream_ends_its_span_with_its_last_event_and_a_refusal_is_a_4xx_span() {
    let mut collector = Collector::start(Answer::Accept).await;
    let r = traced(&collector, "").await;
    upstream_answers(&r, "openai/stream.sse", "text/event-stream").await;
    let mut body = hello();
    body["stream"] = json!(true);
    let response = post_traced(&r, &body, None).await;
    let text = response.text().await.unwrap();
    assert!(text.contains("[DONE]"), "{text}");
    let spans = collector.spans_until(|s| !is_server(s)).await;
    let server = &spans[0];
    // A trace of its own: no parent.
    assert!(server.parent_span_id.is_empty(), "{server:?}");
    let s = |key| span_attribute(server, key);
    assert_eq!(s("llmroute.stream").as_deref(), Some("true"));
    assert_eq!(s("llmroute.stream.ended").as_deref(), Some("completed"));
    assert_eq!(s("gen_ai.usage.output_tokens").as_deref(), Some("3"));
    assert_eq!(spans[1].parent_span_id, server.span_id);
    // A caller without a key: refused before any call, a 401 span that is not an error.
    let refused = post_traced_as(&r, None, &hello()).await;
    assert_eq!(refused.status(), 401);
    let server = collector.next_span().await;
    assert_eq!(
        span_attribute(&server, "http.response.status_code").as_deref(),
        Some("401")
    );
    assert_eq!(
        span_attribute(&server, "llmroute.outcome").as_deref(),
        Some("invalid_api_key")
    );
    assert!(server.status.is_none(), "{server:?}");
}

/// `key`'s chat request of `body`, untraced by the caller.
async fn post_traced_as(r: &Running, key: Option<&str>, body: &Value) -> reqwest::Response {
    r.post(key, body).await
}

#[tokio::test]
async fn the_callers_sampled_flag_decides_and_the_ratio_decides_the_rest() {
    let mut collector = Collector::start(Answer::Accept).await;
    let r = traced(&collector, "  sample_ratio: 0\n").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    // Not traced: no traceparent and a ratio of 0; a caller's unsampled trace.
    for parent in [None, Some(traceparent(false))] {
        let response = post_traced(&r, &hello(), parent.as_deref()).await;
        assert_eq!(response.status(), 200);
        let seen = r.upstream.received_requests().await.unwrap();
        assert!(seen.last().unwrap().headers.get("traceparent").is_none());
    }
    // Traced: the caller's sampled trace. Spans come in order: nothing came before it.
    let response = post_traced(&r, &hello(), Some(&traceparent(true))).await;
    assert_eq!(response.status(), 200);
    let spans = collector.spans_until(|s| !is_server(s)).await;
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert!(spans.iter().all(|s| hex(&s.trace_id) == CALLER_TRACE));
}

#[tokio::test]
async fn a_collector_that_hangs_or_refuses_costs_requests_nothing_and_is_counted() {
    let mut hanging = Collector::start(Answer::Hang).await;
    let r = traced(&hanging, "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let parent = traceparent(true);
    assert_eq!(post_traced(&r, &hello(), Some(&parent)).await.status(), 200);
    // The collector holds the export open; requests are answered all the same.
    hanging.next_export().await;
    for _ in 0..3 {
        assert_eq!(post_traced(&r, &hello(), Some(&parent)).await.status(), 200);
    }
    let mut refusing = Collector::start(Answer::Refuse(503)).await;
    let r = traced(&refusing, "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    assert_eq!(post_traced(&r, &hello(), Some(&parent)).await.status(), 200);
    refusing.next_export().await;
    // The refusal is counted once the exporter has read it.
    let counted = r#"llmroute_trace_spans_total{result="failed"} 2"#;
    let counted = async {
        while !r.metrics_text().await.contains(counted) {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), counted)
        .await
        .expect("the failed export was never counted");
}

/// The JSON text of attribute `key` of `span`, read.
fn json_attribute(span: &Span, key: &str) -> Value {
    let text = span_attribute(span, key).unwrap_or_else(|| panic!("no {key} in {span:?}"));
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn with_capture_content_the_server_span_holds_the_prompt_and_the_whole_answer() {
    let mut collector = Collector::start(Answer::Accept).await;
    let r = traced(&collector, "  capture_content: true\n").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let body = json!({"model": "chat", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello"},
    ]});
    let response = post_traced(&r, &body, None).await;
    assert_eq!(response.status(), 200);
    let spans = collector.spans_until(|s| !is_server(s)).await;
    let [server, call] = &spans[..] else {
        panic!("{spans:?}")
    };
    // Chat completions' system prompt is part of the conversation.
    assert_eq!(
        json_attribute(server, "gen_ai.input.messages"),
        json!([
            {"role": "system", "parts": [{"type": "text", "content": "You are terse."}]},
            {"role": "user", "parts": [{"type": "text", "content": "Hello"}]},
        ])
    );
    assert_eq!(span_attribute(server, "gen_ai.system_instructions"), None);
    assert_eq!(
        json_attribute(server, "gen_ai.output.messages"),
        json!([{
            "role": "assistant",
            "parts": [{"type": "text", "content": "Hello! How can I help you today?"}],
            "finish_reason": "stop",
        }])
    );
    // The provider call's span holds neither; no span holds a key.
    let call_values = every_value(std::slice::from_ref(call));
    assert!(!call_values.contains("Hello"), "{call_values}");
    let all = every_value(&spans);
    for secret in [ACME, "sk-upstream-S3CRET"] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
}

#[tokio::test]
async fn with_capture_content_a_streamed_answer_is_the_text_its_events_brought() {
    let mut collector = Collector::start(Answer::Accept).await;
    let r = traced(&collector, "  capture_content: true\n").await;
    upstream_answers(&r, "openai/stream.sse", "text/event-stream").await;
    // Anthropic's Messages: the system prompt stands apart from the conversation.
    let body = json!({"model": "chat", "max_tokens": 64, "stream": true,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Hello"}]});
    let response = r
        .http
        .post(format!("{}/v1/messages", r.base))
        .header("x-api-key", ACME)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("message_stop"), "{text}");
    let spans = collector.spans_until(|s| !is_server(s)).await;
    let server = &spans[0];
    assert_eq!(
        span_attribute(server, "llmroute.stream.ended").as_deref(),
        Some("completed")
    );
    assert_eq!(
        json_attribute(server, "gen_ai.system_instructions"),
        json!([{"type": "text", "content": "You are terse."}])
    );
    assert_eq!(
        json_attribute(server, "gen_ai.input.messages"),
        json!([{"role": "user", "parts": [{"type": "text", "content": "Hello"}]}])
    );
    // The text of the stream's deltas, `Hel` and `lo!`, with the provider's finish reason.
    assert_eq!(
        json_attribute(server, "gen_ai.output.messages"),
        json!([{
            "role": "assistant",
            "parts": [{"type": "text", "content": "Hello!"}],
            "finish_reason": "stop",
        }])
    );
    let all = every_value(&spans);
    for secret in [ACME, "sk-upstream-S3CRET"] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
}

#[tokio::test]
async fn even_with_capture_content_no_key_and_no_provider_message_is_in_a_span() {
    let mut collector = Collector::start(Answer::Accept).await;
    let r = traced(&collector, "  capture_content: true\n").await;
    // A provider that echoes the key it was given in its error message.
    let echo = json!({"error": {"type": "invalid_request_error", "code": "invalid_api_key",
        "message": "Incorrect API key provided: sk-upstream-S3CRET. Check your account."}});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(401).set_body_json(echo))
        .mount(&r.upstream)
        .await;
    let response = post_traced(&r, &hello(), None).await;
    assert!(response.status().is_server_error(), "{}", response.status());
    let spans = collector.spans_until(|s| !is_server(s)).await;
    let server = &spans[0];
    assert!(is_server(server), "{server:?}");
    // The prompt is recorded; there is no answer.
    assert_eq!(
        json_attribute(server, "gen_ai.input.messages"),
        json!([{"role": "user", "parts": [{"type": "text", "content": "Hello"}]}])
    );
    assert_eq!(span_attribute(server, "gen_ai.output.messages"), None);
    let all = every_value(&spans);
    for secret in [
        ACME,
        "sk-upstream-S3CRET",
        "Incorrect API key",
        "Check your",
    ] {
        assert!(!all.contains(secret), "{secret} in {all}");
    }
}
