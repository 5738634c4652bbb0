//! `llmroute serve`: the OpenAI-compatible gateway (`router_gateway`) on a socket, until SIGINT
//! or SIGTERM; then it stops accepting, lets the requests and streams in flight finish (for
//! `gateway.grace_secs` at most, or until another signal), cuts off what is left, waits for
//! the settlements (until another signal) and exits 0.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::anyhow;
use clap::Args;
use router_gateway::Auth;

use crate::context::Context;
use crate::failure::Failure;
use crate::interrupt::Signals;

/// How long a stopping gateway waits, after cutting off what was in flight at the end of its
/// grace period, for its connections to close before it drops them.
const CUT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

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
    // Before the first line: a script that signals as soon as it reads it stops the gateway
    // cleanly.
    let mut signals = Signals::install()?;
    writeln!(out, "llmroute gateway listening on http://{bound}").map_err(Failure::output)?;
    if let Some(m) = &metrics_listener {
        let at = m
            .local_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string());
        writeln!(out, "llmroute metrics on http://{at}/metrics").map_err(Failure::output)?;
    }
    out.flush().map_err(Failure::output)?;
    // The signals so far. The first stops both servers; another during the grace period cuts
    // off what is in flight at once; another while settlements are awaited ends the wait.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(0_u32);
    tokio::spawn(async move {
        loop {
            let signal = signals.next().await;
            let mut seen = 0;
            stop_tx.send_modify(|n| {
                *n += 1;
                seen = *n;
            });
            if seen == 1 {
                tracing::info!(
                    signal = signal.name(),
                    "stopping: finishing the requests in flight (another signal cuts them off)"
                );
            } else {
                tracing::warn!(signal = signal.name(), "another signal: stopping at once");
            }
        }
    });
    // Resolves at the `n`-th signal (at once if it came).
    let signalled = |mut rx: tokio::sync::watch::Receiver<u32>, n: u32| async move {
        let _ = rx.wait_for(|seen| *seen >= n).await;
    };
    let stopped = move |rx| signalled(rx, 1);
    let apps = router_gateway::apps(router.clone(), auth);
    let cut = apps.cut.clone();
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
    // After the signal, what is in flight has `gateway.grace_secs` to finish; then it is cut
    // off (refused with 503, or its stream ended with that error), which drops its provider
    // call and settles its reservation as a dropped request's, while the process still runs.
    // A connection that still holds on after that (a body still being sent, or a stream its
    // client no longer reads, whose call the cut has dropped already: nothing reserved either
    // way) is dropped a moment later.
    let deadline = async {
        stopped(stop_rx.clone()).await;
        tokio::select! {
            () = tokio::time::sleep(grace) => {}
            () = signalled(stop_rx.clone(), 2) => {}
        }
    };
    let joined = |j: Result<std::io::Result<()>, tokio::task::JoinError>| {
        j.unwrap_or_else(|e| Err(std::io::Error::other(e)))
    };
    let served = tokio::select! {
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
    };
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    served.map_err(|e| Failure::usage(anyhow!("the gateway on {bound} failed: {e}")))?;
    // Settlements retry while the ledger refuses them (say, Redis is away); another signal
    // stops waiting for them (their slots expire with their TTL).
    let further = signalled(stop_rx.clone(), *stop_rx.borrow() + 1);
    tokio::select! {
        () = router.drain() => {}
        () = further => {
            tracing::warn!("exiting without waiting for pending settlements: their slots expire after the slot TTL");
        }
    }
    Ok(())
}
