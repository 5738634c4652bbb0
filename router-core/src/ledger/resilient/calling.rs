//! What a call to the shared store may count while its answer is out: a local ledger started
//! meanwhile counts it as admitted.

use super::*;

/// A call to the shared store that may admit (a request, or a leased block), from when it is
/// sent until its reply is handled. Should the instance go local meanwhile, its local ledger
/// counts the call as admitted on every deployment it may be admitted on: its reply may come
/// after the reading local mode starts from, and no other count of this instance has it yet.
#[derive(Debug, Clone)]
pub(super) struct Calling {
    /// The request's reservation id (0 for a block: it holds no slot).
    pub(super) id: u64,
    /// What it may count, on each deployment it may be admitted on.
    pub(super) on: Vec<(DeploymentId, Counts)>,
    /// Its accounts (the tenant's, the key's), and the most it may count and cost there.
    pub(super) tenant: Option<TenantMost>,
    /// Its slot's expiry, ms.
    pub(super) expiry: u64,
}

/// The most a call may count and cost on each of its accounts, whichever candidate admits it.
#[derive(Debug, Clone)]
pub(super) struct TenantMost {
    pub(super) names: Vec<String>,
    pub(super) counts: Counts,
    pub(super) cost_micros: u64,
}

impl Calling {
    /// A request's admission on `candidates`, sent at `now`.
    pub(super) fn request(need: &Need, candidates: &[DeploymentId], now: u64) -> Self {
        let counts = |rank: usize| {
            Counts::new(
                1,
                need.tokens_on(rank),
                need.input_on(rank),
                need.output_on(rank),
            )
        };
        let on = candidates
            .iter()
            .enumerate()
            .map(|(rank, &d)| (d, counts(rank)))
            .collect();
        let tenant = need.tenant.as_ref().map(|t| {
            let mut most = Counts::new(1, 0, 0, 0);
            let mut cost = 0;
            for rank in 0..candidates.len() {
                most = most.zip(counts(rank), u64::max);
                cost = cost.max(need.cost(rank));
            }
            TenantMost {
                names: t.specs.iter().map(|spec| spec.name.clone()).collect(),
                counts: most,
                cost_micros: cost,
            }
        });
        Self {
            id: need.id,
            on,
            tenant,
            expiry: now + need.slot_ttl_ms(),
        }
    }

    /// A block of `requests` and `tokens` of `d`.
    pub(super) fn block(d: DeploymentId, (requests, tokens): (u64, u64)) -> Self {
        Self {
            id: 0,
            on: vec![(d, Counts::new(requests, tokens, tokens, tokens))],
            tenant: None,
            expiry: 0,
        }
    }

    /// Counts it in `cells` (of a local ledger over `table`, at `now`) as admitted everywhere
    /// it may be.
    pub(super) fn charge(&self, table: &ScopeTable, cells: &mut LocalCells, now: u64) {
        let nb = bucket_of(now);
        let slot = Slot {
            id: self.id,
            expiry: self.expiry,
            bucket: nb,
        };
        let add = |st: &mut ScopeState, counts: Counts| {
            let k = st.window.expire(nb);
            st.window.add(k, counts);
        };
        for &(d, counts) in &self.on {
            for &s in table.of(d).unwrap_or_default() {
                add(cells.scope(s), table.kept(d, counts));
            }
        }
        let p = crate::ledger::period::periods(now);
        if let Some(most) = &self.tenant {
            for name in &most.names {
                let t = cells.tenant(name);
                add(&mut t.scope, most.counts);
                t.spend.add(&p, most.cost_micros);
            }
        }
        if self.id != 0 {
            let names = self.tenant.as_ref().map_or(&[][..], |t| &t.names);
            hold(table, cells, self.on.iter().map(|&(d, _)| d), names, slot);
        }
    }

    /// Its reply came while the instance was local: the slots it holds there on the
    /// deployments it was not admitted on (`granted`) are freed. (What it counted stays: the
    /// local ledger errs on the used side.)
    pub(super) fn unhold(
        &self,
        table: &ScopeTable,
        cells: &mut LocalCells,
        granted: Option<DeploymentId>,
    ) {
        if self.id == 0 {
            return;
        }
        for &(d, _) in self.on.iter().filter(|(d, _)| Some(*d) != granted) {
            for &s in table.of(d).unwrap_or_default() {
                cells.scope(s).slots.free(self.id);
            }
        }
        if granted.is_none() {
            for name in self.tenant.iter().flat_map(|t| &t.names) {
                cells.tenant(name).scope.slots.free(self.id);
            }
        }
    }
}
