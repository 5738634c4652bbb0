//! Misbehaving upstreams, per wire format, whole and streamed: redirects, errors inside a 200,
//! answers with nothing in them, absurd usage and unreadable bodies.

use std::time::Duration;

use futures_util::StreamExt;
use router_sdk::{AttemptOutcome, ChatChunk, ChatRequest, Error, FailureClass};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// One wire format: how to configure it, where it is called, its fixture directory.
#[derive(Clone, Copy)]
struct Format {
    upstream: fn(&'static str, (f64, f64)) -> Upstream,
    whole: &'static str,
    streamed: &'static str,
    dir: &'static str,
}

const FORMATS: [Format; 3] = [
    Format {
        upstream: Upstream::openai,
        whole: OPENAI_PATH,
        streamed: OPENAI_PATH,
        dir: "openai",
    },
    Format {
        upstream: Upstream::anthropic,
        whole: ANTHROPIC_PATH,
        streamed: ANTHROPIC_PATH,
        dir: "anthropic",
    },
    Format {
        upstream: Upstream::gemini,
        whole: "/v1beta/models/gemini-test:generateContent",
        streamed: "/v1beta/models/gemini-test:streamGenerateContent",
        dir: "gemini",
    },
];

impl Format {
    fn route(&self, stream: bool) -> &'static str {
        if stream { self.streamed } else { self.whole }
    }

    /// A good answer from this format's `ok.json` / `stream.sse`.
    fn ok(&self, stream: bool) -> ResponseTemplate {
        if stream {
            ok_sse(&format!("{}/stream.sse", self.dir))
        } else {
            ok_json(&format!("{}/ok.json", self.dir))
        }
    }
}

/// `cheap` speaking `format`, and a healthy, dearer OpenAI-compatible `dear`.
async fn cheap_and_dear(format: Format, stream: bool) -> World {
    let w = World::new(&[
        (format.upstream)("cheap", (0.1, 0.2)),
        Upstream::openai("dear", (5.0, 20.0)),
    ])
    .await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(FORMATS[0].ok(stream))
        .expect(1)
        .mount(&w.servers[1])
        .await;
    w
}

/// What the caller got: the provider that answered and the attempts, whole or streamed.
async fn answer(w: &World, stream: bool) -> Result<(String, Vec<router_sdk::Attempt>), Error> {
    if !stream {
        let answer = w.router.chat(ChatRequest::new("Hello")).await?;
        return Ok((answer.receipt.provider, answer.receipt.attempts));
    }
    let items: Vec<_> = w
        .router
        .chat_stream(ChatRequest::new("Hello"))
        .await?
        .collect()
        .await;
    match items.into_iter().last() {
        Some(Ok(ChatChunk::Done(summary))) => Ok((summary.provider, summary.attempts)),
        Some(Err(e)) => Err(e),
        other => panic!("a stream ends with Done or an error, not {other:?}"),
    }
}

/// The first attempt's failure kind and status.
fn first_failure(attempts: &[router_sdk::Attempt]) -> (String, Option<u16>, Option<Duration>) {
    match &attempts[0].outcome {
        AttemptOutcome::Failed {
            kind,
            status,
            cooldown,
            ..
        } => (kind.clone(), *status, *cooldown),
        other => panic!("the first attempt failed, not {other:?}"),
    }
}

#[tokio::test]
async fn a_redirect_is_never_followed_and_the_request_fails_over_as_a_server_error() {
    for format in FORMATS {
        for stream in [false, true] {
            let case = format!("{} stream={stream}", format.dir);
            let w = cheap_and_dear(format, stream).await;
            let elsewhere = MockServer::start().await;
            Mock::given(method("POST"))
                .respond_with(format.ok(stream))
                .expect(0)
                .mount(&elsewhere)
                .await;
            let location = format!("{}{}", elsewhere.uri(), format.route(stream));
            Mock::given(method("POST"))
                .and(path(format.route(stream)))
                .respond_with(ResponseTemplate::new(307).insert_header("location", location))
                .expect(1)
                .mount(&w.servers[0])
                .await;
            let (provider, attempts) = answer(&w, stream).await.unwrap();
            assert_eq!(provider, "dear", "{case}");
            let (kind, status, _) = first_failure(&attempts);
            assert_eq!(
                (kind.as_str(), status),
                ("server_error", Some(307)),
                "{case}"
            );
            assert!(
                elsewhere.received_requests().await.unwrap().is_empty(),
                "{case}: the key and the prompt went to another origin"
            );
            assert_eq!(w.in_flight().await, 0, "{case}");
        }
    }
}

#[tokio::test]
async fn a_200_whose_body_is_an_error_object_is_that_error_and_fails_over() {
    let cases = [
        (FORMATS[0], "openai/rate_limit_in_200.json", "rate_limited"),
        (FORMATS[1], "anthropic/overloaded_in_200.json", "overloaded"),
        (FORMATS[2], "gemini/rate_limit_in_200.json", "rate_limited"),
    ];
    for (format, fixture, want) in cases {
        let w = cheap_and_dear(format, false).await;
        Mock::given(method("POST"))
            .and(path(format.whole))
            .respond_with(ok_json(fixture).insert_header("retry-after", "7"))
            .expect(1)
            .mount(&w.servers[0])
            .await;
        let (provider, attempts) = answer(&w, false).await.unwrap();
        assert_eq!(provider, "dear", "{fixture}");
        let (kind, status, cooldown) = first_failure(&attempts);
        assert_eq!(
            (kind.as_str(), status, cooldown),
            (want, Some(200), Some(Duration::from_secs(7))),
            "{fixture}"
        );
    }
}

/// Calls a lone deployment gets for one request that keeps failing as a server error: retried
/// after a backoff up to `retry.max_attempts` calls, unless a streamed answer had begun (text, a
/// tool call or a finish had come): that is never retried.
fn calls_to_a_lone_deployment(answer_begun: bool) -> u64 {
    if answer_begun { 1 } else { 4 }
}

/// The only upstream speaks `format` and answers `template`, failing after the answer began
/// or not; the caller's result.
async fn only_upstream(
    format: Format,
    stream: bool,
    template: ResponseTemplate,
    answer_begun: bool,
) -> World {
    let w = World::new(&[(format.upstream)("only", (1.0, 1.0))]).await;
    Mock::given(method("POST"))
        .and(path(format.route(stream)))
        .respond_with(template)
        .expect(calls_to_a_lone_deployment(answer_begun))
        .mount(&w.servers[0])
        .await;
    w
}

/// Asserts the call failed as a malformed answer, and nothing is left in flight.
async fn assert_malformed(w: &World, stream: bool, case: &str) -> String {
    let err = answer(w, stream).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Provider {
                class: FailureClass::Decode,
                ..
            }
        ),
        "{case}: {err:?}"
    );
    assert_eq!(w.in_flight().await, 0, "{case}");
    err.to_string()
}

#[tokio::test]
async fn no_choices_candidates_or_content_is_a_malformed_answer() {
    let empty = [
        "openai/no_choices",
        "anthropic/no_content",
        "gemini/no_candidates",
    ];
    for (format, name) in FORMATS.into_iter().zip(empty) {
        let w = only_upstream(format, false, ok_json(&format!("{name}.json")), false).await;
        assert_malformed(&w, false, name).await;
        // It ends without saying anything: retried as a whole answer would be.
        let w = only_upstream(format, true, ok_sse(&format!("{name}.sse")), false).await;
        assert_malformed(&w, true, name).await;
    }
}

#[tokio::test]
async fn usage_near_2_to_the_64_is_a_malformed_answer_not_a_settlement() {
    for format in FORMATS {
        let name = format!("{}/huge_usage", format.dir);
        let w = only_upstream(format, false, ok_json(&format!("{name}.json")), false).await;
        let shown = assert_malformed(&w, false, &name).await;
        assert!(
            shown.contains("100000000"),
            "{name}: names the bound: {shown}"
        );
        // Gemini's usage comes in its first event, which the caller never gets: retried. The
        // others report usage after the text began.
        let begun = format.dir != "gemini";
        let w = only_upstream(format, true, ok_sse(&format!("{name}.sse")), begun).await;
        assert_malformed(&w, true, &name).await;
        let tokens = w.snapshot("chat").await.usage.tokens;
        assert!(
            tokens < 1_000_000,
            "{name}: settles the estimate, not {tokens}"
        );
    }
}

#[tokio::test]
async fn an_unreadable_200_is_a_malformed_answer_that_cools_the_deployment_down() {
    let bodies: [&[u8]; 2] = [
        b"<html><body>Bad gateway</body></html>",
        b"{\"choices\": [{\"ind",
    ];
    for format in FORMATS {
        for body in bodies {
            let case = format!("{} {}", format.dir, String::from_utf8_lossy(body));
            let template = ResponseTemplate::new(200).set_body_raw(body, "application/json");
            let w = only_upstream(format, false, template, false).await;
            assert_malformed(&w, false, &case).await;
        }
        // A stream whose first event cannot be read: the deployment's fault, so it cools down,
        // and retried, since the caller has nothing yet.
        let template = ResponseTemplate::new(200)
            .set_body_raw("data: {\"candidates\": [tru\n\n", "text/event-stream");
        let w = only_upstream(format, true, template, false).await;
        assert_malformed(&w, true, format.dir).await;
        assert!(
            w.snapshot("chat").await.cooldown.is_some(),
            "{}: a server error of that deployment cools it down",
            format.dir
        );
    }
}

#[tokio::test]
async fn a_client_built_to_follow_redirects_follows_none_either() {
    let upstream = MockServer::start().await;
    let elsewhere = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(FORMATS[1].ok(false))
        .expect(0)
        .mount(&elsewhere)
        .await;
    let location = format!("{}{ANTHROPIC_PATH}", elsewhere.uri());
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(307).insert_header("location", location))
        .expect(1..)
        .mount(&upstream)
        .await;
    let cheap = Upstream::anthropic("cheap", (0.1, 0.2));
    let yaml = config(&[(&cheap, upstream.uri())]);
    let registry = router_core::config::Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let keys = router_sdk::StaticKeys::new().with(key_var("cheap"), planted_key("cheap"));
    let router = router_sdk::Router::builder(registry)
        .keys(std::sync::Arc::new(keys))
        .http_client(reqwest::Client::builder().redirect(reqwest::redirect::Policy::limited(5)))
        .build()
        .await
        .unwrap();
    let e = router.chat(ChatRequest::new("Hello")).await.unwrap_err();
    assert!(e.to_string().contains("307"), "{e}");
    assert!(
        elsewhere.received_requests().await.unwrap().is_empty(),
        "the key (x-api-key) and the prompt went to another origin"
    );
}
