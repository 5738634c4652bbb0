//! A small HTTP/1.1 load generator for the gateway board (`bench/board.sh`).
//!
//! `loadgen --url URL (--requests N | --duration-secs S) [--connections C] [--warmup W]
//! [--stream] [--model M] [--header 'NAME: VALUE']... [--pid PID] [--samples] [--threads T]`
//!
//! Opens C keep-alive connections to URL and POSTs a short chat request (`"stream": true` with
//! `--stream`) on each, one after another: first W requests per connection that are not
//! measured, then, all connections together, N requests in all or as many as fit in S seconds.
//! Each request is timed from sending to its first body byte and to its body's end. It prints
//! one JSON object: successes, failures by kind, seconds, requests per second, and the
//! latencies' and first bytes' p50/p90/p99/max/mean in ms; with `--pid`, that process's CPU time
//! over the measured requests (from `/proc/PID/stat`) and its resident memory at the end; with
//! `--samples`, every measured request's latency and first byte in µs. It exits 1 when no
//! request succeeded.
#![forbid(unsafe_code)]

mod conn;
mod process;
mod stats;
mod target;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use conn::{Conn, Sample};
use target::Target;

/// Consecutive failures after which a connection gives up.
const GIVE_UP_AFTER: u32 = 100;

/// POSTs chat requests over keep-alive connections and prints their latencies as JSON.
#[derive(Parser, Debug)]
#[command(name = "loadgen")]
#[command(group(clap::ArgGroup::new("amount").required(true).args(["requests", "duration_secs"])))]
struct Args {
    /// The endpoint, e.g. http://127.0.0.1:8080/v1/chat/completions.
    #[arg(long)]
    url: String,
    /// Measured requests in all.
    #[arg(long)]
    requests: Option<u64>,
    /// Send measured requests for this many seconds.
    #[arg(long)]
    duration_secs: Option<f64>,
    /// Connections, each sending one request at a time.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Unmeasured requests per connection before the measured ones.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Ask for streamed answers.
    #[arg(long)]
    stream: bool,
    /// The request's model.
    #[arg(long, default_value = "chat")]
    model: String,
    /// An extra request header, `NAME: VALUE` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// A process whose CPU time over the measured requests, and memory after, are reported.
    #[arg(long)]
    pid: Option<u32>,
    /// Include every measured request's latency and first byte, in µs.
    #[arg(long)]
    samples: bool,
    /// Runtime threads (1: Tokio's current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// How much to send once measuring starts.
enum Amount {
    /// This many requests left, shared by all connections.
    Count(AtomicU64),
    /// For this long.
    For(Duration),
}

/// What one connection measured.
#[derive(Default)]
struct Recorded {
    samples: Vec<Sample>,
    failures: BTreeMap<String, u64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs the load and prints the report; whether any request succeeded.
fn run(args: &Args) -> Result<bool, String> {
    let target = Arc::new(Target::new(
        &args.url,
        &args.headers,
        &args.model,
        args.stream,
    )?);
    let amount = Arc::new(amount(args)?);
    if args.connections == 0 {
        return Err("--connections must be at least 1".to_owned());
    }
    let runtime = runtime(args.threads).map_err(|e| format!("runtime: {e}"))?;
    let report = runtime.block_on(measure(args, target, amount))?;
    let ok = report["requests"].as_u64().unwrap_or(0) > 0;
    println!("{report}");
    Ok(ok)
}

fn amount(args: &Args) -> Result<Amount, String> {
    match (args.requests, args.duration_secs) {
        (Some(n), _) => Ok(Amount::Count(AtomicU64::new(n))),
        (None, Some(s)) if s.is_finite() && s > 0.0 => Ok(Amount::For(Duration::from_secs_f64(s))),
        (None, Some(s)) => Err(format!("--duration-secs {s}: give a positive number")),
        (None, None) => Err("give --requests or --duration-secs".to_owned()),
    }
}

fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}

/// Warms up every connection, then measures them all together.
async fn measure(args: &Args, target: Arc<Target>, amount: Arc<Amount>) -> Result<Value, String> {
    let barrier = Arc::new(Barrier::new(args.connections + 1));
    let tasks: Vec<_> = (0..args.connections)
        .map(|_| {
            let (target, amount, barrier) = (target.clone(), amount.clone(), barrier.clone());
            tokio::spawn(connection(target, amount, barrier, args.warmup))
        })
        .collect();
    barrier.wait().await;
    let cpu_before = args.pid.map(process::cpu).transpose()?;
    let started = Instant::now();
    let mut all = Recorded::default();
    for task in tasks {
        let recorded = task
            .await
            .map_err(|e| format!("a connection's task: {e}"))?;
        all.samples.extend(recorded.samples);
        for (kind, n) in recorded.failures {
            *all.failures.entry(kind).or_default() += n;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let watched = match (args.pid, cpu_before) {
        (Some(pid), Some(before)) => watched(pid, before, all.samples.len())?,
        _ => Value::Null,
    };
    Ok(report(args, all, seconds, watched))
}

/// One connection: its warm-up, the barrier, then measured requests until the amount is sent.
async fn connection(
    target: Arc<Target>,
    amount: Arc<Amount>,
    barrier: Arc<Barrier>,
    warmup: u64,
) -> Recorded {
    let mut conn = Conn::new(&target);
    for _ in 0..warmup {
        let _ = conn.request().await;
    }
    barrier.wait().await;
    let deadline = match *amount {
        Amount::For(d) => Some(Instant::now() + d),
        Amount::Count(_) => None,
    };
    let mut recorded = Recorded::default();
    let mut failing = 0;
    while more(&amount, deadline) && failing < GIVE_UP_AFTER {
        match conn.request().await {
            Ok(sample) => {
                recorded.samples.push(sample);
                failing = 0;
            }
            Err(kind) => {
                *recorded.failures.entry(kind).or_default() += 1;
                failing += 1;
            }
        }
    }
    recorded
}

/// Whether to send another request (taking it from the count).
fn more(amount: &Amount, deadline: Option<Instant>) -> bool {
    match amount {
        Amount::Count(left) => left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok(),
        Amount::For(_) => deadline.is_some_and(|d| Instant::now() < d),
    }
}

/// The watched process's CPU since `before`, per request, and its memory now.
fn watched(pid: u32, before: Duration, requests: usize) -> Result<Value, String> {
    let cpu = process::cpu(pid)?.saturating_sub(before);
    let cpu_ms = cpu.as_secs_f64() * 1000.0;
    Ok(json!({
        "pid": pid,
        "cpu_ms": cpu_ms,
        "cpu_ms_per_request": if requests > 0 { cpu_ms / requests as f64 } else { 0.0 },
        "rss_kib": process::rss_kib(pid)?,
    }))
}

fn report(args: &Args, all: Recorded, seconds: f64, watched: Value) -> Value {
    let mut totals: Vec<Duration> = all.samples.iter().map(|s| s.total).collect();
    let mut firsts: Vec<Duration> = all.samples.iter().map(|s| s.first_byte).collect();
    let mut report = json!({
        "url": args.url,
        "stream": args.stream,
        "connections": args.connections,
        "warmup_per_connection": args.warmup,
        "requests": all.samples.len(),
        "failures": all.failures,
        "seconds": seconds,
        "rps": if seconds > 0.0 { all.samples.len() as f64 / seconds } else { 0.0 },
        "process": watched,
    });
    if args.samples {
        report["samples_us"] = stats::micros(&totals).into();
        report["first_byte_samples_us"] = stats::micros(&firsts).into();
    }
    report["latency_ms"] = stats::summary(&mut totals);
    report["first_byte_ms"] = stats::summary(&mut firsts);
    report
}
