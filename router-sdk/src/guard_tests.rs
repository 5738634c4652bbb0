//! Slot renewal and the settler's retries, on paused time.
#![allow(clippy::unwrap_used)]

use router_core::clock::ManualClock;
use router_core::config::Registry;
use router_core::estimate::Accounting;
use router_core::ledger::{
    ActualUsage, Admission, Ledger, LedgerError, MemoryStore, Need, Reservation,
};

use crate::settler::Settler;

use super::*;

const YAML: &str = r#"
providers:
  - name: p
    api: openai
    base_url: http://localhost/v1
    api_key_env: P_KEY
    models:
      - { name: m, price: { input: 1, output: 1 }, limits: { concurrency: 1 } }
"#;

/// A ledger in memory with one fault.
#[derive(Debug)]
struct Faulty(MemoryStore, Fault);

#[derive(Debug)]
enum Fault {
    /// Down: every settlement and release fails.
    Down,
    /// Remote (its settlements go through the queue), and each batch waits for a permit.
    Gated(tokio::sync::Semaphore),
}

fn down() -> LedgerError {
    LedgerError::UnknownDeployment(99)
}

impl Ledger for Faulty {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> router_core::ledger::LedgerFuture<'a, Admission> {
        self.0.admit(need, candidates)
    }
    fn settle<'a>(
        &'a self,
        r: &'a Reservation,
        a: ActualUsage,
    ) -> router_core::ledger::LedgerFuture<'a, bool> {
        match self.1 {
            Fault::Down => Box::pin(async { Err(down()) }),
            Fault::Gated(_) => self.0.settle(r, a),
        }
    }
    fn release<'a>(&'a self, r: &'a Reservation) -> router_core::ledger::LedgerFuture<'a, bool> {
        match self.1 {
            Fault::Down => Box::pin(async { Err(down()) }),
            Fault::Gated(_) => self.0.release(r),
        }
    }
    fn settle_batch<'a>(
        &'a self,
        batch: &'a [router_core::ledger::Settlement],
    ) -> futures_util::future::BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        Box::pin(async move {
            match &self.1 {
                Fault::Down => batch.iter().map(|_| Err(down())).collect(),
                Fault::Gated(gate) => {
                    let _pass = gate.acquire().await;
                    self.0.settle_batch(batch).await
                }
            }
        })
    }
    fn remote(&self) -> bool {
        matches!(self.1, Fault::Gated(_))
    }
    fn renew<'a>(
        &'a self,
        r: &'a Reservation,
        ttl: Duration,
    ) -> router_core::ledger::LedgerFuture<'a, bool> {
        self.0.renew(r, ttl)
    }
    fn leave<'a>(
        &'a self,
        ticket: u64,
        ds: &'a [DeploymentId],
    ) -> router_core::ledger::LedgerFuture<'a, ()> {
        self.0.leave(ticket, ds)
    }
    fn cooldown(
        &self,
        d: DeploymentId,
        t: Duration,
    ) -> router_core::ledger::LedgerFuture<'_, Duration> {
        self.0.cooldown(d, t)
    }
    fn observe(
        &self,
        d: DeploymentId,
        o: router_core::ledger::Observation,
    ) -> router_core::ledger::LedgerFuture<'_, ()> {
        self.0.observe(d, o)
    }
    fn snapshot<'a>(
        &'a self,
        d: &'a [DeploymentId],
    ) -> router_core::ledger::LedgerFuture<'a, Vec<router_core::ledger::DeploymentSnapshot>> {
        self.0.snapshot(d)
    }
    fn tenant_snapshot<'a>(
        &'a self,
        t: &'a router_core::ledger::TenantSpec,
    ) -> router_core::ledger::LedgerFuture<'a, router_core::ledger::TenantSnapshot> {
        self.0.tenant_snapshot(t)
    }
}

#[tokio::test(start_paused = true)]
async fn a_settlement_the_ledger_never_takes_is_given_up_with_its_slot_and_counted() {
    let registry = Registry::from_yaml_str(YAML, "guard.yaml").unwrap();
    let ledger = Arc::new(Faulty(MemoryStore::new(&registry), Fault::Down));
    let ttl = Duration::from_secs(2);
    let need = Need::new(10, ttl);
    let Ok(Admission::Granted(r)) = ledger.admit(&need, &[DeploymentId(0)]).await else {
        panic!("an empty ledger admits");
    };
    let price = registry.deployment(DeploymentId(0)).price.clone();
    let settler = Arc::new(Settler::new(ledger.clone()));
    let guard = Guard::new(settler.clone(), r, price, Accounting::AtArrival, ttl);
    guard.settle_estimate().await;
    assert_eq!(settler.given_up(), 0, "still trying in the background");
    // Paused time runs the backoff forward until the slot's TTL has passed.
    settler.drain().await;
    assert_eq!(settler.given_up(), 1);
}

async fn in_flight(ledger: &MemoryStore) -> u64 {
    ledger.snapshot(&[DeploymentId(0)]).await.unwrap()[0]
        .usage
        .in_flight
}

#[tokio::test(start_paused = true)]
async fn a_live_guard_keeps_its_slot_past_the_ttl_and_frees_it_when_dropped() {
    let registry = Registry::from_yaml_str(YAML, "guard.yaml").unwrap();
    let clock = ManualClock::new(1_800_000_000_000);
    let ledger = Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone())));
    let ttl = Duration::from_secs(3);
    let need = Need::new(10, ttl);
    let Ok(Admission::Granted(r)) = ledger.admit(&need, &[DeploymentId(0)]).await else {
        panic!("an empty ledger admits");
    };
    let price = registry.deployment(DeploymentId(0)).price.clone();
    let settler = Arc::new(Settler::new(ledger.clone()));
    let guard = Guard::new(settler, r, price, Accounting::AtArrival, ttl);
    for _ in 0..10 {
        clock.advance_ms(1_000);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        in_flight(&ledger).await,
        1,
        "renewed for 10 s past a 3 s TTL"
    );
    drop(guard);
    assert_eq!(in_flight(&ledger).await, 0);
    // A holder that died (no guard, no heartbeat): its slot expires with the TTL.
    let Ok(Admission::Granted(_dead)) = ledger.admit(&need.with_new_id(), &[DeploymentId(0)]).await
    else {
        panic!("the slot was freed");
    };
    clock.advance_ms(3_001);
    assert_eq!(in_flight(&ledger).await, 0);
}

#[tokio::test(start_paused = true)]
async fn one_task_keeps_every_live_slot_a_short_ttl_arriving_later_included() {
    let yaml = YAML.replace("concurrency: 1", "concurrency: 5");
    let registry = Registry::from_yaml_str(&yaml, "guard.yaml").unwrap();
    let clock = ManualClock::new(1_800_000_000_000);
    let ledger = Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone())));
    let price = registry.deployment(DeploymentId(0)).price.clone();
    let settler = Arc::new(Settler::new(ledger.clone()));
    let mut guards = Vec::new();
    // A long TTL first (the task then sleeps its longest), then a 1 s one, due much sooner.
    for ttl in [Duration::from_secs(600), Duration::from_secs(1)] {
        let need = Need::new(10, ttl);
        let Ok(Admission::Granted(r)) = ledger.admit(&need, &[DeploymentId(0)]).await else {
            panic!("an empty ledger admits");
        };
        guards.push(Guard::new(
            settler.clone(),
            r,
            price.clone(),
            Accounting::AtArrival,
            ttl,
        ));
        // Let the renewing task run and go to sleep before the next one arrives.
        clock.advance_ms(10);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..40 {
        clock.advance_ms(100);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        in_flight(&ledger).await,
        2,
        "both kept for 4 s, past the 1 s TTL"
    );
    drop(guards.pop());
    assert_eq!(in_flight(&ledger).await, 1);
}

#[tokio::test(start_paused = true)]
async fn the_renewing_task_ends_with_its_router_without_waiting_for_a_timer() {
    let registry = Registry::from_yaml_str(YAML, "guard.yaml").unwrap();
    let ledger = Arc::new(MemoryStore::new(&registry));
    let ttl = Duration::from_secs(600);
    let Ok(Admission::Granted(r)) = ledger.admit(&Need::new(10, ttl), &[DeploymentId(0)]).await
    else {
        panic!("an empty ledger admits");
    };
    let price = registry.deployment(DeploymentId(0)).price.clone();
    let settler = Arc::new(Settler::new(ledger.clone()));
    let guard = Guard::new(settler.clone(), r, price, Accounting::AtArrival, ttl);
    // The task starts and sleeps until the reservation is due, 200 s from now.
    tokio::task::yield_now().await;
    guard.release().await;
    drop(settler);
    // Time stands still: only the router going away can end the task (and free the ledger).
    for _ in 0..10 {
        if Arc::strong_count(&ledger) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(Arc::strong_count(&ledger), 1, "the background tasks ended");
}

#[tokio::test(start_paused = true)]
async fn a_caller_dropped_while_the_queue_is_full_leaves_nothing_for_drain_to_wait_for() {
    let registry = Registry::from_yaml_str(YAML, "guard.yaml").unwrap();
    let gate = tokio::sync::Semaphore::new(0);
    let ledger = Arc::new(Faulty(MemoryStore::new(&registry), Fault::Gated(gate)));
    let ttl = Duration::from_secs(600);
    let Ok(Admission::Granted(r)) = ledger.admit(&Need::new(10, ttl), &[DeploymentId(0)]).await
    else {
        panic!("an empty ledger admits");
    };
    let settler = Settler::new(ledger.clone());
    let owed = crate::settler::Owed {
        settlement: router_core::ledger::Settlement {
            reservation: r,
            actual: None,
            observed: None,
        },
        slot_ttl: ttl,
    };
    // The queue's task holds one batch at the gate; the queue fills behind it, and the next
    // caller waits for room until it is dropped.
    let mut queued = 0;
    while tokio::time::timeout(Duration::from_millis(10), settler.pay(owed.clone()))
        .await
        .is_ok()
    {
        queued += 1;
        assert!(queued <= 10_000, "the queue never filled");
    }
    assert!(queued > 4_000, "{queued} queued before it was full");
    let Fault::Gated(gate) = &ledger.1 else {
        unreachable!()
    };
    gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS);
    let drained = tokio::time::timeout(Duration::from_secs(60), settler.drain()).await;
    assert!(drained.is_ok(), "drain waits for a settlement no one holds");
    assert_eq!(settler.given_up(), 0);
}
