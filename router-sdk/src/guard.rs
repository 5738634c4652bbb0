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
}

pub(crate) use router_core::ledger::usd_to_micros as micros;

impl Guard {
    pub(crate) fn new(
        settler: Arc<Settler>,
        reservation: Reservation,
        price: Price,
        slot_ttl: Duration,
    ) -> Self {
        let estimate = ActualUsage {
            tokens: reservation.tokens,
            cost_micros: reservation.tenant.as_ref().map_or(0, |t| t.cost_micros),
        };
        Self {
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
