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

impl Inner {
    /// Writes what the shared windows miss into them (see lua/restore.lua), then admits through
    /// them again. Rounds repeat while local admissions keep arriving; each is one call.
    pub(super) async fn restore(&self) -> Result<(), LedgerError> {
        let _one = self.restoring.lock().await;
        let uncertain = {
            let mut st = self.lock();
            st.forget_settled_uncertain(self.now());
            std::mem::take(&mut st.uncertain)
        };
        for (i, u) in uncertain.iter().enumerate() {
            if let Err(e) = self
                .timed(self.shared.void(&u.need, &u.candidates).boxed())
                .await
            {
                let mut st = self.lock();
                for u in &uncertain[i..] {
                    st.keep_uncertain(u.clone());
                }
                return Err(e);
            }
        }
        loop {
            let (seq, seen, own, own_windows, known, slots, snapshot, complete) = {
                let mut st = self.lock();
                let own = st.own_since_read(self.now());
                let own_windows = st.own_rows(self.now());
                let pending = st.pending.take();
                let slots: Vec<(Reservation, u64)> = st
                    .in_flight
                    .values()
                    .map(|h| (h.reservation.clone(), h.expiry))
                    .collect();
                // It stops admitting on its own before the snapshot, so that the snapshot is
                // all it admitted: from then on it holds nothing the store has not been sent.
                let grace = self.now() + self.rejoin_grace();
                if let Admitting::Local(l) = &mut st.admitting {
                    l.closing.get_or_insert(grace);
                }
                // A fresh snapshot is the whole log; one sent again may miss what was admitted
                // after it, while the store was away again.
                let (seq, snapshot, complete) = match pending {
                    Some((seq, snapshot)) => {
                        let sent: HashSet<u64> =
                            snapshot.iter().map(|e| e.reservation.id).collect();
                        let complete = match &st.admitting {
                            Admitting::Local(l) => l.log.keys().all(|id| sent.contains(id)),
                            _ => true,
                        };
                        (seq, snapshot, complete)
                    }
                    None => {
                        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
                        let snapshot = match &st.admitting {
                            Admitting::Local(l) => l.log.values().cloned().collect(),
                            _ => Vec::new(),
                        };
                        (seq, snapshot, true)
                    }
                };
                (
                    seq,
                    st.seen.clone(),
                    own,
                    own_windows,
                    st.epoch,
                    slots,
                    snapshot,
                    complete,
                )
            };
            let request = Restore {
                instance: &self.instance,
                seq,
                known_epoch: known,
                proposed_epoch: fastrand::u64(1..1 << 52),
                carry: seen.as_ref(),
                own_windows,
                own_spend: Some(&own),
                slots,
                entries: snapshot.iter().filter_map(replayed).collect(),
                complete,
            };
            let restored = match self.timed(self.shared.restore(&request).boxed()).await {
                Ok(restored) => restored,
                Err(e) => {
                    let mut st = self.lock();
                    if e.maybe_applied() {
                        st.pending = Some((seq, snapshot));
                    }
                    st.away_again();
                    return Err(e);
                }
            };
            self.shared.set_epoch(restored.epoch);
            log_restored(known, restored.lost);
            self.await_others(&restored);
            let (owed, done) = self.after_restore(&restored, &snapshot);
            for (reservation, actual) in owed {
                // In flight when written, settled since: the shared slot holds the estimate.
                let settle = match actual {
                    Some(actual) => self.shared.settle(&reservation, actual),
                    None => self.shared.release(&reservation),
                };
                if let Err(e) = self.timed(settle).await {
                    tracing::warn!(error = %e, "ledger: a settlement after restore failed");
                }
            }
            match done {
                Next::Done | Next::Wait => return Ok(()),
                Next::Again => {}
            }
        }
    }

    /// After a restore: whether admissions must stay local until the other instances have
    /// written back what the store lost (at most five heartbeats).
    pub(super) fn await_others(&self, restored: &Restored) {
        let mut st = self.lock();
        let now = self.now();
        // `open` admits uncounted anyway: nothing to wait for.
        if restored.stale && self.settings.on_error != OnError::Open {
            let expected = st.seen.as_ref().map_or(1, |b| b.instances);
            if restored.restored < expected {
                st.awaiting = Some((expected, now + self.rejoin_grace()));
                if st.mode() == Mode::Shared && self.settings.on_error == OnError::Local {
                    // Admitting nothing on its own while it waits: what it admitted would
                    // be missing from the windows when the others go back to them.
                    let n = st.enter_local(self, Some(now + self.rejoin_grace()));
                    tracing::warn!(
                        instances = n,
                        "ledger mode: local (the shared ledger lost its windows; waiting for \
                         the other instances to write theirs back)"
                    );
                }
            } else {
                st.awaiting = None;
            }
        } else if let Some((expected, until)) = st.awaiting
            && (restored.restored >= expected || now >= until)
        {
            st.awaiting = None;
        }
    }

    /// Drops what a restore wrote from the local log; settlements owed to the shared store for
    /// entries settled while it was written. Leaves local mode when nothing is left and no other
    /// instance still has to write back what it admitted on its own, or when it has waited for
    /// them for [`Self::rejoin_grace`].
    #[allow(clippy::type_complexity)]
    pub(super) fn after_restore(
        &self,
        restored: &Restored,
        written: &[Entry],
    ) -> (Vec<(Reservation, Option<ActualUsage>)>, Next) {
        let mut st = self.lock();
        st.epoch = restored.epoch;
        let now = self.now();
        let mut owed = Vec::new();
        let mut moved = Vec::new();
        let mut counted = Vec::new();
        let (written_back, others_back) = match &mut st.admitting {
            Admitting::Local(l) => {
                for e in written {
                    let Some(current) = l.log.remove(&e.reservation.id) else {
                        continue;
                    };
                    counted.extend(replayed(e));
                    let was_in_flight = e.actual.is_none() && !e.released;
                    let is_done = current.actual.is_some() || current.released;
                    if was_in_flight && current.version != e.version && is_done {
                        owed.push((current.reservation.clone(), current.actual));
                    } else if was_in_flight && !is_done {
                        moved.push(Held {
                            reservation: current.reservation.clone(),
                            expiry: current.expiry,
                        });
                    }
                }
                let given_up = l.closing.is_some_and(|until| now >= until);
                if restored.waiting > 0 && given_up {
                    tracing::warn!(
                        instances = restored.waiting,
                        "ledger: stopped waiting for other instances to write back what they \
                         admitted on their own"
                    );
                }
                (l.log.is_empty(), restored.waiting == 0 || given_up)
            }
            _ => (true, true),
        };
        let next = match (written_back, others_back && st.awaiting.is_none()) {
            (false, _) => Next::Again,
            (true, false) => Next::Wait,
            (true, true) => Next::Done,
        };
        // What it wrote is in the shared windows now, as if admitted through them: it counts
        // in full should this instance go local again before a heartbeat reads it (see
        // `Reads`), and it is written back again should the store lose its keys.
        for w in &counted {
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
            st.remember(self.shared.table(), &admitted, now);
        }
        for h in moved {
            st.in_flight.insert(h.reservation.id, h);
        }
        drop(st);
        if next == Next::Done {
            self.set_mode_shared("the shared ledger answers again; local admissions written back");
        }
        (owed, next)
    }
}

/// Says what a restore found: a store that had lost the windows this instance knew (their epoch,
/// `known`) is a loss; one holding no windows for a namespace this instance never saw (`known`
/// 0) is new, or was emptied before this instance first looked, which it cannot tell apart.
pub(super) fn log_restored(known: u64, lost: bool) {
    match (lost, known) {
        (false, _) => {}
        (true, 0) => tracing::info!(
            "the shared ledger holds no windows yet in this namespace (new, or emptied before \
             this instance started): started them"
        ),
        (true, _) => {
            tracing::warn!("the shared ledger had lost its windows; wrote back the last seen");
        }
    }
}
