//! The wire layer: pure translators between the neutral types and each provider's JSON.
//!
//! Nothing here does I/O. [`build`] turns a [`ChatRequest`] into a [`WireRequest`] (URL, headers,
//! body); [`parse_response`] reads a complete response; a [`StreamDecoder`] turns SSE events into
//! [`StreamEvent`]s; [`classify`](classify::classify) says what an error means; [`headers`] reads
//! rate-limit headers. Provider JSON shapes stay private to their module.

mod anthropic;
pub(crate) mod classify;
mod gemini;
pub(crate) mod headers;
mod openai;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use router_core::config::Api;
use serde::{Deserialize, Deserializer};

use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, StreamEvent};
use classify::Failure;

/// Longest body excerpt kept in an error.
const EXCERPT_MAX: usize = 300;

/// An HTTP request ready to send. Its `Debug` never shows the key: the auth header is marked
/// sensitive, and the key is never in the URL or the body.
#[derive(Debug, Clone)]
pub(crate) struct WireRequest {
    /// Full URL.
    pub(crate) url: String,
    /// Headers, auth included (sensitive).
    pub(crate) headers: HeaderMap,
    /// JSON body.
    pub(crate) body: serde_json::Value,
}

/// Builds the provider request for `req` to `model` at `base_url` (a trailing `/` is ignored).
///
/// A key that cannot be a header value (control characters) is left out: the provider then
/// answers 401, which is classified as [`Auth`](classify::FailureClass::Auth).
pub(crate) fn build(
    api: Api,
    base_url: &str,
    model: &str,
    key: &ApiKey,
    req: &ChatRequest,
    stream: bool,
) -> WireRequest {
    let base = base_url.trim_end_matches('/');
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let (url, auth, body) = match api {
        Api::OpenAi => (
            openai::url(base),
            openai::auth(key),
            openai::body(model, req, stream),
        ),
        Api::Anthropic => {
            headers.insert(
                "anthropic-version",
                HeaderValue::from_static(anthropic::VERSION),
            );
            (
                anthropic::url(base),
                anthropic::auth(key),
                anthropic::body(model, req, stream),
            )
        }
        Api::Gemini => (
            gemini::url(base, model, stream),
            gemini::auth(key),
            gemini::body(req),
        ),
    };
    if let Some((name, value)) = auth {
        headers.insert(name, value);
    }
    WireRequest { url, headers, body }
}

/// A header carrying `prefix` + the key, marked sensitive; `None` if the key is not a valid
/// header value.
fn secret_header(
    name: &'static str,
    prefix: &str,
    key: &ApiKey,
) -> Option<(HeaderName, HeaderValue)> {
    let mut value = HeaderValue::from_str(&format!("{prefix}{}", key.expose())).ok()?;
    value.set_sensitive(true);
    Some((HeaderName::from_static(name), value))
}

/// A 2xx body that was not the shape we expected. Keeps an excerpt of the body, never a key
/// (keys are only ever in request headers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode the {api} response: {reason}; body starts: {excerpt:?}")]
pub(crate) struct DecodeError {
    /// The API whose response it was.
    pub(crate) api: &'static str,
    /// What serde said.
    pub(crate) reason: String,
    /// The start of the body.
    pub(crate) excerpt: String,
}

impl From<DecodeError> for Failure {
    fn from(err: DecodeError) -> Self {
        Failure::decode(err.to_string())
    }
}

/// Reads a complete (non-streaming) 2xx response.
pub(crate) fn parse_response(api: Api, body: &[u8]) -> Result<Completion, DecodeError> {
    let parsed = match api {
        Api::OpenAi => openai::parse_response(body),
        Api::Anthropic => anthropic::parse_response(body),
        Api::Gemini => gemini::parse_response(body),
    };
    parsed.map_err(|err| DecodeError {
        api: api.as_str(),
        reason: err.to_string(),
        excerpt: excerpt(body),
    })
}

/// The start of a body, as text, for error messages.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(EXCERPT_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

/// Deserializes `null` as the type's default (some OpenAI-compatible servers send `null` counts).
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
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
pub(crate) struct StreamDecoder(Decoder);

#[derive(Debug)]
enum Decoder {
    OpenAi(openai::Stream),
    Anthropic(anthropic::Stream),
    Gemini(gemini::Stream),
}

/// An error inside a stream: a provider error event, or an event we could not decode.
pub(crate) type StreamFailure = Failure;

impl StreamDecoder {
    /// A decoder for one streamed response of `api`.
    pub(crate) fn new(api: Api) -> Self {
        Self(match api {
            Api::OpenAi => Decoder::OpenAi(openai::Stream::default()),
            Api::Anthropic => Decoder::Anthropic(anthropic::Stream::default()),
            Api::Gemini => Decoder::Gemini(gemini::Stream::default()),
        })
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
        let events = match &mut self.0 {
            Decoder::OpenAi(s) => s.event(data)?,
            Decoder::Anthropic(s) => s.event(event_name, data)?,
            Decoder::Gemini(s) => s.event(data)?,
        };
        Ok(if events.is_empty() {
            vec![StreamEvent::Ignore]
        } else {
            events
        })
    }

    /// Call when the byte stream ends: Gemini's [`StreamEvent::Done`] if it finished; nothing
    /// for the others (their `Done` came from an event).
    pub(crate) fn finish(&mut self) -> Vec<StreamEvent> {
        match &mut self.0 {
            Decoder::OpenAi(_) | Decoder::Anthropic(_) => Vec::new(),
            Decoder::Gemini(s) => s.finish(),
        }
    }
}

/// A stream event that is not valid JSON.
fn malformed(api: Api, data: &str, err: &serde_json::Error) -> StreamFailure {
    let what = api.as_str();
    Failure::decode(format!(
        "malformed {what} stream event ({err}): {}",
        excerpt(data.as_bytes())
    ))
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Fixture helpers shared by the wire tests.

    use super::{Failure, StreamDecoder};
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
        let mut decoder = StreamDecoder::new(api);
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
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::classify::FailureClass;
    use super::test_support::request;
    use super::*;
    use crate::types::{FinishReason, Usage};

    const PLANTED: &str = "sk-planted-7e1d0c4b9a";

    #[test]
    fn requests_put_the_key_only_in_a_sensitive_header() {
        let key = ApiKey::new(PLANTED.to_owned());
        let table = [
            (
                Api::OpenAi,
                "https://api.openai.com/v1/",
                "https://api.openai.com/v1/chat/completions",
                "authorization",
                format!("Bearer {PLANTED}"),
            ),
            (
                Api::Anthropic,
                "https://api.anthropic.com",
                "https://api.anthropic.com/v1/messages",
                "x-api-key",
                PLANTED.to_owned(),
            ),
            (
                Api::Gemini,
                "https://generativelanguage.googleapis.com/v1beta/",
                "https://generativelanguage.googleapis.com/v1beta/models/m:streamGenerateContent?alt=sse",
                "x-goog-api-key",
                PLANTED.to_owned(),
            ),
        ];
        for (api, base, url, auth, value) in table {
            let wire = build(api, base, "m", &key, &request(), true);
            assert_eq!(wire.url, url, "{api:?}");
            assert_eq!(wire.headers["content-type"], "application/json");
            assert_eq!(wire.headers[auth], value.as_str(), "{api:?}");
            assert!(wire.headers[auth].is_sensitive(), "{api:?}");
            let shown = format!("{wire:?}");
            assert!(!shown.contains(PLANTED), "{api:?} leaked the key: {shown}");
            assert!(!wire.body.to_string().contains(PLANTED));
        }
        let anthropic = build(Api::Anthropic, "http://x", "m", &key, &request(), false);
        assert_eq!(anthropic.headers["anthropic-version"], "2023-06-01");
        assert_eq!(anthropic.headers.len(), 3);
    }

    #[test]
    fn a_key_that_cannot_be_a_header_is_left_out() {
        let key = ApiKey::new("sk-bad\nkey".to_owned());
        let wire = build(Api::OpenAi, "http://x/v1", "m", &key, &request(), false);
        assert!(wire.headers.get("authorization").is_none());
        assert!(!format!("{wire:?}").contains("sk-bad"));
    }

    #[test]
    fn parse_response_dispatches_and_keeps_an_excerpt_on_decode_errors() {
        let ok = parse_response(
            Api::OpenAi,
            include_bytes!("../../tests/fixtures/openai/ok.json"),
        );
        assert_eq!(ok.unwrap().finish_reason, Some(FinishReason::Stop));
        let long = format!("<html>{}</html>", "é".repeat(1000));
        for api in Api::ALL {
            let err = parse_response(api, long.as_bytes()).unwrap_err();
            assert_eq!(err.api, api.as_str());
            assert!(err.excerpt.starts_with("<html>éé") && err.excerpt.ends_with('…'));
            assert_eq!(err.excerpt.chars().count(), EXCERPT_MAX + 1);
            assert!(err.to_string().starts_with("cannot decode the "), "{err}");
            assert_eq!(Failure::from(err).class, FailureClass::Decode);
        }
        let empty = parse_response(Api::Gemini, b"{}").unwrap();
        assert_eq!((empty.content.as_str(), empty.usage), ("", None));
    }

    #[test]
    fn malformed_stream_events_are_decode_failures() {
        for api in Api::ALL {
            let mut decoder = StreamDecoder::new(api);
            assert_eq!(decoder.event("", "  ").unwrap(), [StreamEvent::Ignore]);
            let failure = decoder.event("message_delta", "{not json").unwrap_err();
            assert_eq!(
                (failure.class, failure.status),
                (FailureClass::Decode, None),
                "{api:?}"
            );
            assert!(
                failure.message.contains("{not json"),
                "{api:?}: {}",
                failure.message
            );
        }
    }

    #[test]
    fn finish_adds_nothing_once_done_was_seen() {
        let mut openai = StreamDecoder::new(Api::OpenAi);
        assert_eq!(openai.event("", "[DONE]").unwrap(), [StreamEvent::Done]);
        assert_eq!(
            openai.event("", r#"{"choices":[]}"#).unwrap(),
            [StreamEvent::Ignore]
        );
        assert_eq!(openai.finish(), []);
        let mut anthropic = StreamDecoder::new(Api::Anthropic);
        let stop = r#"{"type":"message_stop"}"#;
        assert_eq!(
            anthropic.event("message_stop", stop).unwrap(),
            [StreamEvent::Done]
        );
        assert_eq!(anthropic.finish(), []);
        let mut gemini = StreamDecoder::new(Api::Gemini);
        let last =
            r#"{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3}}"#;
        let usage = Usage {
            prompt_tokens: 3,
            completion_tokens: 0,
        };
        let want = [
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(usage),
        ];
        assert_eq!(gemini.event("", last).unwrap(), want);
        assert_eq!(gemini.finish(), [StreamEvent::Done]);
        assert_eq!(gemini.finish(), []);
    }
}
