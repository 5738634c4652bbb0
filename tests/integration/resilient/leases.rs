//! Leased blocks of the resilient store against a real Redis: never over a limit, a call per
//! block, corrections and moves between seconds, cooldowns, batch shares, close.

use super::*;

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
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let a = super::on_clocks(
        redis,
        registry.clone(),
        clock,
        store,
        Duration::from_secs(5),
    )
    .await;
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
