//! The shared store, simulated: what lua/admit, settle, heartbeat and restore do, kept as small
//! as the machine lets it be.
//!
//! - **Windows and slots**: one ledger over the whole limits, the crate's [`Engine`] over plain
//!   cells (as the local ledger is), so that admission means what it means in Redis.
//! - **Heartbeat**: registers the instance (none ever leaves), keeps the rejoin hash, numbers the
//!   readings in the epoch the instance knows, and reads every scope's window totals and live
//!   slots.
//! - **Restore**: stores an epoch when there is none, applies each sequence number once, writes
//!   an instance's own windows and slots when its epoch is stale and its local entries always,
//!   and records in the rejoin hash that it holds nothing once it has written all.
//!
//! Faults: the store stops answering every call (`up`), or the next call of a kind is lost on
//! its way, or carried out and its answer lost (`fault`). The caller sees a timeout each time.

use std::collections::{BTreeMap, BTreeSet};

use super::super::*;
use super::D;
use crate::ledger::period::periods;

/// A kind of call to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    Admit,
    Beat,
    Restore,
    /// A settlement, a release, or a void.
    Finish,
}

pub(super) struct Store {
    table: ScopeTable,
    cells: LocalCells,
    /// Whether the store answers at all.
    pub(super) up: bool,
    /// The next call of this kind times out: carried out and its answer lost (`true`), or
    /// lost on its way (`false`).
    pub(super) fault: Option<(Call, bool)>,
    epoch: u64,
    next_epoch: u64,
    /// Instances registered by a heartbeat.
    live: BTreeSet<usize>,
    /// Per instance, when it last said it holds admissions made on its own, not yet written
    /// back (see the rejoin hash in lua/common.lua).
    away: BTreeMap<usize, u64>,
    /// Per instance, when it last said it holds none.
    clean: BTreeMap<usize, u64>,
    /// Instances that wrote their own back into this epoch.
    restored: BTreeSet<usize>,
    /// The last reading's number, and each instance's last recorded one.
    read: u64,
    reads: BTreeMap<usize, u64>,
    /// Each instance's last restore applied.
    applied: BTreeMap<usize, u64>,
}

fn timeout() -> LedgerError {
    LedgerError::Timeout {
        url: "redis://model".to_owned(),
        after: Duration::from_millis(50),
    }
}

impl Store {
    /// An empty store, as a fresh Redis: no epoch yet.
    pub(super) fn new(table: ScopeTable) -> Self {
        let scopes = (0..table.len()).map(|_| ScopeState::default()).collect();
        Self {
            table,
            cells: LocalCells(scopes, HashMap::new()),
            up: true,
            fault: None,
            epoch: 0,
            next_epoch: 41,
            live: BTreeSet::new(),
            away: BTreeMap::new(),
            clean: BTreeMap::new(),
            restored: BTreeSet::new(),
            read: 0,
            reads: BTreeMap::new(),
            applied: BTreeMap::new(),
        }
    }

    /// Runs `op`, a call of kind `kind`, at `now` if the store answers and no fault is set
    /// for that kind.
    fn call<T>(
        &mut self,
        kind: Call,
        now: u64,
        op: impl FnOnce(&mut Self, &Engine<'_>) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        if !self.up {
            return Err(timeout());
        }
        if self.fault == Some((kind, false)) {
            self.fault = None;
            return Err(timeout());
        }
        let table = self.table.clone();
        let engine = Engine { table: &table, now };
        let answer = op(self, &engine);
        if self.fault == Some((kind, true)) {
            self.fault = None;
            return Err(timeout());
        }
        answer
    }

    pub(super) fn admit(&mut self, need: &Need, now: u64) -> Result<Admission, LedgerError> {
        self.call(Call::Admit, now, |s, e| e.admit(&mut s.cells, need, &[D]))
    }

    /// Settles (`actual`) or releases (`None`) `r`.
    pub(super) fn finish(
        &mut self,
        r: &Reservation,
        actual: Option<ActualUsage>,
        now: u64,
    ) -> Result<bool, LedgerError> {
        let release = actual.is_none();
        let used = actual.unwrap_or_default();
        self.call(Call::Finish, now, |s, e| {
            e.finish(&mut s.cells, r, used, release)
        })
    }

    pub(super) fn void(&mut self, u: &Uncertain, now: u64) -> Result<bool, LedgerError> {
        self.call(Call::Finish, now, |s, e| {
            e.void(&mut s.cells, &u.need, &u.candidates)
        })
    }

    /// Instance `me`'s heartbeat, saying how it stands (`says`), in the epoch it knows
    /// (`known`, 0: none).
    pub(super) fn heartbeat(
        &mut self,
        me: usize,
        says: BeatAs,
        known: u64,
        now: u64,
    ) -> Result<Beat, LedgerError> {
        self.call(Call::Beat, now, |s, _| {
            s.live.insert(me);
            if says.away {
                s.away.insert(me, now);
            } else {
                s.clean.insert(me, now);
            }
            let current = known != 0 && known == s.epoch;
            let mut read = 0;
            if says.reading && current {
                s.read += 1;
                read = s.read;
                s.reads.insert(me, read);
            }
            let nb = bucket_of(now);
            let (mut scopes, mut in_flight) = (Vec::new(), Vec::new());
            for st in &mut s.cells.0 {
                st.window.expire(nb);
                scopes.push(st.window.totals());
                in_flight.push(st.slots.len(now));
            }
            let p = periods(now);
            Ok(Beat {
                instances: s.live.len() as u64,
                epoch: s.epoch,
                waiting: s.waiting(me),
                read,
                oldest: s.reads.values().copied().min().unwrap_or(0),
                day: p.day,
                month: p.month,
                cooling: vec![0; scopes.len()],
                scopes,
                in_flight,
                ..Beat::default()
            })
        })
    }

    /// The instances `me` waits for: every other that has not said it holds nothing since
    /// `me` last said it held something (registrations never lapse here).
    fn waiting(&self, me: usize) -> u64 {
        let Some(&away) = self.away.get(&me) else {
            return 0;
        };
        let unclean = |i: &&usize| self.clean.get(i).copied().unwrap_or(0) < away;
        self.live
            .iter()
            .filter(|&&i| i != me)
            .filter(unclean)
            .count() as u64
    }

    /// Instance `me`'s restore `round`.
    pub(super) fn restore(
        &mut self,
        me: usize,
        round: &Round,
        now: u64,
    ) -> Result<Restored, LedgerError> {
        self.call(Call::Restore, now, |s, _| {
            if round.complete {
                s.clean.insert(me, now);
            }
            let waiting = s.waiting(me);
            if s.applied.get(&me).is_some_and(|&done| done >= round.seq) {
                return Ok(Restored {
                    epoch: s.epoch,
                    lost: false,
                    restored: s.restored.len() as u64,
                    // As the Rust side reads a repeat's answer: the epoch says it.
                    stale: s.epoch != round.known,
                    waiting,
                });
            }
            s.applied.insert(me, round.seq);
            let lost = s.epoch == 0;
            if lost {
                s.epoch = s.next_epoch;
                s.next_epoch += 1;
                s.restored.clear();
            }
            let stale = s.epoch != round.known;
            if stale {
                s.restored.insert(me);
                s.write_own(round, now);
            }
            for e in round.snapshot.iter().filter_map(replayed) {
                let counts = s.table.kept(e.reservation.deployment, e.counts);
                s.write(&e.reservation, counts, e.expiry, now);
            }
            Ok(Restored {
                epoch: s.epoch,
                lost,
                restored: s.restored.len() as u64,
                stale,
                waiting,
            })
        })
    }

    /// What an instance admitted through the store in the last minute, and its slots.
    fn write_own(&mut self, round: &Round, now: u64) {
        let nb = bucket_of(now);
        for (of, k, counts) in &round.own_windows {
            if let WindowOf::Scope(s) = of {
                add(&mut self.cells.0[*s].window, *k, *counts, nb);
            }
        }
        for (r, expiry) in &round.slots {
            self.write(r, Counts::ZERO, *expiry, now);
        }
    }

    /// Adds `counts` to `r`'s bucket (or the current one, if it is ahead) on every scope of its
    /// deployment, and holds its slot until `expiry` if that is still ahead.
    fn write(&mut self, r: &Reservation, counts: Counts, expiry: u64, now: u64) {
        let nb = bucket_of(now);
        let bucket = r.bucket;
        for &s in self.table.of(r.deployment).unwrap_or_default() {
            let st = &mut self.cells.0[s];
            add(&mut st.window, bucket, counts, nb);
            if expiry > now {
                st.slots.take(Slot {
                    id: r.id,
                    expiry,
                    bucket,
                });
            }
        }
    }
}

/// Adds `counts` to bucket `k` of `w` at bucket `nb`: to `nb` if `k` is ahead, nowhere if it
/// left the window.
fn add(w: &mut Window, k: u64, counts: Counts, nb: u64) {
    w.expire(nb);
    let k = k.min(nb);
    if w.is_live(k) {
        w.add(k, counts);
    }
}
