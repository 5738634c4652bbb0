//! What a provider's error means, and what to do about it.
//!
//! [`classify`] turns a [`ParsedError`] (status, the provider's error body as its wire format read
//! it, the stated wait) into a [`Failure`]: a [`FailureClass`] that says whether to fail over and
//! whether to cool the deployment down, the provider's own message, and the wait the provider
//! stated. It is pure and knows no provider: the wire formats do the reading (`wire::error`).

use std::fmt;
use std::time::Duration;

use router_core::retry::FailureKind;

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
    /// The provider answered 200 with something we cannot read, no answer in it, or implausible
    /// usage: the deployment's fault. Short cooldown; fail over.
    Decode,
}

impl FailureClass {
    /// What the retry policy makes of it.
    pub(crate) fn kind(self) -> FailureKind {
        match self {
            Self::RateLimited => FailureKind::RateLimited,
            Self::Overloaded => FailureKind::Overloaded,
            Self::Billing => FailureKind::Billing,
            // An answer we cannot read is the deployment's fault: short cooldown, fail over.
            Self::ServerError | Self::Decode => FailureKind::ServerError,
            Self::Auth | Self::Invalid => FailureKind::Fatal,
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
}

/// What a wire format reads from an error body: the provider's own words, before classification.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ErrorBody {
    /// The provider's message.
    pub(crate) message: String,
    /// The provider's code or type.
    pub(crate) code: Option<String>,
    /// The HTTP status the body names (Gemini `error.code`, Anthropic's type), for errors that
    /// arrive with a 200 or inside a stream.
    pub(crate) status: Option<u16>,
    /// A class the body makes certain, overriding the status (billing, overload, bad key).
    pub(crate) class: Option<FailureClass>,
    /// A wait stated in the body (Gemini `RetryInfo.retryDelay`).
    pub(crate) retry_delay: Option<Duration>,
}

/// An error as the wire layer parsed it, provider knowledge already applied: everything
/// [`classify`] needs, and nothing it would have to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParsedError {
    /// The HTTP status of the answer; `None` for an error event inside a stream.
    pub(crate) status: Option<u16>,
    /// The error body, or a message describing the unreadable body (then with no code).
    pub(crate) body: ErrorBody,
    /// The wait the provider stated, in headers or body, by the wire format's precedence.
    pub(crate) stated_wait: Option<Duration>,
    /// `x-should-retry`, when the provider sent it.
    pub(crate) should_retry: Option<bool>,
}

/// Classifies a parsed error. Pure: no provider knowledge, no clock.
///
/// The class is the one the body makes certain (billing, overload, an invalid key), else the one
/// an error status implies, else (an answer with status 200, or a stream error event) the one of
/// the status the body names, else [`FailureClass::ServerError`]. `x-should-retry: false` turns a
/// rate limit into billing (it will not clear by waiting); `x-should-retry: true` turns an
/// invalid request into a server error (retry).
pub(crate) fn classify(error: ParsedError) -> Failure {
    let ParsedError {
        status,
        body,
        stated_wait,
        should_retry,
    } = error;
    let error_status = status.filter(|s| !(200..300).contains(s));
    let mut class = body.class.unwrap_or_else(|| {
        error_status
            .or(body.status)
            .map_or(FailureClass::ServerError, FailureClass::from_status)
    });
    match should_retry {
        Some(false) if class == FailureClass::RateLimited => class = FailureClass::Billing,
        Some(true) if class == FailureClass::Invalid => class = FailureClass::ServerError,
        _ => {}
    }
    Failure {
        class,
        status,
        retry_after: stated_wait,
        message: truncate(body.message),
        code: body.code,
    }
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
    use FailureClass::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn parsed(status: Option<u16>, body: ErrorBody) -> ParsedError {
        ParsedError {
            status,
            body,
            stated_wait: None,
            should_retry: None,
        }
    }

    fn named(status: Option<u16>, class: Option<FailureClass>) -> ErrorBody {
        ErrorBody {
            message: "m".into(),
            status,
            class,
            ..ErrorBody::default()
        }
    }

    #[test]
    fn statuses_alone() {
        #[rustfmt::skip]
        let table = [
            (429, RateLimited), (402, Billing), (401, Auth), (403, Auth), (408, Overloaded),
            (502, Overloaded), (503, Overloaded), (504, Overloaded), (529, Overloaded),
            (500, ServerError), (501, ServerError), (302, ServerError), (307, ServerError),
            (400, Invalid), (404, Invalid), (413, Invalid), (422, Invalid),
        ];
        for (status, class) in table {
            assert_eq!(FailureClass::from_status(status), class, "{status}");
            let got = classify(parsed(Some(status), ErrorBody::default()));
            assert_eq!((got.class, got.status), (class, Some(status)), "{status}");
        }
    }

    #[test]
    fn the_body_decides_over_the_status_when_it_is_certain() {
        #[rustfmt::skip]
        let table = [
            // (HTTP status, status the body names, class the body makes certain, want)
            (Some(429), None, Some(Billing), Billing),
            (Some(400), Some(401), None, Invalid),
            (Some(200), Some(429), None, RateLimited),
            (Some(200), Some(529), Some(Overloaded), Overloaded),
            (Some(200), None, None, ServerError),
            (None, Some(503), None, Overloaded),
            (None, None, None, ServerError),
            (None, Some(400), Some(Auth), Auth),
        ];
        for (status, named_status, certain, want) in table {
            let got = classify(parsed(status, named(named_status, certain)));
            assert_eq!(got.class, want, "{status:?} {named_status:?} {certain:?}");
            assert_eq!(got.status, status);
        }
    }

    #[test]
    fn should_retry_header() {
        let run = |status, should_retry| {
            let error = ParsedError {
                should_retry: Some(should_retry),
                ..parsed(Some(status), ErrorBody::default())
            };
            classify(error).class
        };
        assert_eq!(run(429, false), Billing);
        assert_eq!(run(503, false), Overloaded);
        assert_eq!(run(409, true), ServerError);
        assert_eq!(run(401, true), Auth);
    }

    #[test]
    fn stated_wait_code_and_a_truncated_message_are_kept() {
        let error = ParsedError {
            stated_wait: Some(S(7)),
            body: ErrorBody {
                message: "x".repeat(2_000),
                code: Some("rate_limit_exceeded".into()),
                ..ErrorBody::default()
            },
            ..parsed(Some(429), ErrorBody::default())
        };
        let got = classify(error);
        assert_eq!(got.retry_after, Some(S(7)));
        assert_eq!(got.code.as_deref(), Some("rate_limit_exceeded"));
        assert_eq!(got.message.chars().count(), MESSAGE_MAX + 1);
    }

    #[test]
    fn actions_per_class() {
        let table = [
            (RateLimited, FailureKind::RateLimited),
            (Overloaded, FailureKind::Overloaded),
            (ServerError, FailureKind::ServerError),
            (Billing, FailureKind::Billing),
            (Auth, FailureKind::Fatal),
            (Invalid, FailureKind::Fatal),
            (Decode, FailureKind::ServerError),
        ];
        for (class, kind) in table {
            assert_eq!(class.kind(), kind, "{class}");
        }
    }
}
