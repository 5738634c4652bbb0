//! A reservation's life on every store: admitted once per id, kept alive by renewal, settled
//! late but once, and times that saturate instead of wrapping (DESIGN.md I2, I6).

use std::time::Duration;

use router_core::ledger::{
    ActualUsage, Admission, LimitKind, MAX_SLOT_TTL, Need, Observation, Reservation,
    SETTLE_GRACE_MS, TIME_CAP_MS, Verdict, WindowUse,
};

use crate::support::{Store, World, cheap_and_dear, one_model, without_window};
use crate::tenants::{need, spec};
use router_core::clock::Clock;

every_store!(
    admitting_one_id_twice_counts_once_and_answers_the_same_reservation,
    a_renewed_slot_outlives_its_first_ttl_and_a_dead_holders_slot_expires,
    a_late_settle_corrects_spend_and_window_once,
    huge_cooldowns_and_resets_saturate_instead_of_wrapping,
    each_candidate_reserves_its_own_token_estimate,
);

async fn admit(
    w: &World,
    need: &Need,
    candidates: &[router_core::config::DeploymentId],
) -> Admission {
    w.ledger
        .admit(need, candidates)
        .await
        .expect("store answers")
}

async fn granted(
    w: &World,
    need: &Need,
    candidates: &[router_core::config::DeploymentId],
) -> Reservation {
    match admit(w, need, candidates).await {
        Admission::Granted(r) => r,
        Admission::Denied(d) => panic!("expected a grant, got {d:?}"),
    }
}

async fn admitting_one_id_twice_counts_once_and_answers_the_same_reservation(store: Store) {
    let w = World::new(store, &cheap_and_dear("rpm: 10, tpm: 1000, concurrency: 5")).await;
    let (cheap, dear) = (w.d("cheap"), w.d("dear"));
    let acme = spec(10, 10_000, 10, Some(1_000_000), None);
    let n = need(100, &acme, &[30, 70]);
    let first = granted(&w, &n, &[cheap, dear]).await;
    w.clock.advance_ms(1_500);
    let again = granted(&w, &n, &[cheap, dear]).await;
    assert_eq!(without_window(&again), without_window(&first));
    // The first admission counted the tenant's window; the one answered again did not.
    let window = |r: &Reservation| r.tenant.as_ref().and_then(|t| t.tenant_window());
    let counted = WindowUse {
        requests: 1,
        tokens: 100,
    };
    assert_eq!((window(&first), window(&again)), (Some(counted), None));
    assert_eq!(first.id, n.id);
    let u = w.usage(cheap).await.usage;
    assert_eq!((u.requests, u.tokens, u.in_flight), (1, 100, 1));
    let t = w.ledger.tenant_snapshot(&acme).await.unwrap();
    assert_eq!(
        (t.usage.requests, t.usage.in_flight, t.spent_today_micros),
        (1, 1, 30)
    );
    // Settled, the id holds no slot: the same need is then a new request.
    assert!(
        w.ledger
            .settle(
                &first,
                ActualUsage {
                    tokens: 100,
                    cost_micros: 30,
                    input_tokens: 0,
                }
            )
            .await
            .unwrap()
    );
    let next = granted(&w, &n, &[cheap, dear]).await;
    assert_eq!(next.bucket, first.bucket + 1);
    assert_eq!(w.usage(cheap).await.usage.requests, 2);
}

async fn a_renewed_slot_outlives_its_first_ttl_and_a_dead_holders_slot_expires(store: Store) {
    let w = World::new(store, &one_model("concurrency: 1")).await;
    let m = w.d("m");
    let acme = spec(100, 100_000, 1, None, None);
    let mut n = need(1, &acme, &[0]);
    n.slot_ttl = Duration::from_secs(10);
    let r = granted(&w, &n, &[m]).await;
    w.advance_s(8);
    assert!(w.ledger.renew(&r, Duration::from_secs(10)).await.unwrap());
    w.advance_s(5);
    // 13 s: past the first TTL, still held, and the tenant's slot too.
    assert_eq!(w.usage(m).await.usage.in_flight, 1);
    assert_eq!(
        w.ledger
            .tenant_snapshot(&acme)
            .await
            .unwrap()
            .usage
            .in_flight,
        1
    );
    assert_eq!(
        w.deny(1, &[m]).await.refusals[0].limit,
        LimitKind::Concurrency
    );
    // Renewal is capped at the longest slot TTL.
    assert!(w.ledger.renew(&r, Duration::MAX).await.unwrap());
    w.clock.advance_ms(MAX_SLOT_TTL.as_millis() as u64 - 1);
    assert_eq!(w.usage(m).await.usage.in_flight, 1);
    // The holder dies: no more renewals, and the slot expires.
    w.clock.advance_ms(1);
    assert_eq!(w.usage(m).await.usage.in_flight, 0);
    assert_eq!(
        w.ledger
            .tenant_snapshot(&acme)
            .await
            .unwrap()
            .usage
            .in_flight,
        0
    );
    assert!(!w.ledger.renew(&r, Duration::from_secs(10)).await.unwrap());
    assert_eq!(w.usage(m).await.usage.in_flight, 0);
    // A settled slot is not renewed either.
    let s = granted(&w, &n.clone().with_new_id(), &[m]).await;
    assert!(w.ledger.settle(&s, ActualUsage::tokens(1)).await.unwrap());
    assert!(!w.ledger.renew(&s, Duration::from_secs(10)).await.unwrap());
    assert_eq!(w.usage(m).await.usage.in_flight, 0);
}

async fn a_late_settle_corrects_spend_and_window_once(store: Store) {
    let w = World::new(store, &one_model("tpm: 100000")).await;
    let m = w.d("m");
    let acme = spec(100, 100_000, 100, Some(1_000_000), Some(10_000_000));
    let mut n = need(500, &acme, &[400]);
    n.slot_ttl = Duration::from_secs(10);
    let actual = ActualUsage {
        tokens: 100,
        cost_micros: 150,
        input_tokens: 0,
    };

    // Expired, its bucket still in the window: both corrected.
    let r = granted(&w, &n, &[m]).await;
    w.advance_s(20);
    assert_eq!(w.usage(m).await.usage.in_flight, 0);
    assert!(w.ledger.settle(&r, actual).await.unwrap());
    let spent =
        |t: router_core::ledger::TenantSnapshot| (t.spent_today_micros, t.spent_month_micros);
    assert_eq!(
        spent(w.ledger.tenant_snapshot(&acme).await.unwrap()),
        (150, 150)
    );
    assert_eq!(w.usage(m).await.usage.tokens, 100);
    assert_eq!(
        w.ledger.tenant_snapshot(&acme).await.unwrap().usage.tokens,
        100
    );
    // Exactly once.
    assert!(!w.ledger.settle(&r, actual).await.unwrap());
    assert!(!w.ledger.release(&r).await.unwrap());
    assert_eq!(
        spent(w.ledger.tenant_snapshot(&acme).await.unwrap()),
        (150, 150)
    );
    assert_eq!(w.usage(m).await.usage.tokens, 100);

    // Its bucket has left the window: the spend alone is corrected.
    let r = granted(&w, &n.clone().with_new_id(), &[m]).await;
    w.advance_s(70);
    let _fresh = granted(&w, &need(7, &acme, &[0]), &[m]).await;
    assert!(w.ledger.settle(&r, actual).await.unwrap());
    assert_eq!(
        spent(w.ledger.tenant_snapshot(&acme).await.unwrap()),
        (300, 300)
    );
    assert_eq!(w.usage(m).await.usage.tokens, 7);

    // Later than the grace: forgotten, nothing changes.
    let r = granted(&w, &n.clone().with_new_id(), &[m]).await;
    w.clock.advance_ms(10_000 + SETTLE_GRACE_MS);
    assert!(!w.ledger.settle(&r, actual).await.unwrap());
    assert_eq!(
        spent(w.ledger.tenant_snapshot(&acme).await.unwrap()),
        (700, 700)
    );
}

async fn huge_cooldowns_and_resets_saturate_instead_of_wrapping(store: Store) {
    let w = World::new(store, &cheap_and_dear("rpm: 100")).await;
    let (cheap, dear) = (w.d("cheap"), w.d("dear"));
    // A reset ten years away, in a dimension we do not limit: cooldown for ten years.
    let ten_years = Duration::from_secs(10 * 365 * 86_400);
    let obs = Observation {
        requests: None,
        tokens: Some((0, ten_years)),
        ..Observation::default()
    };
    w.ledger.observe(cheap, obs).await.unwrap();
    assert_eq!(w.usage(cheap).await.cooldown, Some(ten_years));
    // A reset of Duration::MAX saturates; in a limited dimension the window stays sane.
    let obs = Observation {
        requests: Some((0, Duration::MAX)),
        tokens: Some((0, Duration::MAX)),
        ..Observation::default()
    };
    w.ledger.observe(cheap, obs).await.unwrap();
    let forever = |w: &World| Duration::from_millis(TIME_CAP_MS - w.clock.now_ms());
    assert_eq!(w.usage(cheap).await.cooldown, Some(forever(&w)));
    assert_eq!(w.usage(cheap).await.usage.requests, 100);
    w.advance_s(61);
    assert_eq!(w.usage(cheap).await.usage.requests, 0);
    // Cooldowns of Duration::MAX or u64::MAX ms saturate too.
    for d in [Duration::MAX, Duration::from_millis(u64::MAX)] {
        assert_eq!(w.ledger.cooldown(dear, d).await.unwrap(), forever(&w));
    }
    let denial = w.deny(1, &[dear]).await;
    assert_eq!(denial.refusals[0].limit, LimitKind::Cooldown);
    assert_eq!(denial.refusals[0].verdict, Verdict::NotNow(forever(&w)));
    assert_eq!(w.usage(dear).await.cooldown, Some(forever(&w)));
}

async fn each_candidate_reserves_its_own_token_estimate(store: Store) {
    let w = World::new(store, &cheap_and_dear("tpm: 1000")).await;
    let (cheap, dear) = (w.d("cheap"), w.d("dear"));
    // 500 would fit cheap, but cheap counts this prompt as 1200; dear as 800.
    let n = Need::new(500, Duration::from_secs(60)).with_candidate_tokens(vec![1200, 800]);
    assert_eq!(
        (n.tokens_on(0), n.tokens_on(1), n.tokens_on(2)),
        (1200, 800, 500)
    );
    let r = granted(&w, &n, &[cheap, dear]).await;
    assert_eq!((r.deployment, r.rank, r.tokens), (dear, 1, 800));
    assert_eq!(w.usage(dear).await.usage.tokens, 800);
    assert_eq!(w.usage(cheap).await.usage.tokens, 0);
    assert!(w.ledger.settle(&r, ActualUsage::tokens(700)).await.unwrap());
    assert_eq!(w.usage(dear).await.usage.tokens, 700);
    // Cheap alone: never, by its own estimate.
    let Admission::Denied(d) = admit(&w, &n.clone().with_new_id(), &[cheap]).await else {
        panic!("1200 tokens fit a TPM of 1000");
    };
    assert_eq!(
        (d.refusals[0].limit, d.refusals[0].verdict),
        (LimitKind::Tokens, Verdict::Never)
    );
    // Candidates in the other order: estimates follow the order given.
    let n = Need::new(500, Duration::from_secs(60)).with_candidate_tokens(vec![300, 1200]);
    let r = granted(&w, &n, &[cheap, dear]).await;
    assert_eq!((r.deployment, r.tokens), (cheap, 300));
    assert_eq!(w.usage(cheap).await.usage.tokens, 300);
}
