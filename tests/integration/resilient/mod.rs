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
/// windows, but admits nothing through them until every other instance has said, since this one
/// said it held something, that it holds nothing unwritten (by writing back, or by a heartbeat):
/// until then the windows may miss what the others admitted. An instance idle through the outage
/// noticed it by its heartbeat, and waits too.
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
    // B writes back. The others said they hold nothing before B said it held something: B
    // waits for their next word.
    b.heartbeat_now().await;
    a.heartbeat_now().await;
    idle.heartbeat_now().await;
    b.heartbeat_now().await;
    assert_eq!(
        (a.status().mode, idle.status().mode, b.status().mode),
        (Mode::Shared, Mode::Shared, Mode::Shared)
    );
    assert_eq!(shared_requests(&redis).await, (5, 4));
    let more = fill(&a).await;
    assert_eq!(
        more.len(),
        5,
        "the limit, with all 5 admitted so far in the windows"
    );
}

/// An instance over `registry` with hand-made heartbeats (an hour apart: registrations last
/// three hours), on_error `local`, its ledger reading `clock` and its scripts `store`.
async fn on_clocks(
    redis: &TestRedis,
    mut registry: Registry,
    clock: &ManualClock,
    store: Arc<dyn Clock>,
    response_timeout: Duration,
) -> ResilientStore {
    registry.ledger = LedgerSettings {
        timeout: Duration::from_millis(500),
        on_error: OnError::Local,
        heartbeat: Duration::from_secs(3600),
    };
    let options = RedisStoreOptions {
        namespace: redis.namespace.clone(),
        clock: Some(store),
        response_timeout,
        lazy: true,
        ..RedisStoreOptions::default()
    };
    let shared = RedisStore::connect(&redis.url, &registry, options)
        .await
        .unwrap();
    ResilientStore::new(shared, &registry, Arc::new(clock.clone())).await
}

/// [`on_clocks`] with one clock for both and the one model of [`registry`].
async fn on_clock(redis: &TestRedis, clock: &ManualClock) -> ResilientStore {
    let store = Arc::new(clock.clone());
    on_clocks(redis, registry(), clock, store, Duration::from_millis(500)).await
}

/// An outage longer than a registration lasts: when Redis is back, no instance is registered
/// any more, and the first back still waits for the other to write back what it admitted on
/// its own, until the other does.
#[tokio::test]
async fn an_outage_longer_than_a_registration_still_has_the_first_back_wait_for_the_others() {
    let redis = redis_server();
    let clock = ManualClock::new(crate::support::T0);
    let (a, b) = (
        on_clock(&redis, &clock).await,
        on_clock(&redis, &clock).await,
    );
    for _ in 0..2 {
        a.heartbeat_now().await;
        b.heartbeat_now().await;
    }
    redis.pause();
    // Each admits its share, 5 of 10, on its own; their beats find no answer.
    let (ra, rb) = (fill(&a).await, fill(&b).await);
    assert_eq!((ra.len(), rb.len()), (5, 5));
    // Four hours: both registrations (three heartbeats) lapse. (No beat is sent meanwhile: a
    // paused Redis would run it once resumed, and register its sender again.)
    clock.advance_ms(4 * 3_600_000);
    redis.resume();
    // Within the minute of A's return, B's admissions (were they recent) would be missing
    // from the windows: A waits for B.
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Local);
    assert_eq!(admit(&a).await.unwrap(), None, "A waits for B");
    b.heartbeat_now().await;
    assert_eq!(b.status().mode, Mode::Shared, "B was the last one");
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Shared);
    assert!(admit(&a).await.unwrap().is_some());
}

/// A Redis restarted empty forgets the day's counts with its keys: the first instance back
/// writes them back as its last heartbeat read them, so a per-day limit still holds.
#[tokio::test]
async fn a_days_count_is_written_back_after_redis_restarted_empty() {
    let mut redis = redis_server();
    let registry = Registry::from_yaml_str(&one_model("rpm: 100, rpd: 5"), "test.yaml").unwrap();
    let a = by_hand(&redis, registry, OnError::Local).await;
    for _ in 0..3 {
        let r = admit(&a).await.unwrap().expect("room today");
        assert!(a.settle(&r, ActualUsage::tokens(5)).await.unwrap());
    }
    a.heartbeat_now().await;
    redis.restart();
    a.heartbeat_now().await;
    assert_eq!(a.status().mode, Mode::Shared);
    assert_eq!(
        fill(&a).await.len(),
        2,
        "5 a day, 3 used before the restart"
    );
}

mod accounts;
mod leases;
mod sweep;
