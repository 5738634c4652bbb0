//! Google Gemini `generateContent` / `streamGenerateContent?alt=sse`.

use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use router_core::config::Api;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::classify::{self, ErrorBody, FailureClass};
use super::headers::parse_duration_openai;
use super::{StreamFailure, malformed, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Role, StreamEvent, Usage};

/// The model path; a `models/` prefix on the configured name is accepted. The key is never in
/// the URL (HTTP client errors print URLs): it goes in `x-goog-api-key`.
pub(super) fn url(base: &str, model: &str, stream: bool) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    if stream {
        format!("{base}/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("{base}/models/{model}:generateContent")
    }
}

pub(super) fn auth(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    secret_header("x-goog-api-key", "", key)
}

pub(super) fn body(req: &ChatRequest) -> Value {
    let text = |m: &crate::types::Message| json!({"text": m.content});
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
            completion_tokens: u.candidates_token_count + u.thoughts_token_count,
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
    /// blocked before any candidate is a content-filter finish.
    fn first(&mut self) -> (String, Option<FinishReason>) {
        let blocked = self
            .prompt_feedback
            .as_ref()
            .and_then(|f| f.block_reason.as_ref());
        let Some(c) = self.candidates.iter_mut().min_by_key(|c| c.index) else {
            return (String::new(), blocked.map(|_| FinishReason::ContentFilter));
        };
        let parts = std::mem::take(&mut c.content.parts);
        let text = parts
            .into_iter()
            .filter(|p| !p.thought)
            .filter_map(|p| p.text)
            .collect();
        (text, c.finish_reason.as_deref().map(finish_reason))
    }
}

pub(super) fn parse_response(body: &[u8]) -> Result<Completion, serde_json::Error> {
    let mut response: Response = serde_json::from_slice(body)?;
    let (content, finish_reason) = response.first();
    Ok(Completion {
        content,
        finish_reason,
        usage: response.usage_metadata.map(Usage::from),
    })
}

/// Stream state: whether a finish reason arrived (then the end of the stream is `Done`).
#[derive(Debug, Default)]
pub(super) struct Stream {
    finished: bool,
    done: bool,
}

impl Stream {
    pub(super) fn event(&mut self, data: &str) -> Result<Vec<StreamEvent>, StreamFailure> {
        let mut chunk: Response =
            serde_json::from_str(data).map_err(|e| malformed(Api::Gemini, data, &e))?;
        if chunk.error.is_some() {
            return Err(classify::stream_failure(Api::Gemini, data.as_bytes()));
        }
        let (text, finish) = chunk.first();
        let mut events = Vec::new();
        if !text.is_empty() {
            events.push(StreamEvent::Delta(text));
        }
        if let Some(reason) = finish {
            self.finished = true;
            events.push(StreamEvent::Finish(reason));
        }
        if let Some(usage) = chunk.usage_metadata {
            events.push(StreamEvent::Usage(usage.into()));
        }
        Ok(events)
    }

    /// `Done` once, if the stream delivered a finish reason; nothing if it was cut short.
    pub(super) fn finish(&mut self) -> Vec<StreamEvent> {
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
pub(super) fn error_body(body: &[u8]) -> Option<ErrorBody> {
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::test_support::{decode_all, request};

    #[test]
    fn body_uses_contents_system_instruction_and_generation_config() {
        let want = json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Hi"}]},
                {"role": "model", "parts": [{"text": "Hello."}]},
                {"role": "user", "parts": [{"text": "Bye"}]},
            ],
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "generationConfig": {"maxOutputTokens": 64, "temperature": 0.5, "stopSequences": ["END"]},
        });
        assert_eq!(body(&request()), want);
        let plain = json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]});
        assert_eq!(body(&ChatRequest::new("Hi")), plain);
    }

    #[test]
    fn urls() {
        let base = "https://generativelanguage.googleapis.com/v1beta";
        let plain = format!("{base}/models/gemini-2.5-flash:generateContent");
        assert_eq!(url(base, "gemini-2.5-flash", false), plain);
        let stream = format!("{base}/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
        assert_eq!(url(base, "models/gemini-2.5-flash", true), stream);
    }

    #[test]
    fn response_bills_thoughts_as_output() {
        let got = parse_response(include_bytes!("../../tests/fixtures/gemini/ok.json")).unwrap();
        assert_eq!(
            got.content,
            "AI learns patterns from data to make predictions."
        );
        assert_eq!(got.finish_reason, Some(FinishReason::Stop));
        assert_eq!(
            got.usage,
            Some(Usage {
                prompt_tokens: 8,
                completion_tokens: 10 + 1024
            })
        );
    }

    #[test]
    fn thought_parts_and_blocked_prompts() {
        let body = br#"{"candidates":[{"content":{"parts":[{"text":"hmm","thought":true},
            {"text":"Yes."}]},"finishReason":"MAX_TOKENS"}]}"#;
        let got = parse_response(body).unwrap();
        assert_eq!(
            (got.content.as_str(), got.finish_reason),
            ("Yes.", Some(FinishReason::Length))
        );
        let blocked = br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":5}}"#;
        let got = parse_response(blocked).unwrap();
        assert_eq!(got.finish_reason, Some(FinishReason::ContentFilter));
        assert_eq!(
            got.usage,
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 0
            })
        );
    }

    #[test]
    fn stream_takes_the_latest_cumulative_usage_and_ends_with_done() {
        let sse = include_str!("../../tests/fixtures/gemini/stream.sse");
        let (events, failure) = decode_all(Api::Gemini, sse);
        assert_eq!(failure, None);
        assert_eq!(
            events,
            [
                StreamEvent::Delta("The".into()),
                StreamEvent::Usage(Usage {
                    prompt_tokens: 9,
                    completion_tokens: 0
                }),
                StreamEvent::Delta(" sky is".into()),
                StreamEvent::Usage(Usage {
                    prompt_tokens: 9,
                    completion_tokens: 31
                }),
                StreamEvent::Delta(" blue.".into()),
                StreamEvent::Finish(FinishReason::Stop),
                StreamEvent::Usage(Usage {
                    prompt_tokens: 9,
                    completion_tokens: 33
                }),
                StreamEvent::Done,
            ]
        );
    }

    #[test]
    fn a_stream_cut_before_its_finish_reason_has_no_done() {
        let mut s = Stream::default();
        let chunk = r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}"#;
        assert_eq!(s.event(chunk).unwrap(), [StreamEvent::Delta("Hi".into())]);
        assert_eq!(s.finish(), []);
    }

    #[test]
    fn finish_reasons() {
        for (name, want) in [
            ("STOP", FinishReason::Stop),
            ("MAX_TOKENS", FinishReason::Length),
            ("SAFETY", FinishReason::ContentFilter),
            (
                "MALFORMED_FUNCTION_CALL",
                FinishReason::Other("MALFORMED_FUNCTION_CALL".into()),
            ),
        ] {
            assert_eq!(finish_reason(name), want);
        }
    }
}
