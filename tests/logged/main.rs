//! What the ledger says in its log, in a test binary of its own: no other test loads the machine
//! beside it until a first Redis call is late (a first heartbeat answered late starts the
//! windows unseen, and nothing is said).
#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use llmroute_tests::{Logs, redis_server};
use router_core::clock::SystemClock;
use router_core::config::{DeploymentId, LedgerSettings, OnError, Registry};
use router_core::ledger::{Admission, Ledger, Need, RedisStore, RedisStoreOptions, ResilientStore};

const YAML: &str = "providers:\n  - name: p\n    api: openai\n    base_url: http://127.0.0.1:1/v1\n    \
    api_key_env: P_KEY\n    models:\n      - { name: m, price: { input: 1, output: 2 }, limits: { rpm: 10 } }\n";

async fn admitted(ledger: &dyn Ledger) -> bool {
    let need = Need::new(10, Duration::from_secs(60));
    matches!(
        ledger.admit(&need, &[DeploymentId(0)]).await.unwrap(),
        Admission::Granted(_)
    )
}

/// A namespace seen for the first time is new: said at info, not warned of as a loss; a store
/// that loses the windows an instance knew is warned of.
#[tokio::test]
async fn a_new_namespace_is_said_to_be_new_and_only_a_real_loss_is_warned_of() {
    let (logs, _capture) = Logs::capture();
    let redis = redis_server();
    let mut registry = Registry::from_yaml_str(YAML, "test.yaml").unwrap();
    // Heartbeats by hand; a timeout no first call (connect, load the scripts) overruns.
    registry.ledger = LedgerSettings {
        timeout: Duration::from_secs(10),
        on_error: OnError::Local,
        heartbeat: Duration::from_secs(3600),
    };
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        response_timeout: registry.ledger.timeout,
        lazy: true,
        ..RedisStoreOptions::default()
    };
    let shared = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    let a = ResilientStore::new(shared, &registry, Arc::new(SystemClock)).await;
    assert!(admitted(&a).await);
    let first = logs.text();
    assert!(
        first.contains("INFO") && first.contains("holds no windows yet in this namespace"),
        "{first}"
    );
    assert!(!first.contains("lost its windows"), "{first}");
    // The namespace empties (a restarted Redis keeping nothing): the windows this instance
    // knew are gone.
    let client = ::redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pattern = format!("llmroute:{{{}}}:*", redis.namespace);
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "nothing under {pattern}");
    let _: () = ::redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(admitted(&a).await);
    let after = logs.text();
    let lost = &after[first.len()..];
    assert!(
        lost.contains("WARN") && lost.contains("lost its windows"),
        "{lost}"
    );
}
