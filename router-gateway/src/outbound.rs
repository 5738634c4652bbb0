//! The OpenAI shapes of what the router answers: a `chat.completion`, `chat.completion.chunk`s
//! for a stream, and errors.

use router_sdk::{ChatResponse, FinishReason, Receipt, ToolCall, ToolCallDelta, Usage};
use serde_json::{Value, json};

/// OpenAI's name of a finish reason. A reason OpenAI has no name for (Anthropic's
/// `pause_turn`, Gemini's `MALFORMED_FUNCTION_CALL` or `OTHER`) is `stop`: clients that read
/// the field as OpenAI's closed set (the .NET SDK among them) fail on any other value.
fn finish_reason(reason: Option<&FinishReason>) -> Value {
    reason.map_or(Value::Null, |r| match r {
        FinishReason::Other(name) if name != "function_call" => "stop".into(),
        r => r.as_str().into(),
    })
}

fn tool_call(c: &ToolCall) -> Value {
    json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

/// `usage`, with the cached and reasoning parts OpenAI reports.
pub(crate) fn usage(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens(),
        "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    })
}

/// The id of an answer: the provider's, else one made of the request's id.
pub(crate) fn id(receipt_response_id: Option<&str>, request_id: &str) -> String {
    receipt_response_id.map_or_else(|| format!("chatcmpl-{request_id}"), str::to_owned)
}

/// A whole answer as a `chat.completion`.
pub(crate) fn completion(answer: &ChatResponse, created: u64) -> Value {
    let r = &answer.receipt;
    let mut message = json!({"role": "assistant", "content": answer.content});
    if let Some(refusal) = &r.refusal {
        if answer.content.is_empty() {
            message["content"] = Value::Null;
        }
        message["refusal"] = refusal.as_str().into();
    }
    if !answer.tool_calls.is_empty() {
        if answer.content.is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = answer.tool_calls.iter().map(tool_call).collect();
    }
    json!({
        "id": id(r.response_id.as_deref(), &r.request_id),
        "object": "chat.completion",
        "created": created,
        "model": r.model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason(r.finish_reason.as_ref()),
        }],
        "usage": usage(&r.usage),
    })
}

/// Builds the chunks of one streamed answer.
#[derive(Debug)]
pub(crate) struct Chunks {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) created: u64,
    /// Whether the first delta (which carries the role) went out.
    started: bool,
}

impl Chunks {
    pub(crate) fn new(id: String, model: String, created: u64) -> Self {
        Self {
            id,
            model,
            created,
            started: false,
        }
    }

    fn chunk(&self, delta: Value, finish: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    /// The first delta carries the role.
    fn opening(&mut self, mut delta: Value) -> Value {
        if !self.started {
            self.started = true;
            delta["role"] = "assistant".into();
        }
        delta
    }

    /// More text.
    pub(crate) fn text(&mut self, text: &str) -> Value {
        let delta = self.opening(json!({"content": text}));
        self.chunk(delta, Value::Null)
    }

    /// A piece of a tool call.
    pub(crate) fn tool_call(&mut self, d: &ToolCallDelta) -> Value {
        let mut function = serde_json::Map::new();
        if let Some(name) = &d.name {
            function.insert("name".into(), name.as_str().into());
        }
        function.insert("arguments".into(), d.arguments.as_str().into());
        let mut call = json!({"index": d.index, "function": function});
        if let Some(id) = &d.id {
            call["id"] = id.as_str().into();
            call["type"] = "function".into();
        }
        let delta = self.opening(json!({"tool_calls": [call]}));
        self.chunk(delta, Value::Null)
    }

    /// The finish reason, and when asked for, a last chunk with usage and no choices.
    /// A refusal, which the router hands over whole at the end, goes in the last delta.
    pub(crate) fn end(&mut self, receipt: &Receipt, include_usage: bool) -> Vec<Value> {
        let delta = match &receipt.refusal {
            Some(refusal) => self.opening(json!({"refusal": refusal})),
            None => self.opening(json!({})),
        };
        let mut out = vec![self.chunk(delta, finish_reason(receipt.finish_reason.as_ref()))];
        if include_usage {
            out.push(json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage(&receipt.usage),
            }));
        }
        out
    }
}

/// An error body in OpenAI's shape.
pub(crate) fn error(kind: &str, code: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "code": code, "param": null}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_goes_out_as_openai_sends_it() {
        let receipt = Receipt {
            request_id: "r1".into(),
            response_id: None,
            finish_reason: Some(FinishReason::Stop),
            refusal: Some("I can't help with that.".into()),
            provider: "oa".into(),
            model: "m".into(),
            usage: Usage::new(9, 6),
            cost_usd: 0.0,
            attempts: Vec::new(),
            waited: std::time::Duration::ZERO,
            queue_position: None,
            upstream: std::time::Duration::ZERO,
            tenant_window: None,
        };
        let answer = ChatResponse {
            content: String::new(),
            tool_calls: Vec::new(),
            thinking: Vec::new(),
            receipt: receipt.clone(),
        };
        let message = &completion(&answer, 0)["choices"][0]["message"];
        assert_eq!(message["content"], Value::Null);
        assert_eq!(message["refusal"], "I can't help with that.");
        let mut chunks = Chunks::new("c".into(), "m".into(), 0);
        let last = &chunks.end(&receipt, false)[0]["choices"][0];
        assert_eq!(last["delta"]["refusal"], "I can't help with that.");
        assert_eq!(last["finish_reason"], "stop");
    }

    #[test]
    fn finish_reasons_are_openais_names_only() {
        let name = |r: FinishReason| finish_reason(Some(&r));
        assert_eq!(name(FinishReason::Length), "length");
        assert_eq!(name(FinishReason::ToolCalls), "tool_calls");
        assert_eq!(name(FinishReason::ContentFilter), "content_filter");
        assert_eq!(
            name(FinishReason::Other("function_call".into())),
            "function_call"
        );
        assert_eq!(name(FinishReason::Other("pause_turn".into())), "stop");
        assert_eq!(
            name(FinishReason::Other("MALFORMED_FUNCTION_CALL".into())),
            "stop"
        );
        assert_eq!(finish_reason(None), Value::Null);
    }
}
