//! OpenAI Responses in (`POST /v1/responses`): what OpenAI's SDKs, the Agents SDK and Codex
//! send, served by any provider. The body is read by [`read`] (its `input` by [`items`], its
//! tools by [`tools`]); the answer is written as a `response` object, whole ([`answer`]) or as
//! its event stream ([`stream`]); errors come in OpenAI's shape. Whether to stream is the
//! body's `stream`, whatever `Accept` says.
//!
//! The gateway keeps no responses: each request carries its whole conversation. What no
//! provider behind the router can take (tools OpenAI runs, items of such tools, files by id)
//! is left out and listed in the answer's `x-llmroute-dropped`. The model's thinking goes to
//! the caller as `reasoning` items whose `encrypted_content` is llmroute's encoding of it
//! ([`thought`]), and comes back with them to the provider that wrote it.

mod answer;
mod items;
mod read;
mod stream;
mod thought;
mod tools;

use axum::http::HeaderMap;
use router_sdk::ChatResponse;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Answering, Events, Ingress, Read};
use crate::errors::Shape;

/// `POST /v1/responses`.
pub(crate) struct Responses;

impl Ingress for Responses {
    const ROUTE: &'static str = "POST /v1/responses";
    const SHAPE: Shape = Shape::OpenAi;
    type Asked = Asked;

    fn read(body: &[u8], _headers: &HeaderMap) -> Result<(Read, Asked), String> {
        read::read(body)
    }

    fn answer(answer: &ChatResponse, at: &Answering, asked: &Asked) -> Value {
        answer::response(answer, at, asked)
    }

    fn events(at: Answering, _include_usage: bool, asked: Asked) -> Box<dyn Events> {
        Box::new(stream::ResponseEvents::new(at, asked))
    }
}

/// What a request leaves for its answer: the names of namespaced functions, and what the
/// response repeats of the request.
#[derive(Debug)]
pub(crate) struct Asked {
    names: tools::Names,
    echo: Echo,
}

/// The fields of the request every response object repeats (those the SDKs' `Response`
/// requires): the tools offered as the caller wrote them, `tool_choice` and
/// `parallel_tool_calls`.
#[derive(Debug)]
struct Echo {
    tools: Vec<Value>,
    tool_choice: Value,
    parallel_tool_calls: bool,
}

/// `value`, a part of the body at `at` (`input[3]`), read as a `T`; `Err` names the field.
fn typed<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!("`{at}`: {}", e.inner())
        } else {
            format!("`{at}.{path}`: {}", e.inner())
        }
    })
}

#[cfg(test)]
mod tests;
