//! The least a gateway can do, as a reference for the gateway board (`bench/board.sh`).
//!
//! `bare-proxy --route MODEL=URL... [--port N] [--threads N]`
//!
//! Takes each request on 127.0.0.1 (HTTP/1.1, keep-alive), reads its body, parses it as JSON to
//! find its `model`, and forwards it, headers and body as they came, to the URL routed for that
//! model (the first route for any other), over a keep-alive connection of the client
//! connection's own; the answer comes back as it arrives, frame by frame. No admission, no
//! accounting, no rewriting: what is left is one more hop and a JSON parse. Its first line on
//! standard output is `listening on http://127.0.0.1:PORT`.
#![forbid(unsafe_code)]

mod upstream;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use upstream::{Routes, Upstreams};

/// A minimal JSON-routing HTTP/1.1 proxy.
#[derive(Parser, Debug)]
#[command(name = "bare-proxy")]
struct Args {
    /// `MODEL=URL`: where requests for MODEL go (`http://host:port`; repeatable, the first is
    /// the default).
    #[arg(long = "route", required = true)]
    routes: Vec<String>,
    /// Port on 127.0.0.1 (0: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

type Answer = Response<Either<Incoming, Full<Bytes>>>;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bare-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let routes = Arc::new(Routes::parse(&args.routes)?);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads.max(1));
    }
    let runtime = runtime.enable_all().build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", args.port)).await?;
        let port = listener.local_addr()?.port();
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://127.0.0.1:{port}")?;
        out.flush()?;
        drop(out);
        loop {
            let (tcp, _) = listener.accept().await?;
            tokio::spawn(connection(tcp, routes.clone()));
        }
    })
}

/// One client connection, with upstream connections of its own.
async fn connection(tcp: TcpStream, routes: Arc<Routes>) {
    let _ = tcp.set_nodelay(true);
    let upstreams = Arc::new(Mutex::new(Upstreams::new(routes)));
    let service = service_fn(move |request| forward(request, upstreams.clone()));
    let _ = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tcp), service)
        .await;
}

async fn forward(
    request: Request<Incoming>,
    upstreams: Arc<Mutex<Upstreams>>,
) -> Result<Answer, std::convert::Infallible> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_REQUEST, format!("body: {e}\n"))),
    };
    let model = model_of(&body);
    let mut upstreams = upstreams.lock().await;
    match upstreams.send(model.as_deref(), parts, body).await {
        Ok(response) => Ok(response.map(Either::Left)),
        Err(e) => Ok(plain(StatusCode::BAD_GATEWAY, format!("{e}\n"))),
    }
}

/// The body's `model`, when it is a JSON object that has one.
fn model_of(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(value.get("model")?.as_str()?.to_owned())
}

fn plain(status: StatusCode, text: String) -> Answer {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(text))));
    *response.status_mut() = status;
    response
}
