//! The values that cross the ledger boundary: what a request needs, what it was granted, why it was
//! refused, and what the ledger currently holds.

use std::time::Duration;

use crate::config::DeploymentId;

/// The longest a concurrency slot may live unsettled; longer `slot_ttl`s are capped to it.
pub const MAX_SLOT_TTL: Duration = Duration::from_secs(3600);

/// What one request asks of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Estimated tokens (prompt + completion) to reserve against TPM.
    pub tokens: u64,
    /// How long the concurrency slot lives if it is never settled (its holder crashed); at most
    /// [`MAX_SLOT_TTL`].
    pub slot_ttl: Duration,
}

impl Need {
    /// The slot TTL in milliseconds, capped at [`MAX_SLOT_TTL`] (at least 1 ms).
    pub(crate) fn slot_ttl_ms(&self) -> u64 {
        self.slot_ttl.min(MAX_SLOT_TTL).as_millis().max(1) as u64
    }
}

/// A granted admission. Settle or release it exactly once; settling again is a no-op.
///
/// Forgetting it leaks a concurrency slot until `slot_ttl` passes and leaves the token estimate
/// standing, hence `#[must_use]`.
#[must_use = "a reservation must be settled or released, or its slot stays taken until its TTL"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// Unique id of this reservation (the concurrency slot's member name).
    pub id: u64,
    /// The deployment that admitted the request.
    pub deployment: DeploymentId,
    /// Index of the window bucket the tokens were reserved in (ms / bucket size).
    pub bucket: u64,
    /// Tokens reserved.
    pub tokens: u64,
    /// The 0-based position of the chosen deployment in the candidate list given to `admit`.
    pub rank: usize,
}

/// What a request actually used, as reported by the provider (or estimated when it reported
/// nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActualUsage {
    /// Prompt plus completion tokens.
    pub tokens: u64,
}

/// Which limit refused a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// The deployment is cooling down after a provider said it is full or failing.
    Cooldown,
    /// Requests per minute.
    Requests,
    /// Tokens per minute.
    Tokens,
    /// Requests in flight.
    Concurrency,
}

impl LimitKind {
    /// Short name for messages: `cooldown`, `rpm`, `tpm`, `concurrency`.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Cooldown => "cooldown",
            LimitKind::Requests => "rpm",
            LimitKind::Tokens => "tpm",
            LimitKind::Concurrency => "concurrency",
        }
    }
}

/// Whose limit it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The deployment's own limit.
    Deployment,
    /// The provider-wide limit shared by all of the provider's models.
    Provider,
}

/// Whether a refused candidate could ever take the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The request is larger than the limit: waiting will not help.
    Never,
    /// The limit is full now; the candidate can take the request after this long (assuming
    /// nothing else takes the capacity first). For concurrency it is the moment the oldest slot
    /// would expire if never settled: an upper bound, as slots are usually freed sooner.
    NotNow(Duration),
}

/// Why one candidate refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The refusing deployment.
    pub deployment: DeploymentId,
    /// The binding limit (for "not now", the one that frees last).
    pub limit: LimitKind,
    /// Whether it is the deployment's or the provider's limit.
    pub scope: Scope,
    /// Never, or not before some time.
    pub verdict: Verdict,
}

/// Every candidate refused. One [`Refusal`] per candidate, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// Per candidate, why it refused.
    pub refusals: Vec<Refusal>,
}

impl Denial {
    /// True when no candidate can ever take this request (each one's limit is below the need).
    pub fn never_fits(&self) -> bool {
        self.refusals.iter().all(|r| r.verdict == Verdict::Never)
    }

    /// The earliest moment any candidate could take the request, or `None` when none ever can.
    pub fn retry_after(&self) -> Option<Duration> {
        self.refusals
            .iter()
            .filter_map(|r| match r.verdict {
                Verdict::NotNow(d) => Some(d),
                Verdict::Never => None,
            })
            .min()
    }
}

/// The outcome of `admit`.
#[must_use = "a granted admission must be settled or released"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Reserved on one candidate.
    Granted(Reservation),
    /// Every candidate refused.
    Denied(Denial),
}

/// What a provider reported about its own limits (from `x-ratelimit-*` or
/// `anthropic-ratelimit-*` headers). Resets are durations until fully replenished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observation {
    /// Requests the provider says remain, and when they are replenished.
    pub requests: Option<(u64, Duration)>,
    /// Tokens the provider says remain, and when they are replenished.
    pub tokens: Option<(u64, Duration)>,
}

/// Use against limit in one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScopeUsage {
    /// Requests counted in the current window.
    pub requests: u64,
    /// Tokens counted in the current window.
    pub tokens: u64,
    /// Requests in flight (slots held).
    pub in_flight: u64,
    /// The scope's RPM limit, if any.
    pub rpm_limit: Option<u64>,
    /// The scope's TPM limit, if any.
    pub tpm_limit: Option<u64>,
    /// The scope's concurrency limit, if any.
    pub concurrency_limit: Option<u64>,
}

/// What the ledger holds for one deployment right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeploymentSnapshot {
    /// The deployment.
    pub deployment: DeploymentId,
    /// The deployment's own window and slots.
    pub usage: ScopeUsage,
    /// The provider-wide window and slots; `None` when the provider has no provider-wide limits
    /// (it is then not tracked apart from its deployments).
    pub provider: Option<ScopeUsage>,
    /// Time left on the deployment's cooldown, if it is cooling down.
    pub cooldown: Option<Duration>,
}
