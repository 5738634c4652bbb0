//! What this instance admitted through the shared store, and the readings local mode starts
//! from.

use super::*;

/// How many of its recorded readings an instance keeps (see [`Reads`]): the oldest live
/// instance's last reading is among them unless that instance has recorded none for this many
/// of this instance's beats (it is local, or waits to rejoin, while this one is not). Then the
/// oldest kept stands in, and local mode may start a little short of what was used.
pub(super) const READS_KEPT: usize = 8;

/// What this instance admitted through the shared store since it started: per scope, and per
/// tenant with its cost (micro-USD).
#[derive(Debug, Clone, Default)]
pub(super) struct Own {
    pub(super) scopes: Vec<Counts>,
    pub(super) tenants: HashMap<String, TenantOwn>,
}

/// What this instance admitted through the shared store for one tenant, and its cost.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TenantOwn {
    pub(super) counts: Counts,
    pub(super) cost_micros: u64,
}

impl Own {
    pub(super) fn add(&mut self, table: &ScopeTable, admitted: &Admitted<'_>) {
        let counts = table.kept(admitted.deployment, admitted.counts);
        let plus = |to: &mut Counts| *to = to.plus(counts);
        for &s in table.of(admitted.deployment).unwrap_or_default() {
            if let Some(to) = self.scopes.get_mut(s) {
                plus(to);
            }
        }
        if let Some(t) = admitted.tenant {
            for name in &t.names {
                let to = self.tenants.entry(name.clone()).or_default();
                plus(&mut to.counts);
                to.cost_micros += t.cost_micros;
            }
        }
    }

    /// What was added since `base`, as heartbeat totals (spends in the periods of `now`).
    pub(super) fn since(&self, base: &Own, now: u64) -> Beat {
        let minus = |a: &Counts, b: Option<&Counts>| b.map_or(*a, |b| a.less(*b));
        let p = crate::ledger::period::periods(now);
        Beat {
            day: p.day,
            month: p.month,
            scopes: self
                .scopes
                .iter()
                .enumerate()
                .map(|(s, c)| minus(c, base.scopes.get(s)))
                .collect(),
            tenants: self
                .tenants
                .iter()
                .map(|(name, own)| {
                    let before = base.tenants.get(name);
                    let spent = own
                        .cost_micros
                        .saturating_sub(before.map_or(0, |b| b.cost_micros));
                    let counts = minus(&own.counts, before.map(|b| &b.counts));
                    (name.clone(), counts, spent, spent)
                })
                .collect(),
            ..Beat::default()
        }
    }
}

/// This instance's recorded readings (see lua/heartbeat.lua), oldest first, each with what it
/// had admitted through the shared store when it sent that beat.
///
/// Local mode starts from the instance's share of its last reading, plus all it admitted since
/// a reading of its own numbered no later than every live instance's last one. An admission
/// counted before that reading is in every instance's reading, so the shares add up to it; one
/// counted after it reached Redis after the beat, so after the snapshot sent with it, and is
/// counted in full. (Counting only what it admitted since its own last reading would miss, but
/// for one share, what it admitted between another instance's last reading and its own.)
#[derive(Debug, Clone, Default)]
pub(super) struct Reads(pub(super) VecDeque<Reading>);

/// A recorded reading: its number, and what this instance had admitted when it sent the beat.
#[derive(Debug, Clone)]
pub(super) struct Reading {
    pub(super) read: u64,
    pub(super) base: Own,
}

impl Reads {
    /// Reading number `read` was recorded with `base` sent; `oldest` is the oldest live one.
    pub(super) fn record(&mut self, read: u64, oldest: u64, base: Own) {
        // The numbers restart when the store loses its keys.
        if self.0.back().is_some_and(|r| r.read >= read) {
            self.0.clear();
        }
        self.0.push_back(Reading { read, base });
        while self.0.len() > READS_KEPT || self.0.get(1).is_some_and(|r| r.read <= oldest) {
            self.0.pop_front();
        }
    }

    /// What this instance had admitted when it sent the beat it counts its own from (none
    /// before its first reading: it counts all).
    pub(super) fn base(&self) -> Option<&Own> {
        self.0.front().map(|r| &r.base)
    }
}

/// What one admission through the shared store counted: a request, or a leased block.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admitted<'a> {
    pub(super) deployment: DeploymentId,
    pub(super) bucket: u64,
    pub(super) counts: Counts,
    pub(super) tenant: Option<&'a TenantHold>,
}

impl<'a> Admitted<'a> {
    pub(super) fn request(r: &'a Reservation) -> Self {
        Self {
            deployment: r.deployment,
            bucket: r.bucket,
            counts: Counts::request(r.tokens, r.input_tokens),
            tenant: r.tenant.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot that had admitted `n` requests on scope 0.
    fn own(n: u64) -> Own {
        Own {
            scopes: vec![Counts::from([n, 0, 0, 0])],
            tenants: HashMap::new(),
        }
    }

    fn base(reads: &Reads) -> Option<u64> {
        reads.base().map(|o| o.scopes[0].requests)
    }

    #[test]
    fn the_base_is_the_latest_reading_no_later_than_the_oldest_live_one() {
        let mut reads = Reads::default();
        assert_eq!(base(&reads), None, "before any reading: count everything");
        reads.record(3, 1, own(10));
        assert_eq!(
            base(&reads),
            Some(10),
            "the only one, though later than the oldest"
        );
        reads.record(5, 4, own(20));
        assert_eq!(base(&reads), Some(10), "3 is the latest no later than 4");
        reads.record(7, 5, own(30));
        assert_eq!(base(&reads), Some(20), "5 is");
        reads.record(9, 9, own(40));
        assert_eq!(base(&reads), Some(40), "it is the oldest itself");
    }

    #[test]
    fn readings_renumbered_by_an_emptied_store_start_over_and_few_are_kept() {
        let mut reads = Reads::default();
        for n in 1..=20 {
            // Another instance's reading stays at 1: the oldest kept stands in for it.
            reads.record(n, 1, own(n));
        }
        assert_eq!(reads.0.len(), READS_KEPT);
        assert_eq!(base(&reads), Some(20 - READS_KEPT as u64 + 1));
        // The store lost its keys: numbers restart.
        reads.record(1, 1, own(100));
        assert_eq!(reads.0.len(), 1);
        assert_eq!(base(&reads), Some(100));
    }
}
