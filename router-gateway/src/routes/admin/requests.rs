//! `GET /admin/v1/requests` (the last requests, newest first) and `GET /admin/v1/series`
//! (requests, failures, 429s and cost per hour), from the usage records. A gateway that keeps
//! none (`usage: none`) answers 200 with `"usage": false` and nothing listed.

use axum::Json;
use axum::extract::Query;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::{admin, answered, read_failed};
use crate::errors::ApiError;
use crate::reload::Live;

/// Requests listed when `limit` is not given.
const DEFAULT_LIMIT: u32 = 50;
/// The most requests listed.
const MAX_LIMIT: u32 = 500;
/// Hours charted when `hours` is not given.
const DEFAULT_HOURS: u32 = 24;
/// The most hours charted: a week.
const MAX_HOURS: u32 = 168;

/// One request as listed: its record, without the request's own id or priority.
#[derive(Debug, Serialize)]
struct RequestRow {
    /// When it ended, ms since the epoch.
    at_ms: u64,
    /// The gateway key's id (a runtime key's id, or a prefix of a `gateway.keys` hash).
    key_id: Option<String>,
    tenant: Option<String>,
    /// The model or alias asked for.
    model_asked: String,
    /// `provider/model` that served it (or was tried last).
    served_by: Option<String>,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: f64,
    /// `ok`, `failed` or `cancelled`.
    outcome: &'static str,
    /// Why it failed: `rate_limited`, `no_capacity`, `budget`, `server_error`, ...
    failure: Option<String>,
    /// Provider calls made.
    attempts: u32,
    latency_ms: u64,
    stream: bool,
}

impl From<router_usage::Record> for RequestRow {
    fn from(r: router_usage::Record) -> Self {
        let served_by = match (&r.provider, &r.model) {
            (Some(p), Some(m)) => Some(format!("{p}/{m}")),
            _ => None,
        };
        RequestRow {
            at_ms: r.at_ms,
            key_id: r.key_id,
            tenant: r.tenant,
            cost_usd: r.cost_micros as f64 / 1e6,
            model_asked: r.model_asked,
            served_by,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            outcome: r.outcome.as_str(),
            failure: r.failure,
            attempts: r.attempts,
            latency_ms: r.latency_ms,
            stream: r.stream,
        }
    }
}

/// One hour as charted: every count is over the requests that ended in that hour.
#[derive(Debug, Serialize)]
struct HourRow {
    /// The hour's start, ms since the epoch (UTC).
    start_ms: u64,
    /// Requests, whatever their outcome.
    requests: u64,
    /// Requests that failed (the caller got an error).
    errors: u64,
    /// Requests that failed with a 429: the last provider's (`rate_limited`) or llmroute's own
    /// for want of capacity (`no_capacity`).
    limited: u64,
    /// Requests with at least one provider call answered 429 (failed over or not).
    upstream_429: u64,
    /// Their cost, USD.
    cost_usd: f64,
}

/// `GET /admin/v1/requests?limit=N`: the last `N` (default 50, at most 500) requests, newest
/// first.
pub(super) async fn recent(
    Live(shared): Live,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let answer = async {
        admin(&shared, &headers)?;
        let limit = number(&params, "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
        let Some(recorder) = shared.router.usage() else {
            return Ok(off());
        };
        let records = recorder.sink().recent(limit).await;
        let records = records.map_err(read_failed)?;
        let data: Vec<RequestRow> = records.into_iter().map(RequestRow::from).collect();
        Ok(
            Json(serde_json::json!({ "object": "list", "usage": true, "data": data }))
                .into_response(),
        )
    };
    answered(answer.await)
}

/// `GET /admin/v1/series?hours=N`: the last `N` hours (default 24, at most 168), the current one
/// included, oldest first, each with its requests, errors, 429s and cost.
pub(super) async fn series(
    Live(shared): Live,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let answer = async {
        admin(&shared, &headers)?;
        let hours = number(&params, "hours", DEFAULT_HOURS, MAX_HOURS)?;
        let Some(recorder) = shared.router.usage() else {
            return Ok(off());
        };
        let hour = 3_600_000;
        let now = shared.router.now_ms();
        let until = (now / hour + 1) * hour;
        let since = until - u64::from(hours) * hour;
        let rows = recorder.sink().hourly(since, until).await;
        let rows = rows.map_err(read_failed)?;
        let data: Vec<HourRow> = rows
            .into_iter()
            .map(|h| HourRow {
                start_ms: h.start_ms,
                requests: h.requests,
                errors: h.failed,
                limited: h.limited,
                upstream_429: h.upstream_429,
                cost_usd: h.cost_micros as f64 / 1e6,
            })
            .collect();
        Ok(
            Json(serde_json::json!({ "object": "list", "usage": true, "data": data }))
                .into_response(),
        )
    };
    answered(answer.await)
}

/// The answer of a gateway that keeps no usage records.
fn off() -> Response {
    Json(serde_json::json!({
        "object": "list",
        "usage": false,
        "note": "this gateway keeps no usage records (`usage: none`): set `usage` in the \
                 configuration to list requests",
        "data": [],
    }))
    .into_response()
}

/// The parameter `name` of `params`: a whole number from 1 to `max`, `default` when absent; an
/// error names it, and any other parameter.
fn number(
    params: &[(String, String)],
    name: &str,
    default: u32,
    max: u32,
) -> Result<u32, ApiError> {
    let mut value = default;
    for (key, given) in params {
        if key != name {
            return Err(ApiError::bad_request(format!(
                "unknown parameter `{key}`; use `{name}`"
            )));
        }
        value = match given.trim().parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "`{name}` must be a whole number from 1 to {max}"
                )));
            }
        };
    }
    Ok(value)
}
