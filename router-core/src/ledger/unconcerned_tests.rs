#![allow(clippy::unwrap_used)]

//! What the store sees of requests no limit concerns: nothing, but their cooldowns.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::clock::ManualClock;
use crate::config::Limits;
use crate::ledger::{BudgetMicros, Denial, MemoryStore, TenantNeed};

const T0: u64 = 1_800_000_000_000;

/// Deployment 0 `free/f` (no limits anywhere), 1 `capped/c` (rpm 100), 2 `free2/g`.
fn registry() -> Registry {
    let yaml = r#"
providers:
  - name: free
    api: openai
    base_url: https://free.test/v1
    api_key_env: F_KEY
    models:
      - { name: f, aliases: [chat], price: { input: 1, output: 1 } }
  - name: capped
    api: openai
    base_url: https://capped.test/v1
    api_key_env: C_KEY
    models:
      - { name: c, aliases: [chat], price: { input: 2, output: 2 }, limits: { rpm: 100 } }
  - name: free2
    api: openai
    base_url: https://free2.test/v1
    api_key_env: G_KEY
    models:
      - { name: g, aliases: [chat], price: { input: 3, output: 3 } }
"#;
    Registry::from_yaml_str(yaml, "u.yaml").unwrap()
}

/// The memory store, counting the admissions and settlements it is asked for.
#[derive(Debug)]
struct Spy {
    store: MemoryStore,
    admits: AtomicU64,
    settles: AtomicU64,
}

impl Ledger for Spy {
    fn admit<'a>(&'a self, need: &'a Need, c: &'a [DeploymentId]) -> LedgerFuture<'a, Admission> {
        self.admits.fetch_add(1, Ordering::SeqCst);
        self.store.admit(need, c)
    }
    fn settle<'a>(&'a self, r: &'a Reservation, a: ActualUsage) -> LedgerFuture<'a, bool> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        self.store.settle(r, a)
    }
    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        self.store.release(r)
    }
    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        self.settles.fetch_add(1, Ordering::SeqCst);
        self.store.renew(r, ttl)
    }
    fn cooldown(&self, d: DeploymentId, how_long: Duration) -> LedgerFuture<'_, Duration> {
        self.store.cooldown(d, how_long)
    }
    fn observe(&self, d: DeploymentId, o: Observation) -> LedgerFuture<'_, ()> {
        self.store.observe(d, o)
    }
    fn snapshot<'a>(&'a self, d: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        self.store.snapshot(d)
    }
    fn tenant_snapshot<'a>(&'a self, t: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        self.store.tenant_snapshot(t)
    }
    fn leave<'a>(&'a self, ticket: u64, d: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        self.store.leave(ticket, d)
    }
}

struct World {
    spy: Arc<Spy>,
    ledger: Arc<dyn Ledger>,
    clock: ManualClock,
}

fn world() -> World {
    let registry = registry();
    let clock = ManualClock::new(T0);
    let spy = Arc::new(Spy {
        store: MemoryStore::with_clock(&registry, Arc::new(clock.clone())),
        admits: AtomicU64::new(0),
        settles: AtomicU64::new(0),
    });
    let ledger = Unconcerned::wrap(spy.clone(), &registry, Arc::new(clock.clone()));
    World { spy, ledger, clock }
}

fn d(n: usize) -> DeploymentId {
    DeploymentId(n)
}

fn need() -> Need {
    Need::new(100, Duration::from_secs(600))
}

fn granted(a: Admission) -> Reservation {
    match a {
        Admission::Granted(r) => r,
        Admission::Denied(d) => panic!("denied: {d:?}"),
    }
}

fn denied(a: Admission) -> Denial {
    match a {
        Admission::Granted(r) => panic!("granted: {r:?}"),
        Admission::Denied(d) => d,
    }
}

fn usage() -> ActualUsage {
    ActualUsage {
        tokens: 50,
        input_tokens: 40,
        cost_micros: 0,
    }
}

#[tokio::test]
async fn a_request_on_a_free_deployment_never_reaches_the_store() {
    let w = world();
    for _ in 0..3 {
        let r = granted(w.ledger.admit(&need(), &[d(0), d(1)]).await.unwrap());
        assert_eq!((r.deployment, r.rank, r.tokens), (d(0), 0, 100));
        assert!(w.ledger.renew(&r, Duration::from_secs(60)).await.unwrap());
        assert!(w.ledger.settle(&r, usage()).await.unwrap());
        // Settled once: the second time it is the store's, which never had it.
        assert!(!w.ledger.release(&r).await.unwrap());
    }
    assert_eq!(w.spy.admits.load(Ordering::SeqCst), 0);
    assert_eq!(w.spy.settles.load(Ordering::SeqCst), 3);
    let snap = w.ledger.snapshot(&[d(0)]).await.unwrap();
    assert_eq!(snap[0].usage.requests, 0);
}

#[tokio::test]
async fn a_tenants_request_and_a_limited_first_candidate_go_to_the_store() {
    let w = world();
    // A limited deployment first: the store takes the candidates in order.
    let r = granted(w.ledger.admit(&need(), &[d(1), d(0)]).await.unwrap());
    assert_eq!(r.deployment, d(1));
    assert!(w.ledger.settle(&r, usage()).await.unwrap());
    // A tenant's account is counted, even on a free deployment.
    let spec = TenantSpec {
        name: "acme".into(),
        limits: Limits {
            rpm: NonZeroU64::new(10),
            ..Limits::default()
        },
        budget: BudgetMicros::default(),
    };
    let tenant = Need {
        tenant: Some(TenantNeed::of(spec.clone(), vec![1])),
        ..need()
    };
    let r = granted(w.ledger.admit(&tenant, &[d(0)]).await.unwrap());
    assert!(r.tenant.is_some());
    assert_eq!(w.spy.admits.load(Ordering::SeqCst), 2);
    let t = w.ledger.tenant_snapshot(&spec).await.unwrap();
    assert_eq!(t.usage.requests, 1);
}

#[tokio::test]
async fn a_cooldown_is_followed_here_at_once_and_the_store_keeps_it() {
    let w = world();
    let cooled = w
        .ledger
        .cooldown(d(0), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(cooled, Duration::from_secs(30));
    // The next free candidate is granted here.
    let r = granted(w.ledger.admit(&need(), &[d(0), d(2)]).await.unwrap());
    assert_eq!((r.deployment, r.rank), (d(2), 1));
    assert_eq!(w.spy.admits.load(Ordering::SeqCst), 0);
    // Only the cooled one: the store says until when.
    let refused = denied(w.ledger.admit(&need(), &[d(0)]).await.unwrap());
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(30)));
    assert_eq!(w.spy.admits.load(Ordering::SeqCst), 1);
    // Once it is over, here again.
    w.clock.advance_ms(30_000);
    let _held = granted(w.ledger.admit(&need(), &[d(0)]).await.unwrap());
    assert_eq!(w.spy.admits.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn another_instances_cooldown_is_followed_within_a_second() {
    let w = world();
    // Another instance cools `f` down in the shared store.
    w.spy
        .store
        .cooldown(d(0), Duration::from_secs(30))
        .await
        .unwrap();
    let _held = granted(w.ledger.admit(&need(), &[d(0)]).await.unwrap());
    tokio::time::sleep(COOLDOWNS_EVERY).await;
    let r = granted(w.ledger.admit(&need(), &[d(0), d(2)]).await.unwrap());
    assert_eq!(r.deployment, d(2));
}

#[tokio::test]
async fn a_batch_settles_its_free_reservations_here_and_the_rest_in_the_store_in_order() {
    let w = world();
    let free = granted(w.ledger.admit(&need(), &[d(0)]).await.unwrap());
    let capped = granted(w.ledger.admit(&need(), &[d(1)]).await.unwrap());
    let settle = |r: &Reservation| Settlement {
        reservation: r.clone(),
        actual: Some(usage()),
        observed: None,
    };
    assert!(matches!(
        w.ledger.settle_here(&settle(&free)),
        Some(Ok(true))
    ));
    let free = granted(w.ledger.admit(&need(), &[d(0)]).await.unwrap());
    let batch = [settle(&capped), settle(&free), settle(&capped)];
    let results: Vec<bool> = w
        .ledger
        .settle_batch(&batch)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(results, [true, true, false]);
    let snap = w.ledger.snapshot(&[d(1)]).await.unwrap();
    assert_eq!((snap[0].usage.requests, snap[0].usage.in_flight), (1, 0));
}

#[test]
fn a_registry_without_a_free_deployment_keeps_its_store() {
    let yaml = r#"
providers:
  - name: capped
    api: openai
    base_url: https://capped.test/v1
    api_key_env: C_KEY
    limits: { concurrency: 5 }
    models:
      - { name: c, price: { input: 2, output: 2 } }
"#;
    let registry = Registry::from_yaml_str(yaml, "u.yaml").unwrap();
    let store: Arc<dyn Ledger> = Arc::new(MemoryStore::new(&registry));
    let wrapped = Unconcerned::wrap(store.clone(), &registry, Arc::new(ManualClock::new(T0)));
    assert!(Arc::ptr_eq(&store, &wrapped));
}
