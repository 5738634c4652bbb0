//! The local ledger: this instance's share of every limit while the shared store is away.

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
    /// The store lost its keys: the other instances write theirs back before this one
    /// admits through it again.
    pub(super) awaiting: Option<Awaiting>,
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

    /// A local line's waiters get no wake-ups: they ask again when their wait ends.
    fn wake(&mut self, _ticket: u64) {}
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

impl Local {
    /// An empty ledger of one of `n` instances' share of every limit of `shared`. A scope
    /// where that share of some limit is zero admits nothing: its deployments are put in
    /// cooldown for the whole outage.
    pub(super) fn start(shared: &ScopeTable, n: u64, closing: Option<u64>) -> Self {
        let (table, zero) = shared.share(n);
        let mut cells = LocalCells(
            (0..shared.len()).map(|_| ScopeState::default()).collect(),
            HashMap::new(),
        );
        for d in 0..shared.deployments() {
            let blocked = table
                .of(DeploymentId(d))
                .is_some_and(|scopes| scopes.iter().any(|&s| zero[s]));
            if blocked {
                cells.scope(d).cooldown = crate::ledger::window::TIME_CAP_MS;
            }
        }
        Self {
            table,
            cells,
            instances: n,
            log: IdMap::default(),
            closing,
            awaiting: None,
        }
    }

    /// Admits `need` on its own share. Nothing while it writes back or waits for the other
    /// instances (ask again in a tenth of a `heartbeat`), nor for a tenant whose share of some
    /// limit is zero (ask again at the next `heartbeat`).
    pub(super) fn admit(
        &mut self,
        need: &Need,
        candidates: &[DeploymentId],
        now: u64,
        heartbeat: Duration,
    ) -> Result<Admission, LedgerError> {
        if self.closing.is_some() {
            return Ok(not_now(candidates, Scope::Deployment, heartbeat / 10));
        }
        let scaled;
        let need = match &need.tenant {
            Some(t) => {
                let mut specs = Vec::with_capacity(t.specs.len());
                for spec in &t.specs {
                    match tenant_share(spec, self.instances) {
                        Some(share) => specs.push(share),
                        None => return Ok(not_now(candidates, spec.scope(), heartbeat)),
                    }
                }
                let costs = t.costs.clone();
                scaled = Need {
                    tenant: Some(TenantNeed { specs, costs }),
                    ..need.clone()
                };
                &scaled
            }
            None => need,
        };
        let engine = Engine {
            table: &self.table,
            now,
        };
        let mut admission = engine.admit(&mut self.cells, need, candidates)?;
        match &mut admission {
            Admission::Granted(r) => {
                let entry = Entry {
                    reservation: r.clone(),
                    actual: None,
                    released: false,
                    expiry: now + need.slot_ttl_ms(),
                    version: 0,
                };
                self.log.insert(r.id, entry);
            }
            // A share is a stand-in until the next heartbeat, which may find the shared store
            // back: a request does not wait longer than that to ask again.
            Admission::Denied(denial) => {
                for refusal in &mut denial.refusals {
                    if let Verdict::NotNow(d) = &mut refusal.verdict {
                        *d = (*d).min(heartbeat);
                    }
                }
            }
        }
        Ok(admission)
    }

    /// Settles (`actual`) or releases (`None`) `r`. `None`: not admitted here (a shared
    /// reservation: the slot it holds here is freed, and the shared store settles it).
    pub(super) fn finish(
        &mut self,
        r: &Reservation,
        actual: Option<ActualUsage>,
        now: u64,
    ) -> Option<Result<bool, LedgerError>> {
        let Some(entry) = self.log.get_mut(&r.id) else {
            free_slot(&self.table, &mut self.cells, r);
            return None;
        };
        let engine = Engine {
            table: &self.table,
            now,
        };
        let done = engine.finish(
            &mut self.cells,
            r,
            actual.unwrap_or_default(),
            actual.is_none(),
        );
        if let Ok(true) = done {
            entry.actual = actual;
            entry.released = actual.is_none();
            entry.version += 1;
        }
        Some(done)
    }

    /// Renews `r`'s slot for `ttl`. `None`: not admitted here.
    pub(super) fn renew(
        &mut self,
        r: &Reservation,
        ttl: Duration,
        now: u64,
    ) -> Option<Result<bool, LedgerError>> {
        let entry = self.log.get_mut(&r.id)?;
        let engine = Engine {
            table: &self.table,
            now,
        };
        let renewed = engine.renew(&mut self.cells, r, ttl);
        if renewed.is_ok() {
            entry.expiry = now + slot_ttl_ms(ttl);
            entry.version += 1;
        }
        Some(renewed)
    }

    /// Runs `f` with the engine over this ledger at `now`, and its cells.
    pub(super) fn with_engine<T>(
        &mut self,
        now: u64,
        f: impl FnOnce(&Engine<'_>, &mut LocalCells) -> T,
    ) -> T {
        let engine = Engine {
            table: &self.table,
            now,
        };
        f(&engine, &mut self.cells)
    }
}

/// Frees the slot a shared reservation holds in the local ledger (no counts change).
pub(super) fn free_slot(table: &ScopeTable, cells: &mut LocalCells, r: &Reservation) {
    if let Some(scopes) = table.of(r.deployment) {
        for &s in scopes {
            cells.scope(s).slots.free(r.id);
        }
    }
    for name in r.tenant.iter().flat_map(|t| &t.names) {
        cells.tenant(name).scope.slots.free(r.id);
    }
}

/// The refusal in local mode when this instance cannot admit on its own now: a tenant's share
/// of some limit on it is zero (`Scope::Tenant`), or it is back from local mode and waits for
/// the other instances (`Scope::Deployment`). Try again `after` (the next look at the store).
pub(super) fn not_now(candidates: &[DeploymentId], scope: Scope, after: Duration) -> Admission {
    Admission::Denied(Denial {
        place: None,
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
