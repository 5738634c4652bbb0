//! The [`Ledger`] operations of the Redis store, each one script call.

use super::*;

impl Ledger for RedisStore {
    fn lease_tenant<'a>(
        &'a self,
        spec: &'a crate::ledger::TenantSpec,
        ask: crate::ledger::TenantAsk,
        corrections: &'a [crate::ledger::TenantCorrection],
        call: u64,
    ) -> LedgerFuture<'a, crate::ledger::TenantLeased> {
        Box::pin(self.lease_tenant_block(spec, ask, corrections, call))
    }

    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        async move {
            let abandoned = self.abandoned(need, candidates);
            let admission = self.admit_inner(need, candidates).await;
            // One that got no answer may have been counted after all: voided, as if abandoned.
            if !admission.as_ref().is_err_and(LedgerError::maybe_applied) {
                abandoned.disarm();
            }
            admission
        }
        .boxed()
    }

    fn settle<'a>(&'a self, r: &'a Reservation, actual: ActualUsage) -> LedgerFuture<'a, bool> {
        self.finish(r, actual, 0, None).boxed()
    }

    fn leave<'a>(&'a self, ticket: u64, ds: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        self.leave_inner(ticket, ds).boxed()
    }

    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        Some(self.wakes.subscribe())
    }

    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        self.finish(r, ActualUsage::default(), -1, None).boxed()
    }

    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        self.renew_inner(r, ttl).boxed()
    }

    fn cooldown(&self, d: DeploymentId, dur: Duration) -> LedgerFuture<'_, Duration> {
        self.cooldown_inner(d, dur).boxed()
    }

    fn observe(&self, d: DeploymentId, obs: Observation) -> LedgerFuture<'_, ()> {
        self.observe_inner(d, obs).boxed()
    }

    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        // Sent together on the multiplexed connection: one write, one round trip for all.
        join_all(batch.iter().map(|s| match s.actual {
            Some(actual) => self.finish(&s.reservation, actual, 0, s.observed.as_ref()),
            None => self.finish(
                &s.reservation,
                ActualUsage::default(),
                -1,
                s.observed.as_ref(),
            ),
        }))
        .boxed()
    }

    fn remote(&self) -> bool {
        true
    }

    /// Waits for the voids of abandoned admissions still running.
    fn close(&self) -> LedgerFuture<'_, ()> {
        async move {
            self.voids.wait().await;
            Ok(())
        }
        .boxed()
    }

    fn snapshot<'a>(&'a self, ds: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        self.snapshot_inner(ds).boxed()
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        async move {
            let mut inv = TENANT_SNAPSHOT.prepare_invoke();
            self.push_tenant_keys(&mut inv, &tenant.name);
            inv.arg(self.now_arg());
            let reply = self.run(&inv).await?;
            reply::tenant_snapshot(&reply, tenant)
                .ok_or_else(|| self.protocol("tenant_snapshot.lua", &reply))
        }
        .boxed()
    }
}
