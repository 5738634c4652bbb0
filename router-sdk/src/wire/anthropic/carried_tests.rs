//! What Anthropic is sent back of earlier turns: its own signed thinking, and cache breakpoints.
#![allow(clippy::unwrap_used)]

use router_core::config::Api;
use serde_json::{Value, json};

use super::body::body;
use crate::types::{ChatRequest, Message, Reasoning, Thought, ToolCall};

fn signed(origin: Api, signature: &str) -> Thought {
    Thought {
        origin,
        text: "Look it up first.".into(),
        signature: Some(signature.into()),
        redacted: None,
    }
}

/// A tool turn whose assistant message carries `thinking`, with thinking asked for again.
fn tool_turn(thinking: Vec<Thought>) -> ChatRequest {
    let call = ToolCall {
        id: "toolu_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"city":"Paris"}"#.into(),
    };
    let assistant = Message {
        thinking,
        ..Message::assistant_calls("", vec![call])
    };
    ChatRequest {
        messages: vec![
            Message::user("Weather in Paris?"),
            assistant,
            Message::tool_result("toolu_1", "18C"),
        ],
        reasoning: Some(Reasoning {
            effort: None,
            budget_tokens: Some(2048),
        }),
        ..ChatRequest::default()
    }
}

#[test]
fn anthropics_own_thinking_goes_back_first_in_its_turn() {
    let redacted = Thought {
        origin: Api::Anthropic,
        text: String::new(),
        signature: None,
        redacted: Some("opaque".into()),
    };
    let req = tool_turn(vec![signed(Api::Anthropic, "sig-a"), redacted]);
    let got = body("claude-sonnet-4-5", &req, 8192, false);
    let blocks = &got["messages"][1]["content"];
    assert_eq!(
        blocks[0],
        json!({"type": "thinking", "thinking": "Look it up first.", "signature": "sig-a"})
    );
    assert_eq!(
        blocks[1],
        json!({"type": "redacted_thinking", "data": "opaque"})
    );
    assert_eq!(blocks[2]["type"], "tool_use");
    assert_eq!(got["thinking"]["budget_tokens"], 2048);
}

#[test]
fn another_providers_thinking_is_left_out_and_so_is_thinking_then() {
    // Gemini's signature means nothing to Anthropic; without Anthropic's own thinking before
    // the tool call, Anthropic refuses thinking in this turn, so none is asked for.
    let req = tool_turn(vec![signed(Api::Gemini, "sig-g")]);
    let got = body("claude-sonnet-4-5", &req, 8192, false);
    let blocks = got["messages"][1]["content"].as_array().unwrap();
    assert!(blocks.iter().all(|b| b["type"] != "thinking"), "{blocks:?}");
    assert_eq!(got.get("thinking"), None);
    // An unsigned thought of Anthropic's cannot be checked either.
    let unsigned = Thought {
        signature: None,
        ..signed(Api::Anthropic, "")
    };
    let got = body("claude-sonnet-4-5", &tool_turn(vec![unsigned]), 8192, false);
    assert_eq!(got.get("thinking"), None);
    // A conversation whose last assistant turn made no call may think.
    let plain = ChatRequest {
        reasoning: tool_turn(Vec::new()).reasoning,
        ..ChatRequest::new("Hi")
    };
    let got = body("claude-sonnet-4-5", &plain, 8192, false);
    assert_eq!(got["thinking"]["budget_tokens"], 2048);
}

/// The blocks of `got` that carry a cache breakpoint, as `(message, block)` indexes.
fn breakpoints(got: &Value) -> Vec<(usize, usize)> {
    let messages = got["messages"].as_array().unwrap();
    let mut marks = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            if b.get("cache_control").is_some() {
                marks.push((i, j));
            }
        }
    }
    marks
}

#[test]
fn cached_messages_end_in_breakpoints_at_most_four() {
    let cached = |m: Message| Message { cache: true, ..m };
    let mut req = ChatRequest {
        messages: vec![cached(Message::system("You are terse."))],
        ..ChatRequest::default()
    };
    for turn in 0..4 {
        req.messages.push(cached(Message::user(format!("q{turn}"))));
        req.messages.push(Message::assistant(format!("a{turn}")));
    }
    req.messages
        .push(cached(Message::tool_result("toolu_9", "ok")));
    let got = body("claude-sonnet-4-5", &req, 1024, false);
    assert_eq!(
        got["system"],
        json!([{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}])
    );
    // Five marked messages, one system breakpoint: the last three messages keep theirs.
    assert_eq!(breakpoints(&got), [(4, 0), (6, 0), (8, 0)]);
    assert_eq!(got["messages"][8]["content"][0]["type"], "tool_result");
    // Unmarked, a one-text message is a string, as before.
    let plain = body("claude-sonnet-4-5", &ChatRequest::new("Hi"), 1024, false);
    assert_eq!(plain["messages"][0]["content"], "Hi");
}

#[test]
fn a_history_calling_tools_no_longer_offered_defines_them_and_calls_none() {
    // An agent's summary turn: its history of calls, `tools: []`.
    let mut req = tool_turn(Vec::new());
    req.reasoning = None;
    req.messages
        .push(Message::user("Summarize the conversation."));
    let got = body("claude-sonnet-4-5", &req, 1024, false);
    assert_eq!(got["tools"][0]["name"], "get_weather");
    assert_eq!(got["tools"].as_array().unwrap().len(), 1);
    assert_eq!(got["tool_choice"], json!({"type": "none"}));
    // Offered, the tool goes as it is, and the choice is the request's.
    req.tools = vec![crate::types::Tool {
        name: "get_weather".into(),
        description: None,
        parameters: json!({"type": "object", "properties": {}}),
        strict: false,
    }];
    let got = body("claude-sonnet-4-5", &req, 1024, false);
    assert_eq!(got["tools"].as_array().unwrap().len(), 1);
    assert_eq!(got["tools"][0]["input_schema"]["properties"], json!({}));
    assert_eq!(got.get("tool_choice"), None);
}

#[test]
fn system_messages_keep_their_own_breakpoints() {
    let cached = |m: Message| Message { cache: true, ..m };
    let req = ChatRequest {
        messages: vec![
            Message::system("billing header"),
            cached(Message::system("the agent's own prompt")),
            cached(Message::user("Hi")),
        ],
        ..ChatRequest::default()
    };
    let got = body("claude-sonnet-4-5", &req, 1024, false);
    assert_eq!(
        got["system"],
        json!([
            {"type": "text", "text": "billing header"},
            {"type": "text", "text": "the agent's own prompt", "cache_control": {"type": "ephemeral"}}
        ])
    );
    assert_eq!(breakpoints(&got), [(0, 0)]);
    // Five marked system messages: the last four keep theirs, and no message can have one.
    let many = ChatRequest {
        messages: (0..5)
            .map(|i| cached(Message::system(format!("part {i}"))))
            .chain([cached(Message::user("Hi"))])
            .collect(),
        ..ChatRequest::default()
    };
    let got = body("claude-sonnet-4-5", &many, 1024, false);
    let marked: Vec<bool> = got["system"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.get("cache_control").is_some())
        .collect();
    assert_eq!(marked, [false, true, true, true, true]);
    assert!(breakpoints(&got).is_empty());
}
