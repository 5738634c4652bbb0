//! Settlement on every path: a reservation held by a guard is settled exactly once, by the code
//! that knows what happened, or by the guard's `Drop` when the caller dropped the future or the
//! stream.

use std::sync::Arc;

use futures_util::FutureExt;
use router_core::config::DeploymentId;
use router_core::ledger::{ActualUsage, Ledger, Reservation};

/// Holds a reservation until it is settled or released.
#[derive(Debug)]
pub(crate) struct Guard {
    ledger: Arc<dyn Ledger>,
    reservation: Option<Reservation>,
}

impl Guard {
    pub(crate) fn new(ledger: Arc<dyn Ledger>, reservation: Reservation) -> Self {
        Self {
            ledger,
            reservation: Some(reservation),
        }
    }

    /// The deployment the reservation is on.
    pub(crate) fn deployment(&self) -> DeploymentId {
        self.reservation
            .as_ref()
            .map_or(DeploymentId(usize::MAX), |r| r.deployment)
    }

    /// The tokens reserved (the estimate).
    pub(crate) fn reserved_tokens(&self) -> u64 {
        self.reservation.as_ref().map_or(0, |r| r.tokens)
    }

    /// Settles with what the provider used. A ledger failure here is not the caller's problem:
    /// the answer is already paid for, and the slot comes back after its TTL.
    pub(crate) async fn settle(mut self, tokens: u64) {
        if let Some(r) = self.reservation.take() {
            let _ = self.ledger.settle(&r, ActualUsage { tokens }).await;
        }
    }

    /// Hands the reservation back: the request never reached the provider.
    pub(crate) async fn release(mut self) {
        if let Some(r) = self.reservation.take() {
            let _ = self.ledger.release(&r).await;
        }
    }
}

impl Drop for Guard {
    /// The caller dropped the request mid-way: whether the provider saw it is unknown, so the
    /// estimate stands and the slot is freed. Stores that answer at once (memory) settle right
    /// here; others finish in a background task (settling is idempotent, so a settle cut short
    /// by the drop and completed by the task is still counted once).
    fn drop(&mut self) {
        let Some(r) = self.reservation.take() else {
            return;
        };
        let ledger = self.ledger.clone();
        let mut settle = Box::pin(async move {
            let tokens = r.tokens;
            let _ = ledger.settle(&r, ActualUsage { tokens }).await;
        });
        if settle.as_mut().now_or_never().is_none()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(settle);
        }
    }
}
