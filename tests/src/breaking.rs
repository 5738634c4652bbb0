//! An upstream whose connection breaks mid-stream: [`breaking_upstream`] answers each request
//! with a 200 `text/event-stream` whose chunked body is the events given, then closes the
//! connection without the body's last chunk. wiremock always sends a body whole.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts the server on a free port; returns its base URL (`http://127.0.0.1:PORT`). It serves
/// until the test's runtime ends.
pub async fn breaking_upstream(events: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port for the breaking upstream");
    let base = format!(
        "http://{}",
        listener.local_addr().expect("the listener's address")
    );
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(answer_then_break(socket, events));
        }
    });
    base
}

/// Reads one request, sends the head and `events` as one chunk, and closes the connection.
async fn answer_then_break(mut socket: TcpStream, events: &'static str) {
    if read_request(&mut socket).await.is_err() {
        return;
    }
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{events}\r\n",
        events.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.flush().await;
}

/// Reads a request's head and its `content-length` bytes of body.
async fn read_request(socket: &mut TcpStream) -> std::io::Result<()> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        seen.extend_from_slice(&buf[..n]);
        if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&seen[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = seen.len() - head_end;
    while body < length {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        body += n;
    }
    Ok(())
}
