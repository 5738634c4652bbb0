//! The [`Ledger`] trait over the resilient store: each operation where its reservation was
//! admitted, the shared store's reads with the local ledger's when the store is away.

use super::*;
use crate::ledger::TenantSpec;
use crate::ledger::tenant_leases::{TenantAsk, TenantCorrection, TenantLeased};

impl Ledger for ResilientStore {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        async move {
            // Read first: should the leases be settled while this admission is out, the block
            // it would ask for ahead is not asked for (see `Inner::refill`).
            let closes = self.inner.closes.load(Ordering::Acquire);
            let admission = self.inner.admit(need, candidates).await;
            if let Ok(Admission::Granted(r)) = &admission {
                self.refill_soon(r, closes);
            }
            admission
        }
        .boxed()
    }

    fn settle<'a>(&'a self, r: &'a Reservation, actual: ActualUsage) -> LedgerFuture<'a, bool> {
        self.inner.finish(r, Some(actual)).boxed()
    }

    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        self.inner.finish(r, None).boxed()
    }

    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        async move {
            let local = {
                let mut st = self.inner.lock();
                let now = self.inner.now();
                if st.leases.holds(r.id) {
                    return Ok(true);
                }
                match &mut st.admitting {
                    Admitting::Local(l) => l.renew(r, ttl, now),
                    Admitting::Open(ids) if ids.contains(&r.id) => Some(Ok(true)),
                    _ => None,
                }
            };
            if let Some(renewed) = local {
                return renewed;
            }
            let renewed = self.inner.timed(self.inner.shared.renew(r, ttl)).await?;
            if let Some(h) = self.inner.lock().in_flight.get_mut(&r.id) {
                h.expiry = self.inner.now() + slot_ttl_ms(ttl);
            }
            Ok(renewed)
        }
        .boxed()
    }

    fn leave<'a>(&'a self, ticket: u64, ds: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        async move {
            {
                let mut st = self.inner.lock();
                let now = self.inner.now();
                if let Admitting::Local(l) = &mut st.admitting {
                    return l.with_engine(now, |e, cells| e.leave(cells, ticket, ds));
                }
            }
            self.inner.timed(self.inner.shared.leave(ticket, ds)).await
        }
        .boxed()
    }

    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        self.inner.shared.wakes()
    }

    fn cooldown(&self, d: DeploymentId, dur: Duration) -> LedgerFuture<'_, Duration> {
        async move {
            {
                let mut st = self.inner.lock();
                let now = self.inner.now();
                // The provider is full: this instance's block there ends too.
                st.leases.end(d);
                if let Admitting::Local(l) = &mut st.admitting {
                    return l.with_engine(now, |e, cells| e.cooldown(cells, d, dur));
                }
            }
            self.inner.timed(self.inner.shared.cooldown(d, dur)).await
        }
        .boxed()
    }

    fn observe(&self, d: DeploymentId, obs: Observation) -> LedgerFuture<'_, ()> {
        async move {
            {
                let mut st = self.inner.lock();
                let now = self.inner.now();
                if let Admitting::Local(l) = &mut st.admitting {
                    return l.with_engine(now, |e, cells| e.observe(cells, d, obs));
                }
            }
            self.inner.timed(self.inner.shared.observe(d, obs)).await
        }
        .boxed()
    }

    fn snapshot<'a>(&'a self, ds: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        async move {
            let shared = self.inner.timed(self.inner.shared.snapshot(ds)).await;
            match shared {
                Err(e) if unavailable(&e) => {
                    let mut st = self.inner.lock();
                    let now = self.inner.now();
                    match &mut st.admitting {
                        Admitting::Local(l) => l.with_engine(now, |e, cells| e.snapshot(cells, ds)),
                        _ => Err(e),
                    }
                }
                other => other,
            }
        }
        .boxed()
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        async move {
            let shared = self
                .inner
                .timed(self.inner.shared.tenant_snapshot(tenant))
                .await;
            match shared {
                Err(e) if unavailable(&e) => {
                    let mut st = self.inner.lock();
                    let now = self.inner.now();
                    match &mut st.admitting {
                        Admitting::Local(l) => {
                            let spec = tenant_share(tenant, l.instances);
                            let spec = spec.as_ref().unwrap_or(tenant);
                            Ok(l.with_engine(now, |e, cells| e.tenant_snapshot(cells, spec)))
                        }
                        _ => Err(e),
                    }
                }
                other => other,
            }
        }
        .boxed()
    }

    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        async move {
            let mut out: Vec<Option<Result<bool, LedgerError>>> = Vec::with_capacity(batch.len());
            let mut shared = Vec::new();
            for s in batch {
                if let Some(done) = self.settle_here(s) {
                    out.push(Some(done));
                    continue;
                }
                match self.inner.finish_here(&s.reservation, s.actual) {
                    Ok(Some(done)) => {
                        if let Some(obs) = s.observed {
                            let observed = self.observe(s.reservation.deployment, obs).await;
                            out.push(Some(observed.map(|()| done)));
                        } else {
                            out.push(Some(Ok(done)));
                        }
                    }
                    Ok(None) => {
                        shared.push(s.clone());
                        out.push(None);
                    }
                    Err(e) => out.push(Some(Err(e))),
                }
            }
            if !shared.is_empty() {
                let mut answers = self.inner.settle_shared(&shared).await.into_iter();
                for slot in out.iter_mut().filter(|o| o.is_none()) {
                    *slot = answers.next();
                }
            }
            let timeout = || self.inner.timeout_error();
            out.into_iter()
                .map(|o| o.unwrap_or_else(|| Err(timeout())))
                .collect()
        }
        .boxed()
    }

    fn remote(&self) -> bool {
        true
    }

    /// A reservation admitted from a leased block settles in this process (its block's
    /// accounting, the provider's report kept for the next correction): no call.
    fn settle_here(&self, s: &Settlement) -> Option<Result<bool, LedgerError>> {
        {
            let mut st = self.inner.lock();
            if !st.leases.holds(s.reservation.id) {
                return None;
            }
            if let Some(obs) = s.observed {
                st.leases.report(s.reservation.deployment, obs);
            }
        }
        Some(
            self.inner
                .finish_here(&s.reservation, s.actual)
                .map(|d| d.unwrap_or(false)),
        )
    }

    fn health(&self) -> Option<Health> {
        Some(self.inner.health())
    }

    fn lease_tenant<'a>(
        &'a self,
        spec: &'a TenantSpec,
        ask: TenantAsk,
        corrections: &'a [TenantCorrection],
        call: u64,
    ) -> LedgerFuture<'a, TenantLeased> {
        self.inner
            .lease_tenant(spec, ask, corrections, call)
            .boxed()
    }

    fn close(&self) -> LedgerFuture<'_, ()> {
        async move {
            self.inner.ordered(Order::Close).await;
            self.inner.shared.close().await
        }
        .boxed()
    }
}

impl Inner {
    /// Settles `shared` in the shared store, in one call bounded by `ledger.timeout_ms`: an
    /// answer for each.
    async fn settle_shared(&self, shared: &[Settlement]) -> Vec<Result<bool, LedgerError>> {
        let after = self.settings.timeout;
        match tokio::time::timeout(after, self.shared.settle_batch(shared)).await {
            Ok(answers) => answers,
            Err(_) => shared.iter().map(|_| Err(self.timeout_error())).collect(),
        }
    }
}
