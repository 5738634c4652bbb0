//! The restore: the calls that write what the shared windows miss back into them (see
//! lua/restore.lua). The machine plans each round and takes in its answer (see
//! `written.rs`); this file makes the calls.

use super::*;

impl Inner {
    /// Writes what the shared windows miss into them, then admits through them again. The
    /// admissions Redis may have counted without this instance knowing go first (voided);
    /// rounds repeat while local admissions keep arriving, each one call.
    pub(super) async fn restore(&self) -> Result<(), LedgerError> {
        self.void_uncertain().await?;
        loop {
            let round = self.lock().plan_restore(self.now());
            match self.restore_round(round).await? {
                Next::Done | Next::Wait => return Ok(()),
                Next::Again => {}
            }
        }
    }

    /// Hands back, one call each, the admissions Redis may have counted though this instance
    /// got no grant (see [`Machine::uncertain`]); those not handed back are kept.
    async fn void_uncertain(&self) -> Result<(), LedgerError> {
        let uncertain = {
            let mut st = self.lock();
            st.forget_settled_uncertain(self.now());
            std::mem::take(&mut st.uncertain)
        };
        for (i, u) in uncertain.iter().enumerate() {
            let void = self.shared.void(&u.need, &u.candidates).boxed();
            if let Err(e) = self.timed(void).await {
                let mut st = self.lock();
                for u in &uncertain[i..] {
                    st.keep_uncertain(u.clone());
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Sends one round and takes in its answer; then settles in the store what was settled
    /// here while it was written.
    async fn restore_round(&self, round: Round) -> Result<Next, LedgerError> {
        let request = Restore {
            instance: &self.instance,
            seq: round.seq,
            known_epoch: round.known,
            proposed_epoch: fastrand::u64(1..1 << 52),
            carry: round.seen.as_ref(),
            own_windows: round.own_windows,
            own_spend: Some(&round.own),
            slots: round.slots,
            entries: round.snapshot.iter().filter_map(replayed).collect(),
            complete: round.complete,
        };
        let restored = match self.timed(self.shared.restore(&request).boxed()).await {
            Ok(restored) => restored,
            Err(e) => {
                self.lock().restore_failed(&e, round.seq, round.snapshot);
                return Err(e);
            }
        };
        self.shared.set_epoch(restored.epoch);
        log_restored(round.known, restored.lost);
        let (owed, next) = self.lock().restored(&restored, &round.snapshot, self.now());
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
        Ok(next)
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
            counts: Counts::new(1, a.tokens, a.input_tokens, a.output_tokens()),
            expiry: 0,
            cost: a.cost_micros,
        },
        None => Replayed {
            reservation: r.clone(),
            counts: Counts::request(r.tokens, r.input_tokens),
            expiry: e.expiry,
            cost: hold_cost,
        },
    })
}
