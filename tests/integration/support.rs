//! A world per test: a registry, a manual clock and a ledger of the chosen store.

use std::path::Path;
use std::sync::Arc;

use llmroute_tests::{TestRedis, redis_cluster, redis_server};
use router_core::clock::ManualClock;
use router_core::config::{DeploymentId, Registry};
use router_core::ledger::{
    Admission, Denial, Ledger, MemoryStore, Need, RedisStore, RedisStoreOptions, Reservation,
    SqliteStore,
};

/// A time on a bucket boundary, so tests can reason in whole seconds.
pub const T0: u64 = 1_800_000_000_000;

#[derive(Debug, Clone, Copy)]
pub enum Store {
    Memory,
    Redis,
    Sqlite,
    /// The Redis store on a Redis Cluster of three primaries.
    Cluster,
}

pub struct World {
    pub ledger: Arc<dyn Ledger>,
    pub clock: ManualClock,
    pub registry: Registry,
    pub _redis: Option<TestRedis>,
    /// The SQLite store's directory, removed when the world drops.
    pub _dir: Option<tempfile::TempDir>,
}

impl World {
    pub async fn new(store: Store, yaml: &str) -> World {
        let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("test config is valid");
        let clock = ManualClock::new(T0);
        let (mut redis, mut dir) = (None, None);
        let ledger: Arc<dyn Ledger> = match store {
            Store::Memory => Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone()))),
            Store::Redis | Store::Cluster => {
                let server = match store {
                    Store::Cluster => redis_cluster(),
                    _ => redis_server(),
                };
                let store = connect(&server, &registry, Some(clock.clone())).await;
                redis = Some(server);
                Arc::new(store)
            }
            Store::Sqlite => {
                let tmp = temp_dir();
                let store = open_sqlite(&tmp.path().join("ledger.db"), &registry, &clock);
                dir = Some(tmp);
                Arc::new(store)
            }
        };
        World {
            ledger,
            clock,
            registry,
            _redis: redis,
            _dir: dir,
        }
    }

    /// The deployment serving `model` (its first, in configuration order).
    pub fn d(&self, model: &str) -> DeploymentId {
        self.registry.resolve(model)[0]
    }

    pub fn advance_s(&self, s: u64) {
        self.clock.advance_ms(s * 1000);
    }

    pub async fn admit(&self, tokens: u64, candidates: &[DeploymentId]) -> Admission {
        self.admit_ttl(tokens, 600, candidates).await
    }

    pub async fn admit_ttl(
        &self,
        tokens: u64,
        ttl_s: u64,
        candidates: &[DeploymentId],
    ) -> Admission {
        let need = Need::new(tokens, std::time::Duration::from_secs(ttl_s));
        self.ledger
            .admit(&need, candidates)
            .await
            .expect("store answers")
    }

    /// Admits `input` prompt and `output` completion tokens (reserved against itpm and otpm).
    pub async fn admit_split(
        &self,
        input: u64,
        output: u64,
        candidates: &[DeploymentId],
    ) -> Admission {
        let need =
            Need::new(input + output, std::time::Duration::from_secs(600)).with_input_tokens(input);
        self.ledger
            .admit(&need, candidates)
            .await
            .expect("store answers")
    }

    /// Admits and expects a grant.
    pub async fn grant(&self, tokens: u64, candidates: &[DeploymentId]) -> Reservation {
        match self.admit(tokens, candidates).await {
            Admission::Granted(r) => r,
            Admission::Denied(d) => panic!("expected a grant, got {d:?}"),
        }
    }

    /// Admits and expects a denial.
    pub async fn deny(&self, tokens: u64, candidates: &[DeploymentId]) -> Denial {
        match self.admit(tokens, candidates).await {
            Admission::Denied(d) => d,
            Admission::Granted(r) => panic!("expected a denial, got {r:?}"),
        }
    }

    /// Counts grants among `n` admissions (reservations are kept, never settled).
    pub async fn count_grants(&self, n: usize, tokens: u64, candidates: &[DeploymentId]) -> usize {
        let mut granted = 0;
        for _ in 0..n {
            if let Admission::Granted(_r) = self.admit(tokens, candidates).await {
                granted += 1;
            }
        }
        granted
    }

    pub async fn usage(&self, d: DeploymentId) -> router_core::ledger::DeploymentSnapshot {
        self.ledger.snapshot(&[d]).await.expect("store answers")[0]
    }
}

/// Drops an admission to `ledger` (a Redis one) after Redis ran it and before its answer was
/// read, then checks through `observer` that it was voided: one admission is made and kept
/// first, and only it stays counted on `d`.
pub async fn an_admission_dropped_unanswered_is_voided(
    ledger: &dyn Ledger,
    observer: &RedisStore,
    d: DeploymentId,
) {
    use futures_util::FutureExt;
    let usage = || async { observer.snapshot(&[d]).await.expect("snapshot")[0].usage };
    let ttl = std::time::Duration::from_secs(600);
    let kept = ledger.admit(&Need::new(1, ttl), &[d]).await.expect("admit");
    assert!(matches!(kept, Admission::Granted(_)), "{kept:?}");
    let (need, candidates) = (Need::new(100, ttl), [d]);
    let mut admission = ledger.admit(&need, &candidates);
    assert!(
        (&mut admission).now_or_never().is_none(),
        "answered within one poll"
    );
    // Redis runs the script though no one waits for its answer...
    let mut counted = false;
    for _ in 0..200 {
        if usage().await.in_flight == 2 {
            counted = true;
            break;
        }
    }
    assert!(counted, "the admission never reached Redis");
    // ...and the caller goes away before reading it.
    drop(admission);
    only_the_kept_one_counts(observer, d).await;
}

/// After an admission of 1 token was kept on `d` and a second one abandoned: reads `observer`
/// until the second's void has run (its task queues behind the reads), then checks that only
/// the first counts.
pub async fn only_the_kept_one_counts(observer: &dyn Ledger, d: DeploymentId) {
    let usage = || async { observer.snapshot(&[d]).await.expect("snapshot")[0].usage };
    let mut u = usage().await;
    for _ in 0..200 {
        if u.in_flight == 1 {
            break;
        }
        u = usage().await;
    }
    assert_eq!(
        (u.requests, u.tokens, u.in_flight),
        (1, 1, 1),
        "the abandoned admission still counts"
    );
}

pub async fn connect(
    server: &TestRedis,
    registry: &Registry,
    clock: Option<ManualClock>,
) -> RedisStore {
    connect_to(&server.url, &server.namespace, registry, clock).await
}

pub use llmroute_tests::script_calls;

/// A store on the Redis at `url` (a proxy, say), in `namespace`.
pub async fn connect_to(
    url: &str,
    namespace: &str,
    registry: &Registry,
    clock: Option<ManualClock>,
) -> RedisStore {
    let options = RedisStoreOptions {
        namespace: namespace.to_owned(),
        clock: clock.map(|c| Arc::new(c) as _),
        // These suites check what the store decides, not how fast: a debug build under
        // contention on a loaded machine may take longer than the default to answer.
        response_timeout: std::time::Duration::from_secs(10),
        ..RedisStoreOptions::default()
    };
    RedisStore::connect(url, registry, options)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test Redis: {e}"))
}

/// A fresh directory of this test's own, removed on drop.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// Opens (creating) the SQLite ledger at `path` on `clock`.
pub fn open_sqlite(path: &Path, registry: &Registry, clock: &ManualClock) -> SqliteStore {
    SqliteStore::open(path, registry, Arc::new(clock.clone()))
        .unwrap_or_else(|e| panic!("cannot open the test ledger: {e}"))
}

/// One provider, one model `m` with the given limits line, e.g. `rpm: 5`.
pub fn one_model(limits: &str) -> String {
    format!(
        r#"
providers:
  - name: p
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: P_KEY
    models:
      - name: m
        price: {{ input: 1, output: 2 }}
        limits: {{ {limits} }}
"#
    )
}

/// Two providers: `cheap` (limits given) and `dear` (roomy), both serving alias `chat`.
pub fn cheap_and_dear(cheap_limits: &str) -> String {
    format!(
        r#"
providers:
  - name: a
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: A_KEY
    models:
      - name: cheap
        aliases: [chat]
        price: {{ input: 0.1, output: 0.2 }}
        limits: {{ {cheap_limits} }}
  - name: b
    api: anthropic
    base_url: http://127.0.0.1:1
    api_key_env: B_KEY
    models:
      - name: dear
        aliases: [chat]
        price: {{ input: 3, output: 15 }}
        limits: {{ rpm: 1000, tpm: 1000000, concurrency: 100 }}
"#
    )
}

/// The ledger scripts (files of `lua/`) that the Redis server at `node` does not hold
/// (SCRIPT EXISTS).
pub fn scripts_missing_on(node: &str) -> Vec<&'static str> {
    const NAMES: [&str; 13] = [
        "admit",
        "settle",
        "renew",
        "days",
        "cooldown",
        "observe",
        "snapshot",
        "tenant_snapshot",
        "heartbeat",
        "restore",
        "lease",
        "unlease",
        "tenant_lease",
    ];
    let mut exists = ::redis::cmd("SCRIPT");
    exists.arg("EXISTS");
    for name in NAMES {
        let text = router_core::ledger::script_text(name).expect("a ledger script");
        exists.arg(::redis::Script::new(&text).get_hash());
    }
    let held: Vec<bool> = llmroute_tests::on_node(node, &exists);
    NAMES
        .into_iter()
        .zip(held)
        .filter_map(|(name, held)| (!held).then_some(name))
        .collect()
}

/// Reads what is there (0 at end of stream), without tokio's `io-util`.
pub(crate) async fn read(
    from: &tokio::net::tcp::OwnedReadHalf,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    loop {
        from.readable().await?;
        match from.try_read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// Writes all of `bytes`.
pub(crate) async fn write_all(
    to: &tokio::net::tcp::OwnedWriteHalf,
    mut bytes: &[u8],
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        to.writable().await?;
        match to.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Copies `from` to `to` chunk by chunk until either ends (or fails); before each chunk goes on,
/// `gate` says, once it is ready to, whether it does (`true`) or the copy stops (`false`). The
/// replies' half of the tests' TCP proxies in front of Redis.
pub(crate) async fn copy_gated<F, Fut>(
    from: &tokio::net::tcp::OwnedReadHalf,
    to: &tokio::net::tcp::OwnedWriteHalf,
    mut gate: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match read(from, &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !gate().await || write_all(to, &buf[..n]).await.is_err() {
            return;
        }
    }
}

/// `r` without its tenant window: what tells one reservation from another (the same one
/// answered again reports no window, as it counted nothing).
pub fn without_window(r: &router_core::ledger::Reservation) -> router_core::ledger::Reservation {
    let mut r = r.clone();
    if let Some(t) = &mut r.tenant {
        t.windows.clear();
    }
    r
}
