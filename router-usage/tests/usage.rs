//! Usage records end to end, each behaviour on an SQLite file and on a PostgreSQL schema (the
//! same test body on both): written through a recorder and read back by the report query, kept
//! once per id, migrated once, spilled while the sink is unreachable or too slow and replayed
//! once it answers, and a spill file of an earlier run (cut-short lines included) replayed.
//!
//! PostgreSQL: `PG_URL`, else `postgres://postgres@127.0.0.1:5432/test`; each test works in a
//! schema of its own, dropped at its end. A test fails when the server is unreachable.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use llmroute_tests::{Gate, TestPostgres};
use router_core::config::{UsageSettings, UsageSink};
use router_usage::{
    Batching, Group, Outcome, Query, Record, Recorder, SCHEMA_VERSION, Sink, Totals,
};

/// 2026-11-30T00:00:00Z.
const SINCE: u64 = 1_795_996_800_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;
/// Two days after [`SINCE`].
const UNTIL: u64 = SINCE + 2 * DAY;

/// Small batches, a short wait for more, a generous write timeout.
const BATCHING: Batching = Batching {
    batch: 4,
    flush: Duration::from_millis(20),
    timeout: Duration::from_secs(5),
};

/// A write timeout short enough for the tests of a sink that does not answer.
const SHORT_TIMEOUT: Duration = Duration::from_millis(500);

/// Where a test keeps its records: a fresh SQLite file or a fresh PostgreSQL schema, and a
/// directory of its own for the spill file.
struct Store {
    dir: tempfile::TempDir,
    pg: Option<TestPostgres>,
}

impl Store {
    fn sqlite() -> Store {
        Store {
            dir: tempfile::tempdir().expect("a temporary directory"),
            pg: None,
        }
    }

    fn postgres() -> Store {
        Store {
            dir: tempfile::tempdir().expect("a temporary directory"),
            pg: Some(TestPostgres::new()),
        }
    }

    fn pg(&self) -> &TestPostgres {
        self.pg.as_ref().expect("a PostgreSQL store")
    }

    fn sqlite_path(&self) -> PathBuf {
        self.dir.path().join("usage.sqlite")
    }

    fn spill(&self) -> PathBuf {
        self.dir.path().join("usage.spill")
    }

    /// `usage:` naming this store, batched as [`BATCHING`].
    fn settings(&self) -> UsageSettings {
        let sink = match &self.pg {
            None => UsageSink::Sqlite(Some(self.sqlite_path())),
            Some(pg) => UsageSink::Postgres(pg.url().to_owned()),
        };
        let mut settings = UsageSettings::with_sink(sink);
        if let Some(pg) = &self.pg {
            settings.schema = pg.schema().to_owned();
        }
        settings.batch = BATCHING.batch;
        settings.flush = BATCHING.flush;
        settings.timeout = BATCHING.timeout;
        settings
    }

    /// A sink over this store, opened as llmroute opens it.
    fn sink(&self) -> Sink {
        open(&self.settings(), self.dir.path())
    }

    /// A PostgreSQL sink over this store reached through `gate`, each write bounded by
    /// `timeout`.
    fn sink_via(&self, gate: &Gate, timeout: Duration) -> Sink {
        let mut settings = self.settings();
        settings.sink = UsageSink::Postgres(self.pg().url_via(gate.addr()));
        settings.timeout = timeout;
        open(&settings, self.dir.path())
    }

    /// The versions in `usage_migrations`.
    async fn migrations(&self) -> Vec<i64> {
        match &self.pg {
            None => self.sqlite_column("SELECT version FROM usage_migrations ORDER BY version"),
            Some(pg) => {
                let sql = format!(
                    "SELECT version FROM \"{}\".usage_migrations ORDER BY version",
                    pg.schema()
                );
                let rows = pg.client().await.query(&sql, &[]).await;
                rows.expect("usage_migrations reads")
                    .iter()
                    .map(|r| r.get(0))
                    .collect()
            }
        }
    }

    /// The ids of every stored record, sorted (a record stored twice would show twice).
    async fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = match &self.pg {
            None => self.sqlite_column("SELECT id FROM usage_records"),
            Some(pg) => {
                let sql = format!("SELECT id FROM \"{}\".usage_records", pg.schema());
                let rows = pg.client().await.query(&sql, &[]).await;
                rows.expect("usage_records reads")
                    .iter()
                    .map(|r| r.get(0))
                    .collect()
            }
        };
        ids.sort();
        ids
    }

    fn sqlite_column<T: rusqlite::types::FromSql>(&self, sql: &str) -> Vec<T> {
        let conn = rusqlite::Connection::open(self.sqlite_path()).expect("the SQLite file opens");
        let mut stmt = conn.prepare(sql).expect("the statement prepares");
        stmt.query_map([], |r| r.get(0))
            .expect("the statement runs")
            .collect::<Result<_, _>>()
            .expect("the rows read")
    }
}

fn open(settings: &UsageSettings, state_dir: &Path) -> Sink {
    Sink::open(settings, state_dir)
        .expect("the sink opens")
        .expect("a sink, not `none`")
}

/// A sink that never answers: a PostgreSQL URL on a closed gate (kept alive by the caller).
fn down_sink() -> (Gate, Sink) {
    let gate = Gate::new("127.0.0.1:9");
    gate.close();
    let url = format!("postgres://postgres@{}/test", gate.addr());
    let mut settings = UsageSettings::with_sink(UsageSink::Postgres(url));
    settings.timeout = SHORT_TIMEOUT;
    let sink = open(&settings, Path::new("."));
    (gate, sink)
}

/// Generates a module `$name` of two tests, `sqlite` and `postgres`, running the async fn
/// `$name(Store)` on each.
macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::Store::sqlite()).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::Store::postgres()).await
            }
        }
    };
}

/// A successful request of `id`, finished at `at_ms`.
fn record(id: &str, at_ms: u64) -> Record {
    Record {
        id: id.to_owned(),
        at_ms,
        request_id: format!("req-{id}"),
        tenant: Some("acme".into()),
        key_id: Some("k-0123abcd".into()),
        model_asked: "gpt-4o".into(),
        route: None,
        provider: Some("openai".into()),
        model: Some("gpt-4o".into()),
        prompt_tokens: 10,
        cached_tokens: 0,
        completion_tokens: 5,
        reasoning_tokens: 0,
        cost_micros: 100,
        latency_ms: 50,
        first_token_ms: None,
        attempts: 1,
        failed_attempts: Vec::new(),
        waited_ms: 0,
        queue_position: None,
        outcome: Outcome::Ok,
        failure: None,
        priority: "interactive".into(),
        stream: false,
    }
}

/// `n` records with fresh ids, in the period of the tests.
fn fresh(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| record(&format!("{:032x}", fastrand::u128(..)), SINCE + i as u64))
        .collect()
}

fn sorted_ids(records: &[Record]) -> Vec<String> {
    let mut ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    ids
}

/// The spill file's size (0 when missing).
fn spill_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Records handed to the recorder over the whole time range, read back by the report query.
async fn count(sink: &Sink) -> u64 {
    let all = Query {
        since_ms: 0,
        until_ms: u64::MAX,
        by: Vec::new(),
        tenant: None,
        model: None,
    };
    let rows = sink.query(&all).await.expect("the query runs");
    rows[0].totals.requests
}

// --- the report query over known records ---

/// The known records, named `a` to `g`: `a` to `e` in [SINCE, UNTIL), `f` at UNTIL and `g`
/// just before SINCE (both outside).
fn known() -> Vec<(char, Record)> {
    let at = |day: u64, h: u64, ms: u64| SINCE + day * DAY + h * HOUR + ms;
    let a = Record {
        model_asked: "fast".into(),
        route: Some("fast-rule".into()),
        prompt_tokens: 100,
        cached_tokens: 20,
        completion_tokens: 50,
        reasoning_tokens: 10,
        cost_micros: 1_500,
        latency_ms: 200,
        first_token_ms: Some(40),
        stream: true,
        ..record("a", SINCE)
    };
    let b = Record {
        model_asked: "gpt-4o-mini".into(),
        model: Some("gpt-4o-mini".into()),
        prompt_tokens: 80,
        completion_tokens: 0,
        cost_micros: 300,
        latency_ms: 900,
        attempts: 2,
        failed_attempts: vec!["rate_limited".into(), "server".into()],
        waited_ms: 50,
        queue_position: None,
        outcome: Outcome::Failed,
        failure: Some("rate_limited".into()),
        ..record("b", at(0, 14, 5 * 60_000))
    };
    let c = Record {
        tenant: Some("beta".into()),
        model_asked: "claude".into(),
        provider: Some("anthropic".into()),
        model: Some("claude-sonnet".into()),
        prompt_tokens: 300,
        completion_tokens: 120,
        cost_micros: 4_200,
        latency_ms: 400,
        waited_ms: 10,
        queue_position: None,
        priority: "batch".into(),
        ..record("c", at(0, 15, 0) - 1)
    };
    let d = Record {
        tenant: None,
        key_id: None,
        provider: None,
        model: None,
        prompt_tokens: 0,
        completion_tokens: 0,
        cost_micros: 0,
        latency_ms: 100,
        attempts: 0,
        outcome: Outcome::Cancelled,
        ..record("d", at(1, 0, 0))
    };
    let e = Record {
        tenant: Some("beta".into()),
        model_asked: "fast".into(),
        provider: Some("anthropic".into()),
        model: Some("claude-sonnet".into()),
        prompt_tokens: 200,
        cached_tokens: 50,
        completion_tokens: 80,
        reasoning_tokens: 20,
        cost_micros: 2_500,
        latency_ms: 300,
        waited_ms: 5,
        queue_position: None,
        ..record("e", UNTIL - 1)
    };
    let outside = |id: &str, at_ms: u64| Record {
        cost_micros: 999_999,
        latency_ms: 99_999,
        ..record(id, at_ms)
    };
    vec![
        ('a', a),
        ('b', b),
        ('c', c),
        ('d', d),
        ('e', e),
        ('f', outside("f", UNTIL)),
        ('g', outside("g", SINCE - 1)),
    ]
}

/// Totals of `records`, summed here (the reference the databases are held to).
fn totals_of(records: &[&Record]) -> Totals {
    let mut t = Totals::default();
    for r in records {
        t.requests += 1;
        match r.outcome {
            Outcome::Ok => t.ok += 1,
            Outcome::Failed => t.failed += 1,
            Outcome::Cancelled => t.cancelled += 1,
        }
        t.prompt_tokens += r.prompt_tokens;
        t.cached_tokens += r.cached_tokens;
        t.completion_tokens += r.completion_tokens;
        t.reasoning_tokens += r.reasoning_tokens;
        t.cost_micros += r.cost_micros;
        t.attempts += u64::from(r.attempts);
        t.max_latency_ms = t.max_latency_ms.max(r.latency_ms);
        t.waited_ms += r.waited_ms;
    }
    if t.requests > 0 {
        let sum: u64 = records.iter().map(|r| r.latency_ms).sum();
        t.mean_latency_ms = sum as f64 / t.requests as f64;
    }
    let latencies: Vec<u64> = records.iter().map(|r| r.latency_ms).collect();
    let [p50, p95, p99] = percentiles(latencies);
    (t.latency_p50_ms, t.latency_p95_ms, t.latency_p99_ms) =
        (p50.unwrap_or(0), p95.unwrap_or(0), p99.unwrap_or(0));
    let firsts: Vec<u64> = records.iter().filter_map(|r| r.first_token_ms).collect();
    [t.ttft_p50_ms, t.ttft_p95_ms, t.ttft_p99_ms] = percentiles(firsts);
    t
}

/// The 50th, 95th and 99th percentiles of `values` by nearest rank: the value of rank
/// ceil(p x n / 100) in ascending order.
fn percentiles(mut values: Vec<u64>) -> [Option<u64>; 3] {
    values.sort_unstable();
    let n = values.len();
    [50, 95, 99].map(|p| {
        let rank = (p * n).div_ceil(100);
        rank.checked_sub(1).and_then(|i| values.get(i).copied())
    })
}

fn assert_totals(got: &Totals, want: &Totals, what: &str) {
    let exact = |t: &Totals| Totals {
        mean_latency_ms: 0.0,
        ..*t
    };
    assert_eq!(exact(got), exact(want), "{what}");
    assert!(
        (got.mean_latency_ms - want.mean_latency_ms).abs() < 1e-9,
        "{what}: mean latency {} != {}",
        got.mean_latency_ms,
        want.mean_latency_ms
    );
}

/// One expected group: its key, the names of its records, its start.
type Expected<'a> = (&'a [&'a str], &'a str, Option<u64>);

/// Runs `query` and checks its rows against `expected`. Rows grouped by day or hour alone come
/// in time order; rows grouped by names come in the database's collation, so those are compared
/// sorted.
async fn check(sink: &Sink, known: &[(char, Record)], query: Query, expected: &[Expected<'_>]) {
    let what = format!("{query:?}");
    let mut rows = sink.query(&query).await.expect("the query runs");
    let mut want: Vec<(Vec<String>, Totals, Option<u64>)> = expected
        .iter()
        .map(|(key, names, start)| {
            let records: Vec<&Record> = known
                .iter()
                .filter(|(n, _)| names.contains(*n))
                .map(|(_, r)| r)
                .collect();
            assert_eq!(records.len(), names.len(), "known records {names}");
            let key = key.iter().map(|k| (*k).to_owned()).collect();
            (key, totals_of(&records), *start)
        })
        .collect();
    let by_time_only = query
        .by
        .iter()
        .all(|g| matches!(g, Group::Day | Group::Hour));
    if !by_time_only {
        rows.sort_by(|x, y| x.key.cmp(&y.key));
        want.sort_by(|x, y| x.0.cmp(&y.0));
    }
    let keys: Vec<&Vec<String>> = rows.iter().map(|r| &r.key).collect();
    let want_keys: Vec<&Vec<String>> = want.iter().map(|w| &w.0).collect();
    assert_eq!(keys, want_keys, "{what}");
    for (row, (key, totals, start)) in rows.iter().zip(&want) {
        let what = format!("{what}, group {key:?}");
        assert_totals(&row.totals, totals, &what);
        assert_eq!(row.start_ms, *start, "{what}");
    }
}

fn period(since_ms: u64, until_ms: u64, by: &[Group]) -> Query {
    Query {
        since_ms,
        until_ms,
        by: by.to_vec(),
        tenant: None,
        model: None,
    }
}

async fn query_totals_groups_filters_and_bounds(store: Store) {
    let known = known();
    let recorder = Recorder::start(store.sink(), &store.spill(), BATCHING);
    for (_, r) in &known {
        recorder.record(r.clone());
    }
    recorder.flush().await;
    let stats = recorder.stats();
    assert_eq!(stats.recorded, 7);
    assert_eq!(stats.written, 7);
    assert_eq!(stats.spilled, 0);
    assert!(!stats.sink_down);
    // The report reads through a sink of its own, as `llmroute usage` does.
    let sink = store.sink();
    let all = period(SINCE, UNTIL, &[]);

    // Totals, written out by hand.
    let rows = sink.query(&all).await.expect("the query runs");
    assert_eq!(rows.len(), 1);
    assert!(rows[0].key.is_empty());
    assert_eq!(rows[0].start_ms, None);
    let want = Totals {
        requests: 5,
        ok: 3,
        failed: 1,
        cancelled: 1,
        prompt_tokens: 680,
        cached_tokens: 70,
        completion_tokens: 250,
        reasoning_tokens: 30,
        cost_micros: 8_500,
        attempts: 5,
        mean_latency_ms: 380.0,
        max_latency_ms: 900,
        waited_ms: 65,
        // Latencies 100, 200, 300, 400, 900 (sorted): ranks 3, 5 and 5.
        latency_p50_ms: 300,
        latency_p95_ms: 900,
        latency_p99_ms: 900,
        ttft_p50_ms: Some(40),
        ttft_p95_ms: Some(40),
        ttft_p99_ms: Some(40),
    };
    assert_totals(&rows[0].totals, &want, "totals");
    check(&sink, &known, all.clone(), &[(&[], "abcde", None)]).await;

    // Groupings.
    let day1 = SINCE + DAY;
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Day]),
        &[
            (&["2026-11-30"], "abc", Some(SINCE)),
            (&["2026-12-01"], "de", Some(day1)),
        ],
    )
    .await;
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Hour]),
        &[
            (&["2026-11-30 00:00"], "a", Some(SINCE)),
            (&["2026-11-30 14:00"], "bc", Some(SINCE + 14 * HOUR)),
            (&["2026-12-01 00:00"], "d", Some(day1)),
            (&["2026-12-01 23:00"], "e", Some(day1 + 23 * HOUR)),
        ],
    )
    .await;
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Tenant]),
        &[
            (&["-"], "d", None),
            (&["acme"], "ab", None),
            (&["beta"], "ce", None),
        ],
    )
    .await;
    // The model that served; the one asked for when none did (`d`).
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Model]),
        &[
            (&["claude-sonnet"], "ce", None),
            (&["gpt-4o"], "ad", None),
            (&["gpt-4o-mini"], "b", None),
        ],
    )
    .await;
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Provider]),
        &[
            (&["-"], "d", None),
            (&["anthropic"], "ce", None),
            (&["openai"], "ab", None),
        ],
    )
    .await;
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Outcome]),
        &[
            (&["cancelled"], "d", None),
            (&["failed"], "b", None),
            (&["ok"], "ace", None),
        ],
    )
    .await;
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Day, Group::Tenant]),
        &[
            (&["2026-11-30", "acme"], "ab", Some(SINCE)),
            (&["2026-11-30", "beta"], "c", Some(SINCE)),
            (&["2026-12-01", "-"], "d", Some(day1)),
            (&["2026-12-01", "beta"], "e", Some(day1)),
        ],
    )
    .await;
    // The start is the first time grouping's, wherever it stands.
    check(
        &sink,
        &known,
        period(SINCE, UNTIL, &[Group::Outcome, Group::Hour]),
        &[
            (&["cancelled", "2026-12-01 00:00"], "d", Some(day1)),
            (
                &["failed", "2026-11-30 14:00"],
                "b",
                Some(SINCE + 14 * HOUR),
            ),
            (&["ok", "2026-11-30 00:00"], "a", Some(SINCE)),
            (&["ok", "2026-11-30 14:00"], "c", Some(SINCE + 14 * HOUR)),
            (&["ok", "2026-12-01 23:00"], "e", Some(day1 + 23 * HOUR)),
        ],
    )
    .await;

    // Filters: a tenant; a model asked for or served; both.
    let filtered = |tenant: Option<&str>, model: Option<&str>, by: &[Group]| Query {
        tenant: tenant.map(str::to_owned),
        model: model.map(str::to_owned),
        ..period(SINCE, UNTIL, by)
    };
    check(
        &sink,
        &known,
        filtered(Some("acme"), None, &[]),
        &[(&[], "ab", None)],
    )
    .await;
    check(
        &sink,
        &known,
        filtered(Some("beta"), None, &[Group::Day]),
        &[
            (&["2026-11-30"], "c", Some(SINCE)),
            (&["2026-12-01"], "e", Some(day1)),
        ],
    )
    .await;
    check(
        &sink,
        &known,
        filtered(Some("nobody"), None, &[]),
        &[(&[], "", None)],
    )
    .await;
    check(
        &sink,
        &known,
        filtered(None, Some("gpt-4o"), &[]),
        &[(&[], "ad", None)],
    )
    .await;
    check(
        &sink,
        &known,
        filtered(None, Some("fast"), &[]),
        &[(&[], "ae", None)],
    )
    .await;
    check(
        &sink,
        &known,
        filtered(None, Some("claude"), &[]),
        &[(&[], "c", None)],
    )
    .await;
    check(
        &sink,
        &known,
        filtered(None, Some("claude-sonnet"), &[Group::Tenant]),
        &[(&["beta"], "ce", None)],
    )
    .await;
    check(
        &sink,
        &known,
        filtered(Some("beta"), Some("fast"), &[Group::Model]),
        &[(&["claude-sonnet"], "e", None)],
    )
    .await;

    // The period: since inclusive, until exclusive.
    check(
        &sink,
        &known,
        period(SINCE + 1, UNTIL, &[]),
        &[(&[], "bcde", None)],
    )
    .await;
    check(
        &sink,
        &known,
        period(SINCE, day1, &[]),
        &[(&[], "abc", None)],
    )
    .await;
    check(
        &sink,
        &known,
        period(day1, day1 + 1, &[]),
        &[(&[], "d", None)],
    )
    .await;
    check(
        &sink,
        &known,
        period(SINCE - 1, UNTIL + 1, &[]),
        &[(&[], "abcdefg", None)],
    )
    .await;
    // An empty period: one row of zeros, or no group at all.
    check(&sink, &known, period(SINCE, SINCE, &[]), &[(&[], "", None)]).await;
    check(&sink, &known, period(SINCE, SINCE, &[Group::Day]), &[]).await;
}
on_both!(query_totals_groups_filters_and_bounds);

// --- one row per id ---

async fn the_same_id_twice_keeps_one_row(store: Store) {
    let sink = store.sink();
    let first = record("r1", SINCE);
    sink.write(&[first.clone(), record("r2", SINCE)])
        .await
        .expect("written");
    // Again in a later batch, changed: the row stays as first written.
    let again = Record {
        cost_micros: 999_000,
        ..first.clone()
    };
    sink.write(&[again, record("r3", SINCE)])
        .await
        .expect("written");
    // Twice in one batch.
    sink.write(&[record("r4", SINCE), record("r4", SINCE)])
        .await
        .expect("written");
    // Twice through a recorder, in one batch and in the next.
    let recorder = Recorder::start(store.sink(), &store.spill(), BATCHING);
    recorder.record(record("r5", SINCE));
    recorder.record(record("r5", SINCE));
    recorder.flush().await;
    recorder.record(record("r5", SINCE));
    recorder.flush().await;
    assert_eq!(recorder.stats().spilled, 0);

    assert_eq!(store.ids().await, ["r1", "r2", "r3", "r4", "r5"]);
    let rows = sink
        .query(&period(SINCE, UNTIL, &[]))
        .await
        .expect("the query runs");
    assert_eq!(rows[0].totals.requests, 5);
    assert_eq!(rows[0].totals.cost_micros, 500, "r1 kept its first cost");
}
on_both!(the_same_id_twice_keeps_one_row);

// --- the last records, and counts per hour ---

/// The last records come back whole and newest first, as many as asked; the hours count each
/// outcome where the record ended, and hours without records are zero.
async fn recent_records_and_hourly_counts(store: Store) {
    let sink = store.sink();
    assert!(sink.recent(10).await.expect("reads").is_empty());
    let full = Record {
        route: Some("cheap-rule".into()),
        first_token_ms: Some(12),
        cached_tokens: 3,
        reasoning_tokens: 2,
        attempts: 2,
        failed_attempts: vec!["rate_limited".into()],
        waited_ms: 7,
        queue_position: None,
        stream: true,
        cost_micros: 250,
        ..record("b", SINCE + 2 * HOUR + 5)
    };
    let limited = Record {
        outcome: Outcome::Failed,
        failure: Some("rate_limited".into()),
        failed_attempts: vec!["rate_limited".into(), "rate_limited".into()],
        provider: None,
        model: None,
        tenant: None,
        key_id: None,
        cost_micros: 0,
        ..record("c", SINCE + 2 * HOUR + 9)
    };
    let broken = Record {
        outcome: Outcome::Failed,
        failure: Some("server_error".into()),
        failed_attempts: vec!["server_error".into()],
        ..record("d", SINCE + 3 * HOUR)
    };
    let cancelled = Record {
        outcome: Outcome::Cancelled,
        ..record("e", SINCE + 3 * HOUR + 1)
    };
    let early = record("a", SINCE + 1);
    sink.write(&[
        early.clone(),
        full.clone(),
        limited.clone(),
        broken.clone(),
        cancelled.clone(),
    ])
    .await
    .expect("written");

    let last = sink.recent(3).await.expect("reads");
    assert_eq!(last, [cancelled.clone(), broken.clone(), limited.clone()]);
    let all = sink.recent(500).await.expect("reads");
    assert_eq!(all.len(), 5);
    assert_eq!(all[3], full, "every field read back as written");
    assert_eq!(all[4], early);

    // To just into hour 4: hours 0 to 4.
    let hours = sink
        .hourly(SINCE, SINCE + 4 * HOUR + 1)
        .await
        .expect("reads");
    let starts: Vec<u64> = hours.iter().map(|h| h.start_ms).collect();
    assert_eq!(starts, (0..5).map(|h| SINCE + h * HOUR).collect::<Vec<_>>());
    let counts: Vec<(u64, u64, u64, u64, u64)> = hours
        .iter()
        .map(|h| {
            (
                h.requests,
                h.failed,
                h.limited,
                h.upstream_429,
                h.cost_micros,
            )
        })
        .collect();
    assert_eq!(
        counts,
        [
            (1, 0, 0, 0, 100),
            (0, 0, 0, 0, 0),
            (2, 1, 1, 2, 250),
            (2, 1, 0, 0, 200),
            (0, 0, 0, 0, 0),
        ]
    );
    // A period that starts after a record leaves it out.
    let later = sink.hourly(SINCE + 2, SINCE + HOUR).await.expect("reads");
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].requests, 0);
}
on_both!(recent_records_and_hourly_counts);

/// Latency and time-to-first-token percentiles by nearest rank, per group, in SQL: 100
/// requests of 1 to 100 ms (the odd ones streamed, their first token at a tenth), split over
/// two tenants, and an empty period.
async fn latency_percentiles_per_group(store: Store) {
    let sink = store.sink();
    let records: Vec<Record> = (1..=100u64)
        .map(|ms| Record {
            tenant: Some(if ms % 4 == 0 { "b" } else { "a" }.into()),
            latency_ms: ms,
            first_token_ms: (ms % 2 == 1).then_some(ms / 10),
            ..record(&format!("r{ms}"), SINCE + ms)
        })
        .collect();
    sink.write(&records).await.expect("written");
    let all = sink.query(&period(SINCE, UNTIL, &[])).await.expect("reads");
    let t = &all[0].totals;
    assert_eq!(
        (t.latency_p50_ms, t.latency_p95_ms, t.latency_p99_ms),
        (50, 95, 99)
    );
    // First tokens of the 50 odd ones: 0, 0, ..., 9 (ranks 25, 48 and 50).
    assert_eq!(
        (t.ttft_p50_ms, t.ttft_p95_ms, t.ttft_p99_ms),
        (Some(4), Some(9), Some(9))
    );
    let rows = sink
        .query(&period(SINCE, UNTIL, &[Group::Tenant]))
        .await
        .expect("reads");
    for row in &rows {
        let mine: Vec<&Record> = records
            .iter()
            .filter(|r| r.tenant.as_deref() == Some(row.key[0].as_str()))
            .collect();
        assert_totals(&row.totals, &totals_of(&mine), &format!("{:?}", row.key));
    }
    let none = sink
        .query(&period(SINCE - 10, SINCE, &[]))
        .await
        .expect("reads");
    let t = &none[0].totals;
    assert_eq!((t.requests, t.latency_p99_ms, t.ttft_p50_ms), (0, 0, None));
}
on_both!(latency_percentiles_per_group);

/// Pruning deletes what ended before the cutoff, over several batches, and nothing after it;
/// records written between batches stay.
async fn pruning_deletes_in_batches_only_what_is_past_the_cutoff(store: Store) {
    let sink = store.sink();
    let old: Vec<Record> = (0..2_500u64)
        .map(|i| record(&format!("old{i}"), SINCE + i))
        .collect();
    sink.write(&old).await.expect("written");
    let kept = [record("new1", UNTIL), record("new2", UNTIL + 1)];
    sink.write(&kept).await.expect("written");
    let writer = {
        let sink = store.sink();
        tokio::spawn(async move { sink.write(&[record("during", UNTIL + 2)]).await })
    };
    let deleted = sink.prune(UNTIL).await.expect("pruned");
    let during = writer.await.expect("the writer ran");
    during.expect("a write during the prune lands");
    assert_eq!(deleted, 2_500);
    assert!(deleted > router_usage::PRUNE_BATCH, "more than one batch");
    let left: Vec<String> = sink
        .recent(10)
        .await
        .expect("reads")
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(left, ["during", "new2", "new1"]);
    assert_eq!(sink.prune(UNTIL).await.expect("pruned"), 0);
}
on_both!(pruning_deletes_in_batches_only_what_is_past_the_cutoff);

/// A tenant, a key, requests, 429s and cost.
type Counted<'a> = (Option<&'a str>, Option<&'a str>, u64, u64, u64);

/// Requests per tenant and key over a period: each pair counted apart, 429s (a provider's, no
/// capacity, a budget) counted as limited, records outside the period left out.
async fn requests_per_tenant_and_key(store: Store) {
    let sink = store.sink();
    let key = |id: &str, key: Option<&str>, at: u64| Record {
        key_id: key.map(str::to_owned),
        ..record(id, at)
    };
    let refused = |id: &str, failure: &str| Record {
        outcome: Outcome::Failed,
        failure: Some(failure.into()),
        cost_micros: 0,
        ..key(id, Some("key_b"), SINCE + 20)
    };
    let globex = Record {
        tenant: Some("globex".into()),
        ..key("g", None, SINCE + 5)
    };
    let none = Record {
        tenant: None,
        ..key("n", None, SINCE + 6)
    };
    let records = [
        key("a1", Some("key_a"), SINCE + 1),
        key("a2", Some("key_a"), SINCE + 2),
        key("b1", Some("key_b"), SINCE + 3),
        refused("b2", "budget"),
        refused("b3", "no_capacity"),
        refused("b4", "server_error"),
        globex,
        none,
        key("late", Some("key_a"), SINCE + HOUR),
    ];
    sink.write(&records).await.expect("written");
    let counts = sink.by_account(SINCE, SINCE + HOUR).await.expect("reads");
    let seen: Vec<Counted<'_>> = counts
        .iter()
        .map(|c| {
            let (t, k) = (c.tenant.as_deref(), c.key_id.as_deref());
            (t, k, c.requests, c.limited, c.cost_micros)
        })
        .collect();
    let mut want = vec![
        (Some("acme"), Some("key_a"), 2, 0, 200),
        (Some("acme"), Some("key_b"), 4, 2, 100),
        (Some("globex"), None, 1, 0, 100),
        (None, None, 1, 0, 100),
    ];
    // NULLs sort first in SQLite and last in PostgreSQL: compare as sets.
    let mut seen = seen;
    seen.sort();
    want.sort();
    assert_eq!(seen, want);
}
on_both!(requests_per_tenant_and_key);

/// A NUL in a record's text (a model name a client sent, a provider's error message) neither
/// fails the batch nor holds up the records after it: PostgreSQL, whose `text` takes no NUL,
/// stores U+FFFD in its place.
async fn a_nul_in_a_records_text_is_written(store: Store) {
    let odd = Record {
        model_asked: "gpt\0-4o".into(),
        route: Some("r\0".into()),
        failure: Some("upstream said \0".into()),
        failed_attempts: vec!["server\0".into()],
        outcome: Outcome::Failed,
        ..record("nul", SINCE)
    };
    let recorder = Recorder::start(store.sink(), &store.spill(), BATCHING);
    recorder.record(odd);
    recorder.record(record("after", SINCE));
    recorder.flush().await;
    let stats = recorder.stats();
    assert_eq!((stats.written, stats.spilled), (2, 0), "{stats:?}");
    assert!(!stats.sink_down);
    assert_eq!(store.ids().await, ["after", "nul"]);
    let models = match &store.pg {
        None => store.sqlite_column("SELECT model_asked FROM usage_records WHERE id = 'nul'"),
        Some(pg) => {
            let sql = format!(
                "SELECT model_asked FROM \"{}\".usage_records WHERE id = 'nul'",
                pg.schema()
            );
            let rows = pg.client().await.query(&sql, &[]).await;
            rows.expect("usage_records reads")
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<String>>()
        }
    };
    let want = if store.pg.is_some() {
        "gpt\u{fffd}-4o"
    } else {
        "gpt\0-4o"
    };
    assert_eq!(models, [want]);
}
on_both!(a_nul_in_a_records_text_is_written);

// --- migrations ---

async fn migrations_apply_once(store: Store) {
    assert_eq!(SCHEMA_VERSION, 2);
    // Two sinks on one store (PostgreSQL: both connecting, and migrating, at the same time).
    let (one, two) = (store.sink(), store.sink());
    let (m1, m2) = ([record("m1", SINCE)], [record("m2", SINCE)]);
    let (a, b) = tokio::join!(one.write(&m1), two.write(&m2));
    a.expect("the first sink writes");
    b.expect("the second sink writes");
    // Opened again later.
    let three = store.sink();
    three
        .write(&[record("m3", SINCE)])
        .await
        .expect("a third sink writes");
    assert_eq!(store.migrations().await, [1, SCHEMA_VERSION]);
    assert_eq!(store.ids().await, ["m1", "m2", "m3"]);
}
on_both!(migrations_apply_once);

// --- PostgreSQL unreachable or silent ---

/// Records handed over while the sink through `gate` fails (`break_it` breaks it after
/// `before` records reached it) go to the spill file at once, then to PostgreSQL, each once,
/// when the gate opens again.
async fn spills_while_down_then_replays(before: usize, timeout: Duration, break_it: fn(&Gate)) {
    let store = Store::postgres();
    let gate = Gate::new(store.pg().addr());
    let batching = Batching {
        timeout,
        ..BATCHING
    };
    let recorder = Recorder::start(store.sink_via(&gate, timeout), &store.spill(), batching);
    let early = fresh(before);
    for r in &early {
        recorder.record(r.clone());
    }
    recorder.flush().await;
    assert_eq!(recorder.stats().written, before as u64);

    break_it(&gate);
    let late = fresh(10);
    let started = Instant::now();
    for r in &late {
        recorder.record(r.clone());
    }
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "record() waited {:?} for a sink that is down",
        started.elapsed()
    );
    let started = Instant::now();
    recorder.flush().await;
    assert!(
        started.elapsed() < timeout + Duration::from_secs(2),
        "the flush took {:?}: a write is bounded by the timeout",
        started.elapsed()
    );
    let stats = recorder.stats();
    assert_eq!(stats.written, before as u64);
    assert_eq!(stats.spilled, 10);
    assert!(stats.sink_down);
    assert!(spill_len(&store.spill()) > 0);
    // Records handed over while it is down go straight to the file.
    let more = fresh(3);
    for r in &more {
        recorder.record(r.clone());
    }
    recorder.flush().await;
    assert_eq!(recorder.stats().spilled, 13);
    assert!(
        !recorder.retry().await,
        "nothing is replayed while the sink fails"
    );

    gate.open();
    assert!(recorder.retry().await, "replayed once the sink is back");
    let stats = recorder.stats();
    assert_eq!(stats.replayed, 13);
    assert!(!stats.sink_down);
    assert_eq!(spill_len(&store.spill()), 0);
    let all: Vec<Record> = [early, late, more].concat();
    assert_eq!(store.ids().await, sorted_ids(&all));
    assert_eq!(count(&store.sink()).await, all.len() as u64);

    // Back to writing as records come.
    recorder.record(fresh(1).remove(0));
    recorder.flush().await;
    assert_eq!(recorder.stats().written, before as u64 + 1);
    assert_eq!(recorder.stats().spilled, 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unreachable_from_the_start() {
    spills_while_down_then_replays(0, BATCHING.timeout, Gate::close).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_unreachable_after_some_writes() {
    spills_while_down_then_replays(6, BATCHING.timeout, Gate::close).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_silent_from_the_start_times_out_and_spills() {
    spills_while_down_then_replays(0, SHORT_TIMEOUT, Gate::pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_silent_after_some_writes_times_out_and_spills() {
    // The writes cut off by the timeout reach the server once the gate opens, alongside the
    // replay: each record is still there once.
    spills_while_down_then_replays(6, SHORT_TIMEOUT, Gate::pause).await;
}

/// SQLite slower than the timeout (another writer holds the file): the batch spills and the
/// caller never waits; the write that timed out may still land, and the replay keeps one row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_slower_than_the_timeout_spills() {
    let store = Store::sqlite();
    let batching = Batching {
        timeout: SHORT_TIMEOUT,
        ..BATCHING
    };
    let recorder = Recorder::start(store.sink(), &store.spill(), batching);
    let early = fresh(3);
    for r in &early {
        recorder.record(r.clone());
    }
    recorder.flush().await;
    assert_eq!(recorder.stats().written, 3);

    let blocker = rusqlite::Connection::open(store.sqlite_path()).expect("a second connection");
    blocker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("the write lock");
    let late = fresh(5);
    let started = Instant::now();
    for r in &late {
        recorder.record(r.clone());
    }
    assert!(started.elapsed() < Duration::from_millis(100));
    recorder.flush().await;
    assert!(started.elapsed() < SHORT_TIMEOUT + Duration::from_secs(2));
    let stats = recorder.stats();
    assert_eq!(stats.spilled, 5);
    assert!(stats.sink_down);

    blocker.execute_batch("COMMIT").expect("the lock released");
    assert!(recorder.retry().await, "replayed once the file is free");
    assert_eq!(spill_len(&store.spill()), 0);
    let all: Vec<Record> = [early, late].concat();
    assert_eq!(store.ids().await, sorted_ids(&all));
}

// --- the spill file of an earlier run ---

/// Spills `records` through a recorder whose sink is down, as an earlier run would have.
async fn spill_with_sink_down(spill: &Path, records: &[Record]) {
    let (_gate, down) = down_sink();
    let earlier = Recorder::start(down, spill, BATCHING);
    for r in records {
        earlier.record(r.clone());
    }
    earlier.flush().await;
    let stats = earlier.stats();
    assert_eq!(stats.spilled, records.len() as u64);
    assert_eq!(stats.written, 0);
}

async fn an_earlier_spill_file_is_replayed(store: Store) {
    let records = fresh(11);
    spill_with_sink_down(&store.spill(), &records).await;
    assert!(spill_len(&store.spill()) > 0);

    let recorder = Recorder::start(store.sink(), &store.spill(), BATCHING);
    assert!(recorder.retry().await);
    let stats = recorder.stats();
    assert_eq!(stats.replayed, 11);
    assert_eq!(stats.skipped, 0);
    assert!(!stats.sink_down);
    assert_eq!(spill_len(&store.spill()), 0);
    assert_eq!(store.ids().await, sorted_ids(&records));
}
on_both!(an_earlier_spill_file_is_replayed);

/// A long spill file of an earlier run holds no new record up: the record handed over at start
/// is in the sink, and its flush answered, while the file (60 chunks of one) is still being
/// replayed. The runtime has one thread, so the test runs only while the writer awaits (and
/// tokio's current-thread scheduler runs woken tasks in turn): what it reads after its flush is
/// where the writer was when it answered.
async fn a_new_record_goes_between_the_chunks_of_a_replay(store: Store) {
    let earlier = fresh(60);
    spill_with_sink_down(&store.spill(), &earlier).await;
    let batching = Batching {
        batch: 1,
        ..BATCHING
    };
    let recorder = Recorder::start(store.sink(), &store.spill(), batching);
    let new = fresh(1);
    recorder.record(new[0].clone());
    recorder.flush().await;
    let stats = recorder.stats();
    assert_eq!(stats.written, 1, "the new record is in the sink: {stats:?}");
    assert_eq!(stats.replayed, 0, "and the replay is not over: {stats:?}");
    assert!(spill_len(&store.spill()) > 0);

    assert!(recorder.retry().await);
    let stats = recorder.stats();
    assert_eq!((stats.written, stats.replayed, stats.spilled), (1, 60, 0));
    assert_eq!(spill_len(&store.spill()), 0);
    assert_eq!(store.ids().await, sorted_ids(&[earlier, new].concat()));
}

mod a_new_record_goes_between_the_chunks_of_a_replay {
    #[tokio::test(flavor = "current_thread")]
    async fn sqlite() {
        super::a_new_record_goes_between_the_chunks_of_a_replay(super::Store::sqlite()).await
    }

    #[tokio::test(flavor = "current_thread")]
    async fn postgres() {
        super::a_new_record_goes_between_the_chunks_of_a_replay(super::Store::postgres()).await
    }
}

/// `r` as a spill line.
fn line(r: &Record) -> Vec<u8> {
    let mut text = serde_json::to_vec(r).expect("a record serializes");
    text.push(b'\n');
    text
}

/// `r` as a spill line cut short inside its tenant's `é` (no newline): what a process killed
/// mid-write leaves.
fn cut_line(r: &Record) -> Vec<u8> {
    let r = Record {
        tenant: Some("café".into()),
        ..r.clone()
    };
    let text = serde_json::to_vec(&r).expect("a record serializes");
    let at = text
        .windows(2)
        .position(|w| w == "é".as_bytes())
        .expect("the é is written as is");
    text[..=at].to_vec()
}

async fn cut_short_spill_lines_are_skipped(store: Store) {
    let records = fresh(4);
    let lost = fresh(2);
    let mut text = Vec::new();
    text.extend(line(&records[0]));
    text.extend(line(&records[1]));
    // Cut short inside a multi-byte character, then the next record on a line of its own.
    text.extend(cut_line(&lost[0]));
    text.push(b'\n');
    text.extend(line(&records[2]));
    text.extend(line(&records[3]));
    // Cut short at the very end.
    text.extend(cut_line(&lost[1]));
    std::fs::write(store.spill(), text).expect("the spill file is written");

    let recorder = Recorder::start(store.sink(), &store.spill(), BATCHING);
    assert!(recorder.retry().await);
    let stats = recorder.stats();
    assert_eq!(stats.skipped, 2);
    assert_eq!(stats.replayed, 4);
    assert_eq!(spill_len(&store.spill()), 0);
    assert_eq!(store.ids().await, sorted_ids(&records));
}
on_both!(cut_short_spill_lines_are_skipped);

/// A spill file ending in a cut-short line, then appended to by a later run whose sink was
/// down too: what was appended is replayed whole.
async fn records_spilled_after_a_cut_short_line_are_kept(store: Store) {
    let first = fresh(1);
    let mut text = line(&first[0]);
    text.extend(cut_line(&fresh(1)[0]));
    std::fs::write(store.spill(), text).expect("the spill file is written");
    let appended = fresh(3);
    spill_with_sink_down(&store.spill(), &appended).await;

    let recorder = Recorder::start(store.sink(), &store.spill(), BATCHING);
    assert!(recorder.retry().await);
    let stats = recorder.stats();
    assert_eq!(stats.skipped, 1);
    assert_eq!(stats.replayed, 4);
    let all: Vec<Record> = [first, appended].concat();
    assert_eq!(store.ids().await, sorted_ids(&all));
}
on_both!(records_spilled_after_a_cut_short_line_are_kept);

/// `sslmode=require` connects over TLS and checks the server's certificate: this machine's
/// PostgreSQL serves a self-signed one, which is refused with the reason, never sent records in
/// clear. The sink's `Debug` and its errors never show the password.
#[tokio::test]
async fn sslmode_require_checks_the_servers_certificate_and_hides_the_password() {
    let pg = TestPostgres::new();
    let addr = pg.addr();
    let url = format!("postgres://postgres:planted-S3CRET@{addr}/test?sslmode=require");
    let mut settings = UsageSettings::with_sink(UsageSink::Postgres(url));
    settings.schema = pg.schema().to_owned();
    let sink = Sink::open(&settings, Path::new(""))
        .expect("the URL is valid")
        .expect("a PostgreSQL sink");
    assert!(!format!("{sink:?}").contains("S3CRET"));
    let query = Query {
        since_ms: SINCE,
        until_ms: UNTIL,
        by: Vec::new(),
        tenant: None,
        model: None,
    };
    let err = sink
        .query(&query)
        .await
        .expect_err("a self-signed certificate is refused")
        .to_string();
    assert!(err.contains("certificate"), "{err}");
    assert!(err.contains("postgres://postgres:***@"), "{err}");
    assert!(!err.contains("S3CRET"), "{err}");
}

/// Opening a file whose tables are all there only reads it: another process holding the write
/// lock for long (a long batch, a backup) never fails the open, and so never fails a chat.
#[test]
fn sqlite_opens_while_another_writer_holds_the_file() {
    let store = Store::sqlite();
    drop(store.sink());
    let blocker = rusqlite::Connection::open(store.sqlite_path()).expect("a second connection");
    blocker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("the write lock");
    let opened = Sink::open(&store.settings(), store.dir.path());
    assert!(opened.is_ok(), "{:?}", opened.err());
    blocker.execute_batch("COMMIT").expect("the lock released");
}
