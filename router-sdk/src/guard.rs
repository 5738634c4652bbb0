//! Settlement on every path: a reservation held by a guard is settled exactly once, by the code
//! that knows what happened, or by the guard's `Drop` when the caller dropped the future or the
//! stream. The settlement carries the provider's rate-limit report when there is one to follow,
//! and the [`Settler`] sends it (off the caller's path for Redis and the embedded store).

use std::sync::Arc;
use std::time::Duration;

use router_core::config::{DeploymentId, Price};
use router_core::estimate::Accounting;
use router_core::ledger::{ActualUsage, Observation, Reservation, Settlement, WindowUse};

use crate::settler::{Owed, Settler};
use crate::types::Usage;

/// Holds a reservation until it is settled or released.
#[derive(Debug)]
pub(crate) struct Guard {
    settler: Arc<Settler>,
    deployment: DeploymentId,
    price: Price,
    /// How the provider counts, so what stays counted once the usage is known.
    accounting: Accounting,
    slot_ttl: Duration,
    /// The estimate: what stands when the real usage is unknown.
    estimate: ActualUsage,
    /// `None` once settled or released.
    reservation: Option<Reservation>,
    /// Whether the reservation is being handed back rather than settled.
    releasing: bool,
    /// The provider's rate-limit report to follow with the settlement.
    observed: Option<Observation>,
}

pub(crate) use router_core::ledger::usd_to_micros as micros;

impl Guard {
    pub(crate) fn new(
        settler: Arc<Settler>,
        reservation: Reservation,
        price: Price,
        accounting: Accounting,
        slot_ttl: Duration,
    ) -> Self {
        // The estimate settles the split it reserved: input against ITPM, the rest against OTPM.
        let estimate = ActualUsage {
            tokens: reservation.tokens,
            input_tokens: reservation.input_tokens,
            cost_micros: reservation.tenant.as_ref().map_or(0, |t| t.cost_micros),
        };
        // Renewed while the guard holds it, every third of its TTL.
        settler.renewals.hold(&reservation, slot_ttl);
        Self {
            settler,
            deployment: reservation.deployment,
            price,
            accounting,
            slot_ttl,
            estimate,
            reservation: Some(reservation),
            releasing: false,
            observed: None,
        }
    }

    /// Sends `observed` (the provider's latest report on this deployment) with the settlement;
    /// `None` keeps the report already held.
    pub(crate) fn reporting(mut self, observed: Option<Observation>) -> Self {
        self.observed = observed.or(self.observed);
        self
    }

    /// The deployment the reservation is on.
    pub(crate) fn deployment(&self) -> DeploymentId {
        self.deployment
    }

    /// The tenant's window as the admission left it, when the admission counted there.
    pub(crate) fn tenant_window(&self) -> Option<WindowUse> {
        self.reservation.as_ref()?.tenant.as_ref()?.tenant_window()
    }

    /// What `usage` costs at the deployment's price, micro-USD: what [`Guard::settle`] charges.
    pub(crate) fn cost_of(&self, usage: &Usage) -> u64 {
        micros(usage.cost(&self.price))
    }

    /// The tokens the estimate stands for (what was reserved: the counted prompt, and the rest
    /// as output): what [`Guard::settle_estimate`] keeps counted.
    pub(crate) fn estimate_usage(&self) -> Usage {
        Usage::new(
            self.estimate.input_tokens,
            self.estimate
                .tokens
                .saturating_sub(self.estimate.input_tokens),
        )
    }

    /// Settles with what the provider reported it used: the window keeps what its limiter
    /// counted (an Anthropic prompt's cache reads left out, see [`Accounting::counted_prompt`]),
    /// the tenant's budget gets the real cost of all of it ([`Guard::cost_of`]).
    pub(crate) async fn settle(self, usage: Usage) {
        let cached = usage.cached_prompt_tokens;
        let prompt = self.accounting.counted_prompt(usage.prompt_tokens, cached);
        let completion = usage.completion_tokens;
        let cost = self.cost_of(&usage);
        let actual = match &self.reservation {
            Some(r) => self.accounting.settlement(r, prompt, completion, cost),
            None => return,
        };
        self.finish(actual).await;
    }

    /// Settles with the estimate ([`Guard::estimate_micros`]): whether and how much the
    /// provider spent is unknown.
    pub(crate) async fn settle_estimate(self) {
        let estimate = self.estimate;
        self.finish(estimate).await;
    }

    /// What the estimate costs, micro-USD: what a tenant's budget is charged, else the
    /// reserved tokens at the deployment's price.
    pub(crate) fn estimate_micros(&self) -> u64 {
        match self.reservation.as_ref() {
            Some(r) if r.tenant.is_none() => {
                let output = r.tokens.saturating_sub(r.input_tokens);
                micros(self.price.cost_cached(r.input_tokens, 0, output))
            }
            _ => self.estimate.cost_micros,
        }
    }

    /// Settles a request the provider saw and refused: its request count stands, nothing else.
    pub(crate) async fn refused(self) {
        self.finish(ActualUsage::default()).await;
    }

    async fn finish(mut self, actual: ActualUsage) {
        // Should the caller drop this future mid-way, `Drop` settles with what is known now.
        self.estimate = actual;
        if let Some(owed) = self.owed() {
            self.settler.pay(owed).await;
            self.reservation = None;
        }
    }

    /// Hands the reservation back: the request never reached the provider.
    pub(crate) async fn release(mut self) {
        self.releasing = true;
        if let Some(owed) = self.owed() {
            self.settler.pay(owed).await;
            self.reservation = None;
        }
    }

    /// What is owed for the reservation as things stand (`None` once paid); it is no longer
    /// renewed from here on.
    fn owed(&self) -> Option<Owed> {
        let reservation = self.reservation.clone()?;
        self.settler.renewals.drop_held(reservation.id);
        let actual = (!self.releasing).then_some(self.estimate);
        Some(Owed {
            settlement: Settlement {
                reservation,
                actual,
                observed: self.observed,
            },
            slot_ttl: self.slot_ttl,
        })
    }
}

impl Drop for Guard {
    /// The caller dropped the request mid-way: whether the provider saw it is unknown, so the
    /// estimate stands (or, when a settlement or release was under way, that one is completed)
    /// and the slot is freed. The memory store settles right here; the others (Redis, the
    /// embedded file) finish in the background, where [`Settler::drain`] can wait for them
    /// (settling is idempotent, so a settle cut short by the drop and completed by the task is
    /// still counted once).
    fn drop(&mut self) {
        if let Some(owed) = self.owed() {
            self.reservation = None;
            self.settler.pay_soon(owed);
        }
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
