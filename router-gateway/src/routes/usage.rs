//! `GET /v1/usage`: what `llmroute usage --json` shows, over the caller's own records.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::errors::ApiError;
use crate::reload::Live;

/// What `llmroute usage --json` shows over the caller's own records: `since` (default 24h),
/// `until`, `by` and `model` as the command's flags take them. A `tenant` other than the
/// caller's is refused; without auth (loopback only) every record is the caller's.
pub(crate) async fn usage(
    Live(shared): Live,
    headers: HeaderMap,
    axum::extract::Query(params): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let caller = match shared.access.caller(shared.router.registry(), &headers) {
        Ok(caller) => caller,
        Err(e) => return e.into_response_with(""),
    };
    let query = match usage_query(&params, caller.tenant.as_deref(), shared.router.now_ms()) {
        Ok(query) => query,
        Err(e) => return e.into_response_with(""),
    };
    let Some(recorder) = shared.router.usage() else {
        return ApiError::usage_off(
            "usage records are not kept by this gateway (`usage: none`)".to_owned(),
        )
        .into_response_with("");
    };
    match router_usage::report(recorder.sink(), shared.router.registry(), &query).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => ApiError::logged(router_sdk::Error::Usage(e), "").into_response_with(""),
    }
}

/// The report query of `/v1/usage`'s parameters, for `tenant` (the caller's).
pub(crate) fn usage_query(
    params: &[(String, String)],
    tenant: Option<&str>,
    now_ms: u64,
) -> Result<router_usage::Query, ApiError> {
    let mut query = router_usage::Query {
        since_ms: now_ms.saturating_sub(86_400_000),
        until_ms: now_ms + 1,
        by: Vec::new(),
        tenant: tenant.map(str::to_owned),
        model: None,
    };
    let bad = |name: &str, e: String| ApiError::bad_request(format!("`{name}`: {e}"));
    for (name, value) in params {
        match name.as_str() {
            "since" => {
                query.since_ms =
                    router_usage::parse_instant(value, now_ms).map_err(|e| bad(name, e))?
            }
            "until" => {
                query.until_ms =
                    router_usage::parse_instant(value, now_ms).map_err(|e| bad(name, e))?
            }
            "by" => {
                for g in value.split(',').filter(|g| !g.trim().is_empty()) {
                    let g = router_usage::Group::parse(g).map_err(|e| bad(name, e))?;
                    if !query.by.contains(&g) {
                        query.by.push(g);
                    }
                }
            }
            "model" => query.model = Some(value.clone()),
            "tenant" => {
                if tenant.is_some_and(|own| own != value) {
                    return Err(ApiError::other_tenant(
                        "a key reads its own tenant's usage only: leave out `tenant`".to_owned(),
                    ));
                }
                query.tenant = Some(value.clone());
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter `{other}`; use since, until, by, model"
                )));
            }
        }
    }
    if query.since_ms >= query.until_ms {
        return Err(ApiError::bad_request(
            "`since` is not before `until`: the period is empty".to_owned(),
        ));
    }
    Ok(query)
}
