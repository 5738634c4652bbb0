//! The Messages ingress: bodies read into the router's request, answers written as Anthropic
//! writes them.
#![allow(clippy::unwrap_used)]

use axum::http::HeaderMap;
use router_core::config::Api;
use router_sdk::{
    ChatChunk, ChatResponse, FinishReason, Image, Receipt, Role, ThinkingDelta, Thought, ToolCall,
    ToolCallDelta, ToolChoice, Usage,
};
use serde_json::{Value, json};

use super::Messages;
use crate::errors::{ApiError, Shape};
use crate::ingress::{Answering, Ingress, Read};

/// A turn of Claude Code's, cut down: cached system blocks, a function tool, one deferred, a
/// tool Anthropic runs itself, thinking, the signed thinking and call of the last turn, and
/// a cached tool result followed by text.
fn claude_code_turn() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": true,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [
            {"name": "Bash", "description": "Run a command",
             "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                              "required": ["command"], "additionalProperties": false}},
            {"name": "Later", "description": "Deferred", "defer_loading": true,
             "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
        ],
        "thinking": {"type": "enabled", "budget_tokens": 31999, "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "{\"session_id\":\"s-1\"}"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Run echo ok"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo ok"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok\n",
                 "is_error": false, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "And now?"}
            ]}
        ]
    })
}

fn read(body: &Value) -> Result<Read, String> {
    let mut headers = HeaderMap::new();
    headers.insert(
        "anthropic-beta",
        "interleaved-thinking-2025-05-14".parse().unwrap(),
    );
    Messages::read(body.to_string().as_bytes(), &headers).map(|(read, ())| read)
}

#[test]
fn a_claude_code_turn_reads_into_the_routers_request() {
    let read = read(&claude_code_turn()).unwrap();
    assert!(read.stream);
    let r = read.request;
    assert_eq!(r.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(r.max_tokens, Some(32000));
    let budget = r.reasoning.and_then(|x| x.budget_tokens);
    assert_eq!(budget, Some(31999));
    assert_eq!(r.user.as_deref(), Some("{\"session_id\":\"s-1\"}"));
    // The tool Anthropic runs itself has no place elsewhere.
    let names: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["Bash", "Later"]);
    assert_eq!(r.tools[0].parameters["required"], json!(["command"]));
    let m = &r.messages;
    let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::User
        ]
    );
    // One system message per block, each cached as its block is.
    assert_eq!(
        m[0].text_content(),
        "x-anthropic-billing-header: cc_version=2"
    );
    assert_eq!(m[1].text_content(), "You are Claude Code.");
    assert!(!m[0].cache && m[1].cache);
    assert_eq!(m[3].tool_calls[0].arguments, r#"{"command":"echo ok"}"#);
    let thought = &m[3].thinking[0];
    assert_eq!(
        (thought.origin, thought.signature.as_deref()),
        (Api::Anthropic, Some("sig-1"))
    );
    assert_eq!(m[4].tool_call_id.as_deref(), Some("toolu_1"));
    assert_eq!(m[4].text_content(), "ok\n");
    assert!(m[4].cache && !m[5].cache);
    assert_eq!(m[5].text_content(), "And now?");
    // What only Anthropic's API knows is not passed on as a field; its beta header is.
    assert!(r.extra_body.is_empty());
    assert_eq!(
        r.headers,
        [(
            "anthropic-beta".to_owned(),
            "interleaved-thinking-2025-05-14".to_owned()
        )]
    );
}

#[test]
fn choices_effort_errors_and_empty_signatures_read_as_the_router_takes_them() {
    let body = json!({
        "model": "m", "max_tokens": 10,
        "thinking": {"type": "adaptive"}, "output_config": {"effort": "max"},
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "", "signature": ""},
                {"type": "text", "text": "Calling."}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "is_error": true,
                 "content": [{"type": "text", "text": "no such file"}]}
            ]}
        ]
    });
    let r = read(&body).unwrap().request;
    assert!(!read(&body).unwrap().stream, "no `stream`: a whole answer");
    assert_eq!(r.tool_choice, Some(ToolChoice::Required));
    assert_eq!(r.parallel_tool_calls, Some(false));
    assert_eq!(r.reasoning.unwrap().effort, Some(router_sdk::Effort::Xhigh));
    // An empty signature (a stream that brought none) is no signature: never sent back.
    assert_eq!(r.messages[1].thinking[0].signature, None);
    let error: Vec<&str> = r.messages[2].texts().collect();
    assert_eq!(error, ["Error: ", "no such file"]);
    let off = json!({"model": "m", "thinking": {"type": "disabled"},
                     "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(read(&off).unwrap().request.reasoning, None);
}

#[test]
fn images_read_from_base64_and_url_sources_in_turns_and_tool_results() {
    let png = "iVBORw0KGgo=";
    let body = json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "shot", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": [
                    {"type": "text", "text": "the screen:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
                ]}
            ]}
        ]
    });
    let r = read(&body).unwrap().request;
    let images: Vec<&Image> = r.messages[0].images().collect();
    assert_eq!(
        images,
        [
            &Image::Base64 {
                media_type: "image/png".into(),
                data: png.into()
            },
            &Image::Url {
                url: "https://x.test/a.jpg".into()
            }
        ]
    );
    assert_eq!(r.messages[2].role, Role::Tool);
    assert_eq!(r.messages[2].images().count(), 1);
    assert_eq!(r.messages[2].text_content(), "the screen:");
    assert!(r.features().images && r.features().tools);
}

#[test]
fn a_malformed_body_is_refused_naming_the_field() {
    let cases = [
        (json!({"messages": []}), "missing field `model`"),
        (
            json!({"model": "m", "messages": [{"role": "system", "content": "x"}]}),
            "`messages[0].role`",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]}),
            "`messages[0].content[0]`: only a user turn",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}),
            "`messages[0].content[0]`: only an assistant turn",
        ),
        (json!({"model": "m", "messages": "Hi"}), "`messages`"),
    ];
    for (body, want) in cases {
        let err = read(&body).unwrap_err();
        assert!(err.contains(want), "{body}: {err}");
    }
}

fn at() -> Answering {
    Answering {
        request_id: "r1".into(),
        model: "claude-sonnet-4-5".into(),
        created: 0,
        origin: Some(Api::Anthropic),
    }
}

fn receipt(finish: FinishReason) -> Receipt {
    Receipt {
        request_id: "r1".into(),
        response_id: Some("msg_up".into()),
        finish_reason: Some(finish),
        refusal: None,
        provider: "an".into(),
        model: "claude-sonnet-4-5".into(),
        usage: Usage {
            cached_prompt_tokens: 900,
            ..Usage::new(1000, 50)
        },
        cost_usd: 0.0,
        attempts: Vec::new(),
        waited: std::time::Duration::ZERO,
        queue_position: None,
        upstream: std::time::Duration::ZERO,
        tenant_window: None,
    }
}

#[test]
fn a_whole_answer_is_anthropics_message() {
    let call = ToolCall {
        id: "toolu_1".into(),
        name: "Bash".into(),
        arguments: r#"{"command":"ls"}"#.into(),
    };
    let answer = ChatResponse {
        content: "Listing.".into(),
        tool_calls: vec![call],
        thinking: vec![Thought {
            origin: Api::Anthropic,
            text: "Look first.".into(),
            signature: Some("sig".into()),
            redacted: None,
        }],
        receipt: receipt(FinishReason::ToolCalls),
    };
    let got = Messages::answer(&answer, &at(), &());
    let want = json!({
        "id": "msg_r1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "Look first.", "signature": "sig"},
            {"type": "text", "text": "Listing."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 50,
                  "cache_read_input_tokens": 900, "cache_creation_input_tokens": 0}
    });
    assert_eq!(got, want);
}

#[test]
fn cache_writes_are_given_back_as_anthropic_reports_them() {
    let usage = Usage {
        cached_prompt_tokens: 500,
        cache_write_tokens: 3_000,
        cache_write_1h_tokens: 2_000,
        ..Usage::new(3_550, 200)
    };
    let want = json!({"input_tokens": 50, "output_tokens": 200,
        "cache_read_input_tokens": 500, "cache_creation_input_tokens": 3000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000}});
    assert_eq!(super::answer::usage(&usage), want);
}

/// The `(event name, data)` of every event `chunks` make.
fn events(chunks: Vec<ChatChunk>) -> Vec<(&'static str, Value)> {
    let mut writer = Messages::events(at(), false, ());
    chunks
        .into_iter()
        .flat_map(|c| writer.chunk(c))
        .map(|e| (e.name.unwrap(), serde_json::from_str(&e.data).unwrap()))
        .collect()
}

#[test]
fn a_stream_is_anthropics_event_sequence_block_by_block() {
    let piece = |index, id: Option<&str>, arguments: &str| ToolCallDelta {
        index,
        id: id.map(Into::into),
        name: id.map(|_| "Bash".into()),
        arguments: arguments.into(),
    };
    let got = events(vec![
        ChatChunk::Thinking(ThinkingDelta::Text("Hm.".into())),
        ChatChunk::Thinking(ThinkingDelta::Signature("sig".into())),
        ChatChunk::Delta("Let me ".into()),
        ChatChunk::Delta("look.".into()),
        ChatChunk::ToolCallDelta(piece(0, Some("toolu_1"), "")),
        ChatChunk::ToolCallDelta(piece(0, None, "{\"command\":")),
        ChatChunk::ToolCallDelta(piece(0, None, "\"ls\"}")),
        ChatChunk::ToolCallDelta(piece(1, Some("toolu_2"), "{}")),
        ChatChunk::ToolCalls(Vec::new()),
        ChatChunk::Done(receipt(FinishReason::ToolCalls)),
    ]);
    let names: Vec<&str> = got.iter().map(|(n, _)| *n).collect();
    let block = ["content_block_start", "content_block_delta"];
    let want: Vec<&str> = [
        &["message_start", "ping"][..],
        &block,
        &["content_block_delta"],
    ]
    .concat()
    .into_iter()
    .chain(["content_block_stop"])
    .chain(block)
    .chain(["content_block_delta", "content_block_stop"])
    .chain(block)
    .chain(["content_block_delta", "content_block_stop"])
    .chain(block)
    .chain(["content_block_stop", "message_delta", "message_stop"])
    .collect();
    assert_eq!(names, want);
    assert_eq!(got[0].1["message"]["id"], "msg_r1");
    assert_eq!(got[2].1["content_block"]["type"], "thinking");
    assert_eq!(
        got[4].1["delta"],
        json!({"type": "signature_delta", "signature": "sig"})
    );
    assert_eq!(got[6].1["index"], 1);
    assert_eq!(got[6].1["content_block"]["type"], "text");
    let tool = &got[10].1;
    assert_eq!(
        (tool["index"].clone(), tool["content_block"]["id"].clone()),
        (json!(2), json!("toolu_1"))
    );
    assert_eq!(got[11].1["delta"]["partial_json"], "{\"command\":");
    let end = &got[got.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "tool_use");
    assert_eq!(end["usage"]["input_tokens"], 100);
    assert_eq!(end["usage"]["cache_read_input_tokens"], 900);
}

#[test]
fn a_broken_stream_ends_with_anthropics_error_event() {
    let mut writer = Messages::events(at(), false, ());
    let error = ApiError::bad_request("`messages`: empty");
    let got = writer.failed(&error);
    assert_eq!(got[0].name, Some("error"));
    let data: Value = serde_json::from_str(&got[0].data).unwrap();
    assert_eq!(
        data,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "`messages`: empty"}})
    );
    assert_eq!(error.body_in(Shape::Anthropic), data);
    // Nothing of the answer came: a refusal alone is its text.
    let refused = Receipt {
        refusal: Some("No.".into()),
        ..receipt(FinishReason::ContentFilter)
    };
    let got = events(vec![ChatChunk::Done(refused)]);
    assert_eq!(got[3].1["delta"]["text"], "No.");
    assert_eq!(got[got.len() - 2].1["delta"]["stop_reason"], "refusal");
}
