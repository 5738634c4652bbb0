//! Every way a gateway request fails, as the HTTP status and OpenAI error body clients expect:
//! 401 / 403 for keys, 404 `model_not_found`, 400 naming the field, 413 naming
//! `gateway.body_limit_bytes`, 404 / 405 for a path or method no route takes, 429 with
//! `Retry-After` when no capacity or budget is left, and provider failures by their class.
//! Messages never carry a key: the router's errors never do, and the presented key is never
//! echoed.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use router_sdk::{Error, FailureClass};
use serde_json::{Value, json};

use crate::outbound;

/// The error shapes of the ingresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `{"error": {"message", "type", "code", "param"}}`.
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}`, Anthropic's types and statuses.
    Anthropic,
}

/// A failed request: its status, OpenAI's error `type` and `code`, a message, and when to retry.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    message: String,
    retry_after: Option<Duration>,
    /// Close the connection after the answer (`Connection: close`).
    close: bool,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: String,
    ) -> Self {
        Self {
            status,
            kind,
            code,
            message,
            retry_after: None,
            close: false,
        }
    }

    /// The same error, answered with `Connection: close`: for a request whose body was not read
    /// to its end.
    pub(crate) fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        let status = StatusCode::BAD_REQUEST;
        Self::new(
            status,
            "invalid_request_error",
            "invalid_request",
            message.into(),
        )
    }

    pub(crate) fn unauthorized(message: &str) -> Self {
        let status = StatusCode::UNAUTHORIZED;
        Self::new(
            status,
            "invalid_request_error",
            "invalid_api_key",
            message.to_owned(),
        )
    }

    pub(crate) fn forbidden(message: String) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "unknown_tenant",
            message,
        )
    }

    /// A tenant's key asked for another tenant's records.
    pub(crate) fn other_tenant(message: String) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "other_tenant",
            message,
        )
    }

    /// The gateway keeps no usage records.
    pub(crate) fn usage_off(message: String) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "usage_off",
            message,
        )
    }

    /// The request body is over `gateway.body_limit_bytes`.
    pub(crate) fn body_too_large(message: String) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "body_too_large",
            message,
        )
    }

    /// The request body did not arrive within `gateway.body_timeout_secs`.
    pub(crate) fn body_timeout(message: String) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "body_timeout",
            message,
        )
    }

    /// No route has the request's path.
    pub(crate) fn unknown_path(message: String) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "unknown_path",
            message,
        )
    }

    /// The request's path has a route, which does not take its method.
    pub(crate) fn method_not_allowed(message: String) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            message,
        )
    }

    /// A stream its client did not read was dropped past the request's deadline.
    pub(crate) fn unread_past_deadline() -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "server_error",
            "deadline_exceeded",
            "the request's deadline passed while its stream was not being read: it was ended \
             and its reservation settled"
                .to_owned(),
        )
    }

    /// The gateway is stopping and its grace period (`gateway.grace_secs`) is over.
    pub(crate) fn stopping() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "gateway_stopping",
            "the gateway stopped before this request's answer came (its grace period, \
             `gateway.grace_secs`, ran out): send the request again, to another instance"
                .to_owned(),
        )
    }

    pub(crate) fn model_not_found(message: String) -> Self {
        let status = StatusCode::NOT_FOUND;
        Self::new(status, "invalid_request_error", "model_not_found", message)
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// OpenAI's error `code`: what metrics label a failed request by.
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    /// The OpenAI error body.
    #[cfg(test)]
    pub(crate) fn body(&self) -> Value {
        self.body_in(Shape::OpenAi)
    }

    /// The error body in `shape`.
    pub(crate) fn body_in(&self, shape: Shape) -> Value {
        match shape {
            Shape::OpenAi => outbound::error(self.kind, self.code, &self.message),
            Shape::Anthropic => json!({
                "type": "error",
                "error": {"type": self.anthropic_type(), "message": self.message},
            }),
        }
    }

    /// Anthropic's error `type` for this error's status: what its SDKs raise by.
    fn anthropic_type(&self) -> &'static str {
        match self.anthropic_status().as_u16() {
            400 | 405 => "invalid_request_error",
            401 => "authentication_error",
            402 => "billing_error",
            403 => "permission_error",
            404 => "not_found_error",
            408 | 504 => "timeout_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            _ => "api_error",
        }
    }

    /// The status Anthropic answers this error with: 529 for an overloaded upstream, else the
    /// gateway's own.
    fn anthropic_status(&self) -> StatusCode {
        if self.code == "provider_overloaded" {
            StatusCode::from_u16(529).unwrap_or(self.status)
        } else {
            self.status
        }
    }

    /// The response, with `x-request-id` when there is one.
    pub(crate) fn into_response_with(self, request_id: &str) -> Response {
        self.into_response_in(Shape::OpenAi, request_id)
    }

    /// The response in `shape`, with `x-request-id` when there is one.
    pub(crate) fn into_response_in(self, shape: Shape, request_id: &str) -> Response {
        let status = match shape {
            Shape::OpenAi => self.status,
            Shape::Anthropic => self.anthropic_status(),
        };
        let mut response = (status, Json(self.body_in(shape))).into_response();
        let headers = response.headers_mut();
        if let Some(wait) = self.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert("retry-after", HeaderValue::from(secs.max(1)));
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            headers.insert("retry-after-ms", HeaderValue::from(ms));
        }
        if let Ok(id) = HeaderValue::from_str(request_id)
            && !request_id.is_empty()
        {
            headers.insert("x-request-id", id);
        }
        if self.close {
            headers.insert(
                axum::http::header::CONNECTION,
                HeaderValue::from_static("close"),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750: a 401 names the scheme the key goes in.
            let challenge = HeaderValue::from_static("Bearer realm=\"llmroute\"");
            headers.insert(axum::http::header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let retry_after = e.retry_after();
        let (status, kind, code) = match &e {
            Error::UnknownModel { .. } => (
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
            ),
            Error::InvalidRequest(_) | Error::Config(_) => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_request",
            ),
            Error::Unsupported { .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "unsupported_feature",
            ),
            Error::MissingKey { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "no_provider_key",
            ),
            Error::NoCapacity { never: true, .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "request_too_large",
            ),
            Error::NoCapacity { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_exceeded",
                "rate_limit_exceeded",
            ),
            Error::BudgetExhausted { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "insufficient_quota",
                "insufficient_quota",
            ),
            Error::Provider { class, .. } => match class {
                // The request itself was refused: the caller's to fix.
                FailureClass::Invalid => (
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "provider_refused",
                ),
                FailureClass::RateLimited | FailureClass::Overloaded => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "provider_overloaded",
                ),
                // A provider key or account problem is the gateway's, not the caller's.
                FailureClass::Auth | FailureClass::Billing => {
                    (StatusCode::BAD_GATEWAY, "server_error", "provider_account")
                }
                _ => (StatusCode::BAD_GATEWAY, "server_error", "provider_error"),
            },
            Error::Transport { timeout: true, .. } => (
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                "provider_timeout",
            ),
            Error::Transport { .. } => (
                StatusCode::BAD_GATEWAY,
                "server_error",
                "provider_unreachable",
            ),
            Error::StreamBroken { .. } => {
                (StatusCode::BAD_GATEWAY, "server_error", "stream_broken")
            }
            Error::Ledger(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "ledger_unavailable",
            ),
            Error::Usage(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "usage_unavailable",
            ),
            _ => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal",
            ),
        };
        let mut error = Self::new(status, kind, code, tenant_message(&e));
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            error.retry_after = retry_after;
        }
        error
    }
}

/// What a tenant is told of `e`. Errors about its own request (the model, the body, limits,
/// budgets) say it all. Of the rest it learns what happened, never the provider's words (they
/// may echo a key or another tenant's data), the name of a variable holding a key, a store's
/// address or the HTTP client's text: those go to the operator's log, where the caller's
/// request id finds them.
fn tenant_message(e: &Error) -> String {
    match e {
        Error::Provider {
            provider,
            model,
            class,
            status,
            code,
            ..
        } => {
            let what = match class {
                FailureClass::Invalid => "refused the request",
                FailureClass::RateLimited => "is rate-limiting the gateway",
                FailureClass::Overloaded => "is overloaded",
                FailureClass::Auth | FailureClass::Billing => {
                    "refused the gateway's provider account (its key or its billing: the \
                     gateway's operator must fix it)"
                }
                FailureClass::Decode => "sent an answer the gateway could not read",
                _ => "failed",
            };
            let status = status.map_or_else(|| "in its stream".to_owned(), |s| format!("HTTP {s}"));
            let code = code
                .as_deref()
                .map(|c| format!(", `{c}`"))
                .unwrap_or_default();
            format!(
                "{provider}/{model} {what} ({status}{code}); the provider's message is in the \
                 gateway's log under this request's id"
            )
        }
        Error::Transport {
            provider,
            model,
            timeout,
            ..
        } => {
            let what = if *timeout {
                "did not answer in time"
            } else {
                "could not be reached"
            };
            format!("{provider}/{model} {what}")
        }
        Error::StreamBroken {
            provider,
            model,
            how,
            ..
        } => format!("{provider}/{model}: {how}"),
        Error::MissingKey { model, .. } => format!(
            "no provider serving `{model}` has its key set on this gateway: its operator's log \
             says which to set"
        ),
        Error::Ledger(_) => {
            "the gateway's state store is unavailable; try again shortly".to_owned()
        }
        Error::Usage(_) => {
            "the gateway's usage records are unavailable; try again shortly".to_owned()
        }
        Error::Config(_) => "the gateway's configuration refused this request".to_owned(),
        _ => e.to_string(),
    }
}

impl ApiError {
    /// The error a tenant gets for `e`, the router's error of request `request_id` (empty:
    /// none). When its message leaves out what the operator needs (see [`tenant_message`]),
    /// the whole error goes to the log with the request id: at info when the request or the
    /// network was at fault, at warn when the gateway's own setup or store is.
    pub(crate) fn logged(e: Error, request_id: &str) -> Self {
        match &e {
            Error::Provider {
                class: FailureClass::Invalid,
                ..
            }
            | Error::Transport { .. }
            | Error::StreamBroken { .. } => {
                tracing::info!(request_id, error = %e, "a provider call of the request failed");
            }
            Error::Provider { .. }
            | Error::MissingKey { .. }
            | Error::Ledger(_)
            | Error::Usage(_)
            | Error::Config(_) => {
                tracing::warn!(request_id, error = %e, "a request failed");
            }
            _ => {}
        }
        Self::from(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use router_core::ledger::LedgerError;

    #[test]
    fn a_store_failure_names_no_address_to_the_caller() {
        let e = Error::Ledger(LedgerError::Timeout {
            url: "redis://user:***@10.0.3.7:6379/0".to_owned(),
            after: std::time::Duration::from_millis(50),
        });
        let api = ApiError::from(e);
        assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(api.code, "ledger_unavailable");
        assert!(!api.message.contains("10.0.3.7"), "{}", api.message);
        assert!(api.message.contains("state store is unavailable"));
    }
}
