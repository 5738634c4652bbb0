//! Two gateways on one Redis: a key created, rotated or revoked through one is served (or
//! refused) by the other within a second, with no restart.

use std::time::Duration;

use router_core::keys::RedisKeys;

use super::admin::{ADMIN, created};
use super::*;

/// A gateway with an admin key whose runtime keys are in `redis`.
async fn on_redis(redis: &llmroute_tests::TestRedis) -> Running {
    let upstream = MockServer::start().await;
    let extra = format!("  admin_keys: [{}]\n", hash_key(ADMIN));
    let yaml = yaml_over(&upstream.uri(), "", &extra);
    let store = RedisKeys::connect(&redis.url, &redis.namespace, Duration::from_secs(2))
        .await
        .unwrap();
    start_access(upstream, &yaml, |a| a.with_store(Arc::new(store))).await
}

/// Waits, a second at most, until `r` serves a version of the keys past the one it served.
async fn next_version(r: &mut Running, served: u64) {
    let waited = tokio::time::timeout(Duration::from_secs(1), r.keys.past(served)).await;
    assert!(
        waited.is_ok(),
        "no new keys within 1 s (at version {served})"
    );
}

#[tokio::test]
async fn a_key_made_rotated_or_revoked_on_one_instance_holds_on_the_other_within_a_second() {
    let redis = llmroute_tests::redis_server();
    let a = on_redis(&redis).await;
    let mut b = on_redis(&redis).await;
    let served = b.keys.version();
    let (id, secret) = created(&a, json!({})).await;
    next_version(&mut b, served).await;
    assert_eq!(b.models_status(&secret).await.0, 200);
    // Rotated with no grace on A: the old secret stops on B, the new one works there.
    let served = b.keys.version();
    let (status, rotated) = a
        .admin_post(
            &format!("/admin/v1/keys/{id}/rotate"),
            json!({"grace_secs": 0}),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    let new = rotated["key"].as_str().unwrap();
    next_version(&mut b, served).await;
    assert_eq!(b.models_status(&secret).await.0, 401);
    assert_eq!(b.models_status(new).await.0, 200);
    // Revoked through B: refused on A.
    let served = a.keys.version();
    let (status, _) = b
        .admin_post(&format!("/admin/v1/keys/{id}/revoke"), json!({}))
        .await;
    assert_eq!(status, 200);
    let mut a = a;
    next_version(&mut a, served).await;
    assert_eq!(a.models_status(new).await.0, 401);
    assert_eq!(b.models_status(new).await.0, 401);
}

/// A gateway whose ledger and runtime keys are both in `redis`, its tier `pro` with `tier`.
pub(super) async fn on_redis_ledger(
    redis: &llmroute_tests::TestRedis,
    upstream_base: &str,
    tier: &str,
) -> Running {
    use router_state::store::{ChoiceOrigin, LedgerChoice};
    let extra = format!("  admin_keys: [{}]\n", hash_key(ADMIN));
    let yaml = format!(
        "namespace: {}\n{}",
        redis.namespace,
        yaml_over(upstream_base, tier, &extra)
    );
    let registry = Registry::from_yaml_str(&yaml, "gateway.yaml").unwrap();
    let choice = LedgerChoice::Redis {
        url: redis.url.clone(),
        from: ChoiceOrigin::Config,
    };
    let ledger = router_state::store::open(&choice, &registry).await.unwrap();
    let router = router_builder(registry)
        .ledger(ledger)
        .build()
        .await
        .unwrap();
    let store = RedisKeys::connect(&redis.url, &redis.namespace, Duration::from_secs(2))
        .await
        .unwrap();
    serve_router(MockServer::start().await, router, |a| {
        a.with_store(Arc::new(store))
    })
    .await
}

/// An upstream whose every answer costs $0.002602 (1117 tokens at $2 and 46 at $8 per
/// million) and takes 50 ms.
pub(super) async fn priced_upstream() -> MockServer {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(fixture("openai/ok.json"), "application/json")
                .set_delay(Duration::from_millis(50)),
        )
        .mount(&upstream)
        .await;
    upstream
}

/// The cost of `served` answers of [`priced_upstream`], USD.
fn cost_of(served: usize) -> f64 {
    served as f64 * (1117.0 * 2.0 + 46.0 * 8.0) / 1e6
}

/// Sends 50 chats at once with `key`, every other one to `b`; returns their statuses and the
/// body of one refused, if any was.
async fn fifty_at_once(a: &Running, b: &Running, key: &str) -> (Vec<u16>, Option<String>) {
    // A prompt estimated at no less than the 1117 tokens the provider reports, and room for
    // its 46: each admission reserves at least what its answer costs.
    let prompt = "hello ".repeat(1200);
    let body = json!({"model": "chat", "max_tokens": 46, "messages": [{"role": "user", "content": prompt}]});
    let sends = (0..50).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        let request = a
            .http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-llmroute-timeout", "1")
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    });
    let answers = futures_util::future::join_all(sends).await;
    let refused = answers
        .iter()
        .find(|(s, _)| *s == 429)
        .map(|(_, b)| b.clone());
    (answers.into_iter().map(|(s, _)| s).collect(), refused)
}

/// Of `statuses`, how many were served (200); every one is 200 or 429, and both occur.
fn served_of(statuses: &[u16]) -> usize {
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!(ok + refused, statuses.len(), "{statuses:?}");
    assert!(refused > 0, "the budget never bound: {statuses:?}");
    assert!(ok > 0, "nothing was served: {statuses:?}");
    ok
}

/// 50 requests at once with one runtime key, spread over two instances on one Redis: its
/// tenant's daily budget is never overrun, and the requests over it are refused with 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_keys_tenant_budget_holds_under_50_concurrent_requests_over_two_instances() {
    let redis = llmroute_tests::redis_server();
    let upstream = priced_upstream().await;
    let tier = "budget: { daily_usd: 0.03 }";
    let a = on_redis_ledger(&redis, &upstream.uri(), tier).await;
    let mut b = on_redis_ledger(&redis, &upstream.uri(), tier).await;
    let served = b.keys.version();
    let (_, key) = created(&a, json!({})).await;
    next_version(&mut b, served).await;
    let (statuses, _) = fifty_at_once(&a, &b, &key).await;
    let ok = served_of(&statuses);
    // What reached the provider is what was served, and its cost is within the budget.
    let calls = upstream.received_requests().await.unwrap().len();
    assert_eq!(calls, ok);
    let spent = cost_of(ok);
    assert!(spent <= 0.03, "spent ${spent} of $0.03 ({ok} served)");
}

/// 50 requests at once with one runtime key whose own daily budget ($0.02) is well inside its
/// tenant's ($1), spread over two instances on one Redis: the key's budget is never overrun,
/// the refusals name the key's budget, and another key of the same tenant is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_own_budget_holds_under_50_concurrent_requests_over_two_instances() {
    let redis = llmroute_tests::redis_server();
    let upstream = priced_upstream().await;
    let tier = "budget: { daily_usd: 1.0 }";
    let a = on_redis_ledger(&redis, &upstream.uri(), tier).await;
    let mut b = on_redis_ledger(&redis, &upstream.uri(), tier).await;
    let served = b.keys.version();
    let (_, key) = created(&a, json!({"limits": {"daily_usd": 0.02}})).await;
    let (_, other) = created(&a, json!({"name": "other"})).await;
    next_version(&mut b, served).await;
    let (statuses, refusal) = fifty_at_once(&a, &b, &key).await;
    let ok = served_of(&statuses);
    let calls = upstream.received_requests().await.unwrap().len();
    assert_eq!(calls, ok);
    let spent = cost_of(ok);
    assert!(
        spent <= 0.02,
        "spent ${spent} of the key's $0.02 ({ok} served)"
    );
    let refusal = refusal.unwrap();
    assert!(refusal.contains("key's daily budget"), "{refusal}");
    let chat =
        json!({"model": "chat", "max_tokens": 46, "messages": [{"role": "user", "content": "hi"}]});
    let response = a
        .http
        .post(format!("{}/v1/chat/completions", b.base))
        .bearer_auth(&other)
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        200,
        "the tenant's other key is not bound"
    );
}
