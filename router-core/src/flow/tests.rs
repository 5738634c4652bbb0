//! The flow's rules, each on a virtual clock (times are passed in).

use std::time::Duration;

use super::*;
use crate::config::{DeploymentId, RetrySettings};
use crate::ledger::{Denial, LimitKind, Need, Refusal, Scope, Verdict};
use crate::retry::{BILLING_COOLDOWN, FailureKind, RetryPolicy};

const A: DeploymentId = DeploymentId(0);
const B: DeploymentId = DeploymentId(1);
const MS: fn(u64) -> Duration = Duration::from_millis;

fn policy() -> RetryPolicy {
    RetryPolicy::new(RetrySettings {
        max_attempts: 4,
        base: MS(200),
        cap: MS(2_000),
        deadline: Duration::from_secs(60),
        attempt_timeout: Duration::from_secs(10),
        max_cooldown: Duration::from_secs(300),
    })
}

fn flow(ranked: &[DeploymentId], priority: Priority) -> Flow {
    let plan = Plan {
        ranked: ranked.to_vec(),
        estimates: vec![Estimate::default(); ranked.len()],
        need: Need::new(10, Duration::from_secs(60)),
        priority,
        started_ms: 0,
        deadline_ms: 60_000,
        prompt: Default::default(),
    };
    Flow::new(policy(), &plan)
}

fn failure(kind: FailureKind, stated: Option<Duration>, reached: Reached) -> Failure {
    Failure {
        kind,
        stated,
        reached,
        output_sent: false,
    }
}

/// A 429 that states a zero wait.
fn zero_wait() -> Failure {
    failure(
        FailureKind::RateLimited,
        Some(Duration::ZERO),
        Reached::Refusal,
    )
}

fn not_now(d: DeploymentId, after: Duration) -> Refusal {
    Refusal {
        deployment: d,
        limit: LimitKind::Requests,
        scope: Scope::Deployment,
        verdict: Verdict::NotNow(after),
    }
}

fn denial(refusals: Vec<Refusal>) -> Denial {
    Denial {
        refusals,
        place: None,
    }
}

#[test]
fn a_request_admits_on_every_candidate_then_calls_the_one_admitted() {
    let mut f = flow(&[A, B], Priority::Interactive);
    assert_eq!(f.start(), Next::Admit(vec![A, B]));
    assert_eq!(f.admitted(B), Next::Call(B));
    assert_eq!((f.calls(), f.calling()), (1, Some(B)));
    assert_eq!(f.answered(), Next::Finish);
    assert_eq!(f.calling(), None);
}

#[test]
fn each_failure_settles_as_far_as_the_call_got() {
    let table = [
        (Reached::Nothing, Settle::Release),
        (Reached::Refusal, Settle::Refused),
        (Reached::Unknown, Settle::Estimate),
        (Reached::Partial, Settle::Reported),
    ];
    for (reached, settle) in table {
        let mut f = flow(&[A, B], Priority::Interactive);
        let _ = f.admitted(A);
        let after = f.failed(failure(FailureKind::ServerError, None, reached), 10, 0.5);
        assert_eq!(after.settle, settle, "{reached:?}");
    }
}

#[test]
fn a_failed_deployment_is_never_the_next_candidate_even_with_a_zero_wait() {
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let zero = zero_wait();
    let after = f.failed(zero, 10, 0.5);
    assert_eq!(after.next, Next::Admit(vec![B]));
    let cooldown = after.cooldown.map(|c| (c.deployment, c.duration));
    assert_eq!(cooldown, Some((A, Duration::ZERO)));
}

#[test]
fn when_every_candidate_failed_the_request_backs_off_before_trying_them_again() {
    let mut f = flow(&[A], Priority::Interactive);
    let _ = f.admitted(A);
    let zero = zero_wait();
    // Backoff after call 1 with a draw of 0.5: half of the 200 ms base.
    assert_eq!(f.failed(zero, 10, 0.5).next, Next::Wait(MS(100)));
    assert_eq!(f.woke(110), Next::Admit(vec![A]));
    let _ = f.admitted(A);
    assert_eq!(f.failed(zero, 200, 0.5).next, Next::Wait(MS(200)));
    // A wait counts once it ends.
    assert_eq!(f.waited(), MS(100));
    assert_eq!(f.woke(400), Next::Admit(vec![A]));
    assert_eq!(f.waited(), MS(300));
}

#[test]
fn a_wait_woken_early_counts_as_long_as_it_lasted() {
    let mut f = flow(&[A, B], Priority::Interactive);
    let soon = denial(vec![not_now(A, MS(3_000)), not_now(B, MS(2_000))]);
    assert_eq!(f.denied(&soon, 1_000, 0.0), Next::Wait(MS(2_000)));
    // The store's wake-up came after 350 ms.
    assert_eq!(f.woke(1_350), Next::Admit(vec![A, B]));
    assert_eq!(f.waited(), MS(350));
}

#[test]
fn cooldowns_use_the_number_of_the_call_that_failed() {
    // Streams used to compute every cooldown as if it were the first call.
    let mut f = flow(&[A, B], Priority::Interactive);
    let broke = failure(FailureKind::Transport, None, Reached::Unknown);
    let _ = f.admitted(A);
    let first = f.failed(broke, 10, 0.5).cooldown.map(|c| c.duration);
    let _ = f.admitted(B);
    let second = f.failed(broke, 20, 0.5).cooldown.map(|c| c.duration);
    assert_eq!((first, second), (Some(MS(100)), Some(MS(200))));
}

#[test]
fn stated_waits_are_clamped_and_say_so() {
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let day = Duration::from_secs(86_400);
    let after = f.failed(
        failure(FailureKind::RateLimited, Some(day), Reached::Refusal),
        0,
        0.5,
    );
    let cooldown = after.cooldown.expect("a rate limit cools down");
    assert_eq!(cooldown.duration, Duration::from_secs(300));
    assert_eq!(cooldown.clamped_from, Some(day));
    let _ = f.admitted(B);
    let max = failure(
        FailureKind::Overloaded,
        Some(Duration::MAX),
        Reached::Refusal,
    );
    let after = f.failed(max, 0, 0.5);
    assert_eq!(
        after.cooldown.map(|c| c.duration),
        Some(Duration::from_secs(300))
    );
}

#[test]
fn billing_keeps_its_long_cooldown_and_fatal_failures_return_at_once() {
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let billing = f.failed(
        failure(FailureKind::Billing, None, Reached::Refusal),
        0,
        0.5,
    );
    assert_eq!(billing.cooldown.map(|c| c.duration), Some(BILLING_COOLDOWN));
    assert_eq!(billing.next, Next::Admit(vec![B]));
    let _ = f.admitted(B);
    let fatal = f.failed(failure(FailureKind::Fatal, None, Reached::Refusal), 0, 0.5);
    assert_eq!(
        (fatal.cooldown, fatal.next),
        (None, Next::GiveUp(GiveUp::LastFailure))
    );
}

#[test]
fn an_unreadable_answer_fails_over_and_settles_the_estimate() {
    // A deployment answering 200 with an HTML page must not fail every request while a healthy
    // one sits idle.
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let html = failure(FailureKind::ServerError, None, Reached::Unknown);
    let after = f.failed(html, 0, 0.5);
    assert_eq!(after.settle, Settle::Estimate);
    assert_eq!(after.next, Next::Admit(vec![B]));
    assert!(after.cooldown.is_some());
}

#[test]
fn output_already_handed_to_the_caller_is_never_retried() {
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let broke = Failure {
        output_sent: true,
        ..failure(FailureKind::Overloaded, Some(MS(500)), Reached::Partial)
    };
    let after = f.failed(broke, 0, 0.5);
    assert_eq!(after.settle, Settle::Reported);
    assert_eq!(after.next, Next::GiveUp(GiveUp::LastFailure));
    assert_eq!(after.cooldown.map(|c| c.duration), Some(MS(500)));
}

#[test]
fn the_last_attempt_and_the_deadline_end_the_failover() {
    let mut f = flow(&[A, B], Priority::Interactive);
    let limit = failure(FailureKind::RateLimited, Some(MS(5)), Reached::Refusal);
    for _ in 0..3 {
        let _ = f.admitted(A);
        assert!(matches!(
            f.failed(limit, 0, 0.5).next,
            Next::Admit(_) | Next::Wait(_)
        ));
    }
    let _ = f.admitted(B);
    assert_eq!(
        f.failed(limit, 0, 0.5).next,
        Next::GiveUp(GiveUp::LastFailure)
    );
    let mut late = flow(&[A, B], Priority::Interactive);
    let _ = late.admitted(A);
    assert_eq!(
        late.failed(limit, 60_000, 0.5).next,
        Next::GiveUp(GiveUp::LastFailure)
    );
}

#[test]
fn denied_requests_wait_for_the_soonest_candidate_and_never_past_the_deadline() {
    let mut f = flow(&[A, B], Priority::Interactive);
    let soon = denial(vec![not_now(A, MS(3_000)), not_now(B, MS(2_000))]);
    assert_eq!(f.denied(&soon, 0, 0.0), Next::Wait(MS(2_000)));
    assert_eq!(f.woke(2_000), Next::Admit(vec![A, B]));
    let late = denial(vec![not_now(A, MS(90_000))]);
    let give_up = Next::GiveUp(GiveUp::NoCapacity {
        never: false,
        retry_after: Some(MS(90_000)),
    });
    assert_eq!(f.denied(&late, 2_000, 0.0), give_up);
    assert_eq!(f.waited(), MS(2_000));
}

#[test]
fn batch_requests_wait_a_little_longer_than_interactive_ones() {
    let soon = denial(vec![not_now(A, MS(1_000))]);
    let mut interactive = flow(&[A], Priority::Interactive);
    let mut batch = flow(&[A], Priority::Batch);
    assert_eq!(interactive.denied(&soon, 0, 0.0), Next::Wait(MS(1_000)));
    assert_eq!(batch.denied(&soon, 0, 0.0), Next::Wait(MS(1_200)));
    // Aged 30 s, the handicap is gone.
    assert_eq!(batch.denied(&soon, 30_000, 0.0), Next::Wait(MS(1_000)));
}

#[test]
fn an_exhausted_budget_gives_up_at_once_and_a_failure_beats_no_capacity() {
    let mut f = flow(&[A], Priority::Interactive);
    let budget = denial(vec![Refusal {
        deployment: A,
        limit: LimitKind::DailyBudget,
        scope: Scope::Tenant,
        verdict: Verdict::Exhausted(MS(7_000)),
    }]);
    let want = Next::GiveUp(GiveUp::Budget {
        resets_in: MS(7_000),
    });
    assert_eq!(f.denied(&budget, 0, 0.5), want);
    let mut failed = flow(&[A], Priority::Interactive);
    let _ = failed.admitted(A);
    let timeout = failure(FailureKind::Transport, None, Reached::Unknown);
    let _ = failed.failed(timeout, 0, 0.5);
    let never = denial(vec![Refusal {
        verdict: Verdict::Never,
        ..not_now(A, MS(0))
    }]);
    assert_eq!(
        failed.denied(&never, 10, 0.5),
        Next::GiveUp(GiveUp::LastFailure)
    );
}

#[test]
fn a_refusal_from_the_candidates_left_after_a_failure_backs_off_and_asks_every_one_again() {
    // A answered 429 with a one-second wait; B can never hold the request. A is the answer in
    // a second, not B's refusal.
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let limited = failure(FailureKind::RateLimited, Some(MS(1_000)), Reached::Refusal);
    assert_eq!(f.failed(limited, 10, 0.5).next, Next::Admit(vec![B]));
    let never = denial(vec![Refusal {
        verdict: Verdict::Never,
        ..not_now(B, MS(0))
    }]);
    // The backoff after call 1 with a draw of 0.5: 100 ms.
    assert_eq!(f.denied(&never, 10, 0.5), Next::Wait(MS(100)));
    assert_eq!(f.woke(110), Next::Admit(vec![A, B]));
    // Asked all together again, their refusal is the last word.
    assert_eq!(
        f.denied(&never, 110, 0.5),
        Next::GiveUp(GiveUp::LastFailure)
    );

    // B alone is over the tenant's budget; A, cheaper, may still fit it.
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let _ = f.failed(limited, 10, 0.5);
    let over_budget = denial(vec![Refusal {
        deployment: B,
        limit: LimitKind::DailyBudget,
        scope: Scope::Tenant,
        verdict: Verdict::Exhausted(MS(7_000)),
    }]);
    assert_eq!(f.denied(&over_budget, 10, 0.5), Next::Wait(MS(100)));

    // No time left for the backoff: the failure is the answer.
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let _ = f.failed(limited, 59_950, 0.5);
    assert_eq!(
        f.denied(&never, 59_950, 0.5),
        Next::GiveUp(GiveUp::LastFailure)
    );
}

#[test]
fn no_wait_ends_at_the_deadline_and_a_late_wake_gives_up() {
    // A backoff as long as the time left gives up at once.
    let mut f = flow(&[A], Priority::Interactive);
    let _ = f.admitted(A);
    let zero = zero_wait();
    assert_eq!(
        f.failed(zero, 59_900, 0.5).next,
        Next::GiveUp(GiveUp::LastFailure)
    );

    // The batch handicap is dropped where it would take the wait to the deadline.
    let mut batch = flow(&[A], Priority::Batch);
    let soon = denial(vec![not_now(A, MS(1_000))]);
    assert_eq!(batch.denied(&soon, 58_900, 0.0), Next::Wait(MS(1_000)));

    // A timer that fired late: no call with no time left.
    let mut f = flow(&[A, B], Priority::Interactive);
    let soon = denial(vec![not_now(A, MS(3_000)), not_now(B, MS(2_000))]);
    assert_eq!(f.denied(&soon, 57_000, 0.0), Next::Wait(MS(2_000)));
    assert_eq!(
        f.woke(60_000),
        Next::GiveUp(GiveUp::NoCapacity {
            never: false,
            retry_after: None,
        })
    );
    let mut failed = flow(&[A], Priority::Interactive);
    let _ = failed.admitted(A);
    let _ = failed.failed(zero, 57_000, 0.0);
    assert_eq!(failed.woke(60_001), Next::GiveUp(GiveUp::LastFailure));
}

#[test]
fn a_call_that_timed_out_at_the_deadline_still_cools_its_deployment_down() {
    // A deployment that takes connections and never answers must be skipped by the next
    // requests, whatever deadline the first one had.
    let timeout = failure(FailureKind::Transport, None, Reached::Unknown);
    let mut f = flow(&[A, B], Priority::Interactive);
    let _ = f.admitted(A);
    let after = f.failed(timeout, 60_000, 0.5);
    assert_eq!(after.cooldown.map(|c| c.duration), Some(MS(100)));
    assert_eq!(after.next, Next::GiveUp(GiveUp::LastFailure));
    assert_eq!(after.settle, Settle::Estimate);
}

#[test]
fn the_candidates_left_ready_before_the_backoff_ends_are_asked_again_first() {
    // A and B failed; C says it is ready in 50 ms, before the backoff after call 2 would end
    // (a draw of 0.9 of 400 ms): C alone is asked again then.
    const C: DeploymentId = DeploymentId(2);
    let mut f = flow(&[A, B, C], Priority::Interactive);
    let limited = failure(FailureKind::RateLimited, Some(MS(5_000)), Reached::Refusal);
    let _ = f.admitted(A);
    assert_eq!(f.failed(limited, 0, 0.9).next, Next::Admit(vec![B, C]));
    let _ = f.admitted(B);
    assert_eq!(f.failed(limited, 0, 0.9).next, Next::Admit(vec![C]));
    let soon = denial(vec![not_now(C, MS(50))]);
    // 50 ms and 0.9 of a quarter of it as jitter.
    let wait = Duration::from_micros(61_250);
    assert_eq!(f.denied(&soon, 0, 0.9), Next::Wait(wait));
    assert_eq!(f.woke(50), Next::Admit(vec![C]));
    // Refused again, and later than the backoff: every candidate after the backoff.
    let late = denial(vec![not_now(C, MS(3_000))]);
    assert_eq!(f.denied(&late, 50, 0.9), Next::Wait(MS(360)));
    assert_eq!(f.woke(410), Next::Admit(vec![A, B, C]));
}

#[test]
fn a_partial_admission_that_was_granted_leaves_no_mark_on_the_next_refusal() {
    // B, asked alone after A's failure, was admitted and failed too: the next refusal, from
    // every candidate, is read as such (wait for the soonest), not as a partial one.
    let mut f = flow(&[A, B], Priority::Interactive);
    let limited = failure(FailureKind::RateLimited, Some(MS(2_000)), Reached::Refusal);
    let _ = f.admitted(A);
    assert_eq!(f.failed(limited, 0, 0.5).next, Next::Admit(vec![B]));
    let _ = f.admitted(B);
    assert_eq!(f.failed(limited, 0, 0.5).next, Next::Wait(MS(200)));
    assert_eq!(f.woke(200), Next::Admit(vec![A, B]));
    let cooling = denial(vec![not_now(A, MS(1_800)), not_now(B, MS(1_800))]);
    assert_eq!(f.denied(&cooling, 200, 0.0), Next::Wait(MS(1_800)));
}

#[test]
fn a_request_in_line_asks_again_within_the_line_poll_to_keep_its_ticket() {
    let mut f = flow(&[A], Priority::Interactive);
    let mut far = denial(vec![not_now(A, MS(50_000))]);
    far.place = Some(4);
    assert_eq!(
        f.denied(&far, 0, 0.0),
        Next::Wait(MS(crate::ledger::LINE_POLL_MS))
    );
    assert_eq!(f.woke(crate::ledger::LINE_POLL_MS), Next::Admit(vec![A]));
    // Out of line (it joined none this time): the wait is the limit's.
    assert_eq!(
        f.denied(&denial(vec![not_now(A, MS(50_000))]), 3_000, 0.0),
        Next::Wait(MS(50_000))
    );
}
