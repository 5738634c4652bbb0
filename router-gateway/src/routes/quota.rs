//! `GET /v1/quota`: what `llmroute quota --tenant <caller> --json` shows, for the caller.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::errors::ApiError;
use crate::reload::Live;

/// What `llmroute quota --tenant <caller> --json` shows, for the caller's tenant, over the
/// deployments of the models its key may use.
pub(crate) async fn quota(Live(shared): Live, headers: HeaderMap) -> Response {
    let caller = match shared
        .access
        .caller(shared.router.registry(), &headers)
        .await
    {
        Ok(caller) => caller,
        Err(e) => return e.into_response_with(""),
    };
    let router = &shared.router;
    let state = if router.ledger().remote() {
        "redis"
    } else {
        "in-process"
    };
    let registry = router.registry();
    let deployments = caller.deployments(registry);
    let tenant = caller.tenant.as_deref();
    let report =
        router_state::quota::quota(registry, router.ledger(), state, tenant, &deployments).await;
    match report {
        Ok(report) => Json(report).into_response(),
        Err(e) => ApiError::logged(router_sdk::Error::Ledger(e), "").into_response_with(""),
    }
}
