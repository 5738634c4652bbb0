//! Cancellation sweeps over the resilient ledger: an admission, or a close, dropped by its
//! caller after k polls, for every k up to the poll that finishes it. After each, the
//! instance holds nothing in its book (no call out, no request in flight) and the shared
//! windows hold what was used and no slot.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

use router_core::ledger::Health;
use tokio::sync::Notify;

use super::*;

/// A waker that says when it was woken, so that a future is polled only when it can move.
struct Woken(Notify);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.notify_one();
    }
}

/// Polls `fut` at most `k` times, each after it asked to be (the first at once). `Some`: it
/// finished, with its output.
async fn poll_up_to<F: Future + Unpin>(fut: &mut F, k: usize) -> Option<F::Output> {
    let woken = Arc::new(Woken(Notify::new()));
    let waker = Waker::from(woken.clone());
    let mut cx = Context::from_waker(&waker);
    for poll in 0..k {
        if poll > 0 {
            woken.0.notified().await;
        }
        if let Poll::Ready(out) = Pin::new(&mut *fut).poll(&mut cx) {
            return Some(out);
        }
    }
    None
}

/// An instance over one model with `limits` (leasing `lease`), heartbeats by hand, after its
/// first one.
async fn instance(redis: &TestRedis, limits: &str, lease: Option<&str>) -> ResilientStore {
    let mut yaml = one_model(limits);
    if let Some(lease) = lease {
        yaml = yaml.replace(
            "        limits:",
            &format!("        lease: {lease}\n        limits:"),
        );
    }
    let registry = Registry::from_yaml_str(&yaml, "sweep.yaml").unwrap();
    let ledger = by_hand(redis, registry, OnError::Local).await;
    ledger.heartbeat_now().await;
    ledger
}

/// Requests, tokens and slots in the shared window of `M`.
async fn shared(redis: &TestRedis) -> (u64, u64, u64) {
    let u = reader(redis).await.snapshot(&[M]).await.unwrap()[0].usage;
    (u.requests, u.tokens, u.in_flight)
}

fn book_is_empty(h: &Health) -> bool {
    h.in_flight == 0 && h.calls_out == 0 && h.leased_in_flight == 0
}

/// Drops an admission on an instance over `limits` (with `lease`) after k polls, for every k
/// up to the poll that finishes it (more than one); a finished one is settled with 7 tokens.
/// After the close, the book is empty and the shared window holds what was settled and no
/// slot: a dropped admission is voided, and a block granted to a call whose caller went away
/// is asked again and handed back.
async fn sweep_admission(limits: &str, lease: Option<&str>, held_as_shared: u64) {
    let mut finished_at = None;
    for k in 0..64 {
        let redis = redis_server();
        let a = instance(&redis, limits, lease).await;
        let need = Need::new(10, Duration::from_secs(60));
        let mut admit = a.admit(&need, &[M]);
        let done = poll_up_to(&mut admit, k).await;
        drop(admit);
        let finished = done.is_some();
        let admitted = match done {
            Some(Ok(Admission::Granted(r))) => {
                assert_eq!(a.status().in_flight, held_as_shared, "held while in flight");
                assert!(a.settle(&r, ActualUsage::tokens(7)).await.unwrap());
                1
            }
            Some(other) => panic!("after {k} polls: {other:?}"),
            None => 0,
        };
        a.close().await.unwrap();
        let h = a.status();
        assert!(book_is_empty(&h), "after {k} polls: {h:?}");
        let want = (admitted, 7 * admitted, 0);
        assert_eq!(shared(&redis).await, want, "after {k} polls");
        if finished {
            finished_at = Some(k);
            break;
        }
    }
    assert!(finished_at.is_some_and(|k| k > 1), "{finished_at:?}");
}

#[tokio::test]
async fn an_admission_dropped_after_any_number_of_polls_leaves_nothing_behind() {
    sweep_admission("rpm: 1000, concurrency: 100", None, 1).await;
}

#[tokio::test]
async fn a_close_dropped_after_any_number_of_polls_still_hands_back_every_block() {
    let mut finished_at = None;
    for k in 0..64 {
        let redis = redis_server();
        let a = instance(&redis, "rpm: 1000", Some("{ requests: 30, secs: 60 }")).await;
        let mut taken = Vec::new();
        for _ in 0..4 {
            let need = Need::new(10, Duration::from_secs(60));
            match a.admit(&need, &[M]).await.unwrap() {
                Admission::Granted(r) => taken.push(r),
                Admission::Denied(d) => panic!("{d:?}"),
            }
        }
        // Requests from a block are the block's, not held as shared ones.
        let h = a.status();
        assert_eq!((h.in_flight, h.leased_in_flight), (0, 4));
        assert!(a.release(&taken[0]).await.unwrap());
        for r in &taken[1..] {
            assert!(a.settle(r, ActualUsage::tokens(5)).await.unwrap());
        }
        // The block of 30 is counted whole until it is handed back.
        assert_eq!(shared(&redis).await.0, 30);
        let mut close = a.close();
        let done = poll_up_to(&mut close, k).await;
        drop(close);
        // A second close waits for the first, which its caller's going away did not stop.
        a.close().await.unwrap();
        assert!(
            book_is_empty(&a.status()),
            "after {k} polls: {:?}",
            a.status()
        );
        // What the block did not use went back: the three settled, not the one released.
        assert_eq!(shared(&redis).await, (3, 15, 0), "after {k} polls");
        if done.is_some() {
            finished_at = Some(k);
            break;
        }
    }
    assert!(finished_at.is_some_and(|k| k > 1), "{finished_at:?}");
}

#[tokio::test]
async fn an_admission_dropped_while_it_asks_for_a_block_leaves_nothing_behind_after_close() {
    sweep_admission("rpm: 1000", Some("{ requests: 30, secs: 60 }"), 0).await;
}
