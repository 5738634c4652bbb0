//! `POST /v1/messages/count_tokens`: the prompt's size, as Anthropic's SDKs and Claude Code ask
//! for it, in Anthropic's shape. The count is the router's own estimate (what admission
//! reserves: never below what the provider counts), said by `x-llmroute-token-count:
//! estimate`; no provider is called, and nothing is reserved.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{request_id_of, set_headers};
use crate::app::Shared;
use crate::body;
use crate::errors::{ApiError, Shape};
use crate::ingress::{Ingress, Messages};

pub(crate) async fn count_tokens(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
) -> Response {
    let request_id = request_id_of(request.headers());
    let counted = count(&shared, request).await;
    let mut response = match counted {
        Ok(tokens) => Json(json!({"input_tokens": tokens})).into_response(),
        Err(e) => return e.into_response_in(Shape::Anthropic, &request_id),
    };
    let pairs = [
        ("x-llmroute-token-count", "estimate"),
        ("x-request-id", request_id.as_str()),
    ];
    set_headers(response.headers_mut(), &pairs);
    response
}

/// The estimated prompt tokens of the request, for a caller whose key may use its model.
async fn count(shared: &Shared, request: axum::extract::Request) -> Result<u64, ApiError> {
    let registry = shared.router.registry();
    let caller = shared.access.caller(registry, request.headers())?;
    let headers = request.headers().clone();
    let bytes = body::read(&registry.gateway, &headers, request).await?;
    let mut req = Messages::read(&bytes, &headers)
        .map_err(ApiError::bad_request)?
        .request;
    caller.may_use(req.model.as_deref().unwrap_or_default())?;
    // The count is the prompt's: the answer's cap does not change it.
    req.max_tokens = None;
    let preview = shared.router.preview(&req).map_err(ApiError::from)?;
    Ok(preview.prompt_tokens)
}
