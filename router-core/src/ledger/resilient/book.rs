//! The machine's books: what this instance admitted through the shared store, its calls and
//! requests in flight there, the tenants it served, and the admissions it is unsure of.

use super::*;

/// An admission Redis may have counted though this instance got no grant from it (see
/// [`Machine::uncertain`]).
#[derive(Debug, Clone)]
pub(super) struct Uncertain {
    pub(super) need: Need,
    pub(super) candidates: Vec<DeploymentId>,
    /// When Redis can hold nothing of it any more (ms, this instance's clock): its reservation
    /// key, which a void reads, lives `SLOTS_TTL_MS` (the longest slot and the hour in which
    /// its settlement, tenant spend included, still counts) from when the admission ran, and a
    /// first sending Redis had not read yet (a frozen Redis) is given a window's length more.
    /// One Redis runs later still is not voided: its slot is held until it expires and its
    /// request counted in its window (the safe side), and its estimated cost stays in its
    /// tenant's spend.
    pub(super) until: u64,
}

/// Requests in flight, per scope (by index) and per tenant (in the order asked).
#[derive(Debug, Clone, Default)]
pub(super) struct InFlight {
    pub(super) scopes: Vec<u64>,
    pub(super) tenants: Vec<u64>,
}

/// A shared reservation in flight, with its slot expiry (ms).
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) reservation: Reservation,
    pub(super) expiry: u64,
}

impl Machine {
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
    pub(super) fn remember(&mut self, admitted: &Admitted<'_>, now: u64) {
        self.own.add(&self.table, admitted);
        self.keep_own(admitted, now);
    }

    /// Adds `admitted` to this instance's own windows (in its bucket, if still in the window):
    /// what it writes back should the store lose its keys.
    pub(super) fn keep_own(&mut self, admitted: &Admitted<'_>, now: u64) {
        let bucket = admitted.bucket;
        let counts = self.table.kept(admitted.deployment, admitted.counts);
        let nb = bucket_of(now).max(bucket);
        let add = |w: &mut Window| {
            w.expire(nb);
            if w.is_live(bucket) {
                w.add(bucket, counts);
            }
        };
        for &s in self.table.of(admitted.deployment).unwrap_or_default() {
            if let Some(w) = self.own_windows.get_mut(s) {
                add(w);
            }
        }
        for name in admitted.tenant.iter().flat_map(|t| &t.names) {
            add(self.own_tenant_windows.entry(name.clone()).or_default());
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

    /// `tenant` was served at `now`: its windows go with the next heartbeats.
    pub(super) fn served(&mut self, tenant: &str, now: u64) {
        match self.tenants.get_mut(tenant) {
            Some(at) => *at = now,
            None => {
                self.tenants.insert(tenant.to_owned(), now);
            }
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
    pub(super) fn in_flight_by_scope(&self, tenants: &[String]) -> InFlight {
        let mut scopes = vec![0u64; self.table.len()];
        let mut by_tenant: HashMap<&str, u64> = HashMap::new();
        for h in self.in_flight.values() {
            for &s in self.table.of(h.reservation.deployment).unwrap_or_default() {
                if let Some(n) = scopes.get_mut(s) {
                    *n += 1;
                }
            }
            for name in h.reservation.tenant.iter().flat_map(|t| &t.names) {
                *by_tenant.entry(name.as_str()).or_default() += 1;
            }
        }
        let tenants = tenants
            .iter()
            .map(|name| by_tenant.get(name.as_str()).copied().unwrap_or(0))
            .collect();
        InFlight { scopes, tenants }
    }
}
