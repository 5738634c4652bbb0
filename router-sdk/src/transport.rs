//! The one place that does HTTP: send a built request, and sort what comes back into an answer
//! or a [`CallFailure`] the router can act on.

// A failed call carries its headers (for rate-limit observation) and is dwarfed by the network
// round trip that produced it: boxing it would buy nothing measurable.
#![allow(clippy::result_large_err)]

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use reqwest::header::HeaderMap;
use router_core::config::Api;

use crate::error::{Break, STREAM_BROKEN};
use crate::secret::Masker;
use crate::types::ChatRequest;
use crate::wire::classify::Failure;
use crate::wire::{self, WireRequest, error, for_api};

/// How a provider call failed, as far as settlement and retry care.
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// The provider answered with an error: it saw the request (its request count stands) but
    /// produced no tokens.
    Provider {
        failure: Failure,
        headers: HeaderMap,
    },
    /// The provider answered 200 with a body we cannot read, or a stream whose first events
    /// are an error: tokens were probably spent (its class says whose fault, and the wait).
    Decode {
        failure: Failure,
        headers: HeaderMap,
    },
    /// No answer in time: whether tokens were spent is unknown.
    Timeout(String),
    /// A stream broke (see [`Break`]): whether tokens were spent is unknown.
    Broken(Break, String),
    /// The request never reached the provider (connection refused, DNS, TLS).
    Connect(String),
}

impl CallFailure {
    /// A short stable name: the failure class, or `timeout` / `connect` / `stream_broken`.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            CallFailure::Provider { failure, .. } | CallFailure::Decode { failure, .. } => {
                failure.class.as_str()
            }
            CallFailure::Timeout(_) => "timeout",
            CallFailure::Connect(_) => "connect",
            CallFailure::Broken(..) => STREAM_BROKEN,
        }
    }

    /// The provider's or the transport's message.
    pub(crate) fn message(&self) -> &str {
        match self {
            CallFailure::Provider { failure, .. } | CallFailure::Decode { failure, .. } => {
                &failure.message
            }
            CallFailure::Timeout(m) | CallFailure::Connect(m) | CallFailure::Broken(_, m) => m,
        }
    }

    /// Masks every long piece of a provider key in its message (see [`Masker`]).
    pub(crate) fn mask(&mut self, masker: &Masker) {
        let message = match self {
            CallFailure::Provider { failure, .. } | CallFailure::Decode { failure, .. } => {
                &mut failure.message
            }
            CallFailure::Timeout(m) | CallFailure::Connect(m) | CallFailure::Broken(_, m) => m,
        };
        if let std::borrow::Cow::Owned(masked) = masker.mask(message) {
            *message = masked;
        }
    }

    /// The HTTP status, when the provider answered.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            CallFailure::Provider { failure, .. } | CallFailure::Decode { failure, .. } => {
                failure.status
            }
            _ => None,
        }
    }
}

fn transport_failure(e: reqwest::Error) -> CallFailure {
    // URLs never carry keys, but drop them anyway: messages stay short and uniform.
    let connect = e.is_connect();
    let message = e.without_url().to_string();
    if connect {
        CallFailure::Connect(message)
    } else {
        // Timeouts, and bodies cut off mid-way: either way the provider may have spent tokens.
        CallFailure::Timeout(message)
    }
}

/// Sends `request`; a non-success status is read and classified. Redirects are never followed
/// (the client is built so): a 3xx is a server error of that deployment. Returns the open response on
/// success, its body not yet read. With `limits` `Some((first_answer, deadline))` the provider
/// must start answering within `first_answer`, and the whole exchange (body included) must end
/// within `deadline`; with `None` the caller bounds the whole exchange itself (one timer rather
/// than three on a whole-answer call's path). `now` reads the time once the error arrived: an
/// HTTP-date or RFC 3339 wait is counted from then, not from the sending.
pub(crate) async fn send(
    http: &reqwest::Client,
    api: Api,
    request: WireRequest,
    limits: Option<(Duration, Duration)>,
    now: impl Fn() -> SystemTime,
) -> Result<reqwest::Response, CallFailure> {
    let built = http
        .post(request.url)
        .headers(request.headers)
        .json(&request.body);
    let mut response = match limits {
        Some((first_answer, deadline)) => {
            tokio::time::timeout(first_answer, built.timeout(deadline).send())
                .await
                .map_err(|_| no_answer_within(first_answer))?
        }
        None => built.send().await,
    }
    .map_err(transport_failure)?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    // Taken, as `read` takes a success's: reading the body does not look at them.
    let headers = std::mem::take(response.headers_mut());
    if status.is_redirection() {
        let failure = error::redirect_failure(status.as_u16(), &headers);
        return Err(CallFailure::Provider { failure, headers });
    }
    let body = response.bytes().await.unwrap_or_default();
    let failure = error::http_failure(for_api(api), status.as_u16(), &headers, &body, now());
    Err(CallFailure::Provider { failure, headers })
}

/// The timeout of a call whose answer did not come in time.
pub(crate) fn no_answer_within(limit: Duration) -> CallFailure {
    CallFailure::Timeout(format!("no answer within {:.1}s", limit.as_secs_f64()))
}

/// Reads a whole success response; its headers are taken, not copied (reading the body does
/// not look at them).
pub(crate) async fn read(
    mut response: reqwest::Response,
) -> Result<(HeaderMap, Bytes), CallFailure> {
    let headers = std::mem::take(response.headers_mut());
    let body = response.bytes().await.map_err(transport_failure)?;
    Ok((headers, body))
}

/// Decodes a whole success response to `req`. A body that is an error object is that error (the
/// provider refused: [`CallFailure::Provider`]); one we cannot read, or that has no answer in
/// it, is [`CallFailure::Decode`]. `now` reads HTTP-date and RFC 3339 waits.
pub(crate) fn decode(
    api: Api,
    req: &ChatRequest,
    headers: HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<(crate::types::Completion, HeaderMap), CallFailure> {
    decode_with(api, headers, body, now, |body| {
        wire::parse_response(api, req, body)
    })
}

/// Decodes a whole success response with `parse` (a chat's answer, or embeddings), as
/// [`decode`] says.
pub(crate) fn decode_with<T>(
    api: Api,
    headers: HeaderMap,
    body: &[u8],
    now: SystemTime,
    parse: impl FnOnce(&[u8]) -> Result<T, wire::DecodeError>,
) -> Result<(T, HeaderMap), CallFailure> {
    // A body that reads as an answer is one (the common case pays for one parse); one that does
    // not may be an error object sent with a 2xx status.
    match parse(body) {
        Ok(answer) => Ok((answer, headers)),
        Err(e) => {
            if let Some(failure) = error::answer_failure(for_api(api), 200, &headers, body, now) {
                return Err(CallFailure::Provider { failure, headers });
            }
            // The provider answered 200; we could not read it.
            let failure = Failure {
                status: Some(200),
                ..e.into()
            };
            Err(CallFailure::Decode { failure, headers })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::classify::FailureClass;
    use router_core::retry::FailureKind;

    fn fixture(path: &str) -> Vec<u8> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        std::fs::read(format!("{dir}/{path}")).unwrap()
    }

    fn retry_after_ms(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after-ms", value.parse().unwrap());
        headers
    }

    #[test]
    fn a_200_whose_body_is_an_error_object_is_that_error() {
        let cases = [
            (
                Api::OpenAi,
                "openai/rate_limit_in_200.json",
                FailureClass::RateLimited,
            ),
            (
                Api::Anthropic,
                "anthropic/overloaded_in_200.json",
                FailureClass::Overloaded,
            ),
            (
                Api::Gemini,
                "gemini/rate_limit_in_200.json",
                FailureClass::RateLimited,
            ),
            (
                Api::OpenAi,
                "openai/insufficient_quota_429.json",
                FailureClass::Billing,
            ),
        ];
        for (api, path, class) in cases {
            let got = decode(
                api,
                &ChatRequest::default(),
                retry_after_ms("1500"),
                &fixture(path),
                SystemTime::UNIX_EPOCH,
            );
            let Err(CallFailure::Provider { failure, .. }) = got else {
                panic!("{path}: {got:?}");
            };
            assert_eq!(failure.class, class, "{path}");
            assert_eq!(failure.status, Some(200), "{path}");
            assert_eq!(
                failure.retry_after,
                Some(Duration::from_millis(1_500)),
                "{path}"
            );
            assert!(
                !failure.message.starts_with('{'),
                "{path}: {}",
                failure.message
            );
        }
    }

    #[test]
    fn a_200_without_a_readable_answer_is_a_decode_failure_of_the_deployment() {
        let html: &[u8] = b"<html><body>Bad gateway</body></html>";
        let truncated: &[u8] = b"{\"choices\": [{\"ind";
        for api in Api::ALL {
            let dir = api.as_str();
            let empty = match api {
                Api::OpenAi => "openai/no_choices.json",
                Api::Anthropic => "anthropic/no_content.json",
                Api::Gemini => "gemini/no_candidates.json",
            };
            let bodies = [
                html.to_vec(),
                truncated.to_vec(),
                fixture(empty),
                fixture(&format!("{dir}/huge_usage.json")),
            ];
            for body in bodies {
                let got = decode(
                    api,
                    &ChatRequest::default(),
                    HeaderMap::new(),
                    &body,
                    SystemTime::UNIX_EPOCH,
                );
                let Err(CallFailure::Decode { failure, .. }) = got else {
                    panic!("{api:?}: {got:?}");
                };
                assert_eq!(
                    (failure.class, failure.status),
                    (FailureClass::Decode, Some(200))
                );
                assert_eq!(failure.class.kind(), FailureKind::ServerError);
            }
            let ok = decode(
                api,
                &ChatRequest::default(),
                HeaderMap::new(),
                &fixture(&format!("{dir}/ok.json")),
                SystemTime::UNIX_EPOCH,
            );
            assert!(ok.is_ok(), "{api:?}: {ok:?}");
        }
    }
}
