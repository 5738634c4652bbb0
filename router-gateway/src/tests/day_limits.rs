//! Per-day limits through the gateway: a tier's `rpd` holds across two instances on one Redis,
//! and the requests over it are refused with 429 and the time to the day's reset.

use std::time::{SystemTime, UNIX_EPOCH};

use super::admin_shared::{on_redis_ledger, priced_upstream};
use super::*;

/// Seconds from now to the next UTC midnight.
fn to_utc_midnight() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    86_400 - now % 86_400
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiers_rpd_holds_over_two_instances_and_the_rest_wait_for_the_reset() {
    let redis = llmroute_tests::redis_server();
    let upstream = priced_upstream().await;
    let a = on_redis_ledger(&redis, &upstream.uri(), "rpd: 3").await;
    let b = on_redis_ledger(&redis, &upstream.uri(), "rpd: 3").await;
    let sends = (0..8).map(|i| {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        a.http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(ACME)
            .header("x-llmroute-timeout", "1")
            .json(&hello())
            .send()
    });
    let answers = futures_util::future::join_all(sends).await;
    let mut served = 0;
    for answer in answers {
        let response = answer.unwrap();
        if response.status() == 200 {
            served += 1;
            continue;
        }
        assert_eq!(response.status(), 429);
        let retry = retry_after_secs(&response);
        // Rounded up to whole seconds, read a moment after the ledger's clock.
        let midnight = to_utc_midnight();
        assert!(retry.abs_diff(midnight) <= 2, "{retry} vs {midnight}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], "rate_limit_exceeded");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("tenant rpd full until it resets in"),
            "{message}"
        );
    }
    assert_eq!(served, 3);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 3);
}
