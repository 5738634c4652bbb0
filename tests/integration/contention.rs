//! Contention: many instances and tasks hammer one deployment; exactly the limit is admitted
//! (DESIGN.md invariant I1), on one Redis server and on a Redis Cluster, and admission is one
//! script call whatever the candidates (I4).
//! Separate OS processes sharing one SQLite file are in `sqlite.rs`.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use llmroute_tests::{TestRedis, redis_cluster, redis_server};
use router_core::clock::ManualClock;
use router_core::config::{DeploymentId, Registry};
use router_core::ledger::{Admission, Ledger, MemoryStore, Need};

use crate::support::{T0, connect, one_model, open_sqlite, temp_dir};

const INSTANCES: usize = 8;
const TASKS_PER_INSTANCE: usize = 50;
const ATTEMPTS_PER_TASK: usize = 4;

/// Every task of every instance tries `ATTEMPTS_PER_TASK` admissions of `tokens`; returns grants.
async fn hammer(instances: Vec<Arc<dyn Ledger>>, d: DeploymentId, tokens: u64) -> usize {
    hammer_with(instances, d, Need::new(tokens, Duration::from_secs(600))).await
}

/// [`hammer`] with any need (a tenant's, say).
async fn hammer_with(instances: Vec<Arc<dyn Ledger>>, d: DeploymentId, need: Need) -> usize {
    let mut tasks = Vec::new();
    for ledger in instances {
        for _ in 0..TASKS_PER_INSTANCE {
            let (ledger, need) = (ledger.clone(), need.clone());
            tasks.push(tokio::spawn(async move {
                let mut granted = 0;
                for _ in 0..ATTEMPTS_PER_TASK {
                    let need = need.clone().with_new_id();
                    match ledger.admit(&need, &[d]).await.expect("store answers") {
                        Admission::Granted(_held) => granted += 1,
                        Admission::Denied(_) => {}
                    }
                }
                granted
            }));
        }
    }
    join_all(tasks)
        .await
        .into_iter()
        .map(|t| t.expect("task ran"))
        .sum()
}

/// Eight instances on one Redis server.
async fn redis_instances(yaml: &str) -> (Vec<Arc<dyn Ledger>>, DeploymentId, TestRedis) {
    instances_on(redis_server(), yaml).await
}

/// Eight instances on a Redis Cluster of three primaries.
async fn cluster_instances(yaml: &str) -> (Vec<Arc<dyn Ledger>>, DeploymentId, TestRedis) {
    instances_on(redis_cluster(), yaml).await
}

async fn instances_on(
    server: TestRedis,
    yaml: &str,
) -> (Vec<Arc<dyn Ledger>>, DeploymentId, TestRedis) {
    let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("valid");
    let clock = ManualClock::new(T0);
    let mut instances: Vec<Arc<dyn Ledger>> = Vec::new();
    for _ in 0..INSTANCES {
        // Each store has its own connection: eight independent clients, as eight instances.
        instances.push(Arc::new(
            connect(&server, &registry, Some(clock.clone())).await,
        ));
    }
    (instances, registry.resolve("m")[0], server)
}

fn memory_instance(yaml: &str) -> (Vec<Arc<dyn Ledger>>, DeploymentId) {
    let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("valid");
    let store: Arc<dyn Ledger> = Arc::new(MemoryStore::with_clock(
        &registry,
        Arc::new(ManualClock::new(T0)),
    ));
    (vec![store; INSTANCES], registry.resolve("m")[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_rpm_admits_exactly_the_limit_under_contention() {
    let (instances, d, _server) = redis_instances(&one_model("rpm: 237")).await;
    assert_eq!(hammer(instances, d, 1).await, 237);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_tpm_admits_exactly_the_limit_under_contention() {
    let (instances, d, _server) = redis_instances(&one_model("tpm: 10000")).await;
    assert_eq!(hammer(instances, d, 37).await, 10_000 / 37);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_concurrency_admits_exactly_the_limit_under_contention() {
    let (instances, d, _server) = redis_instances(&one_model("concurrency: 61")).await;
    assert_eq!(hammer(instances, d, 1).await, 61);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_rpm_admits_exactly_the_limit_under_contention() {
    let (instances, d, _cluster) = cluster_instances(&one_model("rpm: 237")).await;
    assert_eq!(hammer(instances, d, 1).await, 237);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_tpm_admits_exactly_the_limit_under_contention() {
    let (instances, d, _cluster) = cluster_instances(&one_model("tpm: 10000")).await;
    assert_eq!(hammer(instances, d, 37).await, 10_000 / 37);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_concurrency_admits_exactly_the_limit_under_contention() {
    let (instances, d, _cluster) = cluster_instances(&one_model("concurrency: 61")).await;
    assert_eq!(hammer(instances, d, 1).await, 61);
}

/// Eight stores, each with its own connection to one file: eight instances on one machine.
fn sqlite_instances(yaml: &str) -> (Vec<Arc<dyn Ledger>>, DeploymentId, tempfile::TempDir) {
    let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("valid");
    let dir = temp_dir();
    let path = dir.path().join("ledger.db");
    let clock = ManualClock::new(T0);
    let instances = (0..INSTANCES)
        .map(|_| Arc::new(open_sqlite(&path, &registry, &clock)) as Arc<dyn Ledger>)
        .collect();
    (instances, registry.resolve("m")[0], dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_rpm_admits_exactly_the_limit_under_contention() {
    let (instances, d, _dir) = sqlite_instances(&one_model("rpm: 237"));
    assert_eq!(hammer(instances, d, 1).await, 237);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_tpm_admits_exactly_the_limit_under_contention() {
    let (instances, d, _dir) = sqlite_instances(&one_model("tpm: 10000"));
    assert_eq!(hammer(instances, d, 37).await, 10_000 / 37);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrency_admits_exactly_the_limit_under_contention() {
    let (instances, d, _dir) = sqlite_instances(&one_model("concurrency: 61"));
    assert_eq!(hammer(instances, d, 1).await, 61);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_limits_hold_under_contention() {
    for (limits, tokens, want) in [
        ("rpm: 237", 1, 237),
        ("tpm: 10000", 37, 270),
        ("concurrency: 61", 1, 61),
    ] {
        let (instances, d) = memory_instance(&one_model(limits));
        assert_eq!(hammer(instances, d, tokens).await, want, "{limits}");
    }
}

/// I4: one admission is one EVALSHA, whatever the number of candidates.
#[tokio::test]
async fn redis_admission_is_one_script_call_for_five_candidates() {
    let yaml = r#"
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
      - { name: m5, aliases: [chat], price: { input: 5, output: 1 }, limits: { rpm: 1 } }
"#;
    let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("valid");
    let server = redis_server();
    assert!(
        server.owned,
        "this test counts server commands, so it needs its own redis-server"
    );
    let store = connect(&server, &registry, None).await;
    let candidates = registry.resolve("chat");
    let need = Need::new(10, Duration::from_secs(60));
    // `m1` full from here: each admission below passes over full candidates in its one call.
    let _ = store.admit(&need, &candidates).await.expect("admit");
    let client = redis::Client::open(server.url.as_str()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("resetstat");
    for _ in 0..5 {
        let need = need.clone().with_new_id();
        let _ = store.admit(&need, &candidates).await.expect("admit");
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("info");
    let calls = |cmd: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!((calls("evalsha"), calls("eval")), (5, 0), "{stats}");
}

/// [`hammer_with`] `need` on eight instances of each store (Redis, a Redis Cluster, SQLite,
/// memory) over `yaml`: each grants exactly `want`.
async fn assert_every_store_grants(yaml: &str, need: &Need, want: usize) {
    let (instances, d, _server) = redis_instances(yaml).await;
    let got = hammer_with(instances, d, need.clone()).await;
    assert_eq!(got, want, "redis {need:?}");
    let (instances, d, _cluster) = cluster_instances(yaml).await;
    let got = hammer_with(instances, d, need.clone()).await;
    assert_eq!(got, want, "cluster {need:?}");
    let (instances, d, _dir) = sqlite_instances(yaml);
    let got = hammer_with(instances, d, need.clone()).await;
    assert_eq!(got, want, "sqlite {need:?}");
    let (instances, d) = memory_instance(yaml);
    let got = hammer_with(instances, d, need.clone()).await;
    assert_eq!(got, want, "memory {need:?}");
}

/// Tenant limits and budgets hold under contention too: 8 instances x 50 tasks, every store
/// (a Redis Cluster included).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_limits_and_budgets_hold_under_contention_on_every_store() {
    use crate::tenants::{need, spec};
    let yaml = one_model("rpm: 100000, tpm: 100000000, concurrency: 100000");
    let rpm = need(1, &spec(97, 1_000_000, 1000, None, None), &[1]);
    let conc = need(1, &spec(1000, 1_000_000, 23, None, None), &[1]);
    // Exact estimates: the budget is never overspent, so exactly floor(10000 / 37) fit.
    let budget = need(1, &spec(1000, 1_000_000, 1000, Some(10_000), None), &[37]);
    for (need, want) in [(rpm, 97), (conc, 23), (budget, 10_000 / 37)] {
        assert_every_store_grants(&yaml, &need, want).await;
    }
}

/// Per-day limits hold under contention: a deployment's rpd and tpd, a tenant's and a key's
/// rpd, 8 instances x 50 tasks, every store (a Redis Cluster included).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_day_limits_hold_under_contention_on_every_store() {
    use crate::key_accounts::{both, key};
    use crate::tenants::{need, spec};
    let ttl = Duration::from_secs(600);
    let roomy = "rpm: 100000, tpm: 100000000";
    assert_every_store_grants(
        &one_model(&format!("{roomy}, rpd: 97")),
        &Need::new(1, ttl),
        97,
    )
    .await;
    // Exactly floor(1000 / 7) requests of 7 tokens fit a tpd of 1000.
    let yaml = one_model(&format!("{roomy}, tpd: 1000"));
    assert_every_store_grants(&yaml, &Need::new(7, ttl), 1000 / 7).await;
    let yaml = one_model(roomy);
    let mut tenant = spec(100_000, 100_000_000, 100_000, None, None);
    tenant.limits.rpd = NonZeroU64::new(61);
    assert_every_store_grants(&yaml, &need(1, &tenant, &[1]), 61).await;
    let mut own = key(100_000, 100_000, None);
    own.limits.rpd = NonZeroU64::new(43);
    assert_every_store_grants(&yaml, &both(&tenant, &own, 1), 43).await;
}

/// A key's own limits and budgets hold under contention beside its tenant's, whichever binds:
/// 8 instances x 50 tasks, every store (a Redis Cluster included).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_limits_and_budgets_hold_beside_the_tenants_under_contention_on_every_store() {
    use crate::key_accounts::{both, key};
    use crate::tenants::spec;
    let yaml = one_model("rpm: 100000, tpm: 100000000, concurrency: 100000");
    let roomy = spec(1000, 1_000_000, 1000, Some(1_000_000), None);
    let cases = [
        (both(&roomy, &key(97, 1000, None), 1), 97),
        (both(&roomy, &key(1000, 23, None), 1), 23),
        // Exact estimates: exactly floor(5000 / 37) fit the key's budget.
        (both(&roomy, &key(1000, 1000, Some(5_000)), 37), 5_000 / 37),
        // The tenant's limit is the tighter one.
        (
            both(
                &spec(61, 1_000_000, 1000, None, None),
                &key(97, 1000, None),
                1,
            ),
            61,
        ),
    ];
    for (need, want) in cases {
        assert_every_store_grants(&yaml, &need, want).await;
    }
}

/// Input and output limits hold under contention on every store, whichever binds: 8 instances
/// x 50 tasks, never one token over itpm or otpm.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn itpm_and_otpm_admit_exactly_their_limits_under_contention_on_every_store() {
    let yaml = one_model("itpm: 10000, otpm: 3000");
    let split = |input: u64, output: u64| {
        Need::new(input + output, Duration::from_secs(600)).with_input_tokens(input)
    };
    // 37 in, 13 out: otpm binds at 3000 / 13; 37 in, 5 out: itpm binds at 10000 / 37.
    for (need, want) in [(split(37, 13), 3000 / 13), (split(37, 5), 10_000 / 37)] {
        assert_every_store_grants(&yaml, &need, want).await;
    }
}
