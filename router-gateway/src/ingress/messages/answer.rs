//! A whole answer as Anthropic's `message`, and the pieces the stream shares with it: the id,
//! the stop reason, usage, content blocks.

use router_core::config::Api;
use router_sdk::{ChatResponse, FinishReason, Thought, ToolCall, Usage};
use serde_json::{Value, json};

use crate::ingress::Answering;

/// The answer's id: `msg_` and the request's id, the same in every event of a stream.
pub(super) fn id(at: &Answering) -> String {
    format!("msg_{}", at.request_id)
}

/// Anthropic's `stop_reason` for `reason`. Anthropic's own names pass as they are; a reason it
/// has no name for is `end_turn`.
pub(super) fn stop_reason(reason: Option<&FinishReason>) -> Value {
    let Some(reason) = reason else {
        return Value::Null;
    };
    match reason {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter => "refusal",
        FinishReason::Other(name) => match name.as_str() {
            "pause_turn" | "stop_sequence" | "model_context_window_exceeded" => name.as_str(),
            _ => "end_turn",
        },
    }
    .into()
}

/// Usage as Anthropic counts it: `input_tokens` leaves out the tokens read from and written to
/// the cache, and the writes are split by how long they are kept.
pub(super) fn usage(u: &Usage) -> Value {
    let cached = u.cached_prompt_tokens;
    let written = u
        .cache_write_tokens
        .min(u.prompt_tokens.saturating_sub(cached));
    let hour = u.cache_write_1h_tokens.min(written);
    let mut usage = json!({
        "input_tokens": u.prompt_tokens.saturating_sub(cached).saturating_sub(written),
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": written,
    });
    if written > 0 {
        usage["cache_creation"] = json!({
            "ephemeral_5m_input_tokens": written - hour,
            "ephemeral_1h_input_tokens": hour,
        });
    }
    usage
}

/// A thought as its block, when Anthropic wrote it (no other provider's thinking can come back
/// to Anthropic, so none goes out as Anthropic's).
pub(super) fn thought_block(t: &Thought) -> Option<Value> {
    if t.origin != Api::Anthropic {
        return None;
    }
    Some(match &t.redacted {
        Some(data) => json!({"type": "redacted_thinking", "data": data}),
        None => json!({
            "type": "thinking",
            "thinking": t.text,
            "signature": t.signature.as_deref().unwrap_or_default(),
        }),
    })
}

/// A tool call as a `tool_use` block: its arguments as the `input` object (`{}` when they are
/// not one).
pub(super) fn tool_use(call: &ToolCall) -> Value {
    let input = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

/// A whole answer: thinking, text and tool calls as blocks, in that order.
pub(super) fn message(answer: &ChatResponse, at: &Answering) -> Value {
    let r = &answer.receipt;
    let mut content: Vec<Value> = answer.thinking.iter().filter_map(thought_block).collect();
    if !answer.content.is_empty() {
        content.push(json!({"type": "text", "text": answer.content}));
    }
    if let Some(refusal) = r.refusal.as_ref().filter(|_| answer.content.is_empty()) {
        content.push(json!({"type": "text", "text": refusal}));
    }
    content.extend(answer.tool_calls.iter().map(tool_use));
    json!({
        "id": id(at),
        "type": "message",
        "role": "assistant",
        "model": at.model,
        "content": content,
        "stop_reason": stop_reason(r.finish_reason.as_ref()),
        "stop_sequence": null,
        "usage": usage(&r.usage),
    })
}
