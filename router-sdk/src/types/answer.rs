//! What comes back: why the model stopped, what it used, a completion or its streamed events,
//! each provider call made, and the receipt.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ToolCall, ToolCallDelta};
use crate::thinking::{ThinkingDelta, Thought};

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
    /// The model called tools: answer them with [`Role::Tool`] messages.
    ToolCalls,
    /// Anything else, as the provider named it.
    Other(String),
}

impl FinishReason {
    /// The reason's name: `stop`, `length`, `content_filter`, `tool_calls`, or the provider's
    /// own. These are also OpenAI's names.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Other(other) => other,
        }
    }

    /// The reason named `name` ([`FinishReason::as_str`]'s names; OpenAI's legacy
    /// `function_call` is `tool_calls`), else [`FinishReason::Other`].
    pub fn from_name(name: &str) -> Self {
        match name {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

/// Token usage of one request, as the provider reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion tokens, reasoning / thinking tokens included.
    pub completion_tokens: u64,
    /// Of the prompt tokens, those read from the provider's prompt cache (billed at the
    /// model's `cached_input` price).
    #[serde(default)]
    pub cached_prompt_tokens: u64,
    /// Of the completion tokens, those spent reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Of the prompt tokens, those written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`), billed at the model's cache-write prices.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Of the cache writes, those kept for an hour (billed at `cache_write_1h`); the rest are
    /// kept five minutes.
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

impl Usage {
    /// `prompt` prompt and `completion` completion tokens, none cached or reasoning.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            ..Self::default()
        }
    }

    /// The cost in USD at `price`: each part of the prompt (plain, read from the cache,
    /// written to it) at its price, in the band the prompt's size falls in.
    pub fn cost(&self, price: &router_core::config::Price) -> f64 {
        let written_1h = self.cache_write_1h_tokens.min(self.cache_write_tokens);
        price.bill(&router_core::config::Billed {
            prompt: self.prompt_tokens,
            cached: self.cached_prompt_tokens,
            written: self.cache_write_tokens - written_1h,
            written_1h,
            output: self.completion_tokens,
        })
    }

    /// Prompt plus completion, saturating at `u64::MAX`.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// What an adapter makes of a complete (non-streaming) provider response.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The provider's id of the response.
    pub id: Option<String>,
    /// The answer text.
    pub content: String,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: Option<FinishReason>,
    /// Usage, if the provider reported it.
    pub usage: Option<Usage>,
    /// The model's refusal to answer (OpenAI's `message.refusal`), if it gave one.
    pub refusal: Option<String>,
    /// The model's thinking, where its provider sends it back signed.
    pub thinking: Vec<Thought>,
}

/// What an adapter makes of one streamed event.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text to pass to the caller.
    Delta(String),
    /// A piece of a tool call.
    ToolCall(ToolCallDelta),
    /// A piece of the model's refusal to answer (OpenAI's `delta.refusal`).
    Refusal(String),
    /// A piece of the model's thinking.
    Thinking(ThinkingDelta),
    /// The provider's id of the response.
    Id(String),
    /// The finish reason arrived.
    Finish(FinishReason),
    /// Usage so far (cumulative: replaces any earlier value).
    Usage(Usage),
    /// The stream is complete.
    Done,
    /// Nothing for the caller (pings, block starts).
    Ignore,
}

impl StreamEvent {
    /// Whether it is part of the answer (text, a tool call, a finish): once one came, the
    /// caller may have output and the request is never retried.
    pub(crate) fn says_something(&self) -> bool {
        matches!(
            self,
            StreamEvent::Delta(_)
                | StreamEvent::ToolCall(_)
                | StreamEvent::Refusal(_)
                | StreamEvent::Thinking(_)
                | StreamEvent::Finish(_)
        )
    }
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
    /// When it started, by the router's clock.
    #[serde(skip)]
    pub started: std::time::SystemTime,
    /// How long it took: until it failed, answered in full, or its stream ended.
    #[serde(skip)]
    pub took: Duration,
    /// Its span id in the request's trace (sent in its `traceparent`), when the request
    /// carried one ([`ChatRequest::trace`](crate::types::ChatRequest::trace)).
    #[serde(skip)]
    pub span_id: Option<crate::trace::SpanId>,
}

/// A completed chat: the answer and its receipt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatResponse {
    /// The answer's text.
    pub content: String,
    /// The tool calls the model made, in order (`finish_reason` is then `tool_calls`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The model's thinking, where its provider sends it back signed: give it back in the
    /// assistant message of the next turn ([`Message::thinking`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<Thought>,
    /// Who answered, why the model stopped, usage, cost, attempts and waits.
    #[serde(flatten)]
    pub receipt: Receipt,
}

/// How a request was served, whole or streamed: the last word of every answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Receipt {
    /// The request's id: the caller's, else the one llmroute drew.
    pub request_id: String,
    /// The provider's id of the response, when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// Why the model stopped.
    pub finish_reason: Option<FinishReason>,
    /// The model's refusal to answer, when it declined (OpenAI's `refusal`, say for a
    /// structured answer it will not give): the text is then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
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
    /// When the request waited in a deployment's line: how many requests stood before it when
    /// it joined (0: it was first). `None` when it never stood in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
    /// Time spent in provider calls, failed ones included: until each answered in full, or for
    /// a stream until it opened. The rest of a request's time is the router's (waits included).
    #[serde(with = "ms")]
    pub upstream: Duration,
    /// The tenant's window (requests and tokens of the last 60 s) as the admission of the call
    /// that answered left it: what rate-limit headers report. `None` without a tenant, or when
    /// that admission counted nothing there. Not part of the JSON receipt.
    #[serde(skip)]
    pub tenant_window: Option<router_core::ledger::WindowUse>,
}

/// One item of a chat stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatChunk {
    /// More text.
    Delta(String),
    /// A piece of a tool call, as it arrives.
    ToolCallDelta(ToolCallDelta),
    /// The answer's tool calls, assembled: sent once, before [`ChatChunk::Done`], when the
    /// model made any.
    ToolCalls(Vec<ToolCall>),
    /// A piece of the model's thinking, as it arrives.
    Thinking(ThinkingDelta),
    /// The answer's thinking, assembled: sent once, before the tool calls and
    /// [`ChatChunk::Done`], when the model thought.
    Thoughts(Vec<Thought>),
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

/// Assembles streamed tool-call pieces into whole calls: per index, the first id and name, the
/// arguments joined in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallAssembly {
    calls: Vec<(u32, ToolCall)>,
}

impl ToolCallAssembly {
    /// Adds one piece.
    pub fn push(&mut self, delta: &ToolCallDelta) {
        let at = match self.calls.iter().position(|(i, _)| *i == delta.index) {
            Some(at) => at,
            None => {
                let empty = ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                };
                self.calls.push((delta.index, empty));
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[at].1;
        if let Some(id) = delta.id.as_ref().filter(|_| call.id.is_empty()) {
            call.id.clone_from(id);
        }
        if let Some(name) = delta.name.as_ref().filter(|_| call.name.is_empty()) {
            call.name.clone_from(name);
        }
        call.arguments.push_str(&delta.arguments);
    }

    /// Whether no piece arrived.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The calls, by index.
    pub fn finish(mut self) -> Vec<ToolCall> {
        self.calls.sort_by_key(|(i, _)| *i);
        self.calls.into_iter().map(|(_, c)| c).collect()
    }
}
