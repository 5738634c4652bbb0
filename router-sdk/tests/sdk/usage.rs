//! Usage records through the router: one per finished request, whatever the path (answered,
//! failed over, failed, refused for budget, streamed, cancelled), with what it cost, and never a
//! key.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use router_core::config::{UsageSettings, UsageSink};
use router_core::ledger::{Admission, Need};
use router_sdk::{ChatChunk, ChatRequest, Error};
use router_state::store::Environment;
use router_usage::{Outcome, Recorder};
use wiremock::Mock;
use wiremock::matchers::{method, path};

use llmroute_tests::TestPostgres;

use crate::support::*;

/// Where a test's records go: an SQLite file in a temporary directory, or a PostgreSQL schema
/// of its own.
enum Store {
    Sqlite(tempfile::TempDir),
    Postgres(TestPostgres, tempfile::TempDir),
}

impl Store {
    fn sqlite() -> Store {
        Store::Sqlite(tempfile::tempdir().unwrap())
    }

    fn postgres() -> Store {
        Store::Postgres(TestPostgres::new(), tempfile::tempdir().unwrap())
    }

    /// A recorder into this store (spilling into the temporary directory).
    fn recorder(&self) -> Recorder {
        let (mut settings, dir) = match self {
            Store::Sqlite(dir) => (
                UsageSettings::with_sink(UsageSink::Sqlite(Some(dir.path().join("u.sqlite")))),
                dir,
            ),
            Store::Postgres(pg, dir) => {
                let mut s = UsageSettings::with_sink(UsageSink::Postgres(pg.url().to_owned()));
                s.schema = pg.schema().to_owned();
                (s, dir)
            }
        };
        settings.spill = Some(dir.path().join("u.spill"));
        settings.flush = Duration::from_millis(1);
        router_state::usage::open(&settings, &Environment::fixed::<&str>(&[], None))
            .unwrap()
            .unwrap()
    }

    /// Every record, by request id.
    async fn rows(&self) -> Vec<Row> {
        match self {
            Store::Sqlite(dir) => rows(dir.path()),
            Store::Postgres(pg, _) => {
                let client = pg.client().await;
                let sql = format!(
                    "SELECT request_id, tenant, provider, prompt_tokens, cost_micros, attempts, \
                     failed_attempts, outcome, failure, first_token_ms, stream, model_asked, \
                     waited_ms, queue_position FROM \"{}\".usage_records ORDER BY request_id",
                    pg.schema()
                );
                let found = client.query(&sql, &[]).await.unwrap();
                found
                    .iter()
                    .map(|r| Row {
                        request_id: r.get(0),
                        tenant: r.get(1),
                        provider: r.get(2),
                        prompt_tokens: r.get(3),
                        cost_micros: r.get(4),
                        attempts: i64::from(r.get::<_, i32>(5)),
                        failed_attempts: r.get(6),
                        outcome: r.get(7),
                        failure: r.get(8),
                        first_token_ms: r.get(9),
                        stream: r.get(10),
                        model_asked: r.get(11),
                        waited_ms: r.get(12),
                        queue_position: r.get(13),
                    })
                    .collect()
            }
        }
    }
}

#[derive(Debug)]
struct Row {
    request_id: String,
    tenant: Option<String>,
    provider: Option<String>,
    prompt_tokens: i64,
    cost_micros: i64,
    attempts: i64,
    failed_attempts: String,
    outcome: String,
    failure: Option<String>,
    first_token_ms: Option<i64>,
    stream: bool,
    model_asked: String,
    waited_ms: i64,
    queue_position: Option<i64>,
}

fn rows(dir: &Path) -> Vec<Row> {
    let conn = rusqlite::Connection::open(dir.join("u.sqlite")).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT request_id, tenant, provider, prompt_tokens, cost_micros, attempts, \
             failed_attempts, outcome, failure, first_token_ms, stream, model_asked, \
             waited_ms, queue_position FROM usage_records ORDER BY request_id",
        )
        .unwrap();
    stmt.query_map([], |r| {
        Ok(Row {
            request_id: r.get(0)?,
            tenant: r.get(1)?,
            provider: r.get(2)?,
            prompt_tokens: r.get(3)?,
            cost_micros: r.get(4)?,
            attempts: r.get(5)?,
            failed_attempts: r.get(6)?,
            outcome: r.get(7)?,
            failure: r.get(8)?,
            first_token_ms: r.get(9)?,
            stream: r.get(10)?,
            model_asked: r.get(11)?,
            waited_ms: r.get(12)?,
            queue_position: r.get(13)?,
        })
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn named(id: &str) -> ChatRequest {
    ChatRequest {
        request_id: Some(id.into()),
        ..ChatRequest::new("Hello")
    }
}

const TENANTS: &str = "tenants:
  tiers:
    broke: { rpm: 100, budget: { daily_usd: 0.000001 } }
  members:
    poor: broke
";

#[tokio::test]
async fn a_request_to_the_default_routed_alias_records_the_alias() {
    let store = Store::sqlite();
    let rec = store.recorder();
    let server = wiremock::MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .mount(&server)
        .await;
    let oa = Upstream::openai("oa", (1.0, 1.0));
    let yaml = config(&[(&oa, server.uri())]).replacen("model: chat\n", "model: auto\n", 1)
        + "routes:\n  auto:\n    - model: chat\n";
    let w = World::from_yaml_recorded(&yaml, &["oa"], vec![server], |l| l, Some(rec.clone())).await;
    w.router.chat(named("routed")).await.unwrap();
    rec.flush().await;
    let rows = store.rows().await;
    assert_eq!(rows[0].model_asked, "auto", "{rows:?}");
}

#[tokio::test]
async fn every_finished_request_leaves_one_record_on_sqlite() {
    every_finished_request_leaves_one_record_with_its_cost_and_no_key(Store::sqlite()).await;
}

#[tokio::test]
async fn every_finished_request_leaves_one_record_on_postgres() {
    every_finished_request_leaves_one_record_with_its_cost_and_no_key(Store::postgres()).await;
}

async fn every_finished_request_leaves_one_record_with_its_cost_and_no_key(store: Store) {
    let rec = store.recorder();
    let w = World::recorded(
        &[
            Upstream::openai("cheap", (2.0, 8.0)),
            Upstream::openai("dear", (4.0, 16.0)),
        ],
        TENANTS,
        rec.clone(),
    )
    .await;
    // cheap: 429 once, then answers (and streams); dear: answers.
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(error_json(429, "openai/rate_limit_429.json"))
        .up_to_n_times(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .mount(&w.servers[1])
        .await;

    // Failed over from cheap's 429 to dear: 1117 + 46 tokens at $4 / $16 = $0.005204.
    let answer = w.router.chat(named("a-failover")).await.unwrap();
    assert_eq!(answer.receipt.provider, "dear");

    // A budget no request fits in: refused before any call.
    let err = w
        .router
        .chat(ChatRequest {
            tenant: Some("poor".into()),
            ..named("b-budget")
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NoCapacity { never: true, .. }),
        "{err}"
    );

    // Streamed from cheap, once its cooldown is over.
    w.clock.advance_ms(120_000);
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_sse("openai/stream.sse"))
        .mount(&w.servers[0])
        .await;
    let mut stream = w.router.chat_stream(named("c-stream")).await.unwrap();
    while let Some(item) = stream.next().await {
        if let ChatChunk::Done(_) = item.unwrap() {}
    }
    drop(stream);

    // A stream dropped after its first delta: cancelled.
    let mut stream = w.router.chat_stream(named("d-dropped")).await.unwrap();
    assert!(matches!(stream.next().await, Some(Ok(ChatChunk::Delta(_)))));
    drop(stream);

    rec.flush().await;
    let rows = store.rows().await;
    let ids: Vec<&str> = rows.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, ["a-failover", "b-budget", "c-stream", "d-dropped"]);

    let a = &rows[0];
    assert_eq!(
        (a.outcome.as_str(), a.provider.as_deref(), a.attempts),
        ("ok", Some("dear"), 2)
    );
    assert_eq!(a.failed_attempts, "rate_limited");
    assert_eq!((a.prompt_tokens, a.cost_micros), (1117, 5_204));
    assert_eq!((a.stream, a.first_token_ms), (false, None));
    assert_eq!(a.model_asked, "chat");

    let b = &rows[1];
    assert_eq!(b.request_id, "b-budget");
    assert_eq!(
        (b.outcome.as_str(), b.failure.as_deref(), b.attempts),
        ("failed", Some("no_capacity"), 0)
    );
    assert_eq!(
        (b.tenant.as_deref(), b.provider.as_deref()),
        (Some("poor"), None)
    );
    assert_eq!(b.cost_micros, 0);

    let c = &rows[2];
    assert_eq!((c.outcome.as_str(), c.stream), ("ok", true));
    assert!(c.first_token_ms.is_some());
    assert_eq!(c.provider.as_deref(), Some("cheap"));

    let d = &rows[3];
    assert_eq!((d.outcome.as_str(), d.stream), ("cancelled", true));
    assert!(
        d.cost_micros > 0,
        "a dropped stream is charged its estimate"
    );

    assert_eq!(rec.stats().recorded, 4);
    assert_eq!(rec.stats().written, 4);
    let text = format!("{rows:?}");
    for name in ["cheap", "dear"] {
        assert!(!text.contains(&planted_key(name)));
    }
    assert!(!text.contains("S3CRET"));
    if let Store::Sqlite(dir) = &store {
        let bytes = std::fs::read(dir.path().join("u.sqlite")).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("S3CRET"));
    }
}

#[tokio::test]
async fn a_dropped_chat_future_is_recorded_cancelled_and_a_failure_with_its_class() {
    let store = Store::sqlite();
    let rec = store.recorder();
    let w = World::recorded(&[Upstream::openai("oa", (1.0, 1.0))], "", rec.clone()).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(error_json(400, "openai/bad_request_400.json"))
        .up_to_n_times(1)
        .mount(&w.servers[0])
        .await;
    let err = w.router.chat(named("e-invalid")).await.unwrap_err();
    assert_eq!(err.class(), "invalid");

    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json").set_delay(Duration::from_secs(3600)))
        .mount(&w.servers[0])
        .await;
    let router = w.router.clone();
    let call = tokio::spawn(async move { router.chat(named("f-aborted")).await });
    while w.servers[0]
        .received_requests()
        .await
        .unwrap_or_default()
        .len()
        < 2
    {
        tokio::task::yield_now().await;
    }
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());

    w.router.drain().await;
    let rows = store.rows().await;
    let got: Vec<(&str, &str, Option<&str>, i64)> = rows
        .iter()
        .map(|r| {
            (
                r.request_id.as_str(),
                r.outcome.as_str(),
                r.failure.as_deref(),
                r.attempts,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("e-invalid", "failed", Some("invalid"), 1),
            ("f-aborted", Outcome::Cancelled.as_str(), None, 1)
        ]
    );
    assert!(
        rows[1].cost_micros > 0 && rows[1].prompt_tokens > 0,
        "an aborted call is charged its estimate, tokens and cost: {:?}",
        rows[1]
    );
    assert_eq!(
        rows[0].prompt_tokens, 0,
        "a refused call is charged nothing"
    );
}

#[tokio::test]
async fn a_stream_whose_connection_breaks_is_recorded_as_stream_broken() {
    let store = Store::sqlite();
    let rec = store.recorder();
    let events = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let base = llmroute_tests::breaking_upstream(events).await;
    let oa = Upstream::openai("oa", (1.0, 1.0));
    let yaml = config(&[(&oa, base)]);
    let w = World::from_yaml_recorded(&yaml, &["oa"], Vec::new(), |l| l, Some(rec.clone())).await;
    let items: Vec<_> = w
        .router
        .chat_stream(named("broken"))
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        matches!(&items[0], Ok(ChatChunk::Delta(t)) if t == "Hel"),
        "{items:?}"
    );
    let Some(Err(e)) = items.last() else {
        panic!("the stream did not end with an error: {items:?}")
    };
    assert!(
        matches!(
            e,
            Error::StreamBroken {
                how: router_sdk::Break::Closed,
                ..
            }
        ),
        "{e:?}"
    );
    w.router.drain().await;
    let rows = store.rows().await;
    let row = (rows[0].outcome.as_str(), rows[0].failure.as_deref());
    assert_eq!(row, ("failed", Some("stream_broken")), "{rows:?}");
    assert_eq!(rows[0].failed_attempts, "stream_broken", "{rows:?}");
    assert_eq!(w.in_flight().await, 0);
}

/// A request that waited in line until its deadline is recorded with its place at entry and
/// the time it waited, on SQLite and PostgreSQL alike.
#[tokio::test]
async fn a_request_that_gave_up_in_line_is_recorded_with_its_place_and_wait() {
    for store in [Store::sqlite(), Store::postgres()] {
        let rec = store.recorder();
        let mut up = Upstream::openai("oa", (1.0, 1.0));
        up.limits = "concurrency: 1";
        let w = World::recorded(&[up], "", rec.clone()).await;
        let d = w.d("chat");
        let ttl = Duration::from_secs(600);
        let held = w.ledger.admit(&Need::new(1, ttl), &[d]).await.unwrap();
        assert!(matches!(held, Admission::Granted(_)), "{held:?}");
        let err = w.router.chat(named("q-waited")).await.unwrap_err();
        assert_eq!(err.class(), "no_capacity");
        w.router.drain().await;
        let rows = store.rows().await;
        let row = &rows[0];
        assert_eq!(row.queue_position, Some(0), "first in line");
        assert!(row.waited_ms > 0, "{row:?}");
        assert_eq!(row.outcome, "failed");
    }
}
