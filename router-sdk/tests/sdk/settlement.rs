//! Every path settles: after malformed answers, broken or dropped streams and dropped futures,
//! nothing is left in flight.

use std::time::Duration;

use futures_util::StreamExt;
use router_sdk::{ChatChunk, ChatRequest, Error, FailureClass};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

#[tokio::test]
async fn a_malformed_body_gives_a_typed_error_and_leaves_the_ledger_consistent() {
    let w = World::new(&[Upstream::openai("oa", (1.0, 1.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw("{\"choices\": [tru", "application/json"),
        )
        // A server error of the lone deployment: retried after backoff, up to max_attempts.
        .expect(4)
        .mount(&w.servers[0])
        .await;
    let err = w.router.chat(ChatRequest::new("Hello")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Provider {
                class: FailureClass::Decode,
                ..
            }
        ),
        "{err:?}"
    );
    let shown = err.to_string();
    assert!(
        shown.contains("HTTP 200") && shown.contains(r#"body starts: "{\"choices\": [tru""#),
        "{shown}"
    );
    let snap = w.snapshot("gpt-test").await;
    // The estimate stands for each call (tokens were probably spent), the slot is free.
    assert_eq!((snap.usage.requests, snap.usage.in_flight), (4, 0));
    assert!(
        snap.usage.tokens > 100,
        "estimate kept: {}",
        snap.usage.tokens
    );
}

#[tokio::test]
async fn a_529_mid_stream_ends_the_stream_with_an_error_and_is_not_retried() {
    let w = World::new(&[
        Upstream::anthropic("an", (3.0, 15.0)),
        Upstream::openai("backup", (5.0, 20.0)),
    ])
    .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_sse("anthropic/stream_error_529.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .respond_with(ok_json("openai/ok.json"))
        .expect(0)
        .mount(&w.servers[1])
        .await;
    let mut stream = w
        .router
        .chat_stream(ChatRequest::new("Hello"))
        .await
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatChunk::Delta("Par".into())
    );
    let reserved = w.snapshot("claude-test").await.usage.tokens;
    let err = stream.next().await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Provider {
                class: FailureClass::Overloaded,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(stream.next().await.is_none());
    let snap = w.snapshot("claude-test").await;
    // message_start's output count (1) is a placeholder, and no message_delta gave the real
    // one: the estimate stays counted, not 12 input + 1 output.
    assert!(reserved > 13, "reserved {reserved}");
    assert_eq!((snap.usage.tokens, snap.usage.in_flight), (reserved, 0));
    assert!(snap.cooldown.is_some(), "an overloaded provider cools down");
}

#[tokio::test]
async fn a_stream_that_fails_before_any_output_fails_over_and_keeps_the_estimate_counted() {
    // message_start, then the error (or nothing more): nothing for the caller yet.
    let full = String::from_utf8(fixture("anthropic/stream_error_529.sse")).unwrap();
    let start = full.split("event: content_block_start").next().unwrap();
    let error = full.split("event: error").nth(1).unwrap();
    for sse in [format!("{start}event: error{error}"), start.to_owned()] {
        let w = World::new(&[
            Upstream::anthropic("an", (3.0, 15.0)),
            Upstream::openai("backup", (5.0, 20.0)),
        ])
        .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
            .expect(1)
            .mount(&w.servers[0])
            .await;
        Mock::given(method("POST"))
            .respond_with(ok_sse("openai/stream.sse"))
            .expect(1)
            .mount(&w.servers[1])
            .await;
        let stream = w
            .router
            .chat_stream(ChatRequest::new("Hello"))
            .await
            .unwrap();
        assert_eq!(stream.provider(), "backup");
        let items: Vec<_> = stream.collect().await;
        assert!(
            matches!(items.first(), Some(Ok(ChatChunk::Delta(_)))),
            "{items:?}"
        );
        assert!(
            matches!(items.last(), Some(Ok(ChatChunk::Done(_)))),
            "{items:?}"
        );
        let snap = w.snapshot("claude-test").await;
        // It answered 200 (message_start reported the input): its limiter may have counted
        // the request, so the estimate stays; the deployment cools down.
        assert_eq!((snap.usage.requests, snap.usage.in_flight), (1, 0));
        assert!(snap.usage.tokens > 12, "{}", snap.usage.tokens);
        assert!(snap.cooldown.is_some());
    }
}

#[tokio::test]
async fn a_stream_cut_short_is_an_error_and_settles_what_was_reported() {
    let w = World::new(&[Upstream::openai("oa", (1.0, 1.0))]).await;
    let full = String::from_utf8(fixture("openai/stream.sse")).unwrap();
    let cut = full.split("data: [DONE]").next().unwrap().to_owned();
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_raw(cut, "text/event-stream"))
        .mount(&w.servers[0])
        .await;
    // A max_tokens below the 3 tokens reported: what stays counted is the reported usage.
    let req = ChatRequest {
        max_tokens: Some(1),
        ..ChatRequest::new("Hello")
    };
    let items: Vec<_> = w.router.chat_stream(req).await.unwrap().collect().await;
    let Some(Err(e)) = items.last() else {
        panic!("the stream did not end with an error: {items:?}")
    };
    assert!(
        matches!(
            e,
            Error::StreamBroken {
                how: router_sdk::Break::Unfinished,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.class(), "stream_broken");
    let snap = w.snapshot("gpt-test").await;
    assert_eq!((snap.usage.tokens, snap.usage.in_flight), (12, 0));
}

#[tokio::test]
async fn a_gemini_stream_cut_after_some_text_settles_the_estimate_not_its_running_count() {
    // $1 / $1000 per Mtok: an output token costs 1000 micro-USD, a prompt token 1.
    let w = World::with_extra(&[Upstream::gemini("ge", (1.0, 1000.0))], SPENDER).await;
    // The first chunk only: "The", with a running count of 9 prompt and 0 output tokens.
    let full = String::from_utf8(fixture("gemini/stream.sse")).unwrap();
    let cut = full.split("data: ").nth(1).unwrap();
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-test:streamGenerateContent"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(format!("data: {cut}"), "text/event-stream"),
        )
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let req = ChatRequest {
        tenant: Some("acme".into()),
        ..ChatRequest::new("Why is the sky blue?")
    };
    let mut stream = w.router.chat_stream(req).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatChunk::Delta("The".into())
    );
    let spec = router_core::ledger::TenantSpec {
        name: "acme".into(),
        limits: router_core::config::Limits {
            rpm: std::num::NonZeroU64::new(1000),
            ..Default::default()
        },
        budget: router_core::ledger::BudgetMicros {
            daily: Some(1_000_000_000),
            monthly: None,
        },
    };
    let ledger = w.router.ledger();
    let spent = || async {
        ledger
            .tenant_snapshot(&spec)
            .await
            .unwrap()
            .spent_today_micros
    };
    // In flight, the spend holds the estimate.
    let estimate = spent().await;
    let err = stream.next().await.unwrap().unwrap_err();
    assert!(matches!(err, Error::StreamBroken { .. }), "{err:?}");
    assert!(stream.next().await.is_none());
    // The running count (9 prompt, 0 output tokens: 9 micro-USD) is not final: the estimate is
    // settled.
    assert!(estimate > 1000, "estimate {estimate}");
    assert_eq!(spent().await, estimate);
    assert_eq!(w.snapshot("gemini-test").await.usage.in_flight, 0);
}

#[tokio::test]
async fn a_stream_dropped_mid_way_frees_its_slot() {
    let w = World::new(&[Upstream::openai("oa", (1.0, 1.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_sse("openai/stream.sse"))
        .mount(&w.servers[0])
        .await;
    let mut stream = w
        .router
        .chat_stream(ChatRequest::new("Hello"))
        .await
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatChunk::Delta("Hel".into())
    );
    assert_eq!(w.in_flight().await, 1);
    drop(stream);
    assert_eq!(w.in_flight().await, 0);
    assert_eq!(w.snapshot("gpt-test").await.usage.requests, 1);
}

#[tokio::test]
async fn a_dropped_chat_future_frees_its_slot() {
    let w = World::new(&[Upstream::openai("oa", (1.0, 1.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json").set_delay(Duration::from_secs(3600)))
        .mount(&w.servers[0])
        .await;
    let router = w.router.clone();
    let call = tokio::spawn(async move { router.chat(ChatRequest::new("Hello")).await });
    // The request is in flight once the upstream has it.
    while w.servers[0]
        .received_requests()
        .await
        .unwrap_or_default()
        .is_empty()
    {
        tokio::task::yield_now().await;
    }
    assert_eq!(w.in_flight().await, 1);
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn a_request_larger_than_every_limit_never_fits_and_says_so() {
    let mut up = Upstream::openai("oa", (1.0, 1.0));
    up.limits = "tpm: 50";
    let w = World::new(&[up]).await;
    let err = w.router.chat(ChatRequest::new("Hello")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NoCapacity {
                never: true,
                retry_after: None,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("oa/gpt-test: tpm never fits"),
        "{err}"
    );
    assert!(w.sleeper.slept().is_empty());
}

#[tokio::test]
async fn no_capacity_before_the_deadline_fails_with_a_retry_after() {
    let mut up = Upstream::openai("oa", (1.0, 1.0));
    up.limits = "rpm: 1";
    let w = World::new(&[up]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    let req = ChatRequest {
        deadline: Some(Duration::from_secs(10)),
        ..ChatRequest::new("Hello")
    };
    let err = w.router.chat(req).await.unwrap_err();
    assert!(
        matches!(err, Error::NoCapacity { never: false, .. }),
        "{err:?}"
    );
    assert_eq!(err.retry_after(), Some(Duration::from_secs(61)));
    assert!(err.is_retryable());
    assert!(
        w.sleeper.slept().is_empty(),
        "a wait past the deadline is not started"
    );
}

#[tokio::test]
async fn a_timeout_settles_the_estimate_frees_the_slot_and_says_timed_out() {
    let w = World::new(&[Upstream::openai("oa", (1.0, 1.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ok_json("openai/ok.json").set_delay(Duration::from_secs(3600)))
        .mount(&w.servers[0])
        .await;
    // The deadline bounds the call: the provider never answers within it.
    let req = ChatRequest {
        deadline: Some(Duration::from_millis(300)),
        ..ChatRequest::new("Hello")
    };
    let err = w.router.chat(req).await.unwrap_err();
    assert!(
        matches!(err, Error::Transport { timeout: true, .. }),
        "{err:?}"
    );
    // Not "no capacity": the provider was reached and did not answer in time.
    let timed_out = |a: &router_sdk::Attempt| matches!(&a.outcome, router_sdk::AttemptOutcome::Failed { kind, .. } if kind == "timeout");
    assert!(err.attempts().iter().all(timed_out), "{err:?}");
    let snap = w.snapshot("gpt-test").await;
    // Whether the provider spent tokens is unknown: each call's estimate stands; no slot is held.
    assert_eq!(snap.usage.in_flight, 0);
    assert_eq!(snap.usage.requests, err.attempts().len() as u64);
    assert!(snap.usage.tokens > 0);
}

#[tokio::test]
async fn an_anthropic_deployment_under_itpm_and_otpm_settles_input_and_output_apart() {
    let mut an = Upstream::anthropic("an", (3.0, 15.0));
    an.limits = "itpm: 1000, otpm: 200";
    let w = World::new(&[an]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    // Several hundred prompt tokens and up to 150 completion tokens: more than the output
    // limit alone, within each limit apart.
    let mut req = ChatRequest::new("word ".repeat(400));
    req.max_tokens = Some(150);
    let answer = w.router.chat(req).await.unwrap();
    let usage = answer.receipt.usage;
    let snap = w.snapshot("claude-test").await.usage;
    // The prompt less its cache reads (which Anthropic's ITPM does not count).
    let counted = usage.prompt_tokens - usage.cached_prompt_tokens;
    assert_eq!(
        (snap.input_tokens, snap.output_tokens, snap.tokens),
        (
            counted,
            usage.completion_tokens,
            counted + usage.completion_tokens
        ),
        "the provider's prompt settles against itpm, its completion against otpm"
    );
    assert_eq!((snap.itpm_limit, snap.otpm_limit), (Some(1000), Some(200)));
}

/// An agent's turn is mostly cache reads, which Anthropic's ITPM does not count: settled
/// without them, a deployment is not seen fuller than its provider sees it. The tenant's cost
/// still counts every token, the cache reads at their price.
#[tokio::test]
async fn an_anthropic_prompt_read_from_the_cache_settles_only_its_uncached_part_against_itpm() {
    let mut an = Upstream::anthropic("an", (3.0, 15.0));
    an.limits = "itpm: 100000, otpm: 10000";
    let w = World::new(&[an]).await;
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "done"}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {
            "input_tokens": 40, "cache_creation_input_tokens": 260,
            "cache_read_input_tokens": 20000, "output_tokens": 12
        }
    });
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(ChatRequest::new("next step")).await.unwrap();
    assert_eq!(answer.receipt.usage.prompt_tokens, 20_300);
    assert_eq!(answer.receipt.usage.cached_prompt_tokens, 20_000);
    let snap = w.snapshot("claude-test").await.usage;
    assert_eq!((snap.input_tokens, snap.output_tokens), (300, 12));
}

/// Anthropic's headers at a stream's opening count its `max_tokens` against OTPM, as the ledger
/// does then. Followed at the opening, they leave the ledger where the provider is: once the
/// stream settles to its real output, the unused part is free again, not counted a second time
/// as someone else's use until the provider's reset.
#[tokio::test]
async fn a_streams_opening_report_is_followed_before_its_settlement_gives_output_back() {
    let mut an = Upstream::anthropic("an", (3.0, 15.0));
    an.limits = "itpm: 10000, otpm: 1000";
    let w = World::new(&[an]).await;
    let reset = rfc3339(T0 / 1000 + 60);
    let sse = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":20,"output_tokens":1}}}"#,
        "\n\nevent: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        "\n\nevent: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        "\n\nevent: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":10}}"#,
        "\n\nevent: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    );
    // The provider counts the stream's 800 reserved output tokens, and nothing else.
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(sse, "text/event-stream")
                .insert_header("anthropic-ratelimit-output-tokens-limit", "1000")
                .insert_header("anthropic-ratelimit-output-tokens-remaining", "200")
                .insert_header("anthropic-ratelimit-output-tokens-reset", reset.as_str()),
        )
        .mount(&w.servers[0])
        .await;
    let mut req = ChatRequest::new("Hi");
    req.max_tokens = Some(800);
    let mut stream = w.router.chat_stream(req).await.unwrap();
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
    }
    let snap = w.snapshot("claude-test").await.usage;
    assert_eq!(
        snap.output_tokens, 10,
        "the real output, and no phantom use"
    );
    assert_eq!(w.in_flight().await, 0);
}
