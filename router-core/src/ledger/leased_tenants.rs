//! Tenants admitted from leased blocks of their limits and budgets (`lease: auto` on a tier).
//!
//! [`LeasedTenants`] wraps the shared store. A request whose only account is the tenant of a
//! leasing tier takes its tenant's part (a request, its tokens, its estimated cost: the largest
//! of its candidates', until its deployment is chosen) from this instance's block of that
//! tenant, and only its deployments' part goes on to the store, which may admit it from a
//! deployment's own block or with no call at all. The block is asked for in one call when the
//! tenant has none that admits (see `tenant_leases`); if the store refuses it, or does not admit
//! through the shared windows now, the request is admitted exactly, tenant included.
//!
//! Settling such a request is local for the tenant's part: what it used beyond (or short of)
//! what it reserved is owed, and sent with the tenant's next block call, or by a task here
//! within a second. A block call whose answer was lost is sent again under its id, so that it
//! counts once. Batch requests, requests waiting in a line, and requests with a key account of
//! their own are admitted exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::period::periods;
use super::tenant_leases::{
    Amounts, Blocks, TenantAsk, TenantCorrection, TenantLeased, Unanswered,
};
use super::types::{Scope, TenantHold};
use super::window::BUCKET_MS;
use super::{
    ActualUsage, Admission, BudgetMicros, DeploymentSnapshot, Health, Ledger, LedgerError,
    LedgerFuture, Need, Observation, Reservation, Settlement, TenantSnapshot, TenantSpec,
};
use crate::clock::Clock;
use crate::config::{DeploymentId, Limits, Registry};

/// How often the corrections owed are sent when no block call carries them.
pub const SEND_OWED_EVERY: Duration = Duration::from_secs(1);

/// How many locks the block calls are spread over (one call at a time per tenant).
const ASKING_LOCKS: usize = 16;

/// A ledger that admits the tenants of leasing tiers from blocks, and passes the rest to
/// `inner`.
pub struct LeasedTenants {
    inner: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    /// The limits of each leasing tenant's tier, by tenant name, and those of the default
    /// tier when it leases.
    members: HashMap<String, Option<Limits>>,
    default: Option<Limits>,
    blocks: Mutex<Blocks>,
    asking: [tokio::sync::Mutex<()>; ASKING_LOCKS],
}

impl std::fmt::Debug for LeasedTenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedTenants")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl LeasedTenants {
    /// `inner`, admitting the tenants of the tiers with `lease: auto` from blocks; `inner`
    /// itself when no tier leases or `inner` is an in-process store (no call to save). Sends
    /// what is owed from a task of the current runtime.
    pub fn wrap(
        inner: Arc<dyn Ledger>,
        registry: &Registry,
        clock: Arc<dyn Clock>,
    ) -> Arc<dyn Ledger> {
        let tenants = &registry.tenants;
        if !tenants.tiers.iter().any(|t| t.lease) || !inner.remote() {
            return inner;
        }
        let leases = |tier: &str| tenants.tier(tier).filter(|t| t.lease).map(|t| t.limits);
        let members = tenants
            .members
            .iter()
            .map(|(tenant, tier)| (tenant.clone(), leases(tier)))
            .collect();
        let default = tenants.default_tier.as_deref().and_then(leases);
        let ledger = Arc::new(LeasedTenants {
            inner,
            clock,
            members,
            default,
            blocks: Mutex::default(),
            asking: std::array::from_fn(|_| tokio::sync::Mutex::new(())),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(keep_sending(Arc::downgrade(&ledger)));
        }
        ledger
    }

    fn blocks(&self) -> MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The lock of `tenant`'s block calls.
    fn asking(&self, tenant: &str) -> &tokio::sync::Mutex<()> {
        let hash = tenant
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        &self.asking[hash % ASKING_LOCKS]
    }

    /// The tenant `need` takes from a block: its only account, of a leasing tier (with that
    /// tier's limits), for an interactive request not standing in a line.
    fn leasing<'n>(&self, need: &'n Need) -> Option<&'n TenantSpec> {
        let [spec] = need.tenant.as_ref()?.specs.as_slice() else {
            return None;
        };
        if need.share_percent < 100 || need.line.is_some_and(|t| t.queued) {
            return None;
        }
        if spec.scope() != Scope::Tenant {
            return None;
        }
        let limits = match self.members.get(&spec.name) {
            Some(tier) => (*tier)?,
            None => self.default?,
        };
        (limits == spec.limits).then_some(spec)
    }

    /// Admits `need` with its tenant's part from a block: `None` when no block has room for
    /// it (the caller admits exactly).
    async fn admit_leased(
        &self,
        spec: &TenantSpec,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Option<Result<Admission, LedgerError>> {
        let most = largest(need, candidates.len());
        let now = self.now();
        let name = spec.name.as_str();
        let taken = {
            let mut blocks = self.blocks();
            if blocks.exact_for_now(name, now) {
                return None;
            }
            blocks.take(name, need.id, most, now)
        };
        let bucket = match taken {
            Some(bucket) => bucket,
            None => self.ask_block(spec, need.id, most).await?,
        };
        let mut undo = Undo {
            blocks: &self.blocks,
            id: need.id,
            armed: true,
        };
        let deployments = Need {
            tenant: None,
            ..need.clone()
        };
        let admitted = self.inner.admit(&deployments, candidates).await;
        let Ok(Admission::Granted(mut r)) = admitted else {
            return Some(admitted);
        };
        undo.armed = false;
        let cost = cost_on(need, r.rank);
        let held = Amounts {
            requests: 1,
            tokens: need.tokens_on(r.rank),
            micros: cost,
        };
        let window = {
            let mut blocks = self.blocks();
            blocks.resize(need.id, held);
            blocks.window(name)
        };
        let p = periods(bucket * BUCKET_MS);
        r.tenant = Some(TenantHold {
            names: vec![spec.name.clone()],
            cost_micros: cost,
            day: p.day,
            month: p.month,
            // The grant's reading, the whole block counted: rate-limit headers need no call.
            windows: window.into_iter().collect(),
        });
        Some(Ok(Admission::Granted(r)))
    }

    /// Asks for a block of `spec`'s tenant (one call at a time per tenant), carrying what it
    /// owes, and takes `most` from it for request `id`: the second it counts in, or `None`
    /// when none was granted.
    async fn ask_block(&self, spec: &TenantSpec, id: u64, most: Amounts) -> Option<u64> {
        let name = spec.name.as_str();
        let _one = self.asking(name).lock().await;
        // A call made while this request waited may have opened a block.
        if let Some(bucket) = self.blocks().take(name, id, most, self.now()) {
            return Some(bucket);
        }
        let instances = self.inner.health().map_or(1, |h| h.instances);
        let (ask, carried) = {
            let mut blocks = self.blocks();
            blocks.end(name);
            let ask = blocks.ask(name, most, instances, self.now());
            (ask, blocks.take_owed(name))
        };
        let sent = self.now();
        match self.send(spec, ask, carried, fastrand::u64(..)).await? {
            TenantLeased::Granted {
                amounts,
                bucket,
                store_now,
                window,
            } => {
                let mut blocks = self.blocks();
                blocks.open(name, amounts, bucket, window, (store_now, sent));
                blocks.take_asked(name, id, most, self.now())
            }
            TenantLeased::Refused => {
                self.blocks().refused(name, self.now());
                None
            }
            TenantLeased::Unavailable => None,
        }
    }

    /// Sends one block call carrying `carried`. `None`: it failed; what it carried is owed
    /// again when the store surely did not apply it, or sent again under `call` when it may
    /// have (as it is when this future is dropped unanswered). Not sent (`Unavailable`), what it
    /// carried is owed again.
    async fn send(
        &self,
        spec: &TenantSpec,
        ask: TenantAsk,
        carried: Vec<TenantCorrection>,
        call: u64,
    ) -> Option<TenantLeased> {
        let mut pending = Pending {
            blocks: &self.blocks,
            call: Some(Unanswered {
                tenant: spec.name.clone(),
                call,
                carried,
                sent: self.now(),
            }),
        };
        let carried = pending.carried();
        let answer = self.inner.lease_tenant(spec, ask, &carried, call).await;
        let unanswered = pending.call.take()?;
        match answer {
            Ok(TenantLeased::Unavailable) => {
                self.blocks().owe_again(&spec.name, &unanswered.carried);
                Some(TenantLeased::Unavailable)
            }
            Ok(leased) => Some(leased),
            // The store lost its windows since: nothing of theirs is left to correct.
            Err(LedgerError::Lost { .. }) => None,
            Err(e) if e.not_applied() => {
                self.blocks().owe_again(&spec.name, &unanswered.carried);
                None
            }
            Err(e) => {
                if e.maybe_applied() {
                    self.blocks().unanswered(unanswered);
                }
                tracing::debug!(error = %e, "ledger: a tenant block call failed; admitting exactly");
                None
            }
        }
    }

    /// Sends again the calls that got no answer, then what the tenants owe (the blocks whose
    /// second is over end first).
    async fn send_owed(&self) {
        // Calls sent again first: what they granted is then owed, and goes below.
        let unanswered = self.blocks().take_unanswered(self.now());
        for u in unanswered {
            self.send_again(u).await;
        }
        let owing = {
            let mut blocks = self.blocks();
            blocks.end_expired(self.now());
            blocks.owing()
        };
        for tenant in owing {
            let _one = self.asking(&tenant).lock().await;
            let carried = self.blocks().take_owed(&tenant);
            if !carried.is_empty() {
                let spec = bare(&tenant);
                self.send(&spec, TenantAsk::NOTHING, carried, fastrand::u64(..))
                    .await;
            }
        }
    }

    /// Sends call `u` again under its id, asking for no block: it answers as it ran (what it
    /// granted is given back) or runs now.
    async fn send_again(&self, u: Unanswered) {
        let _one = self.asking(&u.tenant).lock().await;
        let spec = bare(&u.tenant);
        let answer = self
            .inner
            .lease_tenant(&spec, TenantAsk::NOTHING, &u.carried, u.call)
            .await;
        let mut blocks = self.blocks();
        match answer {
            Ok(TenantLeased::Granted {
                amounts, bucket, ..
            }) => blocks.answered_late(&u.tenant, Some((amounts, bucket))),
            Ok(TenantLeased::Refused) | Err(LedgerError::Lost { .. }) => {}
            Ok(TenantLeased::Unavailable) | Err(_) => blocks.unanswered(u),
        }
    }
}

/// A request's tenant part before its deployment is chosen: the largest estimate and cost of
/// its candidates.
fn largest(need: &Need, candidates: usize) -> Amounts {
    let (tokens, micros) = (0..candidates.max(1)).fold((0, 0), |(t, m), rank| {
        (t.max(need.tokens_on(rank)), m.max(cost_on(need, rank)))
    });
    Amounts {
        requests: 1,
        tokens,
        micros,
    }
}

fn cost_on(need: &Need, rank: usize) -> u64 {
    need.tenant
        .as_ref()
        .and_then(|t| t.costs.get(rank).copied())
        .unwrap_or(0)
}

/// A tenant named `name`, for a call that only carries corrections.
fn bare(name: &str) -> TenantSpec {
    TenantSpec {
        name: name.to_owned(),
        limits: Limits::default(),
        budget: BudgetMicros::default(),
    }
}

/// `r` without its tenant's part (held here).
fn deployments_part(r: &Reservation) -> Reservation {
    Reservation {
        id: r.id,
        deployment: r.deployment,
        bucket: r.bucket,
        tokens: r.tokens,
        input_tokens: r.input_tokens,
        rank: r.rank,
        tenant: None,
    }
}

fn used(actual: ActualUsage) -> Amounts {
    Amounts {
        requests: 1,
        tokens: actual.tokens,
        micros: actual.cost_micros,
    }
}

/// Gives back what a request took from a block if its admission is dropped or denied.
struct Undo<'a> {
    blocks: &'a Mutex<Blocks>,
    id: u64,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
            blocks.finish(self.id, None);
        }
    }
}

/// A block call out: dropped before its answer, it is kept to be sent again.
struct Pending<'a> {
    blocks: &'a Mutex<Blocks>,
    call: Option<Unanswered>,
}

impl Pending<'_> {
    fn carried(&self) -> Vec<TenantCorrection> {
        self.call
            .as_ref()
            .map_or_else(Vec::new, |u| u.carried.clone())
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(u) = self.call.take() {
            let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
            blocks.unanswered(u);
        }
    }
}

/// Sends what is owed every [`SEND_OWED_EVERY`] while the ledger lives.
async fn keep_sending(ledger: Weak<LeasedTenants>) {
    let mut tick = tokio::time::interval(SEND_OWED_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(ledger) = ledger.upgrade() else {
            return;
        };
        ledger.send_owed().await;
    }
}

impl Ledger for LeasedTenants {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        let Some(spec) = self.leasing(need) else {
            return self.inner.admit(need, candidates);
        };
        async move {
            match self.admit_leased(spec, need, candidates).await {
                Some(admitted) => admitted,
                None => self.inner.admit(need, candidates).await,
            }
        }
        .boxed()
    }

    fn settle<'a>(
        &'a self,
        reservation: &'a Reservation,
        actual: ActualUsage,
    ) -> LedgerFuture<'a, bool> {
        if !self.blocks().finish(reservation.id, Some(used(actual))) {
            return self.inner.settle(reservation, actual);
        }
        let part = deployments_part(reservation);
        async move { self.inner.settle(&part, actual).await }.boxed()
    }

    fn release<'a>(&'a self, reservation: &'a Reservation) -> LedgerFuture<'a, bool> {
        if !self.blocks().finish(reservation.id, None) {
            return self.inner.release(reservation);
        }
        let part = deployments_part(reservation);
        async move { self.inner.release(&part).await }.boxed()
    }

    fn renew<'a>(&'a self, reservation: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        if !self.blocks().holds(reservation.id) {
            return self.inner.renew(reservation, ttl);
        }
        let part = deployments_part(reservation);
        async move { self.inner.renew(&part, ttl).await }.boxed()
    }

    fn cooldown(
        &self,
        deployment: DeploymentId,
        for_how_long: Duration,
    ) -> LedgerFuture<'_, Duration> {
        self.inner.cooldown(deployment, for_how_long)
    }

    fn observe(&self, deployment: DeploymentId, observation: Observation) -> LedgerFuture<'_, ()> {
        self.inner.observe(deployment, observation)
    }

    fn snapshot<'a>(
        &'a self,
        deployments: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        self.inner.snapshot(deployments)
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        self.inner.tenant_snapshot(tenant)
    }

    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        let held = |s: &Settlement| self.blocks().holds(s.reservation.id);
        if !batch.iter().any(held) {
            return self.inner.settle_batch(batch);
        }
        let parts: Vec<Settlement> = batch
            .iter()
            .map(|s| {
                let mine = self.blocks().finish(s.reservation.id, s.actual.map(used));
                if !mine {
                    return s.clone();
                }
                Settlement {
                    reservation: deployments_part(&s.reservation),
                    actual: s.actual,
                    observed: s.observed,
                }
            })
            .collect();
        async move { self.inner.settle_batch(&parts).await }.boxed()
    }

    fn leave<'a>(&'a self, ticket: u64, deployments: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        self.inner.leave(ticket, deployments)
    }

    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        self.inner.wakes()
    }

    fn health(&self) -> Option<Health> {
        self.inner.health().map(|mut h| {
            h.tenant_leased_in_flight = self.blocks().in_flight() as u64;
            h
        })
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

    /// Ends every block and sends what is owed, then closes the store.
    fn close(&self) -> LedgerFuture<'_, ()> {
        async move {
            self.blocks().end_all();
            self.send_owed().await;
            self.inner.close().await
        }
        .boxed()
    }

    fn remote(&self) -> bool {
        self.inner.remote()
    }

    fn settles_apart(&self) -> bool {
        self.inner.settles_apart()
    }

    fn settle_here(&self, s: &Settlement) -> Option<Result<bool, LedgerError>> {
        if !self.blocks().holds(s.reservation.id) {
            return self.inner.settle_here(s);
        }
        let part = Settlement {
            reservation: deployments_part(&s.reservation),
            actual: s.actual,
            observed: s.observed,
        };
        let done = self.inner.settle_here(&part)?;
        self.blocks().finish(s.reservation.id, s.actual.map(used));
        Some(done)
    }
}

#[cfg(test)]
#[path = "leased_tenants_tests.rs"]
mod tests;
