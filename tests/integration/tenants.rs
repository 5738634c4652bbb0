//! Tenants and priorities, on every store: a tenant's limits and budgets are checked in the same
//! atomic step as the deployments' (DESIGN.md I1 for tenants), budgets reset at UTC calendar
//! boundaries, and batch requests use only their share of each deployment.

use std::num::NonZeroU64;
use std::time::Duration;

use router_core::config::{DeploymentId, Limits};
use router_core::ledger::{
    ActualUsage, Admission, BudgetMicros, LimitKind, Need, Reservation, Scope, TenantNeed,
    TenantSpec, Verdict,
};

use crate::support::{Store, T0, World, cheap_and_dear};

every_store!(
    tenant_limits_hold_across_deployments,
    tenant_concurrency_is_freed_by_settling,
    the_budget_reserves_the_estimate_and_settles_the_actual_cost,
    a_request_costing_more_than_the_budget_never_fits,
    the_daily_budget_resets_at_the_utc_day_boundary_and_the_monthly_one_does_not,
    release_hands_back_the_tenants_request_and_spend,
    batch_requests_use_only_their_share_of_a_deployment,
    the_tenant_snapshot_reports_use_spend_and_resets,
);

const DAY_MS: u64 = 86_400_000;

fn limit(n: u64) -> Option<NonZeroU64> {
    NonZeroU64::new(n)
}

pub fn spec(
    rpm: u64,
    tpm: u64,
    concurrency: u64,
    daily: Option<u64>,
    monthly: Option<u64>,
) -> TenantSpec {
    TenantSpec {
        name: "acme".into(),
        limits: Limits {
            rpm: limit(rpm),
            tpm: limit(tpm),
            concurrency: limit(concurrency),
            ..Limits::default()
        },
        budget: BudgetMicros { daily, monthly },
    }
}

/// A need of `tokens` for tenant `spec`, costing `costs[i]` on candidate i.
pub fn need(tokens: u64, spec: &TenantSpec, costs: &[u64]) -> Need {
    let mut need = Need::new(tokens, Duration::from_secs(600));
    need.tenant = Some(TenantNeed::of(spec.clone(), costs.to_vec()));
    need
}

/// Admits `need` as a new request (under an id of its own).
pub async fn admit(w: &World, need: &Need, candidates: &[DeploymentId]) -> Admission {
    w.ledger
        .admit(&need.clone().with_new_id(), candidates)
        .await
        .expect("store answers")
}

pub async fn grant(w: &World, need: &Need, candidates: &[DeploymentId]) -> Reservation {
    match admit(w, need, candidates).await {
        Admission::Granted(r) => r,
        Admission::Denied(d) => panic!("expected a grant, got {d:?}"),
    }
}

pub async fn refusal(
    w: &World,
    need: &Need,
    candidates: &[DeploymentId],
) -> router_core::ledger::Refusal {
    match admit(w, need, candidates).await {
        Admission::Denied(d) => d.refusals[0],
        Admission::Granted(r) => panic!("expected a denial, got {r:?}"),
    }
}

pub async fn roomy(store: Store) -> (World, [DeploymentId; 2]) {
    let w = World::new(
        store,
        &cheap_and_dear("rpm: 1000, tpm: 1000000, concurrency: 100"),
    )
    .await;
    let ds = [w.d("cheap"), w.d("dear")];
    (w, ds)
}

async fn tenant_limits_hold_across_deployments(store: Store) {
    let (w, [cheap, dear]) = roomy(store).await;
    let acme = spec(3, 1000, 100, None, None);
    let n = need(10, &acme, &[1, 1]);
    let _a = grant(&w, &n, &[cheap]).await;
    let _b = grant(&w, &n, &[dear]).await;
    let _c = grant(&w, &n, &[cheap, dear]).await;
    let r = refusal(&w, &n, &[cheap, dear]).await;
    assert_eq!((r.limit, r.scope), (LimitKind::Requests, Scope::Tenant));
    assert_eq!(r.verdict, Verdict::NotNow(Duration::from_secs(61)));
    // Another tenant is not affected.
    let other = TenantSpec {
        name: "globex".into(),
        ..acme.clone()
    };
    let _d = grant(&w, &need(10, &other, &[1, 1]), &[cheap]).await;
    // Tokens: 30 of 1000 used; 971 more would break the tenant's TPM.
    let big = need(971, &spec(100, 1000, 100, None, None), &[1, 1]);
    assert_eq!(refusal(&w, &big, &[cheap]).await.limit, LimitKind::Tokens);
    let never = need(1001, &acme, &[1, 1]);
    assert_eq!(refusal(&w, &never, &[cheap]).await.verdict, Verdict::Never);
}

async fn tenant_concurrency_is_freed_by_settling(store: Store) {
    let (w, [cheap, dear]) = roomy(store).await;
    let acme = spec(100, 100_000, 2, None, None);
    let n = need(10, &acme, &[1, 1]);
    let a = grant(&w, &n, &[cheap]).await;
    let _b = grant(&w, &n, &[dear]).await;
    let r = refusal(&w, &n, &[cheap, dear]).await;
    assert_eq!((r.limit, r.scope), (LimitKind::Concurrency, Scope::Tenant));
    assert!(w.ledger.settle(&a, ActualUsage::tokens(10)).await.unwrap());
    let _c = grant(&w, &n, &[cheap]).await;
}

async fn the_budget_reserves_the_estimate_and_settles_the_actual_cost(store: Store) {
    let (w, [cheap, dear]) = roomy(store).await;
    let acme = spec(100, 100_000, 100, Some(1000), None);
    let n = need(10, &acme, &[400, 900]);
    let a = grant(&w, &n, &[cheap, dear]).await;
    let _b = grant(&w, &n, &[cheap, dear]).await;
    // 800 reserved: 400 more is over 1000 on cheap, and 900 on dear.
    let denied = match admit(&w, &n, &[cheap, dear]).await {
        Admission::Denied(d) => d,
        Admission::Granted(r) => panic!("{r:?}"),
    };
    let to_midnight = Duration::from_millis((T0 / DAY_MS + 1) * DAY_MS - T0);
    for r in &denied.refusals {
        assert_eq!(
            (r.limit, r.scope, r.verdict),
            (
                LimitKind::DailyBudget,
                Scope::Tenant,
                Verdict::Exhausted(to_midnight)
            )
        );
    }
    assert_eq!(denied.retry_after(), None, "a budget is not waited for");
    assert_eq!(denied.budget_resets_in(), Some(to_midnight));
    // The first one cost 100, not 400: 500 spent, so 400 fits again.
    assert!(
        w.ledger
            .settle(
                &a,
                ActualUsage {
                    tokens: 10,
                    cost_micros: 100,
                    input_tokens: 0,
                }
            )
            .await
            .unwrap()
    );
    assert_eq!(
        w.ledger
            .tenant_snapshot(&acme)
            .await
            .unwrap()
            .spent_today_micros,
        500
    );
    let c = grant(&w, &n, &[cheap, dear]).await;
    assert_eq!(c.deployment, cheap);
    assert_eq!(
        w.ledger
            .tenant_snapshot(&acme)
            .await
            .unwrap()
            .spent_today_micros,
        900
    );
}

async fn a_request_costing_more_than_the_budget_never_fits(store: Store) {
    let (w, [cheap, dear]) = roomy(store).await;
    let acme = spec(100, 100_000, 100, Some(1000), Some(5000));
    // Costs follow the candidates' order: dear first (1001), then cheap (999).
    let n = need(10, &acme, &[1001, 999]);
    // Dear alone costs more than the daily budget: never there; cheap is fine.
    assert_eq!(grant(&w, &n, &[dear, cheap]).await.deployment, cheap);
    let r = refusal(&w, &n, &[dear]).await;
    assert_eq!(
        (r.limit, r.verdict),
        (LimitKind::DailyBudget, Verdict::Never)
    );
}

async fn the_daily_budget_resets_at_the_utc_day_boundary_and_the_monthly_one_does_not(
    store: Store,
) {
    let (w, [cheap, _]) = roomy(store).await;
    let acme = spec(100, 100_000, 100, Some(1000), Some(1500));
    let n = need(10, &acme, &[600]);
    let a = grant(&w, &n, &[cheap]).await;
    assert!(
        w.ledger
            .settle(
                &a,
                ActualUsage {
                    tokens: 10,
                    cost_micros: 600,
                    input_tokens: 0,
                }
            )
            .await
            .unwrap()
    );
    let midnight = (T0 / DAY_MS + 1) * DAY_MS;
    w.clock.set_ms(midnight - 1);
    assert_eq!(
        refusal(&w, &n, &[cheap]).await.verdict,
        Verdict::Exhausted(Duration::from_millis(1))
    );
    w.clock.set_ms(midnight);
    let b = grant(&w, &n, &[cheap]).await;
    assert!(
        w.ledger
            .settle(
                &b,
                ActualUsage {
                    tokens: 10,
                    cost_micros: 600,
                    input_tokens: 0,
                }
            )
            .await
            .unwrap()
    );
    // The next day: 600 today, but 1200 this month; 600 more would break the month's 1500.
    w.clock.set_ms(midnight + DAY_MS);
    let r = refusal(&w, &n, &[cheap]).await;
    assert_eq!(r.limit, LimitKind::MonthlyBudget);
    let snap = w.ledger.tenant_snapshot(&acme).await.unwrap();
    assert_eq!(
        (snap.spent_today_micros, snap.spent_month_micros),
        (0, 1200)
    );
}

async fn release_hands_back_the_tenants_request_and_spend(store: Store) {
    let (w, [cheap, _]) = roomy(store).await;
    let acme = spec(1, 100_000, 100, Some(2000), None);
    let n = need(10, &acme, &[700]);
    let a = grant(&w, &n, &[cheap]).await;
    assert_eq!(refusal(&w, &n, &[cheap]).await.limit, LimitKind::Requests);
    assert!(w.ledger.release(&a).await.unwrap());
    let snap = w.ledger.tenant_snapshot(&acme).await.unwrap();
    assert_eq!(
        (
            snap.usage.requests,
            snap.usage.in_flight,
            snap.spent_today_micros
        ),
        (0, 0, 0)
    );
    let _b = grant(&w, &n, &[cheap]).await;
}

async fn batch_requests_use_only_their_share_of_a_deployment(store: Store) {
    let w = World::new(store, &cheap_and_dear("rpm: 10")).await;
    let cheap = w.d("cheap");
    let mut batch = Need::new(1, Duration::from_secs(600));
    batch.share_percent = 80;
    let mut granted = 0;
    while let Admission::Granted(_) = w
        .ledger
        .admit(&batch.clone().with_new_id(), &[cheap])
        .await
        .unwrap()
    {
        granted += 1;
    }
    assert_eq!(granted, 8);
    // Interactive requests still find the headroom.
    assert_eq!(w.count_grants(5, 1, &[cheap]).await, 2);
}

async fn the_tenant_snapshot_reports_use_spend_and_resets(store: Store) {
    let (w, [cheap, _]) = roomy(store).await;
    let acme = spec(60, 100_000, 2, Some(1_000_000), Some(10_000_000));
    let n = need(250, &acme, &[1234]);
    let _held = grant(&w, &n, &[cheap]).await;
    let done = grant(&w, &n, &[cheap]).await;
    assert!(
        w.ledger
            .settle(
                &done,
                ActualUsage {
                    tokens: 200,
                    cost_micros: 1000,
                    input_tokens: 0,
                }
            )
            .await
            .unwrap()
    );
    let s = w.ledger.tenant_snapshot(&acme).await.unwrap();
    assert_eq!(
        (s.usage.requests, s.usage.tokens, s.usage.in_flight),
        (2, 450, 1)
    );
    assert_eq!(
        (s.usage.rpm_limit, s.usage.concurrency_limit),
        (Some(60), Some(2))
    );
    assert_eq!((s.spent_today_micros, s.spent_month_micros), (2234, 2234));
    assert_eq!(
        s.day_resets_in,
        Duration::from_millis((T0 / DAY_MS + 1) * DAY_MS - T0)
    );
    assert_eq!(s.budget, acme.budget);
    assert!(s.month_resets_in >= s.day_resets_in && s.month_elapsed > Duration::ZERO);
}
