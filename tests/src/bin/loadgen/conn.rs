//! One keep-alive connection sending requests one after another, each timed to its first body
//! byte and to its end. A connection that breaks is opened again for the next request.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::target::Target;

/// The longest one request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one successful request took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// From sending to the last byte of the body.
    pub(crate) total: Duration,
    /// From sending to the first byte of the body.
    pub(crate) first_byte: Duration,
}

/// A connection to the target, opened when first needed and again after it breaks.
pub(crate) struct Conn<'a> {
    target: &'a Target,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl<'a> Conn<'a> {
    pub(crate) fn new(target: &'a Target) -> Conn<'a> {
        Conn {
            target,
            sender: None,
        }
    }

    /// Sends one request and reads its whole body. An error names what failed (`status 503`,
    /// `connect: ...`, `timeout`); the connection is dropped after any but a status.
    pub(crate) async fn request(&mut self) -> Result<Sample, String> {
        let request = self.build()?;
        let sender = self.ready().await?;
        let sent = Instant::now();
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, exchange(sender, request, sent)).await;
        match outcome {
            Ok(Ok(sample)) => Ok(sample),
            Ok(Err(Failure::Status(status))) => Err(format!("status {status}")),
            Ok(Err(Failure::Io(e))) => {
                self.sender = None;
                Err(e)
            }
            Err(_) => {
                self.sender = None;
                Err("timeout".to_owned())
            }
        }
    }

    /// The sender, connected and ready for a request.
    async fn ready(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, String> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.sender = Some(connect(self.target).await?);
        }
        let Some(sender) = self.sender.as_mut() else {
            return Err("no connection".to_owned());
        };
        if let Err(e) = sender.ready().await {
            self.sender = None;
            return Err(format!("connection: {e}"));
        }
        self.sender
            .as_mut()
            .ok_or_else(|| "no connection".to_owned())
    }

    fn build(&self) -> Result<Request<Full<Bytes>>, String> {
        let t = self.target;
        let mut builder = Request::post(t.path.as_str())
            .header(HOST, t.authority.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in &t.headers {
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(t.body.clone()))
            .map_err(|e| format!("request: {e}"))
    }
}

enum Failure {
    Status(u16),
    Io(String),
}

/// Sends `request` and reads the answer to its end.
async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
    sent: Instant,
) -> Result<Sample, Failure> {
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Failure::Io(format!("send: {e}")))?;
    let status = response.status();
    let mut body = response.into_body();
    let mut first_byte = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Failure::Io(format!("body: {e}")))?;
        if first_byte.is_none() && frame.data_ref().is_some_and(|d| !d.is_empty()) {
            first_byte = Some(sent.elapsed());
        }
    }
    let total = sent.elapsed();
    if !status.is_success() {
        return Err(Failure::Status(status.as_u16()));
    }
    Ok(Sample {
        total,
        first_byte: first_byte.unwrap_or(total),
    })
}

/// A new HTTP/1.1 connection to `target` (no Nagle), its driver on a task of its own.
async fn connect(target: &Target) -> Result<SendRequest<Full<Bytes>>, String> {
    let where_ = format!("{}:{}", target.host, target.port);
    let tcp = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("connect to {where_}: {e}"))?;
    tcp.set_nodelay(true)
        .map_err(|e| format!("connect to {where_}: {e}"))?;
    let (sender, connection) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake with {where_}: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}
