//! The leaf values of a validated configuration: wire formats, limits, ids, leases,
//! request defaults and retry settings. Each is checked once, when the configuration becomes a
//! [`Registry`](super::Registry); nothing here knows the raw file or the checks.

use std::num::NonZeroU64;
use std::time::Duration;

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI-compatible `/chat/completions` (OpenAI, DeepSeek, Groq, vLLM, Ollama, ...).
    OpenAi,
    /// Anthropic `/v1/messages`.
    Anthropic,
    /// Google Gemini `generateContent`.
    Gemini,
}

impl Api {
    /// Every API, in the order error messages list them.
    pub const ALL: [Api; 3] = [Api::OpenAi, Api::Anthropic, Api::Gemini];

    /// The API named `name` in `providers.yaml` (`openai`, `anthropic`, `gemini`), if any.
    pub fn from_name(name: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|api| api.as_str() == name)
    }

    /// The name used in `providers.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
        }
    }
}

/// Limits of one limited scope (a deployment or a whole provider). `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Requests per sliding 60 s window.
    pub rpm: Option<NonZeroU64>,
    /// Tokens (prompt + completion) per sliding 60 s window.
    pub tpm: Option<NonZeroU64>,
    /// Input (prompt) tokens per sliding 60 s window (Anthropic's ITPM), counted apart from
    /// `tpm`.
    pub itpm: Option<NonZeroU64>,
    /// Output (completion) tokens per sliding 60 s window (Anthropic's OTPM), counted apart from
    /// `tpm`.
    pub otpm: Option<NonZeroU64>,
    /// Requests in flight at once.
    pub concurrency: Option<NonZeroU64>,
    /// Requests per day (the day ends where the scope's `day_resets` puts it).
    pub rpd: Option<NonZeroU64>,
    /// Tokens (prompt + completion) per day.
    pub tpd: Option<NonZeroU64>,
}

impl Limits {
    /// True when no dimension is limited.
    pub fn is_unlimited(&self) -> bool {
        self.rpm.is_none()
            && self.tpm.is_none()
            && self.itpm.is_none()
            && self.otpm.is_none()
            && self.concurrency.is_none()
            && !self.per_day()
    }

    /// Whether a per-day limit (`rpd`, `tpd`) is set.
    pub fn per_day(&self) -> bool {
        self.rpd.is_some() || self.tpd.is_some()
    }
}

/// Index of a provider in [`Registry::providers`](super::Registry::providers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderId(pub usize);

/// Index of a deployment in [`Registry::deployments`](super::Registry::deployments). Lower ids come first in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeploymentId(pub usize);
/// Values used when a request leaves them out.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// Model name or alias used when a request names none.
    pub model: Option<String>,
    /// Estimated completion tokens before any history exists.
    pub output_tokens: u64,
    /// A model's cap on completion tokens when neither the request (`max_tokens`) nor the model
    /// sets one: what providers count against TPM for such a request.
    pub max_output_tokens: u64,
    /// How long a concurrency slot lives when its holder never settles (crash), in ms.
    pub slot_ttl_ms: u64,
}

impl Defaults {
    /// `output_tokens` when `providers.yaml` does not set it.
    pub const OUTPUT_TOKENS: u64 = 512;
    /// `max_output_tokens` when `providers.yaml` does not set it.
    pub const MAX_OUTPUT_TOKENS: u64 = 4_096;
    /// `slot_ttl_ms` when `providers.yaml` does not set `slot_ttl_secs` (600 s).
    pub const SLOT_TTL_MS: u64 = 600_000;
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            model: None,
            output_tokens: Self::OUTPUT_TOKENS,
            max_output_tokens: Self::MAX_OUTPUT_TOKENS,
            slot_ttl_ms: Self::SLOT_TTL_MS,
        }
    }
}

/// Retry and failover settings (`retry:` in `providers.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    /// Provider calls per request, the first included, across all deployments.
    pub max_attempts: u32,
    /// Backoff base: the first computed wait is up to this long.
    pub base: Duration,
    /// Backoff cap: no computed wait is longer.
    pub cap: Duration,
    /// How long a request may take in all (waits, retries, calls) unless it sets its own.
    pub deadline: Duration,
    /// How long one call may take before the provider starts answering (the whole answer,
    /// without streaming); then it counts as a timeout and the request fails over.
    pub attempt_timeout: Duration,
    /// The longest cooldown a provider's stated wait (or rate-limit reset) may put on a
    /// deployment; longer ones are clamped to it. Billing failures keep their own, longer one.
    pub max_cooldown: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(30),
            deadline: Duration::from_secs(120),
            attempt_timeout: Duration::from_secs(60),
            max_cooldown: Duration::from_secs(300),
        }
    }
}
/// How an instance leases blocks of a deployment's limits from the shared ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// `lease: { requests, tokens, secs }`: blocks of this size, held at most `secs`.
    Block {
        /// Requests per block.
        requests: u64,
        /// Tokens per block (counted against TPM, ITPM and OTPM alike).
        tokens: u64,
        /// How long a block is held before what is left of it goes back.
        secs: u64,
    },
    /// `lease: auto`: blocks sized from this instance's rate over the last ten seconds (so
    /// that an idle instance holds little), held [`Lease::AUTO_SECS`]; the next block is asked
    /// for in the background as the open one runs out.
    Auto,
}

impl Lease {
    /// How long an `auto` block is held, and what its size covers at the recent rate.
    pub const AUTO_SECS: u64 = 10;
    /// The longest a block may be held: one window.
    pub const MAX_SECS: u64 = 60;
}
