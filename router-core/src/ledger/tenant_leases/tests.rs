use super::*;

const T: &str = "acme";
const WINDOW: WindowUse = WindowUse {
    requests: 40,
    tokens: 4_000,
};

fn a(requests: u64, tokens: u64, micros: u64) -> Amounts {
    Amounts {
        requests,
        tokens,
        micros,
    }
}

/// A block of 3 requests, 300 tokens, 30 micro-USD, counted in second 100 whose store clock
/// read 100.4 s when this instance's read 50.0 s (sent) .. 50.01 s.
fn opened() -> Blocks {
    let mut b = Blocks::default();
    b.open(T, a(3, 300, 30), 100, WINDOW, (100_400, 50_000));
    b
}

#[test]
fn a_block_admits_only_while_its_second_surely_lasts_on_the_store() {
    let mut b = opened();
    // The store's clock ran at most 0.6 s past its reading since 50.0 s here: until 50.6 s.
    assert_eq!(b.take(T, 1, a(1, 100, 10), 50_599), Some(100));
    assert_eq!(b.window(T), Some(WINDOW), "the grant's reading");
    assert_eq!(
        b.take(T, 2, a(1, 100, 10), 50_600),
        None,
        "its second may be over"
    );
    // It ended: what it did not hand out is owed back, in its second.
    assert_eq!(
        b.take_owed(T),
        vec![TenantCorrection {
            bucket: 100,
            deltas: [-2, -200, -20]
        }]
    );
    assert!(b.holds(1));
}

#[test]
fn a_request_takes_only_what_fits_in_every_part() {
    let mut b = opened();
    assert_eq!(b.take(T, 1, a(1, 250, 10), 50_100), Some(100));
    assert_eq!(b.take(T, 2, a(1, 100, 10), 50_100), None, "tokens short");
    assert_eq!(b.take(T, 3, a(1, 50, 21), 50_100), None, "micro-USD short");
    assert_eq!(b.take(T, 4, a(1, 50, 20), 50_100), Some(100));
    assert_eq!(b.take(T, 5, a(1, 0, 0), 50_100), Some(100));
    assert_eq!(b.take(T, 6, a(1, 0, 0), 50_100), None, "requests short");
    assert_eq!(b.take(T, 7, a(1, 0, 0), 50_100), None);
    assert_eq!(b.take("other", 8, a(1, 0, 0), 50_100), None, "no block");
}

#[test]
fn settling_in_its_block_changes_its_room_and_after_it_is_owed() {
    let mut b = opened();
    b.take(T, 1, a(1, 200, 20), 50_100).unwrap();
    // Settled at 80 tokens and 8 micro-USD: the block has 220 tokens and 22 micro-USD again.
    assert!(b.finish(1, Some(a(1, 80, 8))));
    assert!(!b.finish(1, Some(a(1, 80, 8))), "once");
    assert_eq!(b.take(T, 2, a(1, 220, 22), 50_100), Some(100));
    b.end(T);
    // Handed out 2 requests, 300 tokens, 30 micro-USD (80 + 220; 8 + 22): one request back.
    assert_eq!(b.take_owed(T)[0].deltas, [-1, 0, 0]);
    // Settled after its block ended: its own correction is owed.
    assert!(b.finish(2, Some(a(1, 500, 40))));
    assert_eq!(
        b.take_owed(T),
        vec![TenantCorrection {
            bucket: 100,
            deltas: [0, 280, 18]
        }]
    );
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn a_released_request_gives_back_all_it_took_and_a_resize_what_it_did_not_need() {
    let mut b = opened();
    b.take(T, 1, a(1, 200, 20), 50_100).unwrap();
    assert!(b.resize(1, a(1, 120, 5)));
    assert!(!b.resize(9, a(1, 1, 1)), "not taken here");
    b.end(T);
    assert_eq!(b.take_owed(T)[0].deltas, [-2, -180, -25]);
    assert!(b.finish(1, None));
    assert_eq!(b.take_owed(T)[0].deltas, [-1, -120, -5]);
}

#[test]
fn corrections_of_one_second_add_up_and_vanish_at_zero() {
    let mut b = opened();
    b.take(T, 1, a(1, 100, 10), 50_100).unwrap();
    b.take(T, 2, a(1, 100, 10), 50_100).unwrap();
    b.end(T);
    let _ = b.take_owed(T);
    b.finish(1, Some(a(1, 150, 10)));
    b.finish(2, Some(a(1, 50, 10)));
    assert!(b.take_owed(T).is_empty(), "+50 and -50 tokens cancel");
    assert!(b.owing().is_empty());
}

#[test]
fn a_block_is_sized_from_the_last_second_and_a_share_of_the_room() {
    let mut b = opened();
    b.take(T, 1, a(1, 100, 10), 50_100).unwrap();
    b.take(T, 2, a(1, 100, 10), 50_500).unwrap();
    let ask = b.ask(T, a(1, 40, 4), 3, 51_200);
    // The take at 50.1 s is over a second old: one request of the last second, and this one.
    assert_eq!(ask.want, a(2, 140, 14));
    assert_eq!(ask.fewest, a(1, 40, 4));
    assert_eq!(ask.parts, 6);
    let idle = Blocks::default().ask(T, a(1, 40, 4), 0, 0);
    assert_eq!((idle.want, idle.parts), (a(1, 40, 4), 2));
}

#[test]
fn a_refused_tenant_is_admitted_exactly_for_a_second_and_a_grant_ends_that() {
    let mut b = Blocks::default();
    b.refused(T, 1_000);
    assert!(b.exact_for_now(T, 1_999));
    assert!(!b.exact_for_now(T, 2_000));
    b.refused(T, 3_000);
    b.open(T, a(1, 1, 1), 3, WINDOW, (3_000, 3_000));
    assert!(!b.exact_for_now(T, 3_001));
}

#[test]
fn a_call_without_an_answer_is_sent_again_for_a_while_and_its_grant_given_back() {
    let mut b = Blocks::default();
    let carried = vec![TenantCorrection {
        bucket: 7,
        deltas: [-1, 0, 0],
    }];
    b.unanswered(Unanswered {
        tenant: T.into(),
        call: 42,
        carried: carried.clone(),
        sent: 1_000,
    });
    b.unanswered(Unanswered {
        tenant: T.into(),
        call: 43,
        carried,
        sent: 40_000,
    });
    let calls = b.take_unanswered(40_000);
    assert_eq!(
        calls.iter().map(|u| u.call).collect::<Vec<_>>(),
        [43],
        "42 given up"
    );
    assert!(b.take_unanswered(40_000).is_empty(), "taken");
    b.answered_late(T, Some((a(5, 500, 50), 9)));
    assert_eq!(
        b.take_owed(T),
        vec![TenantCorrection {
            bucket: 9,
            deltas: [-5, -500, -50]
        }]
    );
}
