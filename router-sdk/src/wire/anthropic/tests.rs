#![allow(clippy::unwrap_used)]

use super::*;
use crate::types::StreamEvent;
use crate::wire::test_support::{decode_all, request};
use router_core::config::Api;
use serde_json::json;

#[test]
fn body_lifts_system_and_requires_max_tokens() {
    let want = json!({
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 64,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
        "temperature": 0.5,
        "stop_sequences": ["END"],
        "stream": true,
    });
    assert_eq!(body("claude-sonnet-4-20250514", &request(), true), want);
    let mut two_systems = ChatRequest::new("Hi");
    two_systems
        .messages
        .insert(0, crate::types::Message::system("A."));
    two_systems
        .messages
        .insert(1, crate::types::Message::system("B."));
    let plain = body("m", &two_systems, false);
    let want = json!({"model": "m", "max_tokens": DEFAULT_MAX_TOKENS, "system": "A.\n\nB.",
        "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(plain, want);
}

#[test]
fn response_usage_counts_cache_as_prompt() {
    let body = include_bytes!("../../../tests/fixtures/anthropic/ok.json");
    let got = parse_response(body).unwrap();
    assert_eq!(got.content, "Hi! My name is Claude.");
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
    let prompt = 21 + 188 + 1800;
    let usage = Usage {
        cached_prompt_tokens: 1800,
        ..Usage::new(prompt, 393)
    };
    assert_eq!(got.usage, Some(usage));
}

#[test]
fn finish_reasons() {
    for (name, want) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("refusal", FinishReason::ContentFilter),
        ("tool_use", FinishReason::Other("tool_use".into())),
    ] {
        assert_eq!(finish_reason(name), want);
    }
}

/// `usage` with the stream fixture's 100 cache-read tokens.
fn cached(usage: Usage) -> Usage {
    Usage {
        cached_prompt_tokens: 100,
        ..usage
    }
}

#[test]
fn stream_usage_is_assigned_not_added() {
    let sse = include_str!("../../../tests/fixtures/anthropic/stream.sse");
    let (events, failure) = decode_all(Api::Anthropic, sse);
    assert_eq!(failure, None);
    assert_eq!(
        events,
        [
            StreamEvent::Usage(cached(Usage::new(135, 1))),
            StreamEvent::Ignore,
            StreamEvent::Ignore,
            StreamEvent::Delta("Hello".into()),
            StreamEvent::Delta("!".into()),
            StreamEvent::Ignore,
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(cached(Usage::new(135, 15))),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn message_delta_input_counts_replace_the_start_counts() {
    let mut s = Stream::default();
    let start =
        r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}"#;
    s.event("message_start", start).unwrap();
    let delta =
        r#"{"type":"message_delta","delta":{},"usage":{"input_tokens":12,"output_tokens":7}}"#;
    let usage = Usage::new(12, 7);
    assert_eq!(
        s.event("message_delta", delta).unwrap(),
        [StreamEvent::Usage(usage)]
    );
    let again = r#"{"type":"message_delta","delta":{},"usage":{"output_tokens":9}}"#;
    let usage = Usage::new(12, 9);
    assert_eq!(
        s.event("message_delta", again).unwrap(),
        [StreamEvent::Usage(usage)]
    );
}

#[test]
fn overloaded_error_event_after_200() {
    let sse = include_str!("../../../tests/fixtures/anthropic/stream_error_529.sse");
    let (events, failure) = decode_all(Api::Anthropic, sse);
    let usage = Usage::new(12, 1);
    let want = [
        StreamEvent::Usage(usage),
        StreamEvent::Ignore,
        StreamEvent::Delta("Par".into()),
    ];
    assert_eq!(events, want);
    let failure = failure.unwrap();
    assert_eq!(failure.class, FailureClass::Overloaded);
    assert_eq!(
        (failure.status, failure.code.as_deref()),
        (None, Some("overloaded_error"))
    );
    assert_eq!(
        failure.class.kind(),
        router_core::retry::FailureKind::Overloaded
    );
}
