//! Neutral, provider-independent chat types. Wire adapters translate these to and from each
//! provider's JSON; nothing here knows about any provider's format.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The caller.
    User,
    /// The model.
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

pub use router_core::flow::Priority;

/// A chat request, independent of provider. Its `Debug` shows the extra headers' names, never
/// their values (a header may carry a credential for a proxy).
#[derive(Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// Model name or alias; `None` uses `defaults.model` from the configuration.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Upper bound on completion tokens.
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// The tenant this request is accounted to.
    pub tenant: Option<String>,
    /// How long the whole request (waits, retries, the call) may take.
    pub deadline: Option<Duration>,
    /// How urgent it is.
    pub priority: Priority,
    /// Extra HTTP headers sent to the provider with every attempt of this request: tracing
    /// ids, provider features (e.g. `anthropic-beta`). Headers that carry the key or frame the
    /// body (`authorization`, `x-api-key`, `x-goog-api-key`, `content-type`, `content-length`,
    /// `host`, `transfer-encoding`) are refused with [`Error::InvalidRequest`](crate::Error).
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for ChatRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ChatRequest")
            .field("model", &self.model)
            .field("messages", &self.messages)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("stop", &self.stop)
            .field("tenant", &self.tenant)
            .field("deadline", &self.deadline)
            .field("priority", &self.priority)
            .field("headers (values hidden)", &headers)
            .finish()
    }
}

impl ChatRequest {
    /// A request of one user message to the default model.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            messages: vec![Message::user(prompt)],
            ..Self::default()
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The provider filtered the content.
    ContentFilter,
    /// Anything else, as the provider named it.
    Other(String),
}

/// Token usage of one request, as the provider reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion tokens, reasoning / thinking tokens included.
    pub completion_tokens: u64,
}

impl Usage {
    /// Prompt plus completion, saturating at `u64::MAX`.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// What an adapter makes of a complete (non-streaming) provider response.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The answer text.
    pub content: String,
    /// Why it stopped.
    pub finish_reason: Option<FinishReason>,
    /// Usage, if the provider reported it.
    pub usage: Option<Usage>,
}

/// What an adapter makes of one streamed event.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text to pass to the caller.
    Delta(String),
    /// The finish reason arrived.
    Finish(FinishReason),
    /// Usage so far (cumulative: replaces any earlier value).
    Usage(Usage),
    /// The stream is complete.
    Done,
    /// Nothing for the caller (pings, block starts).
    Ignore,
}

/// How one provider call ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The provider answered.
    Ok,
    /// The call failed; the router failed over or gave up.
    Failed {
        /// What kind of failure (`rate_limited`, `overloaded`, `server_error`, `billing`, `auth`,
        /// `invalid`, `decode`, `timeout`, `connect`).
        kind: String,
        /// HTTP status, when the provider answered.
        status: Option<u16>,
        /// The provider's message, or the transport's.
        message: String,
        /// The cooldown put on the deployment, if any.
        #[serde(skip_serializing_if = "Option::is_none", with = "opt_ms")]
        cooldown: Option<Duration>,
        /// The provider's stated wait, when it was longer than `retry.max_cooldown_secs` and the
        /// cooldown was clamped to that.
        #[serde(skip_serializing_if = "Option::is_none", with = "opt_ms")]
        clamped_from: Option<Duration>,
    },
}

/// One provider call made for a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attempt {
    /// Provider name.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: AttemptOutcome,
}

/// A completed chat: the answer and its receipt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatResponse {
    /// The answer.
    pub content: String,
    /// Who answered, why the model stopped, usage, cost, attempts and waits.
    #[serde(flatten)]
    pub receipt: Receipt,
}

/// How a request was served, whole or streamed: the last word of every answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receipt {
    /// Why the model stopped.
    pub finish_reason: Option<FinishReason>,
    /// Provider that answered.
    pub provider: String,
    /// Model that answered.
    pub model: String,
    /// Tokens used, as the provider reported them (the estimate if it reported none).
    pub usage: Usage,
    /// Cost of this answer in USD, at the configured prices.
    pub cost_usd: f64,
    /// Every provider call made, failed ones first, the one that answered last.
    pub attempts: Vec<Attempt>,
    /// Time spent waiting for capacity.
    #[serde(with = "ms")]
    pub waited: Duration,
}

/// One item of a chat stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatChunk {
    /// More text.
    Delta(String),
    /// The stream is complete: always the last item of a successful stream.
    Done(Receipt),
}

mod ms {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
}

mod opt_ms {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }
}
