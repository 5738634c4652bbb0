//! Anthropic Messages in (`POST /v1/messages`): what Anthropic's SDKs and Claude Code send, served
//! by any provider. The body is read by [`read`]; the answer is written as Anthropic writes it,
//! whole ([`answer`]) or as its event stream ([`stream`]); errors come in Anthropic's shape
//! and statuses. Whether to stream is the body's `stream`, whatever `Accept` says.
//!
//! `anthropic-beta` is passed on to Anthropic upstreams (and to no other provider).

mod answer;
mod json;
mod read;
mod stream;

use axum::http::HeaderMap;
use router_sdk::ChatResponse;
use serde_json::Value;

use super::{Answering, Events, Ingress, Read};
use crate::errors::Shape;

/// `POST /v1/messages`.
pub(crate) struct Messages;

/// The request headers passed on to Anthropic upstreams as they came.
const PASSED_ON: [&str; 1] = ["anthropic-beta"];

impl Ingress for Messages {
    const ROUTE: &'static str = "POST /v1/messages";
    const SHAPE: Shape = Shape::Anthropic;
    type Asked = ();

    fn read(body: &[u8], headers: &HeaderMap) -> Result<(Read, ()), String> {
        let mut read = read::read(body)?;
        for name in PASSED_ON {
            for value in headers.get_all(name) {
                if let Ok(value) = value.to_str() {
                    read.request
                        .headers
                        .push((name.to_owned(), value.to_owned()));
                }
            }
        }
        Ok((read, ()))
    }

    fn answer(answer: &ChatResponse, at: &Answering, _: &()) -> Value {
        answer::message(answer, at)
    }

    fn events(at: Answering, _include_usage: bool, _: ()) -> Box<dyn Events> {
        Box::new(stream::MessageEvents::new(at))
    }
}

#[cfg(test)]
mod tests;
