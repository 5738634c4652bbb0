//! Anthropic `/v1/messages`.

mod body;
mod stream;

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use router_core::config::Api;
use router_core::ledger::Observation;
use serde::Deserialize;
use serde_json::Value;

use super::classify::{ErrorBody, FailureClass};
use super::headers::{self, Pair, parse_rfc3339_reset};
use super::{EventDecoder, Target, WireFormat, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Thought, ToolCall, Usage};
use body::{AnswerTool, body};
use stream::Stream;

/// The Anthropic wire format.
#[derive(Debug)]
pub(super) struct Anthropic;

/// The `anthropic-version` header value.
const VERSION: &str = "2023-06-01";

/// `(remaining, reset)` header pairs: requests, tokens (the most restrictive token limit),
/// input tokens, output tokens. Resets are RFC 3339 times.
const DIMS: [Pair; 4] = [
    (
        HeaderName::from_static("anthropic-ratelimit-requests-remaining"),
        HeaderName::from_static("anthropic-ratelimit-requests-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-tokens-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-input-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-input-tokens-reset"),
    ),
    (
        HeaderName::from_static("anthropic-ratelimit-output-tokens-remaining"),
        HeaderName::from_static("anthropic-ratelimit-output-tokens-reset"),
    ),
];

impl WireFormat for Anthropic {
    fn url(&self, base: &str, _model: &str, _stream: bool) -> String {
        format!("{base}/v1/messages")
    }

    fn auth(&self, key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
        secret_header("x-api-key", "", key)
    }

    /// `GET /v1/models/{model}`: a model id or alias.
    fn model_url(&self, base: &str, model: &str) -> (String, super::Lookup) {
        (format!("{base}/v1/models/{model}"), super::Lookup::Itself)
    }

    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", VERSION)]
    }

    fn body(&self, target: &Target<'_>, req: &ChatRequest, stream: bool) -> Value {
        body(target.model, req, target.output_cap, stream)
    }

    fn parse_response(&self, req: &ChatRequest, body: &[u8]) -> Result<Completion, String> {
        parse_response(body, AnswerTool::of(req).map(|a| a.name))
    }

    fn stream_decoder(&self, req: &ChatRequest) -> Box<dyn EventDecoder> {
        Box::new(Stream::new(AnswerTool::of(req).map(|a| a.name.to_owned())))
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
            requests: dim(&DIMS[0]),
            tokens: dim(&DIMS[1]),
            input_tokens: dim(&DIMS[2]),
            output_tokens: dim(&DIMS[3]),
        }
    }

    fn exhausted_reset(&self, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
        headers::exhausted_reset(headers, &DIMS, parse_rfc3339_reset, now)
    }
}

#[derive(Deserialize)]
struct Response {
    id: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    content: Vec<Block>,
    stop_reason: Option<String>,
    usage: Option<UsageJson>,
}

/// A content block of an answer: text, tool calls, thinking and redacted thinking are read;
/// any other block is skipped.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default, deserialize_with = "nullable")]
        text: String,
    },
    Thinking {
        #[serde(default, deserialize_with = "nullable")]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        #[serde(default, deserialize_with = "nullable")]
        data: String,
    },
    ToolUse {
        #[serde(default, deserialize_with = "nullable")]
        id: String,
        #[serde(default, deserialize_with = "nullable")]
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

/// Usage in a response or `message_start`, and (every field optional) in `message_delta`.
#[derive(Deserialize, Default, Debug, Clone, Copy)]
pub(super) struct UsageJson {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "nullable")]
    cache_creation: CacheCreation,
    #[serde(default, deserialize_with = "nullable")]
    output_tokens_details: OutputDetails,
}

/// `usage.cache_creation`: the cache writes by how long they are kept, together
/// `cache_creation_input_tokens`.
#[derive(Deserialize, Default, Debug, Clone, Copy)]
struct CacheCreation {
    ephemeral_5m_input_tokens: Option<u64>,
    ephemeral_1h_input_tokens: Option<u64>,
}

/// `usage.output_tokens_details`: the thinking tokens, already counted in `output_tokens`.
#[derive(Deserialize, Default, Debug, Clone, Copy)]
struct OutputDetails {
    thinking_tokens: Option<u64>,
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
            (
                &mut self.cache_creation.ephemeral_5m_input_tokens,
                newer.cache_creation.ephemeral_5m_input_tokens,
            ),
            (
                &mut self.cache_creation.ephemeral_1h_input_tokens,
                newer.cache_creation.ephemeral_1h_input_tokens,
            ),
            (
                &mut self.output_tokens_details.thinking_tokens,
                newer.output_tokens_details.thinking_tokens,
            ),
        ];
        for (field, value) in fields {
            if value.is_some() {
                *field = value;
            }
        }
    }

    /// Prompt = input + cache creation + cache read, saturating: a sum past `u64` is far above
    /// the plausibility bound the wire layer checks next. Reasoning = the thinking tokens, for
    /// the record only: `output_tokens` already counts them. Cache writes are
    /// `cache_creation_input_tokens` (or, without it, the sum of its breakdown); the hour-long
    /// ones are the breakdown's `ephemeral_1h_input_tokens`, the rest five-minute ones.
    pub(super) fn usage(&self) -> Usage {
        let n = |v: Option<u64>| v.unwrap_or(0);
        let split = self.cache_creation;
        let by_split =
            n(split.ephemeral_5m_input_tokens).saturating_add(n(split.ephemeral_1h_input_tokens));
        let written = self.cache_creation_input_tokens.unwrap_or(by_split);
        Usage {
            cache_write_tokens: written,
            cache_write_1h_tokens: n(split.ephemeral_1h_input_tokens).min(written),
            prompt_tokens: n(self.input_tokens)
                .saturating_add(written)
                .saturating_add(n(self.cache_read_input_tokens)),
            completion_tokens: n(self.output_tokens),
            cached_prompt_tokens: n(self.cache_read_input_tokens),
            reasoning_tokens: n(self.output_tokens_details.thinking_tokens),
        }
    }
}

/// The neutral finish reason of a `stop_reason`.
pub(super) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        "tool_use" => FinishReason::ToolCalls,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The finish reason of an answer that made `calls` tool calls for the caller: a `tool_use`
/// stop with no such call is the answer tool's, and the answer is complete (`Stop`).
pub(super) fn finish_of(reason: &str, answer_tool: bool, calls: usize) -> FinishReason {
    match finish_reason(reason) {
        FinishReason::ToolCalls if answer_tool && calls == 0 => FinishReason::Stop,
        other => other,
    }
}

/// A tool call's `input` as JSON text (`{}` when absent).
fn input_text(input: &Value) -> String {
    if input.is_null() {
        "{}".to_owned()
    } else {
        input.to_string()
    }
}

/// Reads a whole answer. `answer_tool` names the tool whose input is the answer (a JSON answer):
/// its input becomes text content, never a tool call, and is the whole content (with thinking,
/// the tool is offered with `auto`, and text may come before it).
fn parse_response(body: &[u8], answer_tool: Option<&str>) -> Result<Completion, String> {
    let response: Response = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if response.content.is_empty() && response.stop_reason.is_none() {
        return Err("no content and no stop reason in the answer".into());
    }
    let (mut content, mut tool_calls, mut thinking) = (String::new(), Vec::new(), Vec::new());
    let mut answer: Option<String> = None;
    for block in response.content {
        match block {
            Block::Text { text } => content.push_str(&text),
            Block::ToolUse { name, input, .. } if Some(name.as_str()) == answer_tool => {
                answer.get_or_insert_default().push_str(&input_text(&input));
            }
            Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input_text(&input),
            }),
            Block::Thinking {
                thinking: text,
                signature,
            } => thinking.push(Thought {
                origin: Api::Anthropic,
                text,
                signature,
                redacted: None,
            }),
            Block::RedactedThinking { data } => thinking.push(Thought {
                origin: Api::Anthropic,
                text: String::new(),
                signature: None,
                redacted: Some(data),
            }),
            Block::Other => {}
        }
    }
    let finish_reason = response
        .stop_reason
        .as_deref()
        .map(|r| finish_of(r, answer_tool.is_some(), tool_calls.len()));
    let content = answer.unwrap_or(content);
    Ok(Completion {
        id: response.id.filter(|id| !id.is_empty()),
        content,
        tool_calls,
        finish_reason,
        usage: response.usage.map(|u| u.usage()),
        refusal: None,
        thinking,
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
mod carried_tests;
#[cfg(test)]
mod tests;
