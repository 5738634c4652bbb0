//! Anthropic `/v1/messages`.

mod stream;

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use router_core::ledger::Observation;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::classify::{ErrorBody, FailureClass};
use super::headers::{self, parse_rfc3339_reset};
use super::{EventDecoder, WireFormat, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Role, Usage};
use stream::Stream;

/// The Anthropic wire format.
#[derive(Debug)]
pub(super) struct Anthropic;

/// The `anthropic-version` header value.
const VERSION: &str = "2023-06-01";

/// `max_tokens` is required by Anthropic; used when the request sets none.
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// `(remaining, reset)` header pairs: requests, tokens (the most restrictive token limit),
/// input tokens, output tokens. Resets are RFC 3339 times.
const DIMS: [(&str, &str); 4] = [
    (
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
    ),
    (
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
    ),
    (
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-reset",
    ),
    (
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-reset",
    ),
];

impl WireFormat for Anthropic {
    fn url(&self, base: &str, _model: &str, _stream: bool) -> String {
        format!("{base}/v1/messages")
    }

    fn auth(&self, key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        secret_header("x-api-key", "", key)
    }

    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", VERSION)]
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

    /// Tokens come from `anthropic-ratelimit-tokens-*`, or, when absent, whichever of the input
    /// / output token limits has less remaining.
    fn observation(&self, headers: &HeaderMap, now: SystemTime) -> Observation {
        let dim = |pair| headers::dimension(headers, pair, parse_rfc3339_reset, now);
        // Each family against its own limit: `tokens-*` (the most restrictive of the two) is
        // compared with tpm, input with itpm, output with otpm.
        Observation {
            requests: dim(DIMS[0]),
            tokens: dim(DIMS[1]),
            input_tokens: dim(DIMS[2]),
            output_tokens: dim(DIMS[3]),
        }
    }

    fn exhausted_reset(&self, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
        headers::exhausted_reset(headers, &DIMS, parse_rfc3339_reset, now)
    }
}

fn body(model: &str, req: &ChatRequest, stream: bool) -> Value {
    let (system, turns): (Vec<_>, Vec<_>) =
        req.messages.iter().partition(|m| m.role == Role::System);
    let messages = turns.iter().map(|m| {
        let role = if m.role == Role::Assistant {
            "assistant"
        } else {
            "user"
        };
        let mut msg = Map::new();
        msg.insert("role".into(), role.into());
        msg.insert("content".into(), m.text_content().into());
        Value::Object(msg)
    });
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert(
        "max_tokens".into(),
        req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).into(),
    );
    if !system.is_empty() {
        let joined: Vec<String> = system.iter().map(|m| m.text_content()).collect();
        body.insert("system".into(), joined.join("\n\n").into());
    }
    body.insert("messages".into(), messages.collect());
    if let Some(t) = req.temperature.filter(|t| t.is_finite()) {
        body.insert("temperature".into(), t.into());
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), req.stop.clone().into());
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

#[derive(Deserialize)]
struct Response {
    #[serde(default, deserialize_with = "nullable")]
    content: Vec<Block>,
    stop_reason: Option<String>,
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, deserialize_with = "nullable")]
    text: String,
}

/// Usage in a response or `message_start`, and (every field optional) in `message_delta`.
#[derive(Deserialize, Default, Debug, Clone, Copy)]
pub(super) struct UsageJson {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl UsageJson {
    /// Replaces the fields `newer` reports (its counts are cumulative).
    pub(super) fn assign(&mut self, newer: UsageJson) {
        let fields = [
            (&mut self.input_tokens, newer.input_tokens),
            (&mut self.output_tokens, newer.output_tokens),
            (
                &mut self.cache_creation_input_tokens,
                newer.cache_creation_input_tokens,
            ),
            (
                &mut self.cache_read_input_tokens,
                newer.cache_read_input_tokens,
            ),
        ];
        for (field, value) in fields {
            if value.is_some() {
                *field = value;
            }
        }
    }

    /// Prompt = input + cache creation + cache read, saturating: a sum past `u64` is far above
    /// the plausibility bound the wire layer checks next.
    pub(super) fn usage(&self) -> Usage {
        let n = |v: Option<u64>| v.unwrap_or(0);
        Usage {
            prompt_tokens: n(self.input_tokens)
                .saturating_add(n(self.cache_creation_input_tokens))
                .saturating_add(n(self.cache_read_input_tokens)),
            completion_tokens: n(self.output_tokens),
            cached_prompt_tokens: n(self.cache_read_input_tokens),
            reasoning_tokens: 0,
        }
    }
}

pub(super) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

fn parse_response(body: &[u8]) -> Result<Completion, String> {
    let response: Response = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if response.content.is_empty() && response.stop_reason.is_none() {
        return Err("no content and no stop reason in the answer".into());
    }
    let text = response
        .content
        .into_iter()
        .filter(|b| b.kind == "text")
        .map(|b| b.text);
    Ok(Completion {
        id: None,
        tool_calls: Vec::new(),
        content: text.collect(),
        finish_reason: response.stop_reason.as_deref().map(finish_reason),
        usage: response.usage.map(|u| u.usage()),
    })
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorJson,
}

#[derive(Deserialize)]
struct ErrorJson {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default, deserialize_with = "nullable")]
    message: String,
}

/// The HTTP status each documented error type comes with.
fn status_of(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// Billing: the message mentions a spend limit, the credit balance or usage limits (these come
/// as 429 or 400), or the type is `billing_error`.
fn is_billing(error: &ErrorJson) -> bool {
    let message = error.message.to_lowercase();
    let words = [
        "spend limit",
        "spend_limit",
        "credit balance",
        "usage limit",
    ];
    error.kind == "billing_error" || words.iter().any(|w| message.contains(w))
}

pub(super) fn error_body(body: &[u8]) -> Option<ErrorBody> {
    let ErrorEnvelope { error } = serde_json::from_slice(body).ok()?;
    let class = if is_billing(&error) {
        Some(FailureClass::Billing)
    } else if error.kind == "overloaded_error" {
        Some(FailureClass::Overloaded)
    } else {
        None
    };
    Some(ErrorBody {
        status: status_of(&error.kind),
        code: (!error.kind.is_empty()).then(|| error.kind.clone()),
        message: error.message,
        class,
        retry_delay: None,
    })
}

#[cfg(test)]
mod tests;
