//! Cost of one routing decision (admit + settle) on each store.
//!
//! `cargo bench -p llmroute-tests --bench ledger`
//!
//! - memory: 1 candidate; 5 candidates where the 4 cheapest are full (the decision checks all
//!   five and reserves on the last: the worst case).
//! - redis: the same two, plus a bare EVALSHA of a trivial script on the same server in the same
//!   run, as the round-trip reference; `admit` alone is timed separately (settle runs outside the
//!   timed section). Then a side-by-side run (bare and admit calls alternating, medians) prints
//!   the ratio to the bare round trip, and `INFO commandstats` the time spent inside Redis.
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

/// A request of 700 tokens, under an id of its own (a repeated id answers the same reservation).
fn need() -> Need {
    Need::new(700, Duration::from_secs(600))
}

/// Candidate lists: `[roomy]`, and the four full ones followed by `roomy`.
fn candidates(r: &Registry) -> (Vec<DeploymentId>, Vec<DeploymentId>) {
    let roomy = r.resolve("roomy");
    let mut five = r.resolve("chat");
    five.extend(&roomy);
    (roomy, five)
}

async fn fill(ledger: &dyn Ledger, five: &[DeploymentId]) {
    for &d in &five[..4] {
        let _kept = ledger.admit(&need(), &[d]).await.unwrap();
    }
}

async fn decide(ledger: &dyn Ledger, cands: &[DeploymentId]) {
    match ledger.admit(&need(), cands).await.unwrap() {
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
                        let admission = store.admit(&need(), cands).await.unwrap();
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
    rt.block_on(side_by_side(
        store.as_ref(),
        &mut conn,
        &trivial,
        &one,
        &five,
    ));
}

/// Round trips on this machine vary with where the scheduler puts the client and the server
/// (here: 70-95 µs between runs), so the ratio to a bare EVALSHA is also measured call by call:
/// bare, admit with 1 candidate, admit with 5, repeated, comparing medians. Then the time each
/// script spends inside Redis, from `INFO commandstats`.
async fn side_by_side(
    store: &RedisStore,
    conn: &mut redis::aio::MultiplexedConnection,
    trivial: &redis::Script,
    one: &[DeploymentId],
    five: &[DeploymentId],
) {
    const PAIRS: usize = 20_000;
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..PAIRS {
        let start = Instant::now();
        let _: i64 = trivial.prepare_invoke().invoke_async(conn).await.unwrap();
        times[0].push(start.elapsed().as_secs_f64() * 1e6);
        for (t, cands) in times[1..].iter_mut().zip([one, five]) {
            let start = Instant::now();
            let admission = store.admit(&need(), cands).await.unwrap();
            t.push(start.elapsed().as_secs_f64() * 1e6);
            if let Admission::Granted(r) = admission {
                store.settle(&r, ActualUsage::tokens(650)).await.unwrap();
            }
        }
    }
    let [bare, one_t, five_t] = times.map(median);
    println!(
        "redis side by side ({PAIRS} rounds, medians): bare EVALSHA {bare:.1} µs; \
         admit 1 candidate {one_t:.1} µs ({:.2}x); admit 5 candidates {five_t:.1} µs ({:.2}x)",
        one_t / bare,
        five_t / bare
    );

    const CALLS: usize = 2_000;
    let mut inside = Vec::new();
    for cands in [None, Some(one), Some(five)] {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(conn)
            .await
            .unwrap();
        let mut held = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            match cands {
                None => {
                    let _: i64 = trivial.prepare_invoke().invoke_async(conn).await.unwrap();
                }
                Some(c) => match store.admit(&need(), c).await.unwrap() {
                    Admission::Granted(r) => held.push(r),
                    Admission::Denied(d) => panic!("bench deployment refused: {d:?}"),
                },
            }
        }
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .unwrap();
        inside.push(usec_per_call(&info, "evalsha"));
        for r in held {
            store.release(&r).await.unwrap();
        }
    }
    println!(
        "inside Redis (INFO commandstats, {CALLS} calls each): bare EVALSHA {:.1} µs; \
         admit 1 candidate {:.1} µs; admit 5 candidates {:.1} µs",
        inside[0], inside[1], inside[2]
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `usec_per_call` of `command` in an `INFO commandstats` reply.
fn usec_per_call(info: &str, command: &str) -> f64 {
    let line = info
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .unwrap();
    let field = line
        .split(',')
        .find_map(|f| f.strip_prefix("usec_per_call="))
        .unwrap();
    field.parse().unwrap()
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
