//! The Redis store on a Redis Cluster of three primaries the tests start themselves: namespaces
//! land on different shards and each keeps all its keys on its own; a script call without keys
//! goes to the namespace's shard; scripts flushed from the cluster are loaded again; a dead
//! seed node is skipped; a paused shard fails calls within the timeout; no password reaches an
//! error. The conformance, tenant, lifecycle and
//! input/output suites run on the cluster too (`every_store!`), and so do the contention and
//! differential suites.

use std::time::Duration;

use llmroute_tests::{CLUSTER_NODES, on_node, redis_cluster_own};
use router_core::config::Registry;
use router_core::ledger::{Admission, Ledger, Need, RedisStore, RedisStoreOptions};

use crate::support::{connect_to, one_model, scripts_missing_on};

fn keys_on(node: &str, namespace: &str) -> Vec<String> {
    on_node(
        node,
        redis::cmd("KEYS").arg(format!("llmroute:{{{namespace}}}:*")),
    )
}

/// `calls=` of `cmd` in a node's `INFO commandstats`.
fn calls_on(node: &str, cmd: &str) -> u64 {
    let stats: String = on_node(node, redis::cmd("INFO").arg("commandstats"));
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn grant(store: &RedisStore, d: router_core::config::DeploymentId) {
    let need = Need::new(10, Duration::from_secs(60));
    match store.admit(&need, &[d]).await.expect("the cluster answers") {
        Admission::Granted(_kept) => {}
        Admission::Denied(d) => panic!("a fresh deployment refused: {d:?}"),
    }
}

/// One namespace = one hash tag = one slot = one shard: three namespaces on three shards, each
/// with every key on its own shard and none elsewhere.
#[tokio::test]
async fn namespaces_spread_over_shards_and_each_stays_on_one() {
    let cluster = redis_cluster_own();
    let registry = Registry::from_yaml_str(&one_model("rpm: 5"), "t.yaml").expect("valid config");
    let d = registry.resolve("m")[0];
    let spread = cluster.namespaces_on_distinct_nodes(CLUSTER_NODES);
    for (ns, _) in &spread {
        let store = connect_to(&cluster.url, ns, &registry, None).await;
        grant(&store, d).await;
        // Five grants, then the limit: the namespace's window is one, on one shard.
        for _ in 0..4 {
            grant(&store, d).await;
        }
        let need = Need::new(10, Duration::from_secs(60));
        assert!(matches!(
            store.admit(&need, &[d]).await.expect("answers"),
            Admission::Denied(_)
        ));
    }
    let mut shards_with_keys = 0;
    for (i, node) in cluster.nodes.iter().enumerate() {
        let size: u64 = on_node(node, &redis::cmd("DBSIZE"));
        shards_with_keys += usize::from(size > 0);
        for (ns, home) in &spread {
            let keys = keys_on(node, ns);
            if i == *home {
                assert!(!keys.is_empty(), "{ns}: no key on its shard {node}");
            } else {
                assert!(
                    keys.is_empty(),
                    "{ns}: keys on another shard {node}: {keys:?}"
                );
            }
        }
    }
    assert_eq!(
        shards_with_keys, CLUSTER_NODES,
        "every shard holds a namespace"
    );
}

/// A snapshot of no deployment has no key for the cluster client to route by; it still goes
/// to the namespace's shard, never to a random node.
#[tokio::test]
async fn a_script_call_without_keys_goes_to_the_namespace_shard() {
    let cluster = redis_cluster_own();
    let registry = Registry::from_yaml_str(&one_model("rpm: 5"), "t.yaml").expect("valid");
    let home = cluster.node_of(&cluster.namespace);
    let store = connect_to(&cluster.url, &cluster.namespace, &registry, None).await;
    // Connecting loaded the scripts: from here each call below is one EVALSHA.
    for node in &cluster.nodes {
        let _: () = on_node(node, redis::cmd("CONFIG").arg("RESETSTAT"));
    }
    for _ in 0..9 {
        let snap = store.snapshot(&[]).await.expect("snapshot");
        assert!(snap.is_empty());
    }
    let calls: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| calls_on(n, "evalsha"))
        .collect();
    let mut want = vec![0; CLUSTER_NODES];
    want[home] = 9;
    assert_eq!(
        calls, want,
        "EVALSHA calls per node; the namespace is on node {home}"
    );
}

/// Connecting loads the scripts into every node; scripts flushed from every node (a restart,
/// a failover to a fresh replica) are loaded again on NOSCRIPT, and the call succeeds.
#[tokio::test]
async fn scripts_are_loaded_again_after_the_cluster_forgets_them() {
    let cluster = redis_cluster_own();
    let registry = Registry::from_yaml_str(&one_model("rpm: 5"), "t.yaml").expect("valid");
    let d = registry.resolve("m")[0];
    let home = cluster.node_of(&cluster.namespace);
    let store = connect_to(&cluster.url, &cluster.namespace, &registry, None).await;
    // Connecting loaded them into every node.
    for node in &cluster.nodes {
        assert_eq!(scripts_missing_on(node), Vec::<&str>::new(), "{node}");
    }
    grant(&store, d).await;
    for node in &cluster.nodes {
        let _: () = on_node(node, redis::cmd("SCRIPT").arg("FLUSH"));
        let _: () = on_node(node, redis::cmd("CONFIG").arg("RESETSTAT"));
    }
    grant(&store, d).await;
    let errors: String = on_node(&cluster.nodes[home], redis::cmd("INFO").arg("errorstats"));
    assert!(
        errors.contains("errorstat_NOSCRIPT:count=1"),
        "the call met NOSCRIPT once: {errors}"
    );
    assert_eq!(calls_on(&cluster.nodes[home], "script|load"), 1);
    assert_eq!(
        calls_on(&cluster.nodes[home], "evalsha"),
        2,
        "the call, then again"
    );
    assert_eq!(
        store.snapshot(&[d]).await.expect("snapshot")[0]
            .usage
            .requests,
        2
    );
}

/// The cluster is discovered from any seed node that answers: a dead first seed is skipped.
#[tokio::test]
async fn a_dead_seed_node_is_skipped() {
    let cluster = redis_cluster_own();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let live = cluster
        .url
        .strip_prefix("redis+cluster://")
        .expect("a cluster URL");
    let url = format!("redis+cluster://{dead},{live}");
    let registry = Registry::from_yaml_str(&one_model("rpm: 5"), "t.yaml").expect("valid");
    let store = connect_to(&url, &cluster.namespace, &registry, None).await;
    grant(&store, registry.resolve("m")[0]).await;
}

/// Connecting fails within the connect timeout, and the error shows no password, whichever
/// node holds it.
#[tokio::test]
async fn a_cluster_that_does_not_answer_fails_fast_without_showing_its_password() {
    let registry = Registry::from_yaml_str(&one_model("rpm: 5"), "t.yaml").expect("valid");
    let dead = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
    };
    for url in [
        format!("redis+cluster://:s3cret@{},{}", dead(), dead()),
        format!("redis+cluster://{},app:s3cret@{}", dead(), dead()),
        format!("redis+cluster://{},{}:notaport", dead(), dead().ip()),
    ] {
        let options = RedisStoreOptions {
            connect_timeout: Duration::from_millis(500),
            ..RedisStoreOptions::default()
        };
        let started = std::time::Instant::now();
        let err = RedisStore::connect(&url, &registry, options)
            .await
            .expect_err("nothing listens");
        let shown = format!("{err} / {err:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "{url}: slow");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("127.0.0.1"),
            "the error names the cluster: {shown}"
        );
    }
}

/// A shard that stops answering (`CLIENT PAUSE`) fails a call within the response timeout
/// instead of hanging it, and the store works again once the shard answers.
#[tokio::test]
async fn a_paused_shard_fails_a_call_within_the_response_timeout() {
    let cluster = redis_cluster_own();
    let registry = Registry::from_yaml_str(&one_model("rpm: 50"), "t.yaml").expect("valid");
    let d = registry.resolve("m")[0];
    let home = cluster.node_of(&cluster.namespace);
    let timeout = Duration::from_millis(300);
    let options = RedisStoreOptions {
        namespace: cluster.namespace.clone(),
        response_timeout: timeout,
        ..RedisStoreOptions::default()
    };
    let store = RedisStore::connect(&cluster.url, &registry, options)
        .await
        .expect("connect");
    grant(&store, d).await;
    // Every client of the shard waits 1.5 s (CLIENT UNPAUSE would wait too).
    let _: () = on_node(
        &cluster.nodes[home],
        redis::cmd("CLIENT").arg("PAUSE").arg(1500).arg("ALL"),
    );
    let started = std::time::Instant::now();
    let need = Need::new(10, Duration::from_secs(60));
    let answer = store.admit(&need, &[d]).await;
    let took = started.elapsed();
    assert!(answer.is_err(), "a paused shard answered: {answer:?}");
    // One try and the store's one retry, each bounded by the timeout.
    assert!(
        took < 3 * timeout,
        "took {took:?} with a {timeout:?} timeout"
    );
    // Once the pause lapses, the next call is answered (each try bounded as above).
    let deadline = started + Duration::from_secs(10);
    loop {
        let need = Need::new(10, Duration::from_secs(60));
        match store.admit(&need, &[d]).await {
            Ok(Admission::Granted(_)) => break,
            Ok(Admission::Denied(d)) => panic!("refused: {d:?}"),
            Err(e) if std::time::Instant::now() < deadline => drop(e),
            Err(e) => panic!("the shard never answered again: {e}"),
        }
    }
}
