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
//!
//! Here: the wrapper and admission; `calls.rs` the block calls and the corrections sent;
//! `ledger.rs` the [`Ledger`] operations.

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
            runtime.spawn(calls::keep_sending(Arc::downgrade(&ledger)));
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

mod calls;
mod ledger;

#[cfg(test)]
mod tests;
