//! A streamed answer as Responses events, each named by its `type` and numbered by its
//! `sequence_number` from 0: `response.created` and `response.in_progress`, then one output
//! item at a time, in the order the model wrote them:
//!
//! - `response.output_item.added`;
//! - a reasoning item's `response.reasoning_summary_part.added`,
//!   `response.reasoning_summary_text.delta`s, `.done` and `response.reasoning_summary_part.done`
//!   (when the thought has text); a message's `response.content_part.added`,
//!   `response.output_text.delta`s (or a refusal's `response.refusal.delta`), their `.done` and
//!   `response.content_part.done`; a function call's `response.function_call_arguments.delta`s
//!   and `.done`;
//! - `response.output_item.done` with the whole item (Codex builds its history from these).
//!
//! Then `response.completed` with the whole response and its usage, or `response.incomplete`
//! for an answer cut short. A stream that breaks ends with `response.failed`.

use router_sdk::{ChatChunk, Receipt, ThinkingDelta, Thought, ToolCall, ToolCallDelta};
use serde_json::{Value, json};

use super::Asked;
use super::answer::{
    End, call_id, call_item, message_id, message_item, object, reasoning_id, reasoning_item,
    refusal_part, text_part, usage,
};
use super::thought;
use crate::errors::{ApiError, Shape};
use crate::ingress::{Answering, Events, Sse};

/// The item open now.
enum Open {
    /// A thought: its text so far and whether its summary part was added.
    Reasoning {
        id: String,
        thought: Thought,
        summary: bool,
    },
    Message {
        id: String,
        text: String,
    },
    /// The call of this stream index.
    Call {
        id: String,
        index: u32,
        call: ToolCall,
    },
}

/// Writes the events of one answer.
pub(super) struct ResponseEvents {
    at: Answering,
    asked: Asked,
    /// The next event's `sequence_number`.
    seq: u64,
    started: bool,
    /// The items done, in order.
    output: Vec<Value>,
    open: Option<Open>,
    /// Items of each kind begun so far (for their ids).
    thoughts: usize,
    messages: usize,
    /// Each call's stream index and place in `output`, once done.
    calls: Vec<(u32, usize)>,
}

impl ResponseEvents {
    pub(super) fn new(at: Answering, asked: Asked) -> Self {
        Self {
            at,
            asked,
            seq: 0,
            started: false,
            output: Vec::new(),
            open: None,
            thoughts: 0,
            messages: 0,
            calls: Vec::new(),
        }
    }

    /// An event of `kind` with `data`, numbered.
    fn emit(&mut self, kind: &'static str, mut data: Value, out: &mut Vec<Sse>) {
        data["type"] = kind.into();
        data["sequence_number"] = self.seq.into();
        self.seq += 1;
        out.push(Sse::named(kind, &data));
    }

    /// The response object as it stands.
    fn response(&self, end: &End, usage: Value) -> Value {
        object(&self.at, &self.asked.echo, end, self.output.clone(), usage)
    }

    /// `response.created` and `response.in_progress`, before anything else.
    fn start(&mut self, out: &mut Vec<Sse>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = self.response(&End::InProgress, Value::Null);
        self.emit("response.created", json!({"response": response}), out);
        self.emit("response.in_progress", json!({"response": response}), out);
    }

    /// `response.output_item.added` for `item`, the next in the output.
    fn added(&mut self, item: Value, out: &mut Vec<Sse>) {
        let index = self.output.len();
        let data = json!({"output_index": index, "item": item});
        self.emit("response.output_item.added", data, out);
    }

    /// `response.output_item.done` for `item`, now part of the output.
    fn done(&mut self, item: Value, out: &mut Vec<Sse>) {
        let index = self.output.len();
        let data = json!({"output_index": index, "item": item});
        self.emit("response.output_item.done", data, out);
        self.output.push(item);
    }

    /// An event of the open item `id`: its place in the output joined to `data`.
    fn of_item(&mut self, kind: &'static str, id: &str, mut data: Value, out: &mut Vec<Sse>) {
        data["item_id"] = id.into();
        data["output_index"] = self.output.len().into();
        self.emit(kind, data, out);
    }

    /// Ends the open item, if any, with `status`.
    fn close(&mut self, status: &str, out: &mut Vec<Sse>) {
        match self.open.take() {
            None => {}
            Some(Open::Reasoning {
                id,
                thought,
                summary,
            }) => self.close_thought(&id, &thought, summary, out),
            Some(Open::Message { id, text }) => {
                let done = json!({"content_index": 0, "text": text, "logprobs": []});
                self.of_item("response.output_text.done", &id, done, out);
                let part = json!({"content_index": 0, "part": text_part(&text)});
                self.of_item("response.content_part.done", &id, part, out);
                self.done(message_item(&id, status, vec![text_part(&text)]), out);
            }
            Some(Open::Call { id, index, call }) => {
                let (_, name) = self.asked.names.caller(&call.name);
                let done = json!({"name": name, "arguments": call.arguments});
                self.of_item("response.function_call_arguments.done", &id, done, out);
                let item = call_item(&id, &call, &self.asked.names, status);
                self.calls.push((index, self.output.len()));
                self.done(item, out);
            }
        }
    }

    fn close_thought(&mut self, id: &str, t: &Thought, summary: bool, out: &mut Vec<Sse>) {
        if summary {
            let done = json!({"summary_index": 0, "text": t.text});
            self.of_item("response.reasoning_summary_text.done", id, done, out);
            let part = json!({"type": "summary_text", "text": t.text});
            let done = json!({"summary_index": 0, "part": part});
            self.of_item("response.reasoning_summary_part.done", id, done, out);
        }
        let encrypted = self.at.origin.map(|_| thought::encode(t));
        self.done(reasoning_item(id, &t.text, encrypted), out);
    }

    /// The open reasoning item, opening one (and closing any other) if none is.
    fn reasoning(&mut self, out: &mut Vec<Sse>) -> (String, bool) {
        if let Some(Open::Reasoning { id, summary, .. }) = &self.open {
            return (id.clone(), *summary);
        }
        self.close("completed", out);
        let id = reasoning_id(&self.at, self.thoughts);
        self.thoughts += 1;
        self.added(reasoning_item(&id, "", None), out);
        let thought = Thought {
            // Without a known origin the thought is shown, never carried back.
            origin: self.at.origin.unwrap_or(router_core::config::Api::OpenAi),
            text: String::new(),
            signature: None,
            redacted: None,
        };
        self.open = Some(Open::Reasoning {
            id: id.clone(),
            thought,
            summary: false,
        });
        (id, false)
    }

    /// The thought open now.
    fn thought(&mut self) -> Option<&mut Thought> {
        match &mut self.open {
            Some(Open::Reasoning { thought, .. }) => Some(thought),
            _ => None,
        }
    }

    fn thinking(&mut self, piece: ThinkingDelta, out: &mut Vec<Sse>) {
        // A redacted thought is whole in one piece: an item of its own.
        if let ThinkingDelta::Redacted(data) = piece {
            self.close("completed", out);
            self.reasoning(out);
            if let Some(t) = self.thought() {
                t.redacted = Some(data);
            }
            self.close("completed", out);
            return;
        }
        let (id, summary) = self.reasoning(out);
        match piece {
            ThinkingDelta::Text(text) if text.is_empty() => {}
            ThinkingDelta::Text(text) => {
                if !summary {
                    let part = json!({"type": "summary_text", "text": ""});
                    let added = json!({"summary_index": 0, "part": part});
                    self.of_item("response.reasoning_summary_part.added", &id, added, out);
                    if let Some(Open::Reasoning { summary, .. }) = &mut self.open {
                        *summary = true;
                    }
                }
                let delta = json!({"summary_index": 0, "delta": text});
                self.of_item("response.reasoning_summary_text.delta", &id, delta, out);
                if let Some(t) = self.thought() {
                    t.text.push_str(&text);
                }
            }
            // A signature ends its thought.
            ThinkingDelta::Signature(signature) => {
                if let Some(t) = self.thought() {
                    t.signature.get_or_insert_default().push_str(&signature);
                }
                self.close("completed", out);
            }
            ThinkingDelta::Redacted(_) => {}
        }
    }

    fn text(&mut self, text: String, out: &mut Vec<Sse>) {
        let id = match &mut self.open {
            Some(Open::Message { id, text: so_far }) => {
                so_far.push_str(&text);
                id.clone()
            }
            _ => {
                self.close("completed", out);
                let id = message_id(&self.at, self.messages);
                self.messages += 1;
                self.added(message_item(&id, "in_progress", Vec::new()), out);
                let added = json!({"content_index": 0, "part": text_part("")});
                self.of_item("response.content_part.added", &id, added, out);
                self.open = Some(Open::Message {
                    id: id.clone(),
                    text: text.clone(),
                });
                id
            }
        };
        let delta = json!({"content_index": 0, "delta": text, "logprobs": []});
        self.of_item("response.output_text.delta", &id, delta, out);
    }

    fn tool_call(&mut self, d: ToolCallDelta, out: &mut Vec<Sse>) {
        let goes_on = matches!(&self.open, Some(Open::Call { index, .. }) if *index == d.index);
        if !goes_on {
            if self.fold(&d) {
                return;
            }
            self.open_call(d.index, d.id, d.name, out);
        }
        let Some(Open::Call { id, call, .. }) = &mut self.open else {
            return;
        };
        call.arguments.push_str(&d.arguments);
        let id = id.clone();
        if !d.arguments.is_empty() {
            let delta = json!({"delta": d.arguments});
            self.of_item("response.function_call_arguments.delta", &id, delta, out);
        }
    }

    /// Opens the item of the call of stream index `index`, closing the one open.
    fn open_call(
        &mut self,
        index: u32,
        provider_id: Option<String>,
        name: Option<String>,
        out: &mut Vec<Sse>,
    ) {
        self.close("completed", out);
        let id = call_id(&self.at, self.calls.len());
        let call = ToolCall {
            id: provider_id.unwrap_or_default(),
            name: name.unwrap_or_default(),
            arguments: String::new(),
        };
        let item = call_item(&id, &call, &self.asked.names, "in_progress");
        self.added(item, out);
        self.open = Some(Open::Call { id, index, call });
    }

    /// Folds a piece of a call done already into its item (streams send calls one after
    /// another, so this is rare): its arguments join those the response ends with.
    fn fold(&mut self, d: &ToolCallDelta) -> bool {
        let Some(&(_, at)) = self.calls.iter().find(|(i, _)| *i == d.index) else {
            return false;
        };
        let so_far = self.output[at]["arguments"].as_str().unwrap_or_default();
        self.output[at]["arguments"] = format!("{so_far}{}", d.arguments).into();
        true
    }

    /// The model's refusal, as a message item of its own.
    fn refusal(&mut self, refusal: &str, status: &str, out: &mut Vec<Sse>) {
        let id = message_id(&self.at, self.messages);
        self.messages += 1;
        self.added(message_item(&id, "in_progress", Vec::new()), out);
        let added = json!({"content_index": 0, "part": refusal_part("")});
        self.of_item("response.content_part.added", &id, added, out);
        let delta = json!({"content_index": 0, "delta": refusal});
        self.of_item("response.refusal.delta", &id, delta, out);
        let done = json!({"content_index": 0, "refusal": refusal});
        self.of_item("response.refusal.done", &id, done, out);
        let part = json!({"content_index": 0, "part": refusal_part(refusal)});
        self.of_item("response.content_part.done", &id, part, out);
        self.done(message_item(&id, status, vec![refusal_part(refusal)]), out);
    }

    fn end(&mut self, receipt: &Receipt, out: &mut Vec<Sse>) {
        let end = End::of(receipt.finish_reason.as_ref());
        self.close(end.item_status(), out);
        if let Some(refusal) = receipt.refusal.as_ref().filter(|_| self.messages == 0) {
            self.refusal(refusal, end.item_status(), out);
        }
        let kind = match end {
            End::Incomplete(_) => "response.incomplete",
            _ => "response.completed",
        };
        let response = self.response(&end, usage(&receipt.usage));
        self.emit(kind, json!({"response": response}), out);
    }
}

impl Events for ResponseEvents {
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

    /// `response.failed`, with the items done so far: the one open is left out, unfinished.
    fn failed(&mut self, error: &ApiError) -> Vec<Sse> {
        let mut out = Vec::new();
        self.start(&mut out);
        let body = error.body_in(Shape::OpenAi);
        let code = match error.code() {
            code @ ("rate_limit_exceeded" | "insufficient_quota") => code,
            _ => "server_error",
        };
        let failed = json!({"code": code, "message": body["error"]["message"]});
        let response = self.response(&End::Failed(failed), Value::Null);
        self.emit("response.failed", json!({"response": response}), &mut out);
        out
    }
}
