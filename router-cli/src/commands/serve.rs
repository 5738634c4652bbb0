//! `llmroute serve`: the OpenAI-compatible gateway (`router_gateway`) on a socket, until SIGINT
//! or SIGTERM; then it stops as `router_gateway::run` says and exits 0.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::anyhow;
use clap::Args;
use router_gateway::{Auth, Listeners};

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
}

pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &ServeArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let loaded = ctx.load()?;
    let gateway = &loaded.registry.gateway;
    let addr = args.listen.unwrap_or(gateway.listen);
    let metrics = args.metrics_listen.or(gateway.metrics_listen);
    let usage = |e: String| Failure::usage(anyhow!(e));
    let auth = Auth::choose(args.no_auth, addr, gateway).map_err(usage)?;
    let router = ctx.router(loaded).await?;
    let listeners = Listeners::bind(addr, metrics).await.map_err(usage)?;
    // Before the first line: a script that signals as soon as it reads it stops the gateway
    // cleanly.
    let signals = Signals::install()?;
    let bound = listeners.api_addr().unwrap_or(addr);
    writeln!(out, "llmroute gateway listening on http://{bound}").map_err(Failure::output)?;
    if let Some(at) = listeners.metrics_addr() {
        writeln!(out, "llmroute metrics on http://{at}/metrics").map_err(Failure::output)?;
    }
    out.flush().map_err(Failure::output)?;
    let stops = futures_util::stream::unfold(signals, |mut signals| async move {
        Some((signals.next().await.name(), signals))
    });
    router_gateway::run(router, auth, listeners, Box::pin(stops))
        .await
        .map_err(|e| Failure::usage(anyhow!("the gateway on {bound} failed: {e}")))
}
