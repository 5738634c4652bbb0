//! The block calls: asked for a request, carrying what the tenant owes; sent again when their
//! answer was lost; and the corrections sent on their own, every second and at close.

use super::*;

impl LeasedTenants {
    /// Asks for a block of `spec`'s tenant (one call at a time per tenant), carrying what it
    /// owes, and takes `most` from it for request `id`: the second it counts in, or `None`
    /// when none was granted.
    pub(super) async fn ask_block(&self, spec: &TenantSpec, id: u64, most: Amounts) -> Option<u64> {
        let name = spec.name.as_str();
        let _one = self.asking(name).lock().await;
        // A call made while this request waited may have opened a block.
        if let Some(bucket) = self.blocks().take(name, id, most, self.now()) {
            return Some(bucket);
        }
        let instances = self.inner.health().map_or(1, |h| h.instances);
        let (ask, carried) = {
            let mut blocks = self.blocks();
            blocks.end(name);
            let ask = blocks.ask(name, most, instances, self.now());
            (ask, blocks.take_owed(name))
        };
        let sent = self.now();
        match self.send(spec, ask, carried, fastrand::u64(..)).await? {
            TenantLeased::Granted {
                amounts,
                bucket,
                store_now,
                window,
            } => {
                let mut blocks = self.blocks();
                blocks.open(name, amounts, bucket, window, (store_now, sent));
                blocks.take_asked(name, id, most, self.now())
            }
            TenantLeased::Refused => {
                self.blocks().refused(name, self.now());
                None
            }
            TenantLeased::Unavailable => None,
        }
    }

    /// Sends one block call carrying `carried`. `None`: it failed; what it carried is owed
    /// again when the store surely did not apply it, or sent again under `call` when it may
    /// have (as it is when this future is dropped unanswered). Not sent (`Unavailable`), what it
    /// carried is owed again.
    async fn send(
        &self,
        spec: &TenantSpec,
        ask: TenantAsk,
        carried: Vec<TenantCorrection>,
        call: u64,
    ) -> Option<TenantLeased> {
        let mut pending = Pending {
            blocks: &self.blocks,
            call: Some(Unanswered {
                tenant: spec.name.clone(),
                call,
                carried,
                sent: self.now(),
            }),
        };
        let carried = pending.carried();
        let answer = self.inner.lease_tenant(spec, ask, &carried, call).await;
        let unanswered = pending.call.take()?;
        match answer {
            Ok(TenantLeased::Unavailable) => {
                self.blocks().owe_again(&spec.name, &unanswered.carried);
                Some(TenantLeased::Unavailable)
            }
            Ok(leased) => Some(leased),
            // The store lost its windows since: nothing of theirs is left to correct.
            Err(LedgerError::Lost { .. }) => None,
            Err(e) if e.not_applied() => {
                self.blocks().owe_again(&spec.name, &unanswered.carried);
                None
            }
            Err(e) => {
                if e.maybe_applied() {
                    self.blocks().unanswered(unanswered);
                }
                tracing::debug!(error = %e, "ledger: a tenant block call failed; admitting exactly");
                None
            }
        }
    }

    /// Sends again the calls that got no answer, then what the tenants owe (the blocks whose
    /// second is over end first).
    pub(super) async fn send_owed(&self) {
        // Calls sent again first: what they granted is then owed, and goes below.
        let unanswered = self.blocks().take_unanswered(self.now());
        for u in unanswered {
            self.send_again(u).await;
        }
        let owing = {
            let mut blocks = self.blocks();
            blocks.end_expired(self.now());
            blocks.owing()
        };
        for tenant in owing {
            let _one = self.asking(&tenant).lock().await;
            let carried = self.blocks().take_owed(&tenant);
            if !carried.is_empty() {
                let spec = bare(&tenant);
                self.send(&spec, TenantAsk::NOTHING, carried, fastrand::u64(..))
                    .await;
            }
        }
    }

    /// Sends call `u` again under its id, asking for no block: it answers as it ran (what it
    /// granted is given back) or runs now.
    async fn send_again(&self, u: Unanswered) {
        let _one = self.asking(&u.tenant).lock().await;
        let spec = bare(&u.tenant);
        let answer = self
            .inner
            .lease_tenant(&spec, TenantAsk::NOTHING, &u.carried, u.call)
            .await;
        let mut blocks = self.blocks();
        match answer {
            Ok(TenantLeased::Granted {
                amounts, bucket, ..
            }) => blocks.answered_late(&u.tenant, Some((amounts, bucket))),
            Ok(TenantLeased::Refused) | Err(LedgerError::Lost { .. }) => {}
            Ok(TenantLeased::Unavailable) | Err(_) => blocks.unanswered(u),
        }
    }
}

/// A block call out: dropped before its answer, it is kept to be sent again.
struct Pending<'a> {
    blocks: &'a Mutex<Blocks>,
    call: Option<Unanswered>,
}

impl Pending<'_> {
    fn carried(&self) -> Vec<TenantCorrection> {
        self.call
            .as_ref()
            .map_or_else(Vec::new, |u| u.carried.clone())
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(u) = self.call.take() {
            let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
            blocks.unanswered(u);
        }
    }
}

/// Sends what is owed every [`SEND_OWED_EVERY`] while the ledger lives.
pub(super) async fn keep_sending(ledger: Weak<LeasedTenants>) {
    let mut tick = tokio::time::interval(SEND_OWED_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(ledger) = ledger.upgrade() else {
            return;
        };
        ledger.send_owed().await;
    }
}
