//! The values that cross the ledger boundary: what a request needs, what it was granted, why it was
//! refused, and what the ledger currently holds.

use std::time::Duration;

use std::num::NonZeroU64;

use crate::config::{DeploymentId, Limits};

pub use super::tenant::{BudgetMicros, TenantHold, TenantNeed, TenantSpec, usd_to_micros};

/// The longest a concurrency slot may live unsettled; longer `slot_ttl`s are capped to it.
pub const MAX_SLOT_TTL: Duration = Duration::from_secs(3600);

/// What one request asks of the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// The reservation id, chosen by the caller (nonzero; [`Need::new`] draws a random one).
    /// Admitting a need whose id already holds a live slot on one of the candidates returns that
    /// reservation again and counts nothing twice, so a store may retry an admission whose reply
    /// was lost. Give each attempt that must be counted anew its own id.
    pub id: u64,
    /// Estimated tokens (prompt + completion) to reserve against TPM, on every candidate that
    /// has no estimate of its own in `candidate_tokens`.
    pub tokens: u64,
    /// Per candidate (in the candidates' order), the tokens to reserve there when they differ
    /// (providers tokenize differently). Empty: `tokens` everywhere. See [`Need::tokens_on`].
    pub candidate_tokens: Vec<u64>,
    /// The input (prompt) part of `tokens`, reserved against ITPM; the rest is output, reserved
    /// against OTPM. Capped at the candidate's tokens. See [`Need::input_on`].
    pub input_tokens: u64,
    /// Per candidate (in the candidates' order), the input part of its tokens. Empty:
    /// `input_tokens` everywhere.
    pub candidate_input_tokens: Vec<u64>,
    /// How long the concurrency slot lives if it is never settled (its holder crashed); at most
    /// [`MAX_SLOT_TTL`].
    pub slot_ttl: Duration,
    /// The tenant and the key accounted for, checked in the same atomic step as the
    /// deployments.
    pub tenant: Option<TenantNeed>,
    /// Percent of each deployment's and provider's limits this request may use (100 for
    /// interactive requests, `batch_share` for batch ones), so that higher priorities always
    /// find headroom. Scaled limits are rounded down, but never below 1.
    pub share_percent: u8,
    /// The request's ticket for the lines of the deployments it waits for (see `line.rs`).
    /// Without one it is a newcomer that joins no line: it still never passes a request
    /// waiting in one.
    pub line: Option<Ticket>,
}

/// A request's ticket in the lines of the deployments it waits for: the same on every
/// admission it asks for, so that it keeps its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// Its id (nonzero), drawn once per request.
    pub id: u64,
    /// How far behind its arrival its class is placed, ms: 0 for interactive requests,
    /// `priorities.batch_aging_secs` for batch ones.
    pub handicap_ms: u64,
    /// How long it stays in line after the last admission that carried it (its waiter asks
    /// again before then, or is gone).
    pub ttl_ms: u64,
    /// Whether a refused admission puts it in line (false: the request will not wait).
    pub join: bool,
    /// Whether it is a batch request's (lines count their tickets by class).
    pub batch: bool,
    /// Whether the request holds it in a line now, as its driver knows: an admission that
    /// does not go through the shared store (a leased block's) then takes it out of the lines
    /// on its own.
    pub queued: bool,
}

impl Need {
    /// A request of `tokens`, no tenant, full share, with a fresh random reservation id. All of
    /// `tokens` counts as output until [`Need::with_input_tokens`] says how much is input.
    pub fn new(tokens: u64, slot_ttl: Duration) -> Self {
        Self {
            id: fastrand::u64(1..),
            tokens,
            candidate_tokens: Vec::new(),
            input_tokens: 0,
            candidate_input_tokens: Vec::new(),
            slot_ttl,
            tenant: None,
            share_percent: 100,
            line: None,
        }
    }

    /// The same need under a fresh random id: an attempt that must be counted anew (a repeated
    /// id while its slot is live answers the earlier reservation).
    pub fn with_new_id(self) -> Self {
        Self {
            id: fastrand::u64(1..),
            ..self
        }
    }

    /// The same need with its own token estimate per candidate (in the candidates' order).
    pub fn with_candidate_tokens(self, tokens: Vec<u64>) -> Self {
        Self {
            candidate_tokens: tokens,
            ..self
        }
    }

    /// The same need with `input` of its tokens being input (prompt) tokens.
    pub fn with_input_tokens(self, input: u64) -> Self {
        Self {
            input_tokens: input,
            ..self
        }
    }

    /// The same need with the input part of each candidate's tokens (in the candidates' order).
    pub fn with_candidate_input_tokens(self, input: Vec<u64>) -> Self {
        Self {
            candidate_input_tokens: input,
            ..self
        }
    }

    /// The tokens to reserve on candidate `rank`: its own estimate, or `tokens` when it has
    /// none.
    pub fn tokens_on(&self, rank: usize) -> u64 {
        self.candidate_tokens
            .get(rank)
            .copied()
            .unwrap_or(self.tokens)
    }

    /// The input tokens to reserve against ITPM on candidate `rank` (at most
    /// [`Need::tokens_on`]).
    pub fn input_on(&self, rank: usize) -> u64 {
        let input = self.candidate_input_tokens.get(rank).copied();
        input.unwrap_or(self.input_tokens).min(self.tokens_on(rank))
    }

    /// The output tokens to reserve against OTPM on candidate `rank`: its tokens less its
    /// input.
    pub fn output_on(&self, rank: usize) -> u64 {
        self.tokens_on(rank) - self.input_on(rank)
    }

    /// `limits` scaled to this request's share.
    pub(crate) fn share_of(&self, limits: Limits) -> Limits {
        if self.share_percent >= 100 {
            return limits;
        }
        let scale = |l: Option<NonZeroU64>| {
            l.map(|v| {
                // In u128: a limit near u64::MAX ("unlimited" written as a number) must not
                // overflow.
                let share = u128::from(v.get()) * u128::from(self.share_percent) / 100;
                NonZeroU64::new(share as u64).unwrap_or(NonZeroU64::MIN)
            })
        };
        Limits {
            rpm: scale(limits.rpm),
            tpm: scale(limits.tpm),
            itpm: scale(limits.itpm),
            otpm: scale(limits.otpm),
            concurrency: scale(limits.concurrency),
            rpd: scale(limits.rpd),
            tpd: scale(limits.tpd),
        }
    }

    /// The estimated cost on candidate `rank`, micro-USD (0 without a tenant).
    pub(crate) fn cost(&self, rank: usize) -> u64 {
        self.tenant
            .as_ref()
            .and_then(|t| t.costs.get(rank).copied())
            .unwrap_or(0)
    }

    /// The slot TTL in milliseconds, capped at [`MAX_SLOT_TTL`] (at least 1 ms).
    pub(crate) fn slot_ttl_ms(&self) -> u64 {
        slot_ttl_ms(self.slot_ttl)
    }
}

/// A slot TTL in milliseconds, capped at [`MAX_SLOT_TTL`] (at least 1 ms).
pub(crate) fn slot_ttl_ms(ttl: Duration) -> u64 {
    ttl.min(MAX_SLOT_TTL).as_millis().max(1) as u64
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
    /// Tokens reserved (the need's estimate for this candidate, [`Need::tokens_on`]).
    pub tokens: u64,
    /// The input part of `tokens` ([`Need::input_on`]), reserved against ITPM; the rest was
    /// reserved against OTPM.
    pub input_tokens: u64,
    /// The 0-based position of the chosen deployment in the candidate list given to `admit`.
    pub rank: usize,
    /// What was reserved of the tenant and the key, if the request had either.
    pub tenant: Option<TenantHold>,
}

/// What a sliding window counts: the requests and tokens of the last 60 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowUse {
    /// Requests (against RPM).
    pub requests: u64,
    /// Tokens, input and output (against TPM).
    pub tokens: u64,
}

/// What a request actually used, as reported by the provider (or estimated when it reported
/// nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ActualUsage {
    /// Prompt plus completion tokens.
    pub tokens: u64,
    /// The prompt (input) part of `tokens`; the rest is output. Settlement corrects ITPM and
    /// OTPM use with the two parts.
    pub input_tokens: u64,
    /// Its cost, micro-USD: replaces the estimate reserved against the tenant's budget.
    pub cost_micros: u64,
}

impl ActualUsage {
    /// `tokens` tokens at no cost (no tenant budget to correct), all of them output.
    pub fn tokens(tokens: u64) -> Self {
        Self {
            tokens,
            input_tokens: 0,
            cost_micros: 0,
        }
    }

    /// `input` prompt and `output` completion tokens at no cost.
    pub fn split(input: u64, output: u64) -> Self {
        Self {
            tokens: input.saturating_add(output),
            input_tokens: input,
            cost_micros: 0,
        }
    }

    /// The output (completion) part of `tokens`.
    pub fn output_tokens(&self) -> u64 {
        self.tokens.saturating_sub(self.input_tokens)
    }
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
    /// Input (prompt) tokens per minute.
    InputTokens,
    /// Output (completion) tokens per minute.
    OutputTokens,
    /// Requests in flight.
    Concurrency,
    /// The tenant's daily USD budget.
    DailyBudget,
    /// The tenant's monthly USD budget.
    MonthlyBudget,
    /// Requests per day.
    DailyRequests,
    /// Tokens per day.
    DailyTokens,
    /// Requests that asked earlier wait for the deployment (see `line.rs`).
    Line,
}

impl LimitKind {
    /// Whether it is a per-day limit (`rpd`, `tpd`), which frees when its day ends.
    pub fn per_day(self) -> bool {
        matches!(self, LimitKind::DailyRequests | LimitKind::DailyTokens)
    }

    /// Short name for messages: `cooldown`, `rpm`, `tpm`, `itpm`, `otpm`, `concurrency`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Cooldown => "cooldown",
            LimitKind::Requests => "rpm",
            LimitKind::Tokens => "tpm",
            LimitKind::InputTokens => "itpm",
            LimitKind::OutputTokens => "otpm",
            LimitKind::Concurrency => "concurrency",
            LimitKind::DailyBudget => "daily budget",
            LimitKind::MonthlyBudget => "monthly budget",
            LimitKind::DailyRequests => "rpd",
            LimitKind::DailyTokens => "tpd",
            LimitKind::Line => "line",
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
    /// The tenant's limit or budget.
    Tenant,
    /// The API key's own limit or budget.
    Key,
}

/// Whether a refused candidate could ever take the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The request is larger than the limit: waiting will not help.
    Never,
    /// The limit is full now; the candidate can take the request after this long (assuming
    /// nothing else takes the capacity first). For concurrency, whose slots are freed when
    /// requests settle, it is a polling interval (1 s), bounded by the oldest slot's expiry.
    NotNow(Duration),
    /// A budget or a per-day limit cannot cover the request before its period ends: not
    /// before the reset, after this long. Waiting is pointless unless the request's deadline
    /// reaches the reset: the caller gets an error with the reset time.
    Exhausted(Duration),
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
    /// When the request holds a ticket in a line after this admission: how many requests
    /// stand before it in the shortest of them (0: it is first).
    pub place: Option<u64>,
}

impl Denial {
    /// True when no candidate can ever take this request (each one's limit is below the need).
    pub fn never_fits(&self) -> bool {
        self.refusals.iter().all(|r| r.verdict == Verdict::Never)
    }

    /// The earliest moment any candidate could take the request by waiting, or `None` when
    /// none can (never, or only after a budget resets).
    pub fn retry_after(&self) -> Option<Duration> {
        self.refusals
            .iter()
            .filter_map(|r| match r.verdict {
                Verdict::NotNow(d) => Some(d),
                Verdict::Never | Verdict::Exhausted(_) => None,
            })
            .min()
    }

    /// When no candidate can take the request by waiting but some could once a budget resets:
    /// the soonest reset.
    pub fn budget_resets_in(&self) -> Option<Duration> {
        if self.retry_after().is_some() {
            return None;
        }
        self.refusals
            .iter()
            .filter_map(|r| match r.verdict {
                Verdict::Exhausted(d) => Some(d),
                _ => None,
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
    /// Input (prompt) tokens the provider says remain, and when they are replenished.
    pub input_tokens: Option<(u64, Duration)>,
    /// Output (completion) tokens the provider says remain, and when they are replenished.
    pub output_tokens: Option<(u64, Duration)>,
}

/// Use against limit in one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScopeUsage {
    /// Requests counted in the current window.
    pub requests: u64,
    /// Tokens counted in the current window.
    pub tokens: u64,
    /// Input (prompt) tokens counted in the current window.
    pub input_tokens: u64,
    /// Output (completion) tokens counted in the current window.
    pub output_tokens: u64,
    /// Requests in flight (slots held).
    pub in_flight: u64,
    /// The scope's RPM limit, if any.
    pub rpm_limit: Option<u64>,
    /// The scope's TPM limit, if any.
    pub tpm_limit: Option<u64>,
    /// The scope's ITPM limit, if any.
    pub itpm_limit: Option<u64>,
    /// The scope's OTPM limit, if any.
    pub otpm_limit: Option<u64>,
    /// The scope's concurrency limit, if any.
    pub concurrency_limit: Option<u64>,
    /// Requests counted in the scope's current day (0 unless it has a per-day limit).
    pub requests_today: u64,
    /// Tokens counted in the scope's current day (0 unless it has a per-day limit).
    pub tokens_today: u64,
    /// The scope's requests-per-day limit, if any.
    pub rpd_limit: Option<u64>,
    /// The scope's tokens-per-day limit, if any.
    pub tpd_limit: Option<u64>,
    /// Time until the scope's day ends, when it has a per-day limit.
    pub day_resets_in: Option<Duration>,
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
    /// What the provider last reported of its own limits for this deployment, if it did within
    /// the last [`REPORT_TTL`].
    pub reported: Option<ProviderReport>,
    /// The requests waiting in the deployment's line.
    pub line: LineUse,
}

/// A deployment's line as a snapshot sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineUse {
    /// Tickets waiting (live ones).
    pub waiting: u64,
    /// Of them, batch requests' tickets.
    pub batch: u64,
    /// How long ago the first in line's place began, when anyone waits: its wait, for an
    /// interactive request; a batch request's place begins `priorities.batch_aging_secs` after
    /// it arrived, so it shows less (zero until then).
    pub oldest_wait: Option<Duration>,
}

impl LineUse {
    /// A line of `waiting` tickets (`batch` of them batch ones) whose first ranks at
    /// `first_rank` ms, seen at `now` ms.
    pub(crate) fn at(waiting: u64, batch: u64, first_rank: Option<u64>, now: u64) -> Self {
        Self {
            waiting,
            batch,
            oldest_wait: first_rank.map(|r| Duration::from_millis(now.saturating_sub(r))),
        }
    }
}

/// How long what a provider reported stays worth showing.
pub const REPORT_TTL: Duration = Duration::from_secs(60);

/// What a provider last reported about a deployment (its rate-limit headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderReport {
    /// Requests it said remain.
    pub requests_remaining: Option<u64>,
    /// Tokens it said remain.
    pub tokens_remaining: Option<u64>,
    /// Input tokens it said remain.
    pub input_tokens_remaining: Option<u64>,
    /// Output tokens it said remain.
    pub output_tokens_remaining: Option<u64>,
    /// How long ago it said so.
    pub age: Duration,
}

/// What the ledger holds for one tenant right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantSnapshot {
    /// Requests, tokens and in-flight against the tier's limits.
    pub usage: ScopeUsage,
    /// Spent this UTC day, micro-USD (reserved estimates of requests in flight included).
    pub spent_today_micros: u64,
    /// Spent this UTC month, micro-USD.
    pub spent_month_micros: u64,
    /// The budget.
    pub budget: BudgetMicros,
    /// Time until the day's budget resets.
    pub day_resets_in: Duration,
    /// Time until the month's budget resets.
    pub month_resets_in: Duration,
    /// Time elapsed in the month so far (for projections).
    pub month_elapsed: Duration,
}

/// What a driver owes the ledger for one reservation once the call is over: its settlement (or
/// release) and the provider's rate-limit report on its deployment, if one is to be followed.
#[derive(Debug, Clone)]
pub struct Settlement {
    /// The reservation.
    pub reservation: Reservation,
    /// `Some`: settle with this usage; `None`: release (the request never reached the provider).
    pub actual: Option<ActualUsage>,
    /// The provider's report on the reservation's deployment.
    pub observed: Option<Observation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_the_largest_limits_does_not_overflow() {
        let mut need = Need::new(10, Duration::from_secs(60));
        need.share_percent = 80;
        let limits = Limits {
            tpm: Some(NonZeroU64::MAX),
            rpm: NonZeroU64::new(10),
            concurrency: NonZeroU64::new(1),
            ..Limits::default()
        };
        let share = need.share_of(limits);
        let most = u128::from(u64::MAX) * 80 / 100;
        assert_eq!(share.tpm.map(|v| u128::from(v.get())), Some(most));
        assert_eq!(share.rpm, NonZeroU64::new(8));
        // Never below one: a share of a small limit still admits something.
        assert_eq!(share.concurrency, NonZeroU64::new(1));
    }
}
