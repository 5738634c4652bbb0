//! A runtime key's own account, on every store: its limits and budgets are checked in the same
//! atomic step as its tenant's and the deployments', each account is charged and settled, and a
//! refusal says whose limit it was.

use std::num::NonZeroU64;
use std::time::Duration;

use router_core::config::Limits;
use router_core::ledger::{
    ActualUsage, BudgetMicros, LimitKind, Need, Scope, TenantNeed, TenantSpec, Verdict,
};

use crate::support::Store;
use crate::tenants::{grant, refusal, roomy, spec};

every_store!(
    a_keys_limits_bind_its_requests_while_its_tenant_has_room,
    each_account_is_charged_the_estimate_and_settled_with_the_actual_cost,
    release_and_renew_reach_the_keys_account_too,
);

/// Key `key_0000000000000001`'s account: rpm, concurrency and a daily budget (micro-USD).
pub fn key(rpm: u64, concurrency: u64, daily: Option<u64>) -> TenantSpec {
    let limits = Limits {
        rpm: NonZeroU64::new(rpm),
        concurrency: NonZeroU64::new(concurrency),
        ..Limits::default()
    };
    let budget = BudgetMicros {
        daily,
        monthly: None,
    };
    TenantSpec::of_key("key_0000000000000001", limits, budget)
}

/// A need of one token charged to `tenant` and `key`, costing `cost` on every candidate.
pub fn both(tenant: &TenantSpec, key: &TenantSpec, cost: u64) -> Need {
    let mut need = Need::new(1, Duration::from_secs(600));
    need.tenant = Some(TenantNeed {
        specs: vec![tenant.clone(), key.clone()],
        costs: vec![cost; 2],
    });
    need
}

async fn a_keys_limits_bind_its_requests_while_its_tenant_has_room(store: Store) {
    let (w, [cheap, dear]) = roomy(store).await;
    let acme = spec(100, 100_000, 100, None, None);
    let k = key(2, 100, None);
    let n = both(&acme, &k, 1);
    let _a = grant(&w, &n, &[cheap]).await;
    let _b = grant(&w, &n, &[dear]).await;
    let r = refusal(&w, &n, &[cheap, dear]).await;
    assert_eq!((r.limit, r.scope), (LimitKind::Requests, Scope::Key));
    assert_eq!(r.verdict, Verdict::NotNow(Duration::from_secs(61)));
    // The tenant's other requests are not bound by the key's limit.
    let mut alone = Need::new(1, Duration::from_secs(600));
    alone.tenant = Some(TenantNeed::of(acme.clone(), vec![1, 1]));
    let _c = grant(&w, &alone, &[cheap]).await;
    let tenant = w.ledger.tenant_snapshot(&acme).await.unwrap();
    assert_eq!(tenant.usage.requests, 3);
    let own = w.ledger.tenant_snapshot(&k).await.unwrap();
    assert_eq!((own.usage.requests, own.usage.in_flight), (2, 2));
}

async fn each_account_is_charged_the_estimate_and_settled_with_the_actual_cost(store: Store) {
    let (w, [cheap, _]) = roomy(store).await;
    let acme = spec(100, 100_000, 100, Some(10_000), None);
    let k = key(100, 100, Some(1_000));
    let r = grant(&w, &both(&acme, &k, 400), &[cheap]).await;
    let spent = |spec: TenantSpec| {
        let ledger = w.ledger.clone();
        async move {
            ledger
                .tenant_snapshot(&spec)
                .await
                .unwrap()
                .spent_today_micros
        }
    };
    assert_eq!(
        (spent(acme.clone()).await, spent(k.clone()).await),
        (400, 400)
    );
    let actual = ActualUsage {
        cost_micros: 100,
        ..ActualUsage::tokens(1)
    };
    assert!(w.ledger.settle(&r, actual).await.unwrap());
    assert_eq!(
        (spent(acme.clone()).await, spent(k.clone()).await),
        (100, 100)
    );
    // 100 + 950 is over the key's 1000, not over the tenant's 10000.
    let r = refusal(&w, &both(&acme, &k, 950), &[cheap]).await;
    assert_eq!((r.limit, r.scope), (LimitKind::DailyBudget, Scope::Key));
    assert!(matches!(r.verdict, Verdict::Exhausted(_)), "{r:?}");
    let r = refusal(&w, &both(&acme, &k, 1_001), &[cheap]).await;
    assert_eq!((r.scope, r.verdict), (Scope::Key, Verdict::Never));
}

async fn release_and_renew_reach_the_keys_account_too(store: Store) {
    let (w, [cheap, _]) = roomy(store).await;
    let acme = spec(100, 100_000, 100, None, None);
    let k = key(100, 1, Some(1_000));
    let n = both(&acme, &k, 300);
    let r = grant(&w, &n, &[cheap]).await;
    let busy = refusal(&w, &n, &[cheap]).await;
    assert_eq!(
        (busy.limit, busy.scope),
        (LimitKind::Concurrency, Scope::Key)
    );
    assert!(w.ledger.renew(&r, Duration::from_secs(1200)).await.unwrap());
    w.clock.advance_ms(900_000);
    let still = refusal(&w, &n, &[cheap]).await;
    assert_eq!(
        still.limit,
        LimitKind::Concurrency,
        "renewed past its first TTL"
    );
    assert!(w.ledger.release(&r).await.unwrap());
    let own = w.ledger.tenant_snapshot(&k).await.unwrap();
    assert_eq!((own.usage.in_flight, own.spent_today_micros), (0, 0));
    let _again = grant(&w, &n, &[cheap]).await;
}
