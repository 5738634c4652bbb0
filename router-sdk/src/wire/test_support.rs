//! Fixture helpers shared by the wire tests.

use super::StreamDecoder;
use super::classify::Failure;
use crate::types::{ChatRequest, Message, StreamEvent};
use router_core::config::Api;

/// Splits SSE text into `(event, data)` pairs as an SSE parser would (CRLF or LF lines,
/// multi-line data joined with `\n`).
pub(crate) fn sse(text: &str) -> Vec<(String, String)> {
    let (mut out, mut event, mut data) = (Vec::new(), String::new(), Vec::<&str>::new());
    for line in text.lines().chain([""]) {
        if line.is_empty() {
            if !data.is_empty() {
                out.push((std::mem::take(&mut event), data.join("\n")));
            }
            (event, data) = (String::new(), Vec::new());
        } else if let Some(v) = line.strip_prefix("event:") {
            event = v.trim_start().to_owned();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    out
}

/// Feeds a whole SSE text to a decoder: the events until the first failure, or all of them
/// and then whatever `finish` adds.
pub(crate) fn decode_all(api: Api, text: &str) -> (Vec<StreamEvent>, Option<Failure>) {
    decode_all_for(api, &ChatRequest::default(), text)
}

/// Like [`decode_all`], for a stream answering `req`.
pub(crate) fn decode_all_for(
    api: Api,
    req: &ChatRequest,
    text: &str,
) -> (Vec<StreamEvent>, Option<Failure>) {
    let mut decoder = StreamDecoder::new(api, req);
    let mut events = Vec::new();
    for (name, data) in sse(text) {
        match decoder.event(&name, &data) {
            Ok(more) => events.extend(more),
            Err(failure) => return (events, Some(failure)),
        }
    }
    events.extend(decoder.finish());
    (events, None)
}

/// A request that sets every field.
pub(crate) fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("Be brief."),
            Message::user("Hi"),
            Message::assistant("Hello."),
            Message::user("Bye"),
        ],
        max_tokens: Some(64),
        temperature: Some(0.5),
        stop: vec!["END".into()],
        ..ChatRequest::default()
    }
}
