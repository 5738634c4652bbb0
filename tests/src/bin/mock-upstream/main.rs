//! A fast OpenAI-compatible upstream for measuring the gateway (`bench/board.sh`).
//!
//! `mock-upstream [--port N] [--delay-ms MS] [--event-gap-ms MS] [--threads N] [--exit-after SECS]`
//!
//! Answers `POST .../chat/completions` (any prefix, e.g. `/v1`) on 127.0.0.1, HTTP/1.1 with
//! keep-alive: after `--delay-ms` (default 0), a whole `chat.completion` with usage, or, when the
//! body has `"stream": true`, a stream of `chat.completion.chunk` events, the usage chunk and
//! `data: [DONE]`, `--event-gap-ms` apart (default 0). Any other request gets 404. Its first line
//! on standard output is `listening on http://127.0.0.1:PORT` (`--port 0`, the default: a free
//! port). It runs until killed, or for `--exit-after` seconds when given.
#![forbid(unsafe_code)]

mod answer;
mod sse;

use std::convert::Infallible;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// A fast OpenAI-compatible upstream: whole or streamed chat completions, at once or after a delay.
#[derive(Parser, Debug)]
#[command(name = "mock-upstream")]
struct Args {
    /// Port on 127.0.0.1 (0: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Wait before answering each request, in milliseconds.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Wait between a stream's events, in milliseconds.
    #[arg(long, default_value_t = 0)]
    event_gap_ms: u64,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Exit after this many seconds (a bound in case whoever started it dies).
    #[arg(long)]
    exit_after: Option<u64>,
}

/// What every request is answered with.
struct Answers {
    delay: Duration,
    gap: Duration,
    whole: Bytes,
    events: Arc<[Bytes]>,
}

type Answer = Response<Either<Full<Bytes>, sse::Events>>;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-upstream: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads.max(1));
    }
    let runtime = runtime.enable_all().build()?;
    let answers = Arc::new(Answers {
        delay: Duration::from_millis(args.delay_ms),
        gap: Duration::from_millis(args.event_gap_ms),
        whole: answer::whole(),
        events: answer::events().into(),
    });
    runtime.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", args.port)).await?;
        let port = listener.local_addr()?.port();
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://127.0.0.1:{port}")?;
        out.flush()?;
        drop(out);
        match args.exit_after {
            Some(secs) => {
                let serving = accept(listener, answers);
                let _ = tokio::time::timeout(Duration::from_secs(secs), serving).await;
                Ok(())
            }
            None => accept(listener, answers).await,
        }
    })
}

/// Serves every connection on its own task until accepting fails.
async fn accept(
    listener: TcpListener,
    answers: Arc<Answers>,
) -> Result<(), Box<dyn std::error::Error>> {
    loop {
        let (tcp, _) = listener.accept().await?;
        tokio::spawn(connection(tcp, answers.clone()));
    }
}

/// One keep-alive connection, request after request.
async fn connection(tcp: TcpStream, answers: Arc<Answers>) {
    let _ = tcp.set_nodelay(true);
    let service = service_fn(move |request| respond(request, answers.clone()));
    let _ = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(tcp), service)
        .await;
}

async fn respond(request: Request<Incoming>, answers: Arc<Answers>) -> Result<Answer, Infallible> {
    if request.method() != Method::POST || !request.uri().path().ends_with("/chat/completions") {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "POST /v1/chat/completions only\n",
        ));
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Ok(plain(StatusCode::BAD_REQUEST, &format!("{e}\n"))),
    };
    if !answers.delay.is_zero() {
        tokio::time::sleep(answers.delay).await;
    }
    Ok(if answer::wants_stream(&body) {
        let events = sse::Events::new(answers.events.clone(), answers.gap);
        typed(Either::Right(events), "text/event-stream")
    } else {
        typed(
            Either::Left(Full::new(answers.whole.clone())),
            "application/json",
        )
    })
}

fn typed(body: Either<Full<Bytes>, sse::Events>, content_type: &'static str) -> Answer {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn plain(status: StatusCode, text: &str) -> Answer {
    let mut response = typed(
        Either::Left(Full::new(Bytes::from(text.to_owned()))),
        "text/plain",
    );
    *response.status_mut() = status;
    response
}
