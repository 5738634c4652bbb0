//! Streamed answers: one [`EventDecoder`] per wire format behind one [`StreamDecoder`].

use std::fmt::Debug;

use router_core::config::Api;

use super::classify::Failure;
use super::{calls_something, for_api, plausible};
use crate::types::{ChatRequest, StreamEvent};

/// A wire format's decoder for one streamed response.
pub(crate) trait EventDecoder: Send + Debug {
    /// Decodes one SSE event with non-blank data. A provider error event, or malformed JSON, is
    /// an `Err`.
    fn event(&mut self, event_name: &str, data: &str) -> Result<Vec<StreamEvent>, Failure>;
    /// Called when the byte stream ends: what the end itself means (Gemini's `Done`).
    fn finish(&mut self) -> Vec<StreamEvent> {
        Vec::new()
    }
}

/// Turns one request's SSE events into [`StreamEvent`]s. Feed every event to [`event`]
/// (`event_name` is the SSE `event:` field, `"message"` or empty when absent), then call
/// [`finish`] when the byte stream ends.
///
/// [`StreamEvent::Done`] means the stream completed: OpenAI's `[DONE]`, Anthropic's
/// `message_stop`, or for Gemini (which has no end marker) the end of a stream that delivered a
/// `finishReason`. A stream that ends without `Done` was cut short.
///
/// [`event`]: StreamDecoder::event
/// [`finish`]: StreamDecoder::finish
#[derive(Debug)]
pub(crate) struct StreamDecoder {
    api: Api,
    format: Box<dyn EventDecoder>,
    /// Whether text or a finish reason arrived: a stream that completes without either is a
    /// malformed answer, not an empty success.
    delivered: bool,
    /// Whether a tool call began.
    called: bool,
}

/// An error inside a stream: a provider error event, or an event we could not decode.
pub(crate) type StreamFailure = Failure;

impl StreamDecoder {
    /// A decoder for one streamed response of `api` to `req`.
    pub(crate) fn new(api: Api, req: &ChatRequest) -> Self {
        Self {
            api,
            format: for_api(api).stream_decoder(req),
            delivered: false,
            called: false,
        }
    }

    /// Decodes one SSE event. Every event yields at least one item ([`StreamEvent::Ignore`] when
    /// it carries nothing for the caller). A provider error event, malformed JSON, implausible
    /// usage, a finish to call tools before any tool call came, or the end of a stream that
    /// delivered neither text nor a finish reason is an `Err` (all but the first of class
    /// [`Decode`](super::classify::FailureClass::Decode)).
    pub(crate) fn event(
        &mut self,
        event_name: &str,
        data: &str,
    ) -> Result<Vec<StreamEvent>, StreamFailure> {
        if data.trim().is_empty() {
            return Ok(vec![StreamEvent::Ignore]);
        }
        let mut events = self.format.event(event_name, data)?;
        self.check(&mut events)?;
        Ok(if events.is_empty() {
            vec![StreamEvent::Ignore]
        } else {
            events
        })
    }

    /// Call when the byte stream ends: Gemini's [`StreamEvent::Done`] if it finished; nothing
    /// for the others (their `Done` came from an event).
    pub(crate) fn finish(&mut self) -> Vec<StreamEvent> {
        self.format.finish()
    }

    fn check(&mut self, events: &mut [StreamEvent]) -> Result<(), StreamFailure> {
        for event in events {
            self.delivered |= event.says_something();
            match event {
                StreamEvent::Usage(usage) => {
                    *usage = plausible(*usage).map_err(|reason| self.malformed(&reason))?;
                }
                StreamEvent::ToolCall(_) => self.called = true,
                StreamEvent::Finish(finish) => {
                    calls_something(Some(finish), usize::from(self.called))
                        .map_err(|reason| self.malformed(&reason))?;
                }
                StreamEvent::Done if !self.delivered => {
                    return Err(self.malformed("it ended without any choice, candidate or content"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn malformed(&self, reason: &str) -> StreamFailure {
        Failure::decode(format!("malformed {} stream: {reason}", self.api.as_str()))
    }
}
