//! `/admin/v1`: the gateway run as a team's service. Keys (create, list, show, update, rotate,
//! revoke), tenants with their use and spend, deployments with their use and cooldowns, the last
//! requests and per-hour series, the running configuration and its reload, and the dashboard
//! that shows them (`/ui`, see `ui/`). Every route takes
//! an admin key only (401 without one, 403 for a tenant's key); every change is one audit line
//! (`llmroute::audit`: who, what, which key; never a secret).

mod config;
mod deployments;
mod keys;
mod reload;
mod requests;
mod tenants;
mod today;
mod ui;
mod view;

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use router_core::keys::KeyStoreError;

use crate::app::Shared;
use crate::auth::Admin;
use crate::errors::ApiError;
use crate::reload::Gateway;
use crate::routes::wrong_method;

/// The admin routes, over the gateway's shared state.
pub(crate) fn routes() -> axum::Router<Arc<Gateway>> {
    axum::Router::new()
        .route(
            "/admin/v1/keys",
            get(keys::list)
                .post(keys::create)
                .fallback(wrong_method("GET or POST")),
        )
        .route(
            "/admin/v1/keys/{id}",
            get(keys::show)
                .patch(keys::update)
                .delete(keys::revoke)
                .fallback(wrong_method("GET, PATCH or DELETE")),
        )
        .route(
            "/admin/v1/keys/{id}/rotate",
            post(keys::rotate).fallback(wrong_method("POST")),
        )
        .route(
            "/admin/v1/keys/{id}/revoke",
            post(keys::revoke).fallback(wrong_method("POST")),
        )
        .route(
            "/admin/v1/tenants",
            get(tenants::list).fallback(wrong_method("GET")),
        )
        .route(
            "/admin/v1/config",
            get(config::show).fallback(wrong_method("GET")),
        )
        .route(
            "/admin/v1/reload",
            post(reload::reload).fallback(wrong_method("POST")),
        )
        .route(
            "/admin/v1/deployments",
            get(deployments::list).fallback(wrong_method("GET")),
        )
        .route(
            "/admin/v1/requests",
            get(requests::recent).fallback(wrong_method("GET")),
        )
        .route(
            "/admin/v1/series",
            get(requests::series).fallback(wrong_method("GET")),
        )
        .merge(ui::routes())
}

/// What a handler answers: its response, or its refusal as an error response.
pub(super) fn answered(
    result: Result<axum::response::Response, ApiError>,
) -> axum::response::Response {
    result.unwrap_or_else(|e| e.into_response_with(""))
}

/// The admin of a request, or its refusal.
pub(crate) fn admin(shared: &Shared, headers: &HeaderMap) -> Result<Admin, ApiError> {
    shared.access.admin(headers)
}

/// The header a change signed in with HTTP Basic must carry (the dashboard's requests do).
pub(crate) const UI_HEADER: &str = "x-llmroute-ui";

/// The admin of a request that changes something: as [`admin`]; and a browser signed in with
/// HTTP Basic, which sends those credentials on its own, must also send [`UI_HEADER`], which
/// only a page of the gateway's own origin can (another site's page would need CORS, which the
/// gateway never grants): a page elsewhere cannot make changes with the browser's credentials.
pub(crate) fn changer(shared: &Shared, headers: &HeaderMap) -> Result<Admin, ApiError> {
    let who = admin(shared, headers)?;
    let basic = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().get(..6))
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("basic "));
    if basic && !headers.contains_key(UI_HEADER) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "browser_change_refused",
            format!(
                "a change signed in with HTTP Basic must send the `{UI_HEADER}: 1` header, as \
                 the dashboard at /ui does; scripts should send `Authorization: Bearer KEY`"
            ),
        ));
    }
    Ok(who)
}

/// One audit line: `admin` did `action` to `key` (of `tenant`).
fn audit(admin: &Admin, action: &str, key: &str, tenant: &str) {
    tracing::info!(
        target: "llmroute::audit",
        admin = %admin.0,
        action,
        key,
        tenant,
        "admin change"
    );
}

/// No key has the id asked for.
fn no_key(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "key_not_found",
        format!("no key has the id `{id}`; `GET /admin/v1/keys` lists them"),
    )
}

/// The change cannot be made to the key as it is.
fn conflict(message: String) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "invalid_request_error",
        "key_conflict",
        message,
    )
}

/// The key store failed.
/// A failure of the ledger or the usage sink while reading for the admin API, logged and
/// answered as the router's own error is.
fn read_failed(e: impl Into<router_sdk::Error>) -> ApiError {
    ApiError::logged(e.into(), "")
}

fn store_failed(e: &KeyStoreError) -> ApiError {
    tracing::warn!(error = %e, "admin: the key store failed");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "api_error",
        "key_store_unavailable",
        format!("{e}; nothing was changed, try again"),
    )
}
