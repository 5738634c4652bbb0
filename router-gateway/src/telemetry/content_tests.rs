#![allow(clippy::unwrap_used)]

//! Prompt and answer text as the GenAI conventions write it, and the cap on each value.

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use serde_json::{Value, json};

use super::*;
use crate::telemetry::capped::MARK;

/// The JSON of text attribute `kv`, checked to be within the cap.
fn json_of(kv: &KeyValue) -> Value {
    let Some(Any::StringValue(text)) = kv.value.as_ref().and_then(|v| v.value.as_ref()) else {
        panic!("not text: {kv:?}")
    };
    assert!(text.len() <= CAP, "{} bytes", text.len());
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn call(id: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "weather".into(),
        arguments: arguments.into(),
    }
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("Be brief."),
        Message::user("Weather in Paris?"),
        Message::assistant_calls("", vec![call("c1", r#"{"city":"Paris"}"#)]),
        Message::tool_result("c1", "rainy, 14 C"),
    ]
}

#[test]
fn a_prompt_is_its_messages_in_order_in_the_conventions_shape() {
    let attributes = prompt(&conversation(), false);
    let [input] = &attributes[..] else {
        panic!("{attributes:?}")
    };
    assert_eq!(input.key, "gen_ai.input.messages");
    let expected = json!([
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {"role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"}
        ]},
        {"role": "tool", "parts": [
            {"type": "tool_call_response", "id": "c1", "result": "rainy, 14 C"}
        ]},
    ]);
    assert_eq!(json_of(input), expected);
}

#[test]
fn a_system_prompt_apart_from_the_conversation_is_the_system_instructions() {
    let mut messages = conversation();
    messages.insert(1, Message::system("Answer in French."));
    let attributes = prompt(&messages, true);
    let [system, input] = &attributes[..] else {
        panic!("{attributes:?}")
    };
    assert_eq!(system.key, "gen_ai.system_instructions");
    let expected = json!([
        {"type": "text", "content": "Be brief."},
        {"type": "text", "content": "Answer in French."},
    ]);
    assert_eq!(json_of(system), expected);
    let input = json_of(input);
    assert_eq!(input.as_array().unwrap().len(), 3, "{input}");
    assert_eq!(input[0]["role"], "user");
}

#[test]
fn an_answer_is_one_assistant_message_with_its_finish_reason() {
    let calls = [call("c2", "{}")];
    let said = Said {
        text: "Let me look.",
        refusal: None,
        calls: &calls,
        finish: finish_reason(Some(&FinishReason::ToolCalls)),
    };
    let kv = said.attribute();
    assert_eq!(kv.key, "gen_ai.output.messages");
    let expected = json!([{
        "role": "assistant",
        "parts": [
            {"type": "text", "content": "Let me look."},
            {"type": "tool_call", "id": "c2", "name": "weather", "arguments": "{}"},
        ],
        "finish_reason": "tool_call",
    }]);
    assert_eq!(json_of(&kv), expected);
}

#[test]
fn a_stream_keeps_its_pieces_and_a_broken_one_finishes_as_an_error() {
    let mut streamed = Streamed::default();
    for piece in ["Hel", "lo", "!"] {
        streamed.chunk(&ChatChunk::Delta(piece.into()));
    }
    streamed.chunk(&ChatChunk::ToolCalls(vec![call("c3", "{\"a\":1}")]));
    let out = json_of(&streamed.attribute(false));
    assert_eq!(out[0]["parts"][0]["content"], "Hello!");
    assert_eq!(out[0]["parts"][1]["arguments"], "{\"a\":1}");
    assert_eq!(out[0]["finish_reason"], "error");
    // Completed without a reason from the provider.
    assert_eq!(
        json_of(&streamed.attribute(true))[0]["finish_reason"],
        "unknown"
    );
}

#[test]
fn a_stream_holds_no_more_than_the_cap() {
    let mut streamed = Streamed::default();
    let piece = "é".repeat(1000); // 2 bytes a character
    for _ in 0..20 {
        streamed.chunk(&ChatChunk::Delta(piece.clone()));
    }
    streamed.chunk(&ChatChunk::ToolCalls(vec![call("c4", &piece)]));
    assert!(streamed.text.len() <= CAP, "{}", streamed.text.len());
    assert_eq!(streamed.calls[0].arguments, "");
    let out = json_of(&streamed.attribute(true));
    let text = out[0]["parts"][0]["content"].as_str().unwrap();
    assert!(text.ends_with(MARK), "{text}");
}

#[test]
fn every_value_stays_whole_json_within_the_cap_and_says_where_it_was_cut() {
    let huge = "a \"quoted\"\n\u{1}line ✓ ".repeat(5_000);
    let cases: Vec<(&str, Vec<Message>)> = vec![
        ("one huge prompt", vec![Message::user(huge.clone())]),
        (
            "many small messages",
            (0..5_000).map(|n| Message::user(format!("m{n}"))).collect(),
        ),
        (
            "many empty messages",
            (0..5_000)
                .map(|_| Message::assistant_calls("", vec![]))
                .collect(),
        ),
        (
            "huge tool arguments",
            vec![Message::assistant_calls("", vec![call(&huge, &huge)])],
        ),
        (
            "a huge system prompt",
            vec![Message::system(huge.clone()), Message::user("hi")],
        ),
    ];
    for (name, messages) in cases {
        let values: Vec<String> = prompt(&messages, true)
            .iter()
            .map(|kv| json_of(kv).to_string())
            .collect();
        assert!(values.iter().any(|v| v.contains(MARK)), "{name}: no mark");
    }
    // A prompt within the cap is whole, with no mark.
    let small = prompt(&[Message::user("short")], false);
    assert!(!json_of(&small[0]).to_string().contains(MARK));
    // The text kept is the prompt's start, cut at a character boundary.
    let kept = json_of(&prompt(&[Message::user(huge.clone())], false)[0]);
    let content = kept[0]["parts"][0]["content"].as_str().unwrap();
    let kept_text = content.strip_suffix(MARK).unwrap();
    assert!(huge.starts_with(kept_text));
    assert!(kept_text.len() > CAP / 2, "{}", kept_text.len());
}
