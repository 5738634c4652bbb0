//! Failures are classified before acting: fail over without sleeping when another deployment
//! can serve, wait the stated time when none can, never retry billing there, return 4xx at once.

use std::time::{Duration, UNIX_EPOCH};

use router_core::clock::Clock;

use router_sdk::{AttemptOutcome, ChatRequest, Error, FailureClass};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

/// `cheap` (OpenAI-compatible) and `dear` (Anthropic), both serving `chat`.
async fn cheap_and_dear() -> World {
    World::new(&[
        Upstream::openai("cheap", (0.1, 0.2)),
        Upstream::anthropic("dear", (3.0, 15.0)),
    ])
    .await
}

async fn dear_answers(w: &World, times: u64) {
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(times)
        .mount(&w.servers[1])
        .await;
}

fn rate_limited() -> ResponseTemplate {
    error_json(429, "openai/rate_limit_429.json")
}

#[tokio::test]
async fn a_429_with_retry_after_fails_over_at_once_without_sleeping() {
    let w = cheap_and_dear().await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(rate_limited().insert_header("retry-after", "7"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    dear_answers(&w, 2).await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.provider, "dear");
    assert_eq!(
        w.sleeper.slept(),
        Vec::<Duration>::new(),
        "failover must not sleep"
    );
    assert_eq!(w.clock.now_ms(), T0);
    match &answer.receipt.attempts[0].outcome {
        AttemptOutcome::Failed {
            kind,
            status,
            cooldown,
            ..
        } => {
            assert_eq!(
                (kind.as_str(), *status, *cooldown),
                ("rate_limited", Some(429), Some(Duration::from_secs(7)))
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        w.snapshot("gpt-test").await.cooldown,
        Some(Duration::from_secs(7))
    );
    // While it cools down, the next request goes straight to the other deployment.
    let again = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(
        (
            again.receipt.provider.as_str(),
            again.receipt.attempts.len()
        ),
        ("dear", 1)
    );
    assert_eq!(w.in_flight().await, 0);
}

/// The only deployment says 429 once, then answers.
async fn only_provider_limited_once(w: &World, limited: impl wiremock::Respond + 'static) {
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(limited)
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
}

fn assert_waited(w: &World, stated: Duration) {
    let slept: Duration = w.sleeper.slept().iter().sum();
    // The stated wait, plus at most a quarter of it (bounded by the backoff base) of jitter.
    assert!(
        slept >= stated && slept <= stated + stated / 4,
        "slept {slept:?} for a stated {stated:?}"
    );
}

#[tokio::test]
async fn a_429_where_the_other_deployment_can_never_serve_waits_for_the_first_one() {
    // `dear` can never hold the request (its TPM is below it): its refusal after `cheap`'s 429
    // is not the answer; `cheap` is, once its stated second is over.
    let dear = Upstream {
        limits: "rpm: 1000, tpm: 5",
        ..Upstream::anthropic("dear", (3.0, 15.0))
    };
    let w = World::new(&[Upstream::openai("cheap", (0.1, 0.2)), dear]).await;
    only_provider_limited_once(&w, rate_limited().insert_header("retry-after", "1")).await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.provider, "cheap");
    assert_eq!(answer.receipt.attempts.len(), 2);
    assert_waited(&w, Duration::from_secs(1));
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn when_it_is_the_only_provider_it_waits_the_stated_time() {
    let w = World::new(&[Upstream::openai("only", (1.0, 1.0))]).await;
    only_provider_limited_once(&w, rate_limited().insert_header("retry-after", "3")).await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.attempts.len(), 2);
    assert_waited(&w, Duration::from_secs(3));
    assert_eq!(answer.receipt.waited, w.sleeper.slept().iter().sum());
}

#[tokio::test]
async fn an_http_date_retry_after_is_honoured() {
    let w = World::new(&[Upstream::openai("only", (1.0, 1.0))]).await;
    let at = UNIX_EPOCH + Duration::from_millis(T0) + Duration::from_secs(5);
    only_provider_limited_once(
        &w,
        rate_limited().insert_header("retry-after", httpdate::fmt_http_date(at).as_str()),
    )
    .await;
    w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_waited(&w, Duration::from_secs(5));
}

#[tokio::test]
async fn an_http_date_retry_after_counts_from_when_the_answer_came_not_from_the_sending() {
    let w = World::new(&[Upstream::openai("only", (1.0, 1.0))]).await;
    // The provider takes 3 s to refuse, and says to come back 5 s after its answer.
    let at = UNIX_EPOCH + Duration::from_millis(T0) + Duration::from_secs(3 + 5);
    let limited = rate_limited().insert_header("retry-after", httpdate::fmt_http_date(at).as_str());
    let clock = w.clock.clone();
    let slow = move |_: &wiremock::Request| {
        clock.advance_ms(3_000);
        limited.clone()
    };
    only_provider_limited_once(&w, slow).await;
    w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_waited(&w, Duration::from_secs(5));
}

#[tokio::test]
async fn retry_after_ms_is_honoured() {
    let w = World::new(&[Upstream::openai("only", (1.0, 1.0))]).await;
    only_provider_limited_once(&w, rate_limited().insert_header("retry-after-ms", "1500")).await;
    w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_waited(&w, Duration::from_millis(1500));
}

#[tokio::test]
async fn insufficient_quota_is_never_retried_on_that_deployment() {
    let w = cheap_and_dear().await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(error_json(429, "openai/insufficient_quota_429.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    dear_answers(&w, 3).await;
    for _ in 0..3 {
        assert_eq!(
            w.router
                .chat(ChatRequest::new("Hello"))
                .await
                .unwrap()
                .receipt
                .provider,
            "dear"
        );
    }
    let cooldown = w.snapshot("gpt-test").await.cooldown.expect("a cooldown");
    assert!(cooldown >= Duration::from_secs(3600), "{cooldown:?}");
    assert!(w.sleeper.slept().is_empty());
}

#[tokio::test]
async fn a_400_is_returned_at_once_and_not_retried_anywhere() {
    let w = cheap_and_dear().await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(error_json(400, "openai/bad_request_400.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    dear_answers(&w, 0).await;
    let err = w.router.chat(ChatRequest::new("Hello")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Provider {
                class: FailureClass::Invalid,
                status: Some(400),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!((err.status(), err.provider()), (Some(400), Some("cheap")));
    assert_eq!(w.snapshot("gpt-test").await.cooldown, None);
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn connection_refused_releases_the_reservation_and_fails_over() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let upstreams = [
        Upstream::openai("cheap", (0.1, 0.2)),
        Upstream::anthropic("dear", (3.0, 15.0)),
    ];
    let dear = wiremock::MockServer::start().await;
    let bases = [(&upstreams[0], refused), (&upstreams[1], dear.uri())];
    let w = World::with_bases(&upstreams, &bases, vec![dear]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.provider, "dear");
    assert!(
        matches!(&answer.receipt.attempts[0].outcome, AttemptOutcome::Failed { kind, .. } if kind == "connect")
    );
    // Released: the request never reached the provider, so it is not counted.
    let cheap = w.snapshot("gpt-test").await;
    assert_eq!(
        (
            cheap.usage.requests,
            cheap.usage.tokens,
            cheap.usage.in_flight
        ),
        (0, 0, 0)
    );
}

#[tokio::test]
async fn overloads_everywhere_stop_after_max_attempts() {
    let w = World::new(&[Upstream::openai("only", (1.0, 1.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(503).set_body_string("upstream unavailable"))
        .expect(4)
        .mount(&w.servers[0])
        .await;
    let err = w.router.chat(ChatRequest::new("Hello")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Provider {
                class: FailureClass::Overloaded,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.attempts().len(), 4);
    assert!(err.is_retryable());
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn a_call_that_does_not_answer_in_time_fails_over() {
    use std::sync::Arc;

    use router_core::config::{Registry, RetrySettings};
    use router_core::retry::RetryPolicy;
    use router_sdk::{Router, StaticKeys};

    let ups = [
        Upstream::openai("cheap", (0.1, 0.2)),
        Upstream::anthropic("dear", (3.0, 15.0)),
    ];
    let (slow, dear) = (
        wiremock::MockServer::start().await,
        wiremock::MockServer::start().await,
    );
    Mock::given(method("POST"))
        .respond_with(ok_json("openai/ok.json").set_delay(Duration::from_secs(3600)))
        .expect(1)
        .mount(&slow)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&dear)
        .await;
    let registry = Registry::from_yaml_str(
        &config(&[(&ups[0], slow.uri()), (&ups[1], dear.uri())]),
        "t.yaml",
    )
    .unwrap();
    let settings = RetrySettings {
        attempt_timeout: Duration::from_millis(200),
        ..registry.retry
    };
    let keys = ups.iter().fold(StaticKeys::new(), |k, u| {
        k.with(key_var(u.name), planted_key(u.name))
    });
    let router = Router::builder(registry)
        .retry_policy(RetryPolicy::new(settings))
        .keys(Arc::new(keys))
        .build()
        .await
        .unwrap();
    let answer = router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.receipt.provider, "dear");
    match &answer.receipt.attempts[0].outcome {
        AttemptOutcome::Failed {
            kind,
            message,
            cooldown,
            ..
        } => {
            assert_eq!(
                (kind.as_str(), message.as_str()),
                ("timeout", "no answer within 0.2s")
            );
            assert!(cooldown.is_some(), "a timed-out deployment cools down");
        }
        other => panic!("{other:?}"),
    }
    let all: Vec<_> = router.registry().deployment_ids().collect();
    let snaps = router.ledger().snapshot(&all).await.unwrap();
    assert!(snaps.iter().all(|s| s.usage.in_flight == 0));
}
