//! Cost of one routing decision (admit + settle) on each store.
//!
//! `cargo bench -p llmroute-tests --bench ledger`
//!
//! - memory: 1 candidate; 5 candidates where the 4 cheapest are full (the decision checks all
//!   five and reserves on the last: the worst case).
//! - redis: the same two, plus a bare EVALSHA of a trivial script on the same server and
//!   connection in the same run, as the round-trip reference; `admit` alone is timed separately
//!   (settle runs outside the timed section).
//! - sqlite: the same two on a file in a temporary directory (WAL, one transaction each for
//!   admit and settle; no other process contending).
#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use llmroute_tests::redis_server;
use router_core::clock::SystemClock;
use router_core::config::{DeploymentId, Registry};
use router_core::ledger::{
    ActualUsage, Admission, Ledger, MemoryStore, Need, RedisStore, RedisStoreOptions, SqliteStore,
};

const YAML: &str = r#"
providers:
  - name: p
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: P_KEY
    models:
      - { name: m1, aliases: [chat], price: { input: 1, output: 1 }, limits: { rpm: 1 } }
      - { name: m2, aliases: [chat], price: { input: 2, output: 1 }, limits: { rpm: 1 } }
      - { name: m3, aliases: [chat], price: { input: 3, output: 1 }, limits: { rpm: 1 } }
      - { name: m4, aliases: [chat], price: { input: 4, output: 1 }, limits: { rpm: 1 } }
      - name: roomy
        price: { input: 5, output: 1 }
        limits: { rpm: 1000000000, tpm: 1000000000000, concurrency: 100000 }
"#;

const NEED: Need = Need::new(700, Duration::from_secs(600));

/// Candidate lists: `[roomy]`, and the four full ones followed by `roomy`.
fn candidates(r: &Registry) -> (Vec<DeploymentId>, Vec<DeploymentId>) {
    let roomy = r.resolve("roomy");
    let mut five = r.resolve("chat");
    five.extend(&roomy);
    (roomy, five)
}

async fn fill(ledger: &dyn Ledger, five: &[DeploymentId]) {
    for &d in &five[..4] {
        let _kept = ledger.admit(&NEED, &[d]).await.unwrap();
    }
}

async fn decide(ledger: &dyn Ledger, cands: &[DeploymentId]) {
    match ledger.admit(&NEED, cands).await.unwrap() {
        Admission::Granted(r) => {
            assert_eq!(r.rank, cands.len() - 1);
            ledger.settle(&r, ActualUsage::tokens(650)).await.unwrap();
        }
        Admission::Denied(d) => panic!("bench deployment refused: {d:?}"),
    }
}

fn memory(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let registry = Registry::from_yaml_str(YAML, "bench.yaml").unwrap();
    let store = MemoryStore::new(&registry);
    let (one, five) = candidates(&registry);
    rt.block_on(fill(&store, &five));
    let mut g = c.benchmark_group("memory");
    g.bench_function("admit_settle_1_candidate", |b| {
        b.iter(|| rt.block_on(decide(&store, &one)))
    });
    g.bench_function("admit_settle_5_candidates", |b| {
        b.iter(|| rt.block_on(decide(&store, &five)))
    });
    g.finish();
}

fn redis(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = redis_server();
    let registry = Registry::from_yaml_str(YAML, "bench.yaml").unwrap();
    let options = RedisStoreOptions {
        namespace: server.namespace.clone(),
        ..Default::default()
    };
    let store = Arc::new(
        rt.block_on(RedisStore::connect(&server.url, &registry, options))
            .unwrap(),
    );
    let (one, five) = candidates(&registry);
    rt.block_on(fill(store.as_ref(), &five));
    let client = redis::Client::open(server.url.as_str()).unwrap();
    let mut conn = rt
        .block_on(client.get_multiplexed_async_connection())
        .unwrap();
    let trivial = redis::Script::new("return 1");

    let mut g = c.benchmark_group("redis");
    g.bench_function("bare_evalsha", |b| {
        b.iter(|| {
            rt.block_on(async {
                trivial
                    .prepare_invoke()
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .unwrap()
            })
        })
    });
    for (name, cands) in [("1_candidate", &one), ("5_candidates", &five)] {
        g.bench_function(format!("admit_{name}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let admission = store.admit(&NEED, cands).await.unwrap();
                        timed += start.elapsed();
                        if let Admission::Granted(r) = admission {
                            store.settle(&r, ActualUsage::tokens(650)).await.unwrap();
                        }
                    }
                    timed
                })
            })
        });
        g.bench_function(format!("admit_settle_{name}"), |b| {
            b.iter(|| rt.block_on(decide(store.as_ref(), cands)))
        });
    }
    g.finish();
}

fn sqlite(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::from_yaml_str(YAML, "bench.yaml").unwrap();
    let path = dir.path().join("ledger.db");
    let store = SqliteStore::open(&path, &registry, Arc::new(SystemClock)).unwrap();
    let (one, five) = candidates(&registry);
    rt.block_on(fill(&store, &five));
    let mut g = c.benchmark_group("sqlite");
    g.bench_function("admit_settle_1_candidate", |b| {
        b.iter(|| rt.block_on(decide(&store, &one)))
    });
    g.bench_function("admit_settle_5_candidates", |b| {
        b.iter(|| rt.block_on(decide(&store, &five)))
    });
    g.finish();
}

criterion_group!(benches, memory, redis, sqlite);
criterion_main!(benches);
