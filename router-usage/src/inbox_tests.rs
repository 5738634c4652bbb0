//! When the writer's bell rings: at a full batch or a request, never at each record.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::*;
use crate::record::Outcome;

fn record() -> Msg {
    Msg::Record(Box::new(Record {
        id: "0".repeat(32),
        at_ms: 0,
        request_id: "req".into(),
        tenant: None,
        key_id: None,
        model_asked: "m".into(),
        route: None,
        provider: None,
        model: None,
        prompt_tokens: 1,
        cached_tokens: 0,
        completion_tokens: 1,
        reasoning_tokens: 0,
        cost_micros: 0,
        latency_ms: 1,
        first_token_ms: None,
        attempts: 1,
        failed_attempts: Vec::new(),
        waited_ms: 0,
        queue_position: None,
        outcome: Outcome::Ok,
        failure: None,
        priority: "interactive".into(),
        stream: false,
    }))
}

fn drained(inbox: &mut Inbox) -> usize {
    let mut n = 0;
    while let Next::Msg(_) = inbox.take() {
        n += 1;
    }
    n
}

#[tokio::test(start_paused = true)]
async fn records_short_of_a_batch_leave_the_writer_asleep_until_its_deadline() {
    let (tx, mut inbox) = queue(3);
    assert!(tx.send(record()));
    assert!(tx.send(record()));
    let start = Instant::now();
    let deadline = start + Duration::from_millis(200);
    assert!(inbox.gather(deadline).await, "woken before the deadline");
    assert_eq!(Instant::now(), deadline);
    assert_eq!(drained(&mut inbox), 2);
}

#[tokio::test(start_paused = true)]
async fn the_record_that_fills_a_batch_rings_at_once() {
    let (tx, mut inbox) = queue(3);
    for _ in 0..3 {
        assert!(tx.send(record()));
    }
    let start = Instant::now();
    assert!(!inbox.gather(start + Duration::from_secs(1)).await);
    assert_eq!(Instant::now(), start, "the full batch waited");
    assert_eq!(drained(&mut inbox), 3);
    // Taken records no longer count: two more are short of the next batch.
    assert!(tx.send(record()));
    assert!(tx.send(record()));
    assert!(inbox.gather(start + Duration::from_millis(10)).await);
}

#[tokio::test(start_paused = true)]
async fn a_flush_rings_whatever_is_queued() {
    let (tx, mut inbox) = queue(100);
    assert!(tx.send(record()));
    let (done, _wait) = oneshot::channel();
    assert!(tx.send(Msg::Flush(done)));
    let start = Instant::now();
    assert!(!inbox.gather(start + Duration::from_secs(1)).await);
    assert_eq!(Instant::now(), start);
    assert!(matches!(inbox.take(), Next::Msg(Msg::Record(_))));
    assert!(matches!(inbox.take(), Next::Msg(Msg::Flush(_))));
    assert!(matches!(inbox.take(), Next::Empty));
}

#[tokio::test]
async fn the_queue_closes_once_every_sender_is_gone() {
    let (tx, mut inbox) = queue(2);
    assert!(tx.send(record()));
    drop(tx);
    assert!(matches!(inbox.take(), Next::Msg(Msg::Record(_))));
    assert!(matches!(inbox.take(), Next::Closed));
    assert!(inbox.recv().await.is_none());
}
