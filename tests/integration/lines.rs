//! The lines of waiting requests on every store: admission serves the first in line, whatever
//! order waiters ask in and whichever instance they ask through; a batch ticket is passed only
//! within its handicap; a dead waiter's ticket expires; a ticket that leaves frees the line at
//! once; and the store wakes whoever is first when room frees.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use llmroute_tests::{TestRedis, redis_cluster, redis_server};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use router_core::clock::{Clock, ManualClock};
use router_core::config::{DeploymentId, Registry};
use router_core::ledger::EVERYONE;
use router_core::ledger::{
    ActualUsage, Admission, Ledger, LimitKind, MemoryStore, Need, Reservation, TICKET_TTL_MS,
    Ticket,
};

use crate::support::{Store, T0, connect, one_model, open_sqlite, temp_dir};

every_store!(
    a_newcomer_never_passes_a_waiter_and_a_request_nobody_waits_before_is_served,
    a_batch_waiter_is_served_within_its_handicap_under_interactive_load_at_90_percent,
    a_dead_waiters_ticket_expires_and_the_next_one_is_served,
    a_ticket_that_leaves_frees_the_line_at_once_and_wakes_the_next,
    a_settlement_wakes_the_first_in_line,
    a_snapshot_counts_a_lines_tickets_by_class,
);

/// Several instances of one store, on one clock: the stores' handles, and what keeps the
/// store alive.
struct Instances {
    ledgers: Vec<Arc<dyn Ledger>>,
    clock: ManualClock,
    d: DeploymentId,
    _redis: Option<TestRedis>,
    _dir: Option<tempfile::TempDir>,
}

impl Instances {
    async fn new(store: Store, yaml: &str, n: usize) -> Self {
        let registry = Registry::from_yaml_str(yaml, "test.yaml").expect("test config is valid");
        let clock = ManualClock::new(T0);
        let (mut redis, mut dir) = (None, None);
        let mut ledgers: Vec<Arc<dyn Ledger>> = Vec::new();
        match store {
            Store::Memory => {
                let one: Arc<dyn Ledger> =
                    Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone())));
                ledgers = vec![one; n];
            }
            Store::Redis | Store::Cluster => {
                let server = match store {
                    Store::Cluster => redis_cluster(),
                    _ => redis_server(),
                };
                for _ in 0..n {
                    ledgers.push(Arc::new(
                        connect(&server, &registry, Some(clock.clone())).await,
                    ));
                }
                redis = Some(server);
            }
            Store::Sqlite => {
                let tmp = temp_dir();
                for _ in 0..n {
                    let path = tmp.path().join("ledger.db");
                    ledgers.push(Arc::new(open_sqlite(&path, &registry, &clock)));
                }
                dir = Some(tmp);
            }
        }
        Instances {
            ledgers,
            clock,
            d: registry.resolve("m")[0],
            _redis: redis,
            _dir: dir,
        }
    }

    async fn admit(&self, instance: usize, need: &Need) -> Admission {
        let ledger = &self.ledgers[instance % self.ledgers.len()];
        ledger.admit(need, &[self.d]).await.expect("store answers")
    }

    async fn settle(&self, r: &Reservation) {
        let settled = self.ledgers[0].settle(r, ActualUsage::default()).await;
        assert!(settled.expect("store answers"), "settled once");
    }
}

/// A waiting request: a need of one token carrying ticket `id` (`batch`: with a handicap of
/// `handicap_ms`).
fn waiter(id: u64, handicap_ms: u64) -> Need {
    let mut need = Need::new(1, Duration::from_secs(600));
    need.line = Some(Ticket {
        id,
        handicap_ms,
        ttl_ms: TICKET_TTL_MS,
        join: true,
        batch: false,
        queued: false,
    });
    need
}

fn granted(a: Admission) -> Option<Reservation> {
    match a {
        Admission::Granted(r) => Some(r),
        Admission::Denied(_) => None,
    }
}

/// Waiters arrive in a random order through three instances behind a deployment that holds one
/// request at a time. Each time the request in flight settles (after a random time), the
/// waiters ask again in a random order: the one admitted is always the earliest ticket. Without
/// the line, whoever asked first would win.
fn admission_serves_waiters_in_ticket_order_whatever_order_they_ask_in(store: Store) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let w = runtime.block_on(Instances::new(store, &one_model("concurrency: 1"), 3));
    let cases = match store {
        Store::Memory | Store::Sqlite => 16,
        Store::Redis | Store::Cluster => 6,
    };
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        Just((1..=30u64).collect::<Vec<_>>()).prop_shuffle(),
        proptest::collection::vec(Just((0..30usize).collect::<Vec<_>>()).prop_shuffle(), 30),
        proptest::collection::vec(1..500u64, 30),
    );
    // Every case on the same store: each has tickets of its own.
    let round = AtomicU64::new(0);
    let result = runner.run(&strategy, |(arrivals, asks, gaps)| {
        let round = round.fetch_add(1, Ordering::Relaxed);
        runtime.block_on(fifo_case(&w, round, &arrivals, &asks, &gaps));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn memory_admission_serves_waiters_in_ticket_order() {
    admission_serves_waiters_in_ticket_order_whatever_order_they_ask_in(Store::Memory);
}

#[test]
fn sqlite_admission_serves_waiters_in_ticket_order() {
    admission_serves_waiters_in_ticket_order_whatever_order_they_ask_in(Store::Sqlite);
}

#[test]
fn redis_admission_serves_waiters_in_ticket_order() {
    admission_serves_waiters_in_ticket_order_whatever_order_they_ask_in(Store::Redis);
}

#[test]
fn cluster_admission_serves_waiters_in_ticket_order() {
    admission_serves_waiters_in_ticket_order_whatever_order_they_ask_in(Store::Cluster);
}

async fn fifo_case(w: &Instances, round: u64, arrivals: &[u64], asks: &[Vec<usize>], gaps: &[u64]) {
    let ticket = |i: u64| (round + 1) * 1_000 + i;
    let mut held = granted(w.admit(0, &Need::new(1, Duration::from_secs(600))).await)
        .expect("the first request finds room");
    // Arrival order is ticket order: each arrives a few ms after the one before.
    for (k, &i) in arrivals.iter().enumerate() {
        w.clock.advance_ms(3);
        match w.admit(k, &waiter(ticket(i), 0)).await {
            Admission::Denied(d) => assert_eq!(d.place, Some(k as u64), "place of arrival {k}"),
            Admission::Granted(r) => panic!("waiter {i} passed the request in flight: {r:?}"),
        }
    }
    let mut served = Vec::new();
    for (round, order) in asks.iter().enumerate() {
        w.clock.advance_ms(gaps[round]);
        w.settle(&held).await;
        let mut admitted = None;
        for &k in order {
            let Some(&i) = arrivals.get(k).filter(|i| !served.contains(*i)) else {
                continue;
            };
            if let Some(r) = granted(w.admit(k, &waiter(ticket(i), 0)).await) {
                admitted = Some((i, r));
                break;
            }
        }
        let (i, r) = admitted.expect("someone is admitted once the slot frees");
        served.push(i);
        held = r;
    }
    w.settle(&held).await;
    assert_eq!(served, arrivals, "served in arrival order");
}

/// A request arriving while others wait is refused by the line (not by a limit), though the
/// limit has room; once the line is empty, a request is admitted at once.
async fn a_newcomer_never_passes_a_waiter_and_a_request_nobody_waits_before_is_served(
    store: Store,
) {
    let w = Instances::new(store, &one_model("concurrency: 2"), 2).await;
    let a = granted(w.admit(0, &waiter(1, 0)).await).expect("room");
    let b = granted(w.admit(1, &waiter(2, 0)).await).expect("room");
    assert!(granted(w.admit(0, &waiter(3, 0)).await).is_none());
    w.clock.advance_ms(5);
    w.settle(&a).await;
    // Room for one, but ticket 3 waits for it: a newcomer without a ticket is refused by the
    // line, on another instance too.
    match w.admit(1, &Need::new(1, Duration::from_secs(600))).await {
        Admission::Denied(d) => {
            assert_eq!(d.refusals[0].limit, LimitKind::Line);
            assert_eq!(d.place, None, "a request without a ticket joins no line");
        }
        Admission::Granted(r) => panic!("the newcomer passed the waiter: {r:?}"),
    }
    let c = granted(w.admit(0, &waiter(3, 0)).await).expect("the first in line is served");
    w.settle(&b).await;
    w.settle(&c).await;
    // Nobody waits: served at once.
    assert!(granted(w.admit(1, &Need::new(1, Duration::from_secs(600))).await).is_some());
}

/// Concurrency 10, batch share 80 % (8 in flight), interactive requests holding 9 in flight
/// for a second each, a new one every 1/9 s: without the line a batch request never fits. With
/// it, once its handicap (5 s) has passed, arriving interactive requests stand behind it, the
/// calls in flight end, and it is served within a second of that.
async fn a_batch_waiter_is_served_within_its_handicap_under_interactive_load_at_90_percent(
    store: Store,
) {
    let w = Instances::new(store, &one_model("concurrency: 10"), 2).await;
    const HANDICAP_MS: u64 = 5_000;
    let mut batch = waiter(1, HANDICAP_MS);
    batch.share_percent = 80;
    // Calls in flight: (when they end, their reservation).
    let mut flying: Vec<(u64, Reservation)> = Vec::new();
    let mut waiting: Vec<u64> = Vec::new();
    let (mut next_ticket, mut served_at, mut batch_from) = (100u64, None, None);
    const WARM_UP: u64 = 20;
    for tick in 0..200u64 {
        let now = w.clock.now_ms();
        // Calls that ended settle.
        let (ended, left): (Vec<_>, Vec<_>) = flying.into_iter().partition(|(end, _)| *end <= now);
        flying = left;
        for (_, r) in ended {
            w.settle(&r).await;
        }
        // One interactive arrival per tick (every 111 ms: 9 per second, each a second long).
        waiting.push(next_ticket);
        next_ticket += 1;
        let mut still = Vec::new();
        for t in waiting {
            match granted(w.admit(t as usize, &waiter(t, 0)).await) {
                Some(r) => flying.push((now + 1_000, r)),
                None => still.push(t),
            }
        }
        waiting = still;
        // The batch request arrives once the load is steady (9 in flight), and asks each tick.
        let arrived = *batch_from.get_or_insert(now);
        if tick >= WARM_UP
            && served_at.is_none()
            && let Some(r) = granted(w.admit(tick as usize, &batch).await)
        {
            served_at = Some(now - arrived);
            flying.push((now + 1_000, r));
        }
        if tick < WARM_UP {
            batch_from = None;
        }
        w.clock.advance_ms(111);
    }
    let served_at = served_at.expect("the batch request is served");
    assert!(
        (HANDICAP_MS..=HANDICAP_MS + 1_200).contains(&served_at),
        "served after {served_at} ms, not within its handicap and a call's length"
    );
    // The interactive load was not starved either: it kept its 90 %.
    assert!(
        waiting.len() < 20,
        "{} interactive requests left waiting",
        waiting.len()
    );
}

/// The first in line never asks again (its instance died): the next waits behind it until its
/// ticket's TTL ends, then is served.
async fn a_dead_waiters_ticket_expires_and_the_next_one_is_served(store: Store) {
    let w = Instances::new(store, &one_model("concurrency: 1"), 2).await;
    let held = granted(w.admit(0, &waiter(1, 0)).await).expect("room");
    assert!(
        granted(w.admit(0, &waiter(2, 0)).await).is_none(),
        "dead-to-be joins first"
    );
    w.clock.advance_ms(1);
    assert!(granted(w.admit(1, &waiter(3, 0)).await).is_none());
    w.settle(&held).await;
    // Ticket 2 is first and still live: 3 waits.
    w.clock.advance_ms(TICKET_TTL_MS - 2);
    assert!(
        granted(w.admit(1, &waiter(3, 0)).await).is_none(),
        "2 still first"
    );
    w.clock.advance_ms(2);
    let r = granted(w.admit(1, &waiter(3, 0)).await).expect("2's ticket expired; 3 is served");
    w.settle(&r).await;
}

/// A waiter that gives up leaves at once: the next in line is served without waiting for the
/// TTL, and is woken.
async fn a_ticket_that_leaves_frees_the_line_at_once_and_wakes_the_next(store: Store) {
    let w = Instances::new(store, &one_model("concurrency: 1"), 2).await;
    let mut wakes = subscribed(&w, store).await;
    let held = granted(w.admit(0, &waiter(1, 0)).await).expect("room");
    assert!(granted(w.admit(0, &waiter(2, 0)).await).is_none());
    assert!(granted(w.admit(1, &waiter(3, 0)).await).is_none());
    w.settle(&held).await;
    // The settlement woke 2, first in line.
    assert_eq!(next_wake(&mut wakes).await, 2);
    w.ledgers[0].leave(2, &[w.d]).await.expect("store answers");
    assert_eq!(next_wake(&mut wakes).await, 3, "leaving woke the next");
    let r = granted(w.admit(1, &waiter(3, 0)).await).expect("3 is first now");
    w.settle(&r).await;
}

/// A settlement wakes the first in line, and an admission from the line wakes the next (there
/// may be room for it too).
async fn a_settlement_wakes_the_first_in_line(store: Store) {
    let w = Instances::new(store, &one_model("concurrency: 2"), 2).await;
    let mut wakes = subscribed(&w, store).await;
    let a = granted(w.admit(0, &Need::new(1, Duration::from_secs(600))).await).expect("room");
    let b = granted(w.admit(0, &Need::new(1, Duration::from_secs(600))).await).expect("room");
    for t in [7, 8, 9] {
        assert!(granted(w.admit(1, &waiter(t, 0)).await).is_none());
    }
    w.settle(&a).await;
    w.settle(&b).await;
    // Both settlements woke 7, first in line.
    assert_eq!(next_wake(&mut wakes).await, 7);
    assert_eq!(next_wake(&mut wakes).await, 7);
    let r7 = granted(w.admit(1, &waiter(7, 0)).await).expect("7 is served");
    assert_eq!(next_wake(&mut wakes).await, 8, "7's admission woke 8");
    let r8 = granted(w.admit(0, &waiter(8, 0)).await).expect("8 is served");
    assert_eq!(next_wake(&mut wakes).await, 9);
    w.settle(&r7).await;
    w.settle(&r8).await;
}

/// Instance 1's wake-ups, once its store listens: the Redis store's come through a
/// subscription made with the first receiver, which says [`EVERYONE`] when it is made.
async fn subscribed(w: &Instances, store: Store) -> tokio::sync::broadcast::Receiver<u64> {
    let mut wakes = w.ledgers[1].wakes().expect("every store sends wake-ups");
    if matches!(store, Store::Redis | Store::Cluster) {
        assert_eq!(next_wake(&mut wakes).await, EVERYONE);
    }
    wakes
}

/// The next wake-up.
async fn next_wake(wakes: &mut tokio::sync::broadcast::Receiver<u64>) -> u64 {
    tokio::time::timeout(Duration::from_secs(10), wakes.recv())
        .await
        .expect("a wake-up within 10 s")
        .expect("the wake-up channel is open")
}

/// A snapshot gives a line's tickets, the batch ones among them, and how long ago the first
/// one's place began.
async fn a_snapshot_counts_a_lines_tickets_by_class(store: Store) {
    let w = Instances::new(store, &one_model("concurrency: 1"), 2).await;
    let held = granted(w.admit(0, &waiter(1, 0)).await).expect("room");
    assert!(granted(w.admit(0, &waiter(2, 0)).await).is_none());
    let mut batch = waiter(3, 5_000);
    batch.line = batch
        .line
        .map(|t| router_core::ledger::Ticket { batch: true, ..t });
    assert!(granted(w.admit(1, &batch).await).is_none());
    w.clock.advance_ms(1_500);
    let line = w.ledgers[1].snapshot(&[w.d]).await.expect("snapshot")[0].line;
    assert_eq!((line.waiting, line.batch), (2, 1));
    assert_eq!(line.oldest_wait, Some(Duration::from_millis(1_500)));
    w.settle(&held).await;
}
