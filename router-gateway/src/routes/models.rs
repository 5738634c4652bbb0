//! `GET /v1/models` and `GET /v1/models/{model}`: the models and aliases the caller's key may use,
//! in OpenAI's shapes.

use axum::Json;
use axum::extract::Path;
use axum::extract::rejection::PathRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::errors::ApiError;
use crate::reload::Live;

pub(crate) async fn models(Live(shared): Live, headers: HeaderMap) -> Response {
    let caller = match shared.access.caller(shared.router.registry(), &headers) {
        Ok(caller) => caller,
        Err(e) => return e.into_response_with(""),
    };
    let data: Vec<serde_json::Value> = caller
        .models(shared.router.registry())
        .into_iter()
        .map(model_object)
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// One model as `GET /v1/models/{model}` (OpenAI's `models.retrieve`) shows it: 404
/// `model_not_found` for a name that is neither a model nor an alias, or that the caller's key
/// may not use (as OpenAI answers for a model the key cannot see). Names may hold `/`.
pub(crate) async fn model(
    Live(shared): Live,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let name = match name {
        Ok(Path(name)) => name,
        Err(e) => {
            return ApiError::bad_request(format!("the model name: {e}")).into_response_with("");
        }
    };
    let caller = match shared.access.caller(shared.router.registry(), &headers) {
        Ok(caller) => caller,
        Err(e) => return e.into_response_with(""),
    };
    if caller
        .models(shared.router.registry())
        .contains(&name.as_str())
    {
        return Json(model_object(&name)).into_response();
    }
    ApiError::model_not_found(format!(
        "the model `{name}` does not exist or this key may not use it; GET /v1/models lists \
         the ones it may"
    ))
    .into_response_with("")
}

/// A model in OpenAI's `model` object shape.
pub(crate) fn model_object(name: &str) -> serde_json::Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "llmroute"})
}
