//! `POST /v1/embeddings`: OpenAI's embeddings request, routed by the router to the cheapest
//! embedding model with room. Not a chat ingress: its body and answer are its own (`body`);
//! the caller's key, the headers' options, metrics, refusals, rate-limit headers and the access
//! line are the chat route's.

mod body;

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use router_core::config::NO_TENANT;

use super::chat::{ClientGone, Failed, beside, chat_access_line, traced_failure};
use super::{header, options, request_id_of, set_headers, set_wait_headers};
use crate::app::Shared;
use crate::errors::{ApiError, Shape};
use crate::reload::Live;
use crate::telemetry::{Asked, ServerSpan};
use crate::{auth, metrics, ratelimit};

/// The route, as access lines name it.
const ROUTE: &str = "POST /v1/embeddings";

pub(crate) async fn embeddings(Live(shared): Live, request: axum::extract::Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let request_id = request_id_of(&headers);
    let started = std::time::Instant::now();
    let caller = shared.access.caller(shared.router.registry(), &headers);
    let tenant = caller.as_ref().ok().and_then(|c| c.tenant.clone());
    let tenant = tenant.as_deref().unwrap_or(NO_TENANT);
    let mut gone = ClientGone::new(ROUTE, &shared, &request_id, tenant, started);
    let mut span = shared
        .telemetry
        .begin(&headers, "embeddings", "/v1/embeddings");
    let outcome = match caller {
        Ok(caller) => {
            // The body is read once the key is known, as for chat.
            let request = axum::extract::Request::from_parts(parts, body);
            let gateway = &shared.router.registry().gateway;
            let body = crate::body::read(gateway, &headers, request).await;
            let who = Who {
                caller: &caller,
                headers: &headers,
                request_id: &request_id,
            };
            answer(&shared, &who, body, &mut gone, &mut span).await
        }
        Err(e) => Err(Failed::from(e)),
    };
    let (response, code) = match outcome {
        Ok(response) => (response, "ok"),
        Err(failed) => {
            let code = failed.code();
            let response = failed.respond(&shared, tenant, started, Shape::OpenAi, &request_id);
            (response, code)
        }
    };
    if let Some(span) = span {
        span.end(response.status().as_u16(), code);
    }
    gone.answered();
    let h = response.headers();
    let shown = |name: &str| header(h, name).unwrap_or("-");
    let served = (shown("x-llmroute-provider"), shown("x-llmroute-model"));
    let status = response.status().as_u16();
    chat_access_line(ROUTE, &request_id, tenant, status, served, started);
    response
}

/// Who asks, with what headers, under which request id.
struct Who<'a> {
    caller: &'a auth::Caller,
    headers: &'a HeaderMap,
    request_id: &'a str,
}

/// The caller's request: its body read, embedded and answered. A success is counted here (and
/// `gone` told); a failure is counted by the caller.
async fn answer(
    shared: &Arc<Shared>,
    who: &Who<'_>,
    body: Result<Bytes, ApiError>,
    gone: &mut ClientGone<'_>,
    span: &mut Option<ServerSpan>,
) -> Result<Response, Failed> {
    let started = std::time::Instant::now();
    let (caller, router) = (who.caller, &shared.router);
    let (mut req, encoding) = body::read(&body?).map_err(ApiError::bad_request)?;
    let model = req.model.clone().unwrap_or_default();
    caller.may_use(&model)?;
    req.tenant = caller.tenant.clone();
    req.key_id = caller.key_id.clone();
    req.key_account = caller.account.clone();
    req.request_id = Some(who.request_id.to_owned());
    let options = options::read(who.headers, caller, router.registry())?;
    req.priority = options.priority;
    req.deadline = options.deadline;
    req.headers = options.forwarded;
    req.providers = options.providers.unwrap_or_default();
    if let Some(span) = span.as_mut() {
        span.asked(Asked {
            model: &model,
            request_id: who.request_id,
            stream: false,
            max_tokens: None,
            tenant: req.tenant.as_deref(),
            key_id: req.key_id.as_deref(),
        });
        req.trace = Some(span.for_calls());
    }
    let rates = &ratelimit::Basis::of(router.registry(), caller.tenant.as_deref(), &model);
    // Read beside the admission, as for chat.
    let headroom = rates.headroom(router, &shared.headrooms);
    let (answer, headroom) = beside(shared, Box::pin(router.embed(req)), headroom).await?;
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            traced_failure(span, &e, router);
            let failed = Failed::routed(shared, e, who.request_id);
            if !failed.is_too_many() {
                return Err(failed);
            }
            return Err(failed.with_rates(rates.report(router, None, headroom).await));
        }
    };
    let r = &answer.receipt;
    if let Some(span) = span.as_mut() {
        span.answered(r, router.registry());
    }
    let tenant = caller.tenant.as_deref().unwrap_or(NO_TENANT);
    let who = metrics::Served {
        tenant,
        provider: &r.provider,
        model: &r.model,
    };
    shared.metrics.request(&who, "ok", started.elapsed());
    gone.counted();
    shared.metrics.router_added(started.elapsed(), r.upstream);
    shared.metrics.answered(&who, r);
    let mut response = Json(body::answer(&answer, encoding)).into_response();
    let cost = format!("{:.8}", r.cost_usd);
    let pairs = [
        ("x-llmroute-provider", r.provider.as_str()),
        ("x-llmroute-model", r.model.as_str()),
        ("x-llmroute-cost-usd", cost.as_str()),
        ("x-request-id", r.request_id.as_str()),
    ];
    set_headers(response.headers_mut(), &pairs);
    set_wait_headers(response.headers_mut(), r.waited, r.queue_position);
    if let Some(report) = rates.report(router, r.tenant_window, headroom).await {
        report.set(response.headers_mut());
    }
    Ok(response)
}
