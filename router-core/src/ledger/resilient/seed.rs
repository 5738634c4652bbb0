//! How a local ledger starts: from its share of what the shared windows held at the last
//! heartbeat, and all this instance holds and has put into them since.

use super::*;

impl Local {
    /// Seeds this new ledger, at `now`, from `m`: its share of what the shared windows and
    /// spends held at the last heartbeat, plus all it admitted since (no heartbeat saw that);
    /// together the instances start from at least what was used. It holds the slots of its
    /// requests in flight, counts its calls still out as admitted (see [`Calling`]), and holds
    /// slots standing in for the other instances' requests in flight.
    pub(super) fn seed(&mut self, m: &Machine, now: u64) {
        if let Some(beat) = &m.seen {
            self.add_share(beat, self.instances, now);
        }
        self.add_share(&m.own_since_read(now), 1, now);
        let nb = bucket_of(now);
        for h in m.in_flight.values() {
            let slot = Slot {
                id: h.reservation.id,
                expiry: h.expiry,
                bucket: nb,
            };
            let names = h.reservation.tenant.as_ref().map_or(&[][..], |t| &t.names);
            let d = [h.reservation.deployment];
            hold(&self.table, &mut self.cells, d, names, slot);
        }
        for c in m.calling.values() {
            c.charge(&self.table, &mut self.cells, now);
        }
        if let Some(beat) = &m.seen {
            stand_in_for_others(beat, self.instances, &mut self.cells, now);
        }
    }

    /// Adds `beat`'s windows and spends, each ÷ `divide` rounded up.
    fn add_share(&mut self, beat: &Beat, divide: u64, now: u64) {
        let nb = bucket_of(now);
        for (s, counts) in beat.scopes.iter().enumerate() {
            let st = self.cells.scope(s);
            let k = st.window.expire(nb);
            st.window.add(k, counts.map(|v| share_up(v, divide)));
        }
        for (name, counts, day, month) in &beat.tenants {
            let st = self.cells.tenant(name);
            let k = st.scope.window.expire(nb);
            st.scope.window.add(k, counts.map(|v| share_up(v, divide)));
            let (d, m) = st.spend.current(&crate::ledger::period::periods(now));
            st.spend = crate::ledger::engine::Spend {
                day: beat.day,
                day_micros: d + share_up(*day, divide),
                month: beat.month,
                month_micros: m + share_up(*month, divide),
            };
        }
    }
}

/// Holds `slot` in a local ledger (`cells` over `table`) on every scope of each of
/// `deployments`, and on the accounts named `accounts`.
pub(super) fn hold(
    table: &ScopeTable,
    cells: &mut LocalCells,
    deployments: impl IntoIterator<Item = DeploymentId>,
    accounts: &[String],
    slot: Slot,
) {
    for d in deployments {
        for &s in table.of(d).unwrap_or_default() {
            cells.scope(s).slots.take(slot);
        }
    }
    for name in accounts {
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
