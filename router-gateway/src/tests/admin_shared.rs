//! Two gateways on one Redis: a key created, rotated or revoked through one is served (or
//! refused) by the other within a second, with no restart.

use std::time::Duration;

use router_core::keys::RedisKeys;

use super::admin::{ADMIN, created};
use super::*;

/// A gateway with an admin key whose runtime keys are in `redis`.
async fn on_redis(redis: &llmroute_tests::TestRedis) -> Running {
    let upstream = MockServer::start().await;
    let extra = format!("  admin_keys: [{}]\n", hash_key(ADMIN));
    let yaml = yaml_over(&upstream.uri(), "", &extra);
    let store = RedisKeys::connect(&redis.url, &redis.namespace, Duration::from_secs(2))
        .await
        .unwrap();
    start_access(upstream, &yaml, |a| a.with_store(Arc::new(store))).await
}

/// Waits, a second at most, until `r` serves a version of the keys past the one it served.
async fn next_version(r: &mut Running, served: u64) {
    let waited = tokio::time::timeout(Duration::from_secs(1), r.keys.past(served)).await;
    assert!(
        waited.is_ok(),
        "no new keys within 1 s (at version {served})"
    );
}

#[tokio::test]
async fn a_key_made_rotated_or_revoked_on_one_instance_holds_on_the_other_within_a_second() {
    let redis = llmroute_tests::redis_server();
    let a = on_redis(&redis).await;
    let mut b = on_redis(&redis).await;
    let served = b.keys.version();
    let (id, secret) = created(&a, json!({})).await;
    next_version(&mut b, served).await;
    assert_eq!(b.models_status(&secret).await.0, 200);
    // Rotated with no grace on A: the old secret stops on B, the new one works there.
    let served = b.keys.version();
    let (status, rotated) = a
        .admin_post(
            &format!("/admin/v1/keys/{id}/rotate"),
            json!({"grace_secs": 0}),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    let new = rotated["key"].as_str().unwrap();
    next_version(&mut b, served).await;
    assert_eq!(b.models_status(&secret).await.0, 401);
    assert_eq!(b.models_status(new).await.0, 200);
    // Revoked through B: refused on A.
    let served = a.keys.version();
    let (status, _) = b
        .admin_post(&format!("/admin/v1/keys/{id}/revoke"), json!({}))
        .await;
    assert_eq!(status, 200);
    let mut a = a;
    next_version(&mut a, served).await;
    assert_eq!(a.models_status(new).await.0, 401);
    assert_eq!(b.models_status(new).await.0, 401);
}
