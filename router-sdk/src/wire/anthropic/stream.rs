//! Anthropic's server-sent events: the response id and usage from `message_start`, usage
//! assigned (never added) from each `message_delta`; text from `text_delta`s; each `tool_use`
//! block a tool call (its start carries the id and name, its `input_json_delta`s the arguments);
//! `message_stop` ends it. Thinking comes as [`ThinkingDelta`]s: a block's start opens a
//! thought, its `thinking_delta`s are its text and its `signature_delta` ends it; a
//! `redacted_thinking` block is one whole thought.
//!
//! The tool call index is the count of the answer's earlier `tool_use` blocks, the answer
//! tool's aside: that tool's `input_json_delta`s are the answer's text, and the whole of it.
//! Text before it (with thinking, the tool is offered with `auto`) is held back until the
//! answer's end, and given only if the tool never came.
//!
//! A `tool_use` block starts with its `input` (`{}`). A tool without arguments gets one empty
//! `input_json_delta`, or none. A block whose deltas brought no JSON is given its start `input`
//! at its end (`content_block_stop`, else the message's stop): its arguments are `{}`, as in a
//! whole answer, never `""`. A block with JSON deltas is their text, unchanged.

use std::collections::BTreeMap;

use router_core::config::Api;
use serde::Deserialize;
use serde_json::Value;

use super::{UsageJson, error_body, finish_of, input_text};
use crate::types::{StreamEvent, ThinkingDelta, ToolCallDelta};
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
    ContentBlockStop {
        #[serde(default, deserialize_with = "nullable")]
        index: u64,
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

/// The block a `content_block_start` opens: a `tool_use` block's id, name and input so far, a
/// thinking block's first text and signature (empty as Anthropic sends them), a redacted
/// thinking block's data; any other block is skipped.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Thinking {
        #[serde(default, deserialize_with = "nullable")]
        thinking: String,
        #[serde(default, deserialize_with = "nullable")]
        signature: String,
    },
    RedactedThinking {
        #[serde(default, deserialize_with = "nullable")]
        data: String,
    },
    ToolUse {
        #[serde(default, deserialize_with = "nullable")]
        id: String,
        #[serde(default, deserialize_with = "nullable")]
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

/// A `content_block_delta`: text, a piece of a tool call's input JSON, thinking, or a
/// thinking block's signature.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    ThinkingDelta {
        #[serde(default, deserialize_with = "nullable")]
        thinking: String,
    },
    SignatureDelta {
        #[serde(default, deserialize_with = "nullable")]
        signature: String,
    },
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

/// A `tool_use` block: whose arguments its JSON is, and its start `input` as JSON text. The
/// input is `None` once a JSON delta came or the block ended.
#[derive(Debug)]
struct Block {
    whose: ToolBlock,
    input: Option<String>,
}

/// Stream state: usage so far (assigned, never added), the `tool_use` blocks by content block
/// index, how many were tool calls, and whether `message_stop` was seen.
#[derive(Debug, Default)]
pub(super) struct Stream {
    usage: UsageJson,
    answer_tool: Option<String>,
    blocks: BTreeMap<u64, Block>,
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

    /// A `tool_use` block with `input` starts at content block `index`.
    fn tool_start(
        &mut self,
        index: u64,
        id: String,
        name: String,
        input: &Value,
    ) -> Vec<StreamEvent> {
        let input = Some(input_text(input));
        if self.answer_tool.as_deref() == Some(name.as_str()) {
            let whose = ToolBlock::Answer;
            self.blocks.insert(index, Block { whose, input });
            self.held = None;
            return Vec::new();
        }
        let call = self.calls;
        self.calls = self.calls.saturating_add(1);
        let whose = ToolBlock::Call(call);
        self.blocks.insert(index, Block { whose, input });
        vec![StreamEvent::ToolCall(ToolCallDelta {
            index: call,
            id: Some(id),
            name: Some(name),
            arguments: String::new(),
        })]
    }

    /// More JSON of the `tool_use` block at content block `index` (nothing if it is no such
    /// block). The first JSON replaces the block's start `input`.
    fn tool_json(&mut self, index: u64, json: String) -> Vec<StreamEvent> {
        match self.blocks.get_mut(&index) {
            Some(block) if !json.is_empty() => {
                block.input = None;
                vec![json_event(block.whose, json)]
            }
            _ => Vec::new(),
        }
    }

    /// The `tool_use` block at content block `index` ended: its start `input` if no JSON came.
    fn tool_end(&mut self, index: u64) -> Vec<StreamEvent> {
        let Some(block) = self.blocks.get_mut(&index) else {
            return Vec::new();
        };
        let whose = block.whose;
        block
            .input
            .take()
            .map(|input| json_event(whose, input))
            .into_iter()
            .collect()
    }

    /// The message ended: the start `input` of each block that got no JSON and no end.
    fn tool_ends(&mut self) -> Vec<StreamEvent> {
        let open: Vec<u64> = self.blocks.keys().copied().collect();
        open.into_iter()
            .flat_map(|index| self.tool_end(index))
            .collect()
    }
}

/// A thinking block opens: an empty thought (so that even a thought whose text the provider
/// keeps to itself is one), with whatever text and signature its start carries.
fn thinking_start(text: String, signature: String) -> Vec<StreamEvent> {
    let signed = (!signature.is_empty()).then_some(ThinkingDelta::Signature(signature));
    std::iter::once(ThinkingDelta::Text(text))
        .chain(signed)
        .map(StreamEvent::Thinking)
        .collect()
}

/// JSON text of a `tool_use` block: the answer's text, or a piece of a call's arguments.
fn json_event(whose: ToolBlock, json: String) -> StreamEvent {
    match whose {
        ToolBlock::Answer => StreamEvent::Delta(json),
        ToolBlock::Call(call) => StreamEvent::ToolCall(ToolCallDelta {
            index: call,
            id: None,
            name: None,
            arguments: json,
        }),
    }
}

impl Stream {
    /// A content block opens: a tool call, a thought, or a block with nothing to say yet.
    fn block_start(&mut self, index: u64, block: StartBlock) -> Vec<StreamEvent> {
        match block {
            StartBlock::ToolUse { id, name, input } => self.tool_start(index, id, name, &input),
            StartBlock::Thinking {
                thinking,
                signature,
            } => thinking_start(thinking, signature),
            StartBlock::RedactedThinking { data } => {
                vec![StreamEvent::Thinking(ThinkingDelta::Redacted(data))]
            }
            StartBlock::Other => Vec::new(),
        }
    }

    /// A piece of the block at `index`.
    fn block_delta(&mut self, index: u64, delta: BlockDelta) -> Vec<StreamEvent> {
        let thinking = |piece| vec![StreamEvent::Thinking(piece)];
        match delta {
            BlockDelta::TextDelta { text } if !text.is_empty() => self.text(text),
            BlockDelta::InputJsonDelta { partial_json } => self.tool_json(index, partial_json),
            BlockDelta::ThinkingDelta { thinking: text } => thinking(ThinkingDelta::Text(text)),
            BlockDelta::SignatureDelta { signature } if !signature.is_empty() => {
                thinking(ThinkingDelta::Signature(signature))
            }
            BlockDelta::TextDelta { .. }
            | BlockDelta::SignatureDelta { .. }
            | BlockDelta::Other => Vec::new(),
        }
    }

    /// The message's stop reason and usage so far. Once it has stopped, text held for a tool
    /// that never came is the answer, and blocks it ended without a block stop end.
    fn message_delta(
        &mut self,
        delta: MessageDeltaBody,
        usage: Option<UsageJson>,
    ) -> Vec<StreamEvent> {
        let answer_tool = self.answer_tool.is_some();
        let calls = self.calls as usize;
        let held = delta
            .stop_reason
            .as_ref()
            .and_then(|_| self.held.take())
            .filter(|t| !t.is_empty())
            .map(StreamEvent::Delta);
        let ends = match delta.stop_reason {
            Some(_) => self.tool_ends(),
            None => Vec::new(),
        };
        let finish = delta
            .stop_reason
            .map(|r| StreamEvent::Finish(finish_of(&r, answer_tool, calls)));
        let usage = usage.map(|u| {
            self.usage.assign(u);
            StreamEvent::Usage(self.usage.usage())
        });
        held.into_iter()
            .chain(ends)
            .chain(finish)
            .chain(usage)
            .collect()
    }

    /// The message ended: text held for a tool that never came (with no stop reason to give it
    /// before), the blocks still open, then `Done`.
    fn message_stop(&mut self) -> Vec<StreamEvent> {
        self.done = true;
        let held = self.held.take().filter(|t| !t.is_empty());
        let ends = self.tool_ends();
        held.map(StreamEvent::Delta)
            .into_iter()
            .chain(ends)
            .chain([StreamEvent::Done])
            .collect()
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
                content_block,
            } => self.block_start(index, content_block),
            Event::ContentBlockDelta { index, delta } => self.block_delta(index, delta),
            Event::ContentBlockStop { index } => self.tool_end(index),
            Event::MessageDelta { delta, usage } => self.message_delta(delta, usage),
            Event::MessageStop => self.message_stop(),
            Event::Error | Event::Other => Vec::new(),
        })
    }
}
