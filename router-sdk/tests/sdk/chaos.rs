//! Chaos: K routers share one Redis while they send traffic through an upstream that enforces
//! its RPM exactly; the test kills Redis and restarts it empty, or freezes it past the ledger's
//! timeout. In `local` mode no request fails for a ledger reason, none hangs past its deadline,
//! the upstream never sees more than its limit in 60 s, and once Redis is back every reservation
//! is settled and nothing is left in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use llmroute_tests::enforcer::Enforcer;
use llmroute_tests::{TestRedis, redis_server};
use router_core::clock::SystemClock;
use router_core::config::Registry;
use router_core::ledger::{Ledger, Mode, RedisStore, RedisStoreOptions, ResilientStore};
use router_sdk::{ChatRequest, Error, Router, StaticKeys};
use wiremock::{Mock, MockServer};

use crate::support::*;

/// The upstream's limit: requests per 60 s.
const RPM: usize = 120;
/// How long one request may take, waits included.
const DEADLINE: Duration = Duration::from_millis(1_500);

/// What the routers' requests came to.
#[derive(Debug, Default)]
struct Outcomes {
    ok: AtomicUsize,
    no_capacity: AtomicUsize,
    ledger: AtomicUsize,
    other: AtomicUsize,
    hung: AtomicUsize,
}

struct Scene {
    redis: TestRedis,
    upstream: MockServer,
    enforcer: Arc<Enforcer>,
    yaml: String,
}

impl Scene {
    async fn new() -> Scene {
        let redis = redis_server();
        let upstream = MockServer::start().await;
        let enforcer = Enforcer::new(RPM, fixture("openai/ok.json"));
        Mock::given(wiremock::matchers::method("POST"))
            .respond_with(enforcer.responder())
            .mount(&upstream)
            .await;
        let up = Upstream {
            limits: "rpm: 120",
            ..Upstream::openai("oa", (0.1, 0.2))
        };
        let yaml = format!(
            "state: {}\nnamespace: {}\nledger: {{ timeout_ms: 15, heartbeat_ms: 100 }}\n{}",
            redis.url,
            redis.namespace,
            config(&[(&up, upstream.uri())])
        );
        Scene {
            redis,
            upstream,
            enforcer,
            yaml,
        }
    }

    fn registry(&self) -> Registry {
        Registry::from_yaml_str(&self.yaml, "chaos.yaml").unwrap()
    }

    /// A router and its ledger, as `router_state::store::open` makes them from the configuration's `state`
    /// and `ledger:`.
    async fn router(&self) -> (Router, Arc<ResilientStore>) {
        let registry = self.registry();
        let options = RedisStoreOptions {
            namespace: registry.namespace.clone(),
            response_timeout: registry.ledger.timeout,
            lazy: true,
            ..RedisStoreOptions::default()
        };
        let shared = RedisStore::connect(&self.redis.url, &registry, options)
            .await
            .unwrap();
        let ledger = Arc::new(ResilientStore::new(shared, &registry, Arc::new(SystemClock)).await);
        let keys = StaticKeys::new().with(key_var("oa"), planted_key("oa"));
        let router = Router::builder(registry)
            .ledger(ledger.clone())
            .keys(Arc::new(keys))
            .build()
            .await
            .unwrap();
        (router, ledger)
    }

    /// In flight on every deployment, read from Redis directly.
    async fn in_flight(&self) -> u64 {
        let registry = self.registry();
        let options = RedisStoreOptions {
            namespace: self.redis.namespace.clone(),
            ..RedisStoreOptions::default()
        };
        let store = RedisStore::connect(&self.redis.url, &registry, options)
            .await
            .unwrap();
        let all: Vec<_> = registry.deployment_ids().collect();
        let snaps = store.snapshot(&all).await.unwrap();
        snaps.iter().map(|s| s.usage.in_flight).sum()
    }
}

/// One request every `every` until `stop`, each in its own task; counts outcomes.
async fn traffic(router: Arc<Router>, every: Duration, stop: Instant, out: Arc<Outcomes>) {
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(every);
    while Instant::now() < stop {
        tick.tick().await;
        let (router, out) = (router.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            let mut req = ChatRequest::new("Hello");
            req.deadline = Some(DEADLINE);
            let bound = DEADLINE + Duration::from_secs(3);
            let counter = match tokio::time::timeout(bound, router.chat(req)).await {
                Err(_) => &out.hung,
                Ok(Ok(_)) => &out.ok,
                Ok(Err(Error::NoCapacity { .. })) => &out.no_capacity,
                Ok(Err(Error::Ledger(e))) => {
                    eprintln!("ledger failure: {e}");
                    &out.ledger
                }
                Ok(Err(e)) => {
                    eprintln!("other failure: {e}");
                    &out.other
                }
            };
            counter.fetch_add(1, Ordering::SeqCst);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Runs K routers for `run`, calling `disrupt` on the scene meanwhile; then checks the four
/// promises and returns the outcomes.
async fn chaos<F, Fut>(k: usize, run: Duration, disrupt: F) -> (Scene, Outcomes)
where
    F: FnOnce(Scene) -> Fut,
    Fut: std::future::Future<Output = Scene>,
{
    let scene = Scene::new().await;
    let (mut routers, mut ledgers) = (Vec::new(), Vec::new());
    for _ in 0..k {
        let (router, ledger) = scene.router().await;
        routers.push(Arc::new(router));
        ledgers.push(ledger);
    }
    let out = Arc::new(Outcomes::default());
    let stop = Instant::now() + run;
    let load: Vec<_> = routers
        .iter()
        .map(|r| {
            tokio::spawn(traffic(
                r.clone(),
                Duration::from_millis(40),
                stop,
                out.clone(),
            ))
        })
        .collect();
    let scene = disrupt(scene).await;
    for l in load {
        l.await.unwrap();
    }
    // Redis is back: one heartbeat takes every router back to shared mode (what it admitted
    // alone written into the shared windows), and its settlements land.
    for (r, ledger) in routers.iter().zip(&ledgers) {
        ledger.heartbeat_now().await;
        assert_eq!(ledger.status().mode, Mode::Shared);
        assert!(ledger.status().changes >= 2, "{:?}", ledger.status());
        r.drain().await;
        assert_eq!(r.settlements_given_up(), 0);
    }
    assert_eq!(scene.in_flight().await, 0, "nothing left in flight");
    let out = Arc::try_unwrap(out).unwrap();
    assert_eq!(out.hung.load(Ordering::SeqCst), 0, "{out:?}");
    assert_eq!(out.ledger.load(Ordering::SeqCst), 0, "{out:?}");
    assert_eq!(out.other.load(Ordering::SeqCst), 0, "{out:?}");
    assert_eq!(
        scene.enforcer.refused(),
        0,
        "the upstream refused requests over its limit: {out:?}"
    );
    let served = scene.enforcer.served();
    assert!(served <= RPM, "{served} served in under a minute");
    let _ = &scene.upstream;
    (scene, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_and_restarted_empty_nothing_fails_nothing_goes_over() {
    let (scene, out) = chaos(3, Duration::from_secs(5), |mut scene| async move {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        scene.redis.kill();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        scene.redis.restart();
        scene
    })
    .await;
    reached_the_limit(&scene, &out);
}

/// The limit was reached (else the test proves nothing): requests were refused for capacity,
/// and the upstream served all but a few of what it allows (the ledger errs on the safe side
/// by what it cannot tell apart across the outage).
fn reached_the_limit(scene: &Scene, out: &Outcomes) {
    let served = scene.enforcer.served();
    assert!(served >= RPM - 10, "only {served} served: {out:?}");
    assert!(out.no_capacity.load(Ordering::SeqCst) > 0, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_frozen_past_the_timeout_nothing_fails_nothing_goes_over() {
    let (scene, out) = chaos(3, Duration::from_secs(5), |scene| async move {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        scene.redis.pause();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        scene.redis.resume();
        scene
    })
    .await;
    reached_the_limit(&scene, &out);
}
