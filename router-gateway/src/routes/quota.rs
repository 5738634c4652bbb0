//! `GET /v1/quota`: what `llmroute quota --tenant <caller> --json` shows, for the caller.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::errors::ApiError;
use crate::reload::Live;

/// What `llmroute quota --tenant <caller> --json` shows, for the caller's tenant, over the
/// deployments of the models its key may use.
pub(crate) async fn quota(Live(shared): Live, headers: HeaderMap) -> Response {
    let caller = match shared.access.caller(shared.router.registry(), &headers) {
        Ok(caller) => caller,
        Err(e) => return e.into_response_with(""),
    };
    let router = &shared.router;
    let state = state_of(router);
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

/// Where the ledger is, as a caller may see it: `redis` or `in-process`, never its address.
pub(crate) fn state_of(router: &router_sdk::Router) -> &'static str {
    if router.ledger().remote() {
        "redis"
    } else {
        "in-process"
    }
}
