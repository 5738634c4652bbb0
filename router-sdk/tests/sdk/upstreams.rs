//! Misbehaving upstreams, per wire format, whole and streamed.

use std::time::Duration;

use futures_util::StreamExt;
use router_sdk::{AttemptOutcome, ChatChunk, ChatRequest, Error};
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
        return Ok((answer.provider, answer.attempts));
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
