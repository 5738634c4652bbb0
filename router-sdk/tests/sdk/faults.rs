//! The request flow over real I/O, against a failing ledger and misbehaving stated waits: a
//! cooldown the ledger refuses does not stop the failover, refused settlements are retried until
//! they land, a zero wait never brings the same deployment back at once, and absurd waits and
//! resets are clamped at `retry.max_cooldown_secs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use router_core::config::DeploymentId;
use router_core::ledger::{
    ActualUsage, Admission, DeploymentSnapshot, Ledger, LedgerError, LedgerFuture, Need,
    Observation, Reservation, TenantSnapshot, TenantSpec,
};
use router_sdk::{AttemptOutcome, ChatChunk, ChatRequest};
use wiremock::Mock;
use wiremock::matchers::{method, path};

use crate::support::*;

/// A ledger whose cooldowns always fail and whose first `settle_failures` settlements fail.
#[derive(Debug)]
struct Failing {
    inner: Arc<dyn Ledger>,
    cooldowns_fail: bool,
    settle_failures: AtomicU32,
    settles: AtomicU32,
}

impl Failing {
    fn new(inner: Arc<dyn Ledger>, cooldowns_fail: bool, settle_failures: u32) -> Self {
        Self {
            inner,
            cooldowns_fail,
            settle_failures: AtomicU32::new(settle_failures),
            settles: AtomicU32::new(0),
        }
    }
}

fn broken() -> LedgerError {
    LedgerError::Protocol {
        url: "redis://test".into(),
        script: "test.lua",
        detail: "the store is down".into(),
    }
}

impl Ledger for Failing {
    fn admit<'a>(&'a self, need: &'a Need, c: &'a [DeploymentId]) -> LedgerFuture<'a, Admission> {
        self.inner.admit(need, c)
    }

    fn settle<'a>(&'a self, r: &'a Reservation, actual: ActualUsage) -> LedgerFuture<'a, bool> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        let fail = self
            .settle_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fail {
            return Box::pin(async { Err(broken()) });
        }
        self.inner.settle(r, actual)
    }

    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        self.inner.release(r)
    }

    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        self.inner.renew(r, ttl)
    }
    fn leave<'a>(&'a self, ticket: u64, ds: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        self.inner.leave(ticket, ds)
    }

    fn cooldown(&self, d: DeploymentId, how_long: Duration) -> LedgerFuture<'_, Duration> {
        if self.cooldowns_fail {
            return Box::pin(async { Err(broken()) });
        }
        self.inner.cooldown(d, how_long)
    }

    fn observe(&self, d: DeploymentId, o: Observation) -> LedgerFuture<'_, ()> {
        self.inner.observe(d, o)
    }

    fn snapshot<'a>(&'a self, d: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        self.inner.snapshot(d)
    }

    fn tenant_snapshot<'a>(&'a self, t: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        self.inner.tenant_snapshot(t)
    }
}

fn failed_cooldown(outcome: &AttemptOutcome) -> (Option<Duration>, Option<Duration>) {
    match outcome {
        AttemptOutcome::Failed {
            cooldown,
            clamped_from,
            ..
        } => (*cooldown, *clamped_from),
        AttemptOutcome::Ok => panic!("the first attempt failed"),
    }
}

#[tokio::test]
async fn a_ledger_error_while_putting_a_cooldown_does_not_stop_the_failover() {
    let upstreams = [
        Upstream::openai("cheap", (0.1, 0.2)),
        Upstream::anthropic("dear", (3.0, 15.0)),
    ];
    let w = World::with_ledger(&upstreams, |l| Arc::new(Failing::new(l, true, 0))).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            error_json(429, "openai/rate_limit_429.json").insert_header("retry-after", "7"),
        )
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&w.servers[1])
        .await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.provider, "dear");
    let (cooldown, _) = failed_cooldown(&answer.receipt.attempts[0].outcome);
    assert_eq!(cooldown, Some(Duration::from_secs(7)));
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn settlements_the_ledger_refuses_at_first_are_retried_until_they_land() {
    let upstreams = [Upstream::openai("oa", (1.0, 1.0))];
    let failing = Arc::new(std::sync::OnceLock::<Arc<Failing>>::new());
    let keep = failing.clone();
    let w = World::with_ledger(&upstreams, move |l| {
        let f = Arc::new(Failing::new(l, false, 2));
        let _ = keep.set(f.clone());
        f
    })
    .await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    // A max_tokens below the 46 tokens used: what stays counted is the provider's usage.
    let req = ChatRequest {
        max_tokens: Some(1),
        ..ChatRequest::new("Hello")
    };
    w.router.chat(req).await.unwrap();
    // The caller has its answer; the settlement is retried in the background.
    w.router.drain().await;
    assert_eq!(w.in_flight().await, 0, "the slot came back");
    let settles = failing.get().map(|f| f.settles.load(Ordering::SeqCst));
    assert_eq!(settles, Some(3), "two refusals, then it landed");
    assert_eq!(w.router.settlements_given_up(), 0);
    let tokens = w.snapshot("chat").await.usage.tokens;
    assert_eq!(
        tokens,
        1117 + 46,
        "the provider's usage replaced the estimate"
    );
}

/// Each wire format's 429, its routes, and a healthy dearer OpenAI-compatible deployment.
struct Case {
    upstream: fn(&'static str, (f64, f64)) -> Upstream,
    route: [&'static str; 2],
    limited: &'static str,
}

const CASES: [Case; 3] = [
    Case {
        upstream: Upstream::openai,
        route: [OPENAI_PATH, OPENAI_PATH],
        limited: "openai/rate_limit_429.json",
    },
    Case {
        upstream: Upstream::anthropic,
        route: [ANTHROPIC_PATH, ANTHROPIC_PATH],
        limited: "anthropic/rate_limit_429.json",
    },
    Case {
        upstream: Upstream::gemini,
        route: [
            "/v1beta/models/gemini-test:generateContent",
            "/v1beta/models/gemini-test:streamGenerateContent",
        ],
        limited: "gemini/per_minute_429.json",
    },
];

/// `cheap` (the case's wire format) answers 429 with `retry_after` once; `dear` answers. Returns
/// the receipt's attempts.
async fn limited_once(
    case: &Case,
    retry_after: &str,
    stream: bool,
) -> (World, Vec<router_sdk::Attempt>) {
    let w = World::new(&[
        (case.upstream)("cheap", (0.1, 0.2)),
        Upstream::openai("dear", (5.0, 20.0)),
    ])
    .await;
    Mock::given(method("POST"))
        .and(path(case.route[usize::from(stream)]))
        .respond_with(error_json(429, case.limited).insert_header("retry-after", retry_after))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let ok = if stream {
        ok_sse("openai/stream.sse")
    } else {
        ok_json("openai/ok.json")
    };
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok)
        .expect(1)
        .mount(&w.servers[1])
        .await;
    let receipt = if stream {
        let items: Vec<_> = w
            .router
            .chat_stream(ChatRequest::new("Hello"))
            .await
            .unwrap()
            .collect()
            .await;
        match items.into_iter().last() {
            Some(Ok(ChatChunk::Done(receipt))) => receipt,
            other => panic!("the stream ends with its receipt, not {other:?}"),
        }
    } else {
        w.router
            .chat(ChatRequest::new("Hello"))
            .await
            .unwrap()
            .receipt
    };
    assert_eq!(receipt.provider, "dear");
    assert_eq!(w.in_flight().await, 0);
    (w, receipt.attempts)
}

#[tokio::test]
async fn a_429_with_a_zero_or_past_wait_is_never_retried_on_the_same_deployment() {
    for case in &CASES {
        for stream in [false, true] {
            for wait in ["0", "Thu, 01 Jan 2015 00:00:00 GMT"] {
                let (_w, attempts) = limited_once(case, wait, stream).await;
                assert_eq!(attempts.len(), 2, "{} {wait} stream={stream}", case.limited);
            }
        }
    }
}

#[tokio::test]
async fn absurd_stated_waits_cool_down_for_at_most_max_cooldown() {
    let five_minutes = Duration::from_secs(300);
    for case in &CASES {
        for stream in [false, true] {
            let (w, attempts) = limited_once(case, "18446744073709551615", stream).await;
            let what = format!("{} stream={stream}", case.limited);
            let (cooldown, clamped_from) = failed_cooldown(&attempts[0].outcome);
            assert_eq!(cooldown, Some(five_minutes), "{what}");
            assert!(clamped_from.is_some_and(|s| s > five_minutes), "{what}");
            let cheap = w.router.registry().resolve("chat")[0];
            let snap = w.ledger.snapshot(&[cheap]).await.unwrap()[0];
            assert!(
                snap.cooldown.is_some_and(|c| c <= five_minutes),
                "{what}: {:?}",
                snap.cooldown
            );
        }
    }
}

#[tokio::test]
async fn a_rate_limit_reset_a_year_away_cools_down_for_at_most_max_cooldown() {
    // The deployments limit requests only: a provider that says no tokens are left can only be
    // followed by a cooldown until its reset, which must not be a year.
    let reset = rfc3339(T0 / 1000 + 365 * 86_400);
    let table = [
        (
            Upstream::openai("oa", (1.0, 1.0)),
            OPENAI_PATH,
            ok_json("openai/ok.json")
                .insert_header("x-ratelimit-remaining-tokens", "0")
                .insert_header("x-ratelimit-reset-tokens", "8760h"),
        ),
        (
            Upstream::anthropic("an", (1.0, 1.0)),
            ANTHROPIC_PATH,
            ok_json("anthropic/ok.json")
                .insert_header("anthropic-ratelimit-tokens-remaining", "0")
                .insert_header("anthropic-ratelimit-tokens-reset", reset.as_str()),
        ),
    ];
    for (upstream, route, answer) in table {
        let name = upstream.name;
        let w = World::new(&[upstream]).await;
        Mock::given(method("POST"))
            .and(path(route))
            .respond_with(answer)
            .expect(1)
            .mount(&w.servers[0])
            .await;
        w.router.chat(ChatRequest::new("Hello")).await.unwrap();
        let cooldown = w.snapshot("chat").await.cooldown;
        assert!(
            cooldown.is_some_and(|c| c > Duration::ZERO && c <= Duration::from_secs(300)),
            "{name}: {cooldown:?}"
        );
    }
}
