use super::*;

impl Inner {
    /// Admission when the shared store failed with `e`: per `ledger.on_error`.
    pub(super) fn fall_back(
        &self,
        e: LedgerError,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        let mut st = self.lock();
        match self.settings.on_error {
            OnError::Closed => Err(e),
            OnError::Open => {
                if st.mode() == Mode::Shared {
                    tracing::warn!(error = %e, "ledger mode: open (admitting without counting)");
                    st.admitting = Admitting::Open(HashSet::new());
                    st.since = self.now();
                    st.changes += 1;
                }
                st.admit_elsewhere(self, need, candidates)
            }
            // Never seen by a heartbeat: how many instances share the limits is unknown, so no
            // share is safe. Fail as `closed` would until Redis has answered once.
            OnError::Local if st.seen.is_none() => Err(e),
            OnError::Local => {
                if st.mode() == Mode::Shared {
                    let local = st.enter_local(self, None);
                    tracing::warn!(
                        error = %e,
                        instances = local,
                        "ledger mode: local (admitting within this instance's share of each limit)"
                    );
                }
                st.admit_elsewhere(self, need, candidates)
            }
        }
    }

    pub(super) async fn admit(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        {
            let mut st = self.lock();
            if let Some(t) = &need.tenant {
                let now = self.now();
                match st.tenants.get_mut(&t.spec.name) {
                    Some(at) => *at = now,
                    None => {
                        st.tenants.insert(t.spec.name.clone(), now);
                    }
                }
            }
            if let Some(decided) = st.elsewhere(self, need, candidates) {
                return decided;
            }
        }
        let (mut result, mut call) = match self.admit_leased(need, candidates).await {
            // Admitted from a block (the block's grant counted it), or decided elsewhere
            // meanwhile: nothing of it is held through the shared store.
            Some(Ok(admission)) => return Ok(admission),
            Some(Err(e)) => (Err(e), None),
            None => match self.admit_shared(need, candidates).await {
                Ok((answer, call)) => (answer, Some(call)),
                Err(decided) => return decided,
            },
        };
        // One slow answer is not an outage: the same admission goes once more (Redis answers a
        // repeat with the first one's grant if it ran it) before the instance goes local. One
        // that went local on every slow call would admit on its own while the others, answered,
        // fill the shared windows without counting what it admitted.
        let mut superseded = None;
        let retry = call.is_some() && self.settings.on_error == OnError::Local;
        if retry && result.as_ref().is_err_and(slow) {
            match self.admit_shared(need, candidates).await {
                Ok((answer, again)) => {
                    superseded = call.replace(again);
                    result = answer;
                }
                Err(decided) => {
                    // Decided in the local ledger, which counts the first call: the slot it
                    // holds on the deployment admitted on is that admission's now.
                    let granted = match &decided {
                        Ok(Admission::Granted(r)) => Some(r.deployment),
                        _ => None,
                    };
                    let mut st = self.lock();
                    if let Some(first) = call.take() {
                        first.done(&mut st, granted);
                    }
                    st.unsure(need, candidates, self.now());
                    return decided;
                }
            }
        }
        // The first call may still be run late (on a connection Redis has not read yet).
        let retried = superseded.is_some();
        if let Err(LedgerError::Lost { .. }) = result {
            drop(call.take());
            result = match self.restore().await {
                Ok(()) => match self.admit_shared(need, candidates).await {
                    Ok((answer, again)) => {
                        call = Some(again);
                        answer
                    }
                    Err(decided) => return decided,
                },
                Err(e) => Err(e),
            };
        }
        if !matches!(result, Ok(Admission::Granted(_))) {
            // Not admitted through the store: a local ledger started from now on does not
            // count it (one started from a timeout admits it there instead).
            let mut st = self.lock();
            for call in [call.take(), superseded.take()].into_iter().flatten() {
                call.done(&mut st, None);
            }
        }
        match result {
            Ok(Admission::Granted(r)) => {
                let expiry = self.now() + need.slot_ttl_ms();
                let held = Held {
                    reservation: r.clone(),
                    expiry,
                };
                let mut st = self.lock();
                st.remember(self.shared.table(), &Admitted::request(&r), self.now());
                st.in_flight.insert(r.id, held);
                for call in [call, superseded].into_iter().flatten() {
                    call.done(&mut st, Some(r.deployment));
                }
                // The router asks again under the same id after a denial: an earlier admission
                // of this request kept as uncertain is this grant (Redis answers a repeat with
                // the first grant), in use, not to be handed back.
                if !st.uncertain.is_empty() {
                    st.uncertain.retain(|u| u.need.id != r.id);
                }
                Ok(Admission::Granted(r))
            }
            Ok(denied) => {
                if retried {
                    self.lock().unsure(need, candidates, self.now());
                }
                Ok(denied)
            }
            Err(e) if unavailable(&e) || matches!(e, LedgerError::Lost { .. }) => {
                if e.maybe_applied() || retried {
                    self.lock().unsure(need, candidates, self.now());
                }
                self.fall_back(e, need, candidates)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends `need`'s admission to the shared store, registered in [`State::calling`] until
    /// answered. `Err`: the instance no longer admits through the store, and decided there.
    pub(super) async fn admit_shared(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<(Result<Admission, LedgerError>, Called<'_>), Result<Admission, LedgerError>> {
        let call = {
            let mut st = self.lock();
            if let Some(decided) = st.elsewhere(self, need, candidates) {
                return Err(decided);
            }
            self.register(&mut st, Calling::request(need, candidates, self.now()))
        };
        // Dropped while the store has it (its caller went away), the admission is voided; one
        // that times out is this instance's to settle (see `State::uncertain`).
        let abandoned = self.shared.abandoned(need, candidates);
        let answer = self
            .timed(self.shared.admit_inner(need, candidates).boxed())
            .await;
        abandoned.disarm();
        Ok((answer, call))
    }

    /// Registers `calling` in `st` (which admits through the shared store).
    pub(super) fn register(&self, st: &mut State, calling: Calling) -> Called<'_> {
        let key = self.calls.fetch_add(1, Ordering::Relaxed);
        st.calling.insert(key, calling);
        Called {
            inner: self,
            key,
            open: true,
        }
    }
}
