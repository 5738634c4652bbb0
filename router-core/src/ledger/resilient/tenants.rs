//! Tenant blocks (see `tenant_leases`): asked of the shared store only while this instance
//! admits through it, and counted as this instance's own, so that local mode starts from them
//! and a restore writes them back.

use super::*;
use crate::ledger::TenantSpec;
use crate::ledger::tenant_leases::{TenantAsk, TenantCorrection, TenantLeased};

impl Inner {
    /// Sends a tenant block call (see [`RedisStore::lease_tenant_block`]) while the instance
    /// admits through the shared store; [`TenantLeased::Unavailable`] otherwise.
    pub(super) async fn lease_tenant(
        &self,
        spec: &TenantSpec,
        ask: TenantAsk,
        corrections: &[TenantCorrection],
        call: u64,
    ) -> Result<TenantLeased, LedgerError> {
        {
            let mut st = self.lock();
            if !st.admits_shared() {
                return Ok(TenantLeased::Unavailable);
            }
            st.served(&spec.name, self.now());
        }
        let asked = self.shared.lease_tenant_block(spec, ask, corrections, call);
        let leased = self.timed(asked.boxed()).await;
        if let Ok(TenantLeased::Granted {
            amounts, bucket, ..
        }) = &leased
        {
            let counts = Counts::new(amounts.requests, amounts.tokens, 0, 0);
            self.lock()
                .remember_tenant(&spec.name, *bucket, counts, amounts.micros, self.now());
        }
        leased
    }
}

impl Machine {
    /// Adds a tenant block's grant to what this instance admitted through the store, and to its
    /// own tenant window.
    pub(super) fn remember_tenant(
        &mut self,
        name: &str,
        bucket: u64,
        counts: Counts,
        micros: u64,
        now: u64,
    ) {
        let own = self.own.tenants.entry(name.to_owned()).or_default();
        own.counts = own.counts.plus(counts);
        own.cost_micros += micros;
        let w = self.own_tenant_windows.entry(name.to_owned()).or_default();
        w.expire(bucket_of(now).max(bucket));
        if w.is_live(bucket) {
            w.add(bucket, counts);
        }
    }
}
