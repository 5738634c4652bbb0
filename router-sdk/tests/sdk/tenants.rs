//! Tenants through the router: budgets reserve the estimate and settle the actual cost, an
//! exhausted budget is a typed error without waiting, and batch requests give way to interactive
//! ones.

use std::time::Duration;

use router_core::ledger::{BudgetMicros, TenantSpec};
use router_sdk::{ChatRequest, Error, Priority};
use wiremock::Mock;
use wiremock::matchers::{method, path};

use crate::support::*;

const TENANTS: &str = "tenants:
  default_tier: free
  tiers:
    free: { rpm: 100, budget: { daily_usd: 0.01 } }
    pro: { rpm: 1000 }
  members:
    acme: free
priorities:
  batch_share: 0.8
";

fn for_tenant(name: &str) -> ChatRequest {
    ChatRequest {
        tenant: Some(name.into()),
        ..ChatRequest::new("Hello")
    }
}

async fn answering(w: &World) {
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .mount(&w.servers[0])
        .await;
}

#[tokio::test]
async fn the_budget_is_charged_the_actual_cost_and_an_exhausted_one_fails_at_once() {
    // openai/ok.json: 1117 prompt + 46 completion tokens at $2 / $8 per Mtok = $0.002602.
    let w = World::with_extra(&[Upstream::openai("oa", (2.0, 8.0))], TENANTS).await;
    answering(&w).await;
    for _ in 0..3 {
        w.router.chat(for_tenant("acme")).await.unwrap();
    }
    let spec = TenantSpec {
        name: "acme".into(),
        limits: router_core::config::Limits {
            rpm: std::num::NonZeroU64::new(100),
            ..Default::default()
        },
        budget: BudgetMicros {
            daily: Some(10_000),
            monthly: None,
        },
    };
    let snap = w.router.ledger().tenant_snapshot(&spec).await.unwrap();
    assert_eq!(
        (snap.usage.requests, snap.spent_today_micros),
        (3, 3 * 2602)
    );
    // 7806 of 10000 spent: the next request's estimate (about 600 micro-USD) still fits, its actual
    // cost overshoots by less than one request's estimation error, and then nothing fits today.
    w.router.chat(for_tenant("acme")).await.unwrap();
    let spent = w
        .router
        .ledger()
        .tenant_snapshot(&spec)
        .await
        .unwrap()
        .spent_today_micros;
    assert_eq!(spent, 4 * 2602);
    let err = w.router.chat(for_tenant("acme")).await.unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted { tenant, .. } if tenant == "acme"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(
            "tenant `acme`: oa/gpt-test: tenant daily budget cannot cover it; the budget resets in"
        ),
        "{err}"
    );
    assert!(err.retry_after().is_some() && !err.is_retryable());
    assert!(
        w.sleeper.slept().is_empty(),
        "an exhausted budget is not waited for"
    );
    // Another tenant on an unlimited tier is not affected; an unknown one gets the default tier.
    let pro = ChatRequest {
        tenant: Some("globex".into()),
        ..for_tenant("x")
    };
    w.router.chat(pro).await.unwrap();
}

#[tokio::test]
async fn batch_requests_leave_headroom_for_interactive_ones_and_still_complete() {
    let mut up = Upstream::openai("oa", (1.0, 1.0));
    up.limits = "rpm: 10";
    let w = World::with_extra(&[up], "priorities:\n  batch_share: 0.8\n").await;
    answering(&w).await;
    let batch = || ChatRequest {
        priority: Priority::Batch,
        ..ChatRequest::new("Hello")
    };
    for _ in 0..8 {
        assert_eq!(w.router.chat(batch()).await.unwrap().waited, Duration::ZERO);
    }
    // Batch has used its 80%: the interactive requests are served at once...
    for _ in 0..2 {
        assert_eq!(
            w.router
                .chat(ChatRequest::new("Hello"))
                .await
                .unwrap()
                .waited,
            Duration::ZERO
        );
    }
    // ...while the next batch request waits for the window to slide, then completes.
    let late = w.router.chat(batch()).await.unwrap();
    assert!(late.waited >= Duration::from_secs(61), "{:?}", late.waited);
}

#[tokio::test]
async fn a_tenant_name_that_cannot_be_a_key_is_refused() {
    let w = World::with_extra(&[Upstream::openai("oa", (1.0, 1.0))], TENANTS).await;
    let err = w.router.chat(for_tenant("a}b")).await.unwrap_err();
    assert!(matches!(err, Error::InvalidRequest(_)), "{err:?}");
}
