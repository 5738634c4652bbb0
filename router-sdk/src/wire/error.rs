//! Reading a provider's error: the wire format parses the body and its stated wait, then the
//! pure [`classify`] says what it means.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use super::classify::{ErrorBody, Failure, FailureClass, ParsedError, classify};
use super::{WireFormat, excerpt, headers};

/// A redirect, which is never followed: the key and the prompt stay with the configured
/// `base_url`. It is a server error of that deployment (short cooldown, fail over).
pub(crate) fn redirect_failure(status: u16, headers: &HeaderMap) -> Failure {
    let to = headers::header_str(headers, "location").map_or_else(
        || "elsewhere".to_owned(),
        |location| excerpt(location.as_bytes()),
    );
    Failure {
        class: FailureClass::ServerError,
        status: Some(status),
        retry_after: None,
        message: format!(
            "the provider redirected the call to {to}; redirects are never followed (they would \
             carry the key to another origin): point base_url at the final address"
        ),
        code: None,
    }
}

/// Classifies an HTTP error response (any status but 2xx and 3xx).
pub(crate) fn http_failure(
    format: &dyn WireFormat,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Failure {
    let parsed = format.error_body(body).unwrap_or_else(|| ErrorBody {
        message: if body.is_empty() {
            format!("HTTP {status}")
        } else {
            excerpt(body)
        },
        ..ErrorBody::default()
    });
    classify(with_headers(format, Some(status), parsed, headers, now))
}

/// The error a 2xx answer's body describes (`{"error": {...}}`, Anthropic's
/// `{"type": "error", ...}`), classified as that error; `None` when the body is no error object.
pub(crate) fn answer_failure(
    format: &dyn WireFormat,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Option<Failure> {
    let parsed = format.error_body(body)?;
    Some(classify(with_headers(
        format,
        Some(status),
        parsed,
        headers,
        now,
    )))
}

/// Classifies an error that arrived inside a stream (`event: error`, or a chunk with `error`),
/// given what the wire format read from it.
pub(crate) fn stream_failure(parsed: Option<ErrorBody>, data: &[u8]) -> Failure {
    let Some(body) = parsed else {
        return Failure::decode(format!("unreadable stream error: {}", excerpt(data)));
    };
    let stated_wait = body.retry_delay;
    classify(ParsedError {
        status: None,
        body,
        stated_wait,
        should_retry: None,
    })
}

fn with_headers(
    format: &dyn WireFormat,
    status: Option<u16>,
    body: ErrorBody,
    headers: &HeaderMap,
    now: SystemTime,
) -> ParsedError {
    let should_retry = match headers::header_str(headers, "x-should-retry") {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    };
    ParsedError {
        status,
        stated_wait: stated_wait(format, headers, body.retry_delay, now),
        body,
        should_retry,
    }
}

/// The provider's stated wait, by precedence: `retry-after-ms`, `retry-after`, the body's
/// `retryDelay`, then the reset of an exhausted dimension in the rate-limit headers.
fn stated_wait(
    format: &dyn WireFormat,
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
    .or_else(|| format.exhausted_reset(headers, now))
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
