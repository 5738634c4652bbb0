//! Streamed answers: one [`EventDecoder`] per wire format behind one [`StreamDecoder`].

use std::fmt::Debug;

use router_core::config::Api;

use super::classify::Failure;
use super::for_api;
use crate::types::StreamEvent;

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
    format: Box<dyn EventDecoder>,
}

/// An error inside a stream: a provider error event, or an event we could not decode.
pub(crate) type StreamFailure = Failure;

impl StreamDecoder {
    /// A decoder for one streamed response of `api`.
    pub(crate) fn new(api: Api) -> Self {
        Self {
            format: for_api(api).stream_decoder(),
        }
    }

    /// Decodes one SSE event. Every event yields at least one item ([`StreamEvent::Ignore`] when
    /// it carries nothing for the caller). A provider error event, or malformed JSON, is an `Err`.
    pub(crate) fn event(
        &mut self,
        event_name: &str,
        data: &str,
    ) -> Result<Vec<StreamEvent>, StreamFailure> {
        if data.trim().is_empty() {
            return Ok(vec![StreamEvent::Ignore]);
        }
        let events = self.format.event(event_name, data)?;
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
}
