//! Anthropic's server-sent events: the response id and usage from `message_start`, usage
//! assigned (never added) from each `message_delta`; text from `text_delta`s; each `tool_use`
//! block a tool call (its start carries the id and name, its `input_json_delta`s the arguments);
//! `message_stop` ends it. Thinking blocks and their deltas are skipped.
//!
//! The tool call index is the count of the answer's earlier `tool_use` blocks, the answer
//! tool's aside: that tool's `input_json_delta`s are the answer's text, and the whole of it.
//! Text before it (with thinking, the tool is offered with `auto`) is held back until the
//! answer's end, and given only if the tool never came.

use std::collections::HashMap;

use router_core::config::Api;
use serde::Deserialize;

use super::{UsageJson, error_body, finish_of};
use crate::types::{StreamEvent, ToolCallDelta};
use crate::wire::classify::Failure;
use crate::wire::{EventDecoder, error, malformed, nullable};

/// One streamed event, as far as llmroute reads it.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        #[serde(default, deserialize_with = "nullable")]
        index: u64,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        #[serde(default, deserialize_with = "nullable")]
        index: u64,
        delta: BlockDelta,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        usage: Option<UsageJson>,
    },
    MessageStop,
    Error,
    #[serde(other)]
    Other,
}

/// The message of `message_start`: its id and the usage so far.
#[derive(Deserialize)]
struct StartMessage {
    id: Option<String>,
    #[serde(default)]
    usage: UsageJson,
}

/// The block a `content_block_start` opens: a `tool_use` block's id and name; any other block
/// is skipped.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    ToolUse {
        #[serde(default, deserialize_with = "nullable")]
        id: String,
        #[serde(default, deserialize_with = "nullable")]
        name: String,
    },
    #[serde(other)]
    Other,
}

/// A `content_block_delta`: text, or a piece of a tool call's input JSON; thinking and
/// signature deltas are skipped.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        #[serde(default, deserialize_with = "nullable")]
        text: String,
    },
    InputJsonDelta {
        #[serde(default, deserialize_with = "nullable")]
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

/// The `delta` of `message_delta`: the stop reason.
#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

/// Whose arguments a `tool_use` block's JSON deltas are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolBlock {
    /// The tool call of this index.
    Call(u32),
    /// The answer tool's: the answer's text.
    Answer,
}

/// Stream state: usage so far (assigned, never added), the `tool_use` blocks by content block
/// index, how many were tool calls, and whether `message_stop` was seen.
#[derive(Debug, Default)]
pub(super) struct Stream {
    usage: UsageJson,
    answer_tool: Option<String>,
    blocks: HashMap<u64, ToolBlock>,
    calls: u32,
    done: bool,
    /// A JSON answer's text, held back while its answer tool may still come (`None` once it
    /// has).
    held: Option<String>,
}

impl Stream {
    /// A decoder for an answer whose `answer_tool` (if any) carries a JSON answer.
    pub(super) fn new(answer_tool: Option<String>) -> Self {
        Self {
            held: answer_tool.is_some().then(String::new),
            answer_tool,
            ..Self::default()
        }
    }

    /// Text of the answer: given at once, held back while a JSON answer's tool may still come,
    /// dropped once it has.
    fn text(&mut self, text: String) -> Vec<StreamEvent> {
        match (&mut self.held, self.answer_tool.is_some()) {
            (None, false) => vec![StreamEvent::Delta(text)],
            (Some(held), _) => {
                held.push_str(&text);
                Vec::new()
            }
            (None, true) => Vec::new(),
        }
    }

    /// A `tool_use` block starts at content block `index`.
    fn tool_start(&mut self, index: u64, id: String, name: String) -> Vec<StreamEvent> {
        if self.answer_tool.as_deref() == Some(name.as_str()) {
            self.blocks.insert(index, ToolBlock::Answer);
            self.held = None;
            return Vec::new();
        }
        let call = self.calls;
        self.calls = self.calls.saturating_add(1);
        self.blocks.insert(index, ToolBlock::Call(call));
        vec![StreamEvent::ToolCall(ToolCallDelta {
            index: call,
            id: Some(id),
            name: Some(name),
            arguments: String::new(),
        })]
    }

    /// More JSON of the `tool_use` block at content block `index` (nothing if it is no such
    /// block).
    fn tool_json(&self, index: u64, json: String) -> Vec<StreamEvent> {
        match self.blocks.get(&index) {
            _ if json.is_empty() => Vec::new(),
            Some(ToolBlock::Answer) => vec![StreamEvent::Delta(json)],
            Some(ToolBlock::Call(call)) => vec![StreamEvent::ToolCall(ToolCallDelta {
                index: *call,
                id: None,
                name: None,
                arguments: json,
            })],
            None => Vec::new(),
        }
    }
}

impl EventDecoder for Stream {
    fn event(&mut self, event_name: &str, data: &str) -> Result<Vec<StreamEvent>, Failure> {
        if self.done {
            return Ok(Vec::new());
        }
        let parsed: Event =
            serde_json::from_str(data).map_err(|e| malformed(Api::Anthropic, data, &e))?;
        if event_name == "error" || matches!(parsed, Event::Error) {
            let data = data.as_bytes();
            return Err(error::stream_failure(error_body(data), data));
        }
        Ok(match parsed {
            // Its usage is kept, not reported: its output count is a placeholder (about 1), and
            // a stream that breaks before `message_delta` must settle the estimate, not that.
            Event::MessageStart { message } => {
                self.usage = message.usage;
                let id = message.id.filter(|id| !id.is_empty());
                id.map(StreamEvent::Id).into_iter().collect()
            }
            Event::ContentBlockStart {
                index,
                content_block: StartBlock::ToolUse { id, name },
            } => self.tool_start(index, id, name),
            Event::ContentBlockDelta {
                delta: BlockDelta::TextDelta { text },
                ..
            } if !text.is_empty() => self.text(text),
            Event::ContentBlockDelta {
                index,
                delta: BlockDelta::InputJsonDelta { partial_json },
            } => self.tool_json(index, partial_json),
            Event::MessageDelta { delta, usage } => {
                let answer_tool = self.answer_tool.is_some();
                let calls = self.calls as usize;
                // The answer is over: text held for a tool that never came is the answer.
                let held = delta
                    .stop_reason
                    .as_ref()
                    .and_then(|_| self.held.take())
                    .filter(|t| !t.is_empty())
                    .map(StreamEvent::Delta);
                let finish = delta
                    .stop_reason
                    .map(|r| StreamEvent::Finish(finish_of(&r, answer_tool, calls)));
                let usage = usage.map(|u| {
                    self.usage.assign(u);
                    StreamEvent::Usage(self.usage.usage())
                });
                held.into_iter().chain(finish).chain(usage).collect()
            }
            Event::MessageStop => {
                self.done = true;
                // Held for a tool that never came, with no stop reason to give it before.
                let held = self.held.take().filter(|t| !t.is_empty());
                held.map(StreamEvent::Delta)
                    .into_iter()
                    .chain([StreamEvent::Done])
                    .collect()
            }
            Event::ContentBlockStart { .. }
            | Event::ContentBlockDelta { .. }
            | Event::Error
            | Event::Other => Vec::new(),
        })
    }
}
