//! Limited scopes: every deployment and every provider of a registry, with their limits.

use super::counts::PerDim;
use std::num::NonZeroU64;

use crate::config::{DeploymentId, Limits, Registry};
use crate::ledger::day::DayResets;
use crate::ledger::types::Scope;

/// One limited scope.
#[derive(Debug, Clone)]
pub(crate) struct ScopeDef {
    /// Stable name used in store keys: `d:<provider>/<model>` or `p:<provider>`.
    pub(crate) name: String,
    pub(crate) limits: Limits,
    /// Where the day of its `rpd` and `tpd` ends.
    pub(crate) resets: DayResets,
}

/// The scopes of a registry: deployments first (same index as their `DeploymentId`), then
/// providers. A deployment is limited by its own scope and, when its provider has provider-wide
/// limits, by its provider's. A provider without limits is not tracked at all: that saves half
/// the work of every admission.
#[derive(Debug, Clone)]
pub struct ScopeTable {
    scopes: Vec<ScopeDef>,
    by_deployment: Vec<Vec<usize>>,
    /// Per deployment, whether its windows count input and output tokens apart (see
    /// [`ScopeTable::counts_apart`]).
    apart: Vec<bool>,
}

/// One of `instances`' share of `limits`: each divided and rounded down. The second value says
/// whether some limit's share is zero (it is then 1 in the first, which the caller must not
/// admit against). A per-day limit counts as zero: what the day has used cannot be known
/// without the shared store, so no instance admits alone against it.
pub(crate) fn share_of(limits: Limits, instances: u64) -> (Limits, bool) {
    let n = instances.max(1);
    let mut zero = false;
    let mut part = |l: Option<NonZeroU64>| {
        l.map(|v| {
            NonZeroU64::new(v.get() / n).unwrap_or_else(|| {
                zero = true;
                NonZeroU64::MIN
            })
        })
    };
    let shared = Limits {
        rpm: part(limits.rpm),
        tpm: part(limits.tpm),
        itpm: part(limits.itpm),
        otpm: part(limits.otpm),
        concurrency: part(limits.concurrency),
        rpd: part(limits.rpd),
        tpd: part(limits.tpd),
    };
    (shared, zero || limits.per_day())
}

/// Which scope each position of [`ScopeTable::of`] is, in check order.
pub(crate) const SCOPE_ORDER: [Scope; 2] = [Scope::Deployment, Scope::Provider];

impl ScopeTable {
    /// Builds the table from a validated registry.
    pub fn new(registry: &Registry) -> Self {
        let n = registry.deployments.len();
        let mut scopes: Vec<ScopeDef> = registry
            .deployment_ids()
            .map(|id| ScopeDef {
                name: format!("d:{}", registry.deployment_name(id)),
                limits: registry.deployment(id).limits,
                resets: registry.deployment(id).day_resets.clone(),
            })
            .collect();
        scopes.extend(registry.providers.iter().map(|p| ScopeDef {
            name: format!("p:{}", p.name),
            limits: p.limits,
            resets: p.day_resets.clone(),
        }));
        let by_deployment: Vec<Vec<usize>> = registry
            .deployments
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let provider_limited = !registry.provider(d.provider).limits.is_unlimited();
                let mut scopes = vec![i];
                scopes.extend(provider_limited.then_some(n + d.provider.0));
                scopes
            })
            .collect();
        let apart = by_deployment
            .iter()
            .map(|of| {
                of.iter().any(|&s| {
                    let l = scopes[s].limits;
                    l.itpm.is_some() || l.otpm.is_some()
                })
            })
            .collect();
        Self {
            scopes,
            by_deployment,
            apart,
        }
    }

    /// The same scopes with every limit divided by `instances` and rounded down: one
    /// instance's share. The second value says, per scope, whether some limit's share is zero
    /// (the instance may admit nothing there).
    pub(crate) fn share(&self, instances: u64) -> (Self, Vec<bool>) {
        let mut zero = Vec::with_capacity(self.scopes.len());
        let scopes = self
            .scopes
            .iter()
            .map(|def| {
                let (limits, none_left) = share_of(def.limits, instances);
                zero.push(none_left);
                ScopeDef {
                    name: def.name.clone(),
                    limits,
                    resets: def.resets.clone(),
                }
            })
            .collect();
        let table = Self {
            scopes,
            by_deployment: self.by_deployment.clone(),
            apart: self.apart.clone(),
        };
        (table, zero)
    }

    /// Whether `d`'s windows (its own, its provider's, its requests' tenant's) count its input
    /// and output tokens apart from their sum: only when `d` or its provider has an `itpm` or
    /// `otpm` limit. Nothing else reads those counters, and keeping them costs every admission
    /// four more of them (a fifth of the admission script's work inside Redis).
    pub(crate) fn counts_apart(&self, d: DeploymentId) -> bool {
        self.apart.get(d.0).copied().unwrap_or(false)
    }

    /// `counts` (requests, tokens, input tokens, output tokens, or corrections of them) as
    /// `d`'s windows keep them: input and output are zero unless it counts them apart.
    pub(crate) fn kept<T: Copy + Default>(&self, d: DeploymentId, counts: PerDim<T>) -> PerDim<T> {
        if self.counts_apart(d) {
            counts
        } else {
            PerDim {
                input: T::default(),
                output: T::default(),
                ..counts
            }
        }
    }

    /// The scope indices limiting a deployment: `[deployment]` or `[deployment, provider]`.
    pub(crate) fn of(&self, d: DeploymentId) -> Option<&[usize]> {
        self.by_deployment.get(d.0).map(Vec::as_slice)
    }

    /// The limits of scope `scope`.
    pub(crate) fn limits(&self, scope: usize) -> Limits {
        self.scopes[scope].limits
    }

    pub(crate) fn def(&self, scope: usize) -> &ScopeDef {
        &self.scopes[scope]
    }

    /// Number of deployments (their scopes come first).
    pub(crate) fn deployments(&self) -> usize {
        self.by_deployment.len()
    }

    /// Number of scopes.
    pub(crate) fn len(&self) -> usize {
        self.scopes.len()
    }
}
