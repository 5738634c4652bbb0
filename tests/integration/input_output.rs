//! Input and output token limits (ITPM / OTPM), each counted against its own limit, on every
//! store: a deployment full of input still takes output and the reverse, settlement corrects
//! each part, and a provider's input and output reports are followed apart.

use std::time::Duration;

use router_core::ledger::{
    ActualUsage, Admission, Denial, LimitKind, Observation, Reservation, Scope, Verdict,
};

use crate::support::{Store, World, one_model};

every_store!(
    itpm_and_otpm_admit_what_a_combined_limit_would_refuse,
    an_itpm_full_deployment_refuses_while_otpm_has_room,
    an_otpm_full_deployment_refuses_while_itpm_has_room,
    input_or_output_above_its_limit_never_fits,
    settle_corrects_input_and_output_each,
    release_hands_back_input_and_output,
    output_reported_exhausted_stops_only_requests_that_need_output,
    input_reported_lower_fills_only_the_input_window,
    provider_wide_itpm_holds_across_models,
    input_and_output_are_counted_only_where_itpm_or_otpm_apply,
);

/// Anthropic's shape: input and output limited apart, no combined tpm.
const SPLIT: &str = "itpm: 1000, otpm: 200";

async fn grant(w: &World, input: u64, output: u64) -> Reservation {
    match w.admit_split(input, output, &[w.d("m")]).await {
        Admission::Granted(r) => r,
        Admission::Denied(d) => panic!("expected a grant of {input} + {output}, got {d:?}"),
    }
}

async fn deny(w: &World, input: u64, output: u64) -> Denial {
    match w.admit_split(input, output, &[w.d("m")]).await {
        Admission::Denied(d) => d,
        Admission::Granted(r) => panic!("expected a denial of {input} + {output}, got {r:?}"),
    }
}

async fn itpm_and_otpm_admit_what_a_combined_limit_would_refuse(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    // 950 tokens: above the 200 output limit and the smaller of the two, yet within each part.
    let r = grant(&w, 800, 150).await;
    assert_eq!((r.tokens, r.input_tokens), (950, 800));
    let u = w.usage(w.d("m")).await.usage;
    assert_eq!((u.tokens, u.input_tokens, u.output_tokens), (950, 800, 150));
    assert_eq!(
        (u.itpm_limit, u.otpm_limit, u.tpm_limit),
        (Some(1000), Some(200), None)
    );
}

async fn an_itpm_full_deployment_refuses_while_otpm_has_room(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    let r = grant(&w, 1000, 10).await;
    let d = deny(&w, 1, 10).await;
    assert_eq!(d.refusals[0].limit, LimitKind::InputTokens);
    assert_eq!(d.refusals[0].scope, Scope::Deployment);
    // With a request in flight, its settlement may give input back: ask again in a second.
    assert_eq!(d.retry_after(), Some(Duration::from_secs(1)));
    // Settled in full, nothing in flight: the window must slide.
    let used = ActualUsage {
        tokens: 1010,
        input_tokens: 1000,
        ..ActualUsage::default()
    };
    assert!(w.ledger.settle(&r, used).await.unwrap());
    let d = deny(&w, 1, 10).await;
    assert_eq!(d.retry_after(), Some(Duration::from_secs(61)));
    // Output has room: a request with no input still fits, up to exactly the limit.
    let _r = grant(&w, 0, 190).await;
    assert_eq!(
        deny(&w, 0, 1).await.refusals[0].limit,
        LimitKind::OutputTokens
    );
}

async fn an_otpm_full_deployment_refuses_while_itpm_has_room(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    let _r = grant(&w, 100, 200).await;
    let d = deny(&w, 10, 1).await;
    assert_eq!(d.refusals[0].limit, LimitKind::OutputTokens);
    assert!(!d.never_fits());
    let _r = grant(&w, 900, 0).await;
    assert_eq!(
        deny(&w, 1, 0).await.refusals[0].limit,
        LimitKind::InputTokens
    );
}

async fn input_or_output_above_its_limit_never_fits(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    let d = deny(&w, 1001, 0).await;
    assert_eq!(
        (d.refusals[0].limit, d.refusals[0].verdict),
        (LimitKind::InputTokens, Verdict::Never)
    );
    let d = deny(&w, 0, 201).await;
    assert_eq!(
        (d.refusals[0].limit, d.refusals[0].verdict),
        (LimitKind::OutputTokens, Verdict::Never)
    );
    assert_eq!(LimitKind::InputTokens.as_str(), "itpm");
    assert_eq!(LimitKind::OutputTokens.as_str(), "otpm");
}

async fn settle_corrects_input_and_output_each(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    let m = w.d("m");
    let r = grant(&w, 800, 150).await;
    // The prompt was smaller than estimated, the completion larger.
    assert!(
        w.ledger
            .settle(&r, ActualUsage::split(300, 190))
            .await
            .unwrap()
    );
    let u = w.usage(m).await.usage;
    assert_eq!((u.tokens, u.input_tokens, u.output_tokens), (490, 300, 190));
    let _r = grant(&w, 700, 10).await;
    deny(&w, 1, 0).await;
    deny(&w, 0, 1).await;
}

async fn release_hands_back_input_and_output(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    let m = w.d("m");
    let r = grant(&w, 800, 150).await;
    assert!(w.ledger.release(&r).await.unwrap());
    let u = w.usage(m).await.usage;
    assert_eq!((u.requests, u.input_tokens, u.output_tokens), (0, 0, 0));
    let _r = grant(&w, 1000, 200).await;
}

async fn output_reported_exhausted_stops_only_requests_that_need_output(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    let m = w.d("m");
    let none_left = Observation {
        output_tokens: Some((0, Duration::from_secs(10))),
        ..Observation::default()
    };
    w.ledger.observe(m, none_left).await.unwrap();
    let d = deny(&w, 10, 1).await;
    assert_eq!(d.refusals[0].limit, LimitKind::OutputTokens);
    assert!(
        d.retry_after()
            .is_some_and(|t| t <= Duration::from_secs(11))
    );
    // Input was not reported short: a request needing no output goes through.
    let _r = grant(&w, 500, 0).await;
    let reported = w.usage(m).await.reported.expect("the report is kept");
    assert_eq!(reported.output_tokens_remaining, Some(0));
    assert_eq!(reported.input_tokens_remaining, None);
    w.advance_s(11);
    let _r = grant(&w, 10, 200).await;
}

async fn input_reported_lower_fills_only_the_input_window(store: Store) {
    let w = World::new(store, &one_model(SPLIT)).await;
    let m = w.d("m");
    let obs = Observation {
        input_tokens: Some((100, Duration::from_secs(30))),
        output_tokens: Some((500, Duration::from_secs(30))),
        ..Observation::default()
    };
    w.ledger.observe(m, obs).await.unwrap();
    let u = w.usage(m).await.usage;
    assert_eq!((u.tokens, u.input_tokens, u.output_tokens), (0, 900, 0));
    let _r = grant(&w, 100, 200).await;
    assert_eq!(
        deny(&w, 1, 0).await.refusals[0].limit,
        LimitKind::InputTokens
    );
}

async fn provider_wide_itpm_holds_across_models(store: Store) {
    let yaml = r#"
providers:
  - name: p
    api: anthropic
    base_url: http://127.0.0.1:1
    api_key_env: P_KEY
    limits: { itpm: 1000, otpm: 300 }
    models:
      - { name: m, price: { input: 1, output: 2 }, limits: { itpm: 800 } }
      - { name: n, price: { input: 1, output: 2 }, limits: { itpm: 800 } }
"#;
    let w = World::new(store, yaml).await;
    let (m, n) = (w.d("m"), w.d("n"));
    assert!(matches!(
        w.admit_split(700, 100, &[m]).await,
        Admission::Granted(_)
    ));
    let Admission::Denied(d) = w.admit_split(400, 100, &[n]).await else {
        panic!("the provider's itpm is shared by its models");
    };
    assert_eq!(
        (d.refusals[0].limit, d.refusals[0].scope),
        (LimitKind::InputTokens, Scope::Provider)
    );
    assert!(matches!(
        w.admit_split(300, 200, &[n]).await,
        Admission::Granted(_)
    ));
    let Admission::Denied(d) = w.admit_split(0, 1, &[m, n]).await else {
        panic!("the provider's otpm is full");
    };
    assert!(
        d.refusals
            .iter()
            .all(|r| r.limit == LimitKind::OutputTokens)
    );
    let provider = w
        .usage(n)
        .await
        .provider
        .expect("provider-wide limits are tracked");
    assert_eq!(
        (provider.input_tokens, provider.itpm_limit),
        (1000, Some(1000))
    );
}

/// Input and output tokens are counted apart only for a deployment that it or its provider
/// limits by them: elsewhere no limit reads those counters, and the windows keep the tokens'
/// sum alone, through admission, settlement and release alike.
async fn input_and_output_are_counted_only_where_itpm_or_otpm_apply(store: Store) {
    let yaml = r#"
providers:
  - name: p
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: P_KEY
    models:
      - { name: m, price: { input: 1, output: 2 }, limits: { itpm: 1000, otpm: 200 } }
      - { name: n, price: { input: 1, output: 2 }, limits: { rpm: 10, tpm: 5000 } }
"#;
    let w = World::new(store, yaml).await;
    let (m, n) = (w.d("m"), w.d("n"));
    let Admission::Granted(on_m) = w.admit_split(800, 150, &[m]).await else {
        panic!("m has room");
    };
    let Admission::Granted(on_n) = w.admit_split(800, 150, &[n]).await else {
        panic!("n has room");
    };
    // The reservation says how the request splits; only m's window keeps the parts.
    assert_eq!((on_n.tokens, on_n.input_tokens), (950, 800));
    let u = w.usage(m).await.usage;
    assert_eq!((u.tokens, u.input_tokens, u.output_tokens), (950, 800, 150));
    let u = w.usage(n).await.usage;
    assert_eq!((u.tokens, u.input_tokens, u.output_tokens), (950, 0, 0));
    for r in [&on_m, &on_n] {
        assert!(
            w.ledger
                .settle(r, ActualUsage::split(300, 190))
                .await
                .unwrap()
        );
    }
    let u = w.usage(m).await.usage;
    assert_eq!((u.tokens, u.input_tokens, u.output_tokens), (490, 300, 190));
    let u = w.usage(n).await.usage;
    assert_eq!(
        (u.requests, u.tokens, u.input_tokens, u.output_tokens),
        (1, 490, 0, 0)
    );
    let Admission::Granted(again) = w.admit_split(100, 50, &[n]).await else {
        panic!("n has room");
    };
    assert!(w.ledger.release(&again).await.unwrap());
    let u = w.usage(n).await.usage;
    assert_eq!(
        (u.requests, u.tokens, u.input_tokens, u.output_tokens),
        (1, 490, 0, 0)
    );
}
