//! `llmroute serve`: the OpenAI-compatible gateway (`router_gateway`) on a socket, until SIGINT
//! or SIGTERM; then it stops accepting, lets the requests and streams in flight finish, waits
//! for their settlements and exits 0.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::anyhow;
use clap::Args;
use router_gateway::Auth;

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
    let metrics_addr = args.metrics_listen.or(gateway.metrics_listen);
    let gateway_grace = gateway.grace;
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
    let router = ctx.router(loaded).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::usage(anyhow!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr().unwrap_or(addr);
    let metrics_listener = match metrics_addr {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| Failure::usage(anyhow!("cannot listen on {at} for metrics: {e}")))?,
        ),
        None => None,
    };
    writeln!(out, "llmroute gateway listening on http://{bound}").map_err(Failure::output)?;
    if let Some(m) = &metrics_listener {
        let at = m
            .local_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string());
        writeln!(out, "llmroute metrics on http://{at}/metrics").map_err(Failure::output)?;
    }
    out.flush().map_err(Failure::output)?;
    let mut signals = Signals::install()?;
    // One signal stops both servers.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let signal = signals.next().await;
        tracing::info!(
            signal = signal.name(),
            "stopping: finishing the requests in flight"
        );
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let apps = router_gateway::apps(router.clone(), auth);
    let (api, metrics) = match metrics_listener {
        Some(m) => {
            let serving = router_gateway::serve(m, apps.metrics, stopped(stop_rx.clone()));
            (apps.api, Some(tokio::spawn(serving)))
        }
        None => (apps.api.merge(apps.metrics), None),
    };
    let grace = gateway_grace;
    let mut serving = tokio::spawn(router_gateway::serve(
        listener,
        api,
        stopped(stop_rx.clone()),
    ));
    // After the signal, what is in flight has `gateway.grace_secs` to finish; then it is
    // dropped, and dropped requests settle their reservations.
    let deadline = async {
        stopped(stop_rx).await;
        tokio::time::sleep(grace).await;
    };
    let served = tokio::select! {
        joined = &mut serving => joined.unwrap_or_else(|e| Err(std::io::Error::other(e))),
        () = deadline => {
            tracing::warn!(grace_secs = grace.as_secs(), "grace period over: dropping what is still in flight");
            serving.abort();
            Ok(())
        }
    };
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    served.map_err(|e| Failure::usage(anyhow!("the gateway on {bound} failed: {e}")))?;
    router.drain().await;
    Ok(())
}
