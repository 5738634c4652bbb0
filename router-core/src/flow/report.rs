//! Which of a provider's rate-limit reports go to the ledger, and how far they may reach.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::{DeploymentId, Limits};
use crate::ledger::Observation;

/// How often, at most, reports that change nothing are still sent to the ledger, per deployment
/// (so `llmroute quota` can show what providers say).
pub const REPORT_EVERY_MS: u64 = 5_000;

/// Decides, per deployment, which provider reports are worth a ledger call: every one that may
/// say less remains than the limit, and otherwise one per [`REPORT_EVERY_MS`]. Shared by every
/// request of a router (and of a simulated one).
#[derive(Debug)]
pub struct Reports {
    last_sent_ms: Vec<AtomicU64>,
    max_reset: Duration,
}

impl Reports {
    /// Reports for `deployments` deployments; resets are clamped at `max_reset`
    /// (`retry.max_cooldown_secs`).
    pub fn new(deployments: usize, max_reset: Duration) -> Self {
        Self {
            last_sent_ms: (0..deployments).map(|_| AtomicU64::new(0)).collect(),
            max_reset,
        }
    }

    /// What to send to the ledger of `observation` on `d` at `now_ms`, if anything: the
    /// observation with its resets clamped (a reset a year away must not block a deployment for a
    /// year), when it matters or is due.
    pub fn to_send(
        &self,
        d: DeploymentId,
        observation: Observation,
        limits: Limits,
        now_ms: u64,
    ) -> Option<Observation> {
        let dims = [
            (observation.requests, limits.rpm),
            (observation.tokens, limits.tpm),
            (observation.input_tokens, limits.itpm),
            (observation.output_tokens, limits.otpm),
        ];
        if dims.iter().all(|(reported, _)| reported.is_none()) {
            return None;
        }
        let matters = |reported: Option<(u64, Duration)>, limit: Option<std::num::NonZeroU64>| {
            reported.is_some_and(|(left, _)| left == 0 || limit.is_some_and(|l| left < l.get()))
        };
        let last = self.last_sent_ms.get(d.0)?;
        let due = now_ms.saturating_sub(last.load(Ordering::Relaxed)) >= REPORT_EVERY_MS;
        if !(due || dims.into_iter().any(|(r, l)| matters(r, l))) {
            return None;
        }
        last.store(now_ms, Ordering::Relaxed);
        let clamp =
            |r: Option<(u64, Duration)>| r.map(|(left, reset)| (left, reset.min(self.max_reset)));
        Some(Observation {
            requests: clamp(observation.requests),
            tokens: clamp(observation.tokens),
            input_tokens: clamp(observation.input_tokens),
            output_tokens: clamp(observation.output_tokens),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use super::*;

    const D: DeploymentId = DeploymentId(0);

    fn limits() -> Limits {
        Limits {
            rpm: NonZeroU64::new(100),
            tpm: NonZeroU64::new(10_000),
            itpm: NonZeroU64::new(5_000),
            otpm: NonZeroU64::new(1_000),
            ..Limits::default()
        }
    }

    fn report(requests: u64, reset: Duration) -> Observation {
        Observation {
            requests: Some((requests, reset)),
            ..Observation::default()
        }
    }

    #[test]
    fn input_and_output_reports_matter_against_their_own_limits() {
        let reports = Reports::new(1, Duration::from_secs(300));
        let second = Duration::from_secs(1);
        let first = report(100, second);
        assert_eq!(reports.to_send(D, first, limits(), 10_000), Some(first));
        // More output tokens left than otpm: nothing to follow, and not due yet.
        let plenty = Observation {
            output_tokens: Some((6_000, second)),
            ..Observation::default()
        };
        assert_eq!(reports.to_send(D, plenty, limits(), 10_100), None);
        let output = Observation {
            output_tokens: Some((999, Duration::from_secs(8760 * 3600))),
            ..Observation::default()
        };
        let sent = reports.to_send(D, output, limits(), 10_200);
        let clamped = (999, Duration::from_secs(300));
        assert_eq!(sent.and_then(|o| o.output_tokens), Some(clamped));
        let input = Observation {
            input_tokens: Some((4_999, second)),
            ..Observation::default()
        };
        assert_eq!(reports.to_send(D, input, limits(), 10_300), Some(input));
    }

    #[test]
    fn reports_that_say_less_remains_go_at_once_others_every_few_seconds() {
        let reports = Reports::new(1, Duration::from_secs(300));
        let full = report(100, Duration::from_secs(1));
        assert_eq!(reports.to_send(D, full, limits(), 10_000), Some(full));
        assert_eq!(reports.to_send(D, full, limits(), 11_000), None);
        let less = report(99, Duration::from_secs(1));
        assert_eq!(reports.to_send(D, less, limits(), 11_500), Some(less));
        assert_eq!(reports.to_send(D, full, limits(), 16_499), None);
        assert_eq!(reports.to_send(D, full, limits(), 16_500), Some(full));
        assert_eq!(
            reports.to_send(D, Observation::default(), limits(), 99_000),
            None
        );
        assert_eq!(reports.to_send(DeploymentId(7), less, limits(), 0), None);
    }

    #[test]
    fn a_reset_a_year_away_is_clamped() {
        let reports = Reports::new(1, Duration::from_secs(300));
        let year = report(0, Duration::from_secs(8760 * 3600));
        let sent = reports.to_send(D, year, limits(), 1).map(|o| o.requests);
        assert_eq!(sent, Some(Some((0, Duration::from_secs(300)))));
    }
}
