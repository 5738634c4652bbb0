//! A chat request through any ingress (`POST /v1/chat/completions`, `POST /v1/messages`,
//! `POST /v1/responses`): the caller's key, its body read and checked, the request routed and
//! answered whole or streamed, every refusal in the ingress's shape, one access line. What the
//! ingress left out of the request is listed in the answer's `x-llmroute-dropped`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::options;
use super::relay::{Counted, streamed};
use super::{header, now_secs, request_id_of, set_headers, set_wait_headers};
use crate::app::Shared;
use crate::errors::ApiError;
use crate::ingress::{Answering, Ingress};
use crate::reload::Live;
use crate::telemetry::{Asked, ServerSpan};
use crate::{auth, body, metrics, ratelimit};

pub(crate) async fn chat<I: Ingress>(
    Live(shared): Live,
    request: axum::extract::Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let request_id = request_id_of(&headers);
    let started = std::time::Instant::now();
    let caller = shared.access.caller(shared.router.registry(), &headers);
    // Known once the key is: every answer after that, refusals included, is the tenant's.
    let tenant = caller.as_ref().ok().and_then(|c| c.tenant.clone());
    let tenant = tenant.as_deref().unwrap_or(router_core::config::NO_TENANT);
    let mut gone = ClientGone::new(I::ROUTE, &shared, &request_id, tenant, started);
    let path = I::ROUTE.trim_start_matches("POST ");
    let mut span = shared.telemetry.begin(&headers, "chat", path);
    let outcome = match caller {
        Ok(caller) => {
            // The body is read once the key is known: a caller without a key cannot make the
            // gateway wait for, and hold, a body.
            let request = axum::extract::Request::from_parts(parts, body);
            let body = body::read(&shared.router.registry().gateway, &headers, request).await;
            answer::<I>(
                &shared,
                &caller,
                &headers,
                body,
                &request_id,
                &mut gone.counted,
                &mut span,
            )
            .await
        }
        Err(e) => Err(Failed::from(e)),
    };
    let (response, code) = match outcome {
        Ok(response) => (response, "ok"),
        Err(failed) => {
            let code = failed.code();
            let response = failed.respond(&shared, tenant, started, I::SHAPE, &request_id);
            (response, code)
        }
    };
    if let Some(span) = span {
        span.end(response.status().as_u16(), code);
    }
    gone.answered();
    let h = response.headers();
    let shown = |name: &str| header(h, name).unwrap_or("-");
    let status = response.status().as_u16();
    let served = (shown("x-llmroute-provider"), shown("x-llmroute-model"));
    chat_access_line(I::ROUTE, &request_id, tenant, status, served, started);
    response
}

/// The access log of a chat request: one line, never a prompt or a key.
pub(crate) fn chat_access_line(
    route: &str,
    request_id: &str,
    tenant: &str,
    status: u16,
    (provider, model): (&str, &str),
    started: std::time::Instant,
) {
    tracing::info!(
        target: "llmroute::access",
        request_id = %request_id,
        tenant = %tenant,
        status,
        provider = %provider,
        model = %model,
        duration_ms = started.elapsed().as_millis() as u64,
        "{route}"
    );
}

/// A chat request whose client went away before its answer (hyper drops the handler then): it
/// still logs its access line, as status 499, and is counted, as outcome `client_closed` unless
/// its outcome was counted already (an answer counted, and the client gone while the
/// `x-ratelimit-*` headers were read). The request's own drop settles its reservation.
pub(crate) struct ClientGone<'a> {
    route: &'static str,
    shared: &'a Shared,
    request_id: &'a str,
    tenant: &'a str,
    started: std::time::Instant,
    /// The outcome is in `llmroute_requests_total`.
    counted: bool,
    /// The access line is written.
    logged: bool,
}

impl Drop for ClientGone<'_> {
    fn drop(&mut self) {
        if !self.counted {
            let who = metrics::Served {
                tenant: self.tenant,
                provider: "-",
                model: "-",
            };
            self.shared
                .metrics
                .request(&who, "client_closed", self.started.elapsed());
        }
        if !self.logged {
            let unknown = ("-", "-");
            chat_access_line(
                self.route,
                self.request_id,
                self.tenant,
                499,
                unknown,
                self.started,
            );
        }
    }
}

/// A request that failed, with the provider and model metrics label it by (its tenant is the
/// caller's).
pub(crate) struct Failed {
    error: ApiError,
    provider: Option<String>,
    model: Option<String>,
    /// The `x-ratelimit-*` headers it carries (a 429).
    rates: Option<ratelimit::Report>,
}

impl From<ApiError> for Failed {
    fn from(error: ApiError) -> Self {
        Failed {
            error,
            provider: None,
            model: None,
            rates: None,
        }
    }
}

/// `caller`'s request: its body read, routed and answered. `counted` turns true once an answer
/// is counted in the metrics (a failure is counted by the caller). A traced request's `span`
/// records what was asked and answered; a stream takes it, to end it with its last event.
pub(crate) async fn answer<I: Ingress>(
    shared: &Arc<Shared>,
    caller: &auth::Caller,
    headers: &HeaderMap,
    body: Result<Bytes, ApiError>,
    request_id: &str,
    counted: &mut bool,
    span: &mut Option<ServerSpan>,
) -> Result<Response, Failed> {
    let started = std::time::Instant::now();
    let tenant_label = caller
        .tenant
        .clone()
        .unwrap_or_else(|| router_core::config::NO_TENANT.to_owned());
    // A router error: its provider calls are counted, and it is labelled by who was asked.
    let routed = |e: router_sdk::Error| Failed::routed(shared, e, request_id);
    let body = body?;
    let (read, asked) = I::read(&body, headers).map_err(ApiError::bad_request)?;
    let dropped = dropped_header(&read.dropped);
    let mut req = read.request;
    let model = req.model.clone().unwrap_or_default();
    caller.may_use(&model)?;
    req.tenant = caller.tenant.clone();
    req.key_id = caller.key_id.clone();
    req.key_account = caller.account.clone();
    req.request_id = Some(request_id.to_owned());
    options::apply(&mut req, headers, caller, shared.router.registry())?;
    if let Some(span) = span.as_mut() {
        span.asked(Asked {
            model: &model,
            request_id,
            stream: read.stream,
            max_tokens: req.max_tokens,
            tenant: req.tenant.as_deref(),
            key_id: req.key_id.as_deref(),
        });
        // Every ingress but chat completions takes the system prompt apart from the messages.
        let system_apart = I::ROUTE != <crate::ingress::Chat as Ingress>::ROUTE;
        span.prompt(&req.messages, system_apart);
        req.trace = Some(span.for_calls());
    }
    let router = &shared.router;
    let rates = &ratelimit::Basis::of(router.registry(), caller.tenant.as_deref(), &model);
    // A refusal of the router: a 429 reports the window as the refusal found it, or the
    // model's headroom read beside the admission.
    let refused = |e: router_sdk::Error, headroom| async move {
        let failed = routed(e);
        if failed.is_too_many() {
            return failed.with_rates(rates.report(router, None, headroom).await);
        }
        failed
    };
    // Read beside the admission, never after the answer.
    let headroom = rates.headroom(router, &shared.headrooms);
    let (mut response, window, headroom) = if read.stream {
        let (stream, headroom) =
            beside(shared, Box::pin(router.chat_stream(req)), headroom).await?;
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                traced_failure(span, &e, router);
                return Err(refused(e, headroom).await);
            }
        };
        let who = metrics::Served {
            tenant: &tenant_label,
            provider: stream.provider(),
            model: stream.model(),
        };
        shared.metrics.request(&who, "ok", started.elapsed());
        *counted = true;
        shared
            .metrics
            .router_added(started.elapsed(), stream.upstream());
        let window = stream.tenant_window();
        let counted = Counted {
            shared: shared.clone(),
            tenant: tenant_label.clone(),
            request_id: request_id.to_owned(),
            span: span.take(),
        };
        let at = Answering {
            request_id: request_id.to_owned(),
            model: shown_model(stream.model(), &model),
            created: now_secs(),
            origin: api_of(router, stream.provider()),
        };
        let events = I::events(at, read.include_usage, asked);
        let response = streamed(stream, events, counted);
        (response, window, headroom)
    } else {
        let (answer, headroom) = beside(shared, Box::pin(router.chat(req)), headroom).await?;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                traced_failure(span, &e, router);
                return Err(refused(e, headroom).await);
            }
        };
        let r = &answer.receipt;
        if let Some(span) = span.as_mut() {
            span.answered(r, router.registry());
            span.answer(&answer);
        }
        let who = metrics::Served {
            tenant: &tenant_label,
            provider: &r.provider,
            model: &r.model,
        };
        shared.metrics.request(&who, "ok", started.elapsed());
        *counted = true;
        shared.metrics.router_added(started.elapsed(), r.upstream);
        shared.metrics.answered(&who, r);
        let at = Answering {
            request_id: request_id.to_owned(),
            model: shown_model(&r.model, &model),
            created: now_secs(),
            origin: api_of(router, &r.provider),
        };
        let body = I::answer(&answer, &at, &asked);
        let r = &answer.receipt;
        let mut response = Json(body).into_response();
        let cost = format!("{:.8}", r.cost_usd);
        let pairs = [
            ("x-llmroute-provider", r.provider.as_str()),
            ("x-llmroute-model", r.model.as_str()),
            ("x-llmroute-cost-usd", cost.as_str()),
            ("x-request-id", r.request_id.as_str()),
        ];
        set_headers(response.headers_mut(), &pairs);
        set_wait_headers(response.headers_mut(), r.waited, r.queue_position);
        (response, r.tenant_window, headroom)
    };
    if let Some(report) = rates.report(router, window, headroom).await {
        report.set(response.headers_mut());
    }
    if !dropped.is_empty() {
        set_headers(response.headers_mut(), &[("x-llmroute-dropped", &dropped)]);
    }
    Ok(response)
}

/// A traced request's failure: its provider calls, each a span.
pub(crate) fn traced_failure(
    span: &mut Option<ServerSpan>,
    e: &router_sdk::Error,
    router: &router_sdk::Router,
) {
    if let Some(span) = span.as_mut() {
        span.attempts(e.attempts(), router.registry());
    }
}

/// `x-llmroute-dropped`: what the ingress left out, comma-separated; past the first 32, how
/// many more (a header stays short whatever a body holds).
fn dropped_header(dropped: &[String]) -> String {
    const SHOWN: usize = 32;
    let mut header = dropped[..dropped.len().min(SHOWN)].join(",");
    if dropped.len() > SHOWN {
        header.push_str(&format!(",+{} more", dropped.len() - SHOWN));
    }
    header
}

/// The wire format of the provider named `provider`.
fn api_of(router: &router_sdk::Router, provider: &str) -> Option<router_core::config::Api> {
    let registry = router.registry();
    registry
        .provider_ids()
        .map(|id| registry.provider(id))
        .find(|p| p.name == provider)
        .map(|p| p.api)
}

/// The router's `call` and the model's `headroom` reading, run together, unless the gateway
/// cuts off what is in flight first (503 `gateway_stopping`). Callers box `call`: a router's
/// future is kilobytes, copied at each move into the handler's own future otherwise.
pub(crate) async fn beside<T>(
    shared: &Shared,
    call: impl Future<Output = T>,
    headroom: impl Future<Output = Option<ratelimit::Report>>,
) -> Result<(T, Option<ratelimit::Report>), Failed> {
    tokio::select! {
        biased;
        () = shared.cut.cancelled() => Err(ApiError::stopping().into()),
        both = async { tokio::join!(call, headroom) } => Ok(both),
    }
}

/// The model an answer names: the one that answered, else the one asked for.
fn shown_model(answered: &str, asked: &str) -> String {
    if answered.is_empty() { asked } else { answered }.to_owned()
}

// Shared with `routes::embeddings`, a route that routes but is no chat ingress: the same guard
// for a client gone, the same refusals, counts and access line.

impl<'a> ClientGone<'a> {
    /// The guard of a request to `route` by `tenant`, arrived at `started`.
    pub(crate) fn new(
        route: &'static str,
        shared: &'a Shared,
        request_id: &'a str,
        tenant: &'a str,
        started: std::time::Instant,
    ) -> Self {
        ClientGone {
            route,
            shared,
            request_id,
            tenant,
            started,
            counted: false,
            logged: false,
        }
    }

    /// The request's outcome is counted in `llmroute_requests_total`.
    pub(crate) fn counted(&mut self) {
        self.counted = true;
    }

    /// The request has its response: its outcome is counted and its access line written by
    /// the route.
    pub(crate) fn answered(&mut self) {
        self.counted = true;
        self.logged = true;
    }
}

impl Failed {
    /// The router's error `e` of request `request_id`: its provider calls counted, labelled by
    /// the deployment asked last.
    pub(crate) fn routed(shared: &Shared, e: router_sdk::Error, request_id: &str) -> Self {
        shared.metrics.attempts(e.attempts());
        let (provider, model) = match e.attempts().last() {
            Some(a) => (Some(a.provider.clone()), Some(a.model.clone())),
            None => (None, None),
        };
        Failed {
            error: ApiError::logged(e, request_id),
            provider,
            model,
            rates: None,
        }
    }

    /// Its error's code, as metrics and spans name the outcome.
    pub(crate) fn code(&self) -> &'static str {
        self.error.code()
    }

    /// Whether it is a 429, which reports the caller's window (`x-ratelimit-*`).
    pub(crate) fn is_too_many(&self) -> bool {
        self.error.status() == StatusCode::TOO_MANY_REQUESTS
    }

    /// The same failure, reporting `rates`.
    pub(crate) fn with_rates(mut self, rates: Option<ratelimit::Report>) -> Self {
        self.rates = rates;
        self
    }

    /// Counts the failure as `tenant`'s and answers it in `shape`.
    pub(crate) fn respond(
        self,
        shared: &Shared,
        tenant: &str,
        started: std::time::Instant,
        shape: crate::errors::Shape,
        request_id: &str,
    ) -> Response {
        let who = metrics::Served {
            tenant,
            provider: self.provider.as_deref().unwrap_or("-"),
            model: self.model.as_deref().unwrap_or("-"),
        };
        shared
            .metrics
            .request(&who, self.error.code(), started.elapsed());
        let mut response = self.error.into_response_in(shape, request_id);
        if let Some(rates) = self.rates {
            rates.set(response.headers_mut());
        }
        response
    }
}
