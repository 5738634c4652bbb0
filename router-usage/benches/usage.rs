//! Benchmarks of usage records.
//!
//! - `record`: the cost on a request's path of building its record (a template cloned with
//!   fresh ids) and handing it to a [`Recorder`] writing to an SQLite file (target: at most
//!   10 µs a request). Only the handing over is timed; the writer drains between samples.
//! - `postgres_sink`: [`Sink::write`] of batches of 500 records into PostgreSQL (`PG_URL`, else
//!   `postgres://postgres@127.0.0.1:5432/test`), in a schema of its own dropped at the end
//!   (target: at least 5 000 records/s). `sqlite_sink`: the same on an SQLite file.
//!
//! `cargo bench -p router-usage`
// `criterion_group!` makes an undocumented public function.
#![allow(missing_docs)]

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use llmroute_tests::TestPostgres;
use router_core::config::{UsageSettings, UsageSink};
use router_usage::{Batching, Outcome, Record, Recorder, Sink};

/// Records of a batch written to a sink.
const BATCH: usize = 500;

/// The recorder's batching as configured by default.
const BATCHING: Batching = Batching {
    batch: BATCH,
    flush: Duration::from_millis(200),
    timeout: Duration::from_secs(5),
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// A typical record: a streamed answer after one retry.
fn template() -> Record {
    Record {
        id: String::new(),
        at_ms: 1_795_996_800_000,
        request_id: String::new(),
        tenant: Some("acme-research".into()),
        key_id: Some("k-3f9a2c71d0b4".into()),
        model_asked: "fast".into(),
        route: Some("fast-default".into()),
        provider: Some("openai".into()),
        model: Some("gpt-4o-mini".into()),
        prompt_tokens: 1_240,
        cached_tokens: 512,
        completion_tokens: 380,
        reasoning_tokens: 0,
        cost_micros: 412,
        latency_ms: 2_310,
        first_token_ms: Some(420),
        attempts: 2,
        failed_attempts: vec!["rate_limited".into()],
        waited_ms: 35,
        queue_position: None,
        outcome: Outcome::Ok,
        failure: None,
        priority: "interactive".into(),
        stream: true,
    }
}

/// `template` with fresh ids, as a finished request builds its record.
fn fresh(template: &Record) -> Record {
    Record {
        id: format!("{:032x}", fastrand::u128(..)),
        request_id: format!("req_{:024x}", fastrand::u128(..) >> 32),
        ..template.clone()
    }
}

fn open(settings: &UsageSettings, dir: &Path) -> Sink {
    Sink::open(settings, dir)
        .expect("the sink opens")
        .expect("a sink, not `none`")
}

fn record(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("usage.sqlite");
    let sink = open(
        &UsageSettings::with_sink(UsageSink::Sqlite(Some(db.clone()))),
        dir.path(),
    );
    let recorder = {
        let _in_runtime = rt.enter();
        Recorder::start(sink, &dir.path().join("usage.spill"), BATCHING)
    };
    // Between samples (untimed) the table is emptied, so every sample writes to the same file.
    let clear = rusqlite::Connection::open(&db).expect("a second connection");
    clear
        .busy_timeout(Duration::from_secs(5))
        .expect("a busy timeout");
    let template = template();

    let mut group = c.benchmark_group("record");
    group.throughput(Throughput::Elements(1));
    group.bench_function("sqlite", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                recorder.record(fresh(&template));
            }
            let took = start.elapsed();
            rt.block_on(recorder.flush());
            clear
                .execute("DELETE FROM usage_records", [])
                .expect("the table empties");
            took
        })
    });
    group.finish();
    let stats = recorder.stats();
    assert_eq!(stats.spilled, 0, "every record reached the sink: {stats:?}");
}

/// Batches of [`BATCH`] fresh records written to `sink`, one after another.
fn write_batches(c: &mut Criterion, name: &str, rt: &tokio::runtime::Runtime, sink: &Sink) {
    let template = template();
    let batch = || (0..BATCH).map(|_| fresh(&template)).collect::<Vec<_>>();
    // Connected (PostgreSQL: and migrated) before the clock starts.
    rt.block_on(sink.write(&batch()))
        .expect("the first batch is written");
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(20);
    group.bench_function("write_500", |b| {
        b.to_async(rt).iter_batched(
            batch,
            |records| async move { sink.write(&records).await.expect("the batch is written") },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn postgres_sink(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pg = TestPostgres::new();
    let mut settings = UsageSettings::with_sink(UsageSink::Postgres(pg.url().to_owned()));
    settings.schema = pg.schema().to_owned();
    let sink = open(&settings, dir.path());
    write_batches(c, "postgres_sink", &rt, &sink);
    drop(sink);
    // The schema is dropped with `pg`.
}

fn sqlite_sink(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let settings = UsageSettings::with_sink(UsageSink::Sqlite(Some(dir.path().join("u.sqlite"))));
    let sink = open(&settings, dir.path());
    write_batches(c, "sqlite_sink", &rt, &sink);
}

criterion_group!(benches, record, postgres_sink, sqlite_sink);
criterion_main!(benches);
