//! A worker for the router benchmark harness (`drive_cmd.py`): K of these share one Redis.
//!
//! ```sh
//! bench_worker --spec FILE --out FILE                                  # through llmroute
//! bench_worker --spec FILE --out FILE --floor [--floor-provider NAME]  # no router: the floor
//! ```
//!
//! Reads the spec, builds a router over the spec's providers with the shared Redis as its
//! ledger, warms it up on the mock's unlimited `warmup` provider, prints `READY`, waits for `START <epoch seconds>` on stdin, sends each request at
//! its time (concurrently), and writes one JSON row per request to `--out`, then a
//! `worker_meta` row with the CPU time the process used during the run. Every upstream call
//! carries the header `x-bench-id: <id>`, which the mock upstream reads to join client timings
//! with its own service times.
//!
//! With `--floor` there is no router: a plain `reqwest` client posts each request straight to
//! one provider's `{api_base}/chat/completions` (default `premium`), with the same body and
//! header, consuming streams to the end. Its "router-added" latency is what the harness and a
//! bare HTTP client add on their own, so a router's overhead is its figure minus the floor's.
//!
//! Both run on Tokio's current-thread runtime; `LLMROUTE_BENCH_RUNTIME=multi` selects the
//! multi-thread one.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use router_core::config::Registry;
use router_sdk::{ChatChunk, ChatRequest, Message, Receipt, Role, Router, StaticKeys};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Spec {
    worker: usize,
    #[serde(default = "default_model_group")]
    model_group: String,
    providers: BTreeMap<String, Provider>,
    redis_url: String,
    request_timeout_s: f64,
    run_deadline_s: f64,
    #[serde(default)]
    warmup_api_base: Option<String>,
    requests: Vec<Job>,
}

fn default_model_group() -> String {
    "chat".into()
}

#[derive(Deserialize)]
struct Provider {
    rpm: u64,
    tpm: u64,
    price_in: f64,
    price_out: f64,
    api_base: String,
}

/// A message of the workload, as the harness writes it (text content).
#[derive(Deserialize, serde::Serialize, Clone)]
struct Text {
    role: Role,
    content: String,
}

#[derive(Deserialize)]
struct Job {
    bench_id: String,
    t_offset: f64,
    messages: Vec<Text>,
    max_tokens: u64,
    stream: bool,
}

/// The worker's allocator, for the floor and the router alike: a request allocates and frees
/// buffers of every size (prompts to 8,000 characters, JSON, headers), which glibc's allocator
/// answers with consolidations that `perf record` put at a tenth of the router's extra CPU.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// What a request came back with, whichever way it was sent.
struct Answer {
    provider: String,
    response_id: Option<String>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    cost_usd: Option<f64>,
}

/// Why a request failed: the row's `error_type` and `error`.
struct Refusal {
    kind: String,
    message: String,
}

impl Refusal {
    fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

/// How requests leave this process.
enum Sender {
    /// Through llmroute, over the spec's providers, asking for the model group.
    Router { router: Router, model: String },
    /// Straight to one provider, no router.
    Floor {
        http: reqwest::Client,
        url: String,
        provider: String,
        price_in: f64,
        price_out: f64,
        model: String,
    },
}

/// The model name of the warm-up deployment (the mock's unlimited `warmup` provider).
const WARMUP: &str = "warmup";

/// One OpenAI-compatible provider with one model, in `providers.yaml` form.
fn deployment(
    name: &str,
    base_url: &str,
    aliases: &str,
    price: (f64, f64),
    limits: &str,
) -> String {
    format!(
        "  - name: {name}\n    api: openai\n    base_url: {base_url}\n    api_key_env: BENCH_KEY\n    \
         models:\n      - name: {name}\n        aliases: [{aliases}]\n        \
         price: {{ input: {}, output: {} }}\n        limits: {{ {limits} }}\n",
        price.0, price.1
    )
}

/// `providers.yaml` for the spec: one deployment per provider, all aliased to the model group,
/// plus the unlimited `warmup` deployment (model `warmup`, no alias) when the mock has one.
fn config(spec: &Spec, lease: Option<&str>) -> String {
    let mut yaml = format!("state: {}\nproviders:\n", spec.redis_url);
    for (name, p) in &spec.providers {
        let mut limits = Vec::new();
        if p.rpm > 0 {
            limits.push(format!("rpm: {}", p.rpm));
        }
        if p.tpm > 0 {
            limits.push(format!("tpm: {}", p.tpm));
        }
        yaml.push_str(&deployment(
            name,
            &p.api_base,
            &spec.model_group,
            (p.price_in, p.price_out),
            &limits.join(", "),
        ));
        if let Some(lease) = lease {
            yaml.push_str(&format!("        lease: {lease}\n"));
        }
    }
    if let Some(base) = &spec.warmup_api_base
        && !spec.providers.contains_key(WARMUP)
    {
        // Prices must be positive; the warm-up's cost is not scored.
        yaml.push_str(&deployment(WARMUP, base, "", (0.001, 0.001), ""));
    }
    yaml
}

/// This process's user + system CPU time in ms, to the nanosecond (`CLOCK_PROCESS_CPUTIME_ID`,
/// exited threads included). `/proc/self/stat` counts in 10 ms ticks: at 150 requests a worker,
/// that alone moved the per-request figure by up to 0.07 ms.
fn cpu_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

fn epoch_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

async fn via_router(
    router: &Router,
    model: &str,
    job: &Job,
    timeout: Duration,
) -> Result<Answer, Refusal> {
    let req = ChatRequest {
        model: Some(model.to_owned()),
        messages: job
            .messages
            .iter()
            .map(|m| Message::text(m.role, m.content.clone()))
            .collect(),
        max_tokens: Some(job.max_tokens),
        headers: vec![("x-bench-id".into(), job.bench_id.clone())],
        deadline: Some(timeout),
        ..ChatRequest::default()
    };
    let receipt = if job.stream {
        router_stream(router, req).await
    } else {
        router.chat(req).await.map(|a| a.receipt)
    };
    match receipt {
        Ok(r) => Ok(Answer {
            provider: r.provider,
            response_id: None,
            prompt_tokens: Some(r.usage.prompt_tokens),
            completion_tokens: Some(r.usage.completion_tokens),
            cost_usd: Some(r.cost_usd),
        }),
        Err(e) => {
            let debug = format!("{e:?}");
            let kind = debug.split([' ', '{', '(']).next().unwrap_or("Error");
            Err(Refusal::new(kind, e.to_string()))
        }
    }
}

async fn router_stream(router: &Router, req: ChatRequest) -> Result<Receipt, router_sdk::Error> {
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

/// The usage object of an OpenAI answer or chunk, if it has one.
fn usage_of(v: &Value) -> Option<(u64, u64)> {
    let u = v.get("usage")?;
    Some((
        u.get("prompt_tokens")?.as_u64()?,
        u.get("completion_tokens")?.as_u64()?,
    ))
}

fn transport(e: &reqwest::Error) -> Refusal {
    let kind = if e.is_timeout() {
        "ClientTimeout"
    } else if e.is_connect() {
        "Connect"
    } else {
        "Transport"
    };
    Refusal::new(kind, e.to_string())
}

async fn direct(
    http: &reqwest::Client,
    url: &str,
    provider: &str,
    (price_in, price_out): (f64, f64),
    model: &str,
    job: &Job,
) -> Result<Answer, Refusal> {
    let mut body = json!({"model": model, "messages": job.messages, "max_tokens": job.max_tokens});
    if job.stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    let resp = http
        .post(url)
        .bearer_auth("sk-bench")
        .header("x-bench-id", &job.bench_id)
        .json(&body)
        .send()
        .await
        .map_err(|e| transport(&e))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        let text: String = text.chars().take(500).collect();
        return Err(Refusal::new(format!("HTTP{}", status.as_u16()), text));
    }
    let (mut id, mut usage) = (None, None);
    if job.stream {
        let mut events = resp.bytes_stream().eventsource();
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| Refusal::new("Stream", e.to_string()))?;
            if event.data.trim() == "[DONE]" {
                break;
            }
            let chunk: Value = serde_json::from_str(&event.data)
                .map_err(|e| Refusal::new("BadChunk", e.to_string()))?;
            if let Some(s) = chunk.get("id").and_then(Value::as_str) {
                id = Some(s.to_owned());
            }
            usage = usage_of(&chunk).or(usage);
        }
    } else {
        let answer: Value = resp.json().await.map_err(|e| transport(&e))?;
        id = answer.get("id").and_then(Value::as_str).map(str::to_owned);
        usage = usage_of(&answer);
    }
    Ok(Answer {
        provider: provider.to_owned(),
        response_id: id,
        prompt_tokens: usage.map(|u| u.0),
        completion_tokens: usage.map(|u| u.1),
        cost_usd: usage.map(|(p, c)| (p as f64 * price_in + c as f64 * price_out) / 1e6),
    })
}

/// Send one job; the whole request, stream included, is bounded by `timeout`.
async fn send(sender: &Sender, job: &Job, timeout: Duration) -> Result<Answer, Refusal> {
    let attempt = async {
        match sender {
            // Through the router the request's own `deadline` is the primary bound.
            Sender::Router { router, model } => via_router(router, model, job, timeout).await,
            Sender::Floor {
                http,
                url,
                provider,
                price_in,
                price_out,
                model,
            } => direct(http, url, provider, (*price_in, *price_out), model, job).await,
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(Refusal::new(
                "ClientTimeout",
                format!("no answer within {}s (timeout)", timeout.as_secs_f64()),
            ))
        })
}

/// Two small requests to the mock's unlimited `warmup` provider before `READY`, one JSON and
/// one stream, so that one-time costs (connections, loading the Redis scripts)
/// are paid before the run, not by its first requests.
async fn warm_up(sender: &Sender, spec: &Spec) -> Result<(), String> {
    let Some(base) = &spec.warmup_api_base else {
        return Ok(());
    };
    let limit = Duration::from_secs(10);
    for stream in [false, true] {
        let job = Job {
            bench_id: format!("warmup-w{}", spec.worker),
            t_offset: 0.0,
            messages: vec![Text {
                role: Role::User,
                content: "warm up".into(),
            }],
            max_tokens: 4,
            stream,
        };
        let call = async {
            match sender {
                Sender::Router { router, .. } => via_router(router, WARMUP, &job, limit).await,
                Sender::Floor { http, model, .. } => {
                    let url = format!("{}/chat/completions", base.trim_end_matches('/'));
                    direct(http, &url, WARMUP, (0.0, 0.0), model, &job).await
                }
            }
        };
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(_)) => {}
            Ok(Err(r)) => return Err(format!("{}: {}", r.kind, r.message)),
            Err(_) => return Err(format!("no answer within {}s", limit.as_secs())),
        }
    }
    Ok(())
}

fn row(
    worker: usize,
    job: &Job,
    lag_ms: f64,
    took: Duration,
    answer: Result<Answer, Refusal>,
) -> Value {
    let mut row = json!({
        "bench_id": job.bench_id, "worker": worker, "stream": job.stream,
        "latency_ms": took.as_secs_f64() * 1000.0, "sched_lag_ms": lag_ms,
    });
    match answer {
        Ok(a) => {
            row["ok"] = json!(true);
            row["provider"] = json!(a.provider);
            if let Some(id) = a.response_id {
                row["response_id"] = json!(id);
            }
            if let Some(t) = a.prompt_tokens {
                row["prompt_tokens"] = json!(t);
            }
            if let Some(t) = a.completion_tokens {
                row["completion_tokens"] = json!(t);
            }
            if let Some(c) = a.cost_usd {
                row["router_cost"] = json!(c);
            }
        }
        Err(r) => {
            row["ok"] = json!(false);
            row["error_type"] = json!(r.kind);
            row["error"] = json!(r.message);
        }
    }
    row
}

struct Args {
    spec: String,
    out: String,
    floor: Option<String>,
    /// The router's `ledger:` settings, as inline YAML (e.g. `{ timeout_ms: 15 }`).
    ledger: Option<String>,
    /// Every scored deployment's `lease:` (e.g. `auto`).
    lease: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    const USAGE: &str = "usage: bench_worker --spec FILE --out FILE [--ledger YAML] [--lease YAML] \
        [--floor [--floor-provider NAME]]";
    let (mut spec, mut out, mut floor, mut floor_provider) = (None, None, false, None);
    let (mut ledger, mut lease) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--spec" => spec = args.next(),
            "--out" => out = args.next(),
            "--floor" => floor = true,
            "--ledger" => ledger = Some(args.next().ok_or(format!("{USAGE} (--ledger YAML)"))?),
            "--lease" => lease = Some(args.next().ok_or(format!("{USAGE} (--lease YAML)"))?),
            "--floor-provider" => {
                floor_provider = Some(
                    args.next()
                        .ok_or(format!("{USAGE} (--floor-provider NAME)"))?,
                );
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("{USAGE} (unknown argument `{other}`)")),
        }
    }
    if floor_provider.is_some() && !floor {
        return Err(format!("{USAGE} (--floor-provider needs --floor)"));
    }
    Ok(Args {
        spec: spec.ok_or(format!("{USAGE} (missing --spec)"))?,
        out: out.ok_or(format!("{USAGE} (missing --out)"))?,
        floor: floor.then(|| floor_provider.unwrap_or_else(|| "premium".into())),
        ledger,
        lease,
    })
}

async fn sender(spec: &Spec, args: &Args) -> Result<Sender, Failure> {
    let Some(name) = args.floor.as_deref() else {
        let mut yaml = config(spec, args.lease.as_deref());
        if let Some(ledger) = &args.ledger {
            yaml.push_str(&format!("ledger: {ledger}\n"));
        }
        let registry = Registry::from_yaml_str(&yaml, "bench.yaml")?;
        let keys = StaticKeys::new().with("BENCH_KEY", "sk-bench");
        let router = Router::builder(registry)
            .keys(Arc::new(keys))
            .build()
            .await?;
        let model = spec.model_group.clone();
        return Ok(Sender::Router { router, model });
    };
    let p = spec.providers.get(name).ok_or_else(|| {
        let known: Vec<&str> = spec.providers.keys().map(String::as_str).collect();
        format!(
            "--floor-provider {name}: the spec has no such provider (it has {})",
            known.join(", ")
        )
    })?;
    // The same client settings as the router's own default client.
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    Ok(Sender::Floor {
        http,
        url: format!("{}/chat/completions", p.api_base.trim_end_matches('/')),
        provider: name.to_owned(),
        price_in: p.price_in,
        price_out: p.price_out,
        model: spec.model_group.clone(),
    })
}

fn main() -> Result<(), Failure> {
    // One thread runs every task, the router's background tasks and its Redis connection's
    // included. K workers share the machine's cores with Redis, the mock and the driver; on the
    // multi-thread runtime (`LLMROUTE_BENCH_RUNTIME=multi`, one thread per core) every run, the
    // floor's included, had a few requests stall 5–6 ms, and those made its p99 (bench/README.md,
    // "The worker's runtime"). Floor and router runs take the same setting.
    let runtime = match std::env::var("LLMROUTE_BENCH_RUNTIME").as_deref() {
        Ok("current") | Err(std::env::VarError::NotPresent) => {
            tokio::runtime::Builder::new_current_thread()
        }
        Ok("multi") => tokio::runtime::Builder::new_multi_thread(),
        Ok(other) => {
            return Err(format!(
                "LLMROUTE_BENCH_RUNTIME={other}: expected `current` (the default) or `multi`"
            )
            .into());
        }
        Err(e) => return Err(format!("LLMROUTE_BENCH_RUNTIME: {e}").into()),
    }
    .enable_all()
    .build()?;
    runtime.block_on(run())
}

async fn run() -> Result<(), Failure> {
    let args = parse_args()?;
    let spec: Spec = serde_json::from_str(&std::fs::read_to_string(&args.spec)?)?;
    let sender = Arc::new(sender(&spec, &args).await?);
    if let Err(e) = warm_up(&sender, &spec).await {
        eprintln!("bench_worker: the warm-up failed, going on without it: {e}");
    }
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
    let stop_in = (start + spec.run_deadline_s - epoch_now()).max(0.0);
    let stop_at = tokio::time::Instant::now() + Duration::from_secs_f64(stop_in);
    let spec = Arc::new(spec);
    let mut tasks = Vec::new();
    for i in 0..spec.requests.len() {
        let (spec, sender) = (spec.clone(), sender.clone());
        tasks.push(tokio::spawn(async move {
            let job = &spec.requests[i];
            let due = start + job.t_offset - epoch_now();
            if due > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(due)).await;
            }
            let lag_ms = (epoch_now() - start - job.t_offset) * 1000.0;
            let began = Instant::now();
            let answer = send(&sender, job, timeout).await;
            row(spec.worker, job, lag_ms, began.elapsed(), answer)
        }));
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(&args.out)?);
    for (job, mut task) in spec.requests.iter().zip(tasks) {
        let row = match tokio::time::timeout_at(stop_at, &mut task).await {
            Ok(Ok(row)) => row,
            Ok(Err(e)) => row(
                spec.worker,
                job,
                0.0,
                Duration::ZERO,
                Err(Refusal::new("WorkerPanic", e.to_string())),
            ),
            Err(_) => {
                task.abort();
                row(
                    spec.worker,
                    job,
                    0.0,
                    Duration::ZERO,
                    Err(Refusal::new(
                        "harness_timeout",
                        "not finished by the run deadline",
                    )),
                )
            }
        };
        writeln!(out, "{row}")?;
    }
    if let Sender::Router { router, .. } = sender.as_ref() {
        router.drain().await;
    }
    let meta = json!({
        "kind": "worker_meta", "worker": spec.worker,
        "mode": if args.floor.is_some() { "floor" } else { "router" },
        "cpu_ms_during_run": ((cpu_ms() - cpu_before).max(0.0) * 1000.0).round() / 1000.0,
    });
    writeln!(out, "{meta}")?;
    out.flush()?;
    Ok(())
}
