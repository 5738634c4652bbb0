//! The embedded SQLite store beyond the conformance suite: separate OS processes sharing one
//! file admit exactly the limit (DESIGN.md I1), its rows stay bounded (I5) and drain (I2), rows
//! are keyed by scope name, and its errors say what to do.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use router_core::clock::ManualClock;
use router_core::config::Registry;
use router_core::ledger::{
    ActualUsage, Admission, Ledger, LedgerError, Need, SETTLE_GRACE_MS, SqliteStore,
};

use crate::support::{T0, one_model, open_sqlite, temp_dir};

const PROCESSES: usize = 8;
const ATTEMPTS_PER_PROCESS: usize = 100;

/// Starts `PROCESSES` `ledger-hammer`s on one file, lets them go together once all are ready,
/// and returns their grants, and the directory holding the file (`state/ledger.db`).
fn hammer_processes(limits: &str, tokens: u64) -> (Vec<usize>, tempfile::TempDir) {
    let dir = temp_dir();
    let config = dir.path().join("providers.yaml");
    std::fs::write(&config, one_model(limits)).expect("write config");
    let db = dir.path().join("state").join("ledger.db");
    let mut children: Vec<Child> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_ledger-hammer"))
                .arg(&db)
                .arg(&config)
                .args(["m", &tokens.to_string(), &ATTEMPTS_PER_PROCESS.to_string()])
                .arg(T0.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start ledger-hammer")
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().expect("stdout")).lines())
        .collect();
    for out in &mut outputs {
        let line = out.next().expect("a line").expect("readable");
        assert_eq!(line, "ready");
    }
    for child in &mut children {
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("write go");
    }
    let grants = outputs
        .iter_mut()
        .map(|out| {
            let line = out.next().expect("a count").expect("readable");
            line.parse()
                .unwrap_or_else(|_| panic!("not a count: {line}"))
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("wait").success());
    }
    (grants, dir)
}

#[test]
fn separate_processes_admit_exactly_the_rpm_limit() {
    let (grants, _dir) = hammer_processes("rpm: 237", 1);
    assert_eq!(grants.iter().sum::<usize>(), 237, "per process: {grants:?}");
}

#[test]
fn separate_processes_admit_exactly_the_tpm_limit() {
    let (grants, _dir) = hammer_processes("tpm: 10000", 37);
    assert_eq!(
        grants.iter().sum::<usize>(),
        10_000 / 37,
        "per process: {grants:?}"
    );
}

#[tokio::test]
async fn separate_processes_admit_exactly_the_concurrency_limit_and_their_slots_expire() {
    let (grants, dir) = hammer_processes("concurrency: 61", 1);
    assert_eq!(grants.iter().sum::<usize>(), 61, "per process: {grants:?}");
    // The processes exited without settling, as if they had crashed: their slots are held until
    // their 600 s TTL passes, then free.
    let registry = Registry::from_yaml_str(&one_model("concurrency: 61"), "t.yaml").expect("ok");
    let clock = ManualClock::new(T0 + 599_999);
    let store = open_sqlite(&dir.path().join("state/ledger.db"), &registry, &clock);
    let m = registry.resolve("m")[0];
    let in_flight = || async {
        store.snapshot(&[m]).await.expect("snapshot")[0]
            .usage
            .in_flight
    };
    assert_eq!(in_flight().await, 61);
    clock.advance_ms(1);
    assert_eq!(in_flight().await, 0);
    let admission = store.admit(&one_need(), &[m]).await.expect("admit");
    assert!(matches!(admission, Admission::Granted(_)));
}

/// Rows per scope name: (scopes rows, bucket rows, slot rows).
fn rows(db: &Path) -> Vec<(String, i64, i64, i64)> {
    let conn = rusqlite::Connection::open(db).expect("open");
    let sql = "SELECT s.scope,
        (SELECT COUNT(*) FROM llmroute_v4_scopes x WHERE x.ns = s.ns AND x.scope = s.scope),
        (SELECT COUNT(*) FROM llmroute_v4_buckets b WHERE b.ns = s.ns AND b.scope = s.scope),
        (SELECT COUNT(*) FROM llmroute_v4_slots l WHERE l.ns = s.ns AND l.scope = s.scope)
        FROM (SELECT ns, scope FROM llmroute_v4_scopes UNION SELECT ns, scope FROM
        llmroute_v4_buckets UNION SELECT ns, scope FROM llmroute_v4_slots) s ORDER BY s.scope";
    let mut stmt = conn.prepare(sql).expect("prepare");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[tokio::test]
async fn rows_stay_bounded_by_buckets_and_slots_held_and_drain() {
    let yaml = r#"
providers:
  - name: p
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: P_KEY
    limits: { rpm: 100000 }
    models:
      - { name: m, price: { input: 1, output: 1 }, limits: { tpm: 100000000, concurrency: 1000 } }
"#;
    let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("valid");
    let dir = temp_dir();
    let db = dir.path().join("ledger.db");
    let clock = ManualClock::new(T0);
    let store = open_sqlite(&db, &registry, &clock);
    let m = registry.resolve("m")[0];
    let need = Need::new(50, Duration::from_secs(30));
    let mut held = Vec::new();
    // 150 s of traffic, 4 admissions a second: 600 requests. Every third is never settled (a
    // crashed holder); the others are settled two seconds later.
    for step in 0..600u64 {
        let need = need.clone().with_new_id();
        let Admission::Granted(r) = store.admit(&need, &[m]).await.expect("admit") else {
            panic!("a roomy deployment refused at step {step}");
        };
        if step % 3 != 0 {
            held.push((step, r));
        }
        while held.first().is_some_and(|(at, _)| at + 8 <= step) {
            let (_, r) = held.remove(0);
            assert!(
                store
                    .settle(&r, ActualUsage::tokens(20))
                    .await
                    .expect("settle")
            );
        }
        clock.advance_ms(250);
        for (scope, heads, buckets, _) in rows(&db) {
            assert_eq!(heads, 1, "{scope}");
            assert!(
                buckets <= 61,
                "{scope}: {buckets} bucket rows at step {step}"
            );
        }
    }
    let snap = store.snapshot(&[m]).await.expect("snapshot")[0];
    let provider = snap.provider.expect("provider-wide limits");
    // Settled slots are gone, ghosts younger than their 30 s TTL remain: in flight is what is
    // held, and no more.
    let ghosts = (0..600u64)
        .filter(|s| s % 3 == 0 && s * 250 + 30_000 > 150_000)
        .count();
    assert_eq!(snap.usage.in_flight, (held.len() + ghosts) as u64);
    assert_eq!(provider.in_flight, snap.usage.in_flight);
    // Now is 150 s: the live buckets are 90 ..= 150, and 90 ..= 149 saw traffic. Every ghost
    // (200) is remembered for the settle grace, which a late settle still corrects.
    let slot_rows = (held.len() + 200) as i64;
    let want = [
        ("d:p/m".to_owned(), 1, 60, slot_rows),
        ("p:p".to_owned(), 1, 60, slot_rows),
    ];
    assert_eq!(rows(&db), want);

    // Traffic stops: after the slot TTL, its grace and the window, one operation on each scope
    // drains them.
    for (_, r) in held.drain(..) {
        assert!(store.release(&r).await.expect("release"));
    }
    clock.advance_ms(SETTLE_GRACE_MS + 61_000);
    let snap = store.snapshot(&[m]).await.expect("snapshot")[0];
    assert_eq!((snap.usage.requests, snap.usage.in_flight), (0, 0));
    let drained = [("d:p/m".to_owned(), 1, 0, 0), ("p:p".to_owned(), 1, 0, 0)];
    assert_eq!(rows(&db), drained);
}

#[tokio::test]
async fn rows_are_keyed_by_scope_name_so_a_changed_config_reads_the_right_state() {
    let model = |name: &str, limits: &str| {
        format!(
            "      - {{ name: {name}, price: {{ input: 1, output: 1 }}, limits: {{ {limits} }} }}\n"
        )
    };
    let head = "providers:\n  - name: p\n    api: openai\n    base_url: http://127.0.0.1:1/v1\n    \
                api_key_env: P_KEY\n    models:\n";
    let before = format!("{head}{}{}", model("a", "rpm: 5"), model("b", "rpm: 5"));
    // `b` comes first now, `a` is gone and `b`'s limit was raised.
    let after = format!("{head}{}{}", model("b", "rpm: 10"), model("c", "rpm: 5"));
    let dir = temp_dir();
    let db = dir.path().join("ledger.db");
    let clock = ManualClock::new(T0);
    let first = Registry::from_yaml_str(&before, "before.yaml").expect("valid");
    let old = open_sqlite(&db, &first, &clock);
    let b = first.resolve("b")[0];
    for _ in 0..3 {
        let _kept = old.admit(&one_need(), &[b]).await.expect("admit");
    }
    let second = Registry::from_yaml_str(&after, "after.yaml").expect("valid");
    let new = open_sqlite(&db, &second, &clock);
    let snaps = new
        .snapshot(&[second.resolve("b")[0], second.resolve("c")[0]])
        .await
        .expect("snapshot");
    let seen: Vec<_> = snaps
        .iter()
        .map(|s| (s.usage.requests, s.usage.rpm_limit))
        .collect();
    assert_eq!(seen, vec![(3, Some(10)), (0, Some(5))]);
}

fn one_need() -> Need {
    Need::new(1, Duration::from_secs(60))
}

#[tokio::test]
async fn namespaces_in_one_file_do_not_share_limits() {
    let dir = temp_dir();
    let db = dir.path().join("ledger.db");
    let clock = ManualClock::new(T0);
    let yaml = |ns: &str| format!("namespace: {ns}\n{}", one_model("rpm: 1"));
    let mut stores = Vec::new();
    for ns in ["blue", "green"] {
        let registry = Registry::from_yaml_str(&yaml(ns), "test.yaml").expect("valid");
        stores.push((
            open_sqlite(&db, &registry, &clock),
            registry.resolve("m")[0],
        ));
    }
    for (store, m) in &stores {
        let admission = store.admit(&one_need(), &[*m]).await.expect("admit");
        assert!(matches!(admission, Admission::Granted(_)));
    }
    let (blue, m) = &stores[0];
    let admission = blue.admit(&one_need(), &[*m]).await.expect("admit");
    assert!(matches!(admission, Admission::Denied(_)));
}

/// An admission whose caller goes away while its transaction waits for the file (another
/// process holds it) still runs: what it granted is voided, not held for the slot's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_dropped_while_it_waits_for_the_file_is_voided() {
    use futures_util::FutureExt;
    let dir = temp_dir();
    let db = dir.path().join("ledger.db");
    let clock = ManualClock::new(T0);
    let registry =
        Registry::from_yaml_str(&one_model("rpm: 10, concurrency: 5"), "test.yaml").expect("valid");
    let m = registry.resolve("m")[0];
    let store = open_sqlite(&db, &registry, &clock);
    let kept = store.admit(&one_need(), &[m]).await.expect("admit");
    assert!(matches!(kept, Admission::Granted(_)), "{kept:?}");

    let other = rusqlite::Connection::open(&db).expect("the file opens");
    other.execute_batch("BEGIN IMMEDIATE").expect("the lock");
    let (need, candidates) = (one_need(), [m]);
    let mut admission = store.admit(&need, &candidates);
    assert!(
        (&mut admission).now_or_never().is_none(),
        "answered while another connection holds the lock"
    );
    drop(admission);
    other.execute_batch("ROLLBACK").expect("the lock is let go");
    crate::support::only_the_kept_one_counts(&store, m).await;
}

#[test]
fn a_file_that_is_not_a_ledger_is_named_with_what_to_do() {
    let dir = temp_dir();
    let registry = Registry::from_yaml_str(&one_model("rpm: 1"), "test.yaml").expect("valid");
    let clock = Arc::new(ManualClock::new(T0));
    let junk = dir.path().join("notes.txt");
    std::fs::write(
        &junk,
        "not a database, just some text that is long enough ".repeat(20),
    )
    .expect("write");
    let err = SqliteStore::open(&junk, &registry, clock.clone()).expect_err("not a database");
    assert!(matches!(err, LedgerError::Sqlite { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("notes.txt"), "{msg}");
    assert!(msg.contains("delete it"), "{msg}");

    // A directory that cannot be created (its parent is a file).
    let err = SqliteStore::open(&junk.join("ledger.db"), &registry, clock).expect_err("no dir");
    assert!(matches!(err, LedgerError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("notes.txt/ledger.db"), "{err}");
}
