//! `llmroute serve`: the OpenAI-compatible gateway (`router_gateway`) on a socket, until SIGINT
//! or SIGTERM; then it stops accepting, lets the requests and streams in flight finish, waits
//! for their settlements and exits 0.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::anyhow;
use clap::Args;
use router_gateway::Auth;
use router_sdk::Router;

use crate::context::Context;
use crate::failure::Failure;
use crate::interrupt::Signals;

/// Options of `llmroute serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on, IP:PORT (default: `gateway.listen`, else 127.0.0.1:8080)
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
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
    let auth = if args.no_auth {
        if !addr.ip().is_loopback() {
            return Err(Failure::usage(anyhow!(
                "--no-auth lets anyone who can reach {addr} spend your providers' keys: it is \
                 refused on an address other than loopback; listen on 127.0.0.1 or add keys to \
                 `gateway.keys` (llmroute keys new --tenant NAME)"
            )));
        }
        Auth::None
    } else {
        if gateway.keys.is_empty() {
            return Err(Failure::usage(anyhow!(
                "`gateway.keys` is empty, so no caller could authenticate; make a key with \
                 `llmroute keys new --tenant NAME` and add its line, or pass --no-auth on a \
                 loopback address"
            )));
        }
        Auth::Keys
    };
    let ledger = ctx.open_ledger(&loaded).await?;
    let router = Router::builder(loaded.registry)
        .ledger(ledger)
        .build()
        .await
        .map_err(Failure::router)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::usage(anyhow!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr().unwrap_or(addr);
    writeln!(out, "llmroute gateway listening on http://{bound}").map_err(Failure::output)?;
    out.flush().map_err(Failure::output)?;
    let mut signals = Signals::install()?;
    let stop = async move {
        let signal = signals.next().await;
        tracing::info!(
            signal = signal.name(),
            "stopping: finishing the requests in flight"
        );
    };
    let app = router_gateway::app(router.clone(), auth);
    router_gateway::serve(listener, app, stop)
        .await
        .map_err(|e| Failure::usage(anyhow!("the gateway on {bound} failed: {e}")))?;
    router.drain().await;
    Ok(())
}
