//! Settlements and releases handed to the ledger: at once on the caller's path, and when the
//! ledger fails, again in the background with backoff until they land or the reservation's slot
//! would have expired anyway; [`Settler::drain`] waits for the background.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use router_core::ledger::{ActualUsage, Ledger, LedgerError, Reservation};
use tokio::sync::Notify;

/// What is still owed to the ledger for one reservation.
#[derive(Debug, Clone)]
pub(crate) enum Owed {
    Settle(Reservation, ActualUsage),
    Release(Reservation),
}

impl Owed {
    fn reservation(&self) -> &Reservation {
        match self {
            Owed::Settle(r, _) | Owed::Release(r) => r,
        }
    }

    pub(crate) async fn pay(&self, ledger: &dyn Ledger) -> Result<bool, LedgerError> {
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
    pub(crate) ledger: Arc<dyn Ledger>,
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
    pub(crate) async fn pay(self: &Arc<Self>, owed: Owed, slot_ttl: Duration) {
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
    pub(crate) fn retry_in_background(self: &Arc<Self>, owed: Owed, slot_ttl: Duration) {
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
