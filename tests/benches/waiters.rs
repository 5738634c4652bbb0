//! Requests waiting behind one saturated deployment: `LLMROUTE_WAITERS_N` requests (default
//! 200) arrive 2 ms apart, round robin over four routers (four instances, each its own Redis
//! connection) sharing one Redis, for a deployment that holds 4 calls at a time, each answered
//! by a local mock upstream after 20 ms.
//!
//! `cargo bench -p llmroute-tests --bench waiters`. Prints the Redis script calls per request
//! (admissions, settlements, and whatever waiting adds), the spread of the time each request
//! waited, the time to serve them all, and how far arrival order was broken: the most later
//! arrivals that passed one request, and the number of pairs served out of arrival order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use llmroute_tests::{OPENAI_OK, TestRedis, redis_server, script_calls};
use router_core::config::Registry;
use router_core::ledger::{RedisStore, RedisStoreOptions};
use router_sdk::{ChatRequest, Router, StaticKeys};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const INSTANCES: usize = 4;

fn main() {
    let (n, rt) = llmroute_tests::bench_setup("LLMROUTE_WAITERS_N", 200);
    rt.block_on(run(n));
}

async fn run(n: usize) {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(OPENAI_OK, "application/json")
                .set_delay(Duration::from_millis(20)),
        )
        .mount(&upstream)
        .await;
    let yaml = format!(
        "providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: m, aliases: [chat], price: {{ input: 1, output: 2 }}, \
         limits: {{ concurrency: 4 }} }}\n\
         defaults: {{ model: chat }}\nretry: {{ deadline_secs: 600 }}\n",
        upstream.uri()
    );
    let registry = Registry::from_yaml_str(&yaml, "bench.yaml").expect("a valid configuration");
    let redis = redis_server();
    let mut routers = Vec::new();
    for _ in 0..INSTANCES {
        routers.push(router(&redis, &registry).await);
    }
    let calls_before = script_calls(&redis).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..n {
        let router = routers[k % INSTANCES].clone();
        tasks.push(tokio::spawn(async move {
            let answer = router.chat(ChatRequest::new(format!("w{k}"))).await;
            answer.map(|a| a.receipt.waited)
        }));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut waited = Vec::new();
    for t in tasks {
        waited.push(
            t.await
                .expect("a request task")
                .expect("every request is served"),
        );
    }
    let elapsed = started.elapsed();
    let calls = script_calls(&redis).await - calls_before;
    let served = served_order(&upstream).await;
    report(n, calls, &mut waited, elapsed, &served);
}

async fn router(redis: &TestRedis, registry: &Registry) -> Router {
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        ..RedisStoreOptions::default()
    };
    let store = RedisStore::connect(&redis.url, registry, options)
        .await
        .expect("the bench's Redis");
    Router::builder(registry.clone())
        .ledger(Arc::new(store))
        .keys(Arc::new(StaticKeys::new().with("OA_KEY", "sk-bench")))
        .build()
        .await
        .expect("a router")
}

/// The arrival index of each request, in the order the upstream received them.
async fn served_order(upstream: &MockServer) -> Vec<usize> {
    let received = upstream.received_requests().await.unwrap_or_default();
    received
        .iter()
        .filter_map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            let text = body["messages"][0]["content"].as_str()?;
            text.strip_prefix('w')?.parse().ok()
        })
        .collect()
}

fn report(n: usize, calls: u64, waited: &mut [Duration], elapsed: Duration, served: &[usize]) {
    waited.sort();
    let at = |q: f64| waited[((waited.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let waiting = waited.iter().filter(|w| !w.is_zero()).count();
    println!("waiters: {n} requests over {INSTANCES} instances, concurrency 4, 20 ms calls");
    println!(
        "redis script calls: {calls} ({:.2} per request; {:.2} per request that waited beyond its \
         admission and settlement)",
        calls as f64 / n as f64,
        calls.saturating_sub(2 * n as u64) as f64 / waiting.max(1) as f64
    );
    println!(
        "waited: p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms ({waiting} of {n} waited); all served in {:.2} s",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(1.0)),
        elapsed.as_secs_f64()
    );
    let (passed, pairs) = inversions(served);
    println!(
        "arrival order: at most {passed} later arrivals passed one request; {pairs} pairs served \
         out of order"
    );
}

/// Over the arrival indexes in service order: the most later arrivals served before any one
/// request, and the number of pairs served out of arrival order.
fn inversions(served: &[usize]) -> (usize, usize) {
    let mut most = 0;
    let mut pairs = 0;
    for (pos, &k) in served.iter().enumerate() {
        let passed = served[..pos].iter().filter(|&&j| j > k).count();
        most = most.max(passed);
        pairs += passed;
    }
    (most, pairs)
}
