//! Retry and failover policy: it decides, the router acts.
//!
//! After a failed provider call the policy says whether to return the error or to cool the
//! deployment down and fail over; when no candidate can take a request it says whether to wait
//! (and how long) or give up. It never sleeps and never reads a clock: attempts, stated waits,
//! the time left and the random draw are passed in, so every decision is a table-driven test.
//!
//! - A wait the provider stated (`Retry-After`, reset headers, Gemini `retryDelay`) always wins
//!   over the computed one.
//! - The computed wait is exponential backoff with full jitter: a uniform draw in
//!   `[0, min(cap, base x 2^(attempt-1)))`.
//! - Stated waits are clamped at `retry.max_cooldown_secs` (default 300 s), so a server that
//!   says `Retry-After: 86400` cools the deployment down for five minutes, not a day.
//! - Billing or daily-quota failures cool the deployment down for at least an hour: they do not
//!   clear by retrying.
//! - Waiting for capacity lasts until the soonest moment the ledger says a candidate can take the
//!   request, plus a little jitter so that waiting instances do not all return at once, and never
//!   past the deadline.

use std::time::Duration;

use crate::config::RetrySettings;

/// How long it takes a waiting batch request to lose its handicap against interactive ones.
pub const AGEING: Duration = Duration::from_secs(30);

/// How long a deployment cools down after a billing or daily-quota failure, at least.
pub const BILLING_COOLDOWN: Duration = Duration::from_secs(3600);

/// What kind of failure a provider call ended in, for the policy's purposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The deployment is full for now (429).
    RateLimited,
    /// The provider is overloaded or unavailable (529, 503, 502, 504, 408).
    Overloaded,
    /// The provider failed (500 and other unexpected answers).
    ServerError,
    /// The call timed out or the connection failed.
    Transport,
    /// Billing or a daily quota is exhausted: retrying this deployment will not help.
    Billing,
    /// The request or the key is wrong (400, 401, 403, 404, 422), or the answer could not be
    /// read: return it.
    Fatal,
}

/// What to do after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// Return the error to the caller.
    Return,
    /// Cool the deployment down this long (shared by every instance), then try the next
    /// candidate at once.
    FailOver {
        /// The cooldown to put on the failed deployment.
        cooldown: Duration,
    },
}

/// What to do when no candidate can take the request now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDenied {
    /// Wait this long, then ask the ledger again.
    Wait(Duration),
    /// Fail now: no candidate can take it before the deadline (or ever).
    GiveUp,
}

/// The retry policy of a router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    settings: RetrySettings,
}

impl RetryPolicy {
    /// A policy with these settings.
    pub fn new(settings: RetrySettings) -> Self {
        Self { settings }
    }

    /// The settings.
    pub fn settings(&self) -> RetrySettings {
        self.settings
    }

    /// The computed wait after `attempt` (1-based) failures: full jitter, `unit` in `[0, 1)`.
    pub fn backoff(&self, attempt: u32, unit: f64) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let ceiling = self
            .settings
            .base
            .saturating_mul(1 << exp)
            .min(self.settings.cap);
        ceiling.mul_f64(unit.clamp(0.0, 1.0))
    }

    /// After call number `attempt` (1-based) failed with `kind`, the provider having stated
    /// `stated` as its wait.
    pub fn on_failure(
        &self,
        attempt: u32,
        kind: FailureKind,
        stated: Option<Duration>,
        unit: f64,
    ) -> OnFailure {
        match self.cooldown(attempt, kind, stated, unit) {
            Some(cooldown) if attempt < self.settings.max_attempts => {
                OnFailure::FailOver { cooldown }
            }
            _ => OnFailure::Return,
        }
    }

    /// The cooldown a failure of `kind` puts on its deployment, whether or not the request goes
    /// on (other instances benefit either way); `None` for failures of the request itself.
    pub fn cooldown(
        &self,
        attempt: u32,
        kind: FailureKind,
        stated: Option<Duration>,
        unit: f64,
    ) -> Option<Duration> {
        let stated = stated.map(|s| self.clamp(s));
        match kind {
            FailureKind::Fatal => None,
            FailureKind::Billing => Some(stated.unwrap_or_default().max(BILLING_COOLDOWN)),
            _ => Some(stated.unwrap_or_else(|| self.backoff(attempt, unit))),
        }
    }

    /// A wait a provider stated (`Retry-After`, a rate-limit reset), clamped at
    /// `retry.max_cooldown_secs`: a misbehaving server must not cool a deployment down for every
    /// instance for a day.
    pub fn clamp(&self, stated: Duration) -> Duration {
        stated.min(self.settings.max_cooldown)
    }

    /// How much later than an interactive request a batch request that has waited `age`
    /// retries when capacity returns, so that an instance serves its waiting interactive requests
    /// first: the backoff base at first, shrinking to nothing over [`AGEING`] so batch requests
    /// never starve.
    pub fn batch_delay(&self, age: Duration) -> Duration {
        let left = 1.0 - (age.as_secs_f64() / AGEING.as_secs_f64()).min(1.0);
        self.settings.base.mul_f64(left)
    }

    /// No candidate can take the request; the ledger says the soonest one can is after
    /// `retry_after` (`None`: never), and `remaining` is left before the deadline.
    pub fn on_denied(
        &self,
        retry_after: Option<Duration>,
        remaining: Duration,
        unit: f64,
    ) -> OnDenied {
        let Some(soonest) = retry_after else {
            return OnDenied::GiveUp;
        };
        let jitter = self
            .settings
            .base
            .min(soonest / 4)
            .mul_f64(unit.clamp(0.0, 1.0));
        let wait = soonest + jitter;
        // A wait that ends at the deadline leaves no time to call.
        if wait >= remaining {
            OnDenied::GiveUp
        } else {
            OnDenied::Wait(wait)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::new(RetrySettings {
            max_attempts: 4,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(2),
            deadline: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(300),
        })
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_full_jitter() {
        let p = policy();
        for (attempt, unit, want) in [
            (1, 0.999_999, 200),
            (2, 0.999_999, 400),
            (3, 0.5, 400),
            (4, 0.999_999, 1600),
            (5, 0.999_999, 2000),
            (40, 0.999_999, 2000),
            (3, 0.0, 0),
        ] {
            let got = p.backoff(attempt, unit).as_millis() as u64;
            assert!(
                got.abs_diff(want) <= 1,
                "attempt {attempt}, unit {unit}: {got} ms, want {want}"
            );
        }
    }

    #[test]
    fn failures_are_classified_before_acting() {
        let p = policy();
        let fail_over = |ms| OnFailure::FailOver { cooldown: MS(ms) };
        let table = [
            // (attempt, kind, stated wait, unit) -> decision
            (
                (1, FailureKind::RateLimited, Some(MS(7000)), 0.5),
                fail_over(7000),
            ),
            ((1, FailureKind::RateLimited, None, 0.5), fail_over(100)),
            ((2, FailureKind::Overloaded, None, 0.5), fail_over(200)),
            (
                (1, FailureKind::ServerError, Some(MS(30)), 0.9),
                fail_over(30),
            ),
            ((3, FailureKind::Transport, None, 0.25), fail_over(200)),
            ((1, FailureKind::Billing, None, 0.5), fail_over(3_600_000)),
            (
                (1, FailureKind::Billing, Some(MS(7_200_000)), 0.5),
                fail_over(3_600_000),
            ),
            (
                (1, FailureKind::RateLimited, Some(MS(86_400_000)), 0.5),
                fail_over(300_000),
            ),
            (
                (1, FailureKind::Overloaded, Some(Duration::MAX), 0.5),
                fail_over(300_000),
            ),
            (
                (1, FailureKind::Billing, Some(MS(1500)), 0.5),
                fail_over(3_600_000),
            ),
            ((1, FailureKind::Fatal, Some(MS(5)), 0.5), OnFailure::Return),
            (
                (4, FailureKind::RateLimited, Some(MS(5)), 0.5),
                OnFailure::Return,
            ),
        ];
        for ((attempt, kind, stated, unit), want) in table {
            assert_eq!(
                p.on_failure(attempt, kind, stated, unit),
                want,
                "{attempt} {kind:?} {stated:?}"
            );
        }
    }

    #[test]
    fn batch_requests_wait_a_little_longer_until_they_have_aged() {
        let p = policy();
        assert_eq!(p.batch_delay(Duration::ZERO), MS(200));
        assert_eq!(p.batch_delay(AGEING / 2), MS(100));
        assert_eq!(p.batch_delay(AGEING), Duration::ZERO);
        assert_eq!(p.batch_delay(AGEING * 5), Duration::ZERO);
    }

    #[test]
    fn waiting_lasts_until_capacity_returns_plus_jitter_and_never_past_the_deadline() {
        let p = policy();
        let table = [
            // (retry after, remaining, unit) -> decision
            ((Some(MS(2000)), MS(60_000), 0.0), OnDenied::Wait(MS(2000))),
            ((Some(MS(2000)), MS(60_000), 0.5), OnDenied::Wait(MS(2100))),
            ((Some(MS(40)), MS(60_000), 1.0), OnDenied::Wait(MS(50))),
            ((Some(MS(2000)), MS(1999), 0.0), OnDenied::GiveUp),
            // Woken at the deadline, it would have no time left to call.
            ((Some(MS(2000)), MS(2000), 0.0), OnDenied::GiveUp),
            ((Some(MS(2000)), MS(2050), 0.5), OnDenied::GiveUp),
            ((None, MS(60_000), 0.0), OnDenied::GiveUp),
        ];
        for ((after, remaining, unit), want) in table {
            assert_eq!(
                p.on_denied(after, remaining, unit),
                want,
                "{after:?} {remaining:?} {unit}"
            );
        }
    }
}
