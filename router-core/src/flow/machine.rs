//! The request flow: what a request does next, decided from what just happened.

use std::time::Duration;

use crate::config::DeploymentId;
use crate::ledger::{Denial, LINE_POLL_MS};
use crate::retry::{FailureKind, OnDenied, OnFailure, RetryPolicy};

use super::plan::{Plan, Priority};

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Ask the ledger to admit the request on these candidates, cheapest first; report
    /// [`Flow::admitted`] or [`Flow::denied`].
    Admit(Vec<DeploymentId>),
    /// No candidate can take the request now: wait this long, then report [`Flow::woke`].
    Wait(Duration),
    /// Send the request to this deployment (admitted there); report [`Flow::answered`] or
    /// [`Flow::failed`].
    Call(DeploymentId),
    /// The provider answered: settle with what it reported ([`Settle::Reported`]) and return.
    Finish,
    /// The request is over without an answer.
    GiveUp(GiveUp),
}

/// Why a request ends without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// The last call's failure is the answer (it could not be retried, or nothing was left to
    /// retry it on before the deadline).
    LastFailure,
    /// No candidate could take the request before the deadline (`never`: it fits none of them,
    /// whatever the wait), and no call was made that failed.
    NoCapacity {
        /// True when no candidate's limits could ever hold it.
        never: bool,
        /// When the soonest candidate could take it, if ever.
        retry_after: Option<Duration>,
    },
    /// The tenant's budget cannot cover the request before it resets.
    Budget {
        /// Time until the soonest budget reset.
        resets_in: Duration,
    },
}

/// How a reservation is settled after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// With the usage the provider reported, else the estimate.
    Reported,
    /// With the estimate: whether and how much the provider spent is unknown.
    Estimate,
    /// The provider saw the request and refused it: its request count stands, no tokens.
    Refused,
    /// The request never reached the provider: everything is handed back.
    Release,
}

/// How far a failed call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// It never reached the provider (connection refused, DNS, TLS).
    Nothing,
    /// The provider answered with an error: it saw the request, produced nothing.
    Refusal,
    /// No answer in time, or one that could not be read: tokens were probably spent.
    Unknown,
    /// A stream that had started broke: the provider may have reported some usage.
    Partial,
}

/// A failed call, as the flow needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure, for the retry policy.
    pub kind: FailureKind,
    /// The wait the provider stated, if any (unclamped).
    pub stated: Option<Duration>,
    /// How far the call got.
    pub reached: Reached,
    /// Whether any of the answer was already handed to the caller (a stream): then the request
    /// is never retried.
    pub output_sent: bool,
}

/// A cooldown the driver puts on a deployment, shared by every instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cooldown {
    /// The deployment.
    pub deployment: DeploymentId,
    /// For how long.
    pub duration: Duration,
    /// The provider's stated wait when it was longer and clamped at `retry.max_cooldown_secs`.
    pub clamped_from: Option<Duration>,
}

/// What to do after a failed call: settle, cool down, go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterFailure {
    /// How to settle the reservation.
    pub settle: Settle,
    /// The cooldown to put on the failed deployment, if any. A ledger error while putting it is
    /// logged and ignored: it must not stop the failover.
    pub cooldown: Option<Cooldown>,
    /// What next.
    pub next: Next,
}

/// One request's flow: a sans-IO state machine. It performs no I/O, reads no clock, never
/// sleeps: drivers pass in what happened (with the time and a random draw in `[0, 1)`), and
/// perform what it returns.
#[derive(Debug, Clone)]
pub struct Flow {
    policy: RetryPolicy,
    ranked: Vec<DeploymentId>,
    /// Deployments whose call failed in this request, in order.
    failed: Vec<DeploymentId>,
    calls: u32,
    started_ms: u64,
    deadline_ms: u64,
    priority: Priority,
    waited: Duration,
    /// When the wait under way began (ms), and how long it was to last.
    wait_from: Option<(u64, Duration)>,
    /// Whether the last admission left the request in a line: its waits then end within
    /// [`LINE_POLL_MS`], so that asking again renews its ticket.
    in_line: bool,
    calling: Option<DeploymentId>,
    /// Whether a call failed and the request went on: giving up then returns that failure.
    failure_pending: bool,
    /// Whether the admission under way asks only the candidates that have not failed: their
    /// refusal is not the last word, since those that failed may be ready sooner.
    partial: bool,
    /// Whether the wait under way ends with the candidates that have not failed asked again
    /// (they said they would be ready before the backoff ends), rather than all of them.
    fresh_next: bool,
}

impl Flow {
    /// The flow of a planned request.
    pub fn new(policy: RetryPolicy, plan: &Plan) -> Self {
        Self {
            policy,
            ranked: plan.ranked.clone(),
            failed: Vec::new(),
            calls: 0,
            started_ms: plan.started_ms,
            deadline_ms: plan.deadline_ms,
            priority: plan.priority,
            waited: Duration::ZERO,
            wait_from: None,
            in_line: false,
            calling: None,
            failure_pending: false,
            partial: false,
            fresh_next: false,
        }
    }

    /// The first step: admit on every candidate.
    pub fn start(&self) -> Next {
        Next::Admit(self.ranked.clone())
    }

    /// Provider calls made so far.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// Time spent waiting for capacity so far (a wait that ended early, woken, counts as long
    /// as it lasted).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The deployment being called, if a call is under way.
    pub fn calling(&self) -> Option<DeploymentId> {
        self.calling
    }

    /// Time left before the deadline at `now_ms`.
    pub fn remaining(&self, now_ms: u64) -> Duration {
        Duration::from_millis(self.deadline_ms.saturating_sub(now_ms))
    }

    /// The ledger admitted the request on `deployment`: call it.
    pub fn admitted(&mut self, deployment: DeploymentId) -> Next {
        self.in_line = false;
        self.partial = false;
        self.calls += 1;
        self.calling = Some(deployment);
        Next::Call(deployment)
    }

    /// The candidates asked refused at `now_ms`: wait for the soonest, or give up. When they
    /// were only those that had not failed, their refusal is not the last word: one that failed
    /// may be ready first (a short stated wait), or be the one the tenant's budget can still
    /// pay for. The request then waits for whichever comes first: the moment those asked say
    /// they are ready (then asks them again), or the backoff's end (then asks every candidate,
    /// as when every one has failed).
    pub fn denied(&mut self, denial: &Denial, now_ms: u64, unit: f64) -> Next {
        self.in_line = denial.place.is_some();
        if std::mem::take(&mut self.partial) {
            let backoff = self.policy.backoff(self.calls, unit);
            let remaining = self.remaining(now_ms);
            if denial.budget_resets_in().is_none()
                && let OnDenied::Wait(wait) =
                    self.policy.on_denied(denial.retry_after(), remaining, unit)
                && wait < backoff
            {
                self.fresh_next = true;
                return self.wait(wait, now_ms);
            }
            return self.back_off(backoff, now_ms);
        }
        if let Some(resets_in) = denial.budget_resets_in() {
            return Next::GiveUp(GiveUp::Budget { resets_in });
        }
        let remaining = self.remaining(now_ms);
        match self.policy.on_denied(denial.retry_after(), remaining, unit) {
            OnDenied::Wait(wait) => {
                let age = Duration::from_millis(now_ms.saturating_sub(self.started_ms));
                // The batch handicap never takes a wait to the deadline: a request that wakes
                // with no time left has none to call with.
                let handicapped = wait + self.handicap(age);
                let wait = if handicapped < remaining {
                    handicapped
                } else {
                    wait
                };
                self.wait(wait, now_ms)
            }
            OnDenied::GiveUp if self.failure_pending => Next::GiveUp(GiveUp::LastFailure),
            OnDenied::GiveUp => Next::GiveUp(GiveUp::NoCapacity {
                never: denial.never_fits(),
                retry_after: denial.retry_after(),
            }),
        }
    }

    /// A wait ended at `now_ms`: ask the ledger again, on every candidate (time has passed: the
    /// cooldowns of those that failed now say whether they are ready). A wait ends before the
    /// deadline; one that overran it (a late timer) gives up rather than call with no time left.
    pub fn woke(&mut self, now_ms: u64) -> Next {
        if let Some((from, planned)) = self.wait_from.take() {
            let lasted = Duration::from_millis(now_ms.saturating_sub(from));
            // A wait that ran its course counts as planned (the clock counts whole ms).
            self.waited += if lasted.as_millis() >= planned.as_millis() {
                planned
            } else {
                lasted
            };
        }
        let fresh_next = std::mem::take(&mut self.fresh_next);
        if !self.remaining(now_ms).is_zero() {
            if fresh_next {
                self.partial = true;
                return Next::Admit(self.fresh());
            }
            return Next::Admit(self.ranked.clone());
        }
        if self.failure_pending {
            return Next::GiveUp(GiveUp::LastFailure);
        }
        // The soonest candidate's moment has passed by then: no later one to name.
        Next::GiveUp(GiveUp::NoCapacity {
            never: false,
            retry_after: None,
        })
    }

    /// The provider answered in full (a whole answer, or a stream to its end).
    pub fn answered(&mut self) -> Next {
        self.calling = None;
        self.failure_pending = false;
        Next::Finish
    }

    /// The call failed at `now_ms`: how to settle, what cooldown to put, and what next.
    pub fn failed(&mut self, failure: Failure, now_ms: u64, unit: f64) -> AfterFailure {
        let Some(deployment) = self.calling.take() else {
            // A failure with no call under way: nothing to settle or retry.
            return AfterFailure {
                settle: Settle::Estimate,
                cooldown: None,
                next: Next::GiveUp(GiveUp::LastFailure),
            };
        };
        let (kind, stated, calls) = (failure.kind, failure.stated, self.calls);
        let cooldown = self
            .policy
            .cooldown(calls, kind, stated, unit)
            .map(|duration| Cooldown {
                deployment,
                duration,
                clamped_from: stated.filter(|&s| s > self.policy.clamp(s)),
            });
        self.failed.push(deployment);
        self.failure_pending = true;
        let settle = match failure.reached {
            Reached::Nothing => Settle::Release,
            Reached::Refusal => Settle::Refused,
            Reached::Unknown => Settle::Estimate,
            Reached::Partial => Settle::Reported,
        };
        let next = if failure.output_sent || self.remaining(now_ms).is_zero() {
            Next::GiveUp(GiveUp::LastFailure)
        } else {
            match self.policy.on_failure(calls, kind, stated, unit) {
                OnFailure::Return => Next::GiveUp(GiveUp::LastFailure),
                OnFailure::FailOver { .. } => self.fail_over(now_ms, unit),
            }
        };
        AfterFailure {
            settle,
            cooldown,
            next,
        }
    }

    /// After a failure: at once on the candidates that have not failed in this request (a failed
    /// deployment is never the next one, whatever its cooldown); when every one has failed, on
    /// all of them again after a backoff (a provider that states a zero wait must not be called
    /// again at once).
    fn fail_over(&mut self, now_ms: u64, unit: f64) -> Next {
        let fresh = self.fresh();
        if !fresh.is_empty() {
            self.partial = true;
            return Next::Admit(fresh);
        }
        self.back_off(self.policy.backoff(self.calls, unit), now_ms)
    }

    /// The candidates that have not failed in this request, cheapest first.
    fn fresh(&self) -> Vec<DeploymentId> {
        self.ranked
            .iter()
            .copied()
            .filter(|d| !self.failed.contains(d))
            .collect()
    }

    /// Waits out `backoff` (the one after the calls so far), then asks every candidate again;
    /// gives up with the last failure when it would reach the deadline.
    fn back_off(&mut self, backoff: Duration, now_ms: u64) -> Next {
        if backoff >= self.remaining(now_ms) {
            return Next::GiveUp(GiveUp::LastFailure);
        }
        self.wait(backoff, now_ms)
    }

    fn wait(&mut self, wait: Duration, now_ms: u64) -> Next {
        let mut wait = wait.max(Duration::from_millis(1));
        if self.in_line {
            wait = wait.min(Duration::from_millis(LINE_POLL_MS));
        }
        self.wait_from = Some((now_ms, wait));
        Next::Wait(wait)
    }

    /// Batch requests of this instance retry a little after interactive ones when capacity
    /// returns, the handicap shrinking as they age so they never starve.
    fn handicap(&self, age: Duration) -> Duration {
        match self.priority {
            Priority::Batch => self.policy.batch_delay(age),
            Priority::Interactive => Duration::ZERO,
        }
    }
}
