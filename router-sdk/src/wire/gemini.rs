//! Google Gemini `generateContent` / `streamGenerateContent?alt=sse`.

use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use router_core::config::Api;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::classify::{ErrorBody, Failure, FailureClass};
use super::headers::parse_duration_openai;
use super::{EventDecoder, WireFormat, error, malformed, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Role, StreamEvent, Usage};

/// The Gemini wire format. It sends no rate-limit headers: the trait's defaults read none.
#[derive(Debug)]
pub(super) struct Gemini;

impl WireFormat for Gemini {
    fn url(&self, base: &str, model: &str, stream: bool) -> String {
        url(base, model, stream)
    }

    /// The key is never in the URL (HTTP client errors print URLs): it goes in a header.
    fn auth(&self, key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        secret_header("x-goog-api-key", "", key)
    }

    fn body(&self, _model: &str, req: &ChatRequest, _stream: bool) -> Value {
        body(req)
    }

    fn parse_response(&self, _req: &ChatRequest, body: &[u8]) -> Result<Completion, String> {
        parse_response(body)
    }

    fn stream_decoder(&self, _req: &ChatRequest) -> Box<dyn EventDecoder> {
        Box::<Stream>::default()
    }

    fn error_body(&self, body: &[u8]) -> Option<ErrorBody> {
        error_body(body)
    }
}

/// The model path; a `models/` prefix on the configured name is accepted.
fn url(base: &str, model: &str, stream: bool) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    if stream {
        format!("{base}/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("{base}/models/{model}:generateContent")
    }
}

fn body(req: &ChatRequest) -> Value {
    let text = |m: &crate::types::Message| json!({"text": m.text_content()});
    let (system, turns): (Vec<_>, Vec<_>) =
        req.messages.iter().partition(|m| m.role == Role::System);
    let contents: Vec<Value> = turns
        .iter()
        .map(|m| {
            let role = if m.role == Role::Assistant {
                "model"
            } else {
                "user"
            };
            json!({"role": role, "parts": [text(m)]})
        })
        .collect();
    let mut body = Map::new();
    body.insert("contents".into(), contents.into());
    if !system.is_empty() {
        let parts: Vec<Value> = system.iter().map(|m| text(m)).collect();
        body.insert("systemInstruction".into(), json!({ "parts": parts }));
    }
    let mut config = Map::new();
    if let Some(max) = req.max_tokens {
        config.insert("maxOutputTokens".into(), max.into());
    }
    if let Some(t) = req.temperature.filter(|t| t.is_finite()) {
        config.insert("temperature".into(), t.into());
    }
    if !req.stop.is_empty() {
        config.insert("stopSequences".into(), req.stop.clone().into());
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), config.into());
    }
    Value::Object(body)
}

/// A response, or one streamed partial response.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default, deserialize_with = "nullable")]
    candidates: Vec<Candidate>,
    usage_metadata: Option<UsageJson>,
    prompt_feedback: Option<PromptFeedback>,
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default, deserialize_with = "nullable")]
    content: Content,
    finish_reason: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    index: u32,
}

#[derive(Deserialize, Default)]
struct Content {
    #[serde(default, deserialize_with = "nullable")]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
struct Part {
    text: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    thought: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageJson {
    #[serde(default, deserialize_with = "nullable")]
    prompt_token_count: u64,
    #[serde(default, deserialize_with = "nullable")]
    candidates_token_count: u64,
    #[serde(default, deserialize_with = "nullable")]
    thoughts_token_count: u64,
}

/// Thoughts are billed as output.
impl From<UsageJson> for Usage {
    fn from(u: UsageJson) -> Self {
        Usage {
            prompt_tokens: u.prompt_token_count,
            // Saturating: a sum past `u64` is far above the plausibility bound checked next.
            completion_tokens: u
                .candidates_token_count
                .saturating_add(u.thoughts_token_count),
            cached_prompt_tokens: 0,
            reasoning_tokens: u.thoughts_token_count,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        other => FinishReason::Other(other.to_owned()),
    }
}

impl Response {
    /// The first candidate's text (thought parts left out) and finish reason; a prompt that was
    /// blocked before any candidate is a content-filter finish. `None`: no candidate and no
    /// block reason, nothing at all.
    fn first(&mut self) -> Option<(String, Option<FinishReason>)> {
        let blocked = self
            .prompt_feedback
            .as_ref()
            .and_then(|f| f.block_reason.as_ref());
        let Some(c) = self.candidates.iter_mut().min_by_key(|c| c.index) else {
            return blocked.map(|_| (String::new(), Some(FinishReason::ContentFilter)));
        };
        let parts = std::mem::take(&mut c.content.parts);
        let text = parts
            .into_iter()
            .filter(|p| !p.thought)
            .filter_map(|p| p.text)
            .collect();
        Some((text, c.finish_reason.as_deref().map(finish_reason)))
    }
}

/// What an answer with no candidate and no block reason lacks.
const NO_CANDIDATES: &str = "no candidates (and no promptFeedback.blockReason)";

fn parse_response(body: &[u8]) -> Result<Completion, String> {
    let mut response: Response = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let (content, finish_reason) = response.first().ok_or(NO_CANDIDATES)?;
    Ok(Completion {
        id: None,
        tool_calls: Vec::new(),
        content,
        finish_reason,
        usage: response.usage_metadata.map(Usage::from),
    })
}

/// Stream state: whether text arrived, whether a finish reason arrived (then the end of the
/// stream is `Done`).
#[derive(Debug, Default)]
struct Stream {
    delivered: bool,
    finished: bool,
    done: bool,
}

impl EventDecoder for Stream {
    fn event(&mut self, _event_name: &str, data: &str) -> Result<Vec<StreamEvent>, Failure> {
        let mut chunk: Response =
            serde_json::from_str(data).map_err(|e| malformed(Api::Gemini, data, &e))?;
        if chunk.error.is_some() {
            let data = data.as_bytes();
            return Err(error::stream_failure(error_body(data), data));
        }
        // A chunk with no candidate is malformed unless something came before (a trailing
        // chunk may carry usage alone).
        let (text, finish) = match chunk.first() {
            Some(first) => first,
            None if self.delivered => (String::new(), None),
            None => {
                return Err(Failure::decode(format!(
                    "malformed gemini stream: {NO_CANDIDATES}"
                )));
            }
        };
        let mut events = Vec::new();
        if !text.is_empty() {
            self.delivered = true;
            events.push(StreamEvent::Delta(text));
        }
        if let Some(reason) = finish {
            (self.delivered, self.finished) = (true, true);
            events.push(StreamEvent::Finish(reason));
        }
        if let Some(usage) = chunk.usage_metadata {
            events.push(StreamEvent::Usage(usage.into()));
        }
        Ok(events)
    }

    /// `Done` once, if the stream delivered a finish reason; nothing if it was cut short.
    fn finish(&mut self) -> Vec<StreamEvent> {
        if self.finished && !self.done {
            self.done = true;
            vec![StreamEvent::Done]
        } else {
            Vec::new()
        }
    }
}

/// Error bodies come as an object, or (from some streaming endpoints) a one-element array.
#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorShape {
    One(ErrorEnvelope),
    Many([ErrorEnvelope; 1]),
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorJson,
}

#[derive(Deserialize)]
struct ErrorJson {
    code: Option<u16>,
    #[serde(default, deserialize_with = "nullable")]
    message: String,
    status: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    details: Vec<Detail>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    #[serde(default, deserialize_with = "nullable")]
    violations: Vec<Violation>,
    retry_delay: Option<String>,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Violation {
    #[serde(default, deserialize_with = "nullable")]
    quota_id: String,
}

/// A `PerDay` quota id is billing (it clears at the daily reset, not after `retryDelay`); an
/// `API_KEY_INVALID` reason is auth (Gemini sends it as 400).
fn error_body(body: &[u8]) -> Option<ErrorBody> {
    let error = match serde_json::from_slice::<ErrorShape>(body).ok()? {
        ErrorShape::One(e) | ErrorShape::Many([e]) => e.error,
    };
    let details = &error.details;
    let quota_ids = details
        .iter()
        .flat_map(|d| &d.violations)
        .map(|v| v.quota_id.as_str());
    let class = if quota_ids.clone().any(|id| id.contains("PerDay")) {
        Some(FailureClass::Billing)
    } else if details
        .iter()
        .any(|d| d.reason.as_deref() == Some("API_KEY_INVALID"))
    {
        Some(FailureClass::Auth)
    } else {
        None
    };
    let retry_delay: Option<Duration> = details
        .iter()
        .filter_map(|d| d.retry_delay.as_deref())
        .find_map(parse_duration_openai);
    Some(ErrorBody {
        message: error.message,
        code: error.status,
        status: error.code,
        class,
        retry_delay,
    })
}

#[cfg(test)]
#[path = "gemini_tests.rs"]
mod tests;
