//! A call to the shared store in flight: the one guard of the resilient ledger.

use super::*;

/// A call to the shared store that may admit (see [`Calling`]), from its sending until its
/// answer is taken in, with the corrections a block call carries (see [`Leases`]). Its answer
/// taken in ([`Out::answered`], [`Out::done`]), it tells the machine what became of it. Dropped
/// before that (its caller went away), it tells the machine too: a local ledger started later
/// no longer counts the call, and its corrections are kept to go again under the same call id
/// (see [`Unanswered`]), as after a call that may have run.
pub(super) struct Out<'a> {
    inner: &'a Inner,
    /// Its number in [`Machine::calling`], while registered there.
    key: Option<u64>,
    /// A block call's corrections, until its answer (or failure) is taken in.
    carried: Option<Carried>,
}

/// The corrections a block call carries.
pub(super) struct Carried {
    pub(super) d: DeploymentId,
    /// The call's id (its record in the store, see lua/common.lua).
    pub(super) call: u64,
    pub(super) owed: Vec<(u64, Deltas)>,
}

impl<'a> Out<'a> {
    /// Registers `calling` in `st` (which admits through the shared store), with what it
    /// carries.
    pub(super) fn register(
        inner: &'a Inner,
        st: &mut Machine,
        calling: Calling,
        carried: Option<Carried>,
    ) -> Self {
        let key = st.next_call;
        st.next_call += 1;
        st.calling.insert(key, calling);
        Self {
            inner,
            key: Some(key),
            carried,
        }
    }

    /// The corrections it carries, and the call's id (none and 0 for an admission).
    pub(super) fn carried(&self) -> (&[(u64, Deltas)], u64) {
        self.carried
            .as_ref()
            .map_or((&[], 0), |c| (c.owed.as_slice(), c.call))
    }

    /// The call answered (`None`) or failed with `error`: if the store surely did not run it,
    /// its corrections are owed again whole; if it may have, they are kept to go again.
    pub(super) fn answered(&mut self, error: Option<&LedgerError>) {
        let (Some(c), Some(e)) = (self.carried.take(), error) else {
            return;
        };
        let now = self.inner.now();
        let mut st = self.inner.lock();
        if e.not_applied() {
            for (bucket, deltas) in c.owed {
                st.leases.owe_again(Owed {
                    deployment: c.d,
                    bucket,
                    deltas,
                    observed: None,
                });
            }
        } else {
            self.inner.unanswered(&mut st, c, now);
        }
    }

    /// Its answer is handled, in `st` (what it admitted, if anything, counted as this
    /// instance's own); `granted`: the deployment it admitted on.
    pub(super) fn done(mut self, st: &mut Machine, granted: Option<DeploymentId>) {
        if let Some(c) = self.carried.take() {
            self.inner.unanswered(st, c, self.inner.now());
        }
        if let Some(c) = self.key.take().and_then(|key| st.calling.remove(&key))
            && let Admitting::Local(l) = &mut st.admitting
        {
            c.unhold(&l.table, &mut l.cells, granted);
        }
    }
}

impl Drop for Out<'_> {
    fn drop(&mut self) {
        if self.key.is_none() && self.carried.is_none() {
            return;
        }
        let now = self.inner.now();
        let mut st = self.inner.lock();
        if let Some(key) = self.key.take() {
            st.calling.remove(&key);
        }
        if let Some(c) = self.carried.take() {
            self.inner.unanswered(&mut st, c, now);
        }
    }
}

impl Inner {
    /// Keeps block call `c`, which got no answer (at `now`), to send again.
    fn unanswered(&self, st: &mut Machine, c: Carried, now: u64) {
        st.leases.unanswered(Unanswered {
            deployment: c.d,
            call: c.call,
            carried: c.owed,
            sent: now,
        });
        self.wake_for_moves(st);
    }
}
