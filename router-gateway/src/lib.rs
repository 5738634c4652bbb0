//! llmroute's gateway: an OpenAI-compatible HTTP endpoint over a [`Router`], for every language
//! and every tool built on the OpenAI SDKs.
//!
//! [`app`] builds the service (`axum`), [`serve`] runs it until a shutdown signal and lets
//! requests in flight finish. Each request is authenticated by an API key from `gateway.keys`
//! (stored as SHA-256 hashes), which names its tenant: that tenant's tier (limits, budget)
//! applies, and the key may pin a priority and a set of models.
//!
//! - `POST /v1/chat/completions`: OpenAI's request and answer, whole or streamed (SSE
//!   `chat.completion.chunk`s, `stream_options.include_usage`, `data: [DONE]`), tools, images,
//!   JSON output; `model` is any configured model, alias or routed alias.
//! - `GET /v1/models`: the models, aliases and routed aliases the key may use.
//! - `GET /v1/quota`: what `llmroute quota --tenant <caller> --json` shows, for the caller.
//! - `GET /v1/usage?since=24h&until=..&by=day,model&model=..`: what `llmroute usage --json`
//!   shows, over the caller's own records only.
//! - `GET /healthz`: the process is up. `GET /readyz`: the ledger answers.

mod auth;
mod body;
mod errors;
mod inbound;
mod metrics;
mod outbound;
mod ratelimit;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::StreamExt;
use router_sdk::{ChatChunk, ChatStream, Priority, Router};
use serde_json::json;

pub use auth::{Access, hash_key, new_key};
use errors::ApiError;

/// How the gateway admits callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Every request needs a key of `gateway.keys`.
    Keys,
    /// No key needed (and none read): requests have no tenant. Only for a loopback address.
    None,
}

#[derive(Debug)]
struct Shared {
    router: Router,
    access: Access,
    metrics: metrics::Metrics,
    /// Turns `true` when what is in flight must end now ([`Cut`]).
    cut: tokio::sync::watch::Receiver<bool>,
    /// The streams being relayed, for [`Cut::now`] to end.
    streams: Arc<Streams>,
    /// Each model's last headroom reading, for callers without tier limits.
    headrooms: ratelimit::Headrooms,
}

/// A stream being relayed: `None` once [`Cut::now`], or its deadline unread
/// ([`Streams::expire_unread`]), has taken (and dropped) it.
type Slot = std::sync::Mutex<Option<ChatStream>>;

/// How long past its deadline a stream no one polls is dropped.
const UNREAD_GRACE: Duration = Duration::from_secs(1);

/// A stream's deadline timer ([`Streams::expire_unread`]), stopped when the relay ends, and
/// how it tells a relay that is polled after all (a stream still busy past its deadline) that
/// it took the stream.
#[derive(Debug)]
struct Expiry {
    timer: tokio::task::AbortHandle,
    taken: Arc<tokio::sync::Notify>,
}

impl Drop for Expiry {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

/// The streams the gateway relays, each held weakly, so that [`Cut::now`] can drop them when
/// no one polls them: a client that stopped reading leaves its stream's relay unpolled once
/// the connection's buffers are full, and a cut noticed only at the next poll would come never.
#[derive(Debug, Default)]
struct Streams {
    /// The slots, and the length at which the dead ones are next swept out.
    live: std::sync::Mutex<(Vec<std::sync::Weak<Slot>>, usize)>,
}

impl Streams {
    /// Holds `stream` in a slot [`Streams::end_all`] can empty.
    fn hold(&self, stream: ChatStream) -> Arc<Slot> {
        let slot = Arc::new(std::sync::Mutex::new(Some(stream)));
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let (slots, sweep_at) = &mut *live;
        if slots.len() >= *sweep_at {
            slots.retain(|s| s.strong_count() > 0);
            *sweep_at = (2 * slots.len()).max(64);
        }
        slots.push(Arc::downgrade(&slot));
        slot
    }

    /// Drops the stream in `slot` a little after its request's deadline, should no one have
    /// polled it to its end by then: a polled stream ends at its deadline on its own, but one
    /// whose client stopped reading is not polled once the connection's buffers are full, and
    /// would hold its reservation (renewed) and its concurrency slots for as long as the
    /// client keeps the connection open. The timer goes with the returned handle.
    fn expire_unread(slot: &Arc<Slot>) -> Option<Expiry> {
        let deadline = slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(ChatStream::deadline)?
            .checked_add(UNREAD_GRACE)?;
        let weak = Arc::downgrade(slot);
        let taken = Arc::new(tokio::sync::Notify::new());
        let tell = taken.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            if let Some(slot) = weak.upgrade() {
                let stream = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                drop(stream);
                // A relay parked inside the stream lost its waker with it.
                tell.notify_one();
            }
        });
        Some(Expiry {
            timer: timer.abort_handle(),
            taken,
        })
    }

    /// Drops every stream still held (each settles as a dropped request).
    fn end_all(&self) {
        let slots = std::mem::take(&mut self.live.lock().unwrap_or_else(PoisonError::into_inner).0);
        for slot in slots.iter().filter_map(std::sync::Weak::upgrade) {
            let stream = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            drop(stream);
        }
    }
}

/// The gateway's two services: the API, and `/metrics` for a separate address.
#[derive(Debug)]
pub struct Apps {
    /// `/v1/...`, `/healthz`, `/readyz`.
    pub api: axum::Router,
    /// `/metrics`.
    pub metrics: axum::Router,
    /// Ends the API's requests in flight, for a stopping gateway whose grace period is over.
    pub cut: Cut,
}

/// Ends every chat request the gateway's services have in flight: a whole answer not yet
/// given is refused with 503 `gateway_stopping`, a stream ends with that error (and no
/// `[DONE]`), and each one's provider call is dropped, which settles its reservation as a
/// dropped request's. Requests that arrive after it are refused the same way. Dropping the
/// server's task instead would leave its connections' tasks running (they are spawned apart),
/// and with them reservations that nothing settles before the process ends.
#[derive(Debug, Clone)]
pub struct Cut {
    flag: Arc<tokio::sync::watch::Sender<bool>>,
    streams: Arc<Streams>,
}

impl Cut {
    /// Ends what is in flight now: streams are dropped here, whether or not their client still
    /// reads; whole answers waiting for their provider end at once.
    pub fn now(&self) {
        self.flag.send_replace(true);
        self.streams.end_all();
    }
}

/// Resolves once `cut` has turned `true` (at once if it has); never if its sender is gone.
async fn cut_off(mut cut: tokio::sync::watch::Receiver<bool>) {
    if cut.wait_for(|cut| *cut).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The gateway's services over `router`, whose configuration holds `gateway.keys`.
pub fn apps(router: Router, auth: Auth) -> Apps {
    let limit = router.registry().gateway.body_limit_bytes;
    let access = Access::new(&router.registry().gateway, auth);
    let metrics = metrics::Metrics::new();
    let (cut, cut_rx) = tokio::sync::watch::channel(false);
    let streams = Arc::new(Streams::default());
    let shared = Arc::new(Shared {
        router,
        access,
        metrics,
        cut: cut_rx,
        streams: streams.clone(),
        headrooms: ratelimit::Headrooms::default(),
    });
    // Every refusal is in OpenAI's error shape: a wrong method (405, with `Allow`), an unknown
    // path (404), a body over the limit (413, from `chat`). Only the API has a catch-all
    // fallback, so that the two routers merge (axum refuses two); `/metrics`'s own address
    // answers other paths with a bare 404.
    let api = axum::Router::new()
        .route(
            "/v1/chat/completions",
            post(chat).fallback(wrong_method("POST")),
        )
        .route("/v1/models", get(models).fallback(wrong_method("GET")))
        .route(
            "/v1/models/{*model}",
            get(model).fallback(wrong_method("GET")),
        )
        .route("/v1/quota", get(quota).fallback(wrong_method("GET")))
        .route("/v1/usage", get(usage).fallback(wrong_method("GET")))
        .route(
            "/healthz",
            get(|| async { "ok\n" }).fallback(wrong_method("GET")),
        )
        .route("/readyz", get(ready).fallback(wrong_method("GET")))
        .fallback(api_not_found)
        .layer(axum::extract::DefaultBodyLimit::max(
            usize::try_from(limit).unwrap_or(usize::MAX),
        ))
        .with_state(shared.clone());
    let metrics = axum::Router::new()
        .route(
            "/metrics",
            get(render_metrics).fallback(wrong_method("GET")),
        )
        .with_state(shared);
    Apps {
        api,
        metrics,
        cut: Cut {
            flag: Arc::new(cut),
            streams,
        },
    }
}

/// The API and `/metrics` on one address.
pub fn app(router: Router, auth: Auth) -> axum::Router {
    let Apps { api, metrics, .. } = apps(router, auth);
    api.merge(metrics)
}

/// A path no route has: 404 naming it and the paths served.
async fn api_not_found(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = shown_path(&uri);
    let error = ApiError::unknown_path(format!(
        "no route for `{method} {path}`: this gateway serves POST /v1/chat/completions, \
         GET /v1/models, GET /v1/models/{{model}}, GET /v1/quota, GET /v1/usage, GET /healthz, GET /readyz and GET /metrics \
         (unless `gateway.metrics_listen` gives it its own address); an OpenAI client's base URL \
         ends in `/v1`, e.g. `http://127.0.0.1:8080/v1`"
    ));
    refused(error, &method, &path, &headers)
}

/// The fallback of a route that takes `allowed` only: 405 in OpenAI's shape, naming the
/// method to use (axum adds the `Allow` header).
fn wrong_method(
    allowed: &'static str,
) -> impl Fn(Method, Uri, HeaderMap) -> std::future::Ready<Response> + Clone + Send + Sync + 'static
{
    move |method: Method, uri: Uri, headers: HeaderMap| {
        let path = shown_path(&uri);
        let error = ApiError::method_not_allowed(format!(
            "`{path}` does not take {method}: send it as {allowed}"
        ));
        std::future::ready(refused(error, &method, &path, &headers))
    }
}

/// The path of `uri` as an error message shows it: its first 200 characters.
fn shown_path(uri: &Uri) -> String {
    const MAX: usize = 200;
    let path = uri.path();
    match path.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", &path[..at]),
        None => path.to_owned(),
    }
}

/// The response to a request for a path or method no route takes, with an `x-request-id` and
/// an `llmroute::access` line as chat requests have.
fn refused(error: ApiError, method: &Method, path: &str, headers: &HeaderMap) -> Response {
    let request_id = request_id_of(headers);
    let response = error.into_response_with(&request_id);
    tracing::info!(
        target: "llmroute::access",
        request_id = %request_id,
        status = response.status().as_u16(),
        "{method} {path}"
    );
    response
}

/// The request's id: the caller's `x-request-id` (1 to 128 bytes, no control character such
/// as a tab, which a header may hold and a request id may not), else a new one.
pub(crate) fn request_id_of(headers: &HeaderMap) -> String {
    header(headers, "x-request-id")
        .filter(|id| !id.is_empty() && id.len() <= 128 && router_sdk::is_request_id(id))
        .map_or_else(|| format!("{:016x}", fastrand::u64(..)), str::to_owned)
}

async fn render_metrics(State(shared): State<Arc<Shared>>) -> Response {
    let text = shared.metrics.render(&shared.router).await;
    let mut response = text.into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// How long a client may take to send a request's headers: a connection that trickles them (or
/// sends none) is closed then, so that idle or slow clients cannot pile up connections.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` (HTTP/1.1, headers read within [`HEADER_READ_TIMEOUT`]) until
/// `shutdown` completes, then stops accepting, lets the requests and streams in flight finish,
/// and closes idle connections.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    // Dropped when `shutdown` completes: every connection then finishes what it serves.
    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(stopping_rx);
    });
    // Each connection holds a receiver; all dropped, every connection is over.
    let (closed_tx, closed_rx) = tokio::sync::watch::channel(());
    loop {
        let socket = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin; a connection that
                    // failed as it was accepted is nothing to wait for.
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                    ) {
                        tracing::error!(error = %e, "gateway: cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            () = stopping_tx.closed() => break,
        };
        // Each SSE event is a small write of its own: without this, one would wait for the
        // client's acknowledgement of the one before (Nagle's algorithm).
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(error = %e, "gateway: cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let stopping = stopping_tx.clone();
        let closed = closed_rx.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = http.serve_connection(TokioIo::new(socket), service);
            let mut conn = std::pin::pin!(conn);
            let mut stop = std::pin::pin!(stopping.closed());
            let mut stopped = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(error = %e, "gateway: a connection ended with an error");
                        }
                        break;
                    }
                    () = &mut stop, if !stopped => {
                        stopped = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(closed);
        });
    }
    drop(closed_rx);
    drop(listener);
    closed_tx.closed().await;
    Ok(())
}

/// Seconds since the Unix epoch, for `created`.
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A header of the caller's, as text.
fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn chat(State(shared): State<Arc<Shared>>, request: axum::extract::Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let request_id = request_id_of(&headers);
    let started = std::time::Instant::now();
    let caller = shared.access.caller(shared.router.registry(), &headers);
    // Known once the key is: every answer after that, refusals included, is the tenant's.
    let tenant = caller.as_ref().ok().and_then(|c| c.tenant.clone());
    let tenant = tenant.as_deref().unwrap_or(router_core::config::NO_TENANT);
    let mut gone = ClientGone {
        shared: &shared,
        request_id: &request_id,
        tenant,
        started,
        counted: false,
        logged: false,
    };
    let outcome = match caller {
        Ok(caller) => {
            // The body is read once the key is known: a caller without a key cannot make the
            // gateway wait for, and hold, a body.
            let request = axum::extract::Request::from_parts(parts, body);
            let body = body::read(&shared.router.registry().gateway, &headers, request).await;
            answer(
                &shared,
                &caller,
                &headers,
                body,
                &request_id,
                &mut gone.counted,
            )
            .await
        }
        Err(e) => Err(Failed::from(e)),
    };
    let response = match outcome {
        Ok(response) => response,
        Err(failed) => {
            let who = metrics::Served {
                tenant,
                provider: failed.provider.as_deref().unwrap_or("-"),
                model: failed.model.as_deref().unwrap_or("-"),
            };
            let code = failed.error.code();
            shared.metrics.request(&who, code, started.elapsed());
            let mut response = failed.error.into_response_with(&request_id);
            if let Some(rates) = failed.rates {
                rates.set(response.headers_mut());
            }
            response
        }
    };
    gone.counted = true;
    gone.logged = true;
    let h = response.headers();
    let shown = |name: &str| header(h, name).unwrap_or("-");
    let status = response.status().as_u16();
    let served = (shown("x-llmroute-provider"), shown("x-llmroute-model"));
    chat_access_line(&request_id, tenant, status, served, started);
    response
}

/// The access log of a chat request: one line, never a prompt or a key.
fn chat_access_line(
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
        "POST /v1/chat/completions"
    );
}

/// A chat request whose client went away before its answer (hyper drops the handler then): it
/// still logs its access line, as status 499, and is counted, as outcome `client_closed` unless
/// its outcome was counted already (an answer counted, and the client gone while the
/// `x-ratelimit-*` headers were read). The request's own drop settles its reservation.
struct ClientGone<'a> {
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
            chat_access_line(self.request_id, self.tenant, 499, ("-", "-"), self.started);
        }
    }
}

/// A request that failed, with the provider and model metrics label it by (its tenant is the
/// caller's).
struct Failed {
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
/// is counted in the metrics (a failure is counted by the caller).
async fn answer(
    shared: &Arc<Shared>,
    caller: &auth::Caller,
    headers: &HeaderMap,
    body: Result<Bytes, ApiError>,
    request_id: &str,
    counted: &mut bool,
) -> Result<Response, Failed> {
    let started = std::time::Instant::now();
    let tenant_label = caller
        .tenant
        .clone()
        .unwrap_or_else(|| router_core::config::NO_TENANT.to_owned());
    // A router error: its provider calls are counted, and it is labelled by who was asked.
    let routed = |e: router_sdk::Error| {
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
    };
    let body = body?;
    let read = inbound::read(&body).map_err(ApiError::bad_request)?;
    let mut req = read.request;
    let model = req.model.clone().unwrap_or_default();
    caller.may_use(&model)?;
    req.tenant = caller.tenant.clone();
    req.key_id = caller.key_id.clone();
    req.request_id = Some(request_id.to_owned());
    req.priority = match (caller.priority, header(headers, "x-llmroute-priority")) {
        (Some(pinned), _) => pinned,
        (None, None) => Priority::Interactive,
        (None, Some("interactive")) => Priority::Interactive,
        (None, Some("batch")) => Priority::Batch,
        (None, Some(other)) => {
            return Err(ApiError::bad_request(format!(
                "header `x-llmroute-priority`: `{other}` is not `interactive` or `batch`"
            ))
            .into());
        }
    };
    if let Some(secs) = header(headers, "x-llmroute-timeout") {
        let deadline = secs
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "header `x-llmroute-timeout`: `{secs}` is not a number of seconds in (0, 86400]"
                ))
            })?;
        req.deadline = Some(Duration::from_secs_f64(deadline));
    }
    for name in &shared.router.registry().gateway.forward_headers {
        for value in headers.get_all(name.as_str()) {
            if let Ok(value) = value.to_str() {
                req.headers.push((name.clone(), value.to_owned()));
            }
        }
    }
    if let Some(list) = header(headers, "x-llmroute-providers") {
        req.providers = caller.providers_asked(shared.router.registry(), list)?;
    }
    let router = &shared.router;
    let rates = &ratelimit::Basis::of(router.registry(), caller.tenant.as_deref(), &model);
    // A refusal of the router: a 429 reports the window as the refusal found it, or the
    // model's headroom read beside the admission.
    let refused = |e: router_sdk::Error, headroom| async move {
        let mut failed = routed(e);
        if failed.error.status() == StatusCode::TOO_MANY_REQUESTS {
            failed.rates = rates.report(router, None, headroom).await;
        }
        failed
    };
    // Read beside the admission, never after the answer.
    let headroom = rates.headroom(router, &shared.headrooms);
    let (mut response, window, headroom) = if read.stream {
        let (stream, headroom) = tokio::select! {
            biased;
            () = cut_off(shared.cut.clone()) => return Err(ApiError::stopping().into()),
            both = async { tokio::join!(router.chat_stream(req), headroom) } => both,
        };
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => return Err(refused(e, headroom).await),
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
        };
        let response = streamed(stream, model.clone(), read.include_usage, counted);
        (response, window, headroom)
    } else {
        let (answer, headroom) = tokio::select! {
            biased;
            () = cut_off(shared.cut.clone()) => return Err(ApiError::stopping().into()),
            both = async { tokio::join!(router.chat(req), headroom) } => both,
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => return Err(refused(e, headroom).await),
        };
        let r = &answer.receipt;
        let who = metrics::Served {
            tenant: &tenant_label,
            provider: &r.provider,
            model: &r.model,
        };
        shared.metrics.request(&who, "ok", started.elapsed());
        *counted = true;
        shared.metrics.router_added(started.elapsed(), r.upstream);
        shared.metrics.answered(&who, r);
        let body = outbound::completion(&answer, now_secs());
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
        (response, r.tenant_window, headroom)
    };
    if let Some(report) = rates.report(router, window, headroom).await {
        report.set(response.headers_mut());
    }
    Ok(response)
}

/// Sets `pairs` on `headers`, leaving out any value that cannot be a header.
fn set_headers(headers: &mut HeaderMap, pairs: &[(&'static str, &str)]) {
    for &(name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
}

/// A streamed answer as SSE: chunks as they arrive, the finish reason, usage when asked for,
/// then `[DONE]`. A stream that breaks ends with an error object and no `[DONE]`. When the
/// client goes away, the stream is dropped, which cancels the upstream call and settles its
/// reservation.
fn streamed(stream: ChatStream, asked: String, include_usage: bool, counted: Counted) -> Response {
    let provider = stream.provider().to_owned();
    let model = stream.model().to_owned();
    let request_id = stream.request_id().to_owned();
    let chunks = outbound::Chunks::new(
        outbound::id(None, &request_id),
        if model.is_empty() {
            asked
        } else {
            model.clone()
        },
        now_secs(),
    );
    let slot = counted.shared.streams.hold(stream);
    let state = Relay {
        cut: Box::pin(cut_off(counted.shared.cut.clone())),
        expiry: Streams::expire_unread(&slot),
        stream: slot,
        counted,
        chunks,
        include_usage,
        pending: VecDeque::new(),
        ended: false,
    };
    let events = futures_util::stream::unfold(state, |mut relay| async move {
        let event = relay.next().await?;
        Some((Ok::<Event, Infallible>(event), relay))
    });
    let mut response = Sse::new(events).into_response();
    let pairs = [
        ("x-llmroute-provider", provider.as_str()),
        ("x-llmroute-model", model.as_str()),
        ("x-request-id", request_id.as_str()),
    ];
    set_headers(response.headers_mut(), &pairs);
    response
}

/// Where a stream's answer is counted when it ends.
struct Counted {
    shared: Arc<Shared>,
    tenant: String,
    request_id: String,
}

/// Turns the router's stream into SSE events.
struct Relay {
    /// Resolves when the gateway's grace period is over ([`Cut`]).
    cut: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// The router's stream, until a cut or its deadline unread takes it.
    stream: Arc<Slot>,
    /// Its deadline timer, stopped with the relay.
    expiry: Option<Expiry>,
    counted: Counted,
    chunks: outbound::Chunks,
    include_usage: bool,
    pending: VecDeque<Event>,
    ended: bool,
}

impl Relay {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.ended {
                return None;
            }
            let data = |v: serde_json::Value| Event::default().data(v.to_string());
            // The slot is locked only while the stream is polled: a cut takes it in between.
            let slot = &self.stream;
            let polled = futures_util::future::poll_fn(|cx| {
                let mut stream = slot.lock().unwrap_or_else(PoisonError::into_inner);
                match stream.as_mut() {
                    Some(stream) => stream.poll_next_unpin(cx).map(Some),
                    None => std::task::Poll::Ready(None),
                }
            });
            let taken = self.expiry.as_ref().map(|e| e.taken.clone());
            let taken = async move {
                match taken {
                    Some(taken) => taken.notified().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                biased;
                () = &mut self.cut => None,
                () = taken => None,
                next = polled => next,
            };
            let Some(next) = next else {
                // Cut off, or dropped past its deadline unread: the stream is dropped (by the
                // cut, the timer, or here), which settles it.
                self.stream
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                let error = if *self.counted.shared.cut.borrow() {
                    ApiError::stopping()
                } else {
                    ApiError::unread_past_deadline()
                };
                self.pending.push_back(data(error.body()));
                self.ended = true;
                continue;
            };
            match next {
                Some(Ok(ChatChunk::Delta(text))) => {
                    self.pending.push_back(data(self.chunks.text(&text)));
                }
                Some(Ok(ChatChunk::ToolCallDelta(d))) => {
                    self.pending.push_back(data(self.chunks.tool_call(&d)));
                }
                Some(Ok(ChatChunk::ToolCalls(_))) => {}
                Some(Ok(ChatChunk::Done(receipt))) => {
                    let who = metrics::Served {
                        tenant: &self.counted.tenant,
                        provider: &receipt.provider,
                        model: &receipt.model,
                    };
                    self.counted.shared.metrics.answered(&who, &receipt);
                    // Every chunk of one completion carries one `id` (clients group chunks by
                    // it): the gateway's own, set before the first, not the provider's, which
                    // only the answer's end brings.
                    for chunk in self.chunks.end(&receipt, self.include_usage) {
                        self.pending.push_back(data(chunk));
                    }
                    self.pending.push_back(Event::default().data("[DONE]"));
                    self.ended = true;
                }
                Some(Err(e)) => {
                    self.counted.shared.metrics.attempts(e.attempts());
                    let error = ApiError::logged(e, &self.counted.request_id);
                    self.pending.push_back(data(error.body()));
                    self.ended = true;
                }
                None => self.ended = true,
            }
        }
    }
}

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
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
async fn model(
    State(shared): State<Arc<Shared>>,
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
fn model_object(name: &str) -> serde_json::Value {
    json!({"id": name, "object": "model", "created": 0, "owned_by": "llmroute"})
}

/// What `llmroute quota --tenant <caller> --json` shows, for the caller's tenant, over the
/// deployments of the models its key may use.
async fn quota(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let caller = match shared.access.caller(shared.router.registry(), &headers) {
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
        router_sdk::quota::quota(registry, router.ledger(), state, tenant, &deployments).await;
    match report {
        Ok(report) => Json(report).into_response(),
        Err(e) => ApiError::logged(router_sdk::Error::Ledger(e), "").into_response_with(""),
    }
}

/// What `llmroute usage --json` shows over the caller's own records: `since` (default 24h),
/// `until`, `by` and `model` as the command's flags take them. A `tenant` other than the
/// caller's is refused; without auth (loopback only) every record is the caller's.
async fn usage(
    State(shared): State<Arc<Shared>>,
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
    match router_sdk::usage::report(recorder.sink(), shared.router.registry(), &query).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => ApiError::logged(router_sdk::Error::Usage(e), "").into_response_with(""),
    }
}

/// The report query of `/v1/usage`'s parameters, for `tenant` (the caller's).
fn usage_query(
    params: &[(String, String)],
    tenant: Option<&str>,
    now_ms: u64,
) -> Result<router_sdk::usage::Query, ApiError> {
    let mut query = router_sdk::usage::Query {
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
                    router_sdk::usage::parse_instant(value, now_ms).map_err(|e| bad(name, e))?
            }
            "until" => {
                query.until_ms =
                    router_sdk::usage::parse_instant(value, now_ms).map_err(|e| bad(name, e))?
            }
            "by" => {
                for g in value.split(',').filter(|g| !g.trim().is_empty()) {
                    let g = router_sdk::usage::Group::parse(g).map_err(|e| bad(name, e))?;
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

async fn ready(State(shared): State<Arc<Shared>>) -> Response {
    match shared.router.ledger().snapshot(&[]).await {
        Ok(_) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness: the ledger does not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the ledger does not answer\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests;
