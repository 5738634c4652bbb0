//! The [`Ledger`] operations of [`LeasedTenants`]: a leasing tenant's admission, and the
//! settlement of what it took from a block; the rest goes to the store as it is.

use super::*;

impl Ledger for LeasedTenants {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        let Some(spec) = self.leasing(need) else {
            return self.inner.admit(need, candidates);
        };
        async move {
            match self.admit_leased(spec, need, candidates).await {
                Some(admitted) => admitted,
                None => self.inner.admit(need, candidates).await,
            }
        }
        .boxed()
    }

    fn settle<'a>(
        &'a self,
        reservation: &'a Reservation,
        actual: ActualUsage,
    ) -> LedgerFuture<'a, bool> {
        if !self.blocks().finish(reservation.id, Some(used(actual))) {
            return self.inner.settle(reservation, actual);
        }
        let part = deployments_part(reservation);
        async move { self.inner.settle(&part, actual).await }.boxed()
    }

    fn release<'a>(&'a self, reservation: &'a Reservation) -> LedgerFuture<'a, bool> {
        if !self.blocks().finish(reservation.id, None) {
            return self.inner.release(reservation);
        }
        let part = deployments_part(reservation);
        async move { self.inner.release(&part).await }.boxed()
    }

    fn renew<'a>(&'a self, reservation: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        if !self.blocks().holds(reservation.id) {
            return self.inner.renew(reservation, ttl);
        }
        let part = deployments_part(reservation);
        async move { self.inner.renew(&part, ttl).await }.boxed()
    }

    fn cooldown(
        &self,
        deployment: DeploymentId,
        for_how_long: Duration,
    ) -> LedgerFuture<'_, Duration> {
        self.inner.cooldown(deployment, for_how_long)
    }

    fn observe(&self, deployment: DeploymentId, observation: Observation) -> LedgerFuture<'_, ()> {
        self.inner.observe(deployment, observation)
    }

    fn snapshot<'a>(
        &'a self,
        deployments: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        self.inner.snapshot(deployments)
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        self.inner.tenant_snapshot(tenant)
    }

    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        let held = |s: &Settlement| self.blocks().holds(s.reservation.id);
        if !batch.iter().any(held) {
            return self.inner.settle_batch(batch);
        }
        let parts: Vec<Settlement> = batch
            .iter()
            .map(|s| {
                let mine = self.blocks().finish(s.reservation.id, s.actual.map(used));
                if !mine {
                    return s.clone();
                }
                Settlement {
                    reservation: deployments_part(&s.reservation),
                    actual: s.actual,
                    observed: s.observed,
                }
            })
            .collect();
        async move { self.inner.settle_batch(&parts).await }.boxed()
    }

    fn leave<'a>(&'a self, ticket: u64, deployments: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        self.inner.leave(ticket, deployments)
    }

    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        self.inner.wakes()
    }

    fn health(&self) -> Option<Health> {
        self.inner.health().map(|mut h| {
            h.tenant_leased_in_flight = self.blocks().in_flight() as u64;
            h
        })
    }

    fn lease_tenant<'a>(
        &'a self,
        spec: &'a TenantSpec,
        ask: TenantAsk,
        corrections: &'a [TenantCorrection],
        call: u64,
    ) -> LedgerFuture<'a, TenantLeased> {
        self.inner.lease_tenant(spec, ask, corrections, call)
    }

    /// Ends every block and sends what is owed, then closes the store.
    fn close(&self) -> LedgerFuture<'_, ()> {
        async move {
            self.blocks().end_all();
            self.send_owed().await;
            self.inner.close().await
        }
        .boxed()
    }

    fn remote(&self) -> bool {
        self.inner.remote()
    }

    fn settles_apart(&self) -> bool {
        self.inner.settles_apart()
    }

    fn settle_here(&self, s: &Settlement) -> Option<Result<bool, LedgerError>> {
        if !self.blocks().holds(s.reservation.id) {
            return self.inner.settle_here(s);
        }
        let part = Settlement {
            reservation: deployments_part(&s.reservation),
            actual: s.actual,
            observed: s.observed,
        };
        let done = self.inner.settle_here(&part)?;
        self.blocks().finish(s.reservation.id, s.actual.map(used));
        Some(done)
    }
}
