//! A streamed answer as Anthropic's events: `message_start` and a `ping`, then one content block
//! at a time (`content_block_start`, its deltas, `content_block_stop`): thinking
//! (`thinking_delta`s, then a `signature_delta`), text (`text_delta`s), each tool call
//! (`input_json_delta`s); then `message_delta` with the stop reason and usage, and
//! `message_stop`. A stream that breaks ends with an `error` event.

use router_sdk::{ChatChunk, Receipt, ThinkingDelta, ToolCallDelta};
use serde_json::{Value, json};

use super::answer::{id, stop_reason, usage};
use crate::errors::{ApiError, Shape};
use crate::ingress::{Answering, Events, Sse};

/// The block open now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    /// The tool call of this index.
    Tool(u32),
}

/// Writes the events of one answer.
pub(super) struct MessageEvents {
    at: Answering,
    started: bool,
    /// The index the next block gets.
    next: u32,
    open: Option<Open>,
}

impl MessageEvents {
    pub(super) fn new(at: Answering) -> Self {
        Self {
            at,
            started: false,
            next: 0,
            open: None,
        }
    }

    /// `message_start` and a `ping`, before anything else.
    fn start(&mut self, out: &mut Vec<Sse>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({
            "id": id(&self.at),
            "type": "message",
            "role": "assistant",
            "model": self.at.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        out.push(event(
            "message_start",
            &json!({"type": "message_start", "message": message}),
        ));
        out.push(event("ping", &json!({"type": "ping"})));
    }

    /// Opens a block of `kind` with `block` as its start, closing the one open.
    fn open(&mut self, kind: Open, block: Value, out: &mut Vec<Sse>) {
        self.close(out);
        let index = self.next;
        self.next += 1;
        self.open = Some(kind);
        out.push(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
    }

    /// Closes the block open, if any.
    fn close(&mut self, out: &mut Vec<Sse>) {
        if self.open.take().is_some() {
            let index = self.next - 1;
            out.push(event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    /// A delta of the block open.
    fn delta(&self, delta: Value, out: &mut Vec<Sse>) {
        let index = self.next - 1;
        out.push(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }

    fn thinking(&mut self, piece: ThinkingDelta, out: &mut Vec<Sse>) {
        if let ThinkingDelta::Redacted(data) = piece {
            let block = json!({"type": "redacted_thinking", "data": data});
            self.open(Open::Thinking, block, out);
            self.close(out);
            return;
        }
        if self.open != Some(Open::Thinking) {
            let block = json!({"type": "thinking", "thinking": "", "signature": ""});
            self.open(Open::Thinking, block, out);
        }
        match piece {
            ThinkingDelta::Text(text) if text.is_empty() => {}
            ThinkingDelta::Text(text) => {
                self.delta(json!({"type": "thinking_delta", "thinking": text}), out);
            }
            ThinkingDelta::Signature(signature) => {
                let delta = json!({"type": "signature_delta", "signature": signature});
                self.delta(delta, out);
                self.close(out);
            }
            ThinkingDelta::Redacted(_) => {}
        }
    }

    fn text(&mut self, text: String, out: &mut Vec<Sse>) {
        if self.open != Some(Open::Text) {
            self.open(Open::Text, json!({"type": "text", "text": ""}), out);
        }
        self.delta(json!({"type": "text_delta", "text": text}), out);
    }

    fn tool_call(&mut self, d: ToolCallDelta, out: &mut Vec<Sse>) {
        if self.open != Some(Open::Tool(d.index)) {
            let block = json!({
                "type": "tool_use",
                "id": d.id.unwrap_or_default(),
                "name": d.name.unwrap_or_default(),
                "input": {},
            });
            self.open(Open::Tool(d.index), block, out);
        }
        if !d.arguments.is_empty() {
            let delta = json!({"type": "input_json_delta", "partial_json": d.arguments});
            self.delta(delta, out);
        }
    }

    fn end(&mut self, receipt: &Receipt, out: &mut Vec<Sse>) {
        if let Some(refusal) = receipt.refusal.as_ref().filter(|_| self.next == 0) {
            self.text(refusal.clone(), out);
        }
        self.close(out);
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(receipt.finish_reason.as_ref()), "stop_sequence": null},
            "usage": usage(&receipt.usage),
        });
        out.push(event("message_delta", &delta));
        out.push(event("message_stop", &json!({"type": "message_stop"})));
    }
}

impl Events for MessageEvents {
    fn chunk(&mut self, chunk: ChatChunk) -> Vec<Sse> {
        let mut out = Vec::new();
        self.start(&mut out);
        match chunk {
            ChatChunk::Thinking(piece) => self.thinking(piece, &mut out),
            ChatChunk::Delta(text) => self.text(text, &mut out),
            ChatChunk::ToolCallDelta(d) => self.tool_call(d, &mut out),
            ChatChunk::Done(receipt) => self.end(&receipt, &mut out),
            // Each went out piece by piece.
            ChatChunk::Thoughts(_) | ChatChunk::ToolCalls(_) => {}
        }
        out
    }

    fn failed(&mut self, error: &ApiError) -> Vec<Sse> {
        vec![event("error", &error.body_in(Shape::Anthropic))]
    }
}

/// An event named `name` with JSON `data`.
fn event(name: &'static str, data: &Value) -> Sse {
    Sse::named(name, data)
}
