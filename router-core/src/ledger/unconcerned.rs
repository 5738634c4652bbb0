//! Requests no limit concerns, admitted without the store.
//!
//! A deployment whose own and provider's limits are all unset has nothing to count: an
//! admission there checks only its cooldown. When a request has no tenant or key account and
//! its first usable candidate is such a deployment, [`Unconcerned`] grants it here, and its
//! settlement, release and renewals cost nothing. Every other request goes to the store as
//! before, so what any limit counts is unchanged.
//!
//! Cooldowns are the one thing shared: this instance's own are known when it puts them, and
//! the others' from a snapshot of the free deployments read every [`COOLDOWNS_EVERY`] (off
//! any request's path), so a cooldown another instance puts is followed within that time. A
//! free deployment is not in the ledger's windows: a snapshot shows it no use.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::window::bucket_of;
use super::{
    ActualUsage, Admission, DeploymentSnapshot, Health, Need, Observation, Reservation, Settlement,
    TenantAsk, TenantCorrection, TenantLeased, TenantSnapshot, TenantSpec,
};
use super::{Ledger, LedgerError, LedgerFuture};
use crate::IdMap;
use crate::clock::Clock;
use crate::config::{DeploymentId, Registry};

/// How often the other instances' cooldowns of the free deployments are read.
pub const COOLDOWNS_EVERY: Duration = Duration::from_secs(1);

/// A ledger that admits requests no limit concerns itself, and passes the rest to `inner`.
pub struct Unconcerned {
    inner: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    /// The deployments nothing limits, in configuration order.
    free: Vec<DeploymentId>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Reservations admitted here and not yet settled or released.
    held: HashSet<u64>,
    /// Until when each free deployment cools down, as last known (ms, this clock).
    cooled: IdMap<DeploymentId, u64>,
}

impl std::fmt::Debug for Unconcerned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unconcerned")
            .field("inner", &self.inner)
            .field("free", &self.free)
            .finish_non_exhaustive()
    }
}

impl Unconcerned {
    /// `inner`, admitting here what no limit of `registry` concerns; `inner` itself when every
    /// deployment has a limit. Reads the free deployments' cooldowns on a task of the current
    /// runtime (none outside one: only this instance's own are then known).
    pub fn wrap(
        inner: Arc<dyn Ledger>,
        registry: &Registry,
        clock: Arc<dyn Clock>,
    ) -> Arc<dyn Ledger> {
        let free: Vec<DeploymentId> = registry
            .deployment_ids()
            .filter(|&d| {
                let deployment = registry.deployment(d);
                let provider = registry.provider(deployment.provider);
                deployment.limits.is_unlimited() && provider.limits.is_unlimited()
            })
            .collect();
        if free.is_empty() {
            return inner;
        }
        let ledger = Arc::new(Unconcerned {
            inner,
            clock,
            free,
            state: Mutex::default(),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(follow_cooldowns(Arc::downgrade(&ledger)));
        }
        ledger
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_free(&self, d: DeploymentId) -> bool {
        self.free.contains(&d)
    }

    /// Where `need` goes: the rank of the candidate granted here, or `None` for the store.
    /// The first candidate not known to cool down decides: a free one is granted here, any
    /// other sends the whole admission to the store, which takes the candidates in order.
    fn here(&self, need: &Need, candidates: &[DeploymentId], now: u64) -> Option<usize> {
        // A tenant's or key's account is counted; a request in a line leaves it in the store.
        if need.tenant.is_some() || need.line.is_some_and(|t| t.queued) {
            return None;
        }
        let state = self.state();
        for (rank, &d) in candidates.iter().enumerate() {
            if !self.is_free(d) {
                return None;
            }
            let cooling = state.cooled.get(&d).is_some_and(|&until| until > now);
            if !cooling {
                return Some(rank);
            }
        }
        // Every candidate cools down: the store says until when, and keeps the line.
        None
    }

    /// Records `snapshots`' cooldowns of the free deployments, read at `now`.
    fn saw(&self, snapshots: &[DeploymentSnapshot], now: u64) {
        let mut state = self.state();
        for s in snapshots.iter().filter(|s| self.is_free(s.deployment)) {
            let until = s.cooldown.map_or(0, |c| now + duration_ms(c));
            state.cooled.insert(s.deployment, until);
        }
    }

    /// Takes `id` out of the reservations held here; whether it was one.
    fn let_go(&self, id: u64) -> bool {
        self.state().held.remove(&id)
    }
}

/// Reads the free deployments' cooldowns every [`COOLDOWNS_EVERY`] while the ledger lives.
async fn follow_cooldowns(ledger: Weak<Unconcerned>) {
    let mut tick = tokio::time::interval(COOLDOWNS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(ledger) = ledger.upgrade() else {
            return;
        };
        // A store that does not answer leaves what was known; the next tick asks again.
        if let Ok(snapshots) = ledger.inner.snapshot(&ledger.free).await {
            ledger.saw(&snapshots, ledger.clock.now_ms());
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Ledger for Unconcerned {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        let now = self.clock.now_ms();
        let Some(rank) = self.here(need, candidates, now) else {
            return self.inner.admit(need, candidates);
        };
        let reservation = Reservation {
            id: need.id,
            deployment: candidates[rank],
            bucket: bucket_of(now),
            tokens: need.tokens_on(rank),
            input_tokens: need.input_on(rank),
            rank,
            tenant: None,
        };
        self.state().held.insert(reservation.id);
        Box::pin(std::future::ready(Ok(Admission::Granted(reservation))))
    }

    fn settle<'a>(
        &'a self,
        reservation: &'a Reservation,
        actual: ActualUsage,
    ) -> LedgerFuture<'a, bool> {
        if self.let_go(reservation.id) {
            return Box::pin(std::future::ready(Ok(true)));
        }
        self.inner.settle(reservation, actual)
    }

    fn release<'a>(&'a self, reservation: &'a Reservation) -> LedgerFuture<'a, bool> {
        if self.let_go(reservation.id) {
            return Box::pin(std::future::ready(Ok(true)));
        }
        self.inner.release(reservation)
    }

    fn renew<'a>(&'a self, reservation: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        let held = self.state().held.contains(&reservation.id);
        if held {
            return Box::pin(std::future::ready(Ok(true)));
        }
        self.inner.renew(reservation, ttl)
    }

    fn cooldown(
        &self,
        deployment: DeploymentId,
        for_how_long: Duration,
    ) -> LedgerFuture<'_, Duration> {
        async move {
            let now = self.clock.now_ms();
            if self.is_free(deployment) {
                // Known here at once, whatever the store answers.
                let until = now + duration_ms(for_how_long);
                let mut state = self.state();
                let known = state.cooled.entry(deployment).or_insert(0);
                *known = (*known).max(until);
            }
            let in_force = self.inner.cooldown(deployment, for_how_long).await?;
            if self.is_free(deployment) {
                let until = now + duration_ms(in_force);
                let mut state = self.state();
                let known = state.cooled.entry(deployment).or_insert(0);
                *known = (*known).max(until);
            }
            Ok(in_force)
        }
        .boxed()
    }

    fn observe(&self, deployment: DeploymentId, observation: Observation) -> LedgerFuture<'_, ()> {
        self.inner.observe(deployment, observation)
    }

    fn snapshot<'a>(
        &'a self,
        deployments: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        async move {
            let snapshots = self.inner.snapshot(deployments).await?;
            self.saw(&snapshots, self.clock.now_ms());
            Ok(snapshots)
        }
        .boxed()
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        self.inner.tenant_snapshot(tenant)
    }

    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        async move {
            // Those held here are settled here; their provider reports still go to the store.
            let mut out: Vec<Option<Result<bool, LedgerError>>> = Vec::with_capacity(batch.len());
            let mut rest = Vec::new();
            for s in batch {
                if self.let_go(s.reservation.id) {
                    let observed = match s.observed {
                        Some(obs) => self.inner.observe(s.reservation.deployment, obs).await,
                        None => Ok(()),
                    };
                    out.push(Some(observed.map(|()| true)));
                } else {
                    rest.push(s.clone());
                    out.push(None);
                }
            }
            // The store answers one result per settlement, in order (the trait's contract); one
            // it did not answer counts as not settled.
            let mut settled = self.inner.settle_batch(&rest).await.into_iter();
            out.into_iter()
                .map(|here| here.or_else(|| settled.next()).unwrap_or(Ok(false)))
                .collect()
        }
        .boxed()
    }

    fn leave<'a>(&'a self, ticket: u64, deployments: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        self.inner.leave(ticket, deployments)
    }

    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        self.inner.wakes()
    }

    fn health(&self) -> Option<Health> {
        self.inner.health()
    }

    fn lease_tenant<'a>(
        &'a self,
        spec: &'a TenantSpec,
        ask: TenantAsk,
        corrections: &'a [TenantCorrection],
        call: u64,
    ) -> LedgerFuture<'a, TenantLeased> {
        self.inner.lease_tenant(spec, ask, corrections, call)
    }

    fn close(&self) -> LedgerFuture<'_, ()> {
        self.inner.close()
    }

    fn remote(&self) -> bool {
        self.inner.remote()
    }

    fn settles_apart(&self) -> bool {
        self.inner.settles_apart()
    }

    fn settle_here(&self, s: &Settlement) -> Option<Result<bool, LedgerError>> {
        // A provider report needs the store: the batch sends it.
        if s.observed.is_none() && self.let_go(s.reservation.id) {
            return Some(Ok(true));
        }
        if self.state().held.contains(&s.reservation.id) {
            return None;
        }
        self.inner.settle_here(s)
    }
}

#[cfg(test)]
#[path = "unconcerned_tests.rs"]
mod tests;
