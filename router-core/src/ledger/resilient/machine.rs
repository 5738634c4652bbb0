use super::*;

/// How long a tenant stays on the heartbeat's list after its last request.
pub(super) const TENANT_MEMORY_MS: u64 = 120_000;
/// At most this many tenants are read per heartbeat (the most recently served).
pub(super) const TENANTS_PER_BEAT: usize = 1_000;

/// A shared reservation in flight, with its slot expiry (ms).
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) reservation: Reservation,
    pub(super) expiry: u64,
}

#[derive(Debug)]
pub(super) enum Admitting {
    Shared,
    Local(Box<Local>),
    Open(HashSet<u64>),
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) admitting: Admitting,
    /// When the mode last changed, ms.
    pub(super) since: u64,
    pub(super) seen: Option<Beat>,
    /// All this instance admitted through the shared store, and as it stood when it sent the
    /// beats whose readings it recorded.
    pub(super) own: Own,
    pub(super) reads: Reads,
    /// What it admitted through the shared store in the last minute, per scope and tenant: if
    /// the store loses its keys, every instance writes its own back.
    pub(super) own_windows: Vec<Window>,
    pub(super) own_tenant_windows: HashMap<String, Window>,
    /// The store's epoch as last seen (0: none).
    pub(super) epoch: u64,
    pub(super) in_flight: IdMap<u64, Held>,
    /// Calls to the shared store that may admit, sent and not answered yet, by call number.
    pub(super) calling: IdMap<u64, Calling>,
    /// Tenants served lately, and when last (ms).
    pub(super) tenants: HashMap<String, u64>,
    /// Admissions that got no answer ([`LedgerError::maybe_applied`]), or a denial only on
    /// being sent again: Redis may have counted them after all. Each is kept until the next
    /// restore voids it, or until Redis can no longer hold anything of it (see
    /// [`State::unsure`]).
    pub(super) uncertain: Vec<Uncertain>,
    /// A restore whose reply never came, with the local admissions it wrote: Redis may apply
    /// it late, so it is sent again under the same number (applied at most once).
    pub(super) pending: Option<(u64, Vec<Entry>)>,
    /// The blocks of limits this instance leases.
    pub(super) leases: Leases,
    /// Lease corrections sent with a beat that got no answer, and their sequence number: sent
    /// again as they are with the next beat.
    pub(super) carrying: Option<(u64, Vec<Owed>)>,
    /// After the store lost its keys: until this many instances have written their own back
    /// (those seen before), or this time (ms) has passed, admissions stay local.
    pub(super) awaiting: Option<(u64, u64)>,
    pub(super) changes: u64,
    pub(super) local_admissions: u64,
}

impl State {
    /// Keeps `need` over `candidates` as uncertain, once however often it is denied after a
    /// slow first sending: the next restore voids it. Those Redis can hold nothing of any more
    /// go first, so that an instance that stays shared through many slow answers keeps only
    /// the last hours' (each void is a call of the restore that follows).
    pub(super) fn unsure(&mut self, need: &Need, candidates: &[DeploymentId], now: u64) {
        self.forget_settled_uncertain(now);
        let until = now
            .saturating_add(SLOTS_TTL_MS)
            .saturating_add(WINDOW_BUCKETS * BUCKET_MS);
        self.keep_uncertain(Uncertain {
            need: need.clone(),
            candidates: candidates.to_vec(),
            until,
        });
    }

    /// Adds `u` to the uncertain admissions, or extends the one of the same request over the
    /// same candidates.
    pub(super) fn keep_uncertain(&mut self, u: Uncertain) {
        let same = |k: &&mut Uncertain| k.need.id == u.need.id && k.candidates == u.candidates;
        match self.uncertain.iter_mut().find(same) {
            Some(k) => k.until = k.until.max(u.until),
            None => self.uncertain.push(u),
        }
    }

    /// Drops the uncertain admissions Redis can hold nothing of any more.
    pub(super) fn forget_settled_uncertain(&mut self, now: u64) {
        self.uncertain.retain(|u| u.until > now);
    }

    /// Adds `admitted` to what this instance admitted through the store, and to its own windows.
    pub(super) fn remember(&mut self, table: &ScopeTable, admitted: &Admitted<'_>, now: u64) {
        self.own.add(table, admitted);
        self.keep_own(table, admitted, now);
    }

    /// Adds `admitted` to this instance's own windows (in its bucket, if still in the window):
    /// what it writes back should the store lose its keys.
    pub(super) fn keep_own(&mut self, table: &ScopeTable, admitted: &Admitted<'_>, now: u64) {
        let bucket = admitted.bucket;
        let counts = table.kept(admitted.deployment, admitted.counts);
        let nb = bucket_of(now).max(bucket);
        let add = |w: &mut Window| {
            w.expire(nb);
            if w.is_live(bucket) {
                w.add(bucket, counts);
            }
        };
        for &s in table.of(admitted.deployment).unwrap_or_default() {
            if let Some(w) = self.own_windows.get_mut(s) {
                add(w);
            }
        }
        if let Some(t) = admitted.tenant {
            add(self.own_tenant_windows.entry(t.name.clone()).or_default());
        }
    }

    /// This instance's own windows as restore rows; tenants' windows that emptied are dropped.
    pub(super) fn own_rows(&mut self, now: u64) -> Vec<(WindowOf, u64, Counts)> {
        let nb = bucket_of(now);
        let mut rows = Vec::new();
        for (s, w) in self.own_windows.iter_mut().enumerate() {
            w.expire(nb);
            rows.extend(w.buckets().map(|(k, c)| (WindowOf::Scope(s), k, c)));
        }
        self.own_tenant_windows.retain(|name, w| {
            w.expire(nb);
            let before = rows.len();
            rows.extend(
                w.buckets()
                    .map(|(k, c)| (WindowOf::Tenant(name.clone()), k, c)),
            );
            rows.len() > before
        });
        rows
    }

    /// What this instance admitted through the shared store since the reading it counts its own
    /// from (see [`Reads`]).
    pub(super) fn own_since_read(&self, now: u64) -> Beat {
        self.own
            .since(self.reads.base().unwrap_or(&Own::default()), now)
    }

    /// The store failed again while this instance wrote back or waited for the others: back to
    /// admitting on its own share (its next heartbeat puts it back in the rejoin set).
    pub(super) fn away_again(&mut self) {
        if let Admitting::Local(l) = &mut self.admitting {
            l.closing = None;
        }
    }

    /// Back from local mode and waiting for the other instances: it admits nothing.
    pub(super) fn rejoining(&self) -> bool {
        matches!(&self.admitting, Admitting::Local(l) if l.closing.is_some())
    }

    pub(super) fn mode(&self) -> Mode {
        match self.admitting {
            Admitting::Shared => Mode::Shared,
            Admitting::Local(_) => Mode::Local,
            Admitting::Open(_) => Mode::Open,
        }
    }

    /// The tenants served in the last two minutes, most recent first, at most
    /// [`TENANTS_PER_BEAT`]; older ones are forgotten.
    pub(super) fn recent_tenants(&mut self, now: u64) -> Vec<String> {
        self.tenants
            .retain(|_, at| now.saturating_sub(*at) <= TENANT_MEMORY_MS);
        let mut names: Vec<(&String, u64)> = self.tenants.iter().map(|(n, at)| (n, *at)).collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.1));
        names
            .into_iter()
            .take(TENANTS_PER_BEAT)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// This instance's requests in flight through the shared store, per scope (by index) and
    /// per tenant of `tenants` (in that order).
    pub(super) fn in_flight_by_scope(
        &self,
        table: &ScopeTable,
        tenants: &[String],
    ) -> (Vec<u64>, Vec<u64>) {
        let mut scopes = vec![0u64; table.len()];
        let mut by_tenant: HashMap<&str, u64> = HashMap::new();
        for h in self.in_flight.values() {
            for &s in table.of(h.reservation.deployment).unwrap_or_default() {
                if let Some(n) = scopes.get_mut(s) {
                    *n += 1;
                }
            }
            if let Some(t) = &h.reservation.tenant {
                *by_tenant.entry(t.name.as_str()).or_default() += 1;
            }
        }
        let tenants = tenants
            .iter()
            .map(|name| by_tenant.get(name.as_str()).copied().unwrap_or(0))
            .collect();
        (scopes, tenants)
    }

    /// Switches to local mode: a ledger of this instance's share of every limit, seeded with its
    /// share of what the shared windows and spends held at the last heartbeat and with its own
    /// requests in flight. `closing`: it admits nothing on its own either, until then (ms; see
    /// [`Local::closing`]). Returns the instance count it divides by.
    pub(super) fn enter_local(&mut self, inner: &Inner, closing: Option<u64>) -> u64 {
        let now = inner.now();
        let n = self.seen.as_ref().map_or(1, |b| b.instances).max(1);
        let (table, zero) = inner.shared.table().share(n);
        let mut cells = LocalCells(
            (0..inner.shared.scope_count())
                .map(|_| ScopeState::default())
                .collect(),
            HashMap::new(),
        );
        let nb = bucket_of(now);
        // Its share of what the windows held at the last heartbeat, plus all it admitted since
        // (no heartbeat saw that): together the instances start from at least what was used.
        let mut seed = |beat: &Beat, divide: u64| {
            for (s, counts) in beat.scopes.iter().enumerate() {
                let st = cells.scope(s);
                let k = st.window.expire(nb);
                st.window.add(k, counts.map(|v| share_up(v, divide)));
            }
            for (name, counts, day, month) in &beat.tenants {
                let st = cells.tenant(name);
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
        };
        if let Some(beat) = &self.seen {
            seed(beat, n);
        }
        seed(&self.own_since_read(now), 1);
        for h in self.in_flight.values() {
            let slot = Slot {
                id: h.reservation.id,
                expiry: h.expiry,
                bucket: nb,
            };
            let tenant = h.reservation.tenant.as_ref().map(|t| t.name.as_str());
            hold(&table, &mut cells, [h.reservation.deployment], tenant, slot);
        }
        for c in self.calling.values() {
            c.charge(&table, &mut cells, now);
        }
        if let Some(beat) = &self.seen {
            stand_in_for_others(beat, n, &mut cells, now);
        }
        // A scope where this instance's share of some limit is zero admits nothing: its
        // deployments are put in cooldown for the whole outage.
        let far = crate::ledger::window::TIME_CAP_MS;
        for d in 0..inner.shared.deployment_count() {
            let blocked = table
                .of(DeploymentId(d))
                .is_some_and(|scopes| scopes.iter().any(|&s| zero[s]));
            if blocked {
                cells.scope(d).cooldown = far;
            }
        }
        self.admitting = Admitting::Local(Box::new(Local {
            table,
            cells,
            instances: n,
            log: IdMap::default(),
            closing,
        }));
        self.since = now;
        self.changes += 1;
        n
    }

    /// The admission of `need`, when this instance does not admit through the shared store
    /// now: in local or open mode, or (`closed`) while the other instances write back what a
    /// restarted Redis lost. `None`: the shared store decides.
    pub(super) fn elsewhere(
        &mut self,
        inner: &Inner,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Option<Result<Admission, LedgerError>> {
        if self.mode() != Mode::Shared {
            return Some(self.admit_elsewhere(inner, need, candidates));
        }
        self.awaiting.is_some().then(|| {
            Err(LedgerError::Lost {
                url: inner.shared.url().to_owned(),
            })
        })
    }

    /// Admission in local or open mode.
    pub(super) fn admit_elsewhere(
        &mut self,
        inner: &Inner,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        let now = inner.now();
        let admission = match &mut self.admitting {
            Admitting::Shared => unreachable!("admit_elsewhere runs in local or open mode"),
            Admitting::Open(ids) => {
                let Some(&deployment) = candidates.first() else {
                    return Ok(Admission::Denied(Denial {
                        refusals: Vec::new(),
                    }));
                };
                ids.insert(need.id);
                let p = crate::ledger::period::periods(now);
                Admission::Granted(Reservation {
                    id: need.id,
                    deployment,
                    bucket: bucket_of(now),
                    tokens: need.tokens_on(0),
                    input_tokens: need.input_on(0),
                    rank: 0,
                    tenant: need.tenant.as_ref().map(|t| TenantHold {
                        name: t.spec.name.clone(),
                        cost_micros: need.cost(0),
                        day: p.day,
                        month: p.month,
                        window: None,
                    }),
                })
            }
            Admitting::Local(l) if l.closing.is_some() => {
                let poll = inner.settings.heartbeat / 10;
                return Ok(not_now(candidates, Scope::Deployment, poll));
            }
            Admitting::Local(l) => {
                let scaled;
                let need = match &need.tenant {
                    Some(t) => match tenant_share(&t.spec, l.instances) {
                        Some(spec) => {
                            scaled = Need {
                                tenant: Some(TenantNeed {
                                    spec,
                                    costs: t.costs.clone(),
                                }),
                                ..need.clone()
                            };
                            &scaled
                        }
                        None => {
                            let beat = inner.settings.heartbeat;
                            return Ok(not_now(candidates, Scope::Tenant, beat));
                        }
                    },
                    None => need,
                };
                let engine = Engine {
                    table: &l.table,
                    now,
                };
                let mut admission = engine.admit(&mut l.cells, need, candidates)?;
                match &mut admission {
                    Admission::Granted(r) => {
                        let entry = Entry {
                            reservation: r.clone(),
                            actual: None,
                            released: false,
                            expiry: now + need.slot_ttl_ms(),
                            version: 0,
                        };
                        l.log.insert(r.id, entry);
                    }
                    // A share is a stand-in until the next heartbeat, which may find the shared
                    // store back: a request does not wait longer than that to ask again.
                    Admission::Denied(denial) => {
                        for refusal in &mut denial.refusals {
                            if let Verdict::NotNow(d) = &mut refusal.verdict {
                                *d = (*d).min(inner.settings.heartbeat);
                            }
                        }
                    }
                }
                admission
            }
        };
        if let Admission::Granted(_) = admission {
            self.local_admissions += 1;
        }
        Ok(admission)
    }
}
