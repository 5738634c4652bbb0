//! Accounts through an outage: what an instance admits and spends on its own, for a tenant and
//! a key, is in both accounts' shared windows and spends once Redis is back.

use super::*;
use crate::key_accounts::{both, key};
use crate::tenants::spec;

#[tokio::test]
async fn spends_and_requests_made_on_its_own_reach_the_tenants_and_the_keys_accounts() {
    let mut redis = redis_server();
    let a = instance(&redis, OnError::Local).await;
    a.heartbeat_now().await;
    let (acme, k) = (
        spec(100, 100_000, 100, Some(10_000), None),
        key(100, 100, Some(5_000)),
    );
    let need = both(&acme, &k, 300);
    redis.kill();
    let mut held = Vec::new();
    for _ in 0..2 {
        match a.admit(&need.clone().with_new_id(), &[M]).await.unwrap() {
            Admission::Granted(r) => held.push(r),
            Admission::Denied(d) => panic!("local mode refused: {d:?}"),
        }
    }
    assert_eq!(a.status().mode, Mode::Local);
    let actual = ActualUsage {
        cost_micros: 200,
        ..ActualUsage::tokens(10)
    };
    assert!(a.settle(&held[0], actual).await.unwrap());
    redis.restart();
    for _ in 0..3 {
        if a.status().mode == Mode::Shared {
            break;
        }
        a.heartbeat_now().await;
    }
    assert_eq!(a.status().mode, Mode::Shared);
    let shared = reader(&redis).await;
    for account in [&acme, &k] {
        let s = shared.tenant_snapshot(account).await.unwrap();
        let seen = (s.usage.requests, s.usage.in_flight, s.spent_today_micros);
        assert_eq!(
            seen,
            (2, 1, 500),
            "{}: the settled 200 and the held 300",
            account.name
        );
    }
    assert!(a.settle(&held[1], actual).await.unwrap());
    let s = shared.tenant_snapshot(&k).await.unwrap();
    assert_eq!((s.usage.in_flight, s.spent_today_micros), (0, 400));
}
