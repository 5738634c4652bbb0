#![allow(clippy::unwrap_used)]

//! What the store sees of a leasing tenant's requests: their deployments' part, block calls
//! that serve many requests, and corrections that add up to what the requests really used.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;
use crate::clock::ManualClock;
use crate::ledger::{MemoryStore, TenantNeed};

const T0: u64 = 1_800_000_000_000;

fn registry() -> Registry {
    let yaml = r#"
providers:
  - name: p
    api: openai
    base_url: https://p.test/v1
    api_key_env: P_KEY
    models:
      - { name: m, aliases: [chat], price: { input: 1, output: 1 }, limits: { rpm: 100000 } }
      - { name: n, aliases: [chat], price: { input: 2, output: 2 }, limits: { rpm: 100000 } }
tenants:
  tiers:
    leasing: { rpm: 1000, tpm: 1000000, budget: { daily_usd: 100 }, lease: auto }
    exact: { rpm: 1000 }
  members:
    acme: leasing
    slow: exact
"#;
    Registry::from_yaml_str(yaml, "u.yaml").unwrap()
}

/// What the spy's tenant block calls did.
#[derive(Debug, Default)]
struct Calls {
    /// Each call's answer, by id: a call sent again answers the same and counts nothing.
    runs: HashMap<u64, TenantLeased>,
    /// What the grants and corrections counted: requests, tokens, micro-USD.
    counted: [i64; 3],
    /// Calls that asked for a block.
    asked: u64,
    /// The next call runs, but its answer is lost.
    lose_next: bool,
    refuse: bool,
    unavailable: bool,
}

/// The memory store for the deployments, and a tenant block store that grants what is asked.
#[derive(Debug)]
struct Spy {
    store: MemoryStore,
    calls: Mutex<Calls>,
    /// Admissions that reached the store with a tenant, and without.
    with_tenant: AtomicU64,
    without_tenant: AtomicU64,
    /// Admissions never answer.
    hang: AtomicBool,
    clock: ManualClock,
}

impl Spy {
    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap()
    }
}

impl Ledger for Spy {
    fn admit<'a>(&'a self, need: &'a Need, c: &'a [DeploymentId]) -> LedgerFuture<'a, Admission> {
        let count = match need.tenant {
            Some(_) => &self.with_tenant,
            None => &self.without_tenant,
        };
        count.fetch_add(1, Ordering::SeqCst);
        if self.hang.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        self.store.admit(need, c)
    }
    fn settle<'a>(&'a self, r: &'a Reservation, a: ActualUsage) -> LedgerFuture<'a, bool> {
        self.store.settle(r, a)
    }
    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        self.store.release(r)
    }
    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
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
    fn remote(&self) -> bool {
        true
    }
    fn health(&self) -> Option<Health> {
        Some(Health {
            mode: super::super::Mode::Shared,
            since: Duration::ZERO,
            instances: 1,
            changes: 0,
            local_admissions: 0,
            in_flight: 0,
            calls_out: 0,
            leased_in_flight: 0,
            tenant_leased_in_flight: 0,
        })
    }
    fn lease_tenant<'a>(
        &'a self,
        _spec: &'a TenantSpec,
        ask: TenantAsk,
        corrections: &'a [TenantCorrection],
        call: u64,
    ) -> LedgerFuture<'a, TenantLeased> {
        let mut c = self.calls();
        let answer = if c.unavailable {
            Ok(TenantLeased::Unavailable)
        } else if let Some(run) = c.runs.get(&call) {
            Ok(*run)
        } else {
            for k in corrections {
                for (sum, d) in c.counted.iter_mut().zip(k.deltas) {
                    *sum += d;
                }
            }
            let run = if ask.want.requests == 0 {
                TenantLeased::Refused
            } else if c.refuse {
                c.asked += 1;
                TenantLeased::Refused
            } else {
                c.asked += 1;
                let w = ask.want;
                for (sum, v) in c.counted.iter_mut().zip([w.requests, w.tokens, w.micros]) {
                    *sum += v as i64;
                }
                let now = self.clock.now_ms();
                TenantLeased::Granted {
                    amounts: w,
                    bucket: now / BUCKET_MS,
                    store_now: now,
                    window: super::super::WindowUse {
                        requests: w.requests,
                        tokens: w.tokens,
                    },
                }
            };
            c.runs.insert(call, run);
            if std::mem::take(&mut c.lose_next) {
                Err(LedgerError::Timeout {
                    url: "redis://spy".into(),
                    after: Duration::from_millis(50),
                })
            } else {
                Ok(run)
            }
        };
        Box::pin(std::future::ready(answer))
    }
}

struct World {
    spy: Arc<Spy>,
    ledger: Arc<dyn Ledger>,
    clock: ManualClock,
}

fn world() -> World {
    let registry = registry();
    let clock = ManualClock::new(T0 + 100);
    let spy = Arc::new(Spy {
        store: MemoryStore::with_clock(&registry, Arc::new(clock.clone())),
        calls: Mutex::default(),
        with_tenant: AtomicU64::new(0),
        without_tenant: AtomicU64::new(0),
        hang: AtomicBool::new(false),
        clock: clock.clone(),
    });
    // Outside a runtime: no task sends what is owed; `close` does.
    let ledger = LeasedTenants::wrap(spy.clone(), &registry, Arc::new(clock.clone()));
    World { spy, ledger, clock }
}

/// A request of tenant `name` (in its configured tier) of 100 tokens, costing 10 and 20
/// micro-USD on the two deployments.
fn need(name: &str) -> Need {
    let registry = registry();
    let tier = registry.tenants.tier_of(name).unwrap();
    let mut need = Need::new(100, Duration::from_secs(60));
    need.tenant = Some(TenantNeed::of(
        TenantSpec::of_tier(name, tier),
        vec![10, 20],
    ));
    need
}

const BOTH: [DeploymentId; 2] = [DeploymentId(0), DeploymentId(1)];

async fn admitted(w: &World, need: &Need) -> Reservation {
    match w.ledger.admit(need, &BOTH).await.unwrap() {
        Admission::Granted(r) => r,
        other => panic!("not admitted: {other:?}"),
    }
}

fn in_flight(w: &World) -> u64 {
    w.ledger.health().unwrap().tenant_leased_in_flight
}

#[tokio::test]
async fn a_leasing_tenants_requests_reach_the_store_without_it_and_few_block_calls_serve_them() {
    let w = world();
    let mut held = Vec::new();
    for _ in 0..100 {
        let r = admitted(&w, &need("acme")).await;
        let hold = r.tenant.as_ref().unwrap();
        assert_eq!(
            (hold.names.as_slice(), hold.cost_micros),
            (&["acme".to_owned()][..], 10)
        );
        held.push(r);
    }
    assert_eq!(w.spy.with_tenant.load(Ordering::SeqCst), 0);
    assert_eq!(w.spy.without_tenant.load(Ordering::SeqCst), 100);
    // Each block is sized from the second's rate so far: 1, 2, 4, ... requests.
    let asked = w.spy.calls().asked;
    assert!(asked <= 8, "{asked} block calls for 100 requests");
    assert_eq!(in_flight(&w), 100);
    // A tenant of a tier that does not lease is admitted exactly.
    let _exact = admitted(&w, &need("slow")).await;
    assert_eq!(w.spy.with_tenant.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn what_the_blocks_counted_ends_as_what_the_requests_used() {
    let w = world();
    let mut held = Vec::new();
    for _ in 0..30 {
        held.push(admitted(&w, &need("acme")).await);
    }
    // A second later: the open block's second is over, and the next requests take a new one.
    w.clock.advance_ms(1_000);
    for _ in 0..5 {
        held.push(admitted(&w, &need("acme")).await);
    }
    // 20 settle with 40 tokens at 4 micro-USD, 10 with 300 tokens at 30, 5 are released.
    for (i, r) in held.iter().enumerate() {
        let done = match i {
            0..20 => w.ledger.settle(r, actual(40, 4)).await,
            20..30 => w.ledger.settle(r, actual(300, 30)).await,
            _ => w.ledger.release(r).await,
        };
        assert!(done.unwrap());
    }
    assert_eq!(in_flight(&w), 0);
    w.ledger.close().await.unwrap();
    assert_eq!(
        w.spy.calls().counted,
        [30, 20 * 40 + 10 * 300, 20 * 4 + 10 * 30],
        "requests, tokens and micro-USD as used"
    );
}

fn actual(tokens: u64, micros: u64) -> ActualUsage {
    ActualUsage {
        tokens,
        input_tokens: tokens / 2,
        cost_micros: micros,
    }
}

#[tokio::test]
async fn a_refused_or_unavailable_block_leaves_the_request_to_the_exact_path() {
    let w = world();
    w.spy.calls().refuse = true;
    let r = admitted(&w, &need("acme")).await;
    assert!(r.tenant.is_some());
    assert_eq!(w.spy.with_tenant.load(Ordering::SeqCst), 1);
    // Within the second after a refusal, no block is asked for.
    let _again = admitted(&w, &need("acme")).await;
    assert_eq!(
        (
            w.spy.calls().asked,
            w.spy.with_tenant.load(Ordering::SeqCst)
        ),
        (1, 2)
    );
    w.clock.advance_ms(1_000);
    w.spy.calls().refuse = false;
    w.spy.calls().unavailable = true;
    let _unavailable = admitted(&w, &need("acme")).await;
    assert_eq!(w.spy.with_tenant.load(Ordering::SeqCst), 3);
    assert_eq!(in_flight(&w), 0);
}

#[tokio::test]
async fn a_dropped_or_denied_admission_gives_back_what_it_took() {
    let w = world();
    w.spy.hang.store(true, Ordering::SeqCst);
    {
        let need = need("acme");
        let mut admit = w.ledger.admit(&need, &BOTH);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(admit.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(
        in_flight(&w),
        0,
        "nothing held once the admission is dropped"
    );
    w.ledger.close().await.unwrap();
    assert_eq!(w.spy.calls().counted, [0, 0, 0]);
}

#[tokio::test]
async fn a_block_call_whose_answer_was_lost_counts_once_and_its_grant_comes_back() {
    let w = world();
    held_and_settled(&w, 3).await;
    // The next second's block call runs, but its answer is lost: the request goes exact.
    w.clock.advance_ms(1_000);
    w.spy.calls().lose_next = true;
    let r = admitted(&w, &need("acme")).await;
    assert_eq!(w.spy.with_tenant.load(Ordering::SeqCst), 1);
    w.ledger.settle(&r, actual(100, 10)).await.unwrap();
    // Sent again (here by close), it answers as it ran: its grant is given back, and the
    // corrections it carried count once.
    w.ledger.close().await.unwrap();
    assert_eq!(w.spy.calls().counted, [3, 3 * 50, 3 * 5]);
}

/// Admits `n` requests of acme and settles each at 50 tokens and 5 micro-USD.
async fn held_and_settled(w: &World, n: usize) {
    for _ in 0..n {
        let r = admitted(w, &need("acme")).await;
        w.ledger.settle(&r, actual(50, 5)).await.unwrap();
    }
}
