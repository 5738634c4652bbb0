//! Anthropic's server-sent events: usage from `message_start`, assigned (never added) from each
//! `message_delta`; text from `content_block_delta`; `message_stop` ends it.

use router_core::config::Api;
use serde::Deserialize;

use super::{UsageJson, error_body, finish_reason};
use crate::types::StreamEvent;
use crate::wire::classify::Failure;
use crate::wire::{EventDecoder, error, malformed};

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockDelta {
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

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: UsageJson,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

/// Stream state: usage so far (assigned, never added) and whether `message_stop` was seen.
#[derive(Debug, Default)]
pub(super) struct Stream {
    usage: UsageJson,
    done: bool,
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
            Event::MessageStart { message } => {
                self.usage = message.usage;
                vec![StreamEvent::Usage(self.usage.usage())]
            }
            Event::ContentBlockDelta {
                delta: BlockDelta::TextDelta { text },
            } if !text.is_empty() => {
                vec![StreamEvent::Delta(text)]
            }
            Event::MessageDelta { delta, usage } => {
                let finish = delta
                    .stop_reason
                    .map(|r| StreamEvent::Finish(finish_reason(&r)));
                let usage = usage.map(|u| {
                    self.usage.assign(u);
                    StreamEvent::Usage(self.usage.usage())
                });
                finish.into_iter().chain(usage).collect()
            }
            Event::MessageStop => {
                self.done = true;
                vec![StreamEvent::Done]
            }
            Event::ContentBlockDelta { .. } | Event::Error | Event::Other => Vec::new(),
        })
    }
}
