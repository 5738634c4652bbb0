//! Serving the gateway's services on a socket: HTTP/1.1, headers within a bound, until a
//! shutdown signal, then the requests in flight finish.

use std::time::Duration;

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
