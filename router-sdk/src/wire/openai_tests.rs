#![allow(clippy::unwrap_used)]

use super::*;
use crate::wire::test_support::{decode_all, request};
use serde_json::json;

#[test]
fn body_has_messages_and_only_the_fields_that_are_set() {
    let plain = body("gpt-4o-mini", &crate::types::ChatRequest::new("Hi"), false);
    assert_eq!(
        plain,
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]})
    );
    let full = body("gpt-4o-mini", &request(), true);
    let want = json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
        "max_tokens": 64,
        "temperature": 0.5,
        "stop": ["END"],
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    assert_eq!(full, want);
}

#[test]
fn response_with_usage() {
    let got = parse_response(include_bytes!("../../tests/fixtures/openai/ok.json")).unwrap();
    assert_eq!(got.content, "Hello! How can I help you today?");
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
    let usage = Usage {
        cached_prompt_tokens: 1024,
        ..Usage::new(1117, 46)
    };
    assert_eq!(got.usage, Some(usage));
}

#[test]
fn finish_reasons() {
    for (name, want) in [
        ("stop", FinishReason::Stop),
        ("length", FinishReason::Length),
        ("content_filter", FinishReason::ContentFilter),
        ("tool_calls", FinishReason::ToolCalls),
        ("function_call", FinishReason::ToolCalls),
        ("other", FinishReason::Other("other".into())),
    ] {
        assert_eq!(finish_reason(name), want);
    }
}

#[test]
fn stream_fixture_to_exact_events() {
    let (events, failure) = decode_all(
        Api::OpenAi,
        include_str!("../../tests/fixtures/openai/stream.sse"),
    );
    assert_eq!(failure, None);
    assert_eq!(
        events,
        [
            StreamEvent::Id("chatcmpl-123".into()),
            StreamEvent::Delta("Hel".into()),
            StreamEvent::Delta("lo!".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage::new(9, 3)),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn error_inside_a_stream_is_a_failure() {
    let (events, failure) = decode_all(
        Api::OpenAi,
        include_str!("../../tests/fixtures/openai/stream_error.sse"),
    );
    assert_eq!(
        events,
        [
            StreamEvent::Id("chatcmpl-456".into()),
            StreamEvent::Delta("Par".into())
        ]
    );
    let failure = failure.unwrap();
    assert_eq!(failure.class, FailureClass::RateLimited);
    assert_eq!(failure.status, None);
    assert_eq!(
        failure.message,
        "The server is overloaded, please retry later."
    );
}

#[test]
fn error_shapes() {
    let text = error_body(br#"{"error": "model 'x' not found"}"#).unwrap();
    assert_eq!(text.message, "model 'x' not found");
    let flat = br#"{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}"#;
    let flat = error_body(flat).unwrap();
    assert_eq!(
        (flat.code.as_deref(), flat.status),
        (Some("400"), Some(400))
    );
    assert_eq!(error_body(b"<html>502 Bad Gateway</html>"), None);
    assert_eq!(error_body(br#"{"detail": "nope"}"#), None);
}
