//! Admission: from a leased block, or through the shared store, with a second sending after a
//! slow answer and a restore after a lost one; what the machine decides when the store fails.

use super::*;

/// The call to the shared store one admission has out, and whether it was sent again after
/// a slow answer.
pub(super) struct Sent<'a> {
    last: Option<Out<'a>>,
    again: bool,
}

impl Inner {
    /// Where `need` goes now (see [`Machine::route`]): `None`, to the shared store; else what
    /// was decided here.
    pub(super) fn routed(
        &self,
        st: &mut Machine,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Option<Result<Admission, LedgerError>> {
        match st.route(need, candidates, self.now()) {
            Route::Store => None,
            Route::Here(decided) => Some(decided),
            Route::Rebuilding => Some(Err(LedgerError::Lost {
                url: self.shared.url().to_owned(),
            })),
        }
    }

    pub(super) async fn admit(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        {
            let mut st = self.lock();
            for spec in need.tenant.iter().flat_map(|t| &t.specs) {
                st.served(&spec.name, self.now());
            }
            if let Some(decided) = self.routed(&mut st, need, candidates) {
                return decided;
            }
        }
        let (result, last) = match self.admit_leased(need, candidates).await {
            // Admitted from a block (the block's grant counted it), or decided elsewhere
            // meanwhile: nothing of it is held through the shared store. A ticket it held in
            // the shared lines leaves them, off the request's path.
            Some(Ok(admission)) => {
                if let (Admission::Granted(_), Some(t)) = (&admission, need.line)
                    && t.queued
                {
                    self.leave_later(t.id, candidates);
                }
                return Ok(admission);
            }
            Some(Err(e)) => (Err(e), None),
            None => match self.admit_shared(need, candidates, None).await {
                Ok((answer, call)) => (answer, Some(call)),
                Err(decided) => return decided,
            },
        };
        let mut sent = Sent { last, again: false };
        let result = match self
            .again_if_slow(need, candidates, result, &mut sent)
            .await
        {
            Ok(result) => result,
            Err(decided) => return decided,
        };
        // The first call may still be run late (on a connection Redis has not read yet).
        let retried = sent.again;
        let result = match self
            .again_if_lost(need, candidates, result, &mut sent)
            .await
        {
            Ok(result) => result,
            Err(decided) => return decided,
        };
        self.conclude(need, candidates, result, sent, retried)
    }

    /// One slow answer is not an outage: the same admission goes once more (Redis answers a
    /// repeat with the first one's grant if it ran it) before the instance goes local. One that
    /// went local on every slow call would admit on its own while the others, answered, fill
    /// the shared windows without counting what it admitted. `Err`: decided here meanwhile.
    async fn again_if_slow<'a>(
        &'a self,
        need: &Need,
        candidates: &[DeploymentId],
        result: Result<Admission, LedgerError>,
        sent: &mut Sent<'a>,
    ) -> Result<Result<Admission, LedgerError>, Result<Admission, LedgerError>> {
        let retry = sent.last.is_some() && self.settings.on_error == OnError::Local;
        if !retry || !result.as_ref().is_err_and(slow) {
            return Ok(result);
        }
        sent.again = true;
        let first = sent.last.take();
        match self.admit_shared(need, candidates, first).await {
            Ok((answer, again)) => {
                sent.last = Some(again);
                Ok(answer)
            }
            Err(decided) => {
                self.lock().unsure(need, candidates, self.now());
                Err(decided)
            }
        }
    }

    /// The store lost its keys: restores them, then sends the admission again. `Err`: decided
    /// here meanwhile.
    async fn again_if_lost<'a>(
        &'a self,
        need: &Need,
        candidates: &[DeploymentId],
        result: Result<Admission, LedgerError>,
        sent: &mut Sent<'a>,
    ) -> Result<Result<Admission, LedgerError>, Result<Admission, LedgerError>> {
        let Err(LedgerError::Lost { .. }) = result else {
            return Ok(result);
        };
        drop(sent.last.take());
        if let Err(e) = self.restore_by_driver().await {
            return Ok(Err(e));
        }
        let (answer, again) = self.admit_shared(need, candidates, None).await?;
        sent.last = Some(again);
        Ok(answer)
    }

    /// What the store answered, taken in: a grant is held and counted as this instance's own;
    /// a failure falls back per `ledger.on_error`. Either way the calls are answered.
    fn conclude(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
        result: Result<Admission, LedgerError>,
        sent: Sent<'_>,
        retried: bool,
    ) -> Result<Admission, LedgerError> {
        let mut st = self.lock();
        let now = self.now();
        let calls = sent.last.into_iter();
        let granted = match &result {
            Ok(Admission::Granted(r)) => Some(r.deployment),
            _ => None,
        };
        // Not admitted through the store: a local ledger started from now on does not count
        // it (one started from a timeout admits it there instead).
        for call in calls {
            call.done(&mut st, granted);
        }
        st.take_answer(need, candidates, result, retried, now)
    }

    /// Sends `need`'s admission to the shared store, registered in [`Machine::calling`] until
    /// answered. `Err`: the instance no longer admits through the store, and decided there.
    /// A sending again supersedes the `first` call: that one is answered (nothing granted)
    /// before the admission goes anywhere, so that a local ledger decides it by its room, not
    /// by the slot it held for the first call. What the first call counted there stays: the
    /// safe side.
    /// Takes `ticket` out of the shared lines of `candidates` on a task (a request admitted
    /// from a leased block while it stood in them).
    fn leave_later(&self, ticket: u64, candidates: &[DeploymentId]) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, candidates) = (self.shared.clone(), candidates.to_vec());
        runtime.spawn(async move {
            if let Err(e) = shared.leave(ticket, &candidates).await {
                tracing::debug!(error = %e, "could not leave the shared lines; the ticket expires");
            }
        });
    }

    pub(super) async fn admit_shared<'a>(
        &'a self,
        need: &Need,
        candidates: &[DeploymentId],
        first: Option<Out<'a>>,
    ) -> Result<(Result<Admission, LedgerError>, Out<'a>), Result<Admission, LedgerError>> {
        let call = {
            let mut st = self.lock();
            if let Some(first) = first {
                first.done(&mut st, None);
            }
            if let Some(decided) = self.routed(&mut st, need, candidates) {
                return Err(decided);
            }
            self.register(&mut st, Calling::request(need, candidates, self.now()))
        };
        // Dropped while the store has it (its caller went away), the admission is voided; one
        // that times out is this instance's to settle (see `Machine::uncertain`).
        let abandoned = self.shared.abandoned(need, candidates);
        let answer = self
            .timed(self.shared.admit_inner(need, candidates).boxed())
            .await;
        abandoned.disarm();
        Ok((answer, call))
    }

    /// Registers `calling` in `st` (which admits through the shared store).
    pub(super) fn register(&self, st: &mut Machine, calling: Calling) -> Out<'_> {
        Out::register(self, st, calling, None)
    }
}

impl Machine {
    /// What the store answered for `need` (`retried`: sent again after a slow answer), taken
    /// in at `now`, its calls answered: a grant is held and counted as this instance's own; a
    /// failure falls back per `ledger.on_error`; one the store may have counted is kept to be
    /// voided.
    pub(super) fn take_answer(
        &mut self,
        need: &Need,
        candidates: &[DeploymentId],
        result: Result<Admission, LedgerError>,
        retried: bool,
        now: u64,
    ) -> Result<Admission, LedgerError> {
        match result {
            Ok(Admission::Granted(r)) => {
                self.remember(&Admitted::request(&r), now);
                let expiry = now + need.slot_ttl_ms();
                let held = Held {
                    reservation: r.clone(),
                    expiry,
                };
                self.in_flight.insert(r.id, held);
                // The router asks again under the same id after a denial: an earlier admission
                // of this request kept as uncertain is this grant (Redis answers a repeat with
                // the first grant), in use, not to be handed back.
                if !self.uncertain.is_empty() {
                    self.uncertain.retain(|u| u.need.id != r.id);
                }
                Ok(Admission::Granted(r))
            }
            Ok(denied) => {
                if retried {
                    self.unsure(need, candidates, now);
                }
                Ok(denied)
            }
            Err(e) if unavailable(&e) || matches!(e, LedgerError::Lost { .. }) => {
                if e.maybe_applied() || retried {
                    self.unsure(need, candidates, now);
                }
                self.fall_back(e, need, candidates, now)
            }
            Err(e) => Err(e),
        }
    }
}
