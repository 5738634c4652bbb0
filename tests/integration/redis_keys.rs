//! Redis key layout: every key of a namespace carries its hash tag and a TTL (DESIGN.md "Redis").

use std::time::Duration;

use llmroute_tests::redis_server;
use router_core::config::Registry;
use router_core::ledger::{
    ActualUsage, Admission, Ledger, MAX_SLOT_TTL, Need, Observation, SETTLE_GRACE_MS,
};

use crate::support::connect;

#[tokio::test]
async fn every_key_is_hash_tagged_by_namespace_and_has_a_ttl() {
    let yaml = r#"
providers:
  - name: p
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: P_KEY
    limits: { rpm: 1000, concurrency: 50 }
    models:
      - { name: m, price: { input: 1, output: 1 }, limits: { rpm: 100, tpm: 100000, concurrency: 5 } }
      - { name: n, price: { input: 1, output: 1 } }
"#;
    let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("valid");
    let server = redis_server();
    let store = connect(&server, &registry, None).await;
    let ids: Vec<_> = registry.deployment_ids().collect();
    let need = Need::new(100, Duration::from_secs(30));
    for &d in &ids {
        let Admission::Granted(r) = store.admit(&need, &[d]).await.expect("admit") else {
            panic!("a fresh deployment refused");
        };
        let _held = store
            .admit(&need.clone().with_new_id(), &[d])
            .await
            .expect("admit");
        store
            .settle(&r, ActualUsage::tokens(40))
            .await
            .expect("settle");
        store
            .cooldown(d, Duration::from_secs(5))
            .await
            .expect("cooldown");
        let obs = Observation {
            requests: Some((3, Duration::from_secs(9))),
            tokens: None,
            ..Observation::default()
        };
        store.observe(d, obs).await.expect("observe");
    }
    store.snapshot(&ids).await.expect("snapshot");
    // A refused admission leaves no reservation key behind.
    let too_big = Need::new(1_000_000, Duration::from_secs(30));
    assert!(matches!(
        store.admit(&too_big, &ids[..1]).await.expect("admit"),
        Admission::Denied(_)
    ));

    let client = redis::Client::open(server.url.as_str()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let pattern = format!("llmroute:{{{}}}:*", server.namespace);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut conn)
        .await
        .expect("keys");
    // A window hash (holding the cooldown, for deployments) and a slots zset per scope: m, n, p;
    // a reservation key per live reservation (the second admission on m and on n); the settled
    // reservations' keys are gone.
    assert_eq!(keys.len(), 8, "{keys:?}");
    assert_eq!(
        keys.iter().filter(|k| k.contains(":r:")).count(),
        2,
        "{keys:?}"
    );
    for key in &keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("pttl");
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
        // At most the longest slot, its settle grace and two buckets.
        let longest = MAX_SLOT_TTL.as_millis() as i64 + SETTLE_GRACE_MS as i64 + 2_000;
        assert!(ttl <= longest, "{key} lives too long ({ttl} ms)");
    }
    // Window hashes stay hash tables: as listpacks, every field access scans ~125 fields.
    for key in keys.iter().filter(|k| k.contains(":w:")) {
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("object encoding");
        assert_eq!(encoding, "hashtable", "{key}");
    }
}

/// A line is two keys, hash-tagged, that expire with the last ticket put in them.
#[tokio::test]
async fn a_lines_keys_are_hash_tagged_and_expire_with_their_last_ticket() {
    use router_core::ledger::{TICKET_TTL_MS, Ticket};
    let registry =
        Registry::from_yaml_str(&crate::support::one_model("concurrency: 1"), "test.yaml")
            .expect("valid");
    let server = redis_server();
    let store = connect(&server, &registry, None).await;
    let d = registry.resolve("m")[0];
    let ttl = Duration::from_secs(30);
    let Admission::Granted(_held) = store.admit(&Need::new(1, ttl), &[d]).await.expect("admit")
    else {
        panic!("a fresh deployment refused");
    };
    let mut waiter = Need::new(1, ttl);
    waiter.line = Some(Ticket {
        id: 7,
        handicap_ms: 0,
        ttl_ms: TICKET_TTL_MS,
        join: true,
        batch: false,
        queued: false,
    });
    let Admission::Denied(denial) = store.admit(&waiter, &[d]).await.expect("admit") else {
        panic!("the slot is held");
    };
    assert_eq!(denial.place, Some(0));
    let client = redis::Client::open(server.url.as_str()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let pattern = format!("llmroute:{{{}}}:v3:q*", server.namespace);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut conn)
        .await
        .expect("keys");
    keys.sort();
    let ns = &server.namespace;
    assert_eq!(
        keys,
        [
            format!("llmroute:{{{ns}}}:v3:q:d:p/m"),
            format!("llmroute:{{{ns}}}:v3:qx:d:p/m")
        ]
    );
    for key in &keys {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("pttl");
        assert!(pttl > 0 && pttl <= TICKET_TTL_MS as i64, "{key}: {pttl} ms");
    }
}
