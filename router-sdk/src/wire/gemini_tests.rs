#![allow(clippy::unwrap_used)]

use super::*;
use crate::wire::test_support::{decode_all, request};

#[test]
fn body_uses_contents_system_instruction_and_generation_config() {
    let want = json!({
        "contents": [
            {"role": "user", "parts": [{"text": "Hi"}]},
            {"role": "model", "parts": [{"text": "Hello."}]},
            {"role": "user", "parts": [{"text": "Bye"}]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"maxOutputTokens": 64, "temperature": 0.5, "stopSequences": ["END"]},
    });
    assert_eq!(body(&request()), want);
    let plain = json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]});
    assert_eq!(body(&ChatRequest::new("Hi")), plain);
}

#[test]
fn urls() {
    let base = "https://generativelanguage.googleapis.com/v1beta";
    let plain = format!("{base}/models/gemini-2.5-flash:generateContent");
    assert_eq!(url(base, "gemini-2.5-flash", false), plain);
    let stream = format!("{base}/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    assert_eq!(url(base, "models/gemini-2.5-flash", true), stream);
}

#[test]
fn response_bills_thoughts_as_output() {
    let got = parse_response(include_bytes!("../../tests/fixtures/gemini/ok.json")).unwrap();
    assert_eq!(
        got.content,
        "AI learns patterns from data to make predictions."
    );
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
    let usage = Usage {
        reasoning_tokens: 1024,
        ..Usage::new(8, 10 + 1024)
    };
    assert_eq!(got.usage, Some(usage));
}

#[test]
fn thought_parts_and_blocked_prompts() {
    let body = br#"{"candidates":[{"content":{"parts":[{"text":"hmm","thought":true},
        {"text":"Yes."}]},"finishReason":"MAX_TOKENS"}]}"#;
    let got = parse_response(body).unwrap();
    assert_eq!(
        (got.content.as_str(), got.finish_reason),
        ("Yes.", Some(FinishReason::Length))
    );
    let blocked =
        br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":5}}"#;
    let got = parse_response(blocked).unwrap();
    assert_eq!(got.finish_reason, Some(FinishReason::ContentFilter));
    assert_eq!(got.usage, Some(Usage::new(5, 0)));
}

#[test]
fn stream_takes_the_latest_cumulative_usage_and_ends_with_done() {
    let sse = include_str!("../../tests/fixtures/gemini/stream.sse");
    let (events, failure) = decode_all(Api::Gemini, sse);
    assert_eq!(failure, None);
    assert_eq!(
        events,
        [
            StreamEvent::Delta("The".into()),
            StreamEvent::Usage(Usage::new(9, 0)),
            StreamEvent::Delta(" sky is".into()),
            StreamEvent::Usage(Usage {
                reasoning_tokens: 28,
                ..Usage::new(9, 31)
            }),
            StreamEvent::Delta(" blue.".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage {
                reasoning_tokens: 28,
                ..Usage::new(9, 33)
            }),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn a_stream_cut_before_its_finish_reason_has_no_done() {
    let mut s = Stream::default();
    let chunk = r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}"#;
    assert_eq!(
        s.event("", chunk).unwrap(),
        [StreamEvent::Delta("Hi".into())]
    );
    assert_eq!(s.finish(), []);
}

#[test]
fn finish_reasons() {
    for (name, want) in [
        ("STOP", FinishReason::Stop),
        ("MAX_TOKENS", FinishReason::Length),
        ("SAFETY", FinishReason::ContentFilter),
        (
            "MALFORMED_FUNCTION_CALL",
            FinishReason::Other("MALFORMED_FUNCTION_CALL".into()),
        ),
    ] {
        assert_eq!(finish_reason(name), want);
    }
}
