//! The ledger conformance suite: every store must pass every test here, with the same numbers.
//! (DESIGN.md invariants I1, I2, I3, I6.)

use std::time::Duration;

use router_core::ledger::{ActualUsage, Admission, LimitKind, Observation, Scope, Verdict};

use crate::support::{Store, World, cheap_and_dear, one_model};

every_store!(
    rpm_admits_exactly_the_limit,
    tpm_admits_exactly_the_limit,
    concurrency_admits_exactly_the_limit_and_settle_frees_a_slot,
    capacity_returns_when_the_window_slides,
    partial_expiry_returns_only_the_oldest_capacity,
    settle_credits_back_unused_tokens,
    settle_debits_tokens_beyond_the_estimate,
    settling_twice_is_a_no_op,
    release_hands_back_the_request_and_its_tokens,
    settle_after_the_bucket_left_the_window_corrects_nothing,
    a_ghost_slot_expires_after_its_ttl,
    cooldowns_are_skipped_and_only_extend,
    the_cheapest_candidate_wins_and_the_next_takes_over_when_full,
    never_fits_and_not_now_are_told_apart,
    tpm_retry_after_counts_the_buckets_that_must_leave,
    provider_wide_limits_hold_across_models,
    observe_follows_a_provider_that_reports_less_remaining,
    observe_nothing_remaining_cools_down_until_the_reset,
    observe_nothing_remaining_of_a_limit_we_keep_fills_it_until_the_reset,
    snapshot_reports_use_limits_in_flight_and_cooldown,
    snapshot_shows_what_the_provider_last_reported_for_a_minute,
);

async fn rpm_admits_exactly_the_limit(store: Store) {
    let w = World::new(store, &one_model("rpm: 5")).await;
    let m = w.d("m");
    assert_eq!(w.count_grants(9, 1, &[m]).await, 5);
    let denial = w.deny(1, &[m]).await;
    assert_eq!(denial.refusals[0].limit, LimitKind::Requests);
    assert_eq!(denial.refusals[0].scope, Scope::Deployment);
    assert!(!denial.never_fits());
}

async fn tpm_admits_exactly_the_limit(store: Store) {
    let w = World::new(store, &one_model("tpm: 1000")).await;
    let m = w.d("m");
    assert_eq!(w.count_grants(5, 300, &[m]).await, 3);
    // 900 used: 100 more is exactly the limit, 101 is one token over.
    assert_eq!(w.deny(101, &[m]).await.refusals[0].limit, LimitKind::Tokens);
    let _r = w.grant(100, &[m]).await;
    assert_eq!(w.deny(1, &[m]).await.refusals[0].limit, LimitKind::Tokens);
}

async fn concurrency_admits_exactly_the_limit_and_settle_frees_a_slot(store: Store) {
    let w = World::new(store, &one_model("concurrency: 3")).await;
    let m = w.d("m");
    let held = [
        w.grant(1, &[m]).await,
        w.grant(1, &[m]).await,
        w.grant(1, &[m]).await,
    ];
    let denial = w.deny(1, &[m]).await;
    assert_eq!(denial.refusals[0].limit, LimitKind::Concurrency);
    assert_eq!(w.usage(m).await.usage.in_flight, 3);
    assert!(
        w.ledger
            .settle(&held[1], ActualUsage::tokens(1))
            .await
            .unwrap()
    );
    let _r = w.grant(1, &[m]).await;
    assert_eq!(
        w.deny(1, &[m]).await.refusals[0].limit,
        LimitKind::Concurrency
    );
}

async fn capacity_returns_when_the_window_slides(store: Store) {
    let w = World::new(store, &one_model("rpm: 2")).await;
    let m = w.d("m");
    w.clock.advance_ms(400);
    assert_eq!(w.count_grants(2, 1, &[m]).await, 2);
    // Admitted in bucket [T0, T0+1s): it leaves the window at T0 + 61 s.
    w.advance_s(60);
    let denial = w.deny(1, &[m]).await;
    assert_eq!(denial.retry_after(), Some(Duration::from_millis(600)));
    w.clock.advance_ms(599);
    w.deny(1, &[m]).await;
    w.clock.advance_ms(1);
    assert_eq!(w.count_grants(3, 1, &[m]).await, 2);
}

async fn partial_expiry_returns_only_the_oldest_capacity(store: Store) {
    let w = World::new(store, &one_model("rpm: 5")).await;
    let m = w.d("m");
    assert_eq!(w.count_grants(2, 1, &[m]).await, 2);
    w.advance_s(30);
    assert_eq!(w.count_grants(3, 1, &[m]).await, 3);
    w.advance_s(31);
    // The two from T0 are gone, the three from T0+30 s stay.
    assert_eq!(w.usage(m).await.usage.requests, 3);
    assert_eq!(w.count_grants(5, 1, &[m]).await, 2);
    let denial = w.deny(1, &[m]).await;
    assert_eq!(denial.retry_after(), Some(Duration::from_secs(30)));
}

async fn settle_credits_back_unused_tokens(store: Store) {
    let w = World::new(store, &one_model("tpm: 1000")).await;
    let m = w.d("m");
    let r = w.grant(800, &[m]).await;
    w.deny(800, &[m]).await;
    assert!(w.ledger.settle(&r, ActualUsage::tokens(150)).await.unwrap());
    assert_eq!(w.usage(m).await.usage.tokens, 150);
    let _r = w.grant(850, &[m]).await;
    w.deny(1, &[m]).await;
}

async fn settle_debits_tokens_beyond_the_estimate(store: Store) {
    let w = World::new(store, &one_model("tpm: 1000")).await;
    let m = w.d("m");
    let r = w.grant(100, &[m]).await;
    assert!(w.ledger.settle(&r, ActualUsage::tokens(900)).await.unwrap());
    assert_eq!(w.usage(m).await.usage.tokens, 900);
    w.deny(101, &[m]).await;
    let _r = w.grant(100, &[m]).await;
}

async fn settling_twice_is_a_no_op(store: Store) {
    let w = World::new(store, &one_model("tpm: 1000, concurrency: 5")).await;
    let m = w.d("m");
    let r = w.grant(500, &[m]).await;
    assert!(w.ledger.settle(&r, ActualUsage::tokens(100)).await.unwrap());
    let after_first = w.usage(m).await;
    assert!(!w.ledger.settle(&r, ActualUsage::tokens(10)).await.unwrap());
    assert!(!w.ledger.release(&r).await.unwrap());
    assert_eq!(w.usage(m).await, after_first);
    assert_eq!(after_first.usage.tokens, 100);
    assert_eq!(after_first.usage.requests, 1);
    assert_eq!(after_first.usage.in_flight, 0);
}

async fn release_hands_back_the_request_and_its_tokens(store: Store) {
    let w = World::new(store, &one_model("rpm: 1, tpm: 1000")).await;
    let m = w.d("m");
    let r = w.grant(700, &[m]).await;
    w.deny(1, &[m]).await;
    assert!(w.ledger.release(&r).await.unwrap());
    let u = w.usage(m).await.usage;
    assert_eq!((u.requests, u.tokens, u.in_flight), (0, 0, 0));
    let _r = w.grant(1000, &[m]).await;
}

async fn settle_after_the_bucket_left_the_window_corrects_nothing(store: Store) {
    let w = World::new(store, &one_model("tpm: 1000")).await;
    let m = w.d("m");
    let r = w.grant(500, &[m]).await;
    w.advance_s(70);
    let _fresh = w.grant(200, &[m]).await;
    assert!(w.ledger.settle(&r, ActualUsage::tokens(999)).await.unwrap());
    assert_eq!(w.usage(m).await.usage.tokens, 200);
}

async fn a_ghost_slot_expires_after_its_ttl(store: Store) {
    let w = World::new(store, &one_model("concurrency: 1")).await;
    let m = w.d("m");
    let ghost = w.admit_ttl(1, 10, &[m]).await;
    assert!(matches!(ghost, Admission::Granted(_)));
    w.advance_s(4);
    let denial = w.deny(1, &[m]).await;
    assert_eq!(denial.refusals[0].limit, LimitKind::Concurrency);
    // Slots free when requests settle: ask again in a second...
    assert_eq!(denial.retry_after(), Some(Duration::from_secs(1)));
    w.advance_s(5);
    // ...but never later than the oldest slot's expiry.
    assert_eq!(
        w.deny(1, &[m]).await.retry_after(),
        Some(Duration::from_secs(1))
    );
    w.clock.advance_ms(500);
    assert_eq!(
        w.deny(1, &[m]).await.retry_after(),
        Some(Duration::from_millis(500))
    );
    w.clock.advance_ms(500);
    assert_eq!(w.usage(m).await.usage.in_flight, 0);
    let _r = w.grant(1, &[m]).await;
    // The crashed holder's late settle still settles (within the grace) but frees nothing live.
    if let Admission::Granted(g) = ghost {
        assert!(w.ledger.settle(&g, ActualUsage::tokens(1)).await.unwrap());
        assert!(!w.ledger.settle(&g, ActualUsage::tokens(1)).await.unwrap());
    }
    assert_eq!(w.usage(m).await.usage.in_flight, 1);
}

async fn cooldowns_are_skipped_and_only_extend(store: Store) {
    let w = World::new(store, &cheap_and_dear("rpm: 100")).await;
    let (cheap, dear) = (w.d("cheap"), w.d("dear"));
    let left = w
        .ledger
        .cooldown(cheap, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(left, Duration::from_secs(30));
    assert_eq!(w.grant(1, &[cheap, dear]).await.deployment, dear);
    // A shorter cooldown does not shorten it.
    let left = w
        .ledger
        .cooldown(cheap, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(left, Duration::from_secs(30));
    let denial = w.deny(1, &[cheap]).await;
    assert_eq!(denial.refusals[0].limit, LimitKind::Cooldown);
    assert_eq!(denial.retry_after(), Some(Duration::from_secs(30)));
    w.advance_s(10);
    // A longer one extends it.
    let left = w
        .ledger
        .cooldown(cheap, Duration::from_secs(40))
        .await
        .unwrap();
    assert_eq!(left, Duration::from_secs(40));
    w.advance_s(40);
    assert_eq!(w.grant(1, &[cheap, dear]).await.deployment, cheap);
}

async fn the_cheapest_candidate_wins_and_the_next_takes_over_when_full(store: Store) {
    let w = World::new(store, &cheap_and_dear("rpm: 2")).await;
    let (cheap, dear) = (w.d("cheap"), w.d("dear"));
    let order = [cheap, dear];
    let picks = [
        w.grant(10, &order).await,
        w.grant(10, &order).await,
        w.grant(10, &order).await,
    ];
    let chosen: Vec<_> = picks.iter().map(|r| (r.deployment, r.rank)).collect();
    assert_eq!(chosen, vec![(cheap, 0), (cheap, 0), (dear, 1)]);
    assert_eq!(w.usage(dear).await.usage.requests, 1);
}

async fn never_fits_and_not_now_are_told_apart(store: Store) {
    let w = World::new(store, &cheap_and_dear("tpm: 100, rpm: 1")).await;
    let (cheap, dear) = (w.d("cheap"), w.d("dear"));
    // Larger than cheap's TPM: never there; dear has room.
    assert_eq!(w.grant(500, &[cheap, dear]).await.deployment, dear);
    let alone = w.deny(500, &[cheap]).await;
    assert!(alone.never_fits());
    assert_eq!(alone.retry_after(), None);
    assert_eq!(alone.refusals[0].verdict, Verdict::Never);
    // Full right now: not now, with when.
    let _r = w.grant(10, &[cheap]).await;
    w.advance_s(20);
    let full = w.deny(10, &[cheap]).await;
    assert!(!full.never_fits());
    assert_eq!(
        full.refusals[0].verdict,
        Verdict::NotNow(Duration::from_secs(41))
    );
    // Mixed: never on one, not now on the other: the denial is "not now", with the other's time.
    w.ledger
        .cooldown(dear, Duration::from_secs(5))
        .await
        .unwrap();
    let mixed = w.deny(500, &[cheap, dear]).await;
    assert_eq!(mixed.refusals[0].verdict, Verdict::Never);
    assert_eq!(mixed.refusals[1].limit, LimitKind::Cooldown);
    assert!(!mixed.never_fits());
    assert_eq!(mixed.retry_after(), Some(Duration::from_secs(5)));
}

async fn tpm_retry_after_counts_the_buckets_that_must_leave(store: Store) {
    let w = World::new(store, &one_model("tpm: 1000")).await;
    let m = w.d("m");
    let _a = w.grant(400, &[m]).await;
    w.advance_s(10);
    let _b = w.grant(400, &[m]).await;
    w.advance_s(10);
    let _c = w.grant(200, &[m]).await;
    // 500 more needs the T0 and T0+10 buckets gone: T0+10+61 s, 51 s from now.
    let denial = w.deny(500, &[m]).await;
    assert_eq!(
        denial.refusals[0].verdict,
        Verdict::NotNow(Duration::from_secs(51))
    );
    // 300 needs only the T0 bucket gone: 41 s from now.
    let denial = w.deny(300, &[m]).await;
    assert_eq!(denial.retry_after(), Some(Duration::from_secs(41)));
}

async fn provider_wide_limits_hold_across_models(store: Store) {
    let yaml = r#"
providers:
  - name: p
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: P_KEY
    limits: { rpm: 3 }
    models:
      - name: m1
        aliases: [chat]
        price: { input: 1, output: 1 }
        limits: { rpm: 10 }
      - name: m2
        aliases: [chat]
        price: { input: 2, output: 2 }
        limits: { rpm: 10 }
"#;
    let w = World::new(store, yaml).await;
    let (m1, m2) = (w.d("m1"), w.d("m2"));
    assert_eq!(w.count_grants(2, 1, &[m1]).await, 2);
    assert_eq!(w.count_grants(5, 1, &[m2, m1]).await, 1);
    let denial = w.deny(1, &[m1, m2]).await;
    for r in &denial.refusals {
        assert_eq!((r.limit, r.scope), (LimitKind::Requests, Scope::Provider));
    }
    let snap = w.usage(m2).await;
    assert_eq!(snap.usage.requests, 1);
    assert_eq!(
        snap.provider.map(|p| (p.requests, p.rpm_limit)),
        Some((3, Some(3)))
    );
}

async fn observe_follows_a_provider_that_reports_less_remaining(store: Store) {
    let w = World::new(store, &one_model("rpm: 100, tpm: 100000")).await;
    let m = w.d("m");
    let _r = w.grant(1000, &[m]).await;
    // We believe 99 requests remain; the provider says 10, replenished in 20 s.
    let obs = Observation {
        requests: Some((10, Duration::from_secs(20))),
        tokens: Some((200_000, Duration::from_secs(1))),
        ..Observation::default()
    };
    w.ledger.observe(m, obs).await.unwrap();
    let u = w.usage(m).await.usage;
    assert_eq!((u.requests, u.tokens), (90, 1000));
    assert_eq!(w.count_grants(20, 1, &[m]).await, 10);
    // Reporting more remaining than we believe changes nothing.
    w.ledger
        .observe(
            m,
            Observation {
                requests: Some((500, Duration::from_secs(1))),
                tokens: None,
                ..Observation::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(w.usage(m).await.usage.requests, 100);
    // The provider's share comes back when the provider said it would.
    w.advance_s(20);
    assert_eq!(w.usage(m).await.usage.requests, 11);
}

async fn observe_nothing_remaining_cools_down_until_the_reset(store: Store) {
    // Tokens are not limited here: the provider's "none left" can only be a cooldown.
    let w = World::new(store, &one_model("rpm: 100")).await;
    let m = w.d("m");
    let obs = Observation {
        requests: None,
        tokens: Some((0, Duration::from_secs(6))),
        ..Observation::default()
    };
    w.ledger.observe(m, obs).await.unwrap();
    let denial = w.deny(1, &[m]).await;
    assert_eq!(denial.refusals[0].limit, LimitKind::Cooldown);
    assert_eq!(denial.retry_after(), Some(Duration::from_secs(6)));
    w.advance_s(6);
    let _r = w.grant(1, &[m]).await;
}

async fn observe_nothing_remaining_of_a_limit_we_keep_fills_it_until_the_reset(store: Store) {
    let w = World::new(store, &one_model("rpm: 10")).await;
    let m = w.d("m");
    let none_left = Observation {
        requests: Some((0, Duration::from_secs(6))),
        tokens: None,
        ..Observation::default()
    };
    // Filled by us: the ledger already knows it is full, and the provider's reset adds nothing.
    assert_eq!(w.count_grants(10, 1, &[m]).await, 10);
    w.ledger.observe(m, none_left).await.unwrap();
    assert_eq!(w.usage(m).await.usage.requests, 10);
    assert_eq!(w.usage(m).await.cooldown, None);
    // Filled by someone else: counted as used until the provider's reset, then free again.
    w.advance_s(61);
    w.ledger.observe(m, none_left).await.unwrap();
    let denial = w.deny(1, &[m]).await;
    assert_eq!(
        (denial.refusals[0].limit, denial.retry_after()),
        (LimitKind::Requests, Some(Duration::from_secs(6)))
    );
    w.advance_s(6);
    let _r = w.grant(1, &[m]).await;
}

async fn snapshot_reports_use_limits_in_flight_and_cooldown(store: Store) {
    let w = World::new(store, &cheap_and_dear("rpm: 10, tpm: 5000, concurrency: 4")).await;
    let (cheap, dear) = (w.d("cheap"), w.d("dear"));
    let a = w.grant(300, &[cheap]).await;
    let _b = w.grant(200, &[cheap]).await;
    assert!(w.ledger.settle(&a, ActualUsage::tokens(100)).await.unwrap());
    w.ledger
        .cooldown(dear, Duration::from_secs(9))
        .await
        .unwrap();
    let snaps = w.ledger.snapshot(&[cheap, dear]).await.unwrap();
    let c = snaps[0];
    assert_eq!(c.deployment, cheap);
    assert_eq!(
        (c.usage.requests, c.usage.tokens, c.usage.in_flight),
        (2, 300, 1)
    );
    assert_eq!(
        (
            c.usage.rpm_limit,
            c.usage.tpm_limit,
            c.usage.concurrency_limit
        ),
        (Some(10), Some(5000), Some(4))
    );
    // Provider `a` has no provider-wide limits, so it is not tracked apart.
    assert_eq!(c.provider, None);
    assert_eq!(c.cooldown, None);
    assert_eq!(snaps[1].cooldown, Some(Duration::from_secs(9)));
    assert_eq!(snaps[1].usage.requests, 0);
}

async fn snapshot_shows_what_the_provider_last_reported_for_a_minute(store: Store) {
    let w = World::new(store, &one_model("rpm: 100, tpm: 100000")).await;
    let m = w.d("m");
    assert_eq!(w.usage(m).await.reported, None);
    let obs = Observation {
        requests: Some((950, Duration::from_secs(10))),
        tokens: None,
        ..Observation::default()
    };
    w.ledger.observe(m, obs).await.unwrap();
    w.advance_s(5);
    let r = w.usage(m).await.reported.expect("a report");
    assert_eq!(
        (r.requests_remaining, r.tokens_remaining, r.age),
        (Some(950), None, Duration::from_secs(5))
    );
    let obs = Observation {
        requests: Some((940, Duration::from_secs(9))),
        tokens: Some((99_000, Duration::from_secs(1))),
        ..Observation::default()
    };
    w.ledger.observe(m, obs).await.unwrap();
    let r = w.usage(m).await.reported.expect("a report");
    assert_eq!(
        (r.requests_remaining, r.tokens_remaining, r.age),
        (Some(940), Some(99_000), Duration::ZERO)
    );
    w.advance_s(61);
    assert_eq!(w.usage(m).await.reported, None);
}
