use super::*;
use std::time::Duration;

const D: DeploymentId = DeploymentId(0);

/// A block granted in `bucket` by a store whose clock read the bucket's start when this
/// instance's read 0.
fn grant(requests: u64, tokens: Option<u64>, bucket: u64) -> Granted {
    Granted {
        requests,
        tokens,
        bucket,
        store_now: bucket * 1_000,
        sent: 0,
        now: 0,
        send_by: 50_000,
    }
}

/// A block of 10 requests and 1,000 tokens granted in bucket 7, the store's clock reading
/// `store_now` between this instance's `sent` and `now`.
fn granted_in_7(store_now: u64, sent: u64, now: u64) -> Granted {
    Granted {
        requests: 10,
        tokens: Some(1_000),
        bucket: 7,
        store_now,
        sent,
        now,
        send_by: 60_000,
    }
}

fn need(tokens: u64) -> Need {
    Need::new(tokens, Duration::from_secs(60)).with_input_tokens(tokens / 2)
}

#[test]
fn a_block_admits_up_to_its_size_then_owes_what_was_unused() {
    let mut l = Leases::default();
    l.open(D, grant(3, Some(100), 7), 5_000);
    let a = l.take(D, &need(40), 0, 1).unwrap();
    let b = l.take(D, &need(40), 0, 1).unwrap();
    assert_eq!(a.bucket, 7);
    assert!(
        l.take(D, &need(40), 0, 1).is_none(),
        "tokens: 80 + 40 > 100"
    );
    assert!(l.take(D, &need(20), 0, 1).is_some());
    assert!(l.take(D, &need(1), 0, 1).is_none(), "requests: 3 taken");
    // Nothing owed while the block is open.
    assert_eq!(l.drain(2), vec![]);
    assert!(l.finish(a.id, Some(ActualUsage::split(10, 5))));
    assert!(l.finish(b.id, None));
    assert!(!l.finish(b.id, None), "finished once");
    l.end(D);
    // The third is in flight, counted as reserved (20 tokens, 10 in, 10 out). Used: 2
    // requests, 15 + 20 tokens, 10 + 10 input, 5 + 10 output; granted 3 and 100. What the
    // block did not hand out is owed at once.
    let owe = |deltas| {
        vec![Owed {
            deployment: D,
            bucket: 7,
            deltas,
            observed: None,
        }]
    };
    assert_eq!(l.drain(3), owe(Deltas::from([-1, -65, -80, -85])));
    // The third settles for 10 in and 25 out: 15 more than it reserved, owed on its own.
    let third = *l.admitted.keys().next().unwrap();
    l.finish(third, Some(ActualUsage::split(10, 25)));
    assert_eq!(l.drain(4), owe(Deltas::from([0, 15, 0, 15])));
}

#[test]
fn a_request_of_u64_max_tokens_does_not_fit_a_block_in_use() {
    let mut l = Leases::default();
    l.open(D, grant(3, Some(100), 7), 5_000);
    assert!(l.take(D, &need(40), 0, 1).is_some());
    assert!(l.take(D, &need(u64::MAX), 0, 1).is_none());
    assert!(
        l.take(D, &need(60), 0, 1).is_some(),
        "the block's room is intact"
    );
}

#[test]
fn a_request_whose_second_the_store_could_read_either_way_counts_in_the_later() {
    let mut l = Leases::default();
    // Sent at 1,000 here, answered at 1,010; the store's clock read 7,995 in between, so it
    // is 6,985 to 6,995 ms ahead, and a ms more either way as both count whole ms.
    l.open(D, granted_in_7(7_995, 1_000, 1_010), 20_000);
    // The request it was asked for: admitted with the grant, in its second.
    let asked = l.take_asked(D, &need(40), 0, 1_010).unwrap();
    assert_eq!(asked.bucket, 7);
    let at = |l: &mut Leases, now| l.take(D, &need(40), 0, now).unwrap().bucket;
    assert_eq!(at(&mut l, 1_003), 7, "the store's clock at 7,987 to 7,999");
    assert_eq!(at(&mut l, 1_010), 8, "7,994 to 8,006");
    assert_eq!(at(&mut l, 1_015), 8, "7,999 to 8,011");
    assert_eq!(at(&mut l, 1_016), 8, "8,000 to 8,012");
    l.end(D);
    let mut owed = l.drain(1_100);
    owed.sort_by_key(|o| o.bucket);
    let deltas: Vec<(u64, Deltas)> = owed.iter().map(|o| (o.bucket, o.deltas)).collect();
    assert_eq!(
        deltas,
        vec![
            (7, Deltas::from([-8, -920, -960, -960])),
            (8, Deltas::from([3, 120, 60, 60]))
        ]
    );
}

#[test]
fn a_block_whose_call_saw_the_clock_step_admits_nothing_but_its_grants_request() {
    let mut l = Leases::default();
    // The clock here was set an hour forward while the call was out.
    l.open(D, granted_in_7(7_995, 1_000, 3_601_000), 3_620_000);
    assert!(l.take_asked(D, &need(40), 0, 3_601_000).is_some());
    assert!(l.take(D, &need(40), 0, 3_601_000).is_none());
}

#[test]
fn a_request_admitted_in_a_later_second_than_the_grant_is_moved_to_its_own() {
    let mut l = Leases::default();
    // Granted in bucket 7, the store's clock reading 7,400 ms when this instance's read 1,000.
    l.open(D, granted_in_7(7_400, 1_000, 1_000), 20_000);
    let a = l.take(D, &need(40), 0, 1_500).unwrap();
    assert_eq!(
        a.bucket, 7,
        "the store's clock at 7,900: the grant's second"
    );
    assert_eq!(l.send_by(), None);
    let b = l.take(D, &need(40), 0, 3_700).unwrap();
    assert_eq!(b.bucket, 10, "the store's clock at 10,100");
    assert_eq!(l.send_by(), Some(60_000), "a move to send in time");
    // It settles for 10 in and 5 out (it reserved 20 and 20): its settlement goes with it.
    assert!(l.finish(b.id, Some(ActualUsage::split(10, 5))));
    let mut owed = l.drain(3_800);
    owed.sort_by_key(|o| o.bucket);
    let at = |bucket, deltas| Owed {
        deployment: D,
        bucket,
        deltas,
        observed: None,
    };
    assert_eq!(
        owed,
        vec![
            at(7, Deltas::from([-1, -15, -10, -5])),
            at(10, Deltas::from([1, 15, 10, 5]))
        ]
    );
    assert_eq!(l.send_by(), None, "sent");
}

#[test]
fn a_block_granted_no_tokens_admits_nothing_that_needs_some() {
    let mut l = Leases::default();
    l.open(D, grant(5, Some(0), 7), 5_000);
    assert!(l.take(D, &need(10), 0, 1).is_none());
    // Tokens not leased (no token limit): only requests count.
    l.open(D, grant(5, None, 7), 5_000);
    assert!(l.take(D, &need(10), 0, 1).is_some());
}

#[test]
fn a_block_that_ends_with_requests_in_flight_hands_back_its_unused_part_to_the_next_call() {
    let mut l = Leases::default();
    l.open(D, grant(4, Some(1_000), 7), 5_000);
    let a = l.take(D, &need(600), 0, 1).unwrap();
    assert!(l.take(D, &need(600), 0, 2).is_none(), "600 + 600 > 1000");
    // Asking for the next block ends this one: its 400 unused tokens and 3 requests go with
    // that call, while the first request is still in flight.
    l.end(D);
    assert_eq!(
        l.take_owed(D),
        vec![(7, Deltas::from([-3, -400, -700, -700]))]
    );
    l.finish(a.id, Some(ActualUsage::split(300, 300)));
    assert_eq!(l.take_owed(D), vec![], "it used what it reserved");
}

#[test]
fn a_report_goes_with_its_deployments_last_correction_after_a_moves_addition() {
    let mut l = Leases::default();
    let other = DeploymentId(1);
    l.open(D, grant(2, Some(200), 7), 50_000);
    l.open(other, grant(2, Some(200), 7), 50_000);
    assert!(l.take(D, &need(100), 0, 1).is_some());
    // In the next second: moved to bucket 8, a correction there and one back in 7.
    assert!(l.take(D, &need(100), 0, 1_500).is_some());
    assert!(l.take(other, &need(100), 0, 1).is_some());
    l.end_all();
    l.report(D, Observation::default());
    l.report(other, Observation::default());
    let drained: Vec<(usize, u64, bool)> = l
        .drain(1_501)
        .iter()
        .map(|o| (o.deployment.0, o.bucket, o.observed.is_some()))
        .collect();
    assert_eq!(drained, vec![(0, 8, false), (0, 7, true), (1, 7, true)]);
}

#[test]
fn a_block_ends_when_it_expires_and_late_settlements_are_owed_alone() {
    let mut l = Leases::default();
    l.open(D, grant(10, None, 7), 5_000);
    let a = l.take(D, &need(40), 0, 1).unwrap();
    assert!(l.take(D, &need(40), 0, 5_000).is_none(), "expired");
    l.end_all();
    // No token limit: tokens were not leased, so all the request's count is added.
    assert_eq!(l.drain(5_001)[0].deltas, [-9, 40, 20, 20]);
    l.finish(a.id, Some(ActualUsage::split(30, 30)));
    assert_eq!(l.drain(5_002)[0].deltas, [0, 20, 10, 10]);
}

#[test]
fn a_deployment_short_of_room_is_asked_again_by_requests_that_fit_it_or_once_the_time_is_up() {
    let mut l = Leases::default();
    let room = |requests, tokens| Room { requests, tokens };
    assert!(!l.lacks_room(D, 500, 0), "nothing seen yet");
    l.saw_room(D, room(3, 400), 0);
    assert!(l.lacks_room(D, 500, 1_000));
    assert!(!l.lacks_room(D, 400, 1_000), "it fits what was left");
    assert!(!l.lacks_room(D, 500, ROOM_TRUSTED_MS), "time is up");
    l.saw_room(D, room(0, 10_000), 0);
    assert!(l.lacks_room(D, 1, 1_000), "no request left");
    l.saw_room(D, room(5, u64::MAX), 0);
    assert!(!l.lacks_room(D, 1_000_000, 1_000), "no token limit");
}

#[test]
fn the_room_a_new_block_would_find_counts_what_this_instance_holds_and_owes_on_it() {
    let mut l = Leases::default();
    let room = |requests, tokens| Room { requests, tokens };
    // A block of 4 requests and 1,000 tokens, granted with 300 tokens left after it.
    l.open(D, grant(4, Some(1_000), 7), 5_000);
    l.saw_room(D, room(10, 300), 0);
    assert!(l.take(D, &need(600), 0, 1).is_some());
    // 800 > 300 read, but the block's unused 400 goes back with the call for the next one.
    assert!(l.take(D, &need(800), 0, 2).is_none());
    assert!(!l.lacks_room(D, 700, 2), "300 + 400 left");
    assert!(l.lacks_room(D, 701, 2));
    // Ended (its unused part is owed back), the same holds until the next call carries it.
    l.end(D);
    assert!(!l.lacks_room(D, 700, 3));
    assert!(l.lacks_room(D, 701, 3));
    // The next call carries that, and reads the room after its grant; what a request the
    // new block admitted uses beyond its reservation counts against it too.
    assert!(!l.take_owed(D).is_empty());
    l.saw_room(D, room(1, 300), 4);
    l.open(D, grant(2, Some(300), 8), 5_000);
    let a = l.take(D, &need(100), 0, 5).unwrap();
    l.finish(a.id, Some(ActualUsage::split(100, 50)));
    assert!(
        !l.lacks_room(D, 450, 6),
        "300 read and 150 of the block: it used 50 beyond the request's reservation"
    );
    assert!(l.lacks_room(D, 451, 6));
    let b = l.take(D, &need(100), 0, 6).unwrap();
    l.end(D);
    assert!(!l.lacks_room(D, 350, 7), "300 read, 50 owed back");
    // Settled 30 beyond its reservation once its block ended: owed apart, it counts too.
    l.finish(b.id, Some(ActualUsage::split(50, 80)));
    assert!(l.lacks_room(D, 321, 7));
    assert!(!l.lacks_room(D, 320, 7));
    // A cooldown leaves no room, whatever is held.
    l.open(D, grant(5, Some(1_000), 9), 5_000);
    l.saw_cooldown(D, 1_000, 7);
    assert!(l.lacks_room(D, 1, 8));
}

#[test]
fn corrections_to_a_second_that_left_the_windows_count_as_the_store_counts_them() {
    let room = |requests, tokens| Room { requests, tokens };
    // Granted in second 7 when this instance's clock read 0: second 7 leaves the windows at
    // 61 s here. The block's unused 400 tokens are owed back there.
    let mut l = Leases::default();
    l.open(D, grant(4, Some(1_000), 7), 5_000);
    assert!(l.take(D, &need(600), 0, 1).is_some());
    l.end(D);
    l.saw_room(D, room(10, 300), 60_000);
    assert!(!l.lacks_room(D, 700, 60_500), "300 read, 400 owed back");
    assert!(l.lacks_room(D, 701, 60_500));
    // Read before the second left: its leaving frees at least what is given back in it.
    assert!(!l.lacks_room(D, 700, 61_000));
    assert!(l.lacks_room(D, 701, 61_000));
    // Read after: the reading did not count it, and the store drops the give-back.
    l.saw_room(D, room(10, 300), 61_000);
    assert!(!l.lacks_room(D, 300, 61_500));
    assert!(l.lacks_room(D, 301, 61_500));

    // A full block whose request settled 30 tokens beyond its reservation after it ended.
    let mut l = Leases::default();
    l.open(D, grant(1, Some(100), 7), 5_000);
    let a = l.take(D, &need(100), 0, 1).unwrap();
    l.end(D);
    l.finish(a.id, Some(ActualUsage::split(50, 80)));
    l.saw_room(D, room(10, 300), 60_000);
    assert!(!l.lacks_room(D, 270, 60_500), "300 read, 30 owed on top");
    assert!(l.lacks_room(D, 271, 60_500));
    // The second left since: the store drops what is added there.
    assert!(!l.lacks_room(D, 300, 61_000));
    assert!(l.lacks_room(D, 301, 61_000));
}

#[test]
fn a_heartbeat_reading_replaces_an_older_one_and_not_a_newer_one_or_a_cooldown() {
    let mut l = Leases::default();
    let room = |tokens| Room {
        requests: 10,
        tokens,
    };
    l.saw_room(D, room(100), 1_000);
    // A beat sent after that answer came: its reading is newer, and keeps being trusted.
    l.beat_saw_room(D, room(900), 2_000);
    assert!(
        !l.lacks_room(D, 500, 2_100),
        "room came back: a request that fits asks"
    );
    l.beat_saw_room(D, room(100), 3_000);
    assert!(
        l.lacks_room(D, 500, 6_500),
        "still short, read again at 3 s"
    );
    // A beat sent before a lease call's answer came reads no later than that call did.
    l.saw_room(D, room(100), 7_000);
    l.beat_saw_room(D, room(900), 6_900);
    assert!(l.lacks_room(D, 500, 7_100));
    // Heartbeats do not say a deployment cools down: until it ends, they replace nothing.
    l.saw_cooldown(D, 20_000, 8_000);
    l.beat_saw_room(D, room(900), 9_000);
    assert!(l.lacks_room(D, 1, 27_900), "cooling down");
    l.beat_saw_room(D, room(900), 28_000);
    assert!(
        !l.lacks_room(D, 500, 28_100),
        "the cooldown is over and there is room"
    );
}

#[test]
fn a_block_call_asked_again_counts_what_it_carried_once_and_gives_its_grant_back() {
    let mut l = Leases::default();
    let call = |sent| Unanswered {
        deployment: D,
        call: 1,
        carried: vec![
            (7, Deltas::from([0, 20, 20, 0])),
            (8, Deltas::from([0, -980, 0, -980])),
        ],
        sent,
    };
    let drained = |l: &mut Leases| {
        let mut owed: Vec<(u64, Deltas)> = l
            .drain(0)
            .into_iter()
            .map(|o| (o.bucket, o.deltas))
            .collect();
        owed.sort();
        owed
    };
    l.unanswered(call(1_000));
    // Until it is answered, what it adds is owed again (a heartbeat carries it).
    assert_eq!(drained(&mut l), vec![(7, Deltas::from([0, 20, 20, 0]))]);
    let again = l.take_unanswered(2_000);
    assert_eq!(again, vec![call(1_000)]);
    assert!(l.take_unanswered(2_000).is_empty(), "taken");
    // Answered: it granted 2 requests and 1,000 tokens in bucket 9, and applied what it
    // carried, so what the heartbeat added again is taken off.
    for u in again {
        l.answered_late(u, Some((9, 2, 1_000)));
    }
    assert_eq!(
        drained(&mut l),
        vec![
            (7, Deltas::from([0, -20, -20, 0])),
            (9, Deltas::from([-2, -1_000, -1_000, -1_000]))
        ]
    );
    // Not answered again: kept; sent too long ago to be answered as it was: given up.
    l.unanswered(call(1_000));
    l.drain(0);
    for u in l.take_unanswered(30_999) {
        l.still_unanswered(u);
    }
    assert_eq!(l.take_unanswered(30_999).len(), 1);
    l.unanswered(call(1_000));
    assert!(l.take_unanswered(31_000).is_empty());
}

#[test]
fn a_correction_that_may_have_been_applied_keeps_what_it_adds_and_not_what_it_takes_away() {
    let mut l = Leases::default();
    let report = Observation::default();
    l.owe_unsure(Owed {
        deployment: D,
        bucket: 7,
        deltas: Deltas::from([0, -980, 20, -1000]),
        observed: Some(report),
    });
    assert_eq!(
        l.drain(0),
        vec![Owed {
            deployment: D,
            bucket: 7,
            deltas: Deltas::from([0, 0, 20, 0]),
            observed: Some(report),
        }]
    );
    // Nothing that adds: nothing owed.
    l.owe_unsure(Owed {
        deployment: D,
        bucket: 7,
        deltas: Deltas::from([-1, -980, 0, 0]),
        observed: None,
    });
    assert!(l.drain(0).is_empty());
}

#[test]
fn the_rate_counts_the_last_ten_seconds() {
    let mut l = Leases::default();
    l.open(D, grant(100, None, 1), 60_000);
    for t in [0, 1_500, 9_500, 12_500] {
        assert!(l.take(D, &need(30), 0, t).is_some());
    }
    assert_eq!(l.rate(12_500), (2, 30));
}
