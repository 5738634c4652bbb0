//! A traced request: each provider call sends a `traceparent` in the caller's trace naming a
//! span of its own, and the receipt's attempts carry those span ids and their times. An
//! untraced request sends none.

use futures_util::StreamExt;
use router_sdk::trace::{TraceParent, to_hex};
use router_sdk::{ChatChunk, ChatRequest};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The `traceparent` each request to `server` carried, in order.
async fn traceparents(server: &wiremock::MockServer) -> Vec<Option<String>> {
    let seen = server.received_requests().await.unwrap_or_default();
    let header = |r: &wiremock::Request| {
        let value = r.headers.get("traceparent")?;
        value.to_str().ok().map(str::to_owned)
    };
    seen.iter().map(header).collect()
}

#[tokio::test]
async fn each_call_of_a_traced_request_sends_its_own_span_in_the_callers_trace() {
    let w = World::new(&[
        Upstream::openai("cheap", (0.1, 0.2)),
        Upstream::anthropic("dear", (3.0, 15.0)),
    ])
    .await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(503))
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .mount(&w.servers[1])
        .await;
    let caller = TraceParent::parse(CALLER).unwrap();
    let mut req = ChatRequest::new("Hello");
    // A traceparent the caller put among the extra headers gives way to the call's own.
    req.headers = vec![("traceparent".into(), "00-stale".into())];
    req.trace = Some(caller);
    let answer = w.router.chat(req).await.unwrap();
    let attempts = &answer.receipt.attempts;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let sent = [
        traceparents(&w.servers[0]).await,
        traceparents(&w.servers[1]).await,
    ];
    for (attempt, sent) in attempts.iter().zip(&sent) {
        let span = attempt.span_id.expect("a traced call has a span id");
        assert_ne!(span, caller.parent_id);
        let expected = format!("00-{}-{}-01", to_hex(&caller.trace_id), to_hex(&span));
        assert_eq!(sent, &vec![Some(expected)]);
        // On the router's clock, which this world holds still.
        let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_millis(T0);
        assert_eq!(attempt.started, t0);
    }
    assert_ne!(attempts[0].span_id, attempts[1].span_id);
}

#[tokio::test]
async fn an_untraced_request_sends_no_traceparent_and_its_attempts_have_no_span() {
    let w = World::new(&[Upstream::openai("cheap", (0.1, 0.2))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.attempts[0].span_id, None);
    assert_eq!(traceparents(&w.servers[0]).await, vec![None]);
}

#[tokio::test]
async fn a_traced_stream_sends_its_own_and_its_attempt_lasts_to_the_end() {
    let w = World::new(&[Upstream::openai("cheap", (0.1, 0.2))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_sse("openai/stream.sse"))
        .mount(&w.servers[0])
        .await;
    let caller = TraceParent::parse(CALLER).unwrap();
    let mut req = ChatRequest::new("Hello");
    req.trace = Some(caller);
    let items: Vec<_> = w.router.chat_stream(req).await.unwrap().collect().await;
    let receipt = match items.into_iter().last() {
        Some(Ok(ChatChunk::Done(receipt))) => receipt,
        other => panic!("the stream ends with its receipt, not {other:?}"),
    };
    let span = receipt.attempts[0].span_id.unwrap();
    let expected = format!("00-{}-{}-01", to_hex(&caller.trace_id), to_hex(&span));
    assert_eq!(traceparents(&w.servers[0]).await, vec![Some(expected)]);
}
