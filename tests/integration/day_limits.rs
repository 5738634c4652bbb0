//! Per-day limits (`rpd`, `tpd`) on every store: counted in the same admission as the minute
//! limits, refused until the day ends ("not now", with the time to the reset), corrected at
//! settlement, handed back on release, and reset where the scope's day ends: UTC midnight, or
//! midnight in its `day_resets` time zone, across a daylight-saving change.

use std::num::NonZeroU64;
use std::time::Duration;

use router_core::config::Limits;
use router_core::ledger::{
    ActualUsage, BudgetMicros, DeploymentSnapshot, LimitKind, Need, Scope, TenantNeed, TenantSpec,
    Verdict,
};

use crate::support::{Store, T0, World, one_model};
use crate::tenants::{grant as grant_need, refusal};

every_store!(
    a_deployments_rpd_refuses_until_utc_midnight_then_admits_again,
    tpd_counts_what_was_used_and_a_release_hands_back_the_request,
    a_tpd_below_the_request_never_fits,
    a_pacific_day_resets_at_pacific_midnight_across_daylight_saving,
    a_tenants_and_a_keys_rpd_count_beside_the_deployments,
);

const DAY_MS: u64 = 86_400_000;

/// The first instant of the UTC day after the one holding `ms`.
fn utc_midnight_after(ms: u64) -> u64 {
    (ms / DAY_MS + 1) * DAY_MS
}

fn today(snap: &DeploymentSnapshot) -> (u64, u64) {
    (snap.usage.requests_today, snap.usage.tokens_today)
}

async fn a_deployments_rpd_refuses_until_utc_midnight_then_admits_again(store: Store) {
    let w = World::new(store, &one_model("rpm: 1000, rpd: 3")).await;
    let d = w.d("m");
    for _ in 0..3 {
        let _ = w.grant(10, &[d]).await;
    }
    let midnight = utc_midnight_after(T0);
    let refused = w.deny(10, &[d]).await.refusals[0];
    assert_eq!(
        (refused.limit, refused.scope),
        (LimitKind::DailyRequests, Scope::Deployment)
    );
    assert_eq!(
        refused.verdict,
        Verdict::NotNow(Duration::from_millis(midnight - T0))
    );
    let snap = w.usage(d).await;
    assert_eq!(today(&snap), (3, 30));
    assert_eq!(snap.usage.rpd_limit, Some(3));
    assert_eq!(
        snap.usage.day_resets_in,
        Some(Duration::from_millis(midnight - T0))
    );
    // A millisecond before midnight: still refused; at midnight, a new day.
    w.clock.set_ms(midnight - 1);
    assert_eq!(
        w.deny(10, &[d]).await.refusals[0].verdict,
        Verdict::NotNow(Duration::from_millis(1))
    );
    w.clock.set_ms(midnight);
    let _ = w.grant(10, &[d]).await;
    assert_eq!(today(&w.usage(d).await), (1, 10));
}

async fn tpd_counts_what_was_used_and_a_release_hands_back_the_request(store: Store) {
    let w = World::new(store, &one_model("rpm: 1000, rpd: 2, tpd: 1000")).await;
    let d = w.d("m");
    // 600 reserved, 100 used: the day counts 100.
    let a = w.grant(600, &[d]).await;
    assert_eq!(today(&w.usage(d).await), (1, 600));
    assert!(w.ledger.settle(&a, ActualUsage::tokens(100)).await.unwrap());
    assert_eq!(today(&w.usage(d).await), (1, 100));
    // 900 more fit, 901 do not.
    let refused = w.deny(901, &[d]).await.refusals[0];
    assert_eq!(refused.limit, LimitKind::DailyTokens);
    let b = w.grant(900, &[d]).await;
    // The day's two requests are taken; a release hands one back, with its tokens.
    assert_eq!(
        w.deny(0, &[d]).await.refusals[0].limit,
        LimitKind::DailyRequests
    );
    assert!(w.ledger.release(&b).await.unwrap());
    assert_eq!(today(&w.usage(d).await), (1, 100));
    let _ = w.grant(0, &[d]).await;
}

async fn a_tpd_below_the_request_never_fits(store: Store) {
    let w = World::new(store, &one_model("tpd: 500")).await;
    let d = w.d("m");
    let refused = w.deny(501, &[d]).await.refusals[0];
    assert_eq!(
        (refused.limit, refused.verdict),
        (LimitKind::DailyTokens, Verdict::Never)
    );
}

/// 2026-03-08T10:00:00Z: 02:00 PST, the morning Los Angeles moves its clocks to PDT. The
/// Pacific day of March 8th began at 08:00Z and ends at 07:00Z on the 9th (23 hours).
const MARCH_8_10Z: u64 = 1_772_964_000_000;
const PACIFIC_MARCH_9: u64 = 1_773_039_600_000;

async fn a_pacific_day_resets_at_pacific_midnight_across_daylight_saving(store: Store) {
    let yaml = r#"
providers:
  - name: g
    api: gemini
    base_url: http://127.0.0.1:1
    api_key_env: G_KEY
    limits: { rpd: 2, day_resets: America/Los_Angeles }
    models:
      - { name: flash, price: { input: 0.3, output: 2.5 } }
"#;
    let w = World::new(store, yaml).await;
    w.clock.set_ms(MARCH_8_10Z);
    let d = w.d("flash");
    let _ = w.grant(1, &[d]).await;
    let _ = w.grant(1, &[d]).await;
    let refused = w.deny(1, &[d]).await.refusals[0];
    assert_eq!(
        (refused.limit, refused.scope),
        (LimitKind::DailyRequests, Scope::Provider)
    );
    assert_eq!(
        refused.verdict,
        Verdict::NotNow(Duration::from_millis(PACIFIC_MARCH_9 - MARCH_8_10Z))
    );
    // UTC midnight changes nothing: the provider's day is Pacific.
    w.clock.set_ms(utc_midnight_after(MARCH_8_10Z));
    let _ = w.deny(1, &[d]).await;
    w.clock.set_ms(PACIFIC_MARCH_9 - 1);
    let _ = w.deny(1, &[d]).await;
    w.clock.set_ms(PACIFIC_MARCH_9);
    let _ = w.grant(1, &[d]).await;
    let provider = w.usage(d).await.provider.expect("limited provider");
    assert_eq!((provider.requests_today, provider.rpd_limit), (1, Some(2)));
    // The next Pacific day is 24 hours long again: it ends at 07:00Z on the 10th.
    assert_eq!(provider.day_resets_in, Some(Duration::from_millis(DAY_MS)));
}

fn account(name: &str, rpd: u64) -> TenantSpec {
    let limits = Limits {
        rpd: NonZeroU64::new(rpd),
        ..Limits::default()
    };
    match name.strip_prefix("key:") {
        Some(id) => TenantSpec::of_key(id, limits, BudgetMicros::default()),
        None => TenantSpec {
            name: name.into(),
            limits,
            budget: BudgetMicros::default(),
        },
    }
}

async fn a_tenants_and_a_keys_rpd_count_beside_the_deployments(store: Store) {
    let w = World::new(store, &one_model("rpm: 1000")).await;
    let d = w.d("m");
    let (acme, key) = (account("acme", 3), account("key:key_00000000000000a1", 2));
    let mut both = Need::new(5, Duration::from_secs(600));
    both.tenant = Some(TenantNeed {
        specs: vec![acme.clone(), key.clone()],
        costs: vec![0],
    });
    let mut tenant_only = both.clone();
    tenant_only.tenant = Some(TenantNeed::of(acme.clone(), vec![0]));
    let _ = grant_need(&w, &both, &[d]).await;
    let _ = grant_need(&w, &both, &[d]).await;
    // The key's two are used; its tenant has one left, for another of its keys.
    let r = refusal(&w, &both, &[d]).await;
    assert_eq!((r.limit, r.scope), (LimitKind::DailyRequests, Scope::Key));
    let _ = grant_need(&w, &tenant_only, &[d]).await;
    let r = refusal(&w, &tenant_only, &[d]).await;
    assert_eq!(
        (r.limit, r.scope),
        (LimitKind::DailyRequests, Scope::Tenant)
    );
    let midnight = utc_midnight_after(T0);
    assert_eq!(
        r.verdict,
        Verdict::NotNow(Duration::from_millis(midnight - T0))
    );
    let snap = w.ledger.tenant_snapshot(&acme).await.unwrap();
    assert_eq!(
        (snap.usage.requests_today, snap.usage.tokens_today),
        (3, 15)
    );
    let snap = w.ledger.tenant_snapshot(&key).await.unwrap();
    assert_eq!(
        (snap.usage.requests_today, snap.usage.rpd_limit),
        (2, Some(2))
    );
    w.clock.set_ms(midnight);
    let _ = grant_need(&w, &both, &[d]).await;
}
