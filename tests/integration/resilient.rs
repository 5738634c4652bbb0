//! The shared ledger's failure modes (`ledger.on_error`), against a real Redis the tests kill,
//! restart empty and freeze: each instance keeps within its share while Redis is away, and what
//! it admitted meanwhile (or, after a restart, before) is in the shared windows once it is back.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use llmroute_tests::{TestRedis, redis_server};
use router_core::clock::{Clock, ManualClock, SystemClock};
use router_core::config::{DeploymentId, LedgerSettings, OnError, Registry};
use router_core::ledger::{
    ActualUsage, Admission, Ledger, LedgerError, Mode, Need, Observation, RedisStore,
    RedisStoreOptions, Reservation, ResilientStore, Settlement,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::support::{connect_to, copy_gated, one_model, read, script_calls, write_all};

const M: DeploymentId = DeploymentId(0);

fn registry() -> Registry {
    Registry::from_yaml_str(&one_model("rpm: 10"), "test.yaml").unwrap()
}

/// One instance: a Redis store connected lazily, with `on_error`. Its background heartbeat is an
/// hour apart: the tests beat by hand. The timeout leaves a debug build on a busy machine room to
/// reconnect and load the scripts into a restarted Redis within one call.
async fn instance(redis: &TestRedis, on_error: OnError) -> ResilientStore {
    by_hand(redis, registry(), on_error).await
}

/// An instance over `registry` with `on_error`, a 500 ms timeout and hand-made heartbeats.
async fn by_hand(redis: &TestRedis, registry: Registry, on_error: OnError) -> ResilientStore {
    by_hand_on(redis, registry, on_error, Arc::new(SystemClock)).await
}

/// [`by_hand`] on `clock`.
async fn by_hand_on(
    redis: &TestRedis,
    registry: Registry,
    on_error: OnError,
    clock: Arc<dyn Clock>,
) -> ResilientStore {
    let settings = LedgerSettings {
        timeout: Duration::from_millis(500),
        on_error,
        heartbeat: Duration::from_secs(3600),
    };
    with_ledger_on(redis, registry, settings, clock).await
}

/// [`with_ledger`] on `clock`.
async fn with_ledger_on(
    redis: &TestRedis,
    registry: Registry,
    settings: LedgerSettings,
    clock: Arc<dyn Clock>,
) -> ResilientStore {
    with_ledger_at(redis, &redis.url, registry, settings, clock).await
}

/// [`with_ledger_on`], connected to `redis` through `url` (a proxy in front of it).
async fn with_ledger_at(
    redis: &TestRedis,
    url: &str,
    mut registry: Registry,
    settings: LedgerSettings,
    clock: Arc<dyn Clock>,
) -> ResilientStore {
    registry.ledger = settings;
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        response_timeout: settings.timeout,
        lazy: true,
        ..RedisStoreOptions::default()
    };
    let shared = RedisStore::connect(url, &registry, options).await.unwrap();
    ResilientStore::new(shared, &registry, clock).await
}

/// A plain store on the same Redis, to read what is shared.
async fn reader(redis: &TestRedis) -> RedisStore {
    reader_of(redis, &registry()).await
}

async fn reader_of(redis: &TestRedis, registry: &Registry) -> RedisStore {
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        ..RedisStoreOptions::default()
    };
    RedisStore::connect(&redis.url, registry, options)
        .await
        .unwrap()
}

async fn admit(ledger: &dyn Ledger) -> Result<Option<Reservation>, LedgerError> {
    let need = Need::new(10, Duration::from_secs(60));
    Ok(match ledger.admit(&need, &[M]).await? {
        Admission::Granted(r) => Some(r),
        Admission::Denied(_) => None,
    })
}

/// Admits until refused; returns the reservations.
async fn fill(ledger: &dyn Ledger) -> Vec<Reservation> {
    let mut held = Vec::new();
    while let Some(r) = admit(ledger).await.unwrap() {
        held.push(r);
        assert!(held.len() <= 10, "admitted over the limit");
    }
    held
}

async fn shared_requests(redis: &TestRedis) -> (u64, u64) {
    let s = reader(redis).await.snapshot(&[M]).await.unwrap();
    (s[0].usage.requests, s[0].usage.in_flight)
}

#[tokio::test]
async fn local_mode_splits_what_is_left_and_writes_it_back_after_a_restart() {
    let mut redis = redis_server();
    let (a, b) = (
        instance(&redis, OnError::Local).await,
        instance(&redis, OnError::Local).await,
    );
    let (ra, rb) = fill_shares_after_a_kill(&mut redis, &a, &b).await;
    for r in &ra {
        assert!(a.settle(r, ActualUsage::tokens(5)).await.unwrap());
    }

    redis.restart();
    // A finds the keys lost and writes its own back, but B has not yet: A stays local.
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Local);
    assert_eq!(admit(&a).await.unwrap(), None, "A waits for B");
    b_writes_back_and_both_rejoin(&redis, &a, &b, &rb).await;
}

/// A admits (and settles) 4 of the 10 a minute; A and B learn the windows and that they are
/// two; Redis is killed and each fills its share locally. Returns what each admitted then.
async fn fill_shares_after_a_kill(
    redis: &mut TestRedis,
    a: &ResilientStore,
    b: &ResilientStore,
) -> (Vec<Reservation>, Vec<Reservation>) {
    for _ in 0..4 {
        let r = admit(a).await.unwrap().unwrap();
        assert!(a.settle(&r, ActualUsage::tokens(5)).await.unwrap());
    }
    // Two rounds: A counts in full what it admitted since a reading of its own no later than
    // B's last one (see
    // `what_one_admitted_between_two_instances_readings_counts_whole_in_local_mode`), and only
    // the second round has one after its 4.
    for _ in 0..2 {
        a.heartbeat_now().await;
        b.heartbeat_now().await;
    }
    assert_eq!((a.status().instances, b.status().instances), (2, 2));

    redis.kill();
    // Each holds half of every limit, less half of what was used: 5 - 2.
    let (ra, rb) = (fill(a).await, fill(b).await);
    assert_eq!((ra.len(), rb.len()), (3, 3));
    assert_eq!(
        (a.status().mode, b.status().mode),
        (Mode::Local, Mode::Local)
    );
    (ra, rb)
}

/// After [`fill_shares_after_a_kill`], Redis restarted and A's local admissions written back:
/// B writes its own back, and then waits for A to say that it holds nothing unwritten (B's
/// first beat back could not tell A had already written): each needs one more beat. Then the
/// emptied windows hold what both admitted, and B settles what it holds (`rb`).
async fn b_writes_back_and_both_rejoin(
    redis: &TestRedis,
    a: &ResilientStore,
    b: &ResilientStore,
    rb: &[Reservation],
) {
    b.heartbeat_now().await;
    a.heartbeat_now().await;
    b.heartbeat_now().await;
    assert_eq!(
        (a.status().mode, b.status().mode),
        (Mode::Shared, Mode::Shared)
    );
    // A's 4 before the restart, and the 6 made locally (B's 3 still in flight).
    assert_eq!(shared_requests(redis).await, (10, 3));
    assert_eq!(admit(a).await.unwrap(), None, "the window is full");
    for r in rb {
        assert!(b.settle(r, ActualUsage::tokens(5)).await.unwrap());
    }
    assert_eq!(shared_requests(redis).await, (10, 0));
}

/// Redis frozen through a beat (and its second sending): `a` goes local; then, Redis awake, the
/// next beat finds it answering and the restore round takes `a` back to the shared windows.
async fn an_unanswered_beat_then_a_restore(redis: &TestRedis, a: &ResilientStore) {
    redis.pause();
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Local, "a beat without an answer");
    redis.resume();
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Shared);
}

/// One slow answer is not an outage: an admission that times out once is sent again, Redis
/// answers the repeat with the first one's grant, and the instance goes on admitting through
/// Redis (gone local, it would admit on its own while the others fill the shared windows).
#[tokio::test]
async fn an_admission_that_times_out_once_is_sent_again_and_counted_once() {
    let redis = redis_server();
    let a = instance(&redis, OnError::Local).await;
    a.heartbeat_now().await;
    // Redis holds every client's commands for 700 ms: the first send times out after 500 ms,
    // the second is answered when the pause ends.
    pause_clients(&redis, 700).await;
    let r = admit(&a).await.unwrap().expect("admitted");
    assert_eq!(a.status().mode, Mode::Shared);
    assert_eq!(a.status().local_admissions, 0);
    assert_eq!(shared_requests(&redis).await, (1, 1), "counted once");
    assert!(a.settle(&r, ActualUsage::tokens(5)).await.unwrap());
    assert_eq!(shared_requests(&redis).await, (1, 0));
}

/// The same for a heartbeat: one that times out once is sent again, and the instance stays
/// shared.
#[tokio::test]
async fn a_heartbeat_that_times_out_once_is_sent_again() {
    let redis = redis_server();
    let a = instance(&redis, OnError::Local).await;
    a.heartbeat_now().await;
    pause_clients(&redis, 700).await;
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Shared);
    assert!(admit(&a).await.unwrap().is_some());
    assert_eq!(a.status().local_admissions, 0);
}

/// Redis holds every client's commands for `ms` (`CLIENT PAUSE`).
async fn pause_clients(redis: &TestRedis, ms: u64) {
    let mut conn = redis::Client::open(redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// A request whose admission got a slow answer and then a denial is uncertain: Redis may still
/// run its first sending late, so a restore round voids it (releases it in Redis). The router
/// asks again under the same id after a denial; when Redis grants it then, that grant is the
/// request's, in use: the restore after a later outage must not void it.
#[tokio::test]
async fn a_request_granted_through_redis_after_an_uncertain_denial_is_not_voided_by_a_restore() {
    let redis = redis_server();
    let registry = Registry::from_yaml_str(&one_model("rpm: 1"), "test.yaml").unwrap();
    let a = by_hand(&redis, registry.clone(), OnError::Local).await;
    let in_redis = || async {
        let s = reader_of(&redis, &registry)
            .await
            .snapshot(&[M])
            .await
            .unwrap();
        (s[0].usage.requests, s[0].usage.in_flight)
    };
    a.heartbeat_now().await;
    let first = admit(&a).await.unwrap().expect("admitted");
    // The first sending times out after 500 ms, the second is answered when the pause ends
    // (700 ms): the minute's one request is taken.
    let need = Need::new(10, Duration::from_secs(60));
    let calls = script_calls(&redis).await;
    pause_clients(&redis, 700).await;
    let denied = a.admit(&need, &[M]).await.unwrap();
    assert!(matches!(denied, Admission::Denied(_)), "{denied:?}");
    assert_eq!(script_calls(&redis).await - calls, 2, "sent twice");
    assert_eq!(a.status().mode, Mode::Shared);
    // Room again; the same request asks again, and Redis grants it.
    assert!(a.release(&first).await.unwrap());
    let Admission::Granted(r) = a.admit(&need, &[M]).await.unwrap() else {
        panic!("room for one");
    };
    assert_eq!(r.id, need.id);
    assert_eq!(in_redis().await, (1, 1));
    // An outage (the beat and its second sending get no answer), then a restore round.
    an_unanswered_beat_then_a_restore(&redis, &a).await;
    assert_eq!(
        in_redis().await,
        (1, 1),
        "the request granted through Redis is still held there, not voided"
    );
    assert!(a.settle(&r, ActualUsage::tokens(5)).await.unwrap());
    assert_eq!(in_redis().await, (1, 0));
}

/// A restore is applied once per number: sent again after its first sending ran in Redis but
/// its reply was lost, it is answered "applied already". That answer must still say the keys
/// were lost since the instance last looked (the epoch it knew is not the store's), or the
/// instance would go back to the shared windows without waiting for the others to write back
/// what they admitted on their own.
#[tokio::test]
async fn a_restore_sent_again_after_its_reply_was_lost_still_waits_for_the_others() {
    let mut redis = redis_server();
    let proxy = ReplyHolder::start(
        &redis,
        format!("llmroute:{{{}}}:v3:restored", redis.namespace),
    )
    .await;
    let settings = LedgerSettings {
        timeout: Duration::from_millis(500),
        on_error: OnError::Local,
        heartbeat: Duration::from_secs(3600),
    };
    let a = with_ledger_at(
        &redis,
        &proxy.url,
        registry(),
        settings,
        Arc::new(SystemClock),
    )
    .await;
    let b = instance(&redis, OnError::Local).await;
    let (ra, rb) = fill_shares_after_a_kill(&mut redis, &a, &b).await;
    for r in &ra {
        assert!(a.settle(r, ActualUsage::tokens(5)).await.unwrap());
    }
    redis.restart();
    // Every script is loaded into the emptied Redis (a store connecting eagerly loads them), so
    // that A's restore runs at its first sending rather than meeting NOSCRIPT.
    drop(reader(&redis).await);

    // A's beat is answered; its restore reaches Redis, which runs it, but A hears nothing of it
    // (the proxy holds the reply) and gives up after 500 ms.
    proxy.arm();
    a.heartbeat_now().await;
    assert_eq!(proxy.held(), 1, "the restore's reply was held");
    assert_eq!(
        shared_requests(&redis).await,
        (7, 0),
        "Redis ran it: A's 4 before the restart and its 3 local ones"
    );
    assert_eq!(a.status().mode, Mode::Local);
    proxy.release();
    // Sent again under the same number: applied already. A still waits for B.
    a.heartbeat_now().await;
    assert_eq!(shared_requests(&redis).await, (7, 0), "applied once");
    assert_eq!(admit(&a).await.unwrap(), None, "A waits for B");
    assert_eq!(a.status().mode, Mode::Local, "A waits for B");
    b_writes_back_and_both_rejoin(&redis, &a, &b, &rb).await;
}

/// A TCP proxy in front of a test Redis that, once armed, holds every reply on the connection
/// of the next command naming `marker` (a key), from that command's reply on, until released.
/// The command itself goes on to Redis, which runs it: its caller hears nothing in time, as
/// if the reply were lost. While Redis is away (killed), a connection is closed at once.
struct ReplyHolder {
    url: String,
    armed: Arc<AtomicBool>,
    /// Connections that began holding.
    held: Arc<AtomicUsize>,
    release: Arc<watch::Sender<bool>>,
}

/// What each proxied connection shares with the [`ReplyHolder`].
#[derive(Clone)]
struct Hold {
    marker: Arc<[u8]>,
    armed: Arc<AtomicBool>,
    held: Arc<AtomicUsize>,
    release: Arc<watch::Sender<bool>>,
}

impl ReplyHolder {
    async fn start(redis: &TestRedis, marker: String) -> Self {
        let upstream: SocketAddr = redis
            .url
            .trim_start_matches("redis://")
            .trim_end_matches("/0")
            .parse()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}/0", listener.local_addr().unwrap());
        let hold = Hold {
            marker: marker.into_bytes().into(),
            armed: Arc::new(AtomicBool::new(false)),
            held: Arc::new(AtomicUsize::new(0)),
            release: Arc::new(watch::channel(false).0),
        };
        let proxy = Self {
            url,
            armed: hold.armed.clone(),
            held: hold.held.clone(),
            release: hold.release.clone(),
        };
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    tokio::spawn(hold.clone().pipe(client, server));
                }
            }
        });
        proxy
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Lets every held reply go, and those after it.
    fn release(&self) {
        self.release.send_replace(true);
    }
}

impl Hold {
    /// Forwards both ways until either side ends.
    async fn pipe(self, client: TcpStream, server: TcpStream) {
        let (client_rd, client_wr) = client.into_split();
        let (server_rd, server_wr) = server.into_split();
        let holding = Arc::new(AtomicBool::new(false));
        let marks = holding.clone();
        let Hold {
            marker,
            armed,
            held,
            release,
        } = self;
        let upstream = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            // The last bytes read, and those just read: a marker may span two reads.
            let mut seen = Vec::new();
            loop {
                let n = match read(&client_rd, &mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                seen.extend_from_slice(&buf[..n]);
                if seen.windows(marker.len()).any(|w| *w == *marker) {
                    // Set before the command goes on: its reply comes after.
                    if armed.swap(false, Ordering::SeqCst) {
                        marks.store(true, Ordering::SeqCst);
                        held.fetch_add(1, Ordering::SeqCst);
                    }
                    seen.clear();
                }
                let old = seen.len().saturating_sub(marker.len());
                seen.drain(..old);
                if write_all(&server_wr, &buf[..n]).await.is_err() {
                    return;
                }
            }
        });
        copy_gated(&server_rd, &client_wr, || {
            let (holding, release) = (holding.clone(), release.clone());
            async move {
                if holding.load(Ordering::SeqCst) {
                    let _ = release.subscribe().wait_for(|go| *go).await;
                }
                true
            }
        })
        .await;
        upstream.abort();
    }
}

#[tokio::test]
async fn a_frozen_redis_sends_admissions_local_and_late_replies_are_voided() {
    let redis = redis_server();
    let a = instance(&redis, OnError::Local).await;
    for _ in 0..2 {
        let r = admit(&a).await.unwrap().unwrap();
        assert!(a.settle(&r, ActualUsage::tokens(5)).await.unwrap());
    }
    a.heartbeat_now().await;
    redis.pause();
    // The first admission times out (Redis may still count it when it wakes): it is admitted
    // locally instead, as are the rest of this instance's share (it is alone: all 8 left).
    let held = fill(&a).await;
    assert_eq!(held.len(), 8);
    assert_eq!(a.status().mode, Mode::Local);
    redis.resume();
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Shared);
    // Redis ran the timed-out admission when it woke; it was handed back before the 8 local
    // ones were written: 10 in the window, not 11.
    assert_eq!(shared_requests(&redis).await, (10, 8));
    for r in &held {
        assert!(a.release(r).await.unwrap());
    }
    assert_eq!(shared_requests(&redis).await, (2, 0));
}

/// Local mode starts from each instance's share of its last heartbeat's reading, plus what it
/// admitted since: since a reading no later than every other instance's, so that what it
/// admitted between another's last reading and its own (in the other's reading not at all, in
/// its own only for its share) is counted in full.
#[tokio::test]
async fn what_one_admitted_between_two_instances_readings_counts_whole_in_local_mode() {
    let redis = redis_server();
    let (a, b) = (
        instance(&redis, OnError::Local).await,
        instance(&redis, OnError::Local).await,
    );
    b.heartbeat_now().await;
    a.heartbeat_now().await;
    // A's last reading saw none of these; B's next one sees all four.
    for _ in 0..4 {
        let r = admit(&b).await.unwrap().unwrap();
        assert!(b.settle(&r, ActualUsage::tokens(5)).await.unwrap());
    }
    b.heartbeat_now().await;
    redis.pause();
    // Each holds 5. A starts from half of 0 and admits 5. B starts from half of its reading
    // (2) plus the 4 it admitted since A's reading: it is full. 4 + 5 + 0, within the 10. (Were
    // B to count only what it admitted since its own reading, it would admit 3: 12.)
    let (ra, rb) = (fill(&a).await, fill(&b).await);
    assert_eq!((ra.len(), rb.len()), (5, 0));
    redis.resume();
}

/// A concurrency limit holds across instances in local mode: each holds at least its share of
/// every instance's requests in flight at the last heartbeat, so one holding few does not admit
/// up to its share while another holds more than its own.
#[tokio::test]
async fn in_local_mode_the_instances_together_stay_within_a_concurrency_limit() {
    let redis = redis_server();
    let registry = || Registry::from_yaml_str(&one_model("concurrency: 10"), "test.yaml").unwrap();
    let (a, b) = (
        by_hand(&redis, registry(), OnError::Local).await,
        by_hand(&redis, registry(), OnError::Local).await,
    );
    a.heartbeat_now().await;
    b.heartbeat_now().await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(admit(&a).await.unwrap().expect("a admits"));
    }
    for _ in 0..2 {
        held.push(admit(&b).await.unwrap().expect("b admits"));
    }
    a.heartbeat_now().await;
    b.heartbeat_now().await;
    redis.pause();
    // Each holds 5: a holds 8 of its own, b its 2 and 3 standing in for a's. Were b to count
    // only its own, it would admit 3: 13 in flight.
    let (ra, rb) = (fill(&a).await, fill(&b).await);
    assert_eq!((ra.len(), rb.len()), (0, 0));
    redis.resume();
}

/// An instance alone: its own requests that ended between its last heartbeat and the outage
/// freed their room, and local mode does not hold them as stand-ins.
#[tokio::test]
async fn in_local_mode_an_instance_is_not_held_by_its_own_requests_that_ended() {
    let redis = redis_server();
    let registry = Registry::from_yaml_str(&one_model("concurrency: 4"), "test.yaml").unwrap();
    let a = by_hand(&redis, registry, OnError::Local).await;
    a.heartbeat_now().await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(admit(&a).await.unwrap().expect("a admits"));
    }
    a.heartbeat_now().await;
    for r in &held {
        assert!(a.settle(r, ActualUsage::tokens(5)).await.unwrap());
    }
    redis.pause();
    assert_eq!(fill(&a).await.len(), 4);
    redis.resume();
}

/// After Redis froze, each instance back writes what it admitted on its own into the shared
/// windows, but admits nothing through them until every other live instance has done the same or
/// said it holds nothing unwritten: until then the windows miss what the others admitted. An
/// instance idle through the outage noticed it by its heartbeat, and waits too.
#[tokio::test]
async fn after_an_outage_none_admits_through_redis_before_all_have_written_back() {
    let redis = redis_server();
    let (a, b, idle) = (
        instance(&redis, OnError::Local).await,
        instance(&redis, OnError::Local).await,
        instance(&redis, OnError::Local).await,
    );
    let r = admit(&a).await.unwrap().unwrap();
    assert!(a.settle(&r, ActualUsage::tokens(5)).await.unwrap());
    // Two rounds, so that A's last readings are all after its admission (see the test above).
    for _ in 0..2 {
        for i in [&a, &b, &idle] {
            i.heartbeat_now().await;
        }
    }
    redis.pause();
    // A third of 10 is 3 each, less a third of the 1 used, rounded up.
    let (ra, rb) = (fill(&a).await, fill(&b).await);
    assert_eq!((ra.len(), rb.len()), (2, 2));
    idle.heartbeat_now().await;
    assert_eq!(idle.status().mode, Mode::Local, "a beat without an answer");
    redis.resume();

    // A is back: 1 + A's 2 are in the windows, not B's 2 (but B's first admission, whose reply
    // never came, which Redis ran when it woke: B hands it back before it writes its own). Were
    // A to admit through them, it could take 6 more, 1 of them over the limit.
    a.heartbeat_now().await;
    assert_eq!(shared_requests(&redis).await, (4, 3));
    assert_eq!(a.status().mode, Mode::Local);
    assert_eq!(
        admit(&a).await.unwrap(),
        None,
        "A waits for B and the idle one"
    );
    idle.heartbeat_now().await;
    assert_eq!(
        admit(&idle).await.unwrap(),
        None,
        "the idle one waits for B"
    );
    b.heartbeat_now().await;
    assert_eq!(b.status().mode, Mode::Shared, "B was the last one");
    a.heartbeat_now().await;
    idle.heartbeat_now().await;
    assert_eq!(
        (a.status().mode, idle.status().mode),
        (Mode::Shared, Mode::Shared)
    );
    assert_eq!(shared_requests(&redis).await, (5, 4));
    let more = fill(&a).await;
    assert_eq!(
        more.len(),
        5,
        "the limit, with all 5 admitted so far in the windows"
    );
}

async fn leasing(redis: &TestRedis, lease: &str) -> Arc<ResilientStore> {
    let yaml = one_model("rpm: 100, tpm: 100000").replace(
        "        limits:",
        &format!("        lease: {lease}\n        limits:"),
    );
    let mut registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    // A call that gets no answer in time may have been run, and what it gives back is then
    // not sent again at close (an over-count, the safe side): the tests count exactly, so a
    // debug build among many tests gets two seconds, not the default 50 ms.
    registry.ledger.timeout = Duration::from_secs(2);
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        response_timeout: registry.ledger.timeout,
        lazy: true,
        ..RedisStoreOptions::default()
    };
    let shared = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    Arc::new(ResilientStore::new(shared, &registry, Arc::new(SystemClock)).await)
}

/// 3 instances x 2 tasks leasing with `lease`, each admitting until refused, then settling what
/// it holds for 5 tokens each and closing: how many were admitted, and the script calls made
/// until the last refusal. The windows must hold exactly what was admitted.
async fn admit_until_full(redis: &TestRedis, lease: &str) -> (usize, u64) {
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(leasing(redis, lease).await);
    }
    let before = script_calls(redis).await;
    // 3 instances x 2 tasks, each admitting until refused.
    let tasks: Vec<_> = instances
        .iter()
        .flat_map(|i| (0..2).map(move |_| i.clone()))
        .map(|ledger| {
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Some(r) = admit(&*ledger).await.unwrap() {
                    held.push(r);
                }
                (ledger, held)
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        let (ledger, held) = t.await.unwrap();
        for r in &held {
            assert!(ledger.settle(r, ActualUsage::tokens(5)).await.unwrap());
        }
        admitted += held.len();
    }
    let calls = script_calls(redis).await - before;
    for i in &instances {
        i.close().await.unwrap();
    }
    // The blocks' counts were corrected to what their requests used: 5 tokens each.
    let s = reader(redis).await.snapshot(&[M]).await.unwrap();
    assert_eq!(
        (s[0].usage.requests, s[0].usage.tokens, s[0].usage.in_flight),
        (admitted as u64, 5 * admitted as u64, 0)
    );
    (admitted, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leased_blocks_never_admit_over_the_limit_and_cost_a_call_per_block() {
    let redis = redis_server();
    let (admitted, calls) =
        admit_until_full(&redis, "{ requests: 30, tokens: 30000, secs: 60 }").await;
    // Every request the limit allows, and not one more.
    assert_eq!(admitted, 100);
    // One call per block (30, 30, 30 and the last 10, give or take a split), two for each
    // task's last, refused attempt (a lease that finds no room, and the shared admission that
    // says why), and a heartbeat (with its lease corrections) per instance should a second
    // boundary pass: far from one per request.
    assert!(
        calls <= 8 + 2 * 6 + 2 * 3,
        "{calls} script calls for 100 requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auto_blocks_never_admit_over_the_limit_under_contention() {
    let redis = redis_server();
    // Blocks that grow with each instance's rate and shrink as the limit nears.
    let (admitted, _) = admit_until_full(&redis, "auto").await;
    assert_eq!(admitted, 100);
}

#[tokio::test]
async fn a_reservation_from_a_block_settles_in_place_and_a_shared_one_does_not() {
    let redis = redis_server();
    // Heartbeats by hand: a background beat would be a call of its own between the counts.
    let a = leasing_by_hand(&redis, "{ requests: 30, secs: 60 }").await;
    let from_block = admit(&a).await.unwrap().unwrap();
    let before = script_calls(&redis).await;
    let settle = |reservation: &Reservation| Settlement {
        reservation: reservation.clone(),
        actual: Some(ActualUsage::tokens(7)),
        observed: None,
    };
    assert!(matches!(
        a.settle_here(&settle(&from_block)),
        Some(Ok(true))
    ));
    // Settled once: the second time there is nothing left to settle, still without a call.
    assert!(matches!(
        a.settle_here(&settle(&from_block)),
        None | Some(Ok(false))
    ));
    assert_eq!(script_calls(&redis).await, before, "no call to Redis");
    // A reservation the block did not admit needs the store (the block handed back first).
    a.close().await.unwrap();
    let shared = instance(&redis, OnError::Local).await;
    let r = admit(&shared).await.unwrap().unwrap();
    assert!(shared.settle_here(&settle(&r)).is_none());
    assert!(shared.settle(&r, ActualUsage::tokens(7)).await.unwrap());
}

#[tokio::test]
async fn a_cooldown_another_instance_put_ends_this_ones_block_at_its_next_heartbeat() {
    let redis = redis_server();
    let a = leasing_by_hand(&redis, "{ requests: 30, secs: 60 }").await;
    let b = leasing_by_hand(&redis, "{ requests: 30, secs: 60 }").await;
    assert!(admit(&a).await.unwrap().is_some());
    assert!(admit(&b).await.unwrap().is_some(), "b's block is open");
    a.cooldown(M, Duration::from_secs(60)).await.unwrap();
    b.heartbeat_now().await;
    assert!(
        admit(&b).await.unwrap().is_none(),
        "b admitted from its block during a's cooldown"
    );
}

#[tokio::test]
async fn a_batch_request_keeps_to_its_share_on_a_leased_deployment() {
    let redis = redis_server();
    let a = leasing_by_hand(&redis, "{ requests: 30, secs: 60 }").await;
    let batch = || {
        let mut need = Need::new(10, Duration::from_secs(60));
        need.share_percent = 25;
        need
    };
    let mut admitted = 0;
    while let Admission::Granted(_) = a.admit(&batch(), &[M]).await.unwrap() {
        admitted += 1;
        assert!(admitted <= 100, "batch requests admitted without end");
    }
    assert_eq!(admitted, 25, "a quarter of rpm: 100");
    // Interactive requests find the rest, from blocks.
    let mut interactive = 0;
    while admit(&a).await.unwrap().is_some() {
        interactive += 1;
    }
    assert_eq!(interactive, 75);
}

#[tokio::test]
async fn a_block_closed_after_redis_came_back_empty_gives_back_nothing_it_never_held() {
    let mut redis = redis_server();
    let a = leasing_by_hand(&redis, "{ requests: 30, secs: 60 }").await;
    a.heartbeat_now().await;
    let held = admit(&a).await.unwrap().unwrap();
    assert!(a.settle(&held, ActualUsage::tokens(5)).await.unwrap());
    // Redis restarts empty; another instance admits 20 before this one hears of it.
    redis.restart();
    let b = instance(&redis, OnError::Local).await;
    b.heartbeat_now().await;
    for _ in 0..5 {
        assert!(admit(&b).await.unwrap().is_some());
    }
    // A's connection comes back (a read: it learns nothing of the new epoch)...
    let mut read = a.snapshot(&[M]).await;
    for _ in 0..50 {
        if read.is_ok() {
            break;
        }
        read = a.snapshot(&[M]).await;
    }
    assert_eq!(read.unwrap()[0].usage.requests, 5);
    // ...and closing hands back the block's unused 29: not from windows that never held it.
    // (Its close writes back what it admitted, the block, with the correction: its one
    // request.)
    a.close().await.unwrap();
    assert_eq!(shared_requests(&redis).await.0, 5 + 1);
}

#[tokio::test]
async fn a_request_a_block_admits_seconds_after_its_grant_counts_for_a_minute_from_then() {
    // Mid-second: the block knows Redis's second, and moves the nine to theirs.
    counted_for_a_minute_from_admission(crate::support::T0 + 500).await;
}

#[tokio::test]
async fn a_request_whose_second_a_block_cannot_tell_counts_for_a_minute_from_then() {
    // Just as a second turns: Redis's clock may read either second (as far as the block
    // knows), so the nine count in the later, the one they were admitted in.
    counted_for_a_minute_from_admission(crate::support::T0).await;
}

#[tokio::test]
async fn a_request_counted_in_a_second_redis_has_not_reached_counts_in_its_current_one() {
    let redis = redis_server();
    // A ms before a second turns: the block counts the nine in the next second, which Redis
    // has not reached when the heartbeat moves them there. They count in its current second.
    let start = crate::support::T0 + 500;
    let (_a, reader, clock) = one_then_nine_moved(&redis, start, 20_000 - 501).await;
    assert_eq!(counted(&reader).await.0, 10);
    // Until a minute from that second, and no longer.
    clock.advance_ms(61_000 - 19_499 - 1);
    assert_eq!(counted(&reader).await.0, 9, "the grant's second has left");
    clock.advance_ms(20_000);
    assert_eq!(counted(&reader).await.0, 0);
}

/// An instance leasing `lease` of one model with `limits` on the manual `clock`, with Redis's
/// clock `store` (passed in: tests move both), heartbeats by hand; and a reader of the windows
/// on `clock`.
async fn leasing_on(
    redis: &TestRedis,
    limits: &str,
    lease: &str,
    clock: &ManualClock,
    store: Arc<dyn Clock>,
) -> (ResilientStore, RedisStore) {
    let yaml = one_model(limits).replace(
        "        limits:",
        &format!("        lease: {lease}\n        limits:"),
    );
    let mut registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    registry.ledger = LedgerSettings {
        timeout: Duration::from_millis(500),
        on_error: OnError::Local,
        heartbeat: Duration::from_secs(3600),
    };
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        clock: Some(store),
        response_timeout: Duration::from_secs(5),
        lazy: true,
        ..RedisStoreOptions::default()
    };
    let shared = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    let a = ResilientStore::new(shared, &registry, Arc::new(clock.clone())).await;
    let reader = crate::support::connect(redis, &registry, Some(clock.clone())).await;
    (a, reader)
}

/// Requests and tokens the windows count on the one model.
async fn counted(reader: &RedisStore) -> (u64, u64) {
    let u = reader.snapshot(&[M]).await.unwrap()[0].usage;
    (u.requests, u.tokens)
}

/// One request from a block of the whole limit at `start`, nine more `later` ms after (the
/// heartbeat after them moves them to their own second): on one clock for Redis and the
/// instance.
async fn one_then_nine_moved(
    redis: &TestRedis,
    start: u64,
    later: u64,
) -> (ResilientStore, RedisStore, ManualClock) {
    let clock = ManualClock::new(start);
    let lease = "{ requests: 10, secs: 30 }";
    let store = Arc::new(clock.clone());
    let (a, reader) = leasing_on(redis, "rpm: 10", lease, &clock, store).await;
    assert!(admit(&a).await.unwrap().is_some());
    clock.advance_ms(later);
    for _ in 0..9 {
        assert!(admit(&a).await.unwrap().is_some());
    }
    a.heartbeat_now().await;
    (a, reader, clock)
}

/// One request from a block of the whole limit at `start`, nine more 20 s later: the windows
/// count each for a minute from its admission.
async fn counted_for_a_minute_from_admission(start: u64) {
    let redis = redis_server();
    let (_a, reader, clock) = one_then_nine_moved(&redis, start, 20_000).await;
    let requests = || async { counted(&reader).await.0 };
    assert_eq!(requests().await, 10);
    // A minute after the grant, the provider still counts the nine: so must the windows.
    clock.advance_ms(41_000);
    assert_eq!(requests().await, 9, "the nine left with the grant's second");
    clock.advance_ms(20_000);
    assert_eq!(requests().await, 0);
}

/// Redis's clock, for a store: the first reading after [`StepsOnce::arm`] steps the instance's
/// clock forward, as a wall clock set forward while a call is out.
#[derive(Debug)]
struct StepsOnce {
    store: ManualClock,
    instance: ManualClock,
    step: std::sync::atomic::AtomicU64,
}

impl StepsOnce {
    fn arm(&self, ms: u64) {
        self.step.store(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for StepsOnce {
    fn now_ms(&self) -> u64 {
        let step = self.step.swap(0, std::sync::atomic::Ordering::SeqCst);
        self.instance.advance_ms(step);
        self.store.now_ms()
    }
}

#[tokio::test]
async fn a_block_whose_call_saw_the_clock_step_is_not_waited_on_but_replaced() {
    let redis = redis_server();
    let start = crate::support::T0 + 500;
    let instance = ManualClock::new(start);
    let store = Arc::new(StepsOnce {
        store: ManualClock::new(start),
        instance: instance.clone(),
        step: 0.into(),
    });
    let lease = "{ requests: 5, secs: 30 }";
    let (a, _) = leasing_on(&redis, "rpm: 10", lease, &instance, store.clone()).await;
    // The wall clock is set an hour forward while the first block's call is out: the block
    // knows Redis's clock to within an hour, so no second of a later request is certain.
    store.arm(3_600_000);
    assert!(admit(&a).await.unwrap().is_some());
    // The next request does not wait out that hour: it asks for a new block, which ends the
    // first (its four unused go back) and is known to the ms.
    let next = tokio::time::timeout(Duration::from_secs(10), admit(&a))
        .await
        .expect("the request waited on a block whose skew is an hour wide");
    assert!(next.unwrap().is_some());
    let calls = script_calls(&redis).await;
    assert!(admit(&a).await.unwrap().is_some());
    assert_eq!(script_calls(&redis).await, calls, "the new block admits");
    a.heartbeat_now().await;
    // The first block's one request, and the second block of five (read on Redis's clock).
    let registry = Registry::from_yaml_str(&one_model("rpm: 10"), "test.yaml").unwrap();
    let reader = crate::support::connect(&redis, &registry, Some(store.store.clone())).await;
    assert_eq!(counted(&reader).await.0, 6);
}

/// The window hash of the one model, in `redis`'s namespace.
fn window_key(redis: &TestRedis) -> String {
    format!("llmroute:{{{}}}:v3:w:d:p/m", redis.namespace)
}

/// Runs `cmd` on `key` by hand, with `args`.
async fn on_key(redis: &TestRedis, cmd: &str, key: &str, args: &[i64]) -> i64 {
    let client = ::redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    ::redis::cmd(cmd)
        .arg(key)
        .arg(args)
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_window_lives_as_long_as_the_requests_a_block_moved_into_a_later_second() {
    let redis = redis_server();
    let start = crate::support::T0 + 500;
    let clock = ManualClock::new(start);
    let lease = "{ requests: 10, secs: 60 }";
    let (a, reader) = leasing_on(&redis, "rpm: 10", lease, &clock, Arc::new(clock.clone())).await;
    assert!(admit(&a).await.unwrap().is_some());
    // 50 s of the window hash's life pass (in Redis's time, as its TTL counts them; the
    // ledger's clock is manual), and the block admits nine more, moved to their own second.
    let key = window_key(&redis);
    assert_eq!(on_key(&redis, "PEXPIRE", &key, &[12_000]).await, 1);
    clock.advance_ms(50_000);
    for _ in 0..9 {
        assert!(admit(&a).await.unwrap().is_some());
    }
    a.heartbeat_now().await;
    assert_eq!(counted(&reader).await.0, 10);
    // The nine count for a minute from their second: the hash must live that long.
    let ttl = on_key(&redis, "PTTL", &key, &[]).await;
    assert!(ttl >= 60_000, "the window hash expires in {ttl} ms");
}

#[tokio::test]
async fn a_correction_to_a_window_hash_that_was_lost_is_counted() {
    let redis = redis_server();
    let clock = ManualClock::new(crate::support::T0 + 500);
    let lease = "{ requests: 10, secs: 30 }";
    let store = Arc::new(clock.clone());
    let (a, reader) = leasing_on(&redis, "rpm: 10", lease, &clock, store).await;
    assert!(admit(&a).await.unwrap().is_some());
    // The hash goes (evicted, say); 20 s later the block admits nine more, which the next
    // heartbeat moves to their own second: counted there, in a hash that starts anew.
    assert_eq!(on_key(&redis, "DEL", &window_key(&redis), &[]).await, 1);
    clock.advance_ms(20_000);
    for _ in 0..9 {
        assert!(admit(&a).await.unwrap().is_some());
    }
    a.heartbeat_now().await;
    assert_eq!(counted(&reader).await.0, 9);
}

#[tokio::test]
async fn requests_a_block_moved_are_written_back_in_their_own_second_when_redis_lost_its_keys() {
    let mut redis = redis_server();
    let (a, reader, clock) = one_then_nine_moved(&redis, crate::support::T0 + 500, 20_000).await;
    redis.restart();
    // The instance finds the keys lost and writes back what it admitted in the last minute.
    for _ in 0..10 {
        a.heartbeat_now().await;
        if a.status().mode == Mode::Shared {
            break;
        }
    }
    assert_eq!(a.status().mode, Mode::Shared);
    assert_eq!(
        counted(&reader).await.0,
        10 + 9,
        "the grant, and the nine again"
    );
    // A minute after the grant the provider still counts the nine: so must the windows.
    clock.advance_ms(41_000);
    assert_eq!(counted(&reader).await.0, 9);
    clock.advance_ms(20_000);
    assert_eq!(counted(&reader).await.0, 0);
}

#[test]
fn a_lease_needs_a_deployment_without_a_concurrency_limit() {
    let yaml = one_model("rpm: 100, concurrency: 5")
        .replace("        limits:", "        lease: auto\n        limits:");
    let err = Registry::from_yaml_str(&yaml, "test.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("lease") && err.contains("concurrency"),
        "{err}"
    );
    let yaml =
        one_model("rpm: 100").replace("        limits:", "        lease: always\n        limits:");
    let err = Registry::from_yaml_str(&yaml, "test.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`always` is not a lease") && err.contains("auto"),
        "{err}"
    );
}

/// A leasing instance that beats only by hand, with a timeout a frozen Redis trips.
async fn leasing_by_hand(redis: &TestRedis, lease: &str) -> ResilientStore {
    let yaml = one_model("rpm: 100").replace(
        "        limits:",
        &format!("        lease: {lease}\n        limits:"),
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    by_hand(redis, registry, OnError::Local).await
}

#[tokio::test]
async fn a_blocks_correction_rides_the_heartbeat_once_even_when_its_reply_was_lost() {
    let redis = redis_server();
    let a = leasing_by_hand(&redis, "{ requests: 2, secs: 60 }").await;
    let first = [
        admit(&a).await.unwrap().unwrap(),
        admit(&a).await.unwrap().unwrap(),
    ];
    // The block is used up: the next admission takes a new one. The first block leased no
    // tokens (the deployment has no token limit), so that call adds what its two requests
    // reserved, 10 tokens each.
    let _third = admit(&a).await.unwrap().unwrap();
    let tokens = || async {
        let s = reader(&redis).await.snapshot(&[M]).await.unwrap();
        (s[0].usage.requests, s[0].usage.tokens)
    };
    assert_eq!(
        tokens().await,
        (4, 20),
        "two blocks of 2, two requests reserved"
    );
    // They settle for 5 tokens each: 10 fewer, owed to the next heartbeat.
    for r in &first {
        assert!(a.settle(r, ActualUsage::tokens(5)).await.unwrap());
    }
    assert_eq!(tokens().await, (4, 20), "not sent on their own");
    let calls = script_calls(&redis).await;
    // The beat that carries the correction gets no answer (Redis is frozen) but Redis runs it
    // when it wakes; the next beat sends the same correction under the same number.
    an_unanswered_beat_then_a_restore(&redis, &a).await;
    // The beat without an answer (sent twice: one slow answer is not an outage), the next, the
    // restore that takes it back to the shared store (it wrote nothing) and the beat after it:
    // no call of the correction's own.
    assert_eq!(script_calls(&redis).await - calls, 5);
    assert_eq!(tokens().await, (4, 10), "applied once, not twice");
    a.heartbeat_now().await;
    assert_eq!(tokens().await, (4, 10));
}

/// An instance leasing blocks of 2 requests and 1,000 tokens of 3 requests a minute, with one
/// block used up by two requests that settled for 5 tokens each.
async fn one_block_used_up(redis: &TestRedis) -> ResilientStore {
    let yaml = one_model("rpm: 3, tpm: 100000").replace(
        "        limits:",
        "        lease: { requests: 2, tokens: 1000, secs: 60 }\n        limits:",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let a = by_hand(redis, registry, OnError::Closed).await;
    a.heartbeat_now().await;
    let held = [
        admit(&a).await.unwrap().unwrap(),
        admit(&a).await.unwrap().unwrap(),
    ];
    assert_eq!(
        usage(redis).await,
        (2, 1000),
        "the block counts all it was granted"
    );
    for r in &held {
        assert!(a.settle(r, ActualUsage::tokens(5)).await.unwrap());
    }
    a
}

/// The requests and tokens in `M`'s shared windows.
async fn usage(redis: &TestRedis) -> (u64, u64) {
    let s = reader(redis).await.snapshot(&[M]).await.unwrap();
    (s[0].usage.requests, s[0].usage.tokens)
}

/// The requests and tokens in `d`'s shared windows, `d` a deployment of `registry`.
async fn usage_of(redis: &TestRedis, registry: &Registry, d: DeploymentId) -> (u64, u64) {
    let s = reader_of(redis, registry)
        .await
        .snapshot(&[d])
        .await
        .unwrap();
    (s[0].usage.requests, s[0].usage.tokens)
}

#[tokio::test]
async fn a_block_call_that_got_no_answer_is_asked_again_and_counted_once() {
    let redis = redis_server();
    let a = one_block_used_up(&redis).await;
    // The next request ends the used-up block: the call for another carries the 990 tokens
    // the first did not use. It gets no answer, Redis being frozen, and Redis runs it when it
    // wakes: the 990 taken off, a block of the last request and 1,000 tokens granted to no one.
    redis.pause();
    let third = admit(&a).await;
    assert!(
        third.as_ref().is_err_and(LedgerError::maybe_applied),
        "{third:?}"
    );
    redis.resume();
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Shared);
    // Taken off once: sent again with the beat, the 990 would be taken off twice, leaving the
    // window 990 tokens short of what it holds.
    assert_eq!(usage(&redis).await, (3, 10 + 1000));
    // That beat asked the call again, under its id: it answered as it had run, and the block
    // it granted goes back with the next beat.
    a.heartbeat_now().await;
    assert_eq!(usage(&redis).await, (2, 10), "what the two requests used");
    a.heartbeat_now().await;
    assert_eq!(usage(&redis).await, (2, 10));
}

#[tokio::test]
async fn a_block_call_whose_caller_went_away_is_asked_again_and_counted_once() {
    let redis = redis_server();
    let a = one_block_used_up(&redis).await;
    // The caller stops waiting for the next block's call (which carries the 990 tokens the
    // first block did not use) before its answer; Redis runs it when it wakes.
    redis.pause();
    let gone = tokio::time::timeout(Duration::from_millis(100), admit(&a)).await;
    assert!(gone.is_err(), "the admission was still waiting");
    redis.resume();
    a.heartbeat_now().await;
    a.heartbeat_now().await;
    assert_eq!(usage(&redis).await, (2, 10), "what the two requests used");
}

/// Two deployments of one alias: `cheap` (DeploymentId 0) leasing `auto` with `limits`, and a
/// dearer one with room for everything, leasing `auto` too when `dear_leases`.
fn cheap_and_dear(limits: &str, dear_leases: bool) -> Registry {
    cheap_leasing_and_dear("auto", limits, dear_leases)
}

/// [`cheap_and_dear`], `cheap` leasing `lease`.
fn cheap_leasing_and_dear(lease: &str, limits: &str, dear_leases: bool) -> Registry {
    let dear_lease = if dear_leases { "lease: auto, " } else { "" };
    let yaml = format!(
        "providers:\n  - name: p\n    api: openai\n    base_url: http://127.0.0.1:1/v1\n    \
         api_key_env: P_KEY\n    models:\n      \
         - {{ name: cheap, aliases: [chat], price: {{ input: 1, output: 2 }}, lease: {lease}, \
              limits: {{ {limits} }} }}\n      \
         - {{ name: dear, aliases: [chat], price: {{ input: 5, output: 9 }}, {dear_lease}\
              limits: {{ rpm: 1000 }} }}\n"
    );
    Registry::from_yaml_str(&yaml, "test.yaml").unwrap()
}

#[tokio::test]
async fn auto_blocks_shrink_as_a_deployment_fills_so_its_last_room_is_not_parked() {
    let redis = redis_server();
    // `cheap` holds ten requests of 100 tokens.
    let registry = cheap_and_dear("rpm: 100, tpm: 1000", true);
    let [cheap, dear] = [DeploymentId(0), DeploymentId(1)];
    let a = by_hand(&redis, registry.clone(), OnError::Local).await;
    let b = by_hand(&redis, registry.clone(), OnError::Local).await;
    // Both know there are two of them.
    a.heartbeat_now().await;
    b.heartbeat_now().await;
    let need = Need::new(100, Duration::from_secs(60));
    let mut on_cheap = 0;
    for turn in 0..20 {
        let ledger = if turn % 2 == 0 { &a } else { &b };
        let Admission::Granted(r) = ledger.admit(&need, &[cheap, dear]).await.unwrap() else {
            panic!("`dear` has room");
        };
        on_cheap += u64::from(r.deployment == cheap);
    }
    // Every request `cheap` has room for went there, though none has settled: near its limit
    // the blocks held a request each, so none of its room sat unused in the other's block.
    assert_eq!(on_cheap, 10);
    // Closed, they give back the request slots their blocks did not hand out.
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert_eq!(usage_of(&redis, &registry, cheap).await, (10, 1000));
}

#[tokio::test]
async fn an_auto_block_about_to_run_out_has_its_successor_asked_for_ahead_so_no_request_waits() {
    let redis = redis_server();
    let registry = cheap_and_dear("rpm: 1000, tpm: 100000", false);
    let [cheap, dear] = [DeploymentId(0), DeploymentId(1)];
    let a = by_hand(&redis, registry.clone(), OnError::Local).await;
    let admit = || async {
        let before = script_calls(&redis).await;
        let need = Need::new(100, Duration::from_secs(60));
        let Admission::Granted(r) = a.admit(&need, &[cheap, dear]).await.unwrap() else {
            panic!("`cheap` has room");
        };
        assert_eq!(r.deployment, cheap);
        // What the next one finds is asked for before it comes.
        a.refills_done().await;
        script_calls(&redis).await - before
    };
    // An idle instance's first block holds one request: the request waits for that call, and
    // the next block is asked for as the request takes the last of it.
    assert_eq!(admit().await, 2);
    // Sized from the recent rate, the next blocks hold two, then four requests: the first
    // request of each takes from a block already there.
    assert_eq!(admit().await, 0);
    assert_eq!(admit().await, 1);
    assert_eq!(admit().await, 0);
    // Closed, it gives back what its block did not hand out: the four requests stay counted.
    a.close().await.unwrap();
    assert_eq!(usage_of(&redis, &registry, cheap).await, (4, 400));
}

/// Another instance (a plain store) takes 850 of `cheap`'s 1,000 tokens, leaving 150: the store
/// and its reservation.
async fn leave_150_of_cheap(redis: &TestRedis, registry: &Registry) -> (RedisStore, Reservation) {
    let other = reader_of(redis, registry).await;
    let need = Need::new(850, Duration::from_secs(60));
    let Admission::Granted(held) = other.admit(&need, &[DeploymentId(0)]).await.unwrap() else {
        panic!("`cheap` is empty");
    };
    (other, held)
}

/// Where `ledger` admits a request of `tokens` over `cheap` and `dear` (which has room).
async fn placed(ledger: &ResilientStore, tokens: u64) -> DeploymentId {
    let need = Need::new(tokens, Duration::from_secs(60));
    match ledger
        .admit(&need, &[DeploymentId(0), DeploymentId(1)])
        .await
        .unwrap()
    {
        Admission::Granted(r) => r.deployment,
        Admission::Denied(_) => panic!("`dear` has room"),
    }
}

#[tokio::test]
async fn a_refused_block_is_asked_again_at_once_by_a_request_that_fits_the_room_it_left() {
    let redis = redis_server();
    let registry = cheap_and_dear("tpm: 1000", true);
    let [cheap, dear] = [DeploymentId(0), DeploymentId(1)];
    let (_other, _) = leave_150_of_cheap(&redis, &registry).await;
    let a = by_hand(&redis, registry, OnError::Local).await;
    let admit_on = |tokens| placed(&a, tokens);
    // 200 does not fit the 150 `cheap` has left (as the first heartbeat read it): it goes to
    // `dear`, whose first block holds one request; the next is asked for ahead.
    assert_eq!(admit_on(200).await, dear);
    a.refills_done().await;
    // Another 200 does not ask `cheap` again: no call at all, `dear`'s block being there.
    let before = script_calls(&redis).await;
    assert_eq!(admit_on(200).await, dear);
    assert_eq!(script_calls(&redis).await - before, 0);
    // 100 asks `cheap` again, and fits.
    assert_eq!(admit_on(100).await, cheap);
}

#[tokio::test]
async fn a_request_too_big_for_the_open_block_asks_for_a_new_one_if_the_room_read_and_the_block_hold_it()
 {
    let redis = redis_server();
    let registry = cheap_leasing_and_dear(
        "{ requests: 10, tokens: 600, secs: 60 }",
        "tpm: 1000",
        false,
    );
    let [cheap, dear] = [DeploymentId(0), DeploymentId(1)];
    let a = by_hand(&redis, registry, OnError::Local).await;
    // A block of 600 tokens; the call read 400 left after it.
    assert_eq!(placed(&a, 100).await, cheap);
    // 550 fits neither the block's 500 nor the 400 read, but it fits the 900 the next call
    // finds once it hands back the block's unused part: `cheap` has room, as the provider
    // would count it, and the request goes there, not to `dear`.
    assert_eq!(placed(&a, 550).await, cheap);
    // 400 does not fit what is left (1,000 - 650 = 350: 50 in the new block, 300 read left).
    assert_eq!(placed(&a, 400).await, dear);
    assert_eq!(placed(&a, 350).await, cheap);
}

#[tokio::test]
async fn a_report_that_rides_a_moved_request_is_followed_once_the_move_is_in() {
    let redis = redis_server();
    let mut registry = cheap_leasing_and_dear(
        "{ requests: 10, tokens: 600, secs: 60 }",
        "tpm: 1000",
        false,
    );
    registry.ledger.heartbeat = Duration::from_secs(3600);
    let cheap = DeploymentId(0);
    // Redis on this instance's clock too, 100 ms into a second.
    let clock = ManualClock::new(SystemClock.now_ms() / 1000 * 1000 + 100);
    let on_clock = || Some(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        clock: on_clock(),
        ..RedisStoreOptions::default()
    };
    let shared = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    let a = ResilientStore::new(shared, &registry, Arc::new(clock.clone())).await;
    let need = || Need::new(300, Duration::from_secs(60));
    let Admission::Granted(first) = a.admit(&need(), &[cheap]).await.unwrap() else {
        panic!("`cheap` is empty");
    };
    // A second later, from the same block of 600: moved to its own second (added there, taken
    // off the grant's) by the next heartbeat, which also carries the provider's report.
    clock.advance_ms(1_000);
    let Admission::Granted(second) = a.admit(&need(), &[cheap]).await.unwrap() else {
        panic!("the block has room");
    };
    assert_eq!(second.bucket, first.bucket + 1);
    // The provider counts what the ledger does: 600 of 1,000.
    let report = Observation {
        tokens: Some((400, Duration::from_secs(59))),
        ..Observation::default()
    };
    let settled = a
        .settle_batch(&[
            Settlement {
                reservation: first,
                actual: Some(ActualUsage::tokens(300)),
                observed: None,
            },
            Settlement {
                reservation: second,
                actual: Some(ActualUsage::tokens(300)),
                observed: Some(report),
            },
        ])
        .await;
    assert!(settled.iter().all(|r| matches!(r, Ok(true))), "{settled:?}");
    a.heartbeat_now().await;
    // Followed between the move's two halves, the report would have found 300 tokens where
    // the provider counts 600, and counted the difference again: 900.
    let reader = connect_to(&redis.url, &redis.namespace, &registry, Some(clock.clone())).await;
    let s = reader.snapshot(&[cheap]).await.unwrap();
    assert_eq!(s[0].usage.tokens, 600);
}

#[tokio::test]
async fn heartbeats_keep_a_full_deployment_skipped_and_send_requests_back_when_room_returns() {
    let redis = redis_server();
    let registry = cheap_and_dear("tpm: 1000", false);
    let [cheap, dear] = [DeploymentId(0), DeploymentId(1)];
    let (other, held) = leave_150_of_cheap(&redis, &registry).await;
    let clock = ManualClock::new(SystemClock.now_ms());
    let a = by_hand_on(&redis, registry, OnError::Local, Arc::new(clock.clone())).await;
    let admit_on = |tokens| placed(&a, tokens);
    // 200 does not fit: `cheap` refuses a block, the shared store admits on `dear`.
    assert_eq!(admit_on(200).await, dear);
    // Long after that refusal, heartbeats still read 150 tokens left: a request of 200 does not
    // ask `cheap` again (before, it did every 4 s): one call, the shared store's admission on
    // `dear` (which does not lease).
    for _ in 0..3 {
        clock.advance_ms(3_000);
        a.heartbeat_now().await;
        let before = script_calls(&redis).await;
        assert_eq!(admit_on(200).await, dear);
        assert_eq!(script_calls(&redis).await - before, 1);
    }
    // The other instance's request settles for 250 tokens: 600 are back. The next beat reads
    // them, and a request of 200 goes to `cheap` at once, not 4 s after the last refusal.
    assert!(other.settle(&held, ActualUsage::tokens(250)).await.unwrap());
    a.heartbeat_now().await;
    assert_eq!(admit_on(200).await, cheap);
}

#[tokio::test]
async fn one_refused_block_and_then_the_shared_store_however_many_candidates_are_full() {
    let redis = redis_server();
    let model = |name: &str, rpm: u32| {
        format!(
            "      - {{ name: {name}, aliases: [chat], price: {{ input: 1, output: 2 }}, \
             lease: {{ requests: 5, secs: 60 }}, limits: {{ rpm: {rpm} }} }}\n"
        )
    };
    let yaml = format!(
        "providers:\n  - name: p\n    api: openai\n    base_url: http://127.0.0.1:1/v1\n    \
         api_key_env: P_KEY\n    models:\n{}{}{}",
        model("a", 1),
        model("b", 1),
        model("c", 100)
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let [a, b, c] = [DeploymentId(0), DeploymentId(1), DeploymentId(2)];
    // Another instance (no leases) fills `a` and `b`.
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        ..RedisStoreOptions::default()
    };
    let other = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    let need = || Need::new(10, Duration::from_secs(60));
    // After the leasing instance's first heartbeat, which would have read them full.
    let leasing = by_hand(&redis, registry, OnError::Local).await;
    for d in [a, b] {
        let got = other.admit(&need(), &[d]).await.unwrap();
        assert!(matches!(got, Admission::Granted(_)));
    }
    // The stores loaded every script when they started: each call below is one EVALSHA.
    let before = script_calls(&redis).await;
    let Admission::Granted(r) = leasing.admit(&need(), &[a, b, c]).await.unwrap() else {
        panic!("`c` has room");
    };
    assert_eq!(r.deployment, c);
    // `a`'s block is refused; `b` is not asked for one: the shared store admits on `c`.
    assert_eq!(script_calls(&redis).await - before, 2);
    // The next request asks `b` (not yet known to be full), not `a` (full for a while).
    let before = script_calls(&redis).await;
    let Admission::Granted(r) = leasing.admit(&need(), &[a, b, c]).await.unwrap() else {
        panic!("`c` has room");
    };
    assert_eq!(r.deployment, c);
    assert_eq!(script_calls(&redis).await - before, 2);
    // Both known full now: `c`'s block is asked for, in one call.
    let before = script_calls(&redis).await;
    let Admission::Granted(r) = leasing.admit(&need(), &[a, b, c]).await.unwrap() else {
        panic!("`c` has room");
    };
    assert_eq!(r.deployment, c);
    assert_eq!(script_calls(&redis).await - before, 1);
}

/// A namespace seen for the first time is new: said at info, not warned of as a loss; a store
/// that loses the windows an instance knew is warned of.
#[tokio::test]
async fn a_new_namespace_is_said_to_be_new_and_only_a_real_loss_is_warned_of() {
    let (logs, _capture) = llmroute_tests::Logs::capture();
    let redis = redis_server();
    let a = instance(&redis, OnError::Local).await;
    assert!(admit(&a).await.unwrap().is_some());
    let first = logs.text();
    assert!(
        first.contains("INFO") && first.contains("holds no windows yet in this namespace"),
        "{first}"
    );
    assert!(!first.contains("lost its windows"), "{first}");
    // The namespace empties (a restarted Redis keeping nothing): the windows this instance
    // knew are gone.
    let client = ::redis::Client::open(redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pattern = format!("llmroute:{{{}}}:*", redis.namespace);
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "nothing under {pattern}");
    let _: () = ::redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(admit(&a).await.unwrap().is_some());
    let after = logs.text();
    let lost = &after[first.len()..];
    assert!(
        lost.contains("WARN") && lost.contains("lost its windows"),
        "{lost}"
    );
}
