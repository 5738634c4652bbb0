//! Runtime keys on every store: what is put is listed, a change over a stale revision is
//! refused, the version moves with each change, and concurrent changes of one key all land.

use std::sync::Arc;
use std::time::Duration;

use llmroute_tests::{TestRedis, redis_cluster, redis_server};
use router_core::keys::{
    KeyRecord, KeyStore, KeyStoreError, MemoryKeys, RedisKeys, SqliteKeys, find, update,
};

use super::support::Store;

/// A key store of the kind `store` names, and what keeps it alive.
async fn keys(
    store: Store,
) -> (
    Arc<dyn KeyStore>,
    Option<TestRedis>,
    Option<tempfile::TempDir>,
) {
    match store {
        Store::Memory => (Arc::new(MemoryKeys::default()), None, None),
        Store::Redis | Store::Cluster => {
            let server = match store {
                Store::Cluster => redis_cluster(),
                _ => redis_server(),
            };
            let keys = RedisKeys::connect(&server.url, &server.namespace, Duration::from_secs(2))
                .await
                .unwrap();
            (Arc::new(keys), Some(server), None)
        }
        Store::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let keys = SqliteKeys::open(&dir.path().join("keys.sqlite")).unwrap();
            (Arc::new(keys), None, Some(dir))
        }
    }
}

fn record(id: &str, tenant: &str) -> KeyRecord {
    KeyRecord::new(
        id.into(),
        "ci".into(),
        tenant.into(),
        "ab".repeat(32),
        1_000,
    )
}

async fn put_is_listed_and_raises_the_version(store: Store) {
    let (keys, _r, _d) = keys(store).await;
    assert_eq!(keys.version().await.unwrap(), 0);
    assert!(keys.all().await.unwrap().records.is_empty());
    let mut k = record("key_a", "acme");
    k.models = vec!["fast".into()];
    keys.put(&k, None).await.unwrap();
    let listing = keys.all().await.unwrap();
    assert_eq!(listing.version, 1);
    assert_eq!(listing.records, vec![k.clone()]);
    assert_eq!(keys.version().await.unwrap(), 1);
    // A second key with the same id is refused.
    let again = keys.put(&record("key_a", "other"), None).await;
    assert!(
        matches!(again, Err(KeyStoreError::Conflict { .. })),
        "{again:?}"
    );
    assert_eq!(find(&*keys, "key_a").await.unwrap().unwrap().tenant, "acme");
    assert_eq!(
        keys.version().await.unwrap(),
        1,
        "a refused put changes nothing"
    );
}

async fn a_change_over_a_stale_revision_is_refused(store: Store) {
    let (keys, _r, _d) = keys(store).await;
    let k = record("key_a", "acme");
    keys.put(&k, None).await.unwrap();
    let mut first = k.clone();
    first.name = "first".into();
    first.rev = 1;
    keys.put(&first, Some(0)).await.unwrap();
    let mut second = k.clone();
    second.name = "second".into();
    second.rev = 1;
    let stale = keys.put(&second, Some(0)).await;
    assert!(
        matches!(stale, Err(KeyStoreError::Conflict { .. })),
        "{stale:?}"
    );
    assert_eq!(find(&*keys, "key_a").await.unwrap().unwrap().name, "first");
    // A change of a key that does not exist is refused too.
    let missing = keys.put(&record("key_b", "acme"), Some(0)).await;
    assert!(
        matches!(missing, Err(KeyStoreError::Conflict { .. })),
        "{missing:?}"
    );
}

async fn concurrent_updates_of_one_key_all_land(store: Store) {
    let (keys, _r, _d) = keys(store).await;
    keys.put(&record("key_a", "acme"), None).await.unwrap();
    let changes = (0..6).map(|i| {
        let keys = keys.clone();
        async move {
            update(&*keys, "key_a", |k| {
                k.models.push(format!("m{i}"));
                Ok::<_, ()>(())
            })
            .await
        }
    });
    for done in futures_util::future::join_all(changes).await {
        assert!(matches!(done, Ok(Some(Ok(_)))), "{done:?}");
    }
    let k = find(&*keys, "key_a").await.unwrap().unwrap();
    let mut models = k.models.clone();
    models.sort();
    assert_eq!(models, ["m0", "m1", "m2", "m3", "m4", "m5"]);
    assert_eq!(k.rev, 6);
    assert_eq!(keys.version().await.unwrap(), 7);
    assert!(
        update(&*keys, "key_none", |_| Ok::<_, ()>(()))
            .await
            .unwrap()
            .is_none()
    );
}

every_store!(
    put_is_listed_and_raises_the_version,
    a_change_over_a_stale_revision_is_refused,
    concurrent_updates_of_one_key_all_land,
);
