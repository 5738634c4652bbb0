//! The gateway's services: the routes of the API and of `/metrics`, over the state they share.

use std::sync::Arc;

use axum::routing::{get, post};
use router_sdk::Router;
use tokio_util::sync::CancellationToken;

use crate::auth::Access;
use crate::cut::{Cut, Streams};
use crate::ingress::{Chat, Messages, Responses};
use crate::routes::{
    admin_routes, api_not_found, chat, count_tokens, embeddings, model, models, quota, ready,
    render_metrics, usage, wrong_method,
};
use crate::{keys, metrics, ratelimit};

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) router: Router,
    pub(crate) access: Access,
    pub(crate) metrics: metrics::Metrics,
    /// Cancelled when what is in flight must end now ([`Cut`]).
    pub(crate) cut: CancellationToken,
    /// The streams being relayed, for [`Cut::now`] to end.
    pub(crate) streams: Arc<Streams>,
    /// Each model's last headroom reading, for callers without tier limits.
    pub(crate) headrooms: ratelimit::Headrooms,
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
}

/// The gateway's services over `router`, letting in the callers `access` knows. On a tokio
/// runtime, a task polls the runtime keys while the services live (see `keys.rs`).
pub fn apps(router: Router, access: Access) -> Apps {
    let limit = router.registry().gateway.body_limit_bytes;
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::spawn(keys::watch(Arc::downgrade(access.runtime())));
    }
    let seen = access.runtime().seen();
    let metrics = metrics::Metrics::new();
    let cut = CancellationToken::new();
    let streams = Arc::new(Streams::default());
    let shared = Arc::new(Shared {
        router,
        access,
        metrics,
        cut: cut.clone(),
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
        .with_state(shared);
    Apps {
        api,
        metrics,
        cut: Cut {
            token: cut,
            streams,
        },
        keys: seen,
    }
}

/// The API and `/metrics` on one address.
pub fn app(router: Router, access: Access) -> axum::Router {
    let Apps { api, metrics, .. } = apps(router, access);
    api.merge(metrics)
}
