//! OpenAI-compatible `/chat/completions` (OpenAI, DeepSeek, Groq, Together, vLLM, Ollama, ...).

use reqwest::header::{HeaderName, HeaderValue};
use router_core::config::Api;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::classify::{self, ErrorBody, FailureClass};
use super::{StreamFailure, malformed, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Role, StreamEvent, Usage};

pub(super) fn url(base: &str) -> String {
    format!("{base}/chat/completions")
}

pub(super) fn auth(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    secret_header("authorization", "Bearer ", key)
}

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

pub(super) fn body(model: &str, req: &ChatRequest, stream: bool) -> Value {
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

pub(super) fn parse_response(body: &[u8]) -> Result<Completion, serde_json::Error> {
    let response: Response = serde_json::from_slice(body)?;
    let choice = response.choices.into_iter().min_by_key(|c| c.index);
    let (content, finish) = match choice {
        Some(c) => (c.message.content.unwrap_or_default(), c.finish_reason),
        None => (String::new(), None),
    };
    Ok(Completion {
        content,
        finish_reason: finish.as_deref().map(finish_reason),
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
pub(super) struct Stream {
    done: bool,
}

impl Stream {
    pub(super) fn event(&mut self, data: &str) -> Result<Vec<StreamEvent>, StreamFailure> {
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
            return Err(classify::stream_failure(Api::OpenAi, data.as_bytes()));
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

pub(super) fn error_body(body: &[u8]) -> Option<ErrorBody> {
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::test_support::{decode_all, request};
    use serde_json::json;

    #[test]
    fn body_has_messages_and_only_the_fields_that_are_set() {
        let plain = body("gpt-4o-mini", &crate::types::ChatRequest::new("Hi"), false);
        assert_eq!(
            plain,
            json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]})
        );
        let full = body("gpt-4o-mini", &request(), true);
        let want = json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Bye"},
            ],
            "max_tokens": 64,
            "temperature": 0.5,
            "stop": ["END"],
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        assert_eq!(full, want);
    }

    #[test]
    fn response_with_usage() {
        let got = parse_response(include_bytes!("../../tests/fixtures/openai/ok.json")).unwrap();
        assert_eq!(got.content, "Hello! How can I help you today?");
        assert_eq!(got.finish_reason, Some(FinishReason::Stop));
        assert_eq!(
            got.usage,
            Some(Usage {
                prompt_tokens: 1117,
                completion_tokens: 46
            })
        );
    }

    #[test]
    fn finish_reasons() {
        for (name, want) in [
            ("stop", FinishReason::Stop),
            ("length", FinishReason::Length),
            ("content_filter", FinishReason::ContentFilter),
            ("tool_calls", FinishReason::Other("tool_calls".into())),
        ] {
            assert_eq!(finish_reason(name), want);
        }
    }

    #[test]
    fn stream_fixture_to_exact_events() {
        let (events, failure) = decode_all(
            Api::OpenAi,
            include_str!("../../tests/fixtures/openai/stream.sse"),
        );
        assert_eq!(failure, None);
        assert_eq!(
            events,
            [
                StreamEvent::Ignore,
                StreamEvent::Delta("Hel".into()),
                StreamEvent::Delta("lo!".into()),
                StreamEvent::Finish(FinishReason::Stop),
                StreamEvent::Usage(Usage {
                    prompt_tokens: 9,
                    completion_tokens: 3
                }),
                StreamEvent::Done,
            ]
        );
    }

    #[test]
    fn error_inside_a_stream_is_a_failure() {
        let (events, failure) = decode_all(
            Api::OpenAi,
            include_str!("../../tests/fixtures/openai/stream_error.sse"),
        );
        assert_eq!(events, [StreamEvent::Delta("Par".into())]);
        let failure = failure.unwrap();
        assert_eq!(failure.class, FailureClass::RateLimited);
        assert_eq!(failure.status, None);
        assert_eq!(
            failure.message,
            "The server is overloaded, please retry later."
        );
    }

    #[test]
    fn error_shapes() {
        let text = error_body(br#"{"error": "model 'x' not found"}"#).unwrap();
        assert_eq!(text.message, "model 'x' not found");
        let flat =
            br#"{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}"#;
        let flat = error_body(flat).unwrap();
        assert_eq!(
            (flat.code.as_deref(), flat.status),
            (Some("400"), Some(400))
        );
        assert_eq!(error_body(b"<html>502 Bad Gateway</html>"), None);
        assert_eq!(error_body(br#"{"detail": "nope"}"#), None);
    }
}
