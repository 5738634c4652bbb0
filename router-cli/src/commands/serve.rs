//! `llmroute serve`: the OpenAI-compatible gateway (`router_gateway`) on a socket, until SIGINT
//! or SIGTERM; then it stops as `router_gateway::run` says and exits 0.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::anyhow;
use clap::Args;
use router_gateway::{Access, Auth, Listeners, Rebuild, Reloading};
use router_state::store::LedgerChoice;

/// The environment variable holding an admin key, beside `gateway.admin_keys`.
pub(crate) const ADMIN_KEY_ENV: &str = "LLMROUTE_ADMIN_KEY";

use crate::context::Context;
use crate::failure::Failure;
use crate::interrupt::Signals;

/// Options of `llmroute serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on, IP:PORT (default: `gateway.listen`, else 127.0.0.1:8080)
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Serve `/metrics` on this address instead of the API's (default: `gateway.metrics_listen`)
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Accept requests without a key (they have no tenant). Only on a loopback address
    #[arg(long)]
    no_auth: bool,
    /// Worker threads serving requests (default: one per core the process may use)
    #[arg(long, value_name = "N", env = "LLMROUTE_WORKERS")]
    pub(crate) workers: Option<std::num::NonZeroUsize>,
}

pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &ServeArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let mut loaded = ctx.load()?;
    // The standard OpenTelemetry variables, over the file's `telemetry:`.
    let telemetry = loaded.registry.telemetry.clone();
    loaded.registry.telemetry = telemetry
        .with_env(|name| std::env::var(name).ok())
        .map_err(|e| Failure::usage(anyhow!("{e}")))?;
    if let Some(endpoint) = &loaded.registry.telemetry.endpoint {
        let ratio = loaded.registry.telemetry.sample_ratio;
        tracing::info!(%endpoint, ratio, "telemetry: traces go to {endpoint}");
    }
    let gateway = &loaded.registry.gateway;
    let addr = args.listen.unwrap_or(gateway.listen);
    let metrics = args.metrics_listen.or(gateway.metrics_listen);
    let usage = |e: String| Failure::usage(anyhow!(e));
    let admin_key = std::env::var(ADMIN_KEY_ENV)
        .ok()
        .filter(|k| !k.trim().is_empty());
    let store = router_state::keys::open(&loaded.ledger, &loaded.registry)
        .await
        .map_err(|e| Failure::state(anyhow!("{e}")))?;
    let stored = match store.all().await {
        Ok(listing) => !listing.records.is_empty(),
        // Unreadable now (Redis away): its keys may work once it answers.
        Err(_) => true,
    };
    let runtime = stored || admin_key.is_some() || !gateway.admin_keys.is_empty();
    let auth = Auth::choose(args.no_auth, addr, gateway, runtime).map_err(usage)?;
    let mut access = Access::new(gateway, auth).with_store(store);
    if let Some(key) = &admin_key {
        access = access.with_admin_key(key.trim());
    }
    if let Err(e) = access.load_keys().await {
        let every = router_gateway::KEYS_POLL.as_millis();
        tracing::warn!(error = %e, "gateway: runtime keys not read at start; trying every {every} ms");
    }
    let router = ctx.router(loaded).await?;
    let listeners = Listeners::bind(addr, metrics).await.map_err(usage)?;
    // Before the first line: a script that signals as soon as it reads it stops (SIGTERM,
    // SIGINT) or reloads (SIGHUP) the gateway, where the default action would kill it.
    let signals = Signals::install()?;
    let hups = hangups()?;
    let bound = listeners.api_addr().unwrap_or(addr);
    writeln!(out, "llmroute gateway listening on http://{bound}").map_err(Failure::output)?;
    if let Some(at) = listeners.metrics_addr() {
        writeln!(out, "llmroute metrics on http://{at}/metrics").map_err(Failure::output)?;
    }
    out.flush().map_err(Failure::output)?;
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(workers, "gateway: serving on {workers} worker threads");
    let stops = futures_util::stream::unfold(signals, |mut signals| async move {
        Some((signals.next().await.name(), signals))
    });
    let reloading = Reloading {
        rebuild: rebuild(ctx.global().clone()),
        signals: hups,
    };
    router_gateway::run(router, access, listeners, Box::pin(stops), Some(reloading))
        .await
        .map_err(|e| Failure::usage(anyhow!("the gateway on {bound} failed: {e}")))
}

/// Builds the router of the configuration file as it is now, as `serve` built the first one
/// (the same `--config`, `--state` and environment); the error says why it cannot. A ledger in
/// this process's memory cannot be carried over: a new router would count from zero while the
/// old one's requests are still in flight, so such a gateway refuses to reload.
fn rebuild(global: crate::cli::Global) -> Rebuild {
    let global = std::sync::Arc::new(global);
    std::sync::Arc::new(move || {
        let global = global.clone();
        Box::pin(async move {
            let ctx = Context::new(&global);
            let loaded = ctx.load().map_err(|f| f.message())?;
            if loaded.ledger == LedgerChoice::Memory {
                return Err(MEMORY_RELOAD.to_owned());
            }
            ctx.router(loaded).await.map_err(|f| f.message())
        })
    })
}

/// Why a gateway whose ledger is in memory does not reload.
const MEMORY_RELOAD: &str = "the ledger is in this process's memory (`state: memory`): a new \
    configuration would count its limits from zero while the old one's requests are still \
    counted, and admit past them; restart the gateway to take the file's changes, or share \
    the ledger through Redis or the embedded store";

/// One item per SIGHUP.
fn hangups() -> Result<std::pin::Pin<Box<dyn futures_util::Stream<Item = ()> + Send>>, Failure> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())
        .map_err(|e| Failure::usage(anyhow!("cannot listen for SIGHUP: {e}")))?;
    let stream = futures_util::stream::poll_fn(move |cx| hup.poll_recv(cx));
    Ok(Box::pin(stream))
}
