//! One scenario of each [`Gaps`] the model found: two instances, 12 RPM, one-token requests.
//! Each asserts the promise that does not hold there, and is ignored until it does.

use super::*;

fn admit(node: usize) -> Step {
    Step::Admit {
        node,
        tokens: 1,
        times: 1,
    }
}

/// Answers every admission out, without moving the clock.
fn answers() -> Step {
    Step::Advance { ms: 0, first: 0 }
}

/// Runs `steps` on two instances under `on_error: local` with `gaps`: whether the minute
/// stayed within the limits after each.
fn within_limits_through(gaps: Gaps, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut world = World::new(&[0, 0], "local", gaps);
    for step in steps {
        world.apply(step);
        world.within_limits()?;
    }
    Ok(())
}

/// The store holds 12, the whole limit. It stops; instance 0 sends two admissions, which time
/// out. The first, sent again, puts it local (its share, 6, is used: refused); its local ledger
/// counts the second as granted, since its answer might come; sent again, that one is decided
/// in the local ledger, which grants it by the slot it holds for it: 13.
#[test]
fn a_call_out_that_timed_out_is_not_granted_beyond_the_local_share() {
    let gaps = Gaps {
        timeouts_wait: true,
        ..Gaps::default()
    };
    let mut steps = vec![admit(1); 12];
    steps.extend([answers(), Step::Down, admit(0), admit(0)]);
    steps.extend([Step::Answer { node: 0 }, Step::Answer { node: 0 }]);
    within_limits_through(gaps, &steps).unwrap();
}

/// Both instances read the windows empty; then instance 0 admits 12 through the store, and
/// the store stops before the next heartbeat. Instance 1 starts local from its share of the
/// empty reading and admits its whole share, 6: up to 18 in the minute.
#[test]
#[ignore = "what an instance admitted beyond its share since the last reading is in no other's share"]
fn admissions_since_the_last_reading_are_within_the_limit_after_the_store_stops() {
    let gaps = Gaps {
        down_between_readings: true,
        ..Gaps::default()
    };
    let mut steps = vec![admit(0); 12];
    steps.extend([answers(), Step::Down]);
    steps.extend(vec![admit(1); 6]);
    within_limits_through(gaps, &steps).unwrap();
}

/// After an outage, instance 1's restore is carried out (the rejoin hash records that it holds
/// nothing) but its answer is lost: it goes back to admitting on its own. Instance 0 writes back, sees nobody
/// waiting and fills the store to 12; instance 1 still admits one on its share of the last
/// reading: 13.
#[test]
fn a_restore_whose_answer_was_lost_keeps_the_others_waiting() {
    let gaps = Gaps {
        lost_restore_replies: true,
        ..Gaps::default()
    };
    let mut steps = vec![admit(0); 10];
    steps.extend([answers(), Step::Down, Step::Up]);
    let lost = Step::Fault {
        call: Call::Restore,
        applied: true,
    };
    // Instance 1 beats first at the next heartbeat: its restore's answer is lost.
    steps.extend([
        lost,
        Step::Advance {
            ms: 1_000,
            first: 1,
        },
    ]);
    steps.extend([admit(0), admit(0), answers(), admit(1)]);
    within_limits_through(gaps, &steps).unwrap();
}

/// Found by the random search (CI, 2026-12-06): instance 1 (lagging 261 ms) beats in a 50 ms
/// spell between two outages and leaves the rejoin set; instance 0, still away, stays in it.
/// In the second outage both admit on their own (0: 6, 1: 3). When the store answers, instance
/// 0 beats first, finds the set non-empty and adds no one: it rejoins at once and admits 4
/// through the store, which holds its 6 but not instance 1's 3: 13. (Redis has a second form
/// of it: registrations expire three heartbeats after an instance's last beat, so after any
/// longer outage the first instance back finds no other live one to wait for; this model's
/// store keeps every instance registered. Both are closed by the rejoin hash: see
/// lua/common.lua, and for the second form `an_outage_longer_than_a_registration_*` in
/// tests/integration/resilient.)
#[test]
fn the_first_instance_back_waits_for_one_that_left_the_rejoin_set_in_a_short_spell() {
    use Step::*;
    let gaps = Gaps {
        short_ups: true,
        ..Gaps::CLOSED
    };
    let adv = |ms| Advance { ms, first: 0 };
    let admit = |node, times| Admit {
        node,
        tokens: 1,
        times,
    };
    let steps = [
        adv(79_456),
        Down,
        adv(43_755),
        Up,
        adv(50),
        Down,
        adv(31_732),
        admit(0, 1),
        adv(22_695),
        admit(1, 3),
        adv(786),
        admit(0, 1),
        adv(23_890),
        admit(0, 4),
        adv(897),
        Up,
        adv(739),
        admit(0, 4),
    ];
    let mut world = World::new(&[0, 261], "local", gaps);
    for step in &steps {
        world.apply(step);
        world.within_limits().unwrap();
    }
    world.recovered_and_settled().unwrap();
    world.within_limits().unwrap();
}

/// Found by a wider search (4,000 worlds, 2026-12-06): instance 0 admits the whole limit, 12,
/// through the store; instance 1's admission is lost on its way (a timeout), and so is the call
/// sent again, which puts it in local mode on its last reading (nothing used), while the store
/// still answers instance 0: 13 in the minute. Local mode bounds an outage every instance sees,
/// not one instance cut off alone (docs/resilience.md).
#[test]
#[ignore = "one instance cut off while the store answers the others goes local on a stale reading"]
fn admissions_lost_on_their_way_never_add_one_beyond_the_limit() {
    use Step::*;
    let mut steps = vec![admit(0); 12];
    steps.extend([
        Fault {
            call: Call::Admit,
            applied: false,
        },
        admit(1),
        Fault {
            call: Call::Admit,
            applied: false,
        },
        answers(),
    ]);
    within_limits_through(Gaps::CLOSED, &steps).unwrap();
}
