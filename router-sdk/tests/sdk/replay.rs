//! A local upstream that answers every request with one recorded body, whole or in small
//! pieces (wiremock sends bodies whole): HTTP/1.1 over a `TcpStream`, one request a connection.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The size of each piece of a body served in pieces.
pub const PIECE: usize = 5;

/// How an answer's body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// In one write, with its length.
    Whole,
    /// In HTTP/1.1 chunks of [`PIECE`] bytes, each written and flushed on its own.
    Pieces,
}

impl Delivery {
    pub fn name(self) -> &'static str {
        match self {
            Delivery::Whole => "whole",
            Delivery::Pieces => "5-byte pieces",
        }
    }
}

/// A local upstream answering every request with one recorded body (wiremock sends bodies
/// whole). Dropped, it stops accepting.
pub struct Replay {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Replay {
    pub async fn start(body: Vec<u8>, kind: &'static str, delivery: Delivery) -> Replay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body = Arc::new(body);
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let _ = respond(socket, &body, kind, delivery).await;
                });
            }
        });
        Replay { addr, task }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request, answers 200 with `body`, and closes the connection.
async fn respond(
    mut socket: TcpStream,
    body: &[u8],
    kind: &str,
    delivery: Delivery,
) -> std::io::Result<()> {
    read_request(&mut socket).await?;
    socket.set_nodelay(true)?;
    let head = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: ";
    match delivery {
        Delivery::Whole => {
            let head = format!("{head}{kind}\r\ncontent-length: {}\r\n\r\n", body.len());
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body).await?;
        }
        Delivery::Pieces => {
            let head = format!("{head}{kind}\r\ntransfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            for piece in body.chunks(PIECE) {
                let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                chunk.extend_from_slice(piece);
                chunk.extend_from_slice(b"\r\n");
                socket.write_all(&chunk).await?;
                socket.flush().await?;
                tokio::task::yield_now().await;
            }
            socket.write_all(b"0\r\n\r\n").await?;
        }
    }
    socket.flush().await?;
    socket.shutdown().await
}

/// Reads a request's head and its `content-length` bytes of body.
async fn read_request(socket: &mut TcpStream) -> std::io::Result<()> {
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    let mut wanted = None;
    loop {
        if wanted.is_none()
            && let Some(at) = read.windows(4).position(|w| w == b"\r\n\r\n")
        {
            let head = String::from_utf8_lossy(&read[..at]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            wanted = Some(at + 4 + length.unwrap_or(0));
        }
        if wanted.is_some_and(|w| read.len() >= w) {
            return Ok(());
        }
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        read.extend_from_slice(&buf[..n]);
    }
}
