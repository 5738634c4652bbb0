//! Prompt and answer text in the server span, when `telemetry.capture_content` turns it on: the
//! GenAI conventions' `gen_ai.system_instructions`, `gen_ai.input.messages` and
//! `gen_ai.output.messages`, each a JSON text in the conventions' shape
//! (`[{"role", "parts": [{"type": "text", "content"}]}]`).
//!
//! Each value is at most [`CAP`] bytes ([`capped`](super::capped)), so that a huge prompt
//! cannot blow up an export.
//!
//! # What is never written
//!
//! Images, thinking and tool definitions are left out. No key and no provider error message
//! reaches these functions: they see only the request's messages and the model's answer.

use opentelemetry_proto::tonic::common::v1::KeyValue;
use router_sdk::{ChatChunk, ChatResponse, FinishReason, Message, Receipt, Role, ToolCall};

use super::attributes::owned_text;
use super::capped::{CAP, Capped, Part, floor_boundary};

/// The prompt's attributes: `gen_ai.input.messages`, and `gen_ai.system_instructions` when the
/// caller's API takes its system prompt apart from the conversation (`system_apart`: its leading
/// system messages go there).
pub(crate) fn prompt(messages: &[Message], system_apart: bool) -> Vec<KeyValue> {
    let leading = if system_apart {
        messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .count()
    } else {
        0
    };
    let (system, conversation) = messages.split_at(leading);
    let mut out = Vec::with_capacity(2);
    if !system.is_empty() {
        let mut w = Capped::default();
        w.parts(system.iter().flat_map(|m| m.texts().map(Part::Text)));
        out.push(owned_text("gen_ai.system_instructions", w.out));
    }
    let mut w = Capped::default();
    w.messages(conversation.iter().map(|m| (m.role.as_str(), parts(m))));
    out.push(owned_text("gen_ai.input.messages", w.out));
    out
}

/// A whole answer as `gen_ai.output.messages`.
pub(crate) fn answer(answer: &ChatResponse) -> KeyValue {
    let r = &answer.receipt;
    let said = Said {
        text: &answer.content,
        refusal: r.refusal.as_deref(),
        calls: &answer.tool_calls,
        finish: finish_reason(r.finish_reason.as_ref()),
    };
    said.attribute()
}

/// A streamed answer's text and tool calls as they come, at most [`CAP`] bytes of them, and
/// how it finished.
#[derive(Debug, Default)]
pub(crate) struct Streamed {
    text: String,
    calls: Vec<ToolCall>,
    /// Bytes held, text and calls.
    held: usize,
    refusal: Option<String>,
    finish: Option<FinishReason>,
}

impl Streamed {
    /// Keeps what `chunk` says of the answer, while there is room.
    pub(crate) fn chunk(&mut self, chunk: &ChatChunk) {
        match chunk {
            ChatChunk::Delta(piece) => {
                let kept = self.room(piece);
                self.text.push_str(kept);
            }
            ChatChunk::ToolCalls(calls) => {
                for call in calls {
                    let arguments = self.room(&call.arguments).to_owned();
                    self.calls.push(ToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments,
                    });
                }
            }
            _ => {}
        }
    }

    /// The receipt's refusal and finish reason, at the stream's end.
    pub(crate) fn receipt(&mut self, receipt: &Receipt) {
        self.refusal.clone_from(&receipt.refusal);
        self.finish.clone_from(&receipt.finish_reason);
    }

    /// The answer as `gen_ai.output.messages`: finished as the receipt said if it `completed`,
    /// else `error` (what came before the break is kept).
    pub(crate) fn attribute(&self, completed: bool) -> KeyValue {
        let finish = if completed {
            finish_reason(self.finish.as_ref())
        } else {
            "error"
        };
        let said = Said {
            text: &self.text,
            refusal: self.refusal.as_deref(),
            calls: &self.calls,
            finish,
        };
        said.attribute()
    }

    /// The start of `piece` that fits in what is left of [`CAP`], counted as held.
    fn room<'a>(&mut self, piece: &'a str) -> &'a str {
        let kept = &piece[..floor_boundary(piece, CAP.saturating_sub(self.held))];
        self.held += kept.len();
        kept
    }
}

/// What the model said, as one output message.
struct Said<'a> {
    text: &'a str,
    refusal: Option<&'a str>,
    calls: &'a [ToolCall],
    finish: &'a str,
}

impl Said<'_> {
    fn attribute(&self) -> KeyValue {
        let texts = [self.text, self.refusal.unwrap_or_default()];
        let parts = texts
            .into_iter()
            .filter(|t| !t.is_empty())
            .map(Part::Text)
            .chain(self.calls.iter().map(Part::Call));
        let mut w = Capped::default();
        w.out.push('[');
        w.message("assistant", parts, Some(self.finish));
        w.out.push(']');
        owned_text("gen_ai.output.messages", w.out)
    }
}

/// The conventions' finish reason: their `tool_call` is OpenAI's `tool_calls`.
fn finish_reason(reason: Option<&FinishReason>) -> &str {
    match reason {
        Some(FinishReason::ToolCalls) => "tool_call",
        Some(other) => other.as_str(),
        None => "unknown",
    }
}

/// A request message's parts: its text (a tool's text is the result of the call it answers),
/// then its tool calls.
fn parts(m: &Message) -> impl Iterator<Item = Part<'_>> {
    let id = m.tool_call_id.as_deref();
    let texts = m.texts().map(move |text| match (m.role, id) {
        (Role::Tool, Some(id)) => Part::Result { id, text },
        _ => Part::Text(text),
    });
    texts.chain(m.tool_calls.iter().map(Part::Call))
}

#[cfg(test)]
#[path = "content_tests.rs"]
mod tests;
