//! The machine's rules, each on a virtual clock: every call is given the time (ms), and the
//! store's answers are written out by hand (see `model.rs` for a simulated store).

use super::*;

const D: DeploymentId = DeploymentId(0);
const BEAT: Duration = Duration::from_millis(1_000);
/// When every test starts, ms: on a heartbeat.
const T0: u64 = 1_000_000;
/// Five heartbeats (ms): how long a machine waits for the others to write back.
const GRACE: u64 = 5_000;

/// A machine over one deployment limited by `limits` (YAML), with `ledger.on_error` and a
/// heartbeat of [`BEAT`], started at [`T0`].
fn machine(on_error: &str, limits: &str) -> Machine {
    let yaml = format!(
        "ledger: {{ on_error: {on_error}, heartbeat_ms: 1000 }}\n\
         providers:\n  - {{ name: p, api: openai, base_url: 'http://127.0.0.1:1/v1', \
         api_key_env: P_KEY, models: [{{ name: m, price: {{ input: 1, output: 2 }}, \
         limits: {{ {limits} }} }}] }}\n"
    );
    let registry = Registry::from_yaml_str(&yaml, "machine.yaml").unwrap();
    Machine::new(ScopeTable::new(&registry), Vec::new(), registry.ledger, T0)
}

fn rpm10(on_error: &str) -> Machine {
    machine(on_error, "rpm: 10")
}

fn timeout() -> LedgerError {
    LedgerError::Timeout {
        url: "redis://store".to_owned(),
        after: Duration::from_millis(50),
    }
}

fn need() -> Need {
    Need::new(1, Duration::from_secs(60))
}

/// `m`'s heartbeat sent at `now` is answered: `instances` alive, the windows held `read`
/// requests, in the epoch `m` knows. Returns whether the store is current for `m`.
fn answered(m: &mut Machine, instances: u64, read: u64, now: u64) -> bool {
    let number = m.reads.0.back().map_or(1, |r| r.read + 1);
    let beat = Beat {
        instances,
        epoch: m.epoch,
        read: number,
        oldest: number,
        scopes: vec![Counts::new(read, 0, 0, 0)],
        ..Beat::default()
    };
    let (base, own) = (m.own.clone(), m.in_flight_by_scope(&[]));
    m.beat_answered(beat, base, own, now)
}

/// What `m` decides here at `now` for a one-token request (it must not go to the store).
fn here(m: &mut Machine, now: u64) -> Result<Admission, LedgerError> {
    match m.route(&need(), &[D], now) {
        Route::Here(decided) => decided,
        Route::Store => panic!("routed to the store"),
        Route::Rebuilding => panic!("routed nowhere: rebuilding"),
    }
}

fn granted(m: &mut Machine, now: u64) -> Reservation {
    match here(m, now) {
        Ok(Admission::Granted(r)) => r,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Admits here at `now` until refused: how many were granted, and the refusal.
fn fill(m: &mut Machine, now: u64) -> (u64, Denial) {
    let mut n = 0;
    loop {
        match here(m, now) {
            Ok(Admission::Granted(_)) => n += 1,
            Ok(Admission::Denied(denial)) => return (n, denial),
            Err(e) => panic!("failed: {e}"),
        }
        assert!(n <= 100, "admits without end");
    }
}

/// `m` was seen by a heartbeat (`instances` alive, `read` requests in the windows); then the
/// store failed an admission, which went local. Returns the reservation it granted.
fn local(m: &mut Machine, instances: u64, read: u64) -> Reservation {
    answered(m, instances, read, T0);
    match m.fall_back(timeout(), &need(), &[D], T0) {
        Ok(Admission::Granted(r)) => r,
        other => panic!("expected a local grant, got {other:?}"),
    }
}

/// A reservation granted by the store at `now`, taken in as the driver does.
fn held_through_store(m: &mut Machine, now: u64) -> Reservation {
    let r = Reservation {
        id: fastrand::u64(1..),
        deployment: D,
        bucket: bucket_of(now),
        tokens: 1,
        input_tokens: 0,
        rank: 0,
        tenant: None,
    };
    m.remember(&Admitted::request(&r), now);
    let held = Held {
        reservation: r.clone(),
        expiry: now + 60_000,
    };
    m.in_flight.insert(r.id, held);
    r
}

/// `m`'s fallback from a store timeout at [`T0`] is that timeout.
fn fails_with_the_stores_error(m: &mut Machine) {
    let failed = m.fall_back(timeout(), &need(), &[D], T0);
    let timed_out = matches!(failed, Err(LedgerError::Timeout { .. }));
    assert!(timed_out, "{failed:?}");
}

fn restored(restored: u64, stale: bool, waiting: u64) -> Restored {
    Restored {
        epoch: 7,
        lost: false,
        restored,
        stale,
        waiting,
    }
}

/// What follows a restore that wrote nothing, answered with `r` at `now`.
fn after(m: &mut Machine, r: Restored, now: u64) -> Next {
    m.restored(&r, &[], now).1
}

fn is_rebuilding(m: &mut Machine, now: u64) -> bool {
    matches!(m.route(&need(), &[D], now), Route::Rebuilding)
}

/// Without a heartbeat answered, how many instances share the limits is unknown: no share is
/// safe, and a failed admission fails as under `closed`.
#[test]
fn a_machine_never_seen_by_a_heartbeat_fails_as_closed_under_on_error_local() {
    let mut m = rpm10("local");
    fails_with_the_stores_error(&mut m);
    assert_eq!((m.mode(), m.health(T0).changes), (Mode::Shared, 0));
}

/// Local mode admits the limit ÷ the instances (rounded down), less this instance's share of
/// what its last heartbeat read (rounded up): 10 ÷ 3 → 3, less ⌈2 ÷ 3⌉ = 1.
#[test]
fn a_failed_admission_goes_local_and_admits_exactly_its_share_of_what_is_left() {
    let mut m = rpm10("local");
    let _ = local(&mut m, 3, 2);
    assert_eq!(m.mode(), Mode::Local);
    let (more, _) = fill(&mut m, T0);
    assert_eq!(1 + more, 2, "the one that fell back, and one more");
    let health = m.health(T0 + 500);
    assert_eq!((health.instances, health.local_admissions), (3, 2));
    assert_eq!(health.since, Duration::from_millis(500));
}

/// A share stands in until the next heartbeat, which may find the store back: a full share
/// says to ask again within a heartbeat, not when the window turns.
#[test]
fn a_full_local_share_refuses_for_no_longer_than_a_heartbeat() {
    let mut m = rpm10("local");
    let _ = local(&mut m, 3, 2);
    let (_, denial) = fill(&mut m, T0 + 10);
    // Not when the window turns, in about a minute.
    assert_eq!(denial.retry_after(), Some(BEAT));
}

/// What this instance admitted through the store after its last reading is in no share of
/// that reading: local mode counts it whole.
#[test]
fn admissions_through_the_store_since_the_last_reading_count_whole_in_local_mode() {
    let mut m = rpm10("local");
    answered(&mut m, 2, 2, T0);
    for _ in 0..2 {
        let r = held_through_store(&mut m, T0);
        let finished = m.finish_here(&r, Some(ActualUsage::tokens(1)), T0);
        assert!(matches!(finished, Ok(None)), "the store's: {finished:?}");
    }
    let first = m.fall_back(timeout(), &need(), &[D], T0);
    assert!(matches!(first, Ok(Admission::Granted(_))), "{first:?}");
    // 10 ÷ 2 = 5, less ⌈2 ÷ 2⌉ = 1 read, less the 2 since: 2.
    assert_eq!(1 + fill(&mut m, T0).0, 2);
}

/// `open` admits without counting, however many; `closed` fails with the store's error and
/// keeps sending admissions to the store.
#[test]
fn on_error_open_admits_uncounted_and_closed_returns_the_error() {
    let mut open = rpm10("open");
    // Unseen by a heartbeat too.
    let first = open.fall_back(timeout(), &need(), &[D], T0);
    assert!(matches!(first, Ok(Admission::Granted(_))), "{first:?}");
    assert_eq!(open.mode(), Mode::Open);
    let r = granted(&mut open, T0);
    for _ in 0..50 {
        let _ = granted(&mut open, T0);
    }
    assert_eq!(open.health(T0).local_admissions, 52);
    assert!(matches!(open.finish_here(&r, None, T0), Ok(Some(true))));

    let mut closed = rpm10("closed");
    answered(&mut closed, 1, 0, T0);
    fails_with_the_stores_error(&mut closed);
    assert_eq!(closed.mode(), Mode::Shared);
    assert!(matches!(closed.route(&need(), &[D], T0), Route::Store));
}

/// A heartbeat that gets no answer puts a shared instance local (under `local`, once seen),
/// so that it too waits for the others before it admits through the store again.
#[test]
fn a_failed_heartbeat_puts_a_seen_machine_local_and_no_other() {
    let mut unseen = rpm10("local");
    unseen.beat_failed(&timeout(), T0);
    assert_eq!(unseen.mode(), Mode::Shared);
    let mut closed = rpm10("closed");
    answered(&mut closed, 1, 0, T0);
    closed.beat_failed(&timeout(), T0);
    assert_eq!(closed.mode(), Mode::Shared);
    let mut seen = rpm10("local");
    answered(&mut seen, 1, 0, T0);
    seen.beat_failed(&timeout(), T0);
    assert_eq!(seen.mode(), Mode::Local);
}

/// A beat is current only in the epoch the machine knows, and only while what the store reads
/// holds all it admitted (not while local).
#[test]
fn a_beat_is_current_only_in_the_known_epoch_and_while_not_local() {
    let mut m = rpm10("local");
    assert!(!answered(&mut m, 1, 0, T0), "no epoch stored yet");
    m.epoch = 7;
    assert!(answered(&mut m, 1, 0, T0));
    m.go_local(T0, None, None);
    assert!(!answered(&mut m, 1, 0, T0), "local: its log is not written");
}

/// Planning a restore stops local admission, so that the snapshot is all it admitted; a
/// request is told to ask again at the next tenth of a heartbeat.
#[test]
fn a_restore_planned_while_local_stops_local_admission_for_a_tenth_of_a_heartbeat() {
    let mut m = rpm10("local");
    let _ = local(&mut m, 1, 0);
    let round = m.plan_restore(T0 + 10);
    assert_eq!((round.snapshot.len(), round.complete), (1, true));
    assert!(m.rejoining());
    let (n, denial) = fill(&mut m, T0 + 10);
    assert_eq!(n, 0);
    assert_eq!(denial.retry_after(), Some(BEAT / 10));
    assert_eq!(denial.refusals[0].scope, Scope::Deployment);
}

/// The heartbeat wakes ten times as often while the machine waits to rejoin, on the same grid.
#[test]
fn poll_timeout_is_a_tenth_of_a_heartbeat_while_rejoining() {
    let mut m = rpm10("local");
    assert_eq!(m.poll_timeout(T0 + 250, T0), 750);
    let _ = local(&mut m, 1, 0);
    assert_eq!(m.poll_timeout(T0 + 250, T0), 750, "local, not rejoining");
    let _ = m.plan_restore(T0 + 250);
    assert_eq!(m.poll_timeout(T0 + 250, T0), 50);
}

/// A restore that wrote the whole log, with no other instance waiting, goes shared; what it
/// wrote counts as admitted through the store, and what is still in flight is held there.
#[test]
fn a_restore_of_the_whole_log_with_none_waiting_goes_shared_and_holds_what_is_in_flight() {
    let mut m = rpm10("local");
    let settled = local(&mut m, 1, 0);
    let done = m.finish_here(&settled, Some(ActualUsage::tokens(1)), T0);
    assert!(matches!(done, Ok(Some(true))), "{done:?}");
    let flying = granted(&mut m, T0);
    let round = m.plan_restore(T0 + 100);
    let (owed, next) = m.restored(&restored(1, false, 0), &round.snapshot, T0 + 100);
    assert_eq!((owed.len(), next, m.mode()), (0, Next::Done, Mode::Shared));
    let ids: Vec<u64> = m.in_flight.keys().copied().collect();
    assert_eq!(ids, [flying.id]);
    assert_eq!(m.own.scopes[0].requests, 2, "both count as its own now");
    assert!(matches!(m.route(&need(), &[D], T0 + 100), Route::Store));
}

/// An entry written in flight and settled before the answer came holds the estimate in the
/// store: its settlement is owed to the store, and it is not held in flight.
#[test]
fn an_entry_settled_while_its_restore_was_out_is_owed_to_the_store() {
    let mut m = rpm10("local");
    let r = local(&mut m, 1, 0);
    let round = m.plan_restore(T0);
    let used = ActualUsage::tokens(3);
    assert!(matches!(m.finish_here(&r, Some(used), T0), Ok(Some(true))));
    let (owed, next) = m.restored(&restored(1, false, 0), &round.snapshot, T0);
    assert_eq!(owed, [(r, Some(used))]);
    assert_eq!(next, Next::Done);
    assert!(m.in_flight.is_empty());
}

/// Written back while another instance still holds admissions of its own: it waits, admitting
/// nothing, for at most five heartbeats from when it began writing back.
#[test]
fn a_restore_waits_for_the_others_for_at_most_five_heartbeats() {
    let mut m = rpm10("local");
    let _ = local(&mut m, 2, 0);
    let round = m.plan_restore(T0);
    let (_, next) = m.restored(&restored(1, false, 1), &round.snapshot, T0);
    assert_eq!((next, m.mode()), (Next::Wait, Mode::Local));
    assert_eq!(fill(&mut m, T0).0, 0);
    let grace = T0 + GRACE;
    let again = m.plan_restore(grace - 1);
    assert!(again.snapshot.is_empty());
    assert_eq!(after(&mut m, restored(1, false, 1), grace - 1), Next::Wait);
    let _ = m.plan_restore(grace);
    assert_eq!(after(&mut m, restored(1, false, 1), grace), Next::Done);
    assert_eq!(m.mode(), Mode::Shared);
}

/// A restore whose reply never came is sent again as it was (applied at most once); local
/// admissions made since follow in another round.
#[test]
fn a_restore_sent_again_carries_its_first_snapshot_and_another_round_follows() {
    let mut m = rpm10("local");
    let first = local(&mut m, 1, 0);
    let round = m.plan_restore(T0);
    m.pending = Some(Numbered {
        seq: round.seq,
        sent: round.snapshot.clone(),
    });
    m.away_again();
    let second = granted(&mut m, T0);
    let again = m.plan_restore(T0 + 100);
    assert_eq!((again.seq, again.complete), (round.seq, false));
    let (_, next) = m.restored(&restored(1, false, 0), &again.snapshot, T0 + 100);
    assert_eq!(next, Next::Again);
    let last = m.plan_restore(T0 + 100);
    assert!(last.seq > round.seq && last.complete);
    let ids: Vec<u64> = last.snapshot.iter().map(|e| e.reservation.id).collect();
    assert_eq!(ids, [second.id]);
    assert_ne!(first.id, second.id);
}

/// Under `closed`, a store that lost its keys admits nothing until every instance seen has
/// written its own back into the new epoch.
#[test]
fn a_stale_restore_under_closed_rebuilds_until_every_instance_wrote_back() {
    let mut m = rpm10("closed");
    answered(&mut m, 3, 0, T0);
    assert_eq!(after(&mut m, restored(1, true, 0), T0), Next::Wait);
    assert!(is_rebuilding(&mut m, T0));
    assert_eq!(after(&mut m, restored(2, false, 0), T0 + 100), Next::Wait);
    assert!(is_rebuilding(&mut m, T0 + 100));
    assert_eq!(after(&mut m, restored(3, false, 0), T0 + 200), Next::Done);
    assert!(matches!(m.route(&need(), &[D], T0 + 200), Route::Store));
}

/// An instance that cannot write back (stopped, or cut off) is waited for five heartbeats.
#[test]
fn a_stale_restore_under_closed_stops_rebuilding_after_five_heartbeats() {
    let mut m = rpm10("closed");
    answered(&mut m, 3, 0, T0);
    let _ = after(&mut m, restored(1, true, 0), T0);
    let grace = T0 + GRACE;
    let _ = after(&mut m, restored(1, false, 0), grace - 1);
    assert!(is_rebuilding(&mut m, grace - 1));
    let _ = after(&mut m, restored(1, false, 0), grace);
    assert!(matches!(m.route(&need(), &[D], grace), Route::Store));
}

/// Under `local`, the wait after the store lost its keys is spent local and closing: what it
/// admitted on its own would be missing when the others go back to the windows.
#[test]
fn a_stale_restore_under_local_waits_local_and_admits_nothing() {
    let mut m = rpm10("local");
    answered(&mut m, 3, 0, T0);
    assert_eq!(after(&mut m, restored(1, true, 0), T0), Next::Wait);
    assert_eq!(m.mode(), Mode::Local);
    assert!(m.rejoining() && m.awaiting().is_some());
    let (n, denial) = fill(&mut m, T0);
    assert_eq!((n, denial.retry_after()), (0, Some(BEAT / 10)));
    assert_eq!(after(&mut m, restored(3, false, 0), T0 + 100), Next::Done);
    assert_eq!(m.mode(), Mode::Shared);
}

/// A heartbeat that fails while the machine writes back or waits puts it back to admitting on
/// its own share.
#[test]
fn a_beat_failing_while_it_rejoins_reopens_local_admission() {
    let mut m = rpm10("local");
    let _ = local(&mut m, 1, 0);
    let _ = m.plan_restore(T0);
    assert!(m.rejoining());
    m.beat_failed(&timeout(), T0 + 100);
    assert!(!m.rejoining());
    let _ = granted(&mut m, T0 + 100);
}

/// A reservation the store granted and the instance finishes while local: the store settles
/// it (`Ok(None)`), and the concurrency slot it held in the local ledger is free again.
#[test]
fn a_shared_reservation_finished_while_local_frees_its_slot_here() {
    let mut m = machine("local", "rpm: 100, concurrency: 2");
    answered(&mut m, 1, 0, T0);
    let r = held_through_store(&mut m, T0);
    let _ = held_through_store(&mut m, T0);
    m.beat_failed(&timeout(), T0 + 100);
    let (n, denial) = fill(&mut m, T0 + 100);
    assert_eq!(n, 0);
    assert_eq!(denial.refusals[0].limit, LimitKind::Concurrency);
    assert!(matches!(m.finish_here(&r, None, T0 + 200), Ok(None)));
    assert!(!m.in_flight.contains_key(&r.id));
    assert_eq!(fill(&mut m, T0 + 200).0, 1);
}

/// A per-day limit is no share: what the day has used is known only to the store, so local
/// mode admits nothing against it for the whole outage, however roomy the minute limits.
#[test]
fn local_mode_admits_nothing_against_a_per_day_limit() {
    let mut m = machine("local", "rpm: 1000, rpd: 100000");
    answered(&mut m, 1, 0, T0);
    let fell_back = m.fall_back(timeout(), &need(), &[D], T0);
    let Ok(Admission::Denied(denial)) = fell_back else {
        panic!("expected a refusal, got {fell_back:?}");
    };
    assert_eq!(denial.refusals[0].limit, LimitKind::Cooldown);
    assert_eq!(fill(&mut m, T0 + 30_000).0, 0);
}
