//! Settlements still running when a command stops, so that the process waits for them.
//!
//! A request dropped mid-way (Ctrl-C) settles through its drop guard; a store that cannot answer
//! at once finishes that in a background task, which exiting would cut short. [`Tracked`] wraps
//! the ledger and counts the settle and release calls that have started and not yet ended;
//! [`Pending::settled`] waits for that count to reach zero. (A router that drains its own
//! background settlements makes this wrapper unnecessary.)

use std::sync::Arc;

use router_core::config::DeploymentId;
use router_core::ledger::{
    ActualUsage, Admission, DeploymentSnapshot, Ledger, LedgerFuture, Need, Observation,
    Reservation, TenantSnapshot, TenantSpec,
};
use tokio::sync::watch;

/// How many settle / release calls are running.
#[derive(Debug, Clone)]
pub(crate) struct Pending(Arc<watch::Sender<usize>>);

impl Pending {
    /// Returns once no settle or release call is running.
    pub(crate) async fn settled(&self) {
        let mut running = self.0.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = running.wait_for(|n| *n == 0).await;
    }

    fn start(&self) -> Ticket {
        self.0.send_modify(|n| *n += 1);
        Ticket(self.0.clone())
    }
}

/// One running call; ending (or dropping) it counts it out.
struct Ticket(Arc<watch::Sender<usize>>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A ledger that counts its running settle and release calls.
#[derive(Debug)]
pub(crate) struct Tracked {
    inner: Arc<dyn Ledger>,
    pending: Pending,
}

impl Tracked {
    /// `inner`, counted, and the handle that waits for it.
    pub(crate) fn wrap(inner: Arc<dyn Ledger>) -> (Arc<dyn Ledger>, Pending) {
        let pending = Pending(Arc::new(watch::Sender::new(0)));
        let tracked = Tracked {
            inner,
            pending: pending.clone(),
        };
        (Arc::new(tracked), pending)
    }
}

impl Ledger for Tracked {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        self.inner.admit(need, candidates)
    }

    fn settle<'a>(
        &'a self,
        reservation: &'a Reservation,
        actual: ActualUsage,
    ) -> LedgerFuture<'a, bool> {
        let ticket = self.pending.start();
        let settle = self.inner.settle(reservation, actual);
        Box::pin(async move {
            let settled = settle.await;
            drop(ticket);
            settled
        })
    }

    fn release<'a>(&'a self, reservation: &'a Reservation) -> LedgerFuture<'a, bool> {
        let ticket = self.pending.start();
        let release = self.inner.release(reservation);
        Box::pin(async move {
            let released = release.await;
            drop(ticket);
            released
        })
    }

    fn cooldown(
        &self,
        deployment: DeploymentId,
        for_how_long: std::time::Duration,
    ) -> LedgerFuture<'_, std::time::Duration> {
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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use futures_util::FutureExt;
    use router_core::config::Registry;
    use router_core::ledger::{Admission, MemoryStore};

    use super::*;

    const YAML: &str = "providers:\n  - name: oa\n    api: openai\n    base_url: https://api.openai.com/v1\n    api_key_env: OA_KEY\n    models:\n      - { name: m, price: { input: 1, output: 2 } }\n";

    async fn reserve(ledger: &dyn Ledger, registry: &Registry) -> Reservation {
        let all: Vec<_> = registry.deployment_ids().collect();
        let need = Need::new(10, Duration::from_secs(60));
        match ledger.admit(&need, &all).await.unwrap() {
            Admission::Granted(r) => r,
            Admission::Denied(d) => panic!("{d:?}"),
        }
    }

    #[tokio::test]
    async fn settled_waits_for_running_calls_and_not_for_dropped_ones() {
        let registry = Registry::from_yaml_str(YAML, "test.yaml").unwrap();
        let (ledger, pending) = Tracked::wrap(Arc::new(MemoryStore::new(&registry)));
        assert!(
            pending.settled().now_or_never().is_some(),
            "nothing started"
        );

        let r = reserve(&*ledger, &registry).await;
        let settle = ledger.settle(&r, ActualUsage::default());
        assert!(
            pending.settled().now_or_never().is_none(),
            "a settle is running"
        );
        assert!(settle.await.unwrap());
        assert!(
            pending.settled().now_or_never().is_some(),
            "the settle ended"
        );

        let r = reserve(&*ledger, &registry).await;
        let release = ledger.release(&r);
        assert!(
            pending.settled().now_or_never().is_none(),
            "a release is running"
        );
        drop(release);
        assert!(
            pending.settled().now_or_never().is_some(),
            "a dropped call is over"
        );
    }
}
