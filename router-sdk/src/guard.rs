//! Settlement on every path: a reservation held by a guard is settled exactly once, by the code
//! that knows what happened, or by the guard's `Drop` when the caller dropped the future or the
//! stream. A settlement or release the ledger fails to take is retried off the caller's path,
//! with backoff, until it lands or the reservation's slot would have expired anyway.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use futures_util::FutureExt;
use router_core::config::{DeploymentId, Price};
use router_core::ledger::{ActualUsage, Ledger, LedgerError, Reservation};
use tokio::sync::Notify;

use crate::types::Usage;

/// What is still owed to the ledger for one reservation.
#[derive(Debug, Clone)]
enum Owed {
    Settle(Reservation, ActualUsage),
    Release(Reservation),
}

impl Owed {
    fn reservation(&self) -> &Reservation {
        match self {
            Owed::Settle(r, _) | Owed::Release(r) => r,
        }
    }

    async fn pay(&self, ledger: &dyn Ledger) -> Result<bool, LedgerError> {
        match self {
            Owed::Settle(r, actual) => ledger.settle(r, *actual).await,
            Owed::Release(r) => ledger.release(r).await,
        }
    }
}

/// Hands settlements and releases to the ledger: at once on the caller's path, and when that
/// fails, again in the background with backoff. [`Settler::drain`] waits for the background.
#[derive(Debug)]
pub(crate) struct Settler {
    ledger: Arc<dyn Ledger>,
    /// Settlements running in the background.
    pending: AtomicUsize,
    drained: Notify,
    given_up: AtomicU64,
}

impl Settler {
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Self {
        Self {
            ledger,
            pending: AtomicUsize::new(0),
            drained: Notify::new(),
            given_up: AtomicU64::new(0),
        }
    }

    /// Waits until every settlement handed to the background has landed or been given up.
    pub(crate) async fn drain(&self) {
        loop {
            let drained = self.drained.notified();
            if self.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            drained.await;
        }
    }

    /// Settlements given up since the router was built (the ledger refused them until their slot
    /// would have expired).
    pub(crate) fn given_up(&self) -> u64 {
        self.given_up.load(Ordering::Relaxed)
    }

    /// Pays `owed` now; if the ledger fails, keeps trying in the background.
    async fn pay(self: &Arc<Self>, owed: Owed, slot_ttl: Duration) {
        if let Err(e) = owed.pay(&*self.ledger).await {
            tracing::warn!(
                reservation = owed.reservation().id,
                error = %e,
                "ledger refused a settlement; retrying it in the background"
            );
            self.retry_in_background(owed, slot_ttl);
        }
    }

    /// Retries `owed` on a task until it lands or `slot_ttl` has passed (the slot has expired by
    /// then and the ledger no longer counts it in flight).
    fn retry_in_background(self: &Arc<Self>, owed: Owed, slot_ttl: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.give_up(&owed, "no async runtime to retry on");
            return;
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        let settler = self.clone();
        runtime.spawn(async move {
            let backoff = ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(50))
                .with_max_delay(Duration::from_secs(5))
                .with_jitter()
                .without_max_times()
                .with_total_delay(Some(slot_ttl));
            let ledger = settler.ledger.clone();
            let result = (|| owed.pay(&*ledger)).retry(backoff).await;
            if let Err(e) = result {
                settler.give_up(&owed, &e.to_string());
            }
            if settler.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                settler.drained.notify_waiters();
            }
        });
    }

    fn give_up(&self, owed: &Owed, why: &str) {
        self.given_up.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            reservation = owed.reservation().id,
            error = why,
            "gave up a settlement: its slot expires with its TTL"
        );
    }
}

/// Keeps a live request's slot held: renews it every third of its TTL until dropped, so a long
/// request (a slow stream, a long deadline) never loses its slot while its holder lives, and a
/// crashed holder's slot still expires within the TTL.
#[derive(Debug)]
struct Heartbeat(tokio::task::AbortHandle);

impl Heartbeat {
    fn start(ledger: Arc<dyn Ledger>, reservation: Reservation, ttl: Duration) -> Option<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let every = (ttl / 3).max(Duration::from_millis(100));
        let task = runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match ledger.renew(&reservation, ttl).await {
                    Ok(true) => {}
                    // Settled, released, or expired: nothing left to keep.
                    Ok(false) => return,
                    Err(e) => tracing::warn!(
                        reservation = reservation.id,
                        error = %e,
                        "could not renew a slot; trying again at the next beat"
                    ),
                }
            }
        });
        Some(Self(task.abort_handle()))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Holds a reservation until it is settled or released.
#[derive(Debug)]
pub(crate) struct Guard {
    settler: Arc<Settler>,
    deployment: DeploymentId,
    price: Price,
    slot_ttl: Duration,
    /// The estimate: what stands when the real usage is unknown.
    estimate: ActualUsage,
    /// `None` once settled or released.
    reservation: Option<Reservation>,
    /// Whether the reservation is being handed back rather than settled.
    releasing: bool,
    /// Renews the slot while the guard lives.
    _heartbeat: Option<Heartbeat>,
}

pub(crate) use router_core::ledger::usd_to_micros as micros;

impl Guard {
    pub(crate) fn new(
        settler: Arc<Settler>,
        reservation: Reservation,
        price: Price,
        slot_ttl: Duration,
    ) -> Self {
        // The estimate settles the split it reserved: input against ITPM, the rest against OTPM.
        let estimate = ActualUsage {
            tokens: reservation.tokens,
            input_tokens: reservation.input_tokens,
            cost_micros: reservation.tenant.as_ref().map_or(0, |t| t.cost_micros),
        };
        let heartbeat = Heartbeat::start(settler.ledger.clone(), reservation.clone(), slot_ttl);
        Self {
            _heartbeat: heartbeat,
            settler,
            deployment: reservation.deployment,
            price,
            slot_ttl,
            estimate,
            reservation: Some(reservation),
            releasing: false,
        }
    }

    /// The deployment the reservation is on.
    pub(crate) fn deployment(&self) -> DeploymentId {
        self.deployment
    }

    /// Settles with what the provider reported it used.
    pub(crate) async fn settle(self, usage: Usage) {
        let cost = micros(
            self.price
                .cost(usage.prompt_tokens, usage.completion_tokens),
        );
        self.finish(ActualUsage {
            tokens: usage.total_tokens(),
            input_tokens: usage.prompt_tokens,
            cost_micros: cost,
        })
        .await;
    }

    /// Settles with the estimate: whether and how much the provider spent is unknown.
    pub(crate) async fn settle_estimate(self) {
        let estimate = self.estimate;
        self.finish(estimate).await;
    }

    /// Settles a request the provider saw and refused: its request count stands, nothing else.
    pub(crate) async fn refused(self) {
        self.finish(ActualUsage::default()).await;
    }

    async fn finish(mut self, actual: ActualUsage) {
        // Should the caller drop this future mid-way, `Drop` settles with what is known now.
        self.estimate = actual;
        if let Some(r) = self.reservation.clone() {
            self.settler
                .pay(Owed::Settle(r, actual), self.slot_ttl)
                .await;
            self.reservation = None;
        }
    }

    /// Hands the reservation back: the request never reached the provider.
    pub(crate) async fn release(mut self) {
        self.releasing = true;
        if let Some(r) = self.reservation.clone() {
            self.settler.pay(Owed::Release(r), self.slot_ttl).await;
            self.reservation = None;
        }
    }
}

impl Drop for Guard {
    /// The caller dropped the request mid-way: whether the provider saw it is unknown, so the
    /// estimate stands (or, when a settlement or release was under way, that one is completed)
    /// and the slot is freed. Stores that answer at once (memory, SQLite) settle
    /// right here; others finish in the background, where [`Settler::drain`] can wait for them
    /// (settling is idempotent, so a settle cut short by the drop and completed by the task is
    /// still counted once).
    fn drop(&mut self) {
        let Some(r) = self.reservation.take() else {
            return;
        };
        let owed = if self.releasing {
            Owed::Release(r)
        } else {
            Owed::Settle(r, self.estimate)
        };
        let ledger = self.settler.ledger.clone();
        let now = {
            let owed = owed.clone();
            async move { owed.pay(&*ledger).await }
        }
        .now_or_never();
        match now {
            Some(Ok(_)) => {}
            Some(Err(_)) | None => self.settler.retry_in_background(owed, self.slot_ttl),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use router_core::clock::ManualClock;
    use router_core::config::Registry;
    use router_core::ledger::{Admission, MemoryStore, Need};

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
        let price = registry.deployment(DeploymentId(0)).price;
        let settler = Arc::new(Settler::new(ledger.clone()));
        let guard = Guard::new(settler, r, price, ttl);
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
        let Ok(Admission::Granted(_dead)) =
            ledger.admit(&need.with_new_id(), &[DeploymentId(0)]).await
        else {
            panic!("the slot was freed");
        };
        clock.advance_ms(3_001);
        assert_eq!(in_flight(&ledger).await, 0);
    }
}
