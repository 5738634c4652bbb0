//! Two routers sharing one Redis share cooldowns: a 429 seen by one makes the other skip that
//! deployment.

use std::sync::Arc;

use llmroute_tests::redis_server;
use router_core::config::Registry;
use router_core::ledger::{Ledger, RedisStore, RedisStoreOptions};
use router_sdk::{ChatRequest, Router, StaticKeys};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

use crate::support::*;

#[tokio::test]
async fn a_429_seen_by_one_router_makes_the_other_skip_that_deployment() {
    let redis = redis_server();
    let ups = [
        Upstream::openai("cheap", (0.1, 0.2)),
        Upstream::anthropic("dear", (3.0, 15.0)),
    ];
    let (cheap_a, cheap_b, dear) = (
        MockServer::start().await,
        MockServer::start().await,
        MockServer::start().await,
    );
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            error_json(429, "openai/rate_limit_429.json").insert_header("retry-after", "30"),
        )
        .expect(1)
        .mount(&cheap_a)
        .await;
    // Router B's view of the same deployment must never be called while it cools down.
    Mock::given(method("POST"))
        .respond_with(ok_json("openai/ok.json"))
        .expect(0)
        .mount(&cheap_b)
        .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(2)
        .mount(&dear)
        .await;

    let mut routers = Vec::new();
    for cheap in [&cheap_a, &cheap_b] {
        routers.push(router_over(&redis, &ups, &[cheap.uri(), dear.uri()]).await);
    }
    let a = routers[0].chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(
        (a.receipt.provider.as_str(), a.receipt.attempts.len()),
        ("dear", 2)
    );
    let b = routers[1].chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(
        (b.receipt.provider.as_str(), b.receipt.attempts.len()),
        ("dear", 1)
    );
    // A remote ledger is settled off the caller's path: wait until both routers have paid.
    for router in &routers {
        router.drain().await;
    }
    let all: Vec<_> = routers[1].registry().deployment_ids().collect();
    let snaps = routers[1].ledger().snapshot(&all).await.unwrap();
    assert!(
        snaps[0].cooldown.is_some_and(|c| c.as_secs() >= 29),
        "{snaps:?}"
    );
    assert!(snaps.iter().all(|s| s.usage.in_flight == 0));
}

/// A router of `ups`, each at its server of `bases`, over the shared `redis`.
async fn router_over(
    redis: &llmroute_tests::TestRedis,
    ups: &[Upstream],
    bases: &[String],
) -> Router {
    let pairs: Vec<(&Upstream, String)> = ups.iter().zip(bases.iter().cloned()).collect();
    let registry = Registry::from_yaml_str(&config(&pairs), "t.yaml").unwrap();
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        ..Default::default()
    };
    let store: Arc<dyn Ledger> = Arc::new(
        RedisStore::connect(&redis.url, &registry, options)
            .await
            .unwrap(),
    );
    let keys = ups.iter().fold(StaticKeys::new(), |k, u| {
        k.with(key_var(u.name), planted_key(u.name))
    });
    let router = Router::builder(registry).ledger(store).keys(Arc::new(keys));
    router.build().await.unwrap()
}

#[tokio::test]
async fn requests_no_limit_concerns_make_no_redis_call_and_their_cooldowns_are_shared() {
    let redis = redis_server();
    let mut free = Upstream::openai("free", (0.1, 0.2));
    free.limits = "";
    let ups = [free, Upstream::anthropic("dear", (3.0, 15.0))];
    let (free_a, free_b, dear) = (
        MockServer::start().await,
        MockServer::start().await,
        MockServer::start().await,
    );
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .up_to_n_times(40)
        .mount(&free_a)
        .await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            error_json(429, "openai/rate_limit_429.json").insert_header("retry-after", "30"),
        )
        .mount(&free_a)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok_json("openai/ok.json"))
        .expect(0)
        .mount(&free_b)
        .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .mount(&dear)
        .await;
    let a = router_over(&redis, &ups, &[free_a.uri(), dear.uri()]).await;
    // 40 requests on the deployment nothing limits: no admission, no settlement in Redis
    // (a snapshot of its cooldown a second, at most, meanwhile).
    let before = llmroute_tests::script_calls(&redis).await;
    for _ in 0..40 {
        let answer = a.chat(ChatRequest::new("Hello")).await.unwrap();
        assert_eq!(answer.receipt.provider, "free");
    }
    a.drain().await;
    let free_calls = llmroute_tests::script_calls(&redis).await - before;
    assert!(
        free_calls < 10,
        "{free_calls} script calls for 40 free requests"
    );
    // The same on the limited deployment: an admission and a settlement each.
    let before = llmroute_tests::script_calls(&redis).await;
    for _ in 0..40 {
        let mut req = ChatRequest::new("Hello");
        req.providers = vec!["dear".into()];
        a.chat(req).await.unwrap();
    }
    a.drain().await;
    let limited_calls = llmroute_tests::script_calls(&redis).await - before;
    assert!(
        limited_calls >= 40,
        "{limited_calls} script calls for 40 limited requests"
    );
    // A 429 on the free deployment cools it down in Redis too: router B follows it as soon
    // as it reads the free deployments' cooldowns (its task does every second).
    let cooled = a.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(cooled.receipt.provider, "dear");
    let b = router_over(&redis, &ups, &[free_b.uri(), dear.uri()]).await;
    let all: Vec<_> = b.registry().deployment_ids().collect();
    b.ledger().snapshot(&all).await.unwrap();
    let answer = b.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(
        (
            answer.receipt.provider.as_str(),
            answer.receipt.attempts.len()
        ),
        ("dear", 1)
    );
}
