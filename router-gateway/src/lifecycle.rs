//! A gateway's whole life, as `llmroute serve` runs it: who may call ([`Auth::choose`]), its
//! sockets ([`Listeners`]), then [`run`]: serve until a stop request, let what is in flight
//! finish, cut off what is left, wait for the settlements.
//!
//! Stop requests come as a stream (the CLI's SIGINT and SIGTERM, by name):
//!
//! | stop request | what happens |
//! |---|---|
//! | first | both servers stop accepting; requests and streams in flight have `gateway.grace_secs` to finish |
//! | second, during the grace period | what is in flight is cut off at once ([`Cut`]) |
//! | after the servers ended | the wait for pending settlements ends |
//!
//! What is still in flight when the grace period ends is cut off: refused with 503, or its
//! stream ended with that error, which drops its provider call and settles its reservation as a
//! dropped request's while the process still runs. A connection that still holds on after that
//! (a body still being sent, or a stream its client no longer reads, whose call the cut has
//! dropped already: nothing reserved either way) is dropped [`CUT_GRACE`] later.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::stream::{Stream, StreamExt};
use router_core::config::Gateway;
use router_sdk::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::{Access, Auth, Cut, Rebuild, apps_reloading, serve};

/// How long a stopping gateway waits, after cutting off what was in flight at the end of its
/// grace period, for its connections to close before it drops them.
pub const CUT_GRACE: Duration = Duration::from_secs(2);

impl Auth {
    /// How a gateway on `addr` admits callers: with keys, or without keys when `no_auth` asks
    /// for it. `runtime` says whether keys come at runtime too (the key store holds some, or an
    /// admin key can create them). An error says why neither can be: no keys to check, or
    /// no keys on an address other than loopback.
    pub fn choose(
        no_auth: bool,
        addr: SocketAddr,
        gateway: &Gateway,
        runtime: bool,
    ) -> Result<Auth, String> {
        if no_auth {
            if !addr.ip().is_loopback() {
                return Err(format!(
                    "--no-auth lets anyone who can reach {addr} spend your providers' keys: it is \
                     refused on an address other than loopback; listen on 127.0.0.1 or add keys \
                     to `gateway.keys` (llmroute keys new --tenant NAME)"
                ));
            }
            return Ok(Auth::None);
        }
        if gateway.keys.is_empty() && !runtime {
            return Err(
                "`gateway.keys` is empty, the key store holds no key and no admin key is set, \
                 so no caller could authenticate; make a key with `llmroute keys create \
                 --tenant NAME`, set LLMROUTE_ADMIN_KEY to make them through /admin/v1, or \
                 pass --no-auth on a loopback address"
                    .to_owned(),
            );
        }
        Ok(Auth::Keys)
    }
}

/// The gateway's sockets: the API's, and `/metrics`'s own if it has one.
#[derive(Debug)]
pub struct Listeners {
    api: TcpListener,
    metrics: Option<TcpListener>,
}

impl Listeners {
    /// Binds `api` and, when given, `metrics`; an error names the address that cannot be bound.
    pub async fn bind(api: SocketAddr, metrics: Option<SocketAddr>) -> Result<Self, String> {
        let api = TcpListener::bind(api)
            .await
            .map_err(|e| format!("cannot listen on {api}: {e}"))?;
        let metrics = match metrics {
            Some(at) => Some(
                TcpListener::bind(at)
                    .await
                    .map_err(|e| format!("cannot listen on {at} for metrics: {e}"))?,
            ),
            None => None,
        };
        Ok(Self { api, metrics })
    }

    /// The API's address, as bound (port 0 resolved).
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api.local_addr().ok()
    }

    /// `/metrics`'s own address, when it has one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|m| m.local_addr().ok())
    }
}

/// How a gateway reloads its configuration: `rebuild` builds it anew each time one of
/// `signals` comes (the CLI's SIGHUP), and for `POST /admin/v1/reload`.
pub struct Reloading {
    /// Builds the router of the configuration as it is now.
    pub rebuild: Rebuild,
    /// One item per reload asked for.
    pub signals: std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>,
}

impl std::fmt::Debug for Reloading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading").finish_non_exhaustive()
    }
}

/// Serves `router` on `listeners` until the first of `stops` (each the name of what asked,
/// e.g. `SIGTERM`), then stops as the module's table says, and returns once the settlements
/// are drained or another stop ends the wait. `grace` is `gateway.grace_secs`. With
/// `reloading`, the configuration is reloaded as each of its signals comes.
pub async fn run(
    router: Router,
    access: Access,
    listeners: Listeners,
    stops: impl Stream<Item = &'static str> + Send + Unpin + 'static,
    reloading: Option<Reloading>,
) -> std::io::Result<()> {
    let grace = router.registry().gateway.grace;
    let count = count_stops(stops);
    let (rebuild, reloads) = match reloading {
        Some(r) => (Some(r.rebuild), Some(r.signals)),
        None => (None, None),
    };
    let apps = apps_reloading(router, access, rebuild);
    let reloader = reloads.map(|mut signals| {
        let reload = apps.reload.clone();
        tokio::spawn(async move {
            while signals.next().await.is_some() {
                // The outcome is logged and counted by the reload itself.
                let _ = reload.reload().await;
            }
        })
    });
    let metrics = listeners.metrics.map(|m| {
        let metrics = serve(m, apps.metrics.clone(), stopped(count.clone(), 1));
        tokio::spawn(metrics)
    });
    let api = match metrics {
        Some(_) => apps.api,
        None => apps.api.merge(apps.metrics),
    };
    let serving = tokio::spawn(serve(listeners.api, api, stopped(count.clone(), 1)));
    let served = serve_within_grace(serving, &apps.cut, grace, count.clone()).await;
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    served?;
    // The spans of the last requests, unless the collector is slow.
    apps.telemetry.flush(TRACES_FLUSH).await;
    // The configuration served last; those a reload replaced drain by themselves.
    let router = apps.reload.router();
    // Settlements retry while the ledger refuses them (say, Redis is away); another stop ends
    // the wait (their slots expire with their TTL).
    let further = stopped(count.clone(), *count.borrow() + 1);
    tokio::select! {
        () = router.drain() => {}
        () = further => {
            tracing::warn!("exiting without waiting for pending settlements: their slots expire after the slot TTL");
        }
    }
    Ok(())
}

/// How long a stopping gateway waits for the collector to take the last spans.
const TRACES_FLUSH: Duration = Duration::from_secs(2);

/// Waits for `serving` to end, cutting off what is in flight `grace` after the first stop (or
/// at the second) and dropping the server [`CUT_GRACE`] after that.
async fn serve_within_grace(
    mut serving: tokio::task::JoinHandle<std::io::Result<()>>,
    cut: &Cut,
    grace: Duration,
    count: watch::Receiver<u32>,
) -> std::io::Result<()> {
    let joined = |j: Result<std::io::Result<()>, tokio::task::JoinError>| {
        j.unwrap_or_else(|e| Err(std::io::Error::other(e)))
    };
    let deadline = async {
        stopped(count.clone(), 1).await;
        tokio::select! {
            () = tokio::time::sleep(grace) => {}
            () = stopped(count.clone(), 2) => {}
        }
    };
    tokio::select! {
        j = &mut serving => joined(j),
        () = deadline => {
            tracing::warn!(grace_secs = grace.as_secs(), "grace period over (or cut short): cutting off what is still in flight");
            cut.now();
            match tokio::time::timeout(CUT_GRACE, &mut serving).await {
                Ok(j) => joined(j),
                Err(_) => {
                    serving.abort();
                    Ok(())
                }
            }
        }
    }
}

/// Counts `stops` as they come, saying what the first and each later one do.
fn count_stops(
    mut stops: impl Stream<Item = &'static str> + Send + Unpin + 'static,
) -> watch::Receiver<u32> {
    let (count, counted) = watch::channel(0_u32);
    tokio::spawn(async move {
        while let Some(what) = stops.next().await {
            let mut seen = 0;
            count.send_modify(|n| {
                *n += 1;
                seen = *n;
            });
            if seen == 1 {
                tracing::info!(
                    signal = what,
                    "stopping: finishing the requests in flight (another signal cuts them off)"
                );
            } else {
                tracing::warn!(signal = what, "another signal: stopping at once");
            }
        }
        // No more stops can come: the count stands while anyone waits on it.
        count.closed().await;
    });
    counted
}

/// Resolves at the `n`-th stop (at once if it came).
async fn stopped(mut count: watch::Receiver<u32>, n: u32) {
    let _ = count.wait_for(|seen| *seen >= n).await;
}
