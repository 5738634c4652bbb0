//! OpenAI-compatible `/chat/completions` (OpenAI, DeepSeek, Groq, Together, vLLM, Ollama, ...).

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use router_core::config::Api;
use router_core::ledger::Observation;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::classify::{ErrorBody, Failure, FailureClass};
use super::headers::{self, parse_duration_openai};
use super::{EventDecoder, WireFormat, error, malformed, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Role, StreamEvent, Usage};

/// The OpenAI-compatible wire format.
#[derive(Debug)]
pub(super) struct OpenAi;

/// `(remaining, reset)` header pairs: requests, then tokens.
const DIMS: [(&str, &str); 2] = [
    (
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
];

/// Resets are Go-style durations (`6m0s`, `17ms`).
fn reset(value: &str, _now: SystemTime) -> Option<Duration> {
    parse_duration_openai(value)
}

impl WireFormat for OpenAi {
    fn url(&self, base: &str, _model: &str, _stream: bool) -> String {
        format!("{base}/chat/completions")
    }

    fn auth(&self, key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        secret_header("authorization", "Bearer ", key)
    }

    fn body(&self, model: &str, req: &ChatRequest, stream: bool) -> Value {
        body(model, req, stream)
    }

    fn parse_response(&self, body: &[u8]) -> Result<Completion, String> {
        parse_response(body)
    }

    fn stream_decoder(&self) -> Box<dyn EventDecoder> {
        Box::<Stream>::default()
    }

    fn error_body(&self, body: &[u8]) -> Option<ErrorBody> {
        error_body(body)
    }

    fn observation(&self, headers: &HeaderMap, now: SystemTime) -> Observation {
        Observation {
            requests: headers::dimension(headers, DIMS[0], reset, now),
            tokens: headers::dimension(headers, DIMS[1], reset, now),
            ..Observation::default()
        }
    }

    fn exhausted_reset(&self, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
        headers::exhausted_reset(headers, &DIMS, reset, now)
    }
}

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn body(model: &str, req: &ChatRequest, stream: bool) -> Value {
    let messages = req.messages.iter().map(|m| {
        let mut msg = Map::new();
        msg.insert("role".into(), role(m.role).into());
        msg.insert("content".into(), m.content.as_str().into());
        Value::Object(msg)
    });
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("messages".into(), messages.collect());
    if let Some(max) = req.max_tokens {
        body.insert("max_tokens".into(), max.into());
    }
    if let Some(t) = req.temperature.filter(|t| t.is_finite()) {
        body.insert("temperature".into(), t.into());
    }
    if !req.stop.is_empty() {
        body.insert("stop".into(), req.stop.clone().into());
    }
    if stream {
        body.insert("stream".into(), true.into());
        let mut options = Map::new();
        options.insert("include_usage".into(), true.into());
        body.insert("stream_options".into(), options.into());
    }
    Value::Object(body)
}

#[derive(Deserialize)]
struct Response {
    #[serde(default, deserialize_with = "nullable")]
    choices: Vec<Choice>,
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
    #[serde(default, deserialize_with = "nullable")]
    message: MessageJson,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct MessageJson {
    content: Option<String>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default, deserialize_with = "nullable")]
    prompt_tokens: u64,
    #[serde(default, deserialize_with = "nullable")]
    completion_tokens: u64,
}

impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        }
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

fn parse_response(body: &[u8]) -> Result<Completion, String> {
    let response: Response = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let choice = response.choices.into_iter().min_by_key(|c| c.index);
    let Some(choice) = choice else {
        return Err("no choices in the answer".into());
    };
    Ok(Completion {
        content: choice.message.content.unwrap_or_default(),
        finish_reason: choice.finish_reason.as_deref().map(finish_reason),
        usage: response.usage.map(Usage::from),
    })
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default, deserialize_with = "nullable")]
    choices: Vec<ChunkChoice>,
    usage: Option<UsageJson>,
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
    #[serde(default, deserialize_with = "nullable")]
    delta: MessageJson,
    finish_reason: Option<String>,
}

/// Stream state: only whether `[DONE]` was seen (later events are ignored).
#[derive(Debug, Default)]
struct Stream {
    done: bool,
}

impl EventDecoder for Stream {
    fn event(&mut self, _event_name: &str, data: &str) -> Result<Vec<StreamEvent>, Failure> {
        if self.done {
            return Ok(Vec::new());
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(vec![StreamEvent::Done]);
        }
        let chunk: Chunk =
            serde_json::from_str(data).map_err(|e| malformed(Api::OpenAi, data, &e))?;
        if chunk.error.is_some() {
            let data = data.as_bytes();
            return Err(error::stream_failure(error_body(data), data));
        }
        let mut events = Vec::new();
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
                events.push(StreamEvent::Delta(text));
            }
            if let Some(reason) = choice.finish_reason {
                events.push(StreamEvent::Finish(finish_reason(&reason)));
            }
        }
        if let Some(usage) = chunk.usage {
            events.push(StreamEvent::Usage(usage.into()));
        }
        Ok(events)
    }
}

/// `{"error": {...}}`, `{"error": "text"}`, or a flat `{"message", "type", "code"}` (vLLM).
#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorShape {
    Wrapped { error: ErrorField },
    Flat(ErrorJson),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorField {
    Object(ErrorJson),
    Text(String),
}

#[derive(Deserialize)]
struct ErrorJson {
    message: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<Value>,
}

fn error_body(body: &[u8]) -> Option<ErrorBody> {
    let error = match serde_json::from_slice::<ErrorShape>(body).ok()? {
        ErrorShape::Wrapped {
            error: ErrorField::Object(e),
        }
        | ErrorShape::Flat(e) => e,
        ErrorShape::Wrapped {
            error: ErrorField::Text(message),
        } => {
            return Some(ErrorBody {
                message,
                ..ErrorBody::default()
            });
        }
    };
    let numeric = error
        .code
        .as_ref()
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    let code = match error.code {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => error.kind.clone(),
    };
    let says = |word: &str| code.as_deref() == Some(word) || error.kind.as_deref() == Some(word);
    let billing = says("insufficient_quota") || says("billing_hard_limit_reached");
    let status = if says("rate_limit_exceeded") {
        Some(429)
    } else {
        numeric.filter(|s| (100..600).contains(s))
    };
    Some(ErrorBody {
        message: error.message,
        code,
        status,
        class: billing.then_some(FailureClass::Billing),
        retry_delay: None,
    })
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
