//! Serving the gateway's services on a socket: HTTP/1.1, headers within a bound, until a
//! shutdown signal, then the requests in flight finish.

use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

/// How long a client may take to send a request's headers: a connection that trickles them (or
/// sends none) is closed then, so that idle or slow clients cannot pile up connections.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` (HTTP/1.1, headers read within [`HEADER_READ_TIMEOUT`]) until
/// `shutdown` completes, then stops accepting, lets the requests and streams in flight finish,
/// and closes idle connections.
///
/// The loop is hyper-util's (an HTTP/1.1 builder with its header timer, `GracefulShutdown` for
/// the connections in flight) rather than `axum::serve`, which takes no header timeout and
/// sets no `TCP_NODELAY` on what it accepts: once it does both, it can take over.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
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
            () = &mut shutdown => break,
        };
        // Each SSE event is a small write of its own: without this, one would wait for the
        // client's acknowledgement of the one before (Nagle's algorithm).
        if let Err(e) = socket.set_nodelay(true) {
            tracing::debug!(error = %e, "gateway: cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(TokioIo::new(socket), service);
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "gateway: a connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
    Ok(())
}
