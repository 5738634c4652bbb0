//! The gateway's services: the routes of the API and of `/metrics`, over the state they share.

use std::sync::Arc;

use axum::routing::{get, post};
use router_sdk::Router;
use tokio_util::sync::CancellationToken;

use crate::auth::Access;
use crate::cut::{Cut, Streams};
use crate::ingress::{Chat, Messages, Responses};
use crate::reload::{Gateway, Rebuild, Retired};
use crate::routes::{
    admin_routes, api_not_found, chat, count_tokens, embeddings, model, models, quota, ready,
    render_metrics, usage, wrong_method,
};
use crate::telemetry::Telemetry;
use crate::{keys, metrics, ratelimit};

/// One configuration as the gateway serves it: its router and the callers it lets in, with
/// what every configuration shares (metrics, the cut, the streams, headroom readings).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) router: Router,
    pub(crate) access: Access,
    pub(crate) metrics: Arc<metrics::Metrics>,
    /// Cancelled when what is in flight must end now ([`Cut`]).
    pub(crate) cut: CancellationToken,
    /// The streams being relayed, for [`Cut::now`] to end.
    pub(crate) streams: Arc<Streams>,
    /// Each model's last headroom reading, for callers without tier limits.
    pub(crate) headrooms: Arc<ratelimit::Headrooms>,
    /// Set once a reload replaced it (see `reload.rs`).
    pub(crate) retired: Retired,
    /// Which requests are traced, and where their spans go.
    pub(crate) telemetry: Arc<Telemetry>,
}

impl Shared {
    /// The configuration of `router`, with the same callers under its `gateway:` and what
    /// every configuration shares.
    pub(crate) fn next(&self, router: Router) -> Shared {
        Shared {
            access: self.access.reloaded(&router.registry().gateway),
            router,
            metrics: self.metrics.clone(),
            cut: self.cut.clone(),
            streams: self.streams.clone(),
            headrooms: self.headrooms.clone(),
            retired: Retired::default(),
            telemetry: self.telemetry.clone(),
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
    /// The version of the runtime keys served.
    pub keys: keys::KeysSeen,
    /// Reloads the configuration (for SIGHUP).
    pub reload: Reload,
    /// The traces, flushed when the gateway stops.
    pub(crate) telemetry: Arc<Telemetry>,
}

/// Reloads a gateway's configuration: see `reload.rs`.
#[derive(Debug, Clone)]
pub struct Reload(Arc<Gateway>);

impl Reload {
    /// Reads the configuration again and serves it from now on; `Err` keeps the old one and
    /// says why.
    pub async fn reload(&self) -> Result<String, String> {
        self.0.reload().await
    }

    /// The router of the configuration served now.
    pub fn router(&self) -> Router {
        self.0.current().router.clone()
    }
}

/// The gateway's services over `router`, letting in the callers `access` knows. On a tokio
/// runtime, a task polls the runtime keys while the services live (see `keys.rs`). It has no
/// configuration to reload: see [`apps_reloading`].
pub fn apps(router: Router, access: Access) -> Apps {
    apps_reloading(router, access, None)
}

/// [`apps`], reloading the configuration `rebuild` builds on SIGHUP and `POST /admin/v1/reload`.
pub fn apps_reloading(router: Router, access: Access, rebuild: Option<Rebuild>) -> Apps {
    let limit = router.registry().gateway.body_limit_bytes;
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::spawn(keys::watch(Arc::downgrade(access.runtime())));
    }
    let seen = access.runtime().seen();
    let telemetry = Arc::new(Telemetry::start(&router.registry().telemetry));
    let cut = CancellationToken::new();
    let streams = Arc::new(Streams::default());
    let shared = Shared {
        router,
        access,
        metrics: Arc::new(metrics::Metrics::new()),
        cut: cut.clone(),
        streams: streams.clone(),
        headrooms: Arc::default(),
        retired: Retired::default(),
        telemetry: telemetry.clone(),
    };
    let shared = Arc::new(Gateway::new(shared, rebuild));
    // Every refusal is in OpenAI's error shape: a wrong method (405, with `Allow`), an unknown
    // path (404), a body over the limit (413, from `chat`). Only the API has a catch-all
    // fallback, so that the two routers merge (axum refuses two); `/metrics`'s own address
    // answers other paths with a bare 404.
    let api = axum::Router::new()
        .route(
            "/v1/chat/completions",
            post(chat::<Chat>).fallback(wrong_method("POST")),
        )
        .route(
            "/v1/messages",
            post(chat::<Messages>).fallback(wrong_method("POST")),
        )
        .route(
            "/v1/messages/count_tokens",
            post(count_tokens).fallback(wrong_method("POST")),
        )
        .route(
            "/v1/responses",
            post(chat::<Responses>).fallback(wrong_method("POST")),
        )
        .route(
            "/v1/embeddings",
            post(embeddings).fallback(wrong_method("POST")),
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
        .merge(admin_routes())
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
        .with_state(shared.clone());
    Apps {
        api,
        metrics,
        cut: Cut {
            token: cut,
            streams,
        },
        keys: seen,
        reload: Reload(shared),
        telemetry,
    }
}

/// The API and `/metrics` on one address.
pub fn app(router: Router, access: Access) -> axum::Router {
    let Apps { api, metrics, .. } = apps(router, access);
    api.merge(metrics)
}
