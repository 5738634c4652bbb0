use super::*;

impl Inner {
    /// Settles (`actual`) or releases (`None`) `r` where it was admitted. `Ok(None)`: it was
    /// admitted by the shared store, which must settle it.
    pub(super) fn finish_here(
        &self,
        r: &Reservation,
        actual: Option<ActualUsage>,
    ) -> Result<Option<bool>, LedgerError> {
        let mut st = self.lock();
        if st.leases.finish(r.id, actual) {
            return Ok(Some(true));
        }
        st.in_flight.remove(&r.id);
        let now = self.now();
        match &mut st.admitting {
            Admitting::Local(l) => {
                let Some(entry) = l.log.get_mut(&r.id) else {
                    // A shared reservation: free the slot it holds here too.
                    free_slot(&l.table, &mut l.cells, r);
                    return Ok(None);
                };
                let engine = Engine {
                    table: &l.table,
                    now,
                };
                let done = engine.finish(
                    &mut l.cells,
                    r,
                    actual.unwrap_or_default(),
                    actual.is_none(),
                )?;
                if done {
                    entry.actual = actual;
                    entry.released = actual.is_none();
                    entry.version += 1;
                }
                Ok(Some(done))
            }
            Admitting::Open(ids) => Ok(ids.remove(&r.id).then_some(true)),
            Admitting::Shared => Ok(None),
        }
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
