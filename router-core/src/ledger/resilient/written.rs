//! A restore round as the machine plans it and takes in its answer: what it writes, and what
//! the instance does once the store has it.

use super::*;

/// What a restore round leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Everything is written back: admit through the shared store.
    Done,
    /// Local admissions arrived meanwhile: another round.
    Again,
    /// Written back, but other instances have not yet: stay local until a later heartbeat.
    Wait,
}

/// One restore round: what it writes (see [`Restore`]).
pub(super) struct Round {
    pub(super) seq: u64,
    /// The epoch this instance knows.
    pub(super) known: u64,
    pub(super) seen: Option<Beat>,
    pub(super) own: Beat,
    pub(super) own_windows: Vec<(WindowOf, u64, Counts)>,
    pub(super) slots: Vec<(Reservation, u64)>,
    /// The local admissions it writes.
    pub(super) snapshot: Vec<Entry>,
    /// Whether the snapshot is the whole local log.
    pub(super) complete: bool,
}

/// Settlements owed to the shared store: entries settled (`Some`) or released while written.
pub(super) type Unsettled = Vec<(Reservation, Option<ActualUsage>)>;

/// What a restore wrote, as the local log has it now.
#[derive(Default)]
struct Written {
    owed: Unsettled,
    /// In flight when written and still: shared reservations from now on.
    moved: Vec<Held>,
    /// In the shared windows now.
    counted: Vec<Replayed>,
}

impl Machine {
    /// The next round, at `now`. It stops admitting on its own before the snapshot, so that
    /// the snapshot is all it admitted: from then on it holds nothing the store has not been
    /// sent. A fresh snapshot is the whole log; one sent again (its reply never came) may miss
    /// what was admitted after it, while the store was away again.
    pub(super) fn plan_restore(&mut self, now: u64) -> Round {
        let own = self.own_since_read(now);
        let own_windows = self.own_rows(now);
        let slots = self
            .in_flight
            .values()
            .map(|h| (h.reservation.clone(), h.expiry))
            .collect();
        let grace = now + self.rejoin_grace();
        let log = match &mut self.admitting {
            Admitting::Local(l) => {
                l.closing.get_or_insert(grace);
                Some(&l.log)
            }
            _ => None,
        };
        let (seq, snapshot, complete) = match self.pending.take() {
            Some(Numbered {
                seq,
                sent: snapshot,
            }) => {
                let sent: HashSet<u64> = snapshot.iter().map(|e| e.reservation.id).collect();
                let complete = log.is_none_or(|log| log.keys().all(|id| sent.contains(id)));
                (seq, snapshot, complete)
            }
            None => {
                let snapshot = log.map_or_else(Vec::new, |log| log.values().cloned().collect());
                (self.next_seq(), snapshot, true)
            }
        };
        Round {
            seq,
            known: self.epoch,
            seen: self.seen.clone(),
            own,
            own_windows,
            slots,
            snapshot,
            complete,
        }
    }

    /// A round that wrote `written` was answered with `restored` at `now`. Drops what it wrote
    /// from the local log, and returns the settlements owed to the shared store for entries
    /// settled while it was written. Leaves local mode when nothing is left and no other
    /// instance still has to write back what it admitted on its own, or when it has waited
    /// for them for [`Machine::rejoin_grace`].
    pub(super) fn restored(
        &mut self,
        restored: &Restored,
        written: &[Entry],
        now: u64,
    ) -> (Unsettled, Next) {
        self.await_others(restored, now);
        self.epoch = restored.epoch;
        let (taken, written_back, others_back) = match &mut self.admitting {
            Admitting::Local(l) => {
                let taken = l.take_written(written);
                let given_up = l.closing.is_some_and(|until| now >= until);
                if restored.waiting > 0 && given_up {
                    tracing::warn!(
                        instances = restored.waiting,
                        "ledger: stopped waiting for other instances to write back what they \
                         admitted on their own"
                    );
                }
                (taken, l.log.is_empty(), restored.waiting == 0 || given_up)
            }
            _ => (Written::default(), true, true),
        };
        let next = match (written_back, others_back && self.awaiting().is_none()) {
            (false, _) => Next::Again,
            (true, false) => Next::Wait,
            (true, true) => Next::Done,
        };
        // What it wrote is in the shared windows now, as if admitted through them: it counts
        // in full should this instance go local again before a heartbeat reads it (see
        // `Reads`), and it is written back again should the store lose its keys.
        for w in &taken.counted {
            let tenant = w.reservation.tenant.as_ref().map(|t| TenantHold {
                cost_micros: w.cost,
                ..t.clone()
            });
            let admitted = Admitted {
                deployment: w.reservation.deployment,
                bucket: w.reservation.bucket,
                counts: w.counts,
                tenant: tenant.as_ref(),
            };
            self.remember(&admitted, now);
        }
        for h in taken.moved {
            self.in_flight.insert(h.reservation.id, h);
        }
        if next == Next::Done {
            self.go_shared(
                now,
                "the shared ledger answers again; local admissions written back",
            );
        }
        (taken.owed, next)
    }
}

impl Machine {
    /// A restore round (`seq`, writing `snapshot`) got no answer: `e`. One the store may have
    /// applied goes again under its number, and until it is answered the instance admits
    /// nothing on its own: the store may count it as back already, and the others may go back
    /// to the store without waiting for it. One the store surely did not apply leaves it
    /// admitting on its own share again, as a heartbeat that fails does (its next heartbeat
    /// says again that it holds admissions not written back: the rejoin hash).
    pub(super) fn restore_failed(&mut self, e: &LedgerError, seq: u64, snapshot: Vec<Entry>) {
        if e.maybe_applied() {
            let sent = snapshot;
            self.pending = Some(Numbered { seq, sent });
        } else {
            self.away_again();
        }
    }
}

impl Local {
    /// Takes what a restore wrote out of the log.
    fn take_written(&mut self, written: &[Entry]) -> Written {
        let mut taken = Written::default();
        for e in written {
            let Some(current) = self.log.remove(&e.reservation.id) else {
                continue;
            };
            taken.counted.extend(replayed(e));
            let was_in_flight = e.actual.is_none() && !e.released;
            let is_done = current.actual.is_some() || current.released;
            if was_in_flight && current.version != e.version && is_done {
                taken
                    .owed
                    .push((current.reservation.clone(), current.actual));
            } else if was_in_flight && !is_done {
                taken.moved.push(Held {
                    reservation: current.reservation.clone(),
                    expiry: current.expiry,
                });
            }
        }
        taken
    }
}
