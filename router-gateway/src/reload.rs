//! Reloading the configuration without a restart. The gateway serves one configuration at a
//! time: a [`Shared`] (the router, the keys it accepts) that every request takes when it
//! arrives ([`Live`]) and keeps until it is answered, its stream included. A reload builds the
//! new configuration whole (read, validated, its router built) and swaps it in at once: requests
//! in flight finish on the one they started with, new ones take the new one, and nothing is
//! dropped. The old router drains when its last request is done: its settlements land, its
//! leased blocks go back.
//!
//! Limits already used stay counted: the ledger's windows live in the shared store (Redis or the
//! embedded file), named by provider and model, and the new router reads the same ones. So a
//! reload that would move the ledger elsewhere (`state`, `namespace`) is refused: that is a
//! restart. A configuration that does not validate, or whose router cannot be built, changes
//! nothing; the answer (and the log, and `llmroute_config_reloads_total{result="error"}`) says
//! why.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use futures_util::future::BoxFuture;
use router_sdk::Router;

use crate::app::Shared;

/// Builds the router of the configuration as it is now on disk; the error says why it cannot.
pub type Rebuild = Arc<dyn Fn() -> BoxFuture<'static, Result<Router, String>> + Send + Sync>;

/// The configuration served now, and how to build the next one.
pub(crate) struct Gateway {
    current: RwLock<Arc<Shared>>,
    rebuild: Option<Rebuild>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("reloads", &self.rebuild.is_some())
            .finish_non_exhaustive()
    }
}

/// The configuration a request is served on: the one current when it arrived.
pub(crate) struct Live(pub(crate) Arc<Shared>);

impl FromRequestParts<Arc<Gateway>> for Live {
    type Rejection = Infallible;

    async fn from_request_parts(
        _parts: &mut Parts,
        gateway: &Arc<Gateway>,
    ) -> Result<Self, Self::Rejection> {
        Ok(Live(gateway.current()))
    }
}

impl Gateway {
    pub(crate) fn new(shared: Shared, rebuild: Option<Rebuild>) -> Self {
        Gateway {
            current: RwLock::new(Arc::new(shared)),
            rebuild,
            reloading: tokio::sync::Mutex::new(()),
        }
    }

    /// The configuration served now.
    pub(crate) fn current(&self) -> Arc<Shared> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the configuration again and serves it from now on; `Err` keeps the old one and
    /// says why. The answer names what changed in a few words.
    pub(crate) async fn reload(&self) -> Result<String, String> {
        let result = self.reloaded().await;
        let old = self.current();
        old.metrics.reloaded(result.is_ok());
        match &result {
            Ok(what) => tracing::info!(target: "llmroute::audit", "configuration reloaded: {what}"),
            Err(why) => tracing::warn!("configuration not reloaded, the old one kept: {why}"),
        }
        result
    }

    async fn reloaded(&self) -> Result<String, String> {
        let Some(rebuild) = &self.rebuild else {
            return Err(
                "this gateway was not started from a configuration file: there is \
                        nothing to read again"
                    .to_owned(),
            );
        };
        let _one = self.reloading.lock().await;
        let router = rebuild().await?;
        let old = self.current();
        let (before, after) = (old.router.registry(), router.registry());
        if before.state != after.state || before.namespace != after.namespace {
            return Err(
                "`state` or `namespace` changed: the limits used so far are counted \
                        where they are, so moving the ledger takes a restart"
                    .to_owned(),
            );
        }
        let what = changes(before, after);
        let next = old.next(router);
        let retired = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(PoisonError::into_inner),
            Arc::new(next),
        );
        retired.retire();
        Ok(what)
    }
}

/// What a reload changes, in a few words.
fn changes(
    before: &router_core::config::Registry,
    after: &router_core::config::Registry,
) -> String {
    let count = |r: &router_core::config::Registry| (r.providers.len(), r.deployments.len());
    let (p, d) = count(after);
    let mut what = format!("{p} providers, {d} deployments");
    if count(before) == count(after) && before != after {
        what.push_str(" (settings changed)");
    } else if before == after {
        what.push_str(" (no change)");
    }
    if before.gateway.listen != after.gateway.listen
        || before.gateway.metrics_listen != after.gateway.metrics_listen
    {
        what.push_str("; the new listen addresses take effect at the next restart");
    }
    what
}

/// Set on a configuration replaced by a reload: it drains when its last request is done.
#[derive(Debug, Default)]
pub(crate) struct Retired(AtomicBool);

impl Shared {
    /// Marks it replaced.
    fn retire(&self) {
        self.retired.0.store(true, Ordering::Release);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if !self.retired.0.load(Ordering::Acquire) {
            return;
        }
        // Its last request is done: its settlements land, its leased blocks go back.
        let router = self.router.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { router.drain().await });
        }
    }
}
