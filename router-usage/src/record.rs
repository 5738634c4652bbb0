//! One usage record: what one finished request did.

use serde::{Deserialize, Serialize};

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A provider answered in full.
    Ok,
    /// The request gave up with an error.
    Failed,
    /// The caller dropped the request (or the stream) before it ended.
    Cancelled,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Failed, Outcome::Cancelled];

    /// `ok`, `failed` or `cancelled`: as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// The outcome stored as `text`.
    pub fn parse(text: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == text)
    }
}

/// One finished request, success or failure. Never holds an API key: `key_id` is an identifier
/// of the gateway key (a prefix of its SHA-256), not the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// This record's own id (random, 32 hex digits): writing a record twice keeps one.
    pub id: String,
    /// When the request finished, ms since the Unix epoch.
    pub at_ms: u64,
    /// The request's id: the caller's, else the one llmroute drew.
    pub request_id: String,
    /// The tenant it was accounted to.
    pub tenant: Option<String>,
    /// The gateway key it came with (an identifier, never the key).
    pub key_id: Option<String>,
    /// The model or alias the caller asked for.
    pub model_asked: String,
    /// The routing rule that chose the model, when the request named a routed alias.
    pub route: Option<String>,
    /// The provider that served it (the last one tried, for a failure; none when no call was
    /// made).
    pub provider: Option<String>,
    /// The model that served it (as `provider`).
    pub model: Option<String>,
    /// Prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Of the prompt tokens, those read from the provider's cache.
    pub cached_tokens: u64,
    /// Completion tokens, reasoning ones included.
    pub completion_tokens: u64,
    /// Of the completion tokens, those spent reasoning.
    pub reasoning_tokens: u64,
    /// What the request cost, micro-USD: every attempt as the ledger charged it (a failed call
    /// the provider may have run at its estimate).
    pub cost_micros: u64,
    /// From the request's start to its end (a stream's: to its last event), ms.
    pub latency_ms: u64,
    /// A stream's time to its first token, ms.
    pub first_token_ms: Option<u64>,
    /// Provider calls made.
    pub attempts: u32,
    /// The failure class of each failed call, in order.
    pub failed_attempts: Vec<String>,
    /// Time spent waiting for capacity, ms.
    pub waited_ms: u64,
    /// When the request waited in a deployment's line: how many requests stood before it when
    /// it joined (records spilled by an earlier version have none).
    #[serde(default)]
    pub queue_position: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it failed: the failure class (`rate_limited`, `no_capacity`, `budget`, ...).
    pub failure: Option<String>,
    /// `interactive` or `batch`.
    pub priority: String,
    /// Whether the answer was streamed.
    pub stream: bool,
}

impl Record {
    /// The cost in USD.
    pub fn cost_usd(&self) -> f64 {
        self.cost_micros as f64 / 1e6
    }
}
