//! A worker for the router benchmark harness (`drive_cmd.py`): K of these share one Redis.
//!
//! Reads the spec (`--spec FILE`), builds a router over the spec's providers with the shared
//! Redis as its ledger, prints `READY`, waits for `START <epoch seconds>` on stdin, sends each
//! request at its time (concurrently), and writes one JSON row per request to `--out FILE`.
//! Each request carries the stop sequence `x-bench-id:<id>`, which the mock upstream reads to
//! join client timings with its own service times.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use router_core::config::Registry;
use router_sdk::{ChatChunk, ChatRequest, Message, Receipt, Router, StaticKeys};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Spec {
    worker: usize,
    providers: BTreeMap<String, Provider>,
    redis_url: String,
    request_timeout_s: f64,
    requests: Vec<Job>,
}

#[derive(Deserialize)]
struct Provider {
    rpm: u64,
    tpm: u64,
    price_in: f64,
    price_out: f64,
    api_base: String,
}

#[derive(Deserialize)]
struct Job {
    bench_id: String,
    t_offset: f64,
    messages: Vec<Message>,
    max_tokens: u64,
    stream: bool,
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// `providers.yaml` for the spec: one OpenAI-compatible deployment per provider, all `chat`.
fn config(spec: &Spec) -> String {
    let mut yaml = format!("state: {}\nproviders:\n", spec.redis_url);
    for (name, p) in &spec.providers {
        let mut limits = Vec::new();
        if p.rpm > 0 {
            limits.push(format!("rpm: {}", p.rpm));
        }
        if p.tpm > 0 {
            limits.push(format!("tpm: {}", p.tpm));
        }
        yaml.push_str(&format!(
            "  - name: {name}\n    api: openai\n    base_url: {}\n    api_key_env: BENCH_KEY\n    \
             models:\n      - name: {name}\n        aliases: [chat]\n        \
             price: {{ input: {}, output: {} }}\n        limits: {{ {} }}\n",
            p.api_base,
            p.price_in,
            p.price_out,
            limits.join(", ")
        ));
    }
    yaml
}

/// This process's user + system CPU time in ms (Linux).
fn cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command name.
    fields
        .get(11)
        .zip(fields.get(12))
        .map_or(0, |(u, s)| (u + s) * 10)
}

async fn send(router: &Router, job: &Job, timeout: Duration) -> Result<Receipt, router_sdk::Error> {
    let req = ChatRequest {
        model: Some("chat".into()),
        messages: job.messages.clone(),
        max_tokens: Some(job.max_tokens),
        stop: vec![format!("x-bench-id:{}", job.bench_id)],
        deadline: Some(timeout),
        ..ChatRequest::default()
    };
    if !job.stream {
        return router.chat(req).await.map(|a| a.receipt);
    }
    let mut stream = router.chat_stream(req).await?;
    while let Some(item) = stream.next().await {
        if let ChatChunk::Done(receipt) = item? {
            return Ok(receipt);
        }
    }
    Err(router_sdk::Error::InvalidRequest(
        "the stream ended without an answer".into(),
    ))
}

fn row(
    spec: &Spec,
    job: &Job,
    lag_ms: f64,
    took: Duration,
    answer: Result<Receipt, router_sdk::Error>,
) -> Value {
    let mut row = json!({
        "bench_id": job.bench_id, "worker": spec.worker, "stream": job.stream,
        "latency_ms": took.as_secs_f64() * 1000.0, "sched_lag_ms": lag_ms,
    });
    match answer {
        Ok(r) => {
            row["ok"] = json!(true);
            row["provider"] = json!(r.provider);
            row["prompt_tokens"] = json!(r.usage.prompt_tokens);
            row["completion_tokens"] = json!(r.usage.completion_tokens);
            row["router_cost"] = json!(r.cost_usd);
        }
        Err(e) => {
            row["ok"] = json!(false);
            row["error_type"] = json!(
                format!("{e:?}")
                    .split([' ', '{', '('])
                    .next()
                    .unwrap_or("")
                    .to_owned()
            );
            row["error"] = json!(e.to_string());
        }
    }
    row
}

#[tokio::main]
async fn main() -> Result<(), Failure> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .ok_or_else(|| format!("usage: bench_worker --spec FILE --out FILE (missing {name})"))
    };
    let spec: Spec = serde_json::from_str(&std::fs::read_to_string(arg("--spec")?)?)?;
    let out_path = arg("--out")?;
    let registry = Registry::from_yaml_str(&config(&spec), "bench.yaml")?;
    let keys = StaticKeys::new().with("BENCH_KEY", "sk-bench");
    let router = Router::builder(registry)
        .keys(Arc::new(keys))
        .build()
        .await?;
    println!("READY");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let start: f64 = line
        .trim()
        .strip_prefix("START ")
        .ok_or("expected `START <epoch seconds>`")?
        .parse()?;
    let cpu_before = cpu_ms();
    let timeout = Duration::from_secs_f64(spec.request_timeout_s);
    let spec = Arc::new(spec);
    let mut tasks = Vec::new();
    for i in 0..spec.requests.len() {
        let (spec, router) = (spec.clone(), router.clone());
        tasks.push(tokio::spawn(async move {
            let job = &spec.requests[i];
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let due = start + job.t_offset - now.as_secs_f64();
            if due > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(due)).await;
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let lag_ms = (now.as_secs_f64() - start - job.t_offset) * 1000.0;
            let began = Instant::now();
            let answer = send(&router, job, timeout).await;
            row(&spec, job, lag_ms, began.elapsed(), answer)
        }));
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(out_path)?);
    for task in tasks {
        writeln!(out, "{}", task.await?)?;
    }
    router.drain().await;
    let meta = json!({"kind": "worker_meta", "worker": spec.worker, "cpu_ms_during_run": cpu_ms() - cpu_before});
    writeln!(out, "{meta}")?;
    out.flush()?;
    Ok(())
}
