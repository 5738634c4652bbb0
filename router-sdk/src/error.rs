//! The SDK's one error type.

use std::time::Duration;

use router_core::config::ConfigError;
use router_core::ledger::LedgerError;

use crate::types::Attempt;
use crate::wire::classify::FailureClass;

/// The failure class of a stream that broke, in attempts, usage records and metrics.
pub(crate) const STREAM_BROKEN: &str = "stream_broken";

/// Everything `Router` can fail with. Messages never contain an API key: a missing key is named
/// by its environment variable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The request names a model or alias no deployment serves.
    #[error("unknown model `{model}`; known models and aliases: {}", known.join(", "))]
    UnknownModel {
        /// What the request named.
        model: String,
        /// Every model name and alias of the configuration.
        known: Vec<String>,
    },
    /// The request is unusable as it is (no messages, no model and no default).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No model the request may go to can serve one of its features.
    #[error(
        "no model can serve this request: it uses {feature}, which needs the `{capability}` \
         capability, and none of {} has it; add `{capability}` to a model's `capabilities` in \
         the configuration if the model can, or ask for a model that does",
        lacking.join(", ")
    )]
    Unsupported {
        /// The feature, e.g. `tools`.
        feature: String,
        /// The capability it needs, as `capabilities:` names it.
        capability: String,
        /// The deployments (`provider/model`) that lack it.
        lacking: Vec<String>,
    },
    /// No candidate deployment has its API key set.
    #[error("{}", missing_key_message(model, vars, unreadable))]
    MissingKey {
        /// What the request named.
        model: String,
        /// The environment variables, not set, that would each enable a candidate.
        vars: Vec<String>,
        /// Those that are set but hold nothing a key can be read from (not valid UTF-8).
        unreadable: Vec<String>,
    },
    /// No candidate could take the request before its deadline (or ever).
    #[error("{}", no_capacity_message(*never, *retry_after, detail))]
    NoCapacity {
        /// True when no candidate can ever take it (the request is larger than every limit).
        never: bool,
        /// When a candidate could take it, if ever.
        retry_after: Option<Duration>,
        /// Which limit refused, per candidate.
        detail: String,
        /// Calls made before giving up.
        attempts: Vec<Attempt>,
    },
    /// The tenant's budget cannot cover the request before its period ends: no waiting.
    #[error("tenant `{tenant}`: {detail}; the budget resets in {}", hms(*resets_in))]
    BudgetExhausted {
        /// The tenant.
        tenant: String,
        /// Which budget, per candidate.
        detail: String,
        /// When the soonest budget period resets.
        resets_in: Duration,
        /// Calls made before.
        attempts: Vec<Attempt>,
    },
    /// The provider answered with an error that retrying elsewhere did not (or cannot) fix.
    #[error("{provider}/{model}: {class} ({}): {message}", status.map_or("no status".into(), |s| format!("HTTP {s}")))]
    Provider {
        /// Provider name.
        provider: String,
        /// Model name.
        model: String,
        /// What kind of failure.
        class: FailureClass,
        /// HTTP status, if the provider answered with one.
        status: Option<u16>,
        /// The provider's error code or type (`context_length_exceeded`, `overloaded_error`,
        /// `RESOURCE_EXHAUSTED`, ...), when it gave one.
        code: Option<String>,
        /// The provider's message, any long piece of a configured key masked (for 401/403, also
        /// which variable holds the key).
        message: String,
        /// The wait the provider stated, if any.
        retry_after: Option<Duration>,
        /// Every call made.
        attempts: Vec<Attempt>,
    },
    /// The provider could not be reached or did not answer in time.
    #[error("{provider}/{model}: {}: {message}", if *timeout { "timed out" } else { "connection failed" })]
    Transport {
        /// Provider name.
        provider: String,
        /// Model name.
        model: String,
        /// True for a timeout, false for a connection failure.
        timeout: bool,
        /// What the HTTP client reported (URLs never carry keys).
        message: String,
        /// Every call made.
        attempts: Vec<Attempt>,
    },
    /// The provider's stream broke after it had begun: the connection closed mid-stream, or the
    /// stream ended without the provider's finish.
    #[error("{provider}/{model}: {how}: {message}")]
    StreamBroken {
        /// Provider name.
        provider: String,
        /// Model name.
        model: String,
        /// How it broke.
        how: Break,
        /// What the HTTP client reported, if anything.
        message: String,
        /// Every call made.
        attempts: Vec<Attempt>,
    },
    /// The state store failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The usage sink could not be opened or read (writing never fails a request).
    #[error(transparent)]
    Usage(#[from] router_usage::UsageError),
}

/// Choosing or opening a ledger or a usage sink (`Router::from_path`, `RouterBuilder::build`)
/// fails as the variant of the same name.
impl From<router_state::Error> for Error {
    fn from(e: router_state::Error) -> Self {
        match e {
            router_state::Error::Config(e) => Error::Config(e),
            router_state::Error::InvalidRequest(message) => Error::InvalidRequest(message),
            router_state::Error::Ledger(e) => Error::Ledger(e),
            router_state::Error::Usage(e) => Error::Usage(e),
            // A kind of failure added later: its message, as a request the router cannot run.
            other => Error::InvalidRequest(other.to_string()),
        }
    }
}

/// How a provider's stream broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Break {
    /// The connection closed, or failed, in the middle of the stream.
    Closed,
    /// The stream ended without the provider's finish (OpenAI's `[DONE]`, Anthropic's
    /// `message_stop`, Gemini's `finishReason`).
    Unfinished,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Break::Closed => "the upstream closed the connection mid-stream",
            Break::Unfinished => "the upstream ended the stream without a finish",
        })
    }
}

pub(crate) fn hms(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}h{:02}m{:02}s", s / 3600, s % 3600 / 60, s % 60)
}

/// What [`Error::MissingKey`] says: which variables to set, and which are set but unreadable
/// (their values never shown).
fn missing_key_message(model: &str, unset: &[String], unreadable: &[String]) -> String {
    let (is, them) = match unreadable.len() {
        0 => return format!("no API key set for `{model}`: set {}", unset.join(" or ")),
        1 => ("is", "it"),
        _ => ("are", "them"),
    };
    let mut message = format!(
        "no usable API key for `{model}`: {} {is} set but not valid UTF-8 (value not shown); \
         set {them} to the key itself, as plain text",
        unreadable.join(" and ")
    );
    if !unset.is_empty() {
        message.push_str(&format!(", or set {}", unset.join(" or ")));
    }
    message
}

fn no_capacity_message(never: bool, retry_after: Option<Duration>, detail: &str) -> String {
    match (never, retry_after) {
        (true, _) => format!("no deployment can ever take this request: {detail}"),
        (false, Some(d)) => format!(
            "no capacity before the deadline; retry after {:.1}s: {detail}",
            d.as_secs_f64()
        ),
        (false, None) => format!("no capacity before the deadline: {detail}"),
    }
}

impl Error {
    /// True when trying again later may succeed: no capacity yet, rate limits, overloads,
    /// server errors, malformed answers and transport failures.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::NoCapacity { never, .. } => !never,
            Error::Provider { class, .. } => matches!(
                class,
                FailureClass::RateLimited
                    | FailureClass::Overloaded
                    | FailureClass::ServerError
                    | FailureClass::Decode
            ),
            Error::Transport { .. }
            | Error::StreamBroken { .. }
            | Error::Ledger(_)
            | Error::Usage(_) => true,
            _ => false,
        }
    }

    /// How long to wait before trying again, when known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::NoCapacity { retry_after, .. } | Error::Provider { retry_after, .. } => {
                *retry_after
            }
            Error::BudgetExhausted { resets_in, .. } => Some(*resets_in),
            _ => None,
        }
    }

    /// The provider's HTTP status, when the provider answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Provider { status, .. } => *status,
            _ => None,
        }
    }

    /// The provider's error code or type, when it gave one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Provider { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// The provider involved, when one is.
    pub fn provider(&self) -> Option<&str> {
        match self {
            Error::Provider { provider, .. }
            | Error::Transport { provider, .. }
            | Error::StreamBroken { provider, .. } => Some(provider),
            _ => None,
        }
    }

    /// A short stable name of what failed, as usage records keep it: the provider's failure
    /// class (`rate_limited`, `server_error`, ...), `timeout`, `connect`, `no_capacity`,
    /// `budget`, `ledger`, `stream_broken`, or `invalid_request` for a request llmroute refused
    /// as it was.
    pub fn class(&self) -> &'static str {
        match self {
            Error::Provider { class, .. } => class.as_str(),
            Error::Transport { timeout: true, .. } => "timeout",
            Error::Transport { timeout: false, .. } => "connect",
            Error::StreamBroken { .. } => STREAM_BROKEN,
            Error::NoCapacity { .. } => "no_capacity",
            Error::BudgetExhausted { .. } => "budget",
            Error::Ledger(_) => "ledger",
            Error::Usage(_) => "usage",
            Error::Config(_)
            | Error::UnknownModel { .. }
            | Error::InvalidRequest(_)
            | Error::Unsupported { .. }
            | Error::MissingKey { .. } => "invalid_request",
        }
    }

    /// The calls made before this error.
    pub fn attempts(&self) -> &[Attempt] {
        match self {
            Error::NoCapacity { attempts, .. }
            | Error::BudgetExhausted { attempts, .. }
            | Error::Provider { attempts, .. }
            | Error::Transport { attempts, .. }
            | Error::StreamBroken { attempts, .. } => attempts,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::missing_key_message;

    #[test]
    fn a_missing_key_says_which_variable_to_set_and_which_is_set_but_unreadable() {
        let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            missing_key_message("chat", &owned(&["A_KEY", "B_KEY"]), &[]),
            "no API key set for `chat`: set A_KEY or B_KEY"
        );
        assert_eq!(
            missing_key_message("chat", &owned(&["B_KEY"]), &owned(&["A_KEY"])),
            "no usable API key for `chat`: A_KEY is set but not valid UTF-8 (value not shown); \
             set it to the key itself, as plain text, or set B_KEY"
        );
        assert_eq!(
            missing_key_message("chat", &[], &owned(&["A_KEY", "B_KEY"])),
            "no usable API key for `chat`: A_KEY and B_KEY are set but not valid UTF-8 (value \
             not shown); set them to the key itself, as plain text"
        );
    }
}
