//! OpenAI chat completions in: the body read by `inbound`, answers written by `outbound`.

use axum::http::HeaderMap;
use router_sdk::{ChatChunk, ChatResponse};
use serde_json::Value;

use super::{Answering, Events, Ingress, Read, Sse};
use crate::errors::{ApiError, Shape};
use crate::{inbound, outbound};

/// `POST /v1/chat/completions`.
pub(crate) struct Chat;

impl Ingress for Chat {
    const ROUTE: &'static str = "POST /v1/chat/completions";
    const SHAPE: Shape = Shape::OpenAi;
    type Asked = ();

    fn read(body: &[u8], _headers: &HeaderMap) -> Result<(Read, ()), String> {
        inbound::read(body).map(|read| (read, ()))
    }

    fn answer(answer: &ChatResponse, at: &Answering, _: &()) -> Value {
        outbound::completion(answer, at.created)
    }

    fn events(at: Answering, include_usage: bool, _: ()) -> Box<dyn Events> {
        let chunks =
            outbound::Chunks::new(outbound::id(None, &at.request_id), at.model, at.created);
        Box::new(ChatEvents {
            chunks,
            include_usage,
        })
    }
}

/// `chat.completion.chunk`s, the finish and usage, then `[DONE]`; an error object, and no
/// `[DONE]`, when the stream breaks.
struct ChatEvents {
    chunks: outbound::Chunks,
    include_usage: bool,
}

impl Events for ChatEvents {
    fn chunk(&mut self, chunk: ChatChunk) -> Vec<Sse> {
        match chunk {
            ChatChunk::Delta(text) => vec![Sse::data(&self.chunks.text(&text))],
            ChatChunk::ToolCallDelta(d) => vec![Sse::data(&self.chunks.tool_call(&d))],
            // Every chunk of one completion carries one `id` (clients group chunks by it): the
            // gateway's own, set before the first, not the provider's, which only the answer's
            // end brings.
            ChatChunk::Done(receipt) => {
                let end = self.chunks.end(&receipt, self.include_usage);
                let mut events: Vec<Sse> = end.iter().map(Sse::data).collect();
                events.push(Sse {
                    name: None,
                    data: "[DONE]".to_owned(),
                });
                events
            }
            // Chat completions has no place for thinking; the assembled calls went out piece by
            // piece.
            ChatChunk::Thinking(_) | ChatChunk::Thoughts(_) | ChatChunk::ToolCalls(_) => Vec::new(),
        }
    }

    fn failed(&mut self, error: &ApiError) -> Vec<Sse> {
        vec![Sse::data(&error.body_in(Shape::OpenAi))]
    }
}
