//! Tenant leases (lua/tenant_lease.lua): a block of a tenant's limits and budgets granted to one
//! instance in one call, carrying the corrections of its earlier blocks.

use super::{RedisStore, TENANT_LEASE};
use crate::ledger::LedgerError;
use crate::ledger::tenant_leases::{Amounts, TenantAsk, TenantCorrection, TenantLeased};
use crate::ledger::{TenantSpec, WindowUse};

impl RedisStore {
    /// Applies `corrections` to tenant `spec`'s window, day and spend, then asks for a block of
    /// its limits and budgets (see [`TenantAsk`]; none when it wants no request). `call` is the
    /// call's id: sent again with the same, it answers as it first did and changes nothing.
    pub(crate) async fn lease_tenant_block(
        &self,
        spec: &TenantSpec,
        ask: TenantAsk,
        corrections: &[TenantCorrection],
        call: u64,
    ) -> Result<TenantLeased, LedgerError> {
        let mut inv = TENANT_LEASE.prepare_invoke();
        for kind in ["w", "y", "b"] {
            inv.key(self.tenant_key(kind, &spec.name));
        }
        let limit = |v: Option<std::num::NonZeroU64>| v.map_or(0, |v| v.get());
        let l = spec.limits;
        inv.arg(self.now_arg());
        for a in [ask.want, ask.fewest] {
            inv.arg(a.requests).arg(a.tokens).arg(a.micros);
        }
        inv.arg(ask.parts.max(1))
            .arg(limit(l.rpm))
            .arg(limit(l.tpm))
            .arg(limit(l.rpd))
            .arg(limit(l.tpd))
            .arg(spec.budget.daily.unwrap_or(0))
            .arg(spec.budget.monthly.unwrap_or(0))
            .arg(corrections.len());
        for c in corrections {
            inv.arg(c.bucket);
            for d in c.deltas {
                inv.arg(d);
            }
        }
        inv.key(self.call_key(call));
        self.push_epoch(&mut inv);
        let reply = self.run(&inv).await?;
        let count =
            |v: i64| u64::try_from(v).map_err(|_| self.protocol("tenant_lease.lua", &reply));
        match reply.as_slice() {
            [
                1,
                now,
                requests,
                tokens,
                micros,
                bucket,
                w_requests,
                w_tokens,
            ] => Ok(TenantLeased::Granted {
                amounts: Amounts {
                    requests: count(*requests)?,
                    tokens: count(*tokens)?,
                    micros: count(*micros)?,
                },
                bucket: count(*bucket)?,
                store_now: count(*now)?,
                window: WindowUse {
                    requests: count(*w_requests)?,
                    tokens: count(*w_tokens)?,
                },
            }),
            [0, _] => Ok(TenantLeased::Refused),
            [2, _] => Err(LedgerError::Lost {
                url: self.url.clone(),
            }),
            _ => Err(self.protocol("tenant_lease.lua", &reply)),
        }
    }
}
