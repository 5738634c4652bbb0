//! Settlement on every path: a reservation held by a guard is settled exactly once, by the code
//! that knows what happened, or by the guard's `Drop` when the caller dropped the future or the
//! stream.

use std::sync::Arc;

use futures_util::FutureExt;
use router_core::config::{DeploymentId, Price};
use router_core::ledger::{ActualUsage, Ledger, Reservation};

use crate::types::Usage;

/// Holds a reservation until it is settled or released.
#[derive(Debug)]
pub(crate) struct Guard {
    ledger: Arc<dyn Ledger>,
    deployment: DeploymentId,
    price: Price,
    /// The estimate: what stands when the real usage is unknown.
    estimate: ActualUsage,
    /// `None` once settled or released.
    reservation: Option<Reservation>,
}

pub(crate) use router_core::ledger::usd_to_micros as micros;

impl Guard {
    pub(crate) fn new(ledger: Arc<dyn Ledger>, reservation: Reservation, price: Price) -> Self {
        let estimate = ActualUsage {
            tokens: reservation.tokens,
            cost_micros: reservation.tenant.as_ref().map_or(0, |t| t.cost_micros),
        };
        Self {
            ledger,
            deployment: reservation.deployment,
            price,
            estimate,
            reservation: Some(reservation),
        }
    }

    /// The deployment the reservation is on.
    pub(crate) fn deployment(&self) -> DeploymentId {
        self.deployment
    }

    /// Settles with what the provider reported it used. A ledger failure here is not the
    /// caller's problem: the answer is already paid for, and the slot comes back after its TTL.
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
        if let Some(r) = self.reservation.take() {
            let _ = self.ledger.settle(&r, actual).await;
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
        let (ledger, estimate) = (self.ledger.clone(), self.estimate);
        let mut settle = Box::pin(async move {
            let _ = ledger.settle(&r, estimate).await;
        });
        if settle.as_mut().now_or_never().is_none()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(settle);
        }
    }
}
