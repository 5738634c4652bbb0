//! What a provider's error means, and what to do about it.
//!
//! [`classify`] turns a status, headers and body into a [`Failure`]: a [`FailureClass`] that says
//! whether to fail over and whether to cool the deployment down, the provider's own message, and
//! the wait the provider stated. It is pure: `now` is passed in for HTTP-date and RFC 3339 waits.

use std::fmt;
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use router_core::config::Api;
use router_core::retry::FailureKind;

use super::{anthropic, excerpt, gemini, headers, openai};
use crate::secret::ApiKey;

/// Longest provider message kept in a [`Failure`].
const MESSAGE_MAX: usize = 500;

/// What kind of failure a provider reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// 429: that deployment is full for now. Cool down for the stated wait; fail over.
    RateLimited,
    /// 529 / `overloaded_error`, 502, 503, 504, 408: provider capacity. Cool down; fail over.
    Overloaded,
    /// 500 and other 5xx: retry with backoff; fail over.
    ServerError,
    /// `insufficient_quota`, spend limit, credit balance, a per-day quota, 402: long cooldown;
    /// fail over; never retried on that deployment.
    Billing,
    /// 401 / 403 or an invalid key: return at once.
    Auth,
    /// 400, 404, 422 and other 4xx: the request is wrong; return at once.
    Invalid,
    /// The provider answered something we cannot read.
    Decode,
}

impl FailureClass {
    /// What the retry policy makes of it.
    pub(crate) fn kind(self) -> FailureKind {
        match self {
            Self::RateLimited => FailureKind::RateLimited,
            Self::Overloaded => FailureKind::Overloaded,
            Self::ServerError => FailureKind::ServerError,
            Self::Billing => FailureKind::Billing,
            Self::Auth | Self::Invalid | Self::Decode => FailureKind::Fatal,
        }
    }

    /// The class an HTTP status implies on its own.
    pub(crate) fn from_status(status: u16) -> Self {
        match status {
            429 => Self::RateLimited,
            402 => Self::Billing,
            401 | 403 => Self::Auth,
            408 | 502 | 503 | 504 | 529 => Self::Overloaded,
            400..=499 => Self::Invalid,
            _ => Self::ServerError,
        }
    }

    /// A short stable name, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::Overloaded => "overloaded",
            Self::ServerError => "server_error",
            Self::Billing => "billing",
            Self::Auth => "auth",
            Self::Invalid => "invalid",
            Self::Decode => "decode",
        }
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified provider failure (HTTP error, or an error event inside a stream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
pub(crate) struct Failure {
    /// What it means.
    pub(crate) class: FailureClass,
    /// The HTTP status; `None` for an error inside a stream that began with 200.
    pub(crate) status: Option<u16>,
    /// The wait the provider stated, if any.
    pub(crate) retry_after: Option<Duration>,
    /// The provider's message (or a body excerpt), truncated.
    pub(crate) message: String,
    /// The provider's error code or type (`rate_limit_exceeded`, `overloaded_error`, ...).
    pub(crate) code: Option<String>,
}

impl Failure {
    /// A response or stream event we could not decode.
    pub(crate) fn decode(message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            class: FailureClass::Decode,
            status: None,
            retry_after: None,
            message,
            code: None,
        }
    }

    /// Replaces any occurrence of `key` in the message (belt and braces: providers mask keys).
    pub(crate) fn redact(&mut self, key: &ApiKey) {
        if !key.expose().is_empty() && self.message.contains(key.expose()) {
            self.message = self.message.replace(key.expose(), "***");
        }
    }
}

/// What a provider module reads from an error body.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ErrorBody {
    /// The provider's message.
    pub(crate) message: String,
    /// The provider's code or type.
    pub(crate) code: Option<String>,
    /// The HTTP status the body names (Gemini `error.code`, Anthropic's type), for stream errors.
    pub(crate) status: Option<u16>,
    /// A class the body makes certain, overriding the status (billing, overload, bad key).
    pub(crate) class: Option<FailureClass>,
    /// A wait stated in the body (Gemini `RetryInfo.retryDelay`).
    pub(crate) retry_delay: Option<Duration>,
}

fn error_body(api: Api, body: &[u8]) -> Option<ErrorBody> {
    match api {
        Api::OpenAi => openai::error_body(body),
        Api::Anthropic => anthropic::error_body(body),
        Api::Gemini => gemini::error_body(body),
    }
}

/// Classifies an HTTP error response.
///
/// The class comes from the status, unless the body makes it certain (billing, overload, an
/// invalid key). `x-should-retry: false` turns a rate limit into billing (it will not clear by
/// waiting); `x-should-retry: true` turns an invalid request into a server error (retry).
pub(crate) fn classify(
    api: Api,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Failure {
    let parsed = error_body(api, body).unwrap_or_else(|| ErrorBody {
        message: if body.is_empty() {
            format!("HTTP {status}")
        } else {
            excerpt(body)
        },
        ..ErrorBody::default()
    });
    let mut class = parsed
        .class
        .unwrap_or_else(|| FailureClass::from_status(status));
    match headers::header_str(headers, "x-should-retry") {
        Some("false") if class == FailureClass::RateLimited => class = FailureClass::Billing,
        Some("true") if class == FailureClass::Invalid => class = FailureClass::ServerError,
        _ => {}
    }
    Failure {
        class,
        status: Some(status),
        retry_after: stated_wait(api, headers, parsed.retry_delay, now),
        message: truncate(parsed.message),
        code: parsed.code,
    }
}

/// Classifies an error that arrived inside a stream (`event: error`, or a chunk with `error`).
pub(crate) fn stream_failure(api: Api, data: &[u8]) -> Failure {
    let Some(parsed) = error_body(api, data) else {
        return Failure::decode(format!("unreadable stream error: {}", excerpt(data)));
    };
    let class = parsed.class.unwrap_or_else(|| {
        parsed
            .status
            .map_or(FailureClass::ServerError, FailureClass::from_status)
    });
    Failure {
        class,
        status: None,
        retry_after: parsed.retry_delay,
        message: truncate(parsed.message),
        code: parsed.code,
    }
}

/// The provider's stated wait, by precedence: `retry-after-ms`, `retry-after`, the body's
/// `retryDelay`, then the reset of an exhausted dimension in the rate-limit headers.
fn stated_wait(
    api: Api,
    headers: &HeaderMap,
    body_delay: Option<Duration>,
    now: SystemTime,
) -> Option<Duration> {
    let ms = headers::header_str(headers, "retry-after-ms").and_then(headers::parse_retry_after_ms);
    ms.or_else(|| {
        let value = headers::header_str(headers, "retry-after")?;
        headers::parse_retry_after(value, now)
    })
    .or(body_delay)
    .or_else(|| headers::exhausted_reset(api, headers, now))
}

fn truncate(message: String) -> String {
    match message.char_indices().nth(MESSAGE_MAX) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::headers::tests::headers;
    use Api::{Anthropic, Gemini, OpenAi};
    use FailureClass::*;

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
            let got = classify(api, status, &headers(pairs), &fixture(api, name), now());
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
        classify(api, status, &headers(pairs), body, now())
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
        let long = "x".repeat(2_000);
        let body = format!(r#"{{"error": {{"message": "{long}"}}}}"#);
        let got = run(OpenAi, 500, NONE, body.as_bytes());
        assert_eq!(got.message.chars().count(), MESSAGE_MAX + 1);
    }

    #[test]
    fn statuses_alone() {
        #[rustfmt::skip]
        let table = [
            (429, RateLimited), (402, Billing), (401, Auth), (403, Auth), (408, Overloaded),
            (502, Overloaded), (503, Overloaded), (504, Overloaded), (529, Overloaded),
            (500, ServerError), (501, ServerError), (302, ServerError),
            (400, Invalid), (404, Invalid), (413, Invalid), (422, Invalid),
        ];
        for (status, class) in table {
            assert_eq!(FailureClass::from_status(status), class, "{status}");
            assert_eq!(run(OpenAi, status, NONE, b"{}").class, class, "{status}");
        }
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
    fn should_retry_header() {
        let no = &[("x-should-retry", "false")];
        let yes = &[("x-should-retry", "true")];
        assert_eq!(
            run(OpenAi, 429, no, &fixture(OpenAi, "rate_limit_429")).class,
            Billing
        );
        assert_eq!(run(OpenAi, 503, no, b"").class, Overloaded);
        assert_eq!(run(OpenAi, 409, yes, b"").class, ServerError);
        assert_eq!(run(OpenAi, 401, yes, b"").class, Auth);
    }

    #[test]
    fn actions_per_class() {
        let failure = |class, retry_after| Failure {
            retry_after,
            class,
            ..Failure::decode("")
        };
        let table = [
            (RateLimited, true, FailureKind::RateLimited),
            (Overloaded, true, FailureKind::Overloaded),
            (ServerError, true, FailureKind::ServerError),
            (Billing, true, FailureKind::Billing),
            (Auth, false, FailureKind::Fatal),
            (Invalid, false, FailureKind::Fatal),
            (Decode, false, FailureKind::Fatal),
        ];
        for (class, elsewhere, kind) in table {
            let f = failure(class, Some(S(5)));
            assert_eq!(f.class.kind() != FailureKind::Fatal, elsewhere, "{class}");
            assert_eq!(class.kind(), kind, "{class}");
        }
    }

    #[test]
    fn stream_failures_and_redaction() {
        let gemini = br#"{"error":{"code":503,"message":"Overloaded.","status":"UNAVAILABLE"}}"#;
        let got = stream_failure(Gemini, gemini);
        assert_eq!((got.class, got.status), (Overloaded, None));
        let anthropic = br#"{"type":"error","error":{"type":"api_error","message":"Oops"}}"#;
        assert_eq!(stream_failure(Anthropic, anthropic).class, ServerError);
        assert_eq!(stream_failure(OpenAi, b"nope").class, Decode);
        let key = ApiKey::new("sk-planted-123".to_owned());
        let mut f = Failure::decode("echoed sk-planted-123 back");
        f.redact(&key);
        assert_eq!(f.message, "echoed *** back");
    }
}
