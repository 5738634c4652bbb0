//! `POST /admin/v1/reload`: reads the configuration file again and serves it from now on, as
//! SIGHUP does (see `reload.rs`). 200 says what it serves now; 409 says why the old
//! configuration is kept.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::changer;
use crate::errors::ApiError;
use crate::reload::Gateway;

pub(super) async fn reload(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let who = match changer(&gateway.current(), &headers) {
        Ok(who) => who,
        Err(e) => return e.into_response_with(""),
    };
    tracing::info!(target: "llmroute::audit", admin = %who.0, action = "config.reload", "admin change");
    match gateway.reload().await {
        Ok(serving) => Json(json!({ "reloaded": true, "serving": serving })).into_response(),
        Err(why) => ApiError::new(
            StatusCode::CONFLICT,
            "invalid_request_error",
            "reload_refused",
            format!("the configuration was not reloaded, the old one is served: {why}"),
        )
        .into_response_with(""),
    }
}
