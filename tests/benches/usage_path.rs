//! The request path while the usage sink is up, unreachable, and silent: `Router::chat` against
//! a local mock upstream, timed per request, with no recorder, with PostgreSQL answering, with
//! PostgreSQL unreachable (a gate that refuses connections) and with PostgreSQL silent (a gate
//! that accepts and never answers; `usage.timeout_ms` 200). After the sink is back, every record
//! of every run is counted in PostgreSQL: none may be missing.
//!
//! `cargo bench -p llmroute-tests --bench usage_path` (`LLMROUTE_USAGE_PATH_N`: requests per run,
//! default 2000). Prints p50 / p99 / p99.9 per run, over 3 rounds of
//! the four runs interleaved.

use std::sync::Arc;
use std::time::{Duration, Instant};

use llmroute_tests::{Gate, TestPostgres};
use router_core::config::{Registry, UsageSettings, UsageSink};
use router_sdk::{ChatRequest, Router, StaticKeys};
use router_state::store::Environment;
use router_usage::Recorder;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Rounds of every run.
const ROUNDS: usize = 3;

fn main() {
    let (n, rt) = llmroute_tests::bench_setup("LLMROUTE_USAGE_PATH_N", 2000);
    rt.block_on(run(n));
}

async fn run(n: usize) {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(llmroute_tests::OPENAI_OK, "application/json"),
        )
        .mount(&upstream)
        .await;
    let yaml = format!(
        "providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: m, aliases: [chat], price: {{ input: 1, output: 2 }} }}\n\
         defaults: {{ model: chat }}\n",
        upstream.uri()
    );
    let registry = Registry::from_yaml_str(&yaml, "bench.yaml").expect("a valid configuration");
    let pg = TestPostgres::new();
    let gate = Gate::new(pg.addr());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut settings = UsageSettings::with_sink(UsageSink::Postgres(pg.url_via(gate.addr())));
    settings.schema = pg.schema().to_owned();
    settings.spill = Some(dir.path().join("usage.spill"));
    settings.timeout = Duration::from_millis(200);
    let env = Environment::fixed::<&str>(&[], None);
    let recorder = router_state::usage::open(&settings, &env)
        .expect("the sink opens")
        .expect("a recorder");

    println!(
        "{n} sequential requests per run, {ROUNDS} rounds of every run interleaved; latency of \
         Router::chat against a local mock"
    );
    let plain = router(&registry, None).await;
    let recorded = router(&registry, Some(recorder.clone())).await;
    let runs = [
        "no usage records",
        "PostgreSQL answering",
        "PostgreSQL unreachable",
        "PostgreSQL silent (timeout 200 ms)",
    ];
    let mut took: Vec<Vec<Duration>> = vec![Vec::new(); runs.len()];
    for _ in 0..ROUNDS {
        took[0].extend(timed(&plain, n).await);
        took[1].extend(timed(&recorded, n).await);
        gate.close();
        took[2].extend(timed(&recorded, n).await);
        gate.pause();
        took[3].extend(timed(&recorded, n).await);
        gate.open();
        // Back to answering before the next round: what was spilled is replayed now.
        while !recorder.retry().await {}
    }
    println!(
        "{:<36} {:>9} {:>9} {:>9}",
        "run", "p50 µs", "p99 µs", "p99.9 µs"
    );
    for (label, mut t) in runs.iter().zip(took) {
        t.sort();
        let at = |q: f64| t[((t.len() as f64 * q) as usize).min(t.len() - 1)].as_micros();
        println!(
            "{label:<36} {:>9} {:>9} {:>9}",
            at(0.5),
            at(0.99),
            at(0.999)
        );
    }
    let client = pg.client().await;
    let count: i64 = client
        .query_one(
            &format!("SELECT COUNT(*) FROM \"{}\".usage_records", pg.schema()),
            &[],
        )
        .await
        .expect("the records can be counted")
        .get(0);
    let stats = recorder.stats();
    println!(
        "records handed over {}: written as they came {}, spilled {}, replayed {}; in PostgreSQL \
         {count}, missing {}",
        stats.recorded,
        stats.written,
        stats.spilled,
        stats.replayed,
        stats.recorded as i64 - count
    );
    assert_eq!(count as u64, stats.recorded, "no record may be lost");
}

async fn router(registry: &Registry, recorder: Option<Recorder>) -> Router {
    let keys = StaticKeys::new().with("OA_KEY", "sk-bench");
    let builder = Router::builder(registry.clone()).keys(Arc::new(keys));
    let builder = match recorder {
        Some(r) => builder.usage(r),
        None => builder,
    };
    builder.build().await.expect("a router")
}

/// `n` requests through `router` (after `n / 10` unmeasured), each one's latency.
async fn timed(router: &Router, n: usize) -> Vec<Duration> {
    for _ in 0..n / 10 {
        router
            .chat(ChatRequest::new("hi"))
            .await
            .expect("an answer");
    }
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        router
            .chat(ChatRequest::new("hi"))
            .await
            .expect("an answer");
        took.push(started.elapsed());
    }
    took
}
