//! Settling and releasing: where a reservation was admitted decides where it is finished.

use super::*;

impl Machine {
    /// Settles (`actual`) or releases (`None`) `r` where it was admitted, at `now`: its leased
    /// block, the local ledger, or open mode. `Ok(None)`: it was admitted by the shared store,
    /// which must settle it (the slot it holds in a local ledger is freed here).
    pub(super) fn finish_here(
        &mut self,
        r: &Reservation,
        actual: Option<ActualUsage>,
        now: u64,
    ) -> Result<Option<bool>, LedgerError> {
        if self.leases.finish(r.id, actual) {
            return Ok(Some(true));
        }
        self.in_flight.remove(&r.id);
        match &mut self.admitting {
            Admitting::Local(l) => l.finish(r, actual, now).transpose(),
            Admitting::Open(ids) => Ok(ids.remove(&r.id).then_some(true)),
            Admitting::Shared | Admitting::Rebuilding(_) => Ok(None),
        }
    }
}

impl Inner {
    /// See [`Machine::finish_here`].
    pub(super) fn finish_here(
        &self,
        r: &Reservation,
        actual: Option<ActualUsage>,
    ) -> Result<Option<bool>, LedgerError> {
        self.lock().finish_here(r, actual, self.now())
    }

    pub(super) async fn finish(
        &self,
        r: &Reservation,
        actual: Option<ActualUsage>,
    ) -> Result<bool, LedgerError> {
        if let Some(done) = self.finish_here(r, actual)? {
            return Ok(done);
        }
        let fut = match actual {
            Some(actual) => self.shared.settle(r, actual),
            None => self.shared.release(r),
        };
        self.timed(fut).await
    }
}
