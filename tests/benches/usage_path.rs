//! The request path while the usage sink is up, unreachable, and silent: `Router::chat` against
//! a local mock upstream, timed per request, with no recorder, with PostgreSQL answering, with
//! PostgreSQL unreachable (a gate that refuses connections) and with PostgreSQL silent (a gate
//! that accepts and never answers; `usage.timeout_ms` 200). After the sink is back, every record
//! of every run is counted in PostgreSQL: none may be missing.
//!
//! `cargo bench -p llmroute-tests --bench usage_path` (`LLMROUTE_USAGE_PATH_N`: requests per run,
//! default 3000). Prints p50 / p99 / p99.9 per run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use llmroute_tests::{Gate, TestPostgres};
use router_core::config::{Registry, UsageSettings, UsageSink};
use router_sdk::store::Environment;
use router_sdk::usage::Recorder;
use router_sdk::{ChatRequest, Router, StaticKeys};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const OK: &str = r#"{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;

fn main() {
    let n: usize = std::env::var("LLMROUTE_USAGE_PATH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    rt.block_on(run(n));
}

async fn run(n: usize) {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(OK, "application/json"))
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
    let recorder = router_sdk::usage::open(&settings, &env)
        .expect("the sink opens")
        .expect("a recorder");

    println!("{n} sequential requests per run; latency of Router::chat against a local mock");
    println!(
        "{:<34} {:>9} {:>9} {:>9}   records: sink / spill / replayed",
        "run", "p50 µs", "p99 µs", "p99.9 µs"
    );
    let plain = router(&registry, None).await;
    timed("no usage records", &plain, n, None).await;
    let recorded = router(&registry, Some(recorder.clone())).await;
    timed("PostgreSQL answering", &recorded, n, Some(&recorder)).await;
    gate.close();
    timed("PostgreSQL unreachable", &recorded, n, Some(&recorder)).await;
    gate.pause();
    timed(
        "PostgreSQL silent (timeout 200 ms)",
        &recorded,
        n,
        Some(&recorder),
    )
    .await;
    gate.open();
    timed("PostgreSQL answering again", &recorded, n, Some(&recorder)).await;
    let mut back = recorder.retry().await;
    while !back {
        // The sink's own retry is due within its backoff; `retry` tries now.
        back = recorder.retry().await;
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
        "records handed over {}, in PostgreSQL {count}, missing {}",
        stats.recorded,
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

async fn timed(label: &str, router: &Router, n: usize, recorder: Option<&Recorder>) {
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
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)].as_micros();
    let records = recorder.map_or_else(String::new, |r| {
        let s = r.stats();
        format!("{} / {} / {}", s.written, s.spilled, s.replayed)
    });
    println!(
        "{label:<34} {:>9} {:>9} {:>9}   {records}",
        at(0.5),
        at(0.99),
        at(0.999)
    );
}
