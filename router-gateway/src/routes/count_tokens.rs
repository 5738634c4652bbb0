//! `POST /v1/messages/count_tokens`: the prompt's size, as Anthropic's SDKs and Claude Code ask
//! for it, in Anthropic's shape. The cheapest candidate's provider counts it when it can
//! (Anthropic: `x-llmroute-token-count: provider`, with `x-llmroute-provider` and
//! `x-llmroute-model`), else the router estimates it (`estimate`: what admission reserves).
//! Nothing is reserved against any limit.

use axum::Json;
use axum::response::{IntoResponse, Response};
use router_sdk::{CountedBy, TokenCount};
use serde_json::json;

use super::{request_id_of, set_headers};
use crate::app::Shared;
use crate::body;
use crate::errors::{ApiError, Shape};
use crate::ingress::{Ingress, Messages};
use crate::reload::Live;

pub(crate) async fn count_tokens(Live(shared): Live, request: axum::extract::Request) -> Response {
    let request_id = request_id_of(request.headers());
    let counted = match count(&shared, request).await {
        Ok(counted) => counted,
        Err(e) => return e.into_response_in(Shape::Anthropic, &request_id),
    };
    let mut response = Json(json!({"input_tokens": counted.input_tokens})).into_response();
    let mut pairs = vec![("x-request-id", request_id.as_str())];
    match &counted.counted_by {
        CountedBy::Provider { provider, model } => pairs.extend([
            ("x-llmroute-token-count", "provider"),
            ("x-llmroute-provider", provider.as_str()),
            ("x-llmroute-model", model.as_str()),
        ]),
        CountedBy::Estimate => pairs.push(("x-llmroute-token-count", "estimate")),
    }
    set_headers(response.headers_mut(), &pairs);
    response
}

/// The request's prompt tokens, for a caller whose key may use its model.
async fn count(shared: &Shared, request: axum::extract::Request) -> Result<TokenCount, ApiError> {
    let registry = shared.router.registry();
    let caller = shared.access.caller(registry, request.headers())?;
    let headers = request.headers().clone();
    let bytes = body::read(&registry.gateway, &headers, request).await?;
    let (read, ()) = Messages::read(&bytes, &headers).map_err(ApiError::bad_request)?;
    let mut req = read.request;
    caller.may_use(req.model.as_deref().unwrap_or_default())?;
    req.tenant = caller.tenant.clone();
    let counted = shared.router.count_tokens(&req).await;
    counted.map_err(|e| ApiError::logged(e, ""))
}
