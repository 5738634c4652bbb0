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
        assert_eq!(
            w.router.chat(batch()).await.unwrap().receipt.waited,
            Duration::ZERO
        );
    }
    // Batch has used its 80%: the interactive requests are served at once...
    for _ in 0..2 {
        assert_eq!(
            w.router
                .chat(ChatRequest::new("Hello"))
                .await
                .unwrap()
                .receipt
                .waited,
            Duration::ZERO
        );
    }
    // ...while the next batch request waits for the window to slide, then completes.
    let late = w.router.chat(batch()).await.unwrap();
    assert!(
        late.receipt.waited >= Duration::from_secs(61),
        "{:?}",
        late.receipt.waited
    );
}

#[tokio::test]
async fn a_tenant_name_that_cannot_be_a_key_is_refused() {
    let w = World::with_extra(&[Upstream::openai("oa", (1.0, 1.0))], TENANTS).await;
    // The configuration's own rule: no braces, no control characters (PostgreSQL's text takes
    // no NUL), no spaces around it, and not `-`, which stands for no tenant in reports.
    for name in ["a}b", "a\0b", " acme", "-"] {
        let err = w.router.chat(for_tenant(name)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidRequest(_)), "{name:?}: {err:?}");
        assert!(err.to_string().contains("tenant"), "{err}");
    }
    let with_nul = ChatRequest {
        request_id: Some("req\0-1".into()),
        ..ChatRequest::new("Hi")
    };
    let err = w.router.chat(with_nul).await.unwrap_err();
    assert!(err.to_string().contains("request_id"), "{err}");
}

/// Under saturation, an instance serves its waiting interactive requests before its waiting
/// batch ones, and the batch ones still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_saturation_interactive_requests_are_served_before_batch_ones() {
    use std::sync::Arc;

    use router_core::clock::ManualClock;
    use router_core::config::Registry;
    use router_core::ledger::{Ledger, MemoryStore};
    use router_sdk::{Router, StaticKeys};
    use wiremock::MockServer;

    let server = MockServer::start().await;
    let mut up = Upstream::openai("oa", (1.0, 1.0));
    up.limits = "rpm: 4";
    let yaml = format!(
        "{}priorities:\n  batch_share: 0.8\n",
        config(&[(&up, server.uri())])
    );
    let registry = Registry::from_yaml_str(&yaml, "t.yaml").unwrap();
    let clock = ManualClock::new(T0);
    let sleeper = VirtualSleeper::new(clock.clone());
    let ledger: Arc<dyn Ledger> =
        Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone())));
    let router = Router::builder(registry)
        .ledger(ledger)
        .clock(Arc::new(clock.clone()))
        .sleeper(Arc::new(sleeper.clone()))
        .keys(Arc::new(
            StaticKeys::new().with(key_var("oa"), planted_key("oa")),
        ))
        .seed(3)
        .build()
        .await
        .unwrap();
    answering_at(&server).await;
    // Saturate the window: 4 of 4 requests this minute.
    for _ in 0..4 {
        router.chat(ChatRequest::new("fill")).await.unwrap();
    }
    // Three batch requests arrive first, then three interactive ones; all must wait.
    let mut tasks = Vec::new();
    for (i, priority) in [Priority::Batch; 3]
        .into_iter()
        .chain([Priority::Interactive; 3])
        .enumerate()
    {
        let router = router.clone();
        let req = ChatRequest {
            priority,
            deadline: Some(Duration::from_secs(600)),
            ..ChatRequest::new(format!("{priority:?}-{i}"))
        };
        tasks.push(tokio::spawn(async move { router.chat(req).await }));
        // Let it reach its first wait before the next one arrives.
        while sleeper.asleep() < i + 1 {
            tokio::task::yield_now().await;
        }
    }
    // Drive virtual time: wake the earliest sleeper whenever every unfinished task sleeps.
    loop {
        let unfinished = tasks.iter().filter(|t| !t.is_finished()).count();
        if unfinished == 0 {
            break;
        }
        if sleeper.asleep() == unfinished {
            assert!(sleeper.wake_next());
        }
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let served: Vec<String> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .split('-')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        served,
        [
            "fill",
            "fill",
            "fill",
            "fill",
            "Interactive",
            "Interactive",
            "Interactive",
            "Batch",
            "Batch",
            "Batch"
        ]
    );
}

async fn answering_at(server: &wiremock::MockServer) {
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .mount(server)
        .await;
}
