use super::*;

/// One instance's own ledger while the shared one is away.
#[derive(Debug)]
pub(super) struct Local {
    /// Every limit ÷ `instances`.
    pub(super) table: ScopeTable,
    pub(super) cells: LocalCells,
    pub(super) instances: u64,
    /// What it admitted, by reservation id, until written into the shared windows.
    pub(super) log: IdMap<u64, Entry>,
    /// Writing its log back, or written and waiting for the other instances to (see
    /// [`Inner::restore`]): it admits nothing, until the time given (ms) at the latest.
    pub(super) closing: Option<u64>,
}

/// Scope and tenant state of the local ledger.
#[derive(Debug, Default)]
pub(super) struct LocalCells(
    pub(super) Vec<ScopeState>,
    pub(super) HashMap<String, TenantState>,
);

impl Cells for LocalCells {
    fn scope(&mut self, s: usize) -> &mut ScopeState {
        &mut self.0[s]
    }

    fn tenant(&mut self, name: &str) -> &mut TenantState {
        self.1.entry(name.to_owned()).or_default()
    }
}

/// A local admission.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) reservation: Reservation,
    /// `None` while in flight; what it used once settled.
    pub(super) actual: Option<ActualUsage>,
    pub(super) released: bool,
    /// Slot expiry, ms.
    pub(super) expiry: u64,
    /// Bumped by every change, so a restore knows whether what it wrote is still current.
    pub(super) version: u64,
}

/// Holds `slot` in a local ledger (`cells` over `table`) on every scope of each of
/// `deployments`, and on `tenant`'s.
pub(super) fn hold(
    table: &ScopeTable,
    cells: &mut LocalCells,
    deployments: impl IntoIterator<Item = DeploymentId>,
    tenant: Option<&str>,
    slot: Slot,
) {
    for d in deployments {
        for &s in table.of(d).unwrap_or_default() {
            cells.scope(s).slots.take(slot);
        }
    }
    if let Some(name) = tenant {
        cells.tenant(name).scope.slots.take(slot);
    }
}

/// Holds, in a local ledger about to start, slots that stand in for the other instances'
/// requests in flight at the last heartbeat (`beat`): in each scope, and each tenant, this
/// instance counts at least its share (of `n` instances, rounded up) of every instance's live
/// slots then, its own then included (those of its own that ended since freed their room; those
/// still in flight are held already). Without them an instance holding few requests would admit
/// up to its share of a concurrency limit while one holding many went on holding them: together
/// over the limit. They last as long as the longest slot, as nothing says when the requests they
/// stand for end.
pub(super) fn stand_in_for_others(beat: &Beat, n: u64, cells: &mut LocalCells, now: u64) {
    let nb = bucket_of(now);
    let expiry = now.saturating_add(millis(MAX_SLOT_TTL));
    let mut next_id = u64::MAX;
    let mut stand_in = |slots: &mut crate::ledger::window::Slots, total: u64, own: u64| {
        for _ in 0..share_up(total, n).saturating_sub(own) {
            slots.take(Slot {
                id: next_id,
                expiry,
                bucket: nb,
            });
            next_id -= 1;
        }
    };
    let own = |list: &[u64], i: usize| list.get(i).copied().unwrap_or(0);
    for (s, &total) in beat.in_flight.iter().enumerate() {
        stand_in(
            &mut cells.scope(s).slots,
            total,
            own(&beat.own_in_flight, s),
        );
    }
    for (t, ((name, ..), &total)) in beat.tenants.iter().zip(&beat.tenant_in_flight).enumerate() {
        let own = own(&beat.own_tenant_in_flight, t);
        stand_in(&mut cells.tenant(name).scope.slots, total, own);
    }
}

/// Frees the slot a shared reservation holds in the local ledger (no counts change).
pub(super) fn free_slot(table: &ScopeTable, cells: &mut LocalCells, r: &Reservation) {
    if let Some(scopes) = table.of(r.deployment) {
        for &s in scopes {
            cells.scope(s).slots.free(r.id);
        }
    }
    if let Some(t) = &r.tenant {
        cells.tenant(&t.name).scope.slots.free(r.id);
    }
}

/// A local entry as the restore writes it (nothing for a released one).
pub(super) fn replayed(e: &Entry) -> Option<Replayed> {
    if e.released {
        return None;
    }
    let r = &e.reservation;
    let hold_cost = r.tenant.as_ref().map_or(0, |t| t.cost_micros);
    Some(match e.actual {
        Some(a) => Replayed {
            reservation: r.clone(),
            counts: [1, a.tokens, a.input_tokens, a.output_tokens()],
            expiry: 0,
            cost: a.cost_micros,
        },
        None => Replayed {
            reservation: r.clone(),
            counts: [1, r.tokens, r.input_tokens, r.tokens - r.input_tokens],
            expiry: e.expiry,
            cost: hold_cost,
        },
    })
}

/// `v` ÷ `n`, rounded up (a share of what was used errs on the used side).
pub(super) fn share_up(v: u64, n: u64) -> u64 {
    v.div_ceil(n.max(1))
}

/// A tenant's share of its limits and budgets on one of `n` instances; `None` when its share of
/// some limit is zero.
pub(super) fn tenant_share(spec: &TenantSpec, n: u64) -> Option<TenantSpec> {
    let (limits, zero) = share_of(spec.limits, n);
    let n = n.max(1);
    let budget = BudgetMicros {
        daily: spec.budget.daily.map(|b| (b / n).max(1)),
        monthly: spec.budget.monthly.map(|b| (b / n).max(1)),
    };
    (!zero).then(|| TenantSpec {
        name: spec.name.clone(),
        limits,
        budget,
    })
}

/// The refusal in local mode when this instance cannot admit on its own now: a tenant's share
/// of some limit on it is zero (`Scope::Tenant`), or it is back from local mode and waits for
/// the other instances (`Scope::Deployment`). Try again `after` (the next look at the store).
pub(super) fn not_now(candidates: &[DeploymentId], scope: Scope, after: Duration) -> Admission {
    Admission::Denied(Denial {
        refusals: candidates
            .iter()
            .map(|&deployment| Refusal {
                deployment,
                limit: LimitKind::Requests,
                scope,
                verdict: Verdict::NotNow(after),
            })
            .collect(),
    })
}
