//! With Redis, a request costs one ledger call before the provider call and none on the caller's
//! path after it: the settlement and the provider's rate-limit report leave together, queued,
//! and one that fails is retried until it lands. The embedded store settles off the path too.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use llmroute_tests::redis_server;
use router_core::config::{DeploymentId, Registry};
use router_core::ledger::{
    ActualUsage, Admission, DeploymentSnapshot, Ledger, LedgerError, LedgerFuture, MemoryStore,
    Need, Observation, RedisStore, RedisStoreOptions, Reservation, Settlement, SqliteStore,
    TenantSnapshot, TenantSpec,
};
use router_sdk::{ChatRequest, Router, StaticKeys};
use tokio::sync::Semaphore;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

use crate::support::*;

/// A store (Redis unless said), counting the calls a router makes; settlements wait at `gate`
/// and the first `fail_batches` batches fail.
#[derive(Debug)]
struct Counted<L = RedisStore> {
    inner: L,
    admits: AtomicUsize,
    settles: AtomicUsize,
    observes: AtomicUsize,
    gate: Semaphore,
    fail_batches: AtomicUsize,
}

impl<L: Ledger> Ledger for Counted<L> {
    fn admit<'a>(&'a self, n: &'a Need, c: &'a [DeploymentId]) -> LedgerFuture<'a, Admission> {
        self.admits.fetch_add(1, Ordering::SeqCst);
        self.inner.admit(n, c)
    }
    fn settle<'a>(&'a self, r: &'a Reservation, a: ActualUsage) -> LedgerFuture<'a, bool> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        self.inner.settle(r, a)
    }
    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        self.inner.release(r)
    }
    fn renew<'a>(&'a self, r: &'a Reservation, t: std::time::Duration) -> LedgerFuture<'a, bool> {
        self.inner.renew(r, t)
    }
    fn leave<'a>(&'a self, ticket: u64, ds: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        self.inner.leave(ticket, ds)
    }
    fn cooldown(
        &self,
        d: DeploymentId,
        t: std::time::Duration,
    ) -> LedgerFuture<'_, std::time::Duration> {
        self.inner.cooldown(d, t)
    }
    fn observe(&self, d: DeploymentId, o: Observation) -> LedgerFuture<'_, ()> {
        self.observes.fetch_add(1, Ordering::SeqCst);
        self.inner.observe(d, o)
    }
    fn snapshot<'a>(&'a self, d: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        self.inner.snapshot(d)
    }
    fn tenant_snapshot<'a>(&'a self, t: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        self.inner.tenant_snapshot(t)
    }
    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        Box::pin(async move {
            let _pass = self.gate.acquire().await;
            self.settles.fetch_add(batch.len(), Ordering::SeqCst);
            let failing = self
                .fail_batches
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                return batch
                    .iter()
                    .map(|_| Err(LedgerError::UnknownDeployment(99)))
                    .collect();
            }
            self.inner.settle_batch(batch).await
        })
    }
    fn remote(&self) -> bool {
        self.inner.remote()
    }
    fn settles_apart(&self) -> bool {
        self.inner.settles_apart()
    }
}

impl<L> Counted<L> {
    fn over(inner: L, fail_batches: usize, gate_open: bool) -> Self {
        Counted {
            inner,
            admits: AtomicUsize::new(0),
            settles: AtomicUsize::new(0),
            observes: AtomicUsize::new(0),
            gate: Semaphore::new(if gate_open { Semaphore::MAX_PERMITS } else { 0 }),
            fail_batches: AtomicUsize::new(fail_batches),
        }
    }
}

/// One OpenAI-compatible upstream that says 1000 tokens remain, far below the 100k limit: worth
/// following.
async fn upstream() -> (Upstream, MockServer) {
    let up = Upstream {
        limits: "rpm: 1000, tpm: 100000",
        ..Upstream::openai("oa", (2.0, 8.0))
    };
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ok_json("openai/ok.json")
                .insert_header("x-ratelimit-limit-tokens", "100000")
                .insert_header("x-ratelimit-remaining-tokens", "1000")
                .insert_header("x-ratelimit-reset-tokens", "30s"),
        )
        .mount(&server)
        .await;
    (up, server)
}

async fn router_over<L: Ledger + 'static>(
    registry: Registry,
    up: &Upstream,
    ledger: Arc<Counted<L>>,
) -> Router {
    let keys = StaticKeys::new().with(key_var(up.name), planted_key(up.name));
    Router::builder(registry)
        .ledger(ledger)
        .keys(Arc::new(keys))
        .build()
        .await
        .unwrap()
}

/// A router over Redis (kept alive by the returned handle) and the upstream.
async fn scene(fail_batches: usize, gate_open: bool) -> (Router, Arc<Counted>, Keep) {
    let redis = redis_server();
    let (up, server) = upstream().await;
    let registry = Registry::from_yaml_str(&config(&[(&up, server.uri())]), "t.yaml").unwrap();
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        ..Default::default()
    };
    let store = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    let ledger = Arc::new(Counted::over(store, fail_batches, gate_open));
    let router = router_over(registry, &up, ledger.clone()).await;
    (router, ledger, (redis, server))
}

/// What must outlive a scene's requests.
type Keep = (llmroute_tests::TestRedis, MockServer);

async fn snapshot<L: Ledger>(router: &Router, ledger: &Counted<L>) -> DeploymentSnapshot {
    let d = router.registry().resolve("gpt-test")[0];
    ledger.snapshot(&[d]).await.unwrap()[0]
}

#[tokio::test]
async fn the_answer_comes_before_the_settlement_which_carries_the_report_in_one_call() {
    let (router, ledger, _server) = scene(0, false).await;
    let req = ChatRequest {
        max_tokens: Some(1),
        ..ChatRequest::new("Hello")
    };
    // The settlement is held at the gate: the caller has its answer all the same.
    let answer = router.chat(req).await.unwrap();
    assert_eq!(answer.receipt.usage.total_tokens(), 1163);
    assert_eq!(ledger.admits.load(Ordering::SeqCst), 1);
    assert_eq!(ledger.settles.load(Ordering::SeqCst), 0, "not yet settled");
    assert_eq!(snapshot(&router, &ledger).await.usage.in_flight, 1);
    ledger.gate.add_permits(Semaphore::MAX_PERMITS);
    router.drain().await;
    let snap = snapshot(&router, &ledger).await;
    // Settled (1163 used), then the report followed: 1000 of 100k remain, so 99k count as used.
    assert_eq!((snap.usage.in_flight, snap.usage.tokens), (0, 99_000));
    assert_eq!(
        snap.reported.and_then(|r| r.tokens_remaining),
        Some(1000),
        "the provider's report went with the settlement"
    );
    assert_eq!(ledger.settles.load(Ordering::SeqCst), 1);
    assert_eq!(
        ledger.observes.load(Ordering::SeqCst),
        0,
        "no call of its own"
    );
}

#[tokio::test]
async fn the_embedded_store_answers_before_its_settlement_too() {
    let dir = tempfile::tempdir().unwrap();
    let (up, server) = upstream().await;
    let registry = Registry::from_yaml_str(&config(&[(&up, server.uri())]), "t.yaml").unwrap();
    let clock = Arc::new(router_core::clock::SystemClock);
    let store = SqliteStore::open(&dir.path().join("ledger.sqlite"), &registry, clock).unwrap();
    assert!(store.settles_apart());
    let ledger = Arc::new(Counted::over(store, 0, false));
    let router = router_over(registry, &up, ledger.clone()).await;
    let answer = router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.usage.total_tokens(), 1163);
    assert_eq!(ledger.settles.load(Ordering::SeqCst), 0, "not yet settled");
    assert_eq!(snapshot(&router, &ledger).await.usage.in_flight, 1);
    ledger.gate.add_permits(Semaphore::MAX_PERMITS);
    router.drain().await;
    assert_eq!(ledger.settles.load(Ordering::SeqCst), 1);
    assert_eq!(snapshot(&router, &ledger).await.usage.in_flight, 0);
}

#[tokio::test]
async fn the_memory_store_settles_in_place() {
    let (up, server) = upstream().await;
    let registry = Registry::from_yaml_str(&config(&[(&up, server.uri())]), "t.yaml").unwrap();
    let store = MemoryStore::new(&registry);
    assert!(!store.settles_apart());
    let ledger = Arc::new(Counted::over(store, 0, true));
    let router = router_over(registry, &up, ledger.clone()).await;
    router.chat(ChatRequest::new("Hello")).await.unwrap();
    // Settled by the time the answer is back, with no queue in between.
    assert_eq!(ledger.settles.load(Ordering::SeqCst), 1);
    assert_eq!(snapshot(&router, &ledger).await.usage.in_flight, 0);
}

#[tokio::test]
async fn a_settlement_that_failed_once_is_applied_later() {
    let (router, ledger, _server) = scene(1, true).await;
    router.chat(ChatRequest::new("Hello")).await.unwrap();
    router.drain().await;
    assert_eq!(router.settlements_given_up(), 0);
    assert_eq!(
        ledger.settles.load(Ordering::SeqCst),
        2,
        "failed once, then landed"
    );
    let snap = snapshot(&router, &ledger).await;
    assert_eq!(snap.usage.in_flight, 0);
    // The provider's report (1000 of 100k tokens remain) followed the settlement.
    assert_eq!(snap.usage.tokens, 99_000);
}
