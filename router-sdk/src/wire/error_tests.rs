#![allow(clippy::unwrap_used)]

use super::*;
use crate::wire::classify::FailureClass::{self, *};
use crate::wire::for_api;
use crate::wire::headers::tests::headers;
use router_core::config::Api::{self, Anthropic, Gemini, OpenAi};

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

fn now() -> SystemTime {
    // 2024-09-27T17:28:00Z
    SystemTime::UNIX_EPOCH + S(1_727_458_080)
}

fn fixture(api: Api, name: &str) -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    std::fs::read(format!("{dir}/{}/{name}.json", api.as_str())).unwrap()
}

type Pairs = &'static [(&'static str, &'static str)];
/// `(api, status, fixture, headers, class, stated wait in ms, code)`.
type Case = (
    Api,
    u16,
    &'static str,
    Pairs,
    FailureClass,
    Option<u64>,
    &'static str,
);

const NONE: Pairs = &[];
const RETRY_MS: Pairs = &[("retry-after-ms", "247"), ("retry-after", "1")];
const RETRY_20: Pairs = &[("retry-after", "20")];
const OPENAI_RESET: Pairs = &[
    ("x-ratelimit-remaining-requests", "5"),
    ("x-ratelimit-reset-requests", "1s"),
    ("x-ratelimit-remaining-tokens", "0"),
    ("x-ratelimit-reset-tokens", "6m0s"),
];
const INPUT_RESET: Pairs = &[
    ("anthropic-ratelimit-input-tokens-remaining", "0"),
    (
        "anthropic-ratelimit-input-tokens-reset",
        "2024-09-27T17:28:42Z",
    ),
];

#[rustfmt::skip]
const CASES: &[Case] = &[
    (OpenAi, 429, "rate_limit_429", RETRY_MS, RateLimited, Some(247), "rate_limit_exceeded"),
    (OpenAi, 429, "rate_limit_429", OPENAI_RESET, RateLimited, Some(360_000), "rate_limit_exceeded"),
    (OpenAi, 429, "insufficient_quota_429", NONE, Billing, None, "insufficient_quota"),
    (OpenAi, 400, "bad_request_400", NONE, Invalid, None, "invalid_value"),
    (OpenAi, 401, "auth_401", NONE, Auth, None, "invalid_api_key"),
    (OpenAi, 500, "server_error_500", NONE, ServerError, None, "server_error"),
    (Anthropic, 429, "rate_limit_429", RETRY_20, RateLimited, Some(20_000), "rate_limit_error"),
    (Anthropic, 429, "rate_limit_429", INPUT_RESET, RateLimited, Some(42_000), "rate_limit_error"),
    (Anthropic, 529, "overloaded_529", NONE, Overloaded, None, "overloaded_error"),
    (Anthropic, 429, "spend_limit_429", NONE, Billing, None, "rate_limit_error"),
    (Anthropic, 400, "credit_balance_400", NONE, Billing, None, "invalid_request_error"),
    (Anthropic, 400, "bad_request_400", NONE, Invalid, None, "invalid_request_error"),
    (Anthropic, 401, "auth_401", NONE, Auth, None, "authentication_error"),
    (Anthropic, 500, "server_error_500", NONE, ServerError, None, "api_error"),
    (Gemini, 429, "per_minute_429", NONE, RateLimited, Some(37_000), "RESOURCE_EXHAUSTED"),
    (Gemini, 429, "per_day_429", NONE, Billing, Some(1_500), "RESOURCE_EXHAUSTED"),
    (Gemini, 503, "overloaded_503", NONE, Overloaded, None, "UNAVAILABLE"),
    (Gemini, 400, "bad_request_400", NONE, Invalid, None, "INVALID_ARGUMENT"),
    (Gemini, 400, "auth_400", NONE, Auth, None, "INVALID_ARGUMENT"),
    (Gemini, 403, "auth_403", NONE, Auth, None, "PERMISSION_DENIED"),
];

#[test]
fn error_fixtures() {
    for &(api, status, name, pairs, class, wait_ms, code) in CASES {
        let got = http_failure(
            for_api(api),
            status,
            &headers(pairs),
            &fixture(api, name),
            now(),
        );
        let case = format!("{api:?} {name} {pairs:?}");
        assert_eq!(got.class, class, "{case}");
        assert_eq!(got.status, Some(status), "{case}");
        assert_eq!(got.retry_after, wait_ms.map(MS), "{case}");
        assert_eq!(got.code.as_deref(), Some(code), "{case}");
        assert!(
            !got.message.is_empty() && !got.message.starts_with('{'),
            "{case}: {got}"
        );
    }
}

fn run(api: Api, status: u16, pairs: Pairs, body: &[u8]) -> Failure {
    http_failure(for_api(api), status, &headers(pairs), body, now())
}

#[test]
fn messages_are_the_providers() {
    let got = run(Anthropic, 529, NONE, &fixture(Anthropic, "overloaded_529"));
    assert_eq!(got.message, "Overloaded");
    assert_eq!(got.to_string(), "overloaded (HTTP 529): Overloaded");
    let got = run(Gemini, 429, NONE, &fixture(Gemini, "per_day_429"));
    assert!(
        got.message.starts_with("You exceeded your current quota"),
        "{got}"
    );
    assert_eq!(got.class, Billing, "per-day: retryDelay is not enough");
}

#[test]
fn bodies_that_are_not_json() {
    let html = b"<html>502 Bad Gateway</html>";
    let got = run(OpenAi, 502, NONE, html);
    assert_eq!((got.class, got.code), (Overloaded, None));
    assert_eq!(got.message, "<html>502 Bad Gateway</html>");
    let got = run(Gemini, 504, NONE, b"");
    assert_eq!((got.class, got.message.as_str()), (Overloaded, "HTTP 504"));
    assert_eq!(run(Anthropic, 418, NONE, &[0xff, 0xfe]).class, Invalid);
}

#[test]
fn wait_precedence() {
    let gemini = &fixture(Gemini, "per_minute_429");
    #[rustfmt::skip]
    let table: [(Pairs, Option<Duration>); 6] = [
        (&[("retry-after-ms", "1500"), ("retry-after", "9")], Some(MS(1_500))),
        (&[("retry-after-ms", "soon"), ("retry-after", "9")], Some(S(9))),
        (&[("retry-after", "2.5")], Some(MS(2_500))),
        (&[("retry-after", "Fri, 27 Sep 2024 17:28:10 GMT")], Some(S(10))),
        (&[("retry-after", "Thu, 26 Sep 2024 17:28:10 GMT")], Some(Duration::ZERO)),
        (&[("retry-after", "later")], Some(S(37))),
    ];
    for (pairs, want) in table {
        assert_eq!(
            run(Gemini, 429, pairs, gemini).retry_after,
            want,
            "{pairs:?}"
        );
    }
    let room = &[
        ("x-ratelimit-remaining-requests", "3"),
        ("x-ratelimit-reset-requests", "1s"),
    ];
    let got = run(OpenAi, 429, room, b"");
    assert_eq!(
        got.retry_after, None,
        "the reset of a dimension with room left is no wait"
    );
}

#[test]
fn stream_failures() {
    let gemini = br#"{"error":{"code":503,"message":"Overloaded.","status":"UNAVAILABLE"}}"#;
    let got = stream_failure(for_api(Gemini).error_body(gemini), gemini);
    assert_eq!((got.class, got.status), (Overloaded, None));
    let anthropic = br#"{"type":"error","error":{"type":"api_error","message":"Oops"}}"#;
    assert_eq!(
        stream_failure(for_api(Anthropic).error_body(anthropic), anthropic).class,
        ServerError
    );
    assert_eq!(
        stream_failure(for_api(OpenAi).error_body(b"nope"), b"nope").class,
        Decode
    );
}

#[test]
fn a_redirect_is_a_server_error_that_says_where_it_pointed() {
    let got = redirect_failure(
        307,
        &headers(&[("location", "https://elsewhere.example/v1")]),
    );
    assert_eq!((got.class, got.status), (ServerError, Some(307)));
    assert!(
        got.message.contains("https://elsewhere.example/v1"),
        "{got}"
    );
    assert!(got.message.contains("base_url"), "{got}");
    let got = redirect_failure(302, &headers(&[]));
    assert!(got.message.contains("elsewhere;"), "{got}");
}
