//! A tier with `lease: auto` through the router on Redis: a tenant's requests on a deployment
//! no limit concerns cost a block call now and then, the answers come as before, and once the
//! router drains the tenant's window and spend hold what exact admissions of the same requests
//! leave.

use std::sync::Arc;

use llmroute_tests::{redis_server, script_calls};
use router_core::config::Registry;
use router_core::ledger::{RedisStore, RedisStoreOptions, TenantSpec};
use router_sdk::{ChatRequest, Router, StaticKeys};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

use crate::support::*;

const TENANTS: &str = "tenants:
  tiers:
    pro: { rpm: 1000, tpm: 10000000, budget: { daily_usd: 10 }, lease: auto }
    exact: { rpm: 1000, tpm: 10000000, budget: { daily_usd: 10 } }
  members:
    acme: pro
    globex: exact
";

#[tokio::test]
async fn a_leasing_tenant_makes_few_calls_and_ends_counted_as_used() {
    let redis = redis_server();
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok_json("openai/ok.json"))
        .mount(&server)
        .await;
    // No limit on the deployment: only the tenant's part would call the store.
    let up = Upstream {
        limits: "",
        ..Upstream::openai("oa", (2.0, 8.0))
    };
    let yaml = format!("{}{TENANTS}", config(&[(&up, server.uri())]));
    let registry = Registry::from_yaml_str(&yaml, "t.yaml").unwrap();
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        ..Default::default()
    };
    let store = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    let keys = StaticKeys::new().with(key_var(up.name), planted_key(up.name));
    let router = Router::builder(registry)
        .ledger(Arc::new(store))
        .keys(Arc::new(keys))
        .build()
        .await
        .unwrap();
    let before = script_calls(&redis).await;
    chats(&router, "acme", 40).await;
    let calls = script_calls(&redis).await - before;
    // Blocks of 1, 2, 4, ... requests within a second; a second turning costs one more each.
    assert!(calls <= 16, "{calls} script calls for 40 requests");
    let before = script_calls(&redis).await;
    chats(&router, "globex", 40).await;
    let exact_calls = script_calls(&redis).await - before;
    assert!(
        exact_calls >= 40,
        "{exact_calls} script calls for 40 exact requests"
    );
    router.drain().await;
    let (leased, exact) = (
        counted(&router, "acme").await,
        counted(&router, "globex").await,
    );
    // openai/ok.json: 1117 prompt + 46 completion tokens at $2 / $8 per Mtok = $0.002602; the
    // window keeps the larger of the reserved and the used tokens (OpenAI counts at arrival).
    assert_eq!(leased, exact, "leased (acme) and exact (globex) end alike");
    assert_eq!((leased.0, leased.2, leased.3), (40, 40 * 2602, 0));
}

/// `n` chats of `tenant`, each answered.
async fn chats(router: &Router, tenant: &str, n: usize) {
    for _ in 0..n {
        let req = ChatRequest {
            tenant: Some(tenant.into()),
            ..ChatRequest::new("Hello")
        };
        let answer = router.chat(req).await.unwrap();
        assert_eq!(answer.receipt.usage.total_tokens(), 1163);
    }
}

/// What `tenant`'s window and spend hold: requests, tokens, micro-USD, requests in flight.
async fn counted(router: &Router, tenant: &str) -> (u64, u64, u64, u64) {
    let tier = router.registry().tenants.tier_of(tenant).unwrap();
    let spec = TenantSpec::of_tier(tenant, tier);
    let s = router.ledger().tenant_snapshot(&spec).await.unwrap();
    (
        s.usage.requests,
        s.usage.tokens,
        s.spent_today_micros,
        s.usage.in_flight,
    )
}
