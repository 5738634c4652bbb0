//! Waiting in line through the router: a request that finds its deployment full waits in the
//! deployment's line, is woken by the store when its turn comes (not by its own timer), and a
//! request dropped while it waits leaves the line at once.

use std::sync::Arc;
use std::time::Duration;

use router_core::clock::ManualClock;
use router_core::config::Registry;
use router_core::ledger::{ActualUsage, Admission, Ledger, LimitKind, MemoryStore, Need};
use router_sdk::{ChatRequest, Router, StaticKeys};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

use crate::support::*;

/// A router on a deployment that holds one request at a time, its ledger, and its virtual
/// sleeper (whose sleeps end only when the test wakes them).
async fn one_at_a_time() -> (
    Router,
    Arc<dyn Ledger>,
    VirtualSleeper,
    MockServer,
    ManualClock,
) {
    let server = MockServer::start().await;
    let mut up = Upstream::openai("oa", (1.0, 1.0));
    up.limits = "concurrency: 1";
    let registry = Registry::from_yaml_str(&config(&[(&up, server.uri())]), "t.yaml").unwrap();
    let clock = ManualClock::new(T0);
    let sleeper = VirtualSleeper::new(clock.clone());
    let ledger: Arc<dyn Ledger> =
        Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone())));
    let router = Router::builder(registry)
        .ledger(ledger.clone())
        .clock(Arc::new(clock.clone()))
        .sleeper(Arc::new(sleeper.clone()))
        .keys(Arc::new(
            StaticKeys::new().with(key_var("oa"), planted_key("oa")),
        ))
        .seed(5)
        .build()
        .await
        .unwrap();
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .mount(&server)
        .await;
    (router, ledger, sleeper, server, clock)
}

#[tokio::test]
async fn a_dropped_waiter_leaves_the_line_at_once_and_the_next_is_woken_by_the_settlement() {
    let (router, ledger, sleeper, server, clock) = one_at_a_time().await;
    let d = router.registry().resolve("chat")[0];
    // The one slot is taken.
    let Ok(Admission::Granted(held)) = ledger
        .admit(&Need::new(1, Duration::from_secs(600)), &[d])
        .await
    else {
        panic!("the first request finds room");
    };
    let waiter = |text: &str| {
        let (router, req) = (router.clone(), ChatRequest::new(text));
        tokio::spawn(async move { router.chat(req).await })
    };
    let first = waiter("first");
    while sleeper.asleep() < 1 {
        tokio::task::yield_now().await;
    }
    clock.advance_ms(1);
    let second = waiter("second");
    while sleeper.asleep() < 2 {
        tokio::task::yield_now().await;
    }
    // The first gives up (its caller went away) while in line.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // Its ticket left at once: a request without a ticket is refused by the second's alone.
    let refused = loop {
        tokio::task::yield_now().await;
        clock.advance_ms(1);
        let Ok(Admission::Denied(denial)) = ledger
            .admit(&Need::new(1, Duration::from_secs(600)), &[d])
            .await
        else {
            panic!("the slot is still held");
        };
        if denial.refusals[0].limit == LimitKind::Concurrency {
            break false;
        }
        assert_eq!(denial.refusals[0].limit, LimitKind::Line);
        // Two tickets, then one: the dropped request's left without its TTL passing.
        if line_length(&*ledger, d).await == 1 {
            break true;
        }
    };
    assert!(refused, "the line emptied before the slot was freed");
    // The slot frees: the settlement wakes the second, whose own sleep never ends.
    ledger
        .settle(&held, ActualUsage::default())
        .await
        .expect("settled");
    let answer = second.await.unwrap().expect("the second is served");
    // The test woke none of the sleeps: the store's wake-ups did (the first's leaving, then
    // the settlement).
    assert_eq!(
        answer.receipt.queue_position,
        Some(1),
        "one stood before it"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

/// How many tickets wait in `d`'s line, as the store's snapshot says.
async fn line_length(ledger: &dyn Ledger, d: router_core::config::DeploymentId) -> u64 {
    ledger.snapshot(&[d]).await.expect("snapshot")[0]
        .line
        .waiting
}
