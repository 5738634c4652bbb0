use super::*;

/// A registered [`Calling`]. Once its answer is handled (or the call abandoned: dropped), a
/// local ledger started later no longer counts it.
pub(super) struct Called<'a> {
    pub(super) inner: &'a Inner,
    pub(super) key: u64,
    /// Still registered (dropping it then takes the state lock).
    pub(super) open: bool,
}

impl Called<'_> {
    /// Its answer is handled, in `st` (what it admitted, if anything, counted as this
    /// instance's own); `granted`: the deployment it admitted on.
    pub(super) fn done(mut self, st: &mut Machine, granted: Option<DeploymentId>) {
        self.open = false;
        if let Some(c) = st.calling.remove(&self.key)
            && let Admitting::Local(l) = &mut st.admitting
        {
            c.unhold(&l.table, &mut l.cells, granted);
        }
    }
}

impl Drop for Called<'_> {
    fn drop(&mut self) {
        if self.open {
            self.inner.lock().calling.remove(&self.key);
        }
    }
}

/// A block call and the corrections it carries (see [`Leases`]), from when they are taken from
/// the leases until the call's answer says what became of them. Without an answer (the call
/// failed in a way that may have left it run, or its caller went away), it is sent again under
/// the same id by a later heartbeat: see [`Unanswered`].
pub(super) struct Carried<'a> {
    pub(super) inner: &'a Inner,
    pub(super) d: DeploymentId,
    /// The call's id (its record in the store, see lua/common.lua).
    pub(super) call: u64,
    pub(super) owed: Vec<(u64, [i64; 4])>,
    /// Its answer (or failure) was taken in.
    pub(super) done: bool,
}

impl Carried<'_> {
    /// The call answered (`None`) or failed with `error`: if the store surely did not run it,
    /// its corrections are owed again whole; if it may have, it is kept to send again.
    pub(super) fn answered(mut self, error: Option<&LedgerError>) {
        self.done = true;
        let owed = std::mem::take(&mut self.owed);
        let Some(e) = error else {
            return;
        };
        if e.not_applied() {
            let mut st = self.inner.lock();
            for (bucket, deltas) in owed {
                st.leases.owe_again(Owed {
                    deployment: self.d,
                    bucket,
                    deltas,
                    observed: None,
                });
            }
        } else {
            self.unanswered(owed);
        }
    }

    pub(super) fn unanswered(&self, carried: Vec<(u64, [i64; 4])>) {
        let sent = self.inner.now();
        let mut st = self.inner.lock();
        st.leases.unanswered(Unanswered {
            deployment: self.d,
            call: self.call,
            carried,
            sent,
        });
        self.inner.wake_for_moves(&st);
    }
}

/// A beat's corrections and their number while the beat is out: if its caller goes away
/// before the answer, they are kept to go again under that number (see [`Machine::carrying`]),
/// as after a beat that got no answer.
pub(super) struct Beating<'a> {
    pub(super) inner: &'a Inner,
    pub(super) carried: Option<(u64, Vec<Owed>)>,
}

impl Drop for Beating<'_> {
    fn drop(&mut self) {
        if let Some(carried) = self.carried.take() {
            self.inner.lock().carrying = Some(carried);
        }
    }
}

/// Corrections sent one call each (at close): if their caller goes away before every answer
/// came, the one out may have been applied (see [`Leases::owe_unsure`]) and the rest are owed
/// as they were.
pub(super) struct Unleasing<'a> {
    pub(super) inner: &'a Inner,
    pub(super) out: Option<Owed>,
    pub(super) rest: std::vec::IntoIter<Owed>,
}

impl Drop for Unleasing<'_> {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        if let Some(o) = self.out.take() {
            st.leases.owe_unsure(o);
        }
        for o in self.rest.by_ref() {
            st.leases.owe_again(o);
        }
    }
}

/// Block calls being asked again: kept for the next heartbeat if dropped before their answers.
pub(super) struct Asking<'a> {
    pub(super) inner: &'a Inner,
    pub(super) calls: Vec<Unanswered>,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        for u in self.calls.drain(..) {
            st.leases.still_unanswered(u);
        }
    }
}

impl Drop for Carried<'_> {
    fn drop(&mut self) {
        if !self.done {
            // The caller went away before the answer.
            let owed = std::mem::take(&mut self.owed);
            self.unanswered(owed);
        }
    }
}

/// A block asked for ahead, from its spawning until its task ends, however it ends (done,
/// panicked, aborted, or dropped unpolled with its runtime): then another may be asked for on
/// its deployment, and [`ResilientStore::refills_done`] counts it no longer.
pub(super) struct Refilling {
    pub(super) inner: Arc<Inner>,
    pub(super) d: DeploymentId,
}

impl Drop for Refilling {
    fn drop(&mut self) {
        self.inner.refilling[self.d.0].store(false, Ordering::Release);
        if self.inner.refills.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.refilled.notify_waiters();
        }
    }
}
