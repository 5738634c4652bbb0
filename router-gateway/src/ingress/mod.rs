//! The ways in: each wire format callers speak to the gateway is one [`Ingress`]. It reads a
//! request body into the router's neutral [`ChatRequest`], and writes the router's answer,
//! whole or streamed, and every refusal, in its own shape. Everything between (keys, options,
//! routing, limits, metrics, the stream's relay and its cut-offs) is the same for all of them
//! (`routes::chat`).
//!
//! - [`Chat`]: OpenAI chat completions (`POST /v1/chat/completions`).
//! - [`Messages`]: Anthropic Messages (`POST /v1/messages`).
//! - [`Responses`]: OpenAI Responses (`POST /v1/responses`).

mod chat;
pub(crate) mod messages;
pub(crate) mod responses;

use axum::http::HeaderMap;
use axum::response::sse::Event;
use router_core::config::Api;
use router_sdk::{ChatChunk, ChatRequest, ChatResponse};
use serde_json::Value;

use crate::errors::{ApiError, Shape};

pub(crate) use chat::Chat;
pub(crate) use messages::Messages;
pub(crate) use responses::Responses;

/// A request read, and how to answer it.
#[derive(Debug)]
pub(crate) struct Read {
    /// The router's request.
    pub(crate) request: ChatRequest,
    /// Stream the answer.
    pub(crate) stream: bool,
    /// Send usage at the end of a stream (OpenAI's `stream_options.include_usage`; formats
    /// that always send it ignore this).
    pub(crate) include_usage: bool,
    /// What was left out of the request because no provider can take it (a tool only OpenAI
    /// runs, say), each named by where it was (`tools[3]:web_search`): the answer lists them
    /// in `x-llmroute-dropped`.
    pub(crate) dropped: Vec<String>,
}

/// What every answer names: the request's id, the model as the caller asked for it (shown when
/// the provider's is unknown), the model that answered, and when.
#[derive(Debug, Clone)]
pub(crate) struct Answering {
    pub(crate) request_id: String,
    pub(crate) model: String,
    pub(crate) created: u64,
    /// The wire format of the provider answering, when known: the origin of the thinking a
    /// stream brings in pieces.
    pub(crate) origin: Option<Api>,
}

/// One wire format callers speak.
pub(crate) trait Ingress: Send + Sync + 'static {
    /// The route, as access lines name it (`POST /v1/messages`).
    const ROUTE: &'static str;
    /// The shape of its errors.
    const SHAPE: Shape;
    /// What reading a request leaves for writing its answer: `()` for most; the Responses
    /// ingress keeps the names of the tools it renamed and what its answers repeat of the
    /// request.
    type Asked: Send + 'static;
    /// Reads a request body; `Err` names the field and what is wrong.
    fn read(body: &[u8], headers: &HeaderMap) -> Result<(Read, Self::Asked), String>;
    /// A whole answer's body.
    fn answer(answer: &ChatResponse, at: &Answering, asked: &Self::Asked) -> Value;
    /// The writer of a streamed answer's events.
    fn events(at: Answering, include_usage: bool, asked: Self::Asked) -> Box<dyn Events>;
}

/// Writes one streamed answer as SSE events, chunk by chunk.
pub(crate) trait Events: Send {
    /// The events of one chunk of the router's stream (its last is
    /// [`ChatChunk::Done`]).
    fn chunk(&mut self, chunk: ChatChunk) -> Vec<Sse>;
    /// The events that end a stream that failed part-way with `error`.
    fn failed(&mut self, error: &ApiError) -> Vec<Sse>;
}

/// One server-sent event: its name, if it has one, and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sse {
    pub(crate) name: Option<&'static str>,
    pub(crate) data: String,
}

impl Sse {
    /// An event of JSON `data`, with no event name.
    pub(crate) fn data(value: &Value) -> Self {
        Self {
            name: None,
            data: value.to_string(),
        }
    }

    /// An event named `name` with JSON `data`.
    pub(crate) fn named(name: &'static str, value: &Value) -> Self {
        Self {
            name: Some(name),
            data: value.to_string(),
        }
    }

    /// As axum sends it.
    pub(crate) fn event(self) -> Event {
        let event = Event::default().data(self.data);
        match self.name {
            Some(name) => event.event(name),
            None => event,
        }
    }
}
