//! Redis only: an admission or a block call retried after its reply was lost counts once, an
//! admission whose caller stopped waiting for it (or that got no answer) is voided, every
//! admission that adds a slot keeps the slots zset alive at least as long as the slot, the URL's
//! user, password and database are used (the password never shown), and scripts Redis lost are
//! loaded again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use llmroute_tests::{TestRedis, redis_server};
use redis::aio::MultiplexedConnection;
use router_core::clock::{Clock, ManualClock, SystemClock};
use router_core::config::{DeploymentId, LedgerSettings, OnError, Registry};
use router_core::ledger::{
    ActualUsage, Admission, Ledger, LedgerError, Mode, Need, Observation, RedisStore,
    RedisStoreOptions, Reservation, ResilientStore,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::support::{
    T0, an_admission_dropped_unanswered_is_voided, connect, connect_to, copy_gated, one_model,
    read, script_calls, scripts_missing_on, write_all,
};

/// Admits `need` on `m`: the reservation, or a failure saying `error` (the call failed) or
/// `refused` (it was refused).
async fn granted(
    store: &dyn Ledger,
    need: &Need,
    m: DeploymentId,
    error: &str,
    refused: &str,
) -> Reservation {
    match store.admit(need, &[m]).await.expect(error) {
        Admission::Granted(r) => r,
        Admission::Denied(_) => panic!("{refused}"),
    }
}

/// A registry of one model `m` with `limits`, and `m`.
fn one_deployment(limits: &str) -> (Registry, DeploymentId) {
    let registry = Registry::from_yaml_str(&one_model(limits), "test.yaml").expect("valid");
    let m = registry.resolve("m")[0];
    (registry, m)
}

/// A plain connection to the test server, to look at or change keys by hand.
async fn by_hand(server: &TestRedis) -> MultiplexedConnection {
    redis::Client::open(server.url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// A TCP proxy in front of Redis that, when armed, lets the next script call (`EVALSHA`) reach
/// the server, then drops the server's reply and closes the connection: Redis ran the script,
/// the client never hears of it. With `then_refuse` set too, it also stops listening then, so
/// that reconnecting is refused. While `cut_beats` is above zero, a heartbeat (a script call
/// naming the instances key) is cut off instead, and the count goes down: not sent on, and its
/// connection closed.
struct ReplyDropper {
    addr: SocketAddr,
    armed: Arc<AtomicBool>,
    then_refuse: Arc<AtomicBool>,
    cut_beats: Arc<AtomicUsize>,
}

impl ReplyDropper {
    async fn start(upstream: SocketAddr) -> Self {
        Self::start_at("127.0.0.1:0".parse().expect("an address"), upstream).await
    }

    /// A proxy listening at `addr` (port 0: any free port).
    async fn start_at(addr: SocketAddr, upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let armed = Arc::new(AtomicBool::new(false));
        let then_refuse = Arc::new(AtomicBool::new(false));
        let cut_beats = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (flag, refuse, cut) = (armed.clone(), then_refuse.clone(), cut_beats.clone());
        let (stopping, done) = (stop.clone(), stopped.clone());
        tokio::spawn(async move {
            loop {
                let client = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((client, _)) => client,
                        Err(_) => return,
                    },
                    () = stopping.notified() => {
                        drop(listener);
                        done.notify_one();
                        return;
                    }
                };
                let server = TcpStream::connect(upstream).await.expect("upstream");
                let dropped = Dropped {
                    armed: flag.clone(),
                    then_refuse: refuse.clone(),
                    cut_beats: cut.clone(),
                    stop: stopping.clone(),
                    stopped: done.clone(),
                };
                tokio::spawn(pipe(client, server, dropped));
            }
        });
        Self {
            addr,
            armed,
            then_refuse,
            cut_beats,
        }
    }
}

/// What a proxied connection does with an armed call's reply.
struct Dropped {
    armed: Arc<AtomicBool>,
    then_refuse: Arc<AtomicBool>,
    cut_beats: Arc<AtomicUsize>,
    /// Tells the proxy to stop listening, and hears that it has.
    stop: Arc<Notify>,
    stopped: Arc<Notify>,
}

/// Forwards both ways; an armed script call's reply is swallowed and the connection closed, and
/// so is a heartbeat while beats are cut, before it reaches the server.
async fn pipe(client: TcpStream, server: TcpStream, dropped: Dropped) {
    let Dropped {
        armed,
        then_refuse,
        cut_beats,
        stop,
        stopped,
    } = dropped;
    let refusing = Arc::new(AtomicBool::new(false));
    let refuses = refusing.clone();
    let (client_rd, client_wr) = client.into_split();
    let (server_rd, server_wr) = server.into_split();
    let dropping = Arc::new(AtomicBool::new(false));
    let marked = dropping.clone();
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match read(&client_rd, &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let call = buf[..n]
                .windows(7)
                .any(|w| w.eq_ignore_ascii_case(b"EVALSHA"));
            let beat = call && buf[..n].windows(11).any(|w| w == b":instances\r");
            let cut = |left: usize| left.checked_sub(1);
            if beat
                && cut_beats
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, cut)
                    .is_ok()
            {
                return;
            }
            if call && armed.swap(false, Ordering::SeqCst) {
                if then_refuse.swap(false, Ordering::SeqCst) {
                    refuses.store(true, Ordering::SeqCst);
                    stop.notify_one();
                }
                marked.store(true, Ordering::SeqCst);
            }
            if write_all(&server_wr, &buf[..n]).await.is_err() {
                return;
            }
        }
    });
    copy_gated(&server_rd, &client_wr, || {
        let (dropping, refusing, stopped) = (dropping.clone(), refusing.clone(), stopped.clone());
        async move {
            if !dropping.load(Ordering::SeqCst) {
                return true;
            }
            // Closed once nothing listens any more, so that reconnecting is refused.
            if refusing.load(Ordering::SeqCst) {
                stopped.notified().await;
            }
            false
        }
    })
    .await;
    upstream.abort();
}

#[tokio::test]
async fn an_admission_whose_reply_was_lost_is_retried_and_counted_once() {
    let (registry, m) = one_deployment("rpm: 100, tpm: 100000, concurrency: 10");
    let server = redis_server();
    let proxy = ReplyDropper::start(address_of(&server)).await;
    let clock = ManualClock::new(T0);
    let url = format!("redis://{}/0", proxy.addr);
    let store = connect_to(&url, &server.namespace, &registry, Some(clock.clone())).await;
    // A first admission, answered; the armed one below is the second.
    let _warm = granted(
        &store,
        &Need::new(1, Duration::from_secs(60)),
        m,
        "admit",
        "a fresh deployment refused",
    )
    .await;
    let need = Need::new(100, Duration::from_secs(60));
    proxy.armed.store(true, Ordering::SeqCst);
    let r = granted(
        &store,
        &need,
        m,
        "the retry answers",
        "a roomy deployment refused",
    )
    .await;
    assert!(!proxy.armed.load(Ordering::SeqCst), "the reply was dropped");
    let u = store.snapshot(&[m]).await.expect("snapshot")[0].usage;
    assert_eq!((u.requests, u.tokens, u.in_flight), (2, 101, 2));
    // Asked again, the same reservation.
    let again = granted(&store, &need, m, "admit", "refused").await;
    assert_eq!(again, r);
    assert_eq!(
        store.snapshot(&[m]).await.expect("snapshot")[0]
            .usage
            .requests,
        2
    );
}

/// A block call (lua/lease.lua) retried after its reply was lost answers as its first run did:
/// the block it grants and the corrections it carries count once. Without the call's record, the
/// retry would grant a second block and give back twice.
#[tokio::test]
async fn a_block_call_whose_reply_was_lost_is_retried_and_counted_once() {
    let server = redis_server();
    let proxy = ReplyDropper::start(address_of(&server)).await;
    let (leasing, reader, m) = one_block_used(&server, &proxy, "rpm: 100, tpm: 100000").await;
    let need = Need::new(10, Duration::from_secs(60));
    let usage = || async {
        let u = reader.snapshot(&[m]).await.expect("snapshot")[0].usage;
        (u.requests, u.tokens)
    };
    // The next request asks for a second block, and that call hands back the 990 tokens the
    // first did not use. Redis runs it; its reply is lost and the connection closed.
    proxy.armed.store(true, Ordering::SeqCst);
    let _third = granted(&leasing, &need, m, "the retry answers", "refused").await;
    assert!(!proxy.armed.load(Ordering::SeqCst), "the reply was dropped");
    assert_eq!(usage().await, (4, 1000 + 1000 - 990), "counted once");
    // The call's record goes with the windows it counted in.
    let mut conn = by_hand(&server).await;
    let records = keys(
        &mut conn,
        &format!("llmroute:{{{}}}:v3:c:*", server.namespace),
    )
    .await;
    assert_eq!(records.len(), 2, "one per block call: {records:?}");
    for record in &records {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(record)
            .query_async(&mut conn)
            .await
            .expect("pttl");
        assert!((1..=62_000).contains(&ttl), "{record}: {ttl} ms");
    }
}

/// A block call whose reply was lost, and whose retry found the connection refused, may have
/// run: it is asked again once Redis answers, and what it carried counts once. Taken for not
/// run, the 990 tokens it gave back would be given back again.
#[tokio::test]
async fn a_block_call_whose_retry_was_refused_is_asked_again_and_counted_once() {
    let server = redis_server();
    let upstream = address_of(&server);
    let proxy = ReplyDropper::start(upstream).await;
    // Of 3 requests a minute.
    let (leasing, reader, m) = one_block_used(&server, &proxy, "rpm: 3, tpm: 100000").await;
    let need = Need::new(10, Duration::from_secs(60));
    let usage = || async {
        let u = reader.snapshot(&[m]).await.expect("snapshot")[0].usage;
        (u.requests, u.tokens)
    };
    // Another instance takes the last request of the minute (10 tokens).
    let _other = granted(&reader, &need, m, "admit", "one request was left").await;
    // The next request's block call hands back the 990 tokens the first did not use, and is
    // refused a block (no requests left). Redis runs it; its reply is lost, and the proxy stops
    // listening.
    proxy.then_refuse.store(true, Ordering::SeqCst);
    proxy.armed.store(true, Ordering::SeqCst);
    let third = leasing.admit(&need, &[m]).await;
    assert!(
        third.as_ref().is_err_and(LedgerError::maybe_applied),
        "{third:?}"
    );
    assert_eq!(usage().await, (3, 20), "run once");
    // Redis can be reached again: the call is asked again, answers as it ran, and nothing
    // more is taken off.
    let _again = ReplyDropper::start_at(proxy.addr, upstream).await;
    leasing.heartbeat_now().await;
    leasing.heartbeat_now().await;
    assert_eq!(leasing.status().mode, Mode::Shared);
    assert_eq!(usage().await, (3, 20), "what the three requests use");
}

/// A closing instance whose heartbeats get no answer sends what its block owes with a call of its
/// own (lua/unlease.lua). When the store is in another epoch by then (here Redis came back empty
/// and another instance counts in it), that call is refused: nothing is taken off windows that
/// never held the block.
#[tokio::test]
async fn a_closing_blocks_give_back_is_refused_by_a_store_in_another_epoch() {
    let mut server = redis_server();
    let proxy = ReplyDropper::start(address_of(&server)).await;
    // Redis and both stores on one clock: every count falls in the block's second.
    let clock = ManualClock::new(T0);
    let (mut registry, m) = leasing_registry("rpm: 100, tpm: 100000");
    // A beat without an answer takes the instance local; beats then carry nothing it owes.
    registry.ledger.on_error = OnError::Local;
    let leasing = leasing_over(&server, &proxy, &registry, Some(clock.clone())).await;
    assert_eq!(leasing.status().mode, Mode::Shared);
    let need = Need::new(10, Duration::from_secs(60));
    use_one(&leasing, &need, m).await;
    let before_restart = connect(&server, &registry, Some(clock.clone())).await;
    assert_eq!(
        requests_and_tokens(&before_restart, m).await,
        (2, 1000),
        "the block, whole"
    );
    proxy.cut_beats.store(usize::MAX, Ordering::SeqCst);
    leasing.heartbeat_now().await;
    assert_eq!(leasing.status().mode, Mode::Local);
    // Redis comes back empty, and another instance admits one request in the block's second.
    server.restart();
    let other = connect(&server, &registry, Some(clock.clone())).await;
    let _one = granted(&other, &need, m, "admit", "an empty store refused").await;
    assert_eq!(requests_and_tokens(&other, m).await, (1, 10));
    // Closing: its beat is cut off, so the block's 1 request and 995 tokens go back on their
    // own, to a store in another epoch.
    let calls = script_calls(&server).await;
    leasing.close().await.expect("close");
    assert!(
        script_calls(&server).await > calls,
        "the give-back reached Redis"
    );
    assert_eq!(
        requests_and_tokens(&other, m).await,
        (1, 10),
        "nothing taken off"
    );
    assert_eq!(leasing.status().mode, Mode::Local);
}

/// The heartbeat that carries what a closing instance's blocks owe may get no answer; it is sent
/// once more, under its number, rather than its corrections left out.
#[tokio::test]
async fn a_closing_beat_without_an_answer_is_sent_once_more() {
    let t = one_used().await;
    assert_eq!(t.windows().await, (2, 1000), "the block");
    // The beat and the store's own retry of it.
    t.proxy.cut_beats.store(2, Ordering::SeqCst);
    t.leasing.close().await.expect("close");
    assert_eq!(t.proxy.cut_beats.load(Ordering::SeqCst), 0, "both cut");
    assert_eq!(
        t.windows().await,
        (1, 5),
        "the unused request and 995 tokens given back"
    );
}

/// A close whose caller went away while its beat was out keeps what that beat carried: the
/// next close sends it under its number. (Dropped before redis-rs wrote it, the beat is not
/// sent at all.)
#[tokio::test]
async fn a_close_dropped_while_its_beat_is_out_keeps_what_the_beat_carried() {
    let t = one_used().await;
    assert!(
        t.leasing.close().now_or_never().is_none(),
        "the close waits for its beat's answer"
    );
    assert_eq!(t.windows().await, (2, 1000), "the block");
    t.leasing.close().await.expect("close");
    assert_eq!(
        t.windows().await,
        (1, 5),
        "the unused request and 995 tokens given back"
    );
}

/// An instance, through a proxy, that used one request (settled at 5 tokens) of its block of
/// 2 requests and 1,000 tokens on `m`; and a reader of the windows.
struct OneUsed {
    proxy: ReplyDropper,
    leasing: ResilientStore,
    m: DeploymentId,
    reader: RedisStore,
    /// Last, so that it stops after the rest.
    _server: TestRedis,
}

impl OneUsed {
    /// What the windows of `m` hold: requests and tokens.
    async fn windows(&self) -> (u64, u64) {
        requests_and_tokens(&self.reader, self.m).await
    }
}

async fn one_used() -> OneUsed {
    let server = redis_server();
    let proxy = ReplyDropper::start(address_of(&server)).await;
    let limits = "rpm: 100, tpm: 100000";
    let (leasing, m) = leasing_through(&server, &proxy, limits).await;
    use_one(&leasing, &Need::new(10, Duration::from_secs(60)), m).await;
    let reader = connect(&server, &leasing_registry(limits).0, None).await;
    OneUsed {
        proxy,
        leasing,
        m,
        reader,
        _server: server,
    }
}

/// Admits a request of `need` on `m`, which has room, and settles it at 5 tokens.
async fn use_one(leasing: &ResilientStore, need: &Need, m: DeploymentId) {
    let r = granted(leasing, need, m, "admit", "a deployment with room refused").await;
    let settled = leasing.settle(&r, ActualUsage::tokens(5)).await;
    assert!(settled.expect("settle"));
}

/// What `store` reads in `m`'s windows: requests and tokens.
async fn requests_and_tokens(store: &RedisStore, m: DeploymentId) -> (u64, u64) {
    let u = store.snapshot(&[m]).await.expect("snapshot")[0].usage;
    (u.requests, u.tokens)
}

/// A registry of one model `m` with `limits`, leasing blocks of 2 requests and 1,000 tokens.
fn leasing_registry(limits: &str) -> (Registry, DeploymentId) {
    let mut registry = Registry::from_yaml_str(
        &one_model(limits).replace(
            "        limits:",
            "        lease: { requests: 2, tokens: 1000, secs: 60 }\n        limits:",
        ),
        "test.yaml",
    )
    .expect("valid");
    registry.ledger = LedgerSettings {
        timeout: Duration::from_millis(500),
        on_error: OnError::Closed,
        heartbeat: Duration::from_secs(3600),
    };
    let m = registry.resolve("m")[0];
    (registry, m)
}

/// An instance leasing (see [`leasing_registry`]) through `proxy`, that beats by hand and has
/// beaten once.
async fn leasing_through(
    server: &TestRedis,
    proxy: &ReplyDropper,
    limits: &str,
) -> (ResilientStore, DeploymentId) {
    let (registry, m) = leasing_registry(limits);
    (leasing_over(server, proxy, &registry, None).await, m)
}

/// An instance of `registry` through `proxy`, on `clock` (Redis's too) or the system's, that
/// beats by hand and has beaten once.
async fn leasing_over(
    server: &TestRedis,
    proxy: &ReplyDropper,
    registry: &Registry,
    clock: Option<ManualClock>,
) -> ResilientStore {
    let options = RedisStoreOptions {
        namespace: server.namespace.clone(),
        clock: clock.clone().map(|c| Arc::new(c) as Arc<dyn Clock>),
        response_timeout: registry.ledger.timeout,
        ..RedisStoreOptions::default()
    };
    let url = format!("redis://{}/0", proxy.addr);
    let shared = RedisStore::connect(&url, registry, options)
        .await
        .expect("connect");
    let own: Arc<dyn Clock> = match clock {
        Some(c) => Arc::new(c),
        None => Arc::new(SystemClock),
    };
    let leasing = ResilientStore::new(shared, registry, own).await;
    leasing.heartbeat_now().await;
    leasing
}

/// An instance leasing through `proxy` (see [`leasing_through`]) whose first block admitted two
/// requests that used 5 tokens each; a plain store on the same Redis, to read the windows; and
/// the deployment.
async fn one_block_used(
    server: &TestRedis,
    proxy: &ReplyDropper,
    limits: &str,
) -> (ResilientStore, RedisStore, DeploymentId) {
    let (leasing, m) = leasing_through(server, proxy, limits).await;
    let need = Need::new(10, Duration::from_secs(60));
    for _ in 0..2 {
        use_one(&leasing, &need, m).await;
    }
    let reader = connect(server, &leasing_registry(limits).0, None).await;
    let u = reader.snapshot(&[m]).await.expect("snapshot")[0].usage;
    assert_eq!((u.requests, u.tokens), (2, 1000), "one block");
    (leasing, reader, m)
}

/// The host and port of a test server's URL.
fn address_of(server: &TestRedis) -> SocketAddr {
    server
        .url
        .trim_start_matches("redis://")
        .trim_end_matches("/0")
        .parse()
        .expect("a host:port URL")
}

#[tokio::test]
async fn an_admission_dropped_before_its_answer_is_voided_and_holds_no_slot() {
    let (registry, m) = one_deployment("rpm: 100, tpm: 100000, concurrency: 10");
    let server = redis_server();
    let clock = ManualClock::new(T0);
    let store = connect(&server, &registry, Some(clock.clone())).await;
    let observer = connect(&server, &registry, Some(clock)).await;
    an_admission_dropped_unanswered_is_voided(&store, &observer, m).await;
}

#[tokio::test]
async fn an_admission_that_timed_out_is_voided_when_redis_runs_it_late() {
    let (registry, m) = one_deployment("rpm: 100, tpm: 100000, concurrency: 10");
    let server = redis_server();
    let options = RedisStoreOptions {
        namespace: server.namespace.clone(),
        response_timeout: Duration::from_millis(300),
        ..RedisStoreOptions::default()
    };
    let store = RedisStore::connect(&server.url, &registry, options)
        .await
        .expect("connect");
    let observer = connect(&server, &registry, None).await;
    let ttl = Duration::from_secs(600);
    let _kept = granted(&store, &Need::new(1, ttl), m, "admit", "refused").await;
    // Redis, frozen, runs the admission only once the store has given up on it.
    server.pause();
    let late = store.admit(&Need::new(100, ttl), &[m]).await;
    server.resume();
    let err = late.expect_err("no answer from a frozen Redis");
    assert!(err.maybe_applied(), "{err}");
    let mut u = observer.snapshot(&[m]).await.expect("snapshot")[0].usage;
    for _ in 0..200 {
        if u.in_flight == 1 {
            break;
        }
        u = observer.snapshot(&[m]).await.expect("snapshot")[0].usage;
    }
    assert_eq!(
        (u.requests, u.tokens, u.in_flight),
        (1, 1, 1),
        "the admission that timed out still counts"
    );
}

#[tokio::test]
async fn every_admission_that_adds_a_slot_keeps_the_slots_zset_alive() {
    let (registry, m) = one_deployment("tpm: 100000, concurrency: 10");
    let server = redis_server();
    let clock = ManualClock::new(T0);
    let store = connect(&server, &registry, Some(clock.clone())).await;
    let hour = Duration::from_secs(3600);
    let _first = granted(&store, &Need::new(10, hour), m, "admit", "refused").await;
    let mut conn = by_hand(&server).await;
    let zset = format!("llmroute:{{{}}}:v3:s:d:p/m", server.namespace);
    // Most of the zset's life has passed (in Redis's time; the ledger's clock is manual).
    let _: () = redis::cmd("PEXPIRE")
        .arg(&zset)
        .arg(1_000)
        .query_async(&mut conn)
        .await
        .expect("pexpire");
    // A second later, a provider's report pre-fills the new bucket (a reset over 61 s away)...
    clock.advance_ms(1_000);
    let obs = Observation {
        requests: None,
        tokens: Some((50_000, Duration::from_secs(360))),
        ..Observation::default()
    };
    store.observe(m, obs).await.expect("observe");
    // ...so the next admission is not the bucket's first: it must still refresh the TTL.
    let _second = granted(&store, &Need::new(10, hour), m, "admit", "refused").await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&zset)
        .query_async(&mut conn)
        .await
        .expect("pttl");
    assert!(
        ttl >= hour.as_millis() as i64,
        "slots zset TTL {ttl} ms < the slot's hour"
    );
}

#[tokio::test]
async fn a_reservation_key_in_the_earlier_format_still_answers_a_repeated_admission() {
    let (registry, m) = one_deployment("rpm: 100, tpm: 100000, concurrency: 10");
    let server = redis_server();
    let clock = ManualClock::new(T0);
    let store = connect(&server, &registry, Some(clock.clone())).await;
    let need = Need::new(100, Duration::from_secs(60));
    let r = granted(&store, &need, m, "admit", "a fresh deployment refused").await;
    // Instances of earlier versions stored the bare bucket; a fleet upgraded one instance at a
    // time holds both forms.
    let mut conn = by_hand(&server).await;
    let key = format!("llmroute:{{{}}}:v3:r:{}", server.namespace, need.id);
    let stored: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("get");
    assert_eq!(stored, format!("r{}", r.bucket));
    let () = redis::cmd("SET")
        .arg(&key)
        .arg(r.bucket)
        .arg("KEEPTTL")
        .query_async(&mut conn)
        .await
        .expect("set");
    let again = granted(&store, &need, m, "admit", "refused").await;
    assert_eq!(again, r);
    let u = store.snapshot(&[m]).await.expect("snapshot")[0].usage;
    assert_eq!((u.requests, u.tokens, u.in_flight), (1, 100, 1));
}

/// The keys matching `pattern` in the connection's database.
async fn keys(conn: &mut MultiplexedConnection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query_async(conn)
        .await
        .expect("KEYS")
}

/// The store sends the URL's credentials and database on every connection it opens, and keeps
/// the password out of what it reports when they are wrong.
#[tokio::test]
async fn the_urls_user_password_and_database_are_used_and_the_password_never_shown() {
    let (registry, m) = one_deployment("rpm: 100, tpm: 100000, concurrency: 10");
    let server = redis_server();
    assert!(
        server.owned,
        "this test changes Redis's users: it needs a redis-server of its own (put redis-server on PATH)"
    );
    let mut admin = by_hand(&server).await;
    let password = "planted-pw-4b1d9";
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("on")
        .arg(format!(">{password}"))
        .arg("~*")
        .arg("+@all")
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("off")
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER default off");
    let base = server.url.trim_end_matches("/0").replace("redis://", "");
    let url = format!("redis://app:{password}@{base}/5");
    let store = connect_to(&url, &server.namespace, &registry, None).await;
    let _admitted = granted(
        &store,
        &Need::new(1, Duration::from_secs(60)),
        m,
        "admit with the URL's user",
        "a fresh deployment refused",
    )
    .await;
    // The keys are in database 5, not 0.
    let mut in_db = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect as app");
    let pattern = format!("llmroute:{{{}}}:*", server.namespace);
    let keys5 = keys(&mut in_db, &pattern).await;
    assert!(!keys5.is_empty(), "nothing written to database 5");
    let _: () = redis::cmd("SELECT")
        .arg(0)
        .query_async(&mut in_db)
        .await
        .expect("SELECT 0");
    let keys0 = keys(&mut in_db, &pattern).await;
    assert!(keys0.is_empty(), "written to database 0: {keys0:?}");

    let wrong = format!("redis://app:wrong-{password}@{base}/5");
    let options = router_core::ledger::RedisStoreOptions {
        namespace: server.namespace.clone(),
        ..Default::default()
    };
    let err = router_core::ledger::RedisStore::connect(&wrong, &registry, options)
        .await
        .expect_err("a wrong password is refused");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(password), "{shown}");
    assert!(shown.contains("authentication failed"), "{shown}");
    assert!(shown.contains("redis://app:***@"), "{shown}");
}

/// A store loads every script when it connects, so that no request's call meets NOSCRIPT and
/// waits for a script to be sent and compiled.
#[tokio::test]
async fn every_script_is_loaded_when_a_store_connects_and_no_call_meets_noscript() {
    let (registry, m) = one_deployment("rpm: 100, tpm: 100000, concurrency: 10");
    let server = redis_server();
    assert!(
        server.owned,
        "this test reads what a new server holds: it needs its own"
    );
    assert_eq!(scripts_missing_on(&server.url).len(), 13, "a new server");
    let store = connect(&server, &registry, None).await;
    assert_eq!(scripts_missing_on(&server.url), Vec::<&str>::new());
    let r = granted(
        &store,
        &Need::new(1, Duration::from_secs(60)),
        m,
        "admit",
        "refused",
    )
    .await;
    assert!(
        store
            .settle(&r, ActualUsage::tokens(1))
            .await
            .expect("settle")
    );
    let errors: String = redis::cmd("INFO")
        .arg("errorstats")
        .query_async(&mut by_hand(&server).await)
        .await
        .expect("INFO");
    assert!(!errors.contains("NOSCRIPT"), "{errors}");
}

/// A store connected lazily (as an instance that may start while Redis is away) loads them
/// after the resilient store's first heartbeat.
#[tokio::test]
async fn a_resilient_store_loads_every_script_when_it_starts() {
    let (mut registry, _) = one_deployment("rpm: 100, tpm: 100000");
    // Room for a loaded machine: the loads get `ledger.timeout_ms`.
    registry.ledger.timeout = Duration::from_secs(5);
    let server = redis_server();
    assert!(
        server.owned,
        "this test reads what a new server holds: it needs its own"
    );
    let options = RedisStoreOptions {
        namespace: server.namespace.clone(),
        lazy: true,
        ..RedisStoreOptions::default()
    };
    let shared = RedisStore::connect(&server.url, &registry, options)
        .await
        .expect("connect");
    assert_eq!(
        scripts_missing_on(&server.url).len(),
        13,
        "lazy: nothing sent"
    );
    let store = ResilientStore::new(shared, &registry, Arc::new(SystemClock)).await;
    assert_eq!(scripts_missing_on(&server.url), Vec::<&str>::new());
    store.close().await.expect("close");
}

/// A Redis that lost its scripts (SCRIPT FLUSH, a restart) is sent them again by the next call.
#[tokio::test]
async fn scripts_flushed_from_redis_are_loaded_again() {
    let (registry, m) = one_deployment("rpm: 100, tpm: 100000, concurrency: 10");
    let server = redis_server();
    let store = connect(&server, &registry, None).await;
    let need = || Need::new(1, Duration::from_secs(60));
    let _first = granted(&store, &need(), m, "admit", "refused").await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut by_hand(&server).await)
        .await
        .expect("SCRIPT FLUSH");
    let _second = granted(&store, &need(), m, "admit after the flush", "refused").await;
    let u = store.snapshot(&[m]).await.expect("snapshot")[0].usage;
    assert_eq!(u.requests, 2);
}
