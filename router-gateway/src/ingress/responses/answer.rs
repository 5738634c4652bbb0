//! A whole answer as a `response` object, and the pieces the stream shares with it: ids, items,
//! usage, how a response ended.
//!
//! Output items come in this order: a `reasoning` item per thought, a `message` with the text
//! (or the model's refusal), a `function_call` per tool call. Every id is made from the
//! request's, so that a stream's items have the ids a whole answer's would.

use router_sdk::{ChatResponse, FinishReason, Thought, ToolCall, Usage};
use serde_json::{Value, json};

use super::tools::Names;
use super::{Asked, Echo, thought};
use crate::ingress::Answering;

/// The response's id: `resp_` and the request's id.
pub(super) fn response_id(at: &Answering) -> String {
    format!("resp_{}", at.request_id)
}

/// The id of the `n`th message item (0, 1, ...): `msg_` and the request's id, then `_n` after
/// the first.
pub(super) fn message_id(at: &Answering, n: usize) -> String {
    match n {
        0 => format!("msg_{}", at.request_id),
        n => format!("msg_{}_{n}", at.request_id),
    }
}

/// The id of the `n`th reasoning item.
pub(super) fn reasoning_id(at: &Answering, n: usize) -> String {
    format!("rs_{}_{n}", at.request_id)
}

/// The id of the `n`th function call item (its `call_id` is the provider's).
pub(super) fn call_id(at: &Answering, n: usize) -> String {
    format!("fc_{}_{n}", at.request_id)
}

/// Where a response stands.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum End {
    InProgress,
    Completed,
    /// Cut short, for this `incomplete_details.reason`.
    Incomplete(&'static str),
    /// Failed with this `error` (`{code, message}`).
    Failed(Value),
}

impl End {
    /// How an answer that finished for `reason` ended: `incomplete` when it hit
    /// `max_output_tokens` or a content filter, else `completed`.
    pub(super) fn of(reason: Option<&FinishReason>) -> Self {
        match reason {
            Some(FinishReason::Length) => End::Incomplete("max_output_tokens"),
            Some(FinishReason::ContentFilter) => End::Incomplete("content_filter"),
            _ => End::Completed,
        }
    }

    /// The `status` of the item the answer ended in.
    pub(super) fn item_status(&self) -> &'static str {
        match self {
            End::Incomplete(_) => "incomplete",
            _ => "completed",
        }
    }
}

/// A `response` object: where it stands, its output items and usage (`null` until known).
pub(super) fn object(
    at: &Answering,
    echo: &Echo,
    end: &End,
    output: Vec<Value>,
    usage: Value,
) -> Value {
    let (status, incomplete, error) = match end {
        End::InProgress => ("in_progress", Value::Null, Value::Null),
        End::Completed => ("completed", Value::Null, Value::Null),
        End::Incomplete(reason) => ("incomplete", json!({"reason": reason}), Value::Null),
        End::Failed(error) => ("failed", Value::Null, error.clone()),
    };
    json!({
        "id": response_id(at),
        "object": "response",
        "created_at": at.created,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "model": at.model,
        "output": output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "tool_choice": echo.tool_choice,
        "tools": echo.tools,
        "usage": usage,
    })
}

/// Usage as Responses counts it: `input_tokens` includes the cached ones, `output_tokens` the
/// reasoning ones. `cache_write_tokens` (which the SDKs' `Response` requires) is 0: the router
/// does not count cache writes yet.
pub(super) fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_prompt_tokens, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total_tokens(),
    })
}

/// A reasoning item: the thought's text as its summary, and `encrypted_content` carrying the
/// whole thought (none when the thought's origin is unknown).
pub(super) fn reasoning_item(id: &str, text: &str, encrypted: Option<String>) -> Value {
    let summary: Vec<Value> = if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "summary_text", "text": text})]
    };
    json!({"type": "reasoning", "id": id, "summary": summary, "encrypted_content": encrypted})
}

/// A thought's reasoning item.
fn thought_item(id: &str, t: &Thought) -> Value {
    reasoning_item(id, &t.text, Some(thought::encode(t)))
}

/// An `output_text` content part.
pub(super) fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// A `refusal` content part.
pub(super) fn refusal_part(refusal: &str) -> Value {
    json!({"type": "refusal", "refusal": refusal})
}

/// An assistant message item of `content` parts.
pub(super) fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

/// A function call item, naming the function as the caller offered it.
pub(super) fn call_item(id: &str, call: &ToolCall, names: &Names, status: &str) -> Value {
    let (namespace, name) = names.caller(&call.name);
    let mut item = json!({
        "type": "function_call",
        "id": id,
        "call_id": call.id,
        "name": name,
        "arguments": call.arguments,
        "status": status,
    });
    if let Some(namespace) = namespace {
        item["namespace"] = namespace.into();
    }
    item
}

/// A whole answer: its thoughts, its text or refusal, its tool calls; the last item is
/// `incomplete` when the answer was cut short.
pub(super) fn response(answer: &ChatResponse, at: &Answering, asked: &Asked) -> Value {
    let r = &answer.receipt;
    let end = End::of(r.finish_reason.as_ref());
    let mut output: Vec<Value> = answer
        .thinking
        .iter()
        .enumerate()
        .map(|(n, t)| thought_item(&reasoning_id(at, n), t))
        .collect();
    let content = match &r.refusal {
        Some(refusal) if answer.content.is_empty() => vec![refusal_part(refusal)],
        _ if answer.content.is_empty() => Vec::new(),
        _ => vec![text_part(&answer.content)],
    };
    if !content.is_empty() {
        output.push(message_item(&message_id(at, 0), "completed", content));
    }
    for (n, call) in answer.tool_calls.iter().enumerate() {
        let id = call_id(at, n);
        output.push(call_item(&id, call, &asked.names, "completed"));
    }
    if let Some(last) = output
        .last_mut()
        .filter(|item| item.get("status").is_some())
    {
        last["status"] = end.item_status().into();
    }
    object(at, &asked.echo, &end, output, usage(&r.usage))
}
