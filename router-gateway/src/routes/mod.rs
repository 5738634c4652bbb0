//! The gateway's routes, one file per group: chat completions (`chat`, its stream relay in
//! `relay`), embeddings, models, the caller's quota and usage; and here, what every route shares (request
//! ids, headers, the refusals of unknown paths and methods, health and metrics).

mod admin;
mod chat;
mod count_tokens;
mod embeddings;
mod models;
mod options;
mod quota;
mod ready;
mod relay;
mod usage;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};

use crate::errors::ApiError;
use crate::reload::Live;

pub(crate) use admin::routes as admin_routes;
pub(crate) use chat::chat;
pub(crate) use count_tokens::count_tokens;
pub(crate) use embeddings::embeddings;
pub(crate) use models::{model, models};
pub(crate) use quota::{quota, state_of};
pub(crate) use ready::ready;
pub(crate) use usage::usage;

/// A path no route has: 404 naming it and the paths served.
pub(crate) async fn api_not_found(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = shown_path(&uri);
    let error = ApiError::unknown_path(format!(
        "no route for `{method} {path}`: this gateway serves POST /v1/chat/completions, \
         POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/responses, POST /v1/embeddings, \
         GET /v1/models, GET /v1/models/{{model}}, GET /v1/quota, GET /v1/usage, /admin/v1/... and GET /ui (admin keys), GET /healthz, GET /readyz and GET /metrics \
         (unless `gateway.metrics_listen` gives it its own address); an OpenAI client's base URL \
         ends in `/v1`, e.g. `http://127.0.0.1:8080/v1`"
    ));
    refused(error, &method, &path, &headers)
}

/// The fallback of a route that takes `allowed` only: 405 in OpenAI's shape, naming the
/// method to use (axum adds the `Allow` header).
pub(crate) fn wrong_method(
    allowed: &'static str,
) -> impl Fn(Method, Uri, HeaderMap) -> std::future::Ready<Response> + Clone + Send + Sync + 'static
{
    move |method: Method, uri: Uri, headers: HeaderMap| {
        let path = shown_path(&uri);
        let error = ApiError::method_not_allowed(format!(
            "`{path}` does not take {method}: send it as {allowed}"
        ));
        std::future::ready(refused(error, &method, &path, &headers))
    }
}

/// The path of `uri` as an error message shows it: its first 200 characters.
pub(crate) fn shown_path(uri: &Uri) -> String {
    const MAX: usize = 200;
    let path = uri.path();
    match path.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &path[..at]),
        None => path.to_owned(),
    }
}

/// The response to a request for a path or method no route takes, with an `x-request-id` and
/// an `llmroute::access` line as chat requests have.
pub(crate) fn refused(
    error: ApiError,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Response {
    let request_id = request_id_of(headers);
    let response = error.into_response_with(&request_id);
    tracing::info!(
        target: "llmroute::access",
        request_id = %request_id,
        status = response.status().as_u16(),
        "{method} {path}"
    );
    response
}

/// The request's id: the caller's `x-request-id` (1 to 128 bytes, no control character such
/// as a tab, which a header may hold and a request id may not), else a new one.
pub(crate) fn request_id_of(headers: &HeaderMap) -> String {
    header(headers, "x-request-id")
        .filter(|id| !id.is_empty() && id.len() <= 128 && router_sdk::is_request_id(id))
        .map_or_else(|| format!("{:016x}", fastrand::u64(..)), str::to_owned)
}

pub(crate) async fn render_metrics(Live(shared): Live) -> Response {
    let text = shared
        .metrics
        .render(&shared.router, &shared.telemetry)
        .await;
    let mut response = text.into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// Seconds since the Unix epoch, for `created`.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A header of the caller's, as text.
pub(crate) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `x-llmroute-waited-ms`, and `x-llmroute-queue-position` when the request stood in a
/// deployment's line: on whole and streamed answers alike.
pub(crate) fn set_wait_headers(
    headers: &mut HeaderMap,
    waited: std::time::Duration,
    queue_position: Option<u32>,
) {
    let waited = waited.as_millis().to_string();
    set_headers(headers, &[("x-llmroute-waited-ms", waited.as_str())]);
    if let Some(position) = queue_position {
        let position = position.to_string();
        set_headers(headers, &[("x-llmroute-queue-position", position.as_str())]);
    }
}

/// Sets `pairs` on `headers`, leaving out any value that cannot be a header.
pub(crate) fn set_headers(headers: &mut HeaderMap, pairs: &[(&'static str, &str)]) {
    for &(name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}
