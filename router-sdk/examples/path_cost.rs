//! The CPU a request costs through `Router::chat` against the same request sent with a bare
//! `reqwest` client, in one process on Tokio's current-thread runtime, against a local upstream
//! on its own thread that answers every request at once (an OpenAI answer with rate-limit
//! headers that never run low).
//!
//! ```sh
//! path_cost [--floor] [--redis URL [--lease auto]] [-n N] [--gap-ms MS]
//! valgrind --tool=callgrind path_cost -n 2000   # instructions per function, repeatable
//! ```
//!
//! Runs `N / 10` requests unmeasured, then `N` one after another, `--gap-ms` apart (default 0),
//! and prints this thread's CPU time per request (the upstream's threads excluded). Without
//! `--redis` the router's ledger is in memory. With back-to-back requests the figure is the
//! path's own cost, warm; with a gap of some milliseconds the caches go cold between requests,
//! as in the benchmark harness, where each worker sends a request every 200 ms or so.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use router_core::config::Registry;
use router_sdk::{ChatRequest, Message, Role, Router, StaticKeys};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a short answer of a few words"},"finish_reason":"stop"}],"usage":{"prompt_tokens":420,"completion_tokens":96,"total_tokens":516}}"#;

fn serve(mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(conn.try_clone().expect("a second handle"));
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             x-ratelimit-limit-requests: 100000\r\nx-ratelimit-remaining-requests: 99999\r\n\
             x-ratelimit-reset-requests: 1ms\r\nx-ratelimit-limit-tokens: 100000000\r\n\
             x-ratelimit-remaining-tokens: 99999000\r\nx-ratelimit-reset-tokens: 1ms\r\n\r\n",
            ANSWER.len()
        );
        if conn
            .write_all(format!("{head}{ANSWER}").as_bytes())
            .is_err()
        {
            return;
        }
    }
}

/// This thread's time on a CPU, ms (`/proc/thread-self/schedstat`, in ns).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns: f64 = stat
        .split(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    ns / 1e6
}

fn prompt(i: usize) -> String {
    let mut s = format!("[r{i:05}] ");
    while s.len() < 1600 {
        s.push_str("the quick brown fox jumps over the lazy dog. ");
    }
    s
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let floor = args.iter().any(|a| a == "--floor");
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let n: usize = value("-n").and_then(|v| v.parse().ok()).unwrap_or(2000);
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = listener.local_addr().expect("an address");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let base = format!("http://{addr}/v1");
        let state = value("--redis").map_or(String::new(), |u| format!("state: {u}\nledger: {{ timeout_ms: 2000 }}\n"));
        let lease = value("--lease").map_or(String::new(), |l| format!("        lease: {l}\n"));
        let yaml = format!(
            "{state}providers:\n  - name: p\n    api: openai\n    base_url: {base}\n    api_key_env: K\n    \
             models:\n      - name: m\n        aliases: [chat]\n        price: {{ input: 1, output: 2 }}\n        \
             limits: {{ rpm: 100000, tpm: 100000000 }}\n{lease}"
        );
        let registry = Registry::from_yaml_str(&yaml, "path_cost.yaml").expect("a configuration");
        let router = Router::builder(registry)
            .keys(Arc::new(StaticKeys::new().with("K", "sk-path")))
            .build()
            .await
            .expect("a router");
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client");
        let url = format!("{base}/chat/completions");
        let one = |i: usize| {
            let (router, http, url) = (&router, &http, &url);
            async move {
                let text = prompt(i);
                let id = format!("r{i:05}");
                if floor {
                    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 128});
                    let resp = http
                        .post(url)
                        .bearer_auth("sk-path")
                        .header("x-bench-id", &id)
                        .json(&body)
                        .send()
                        .await
                        .expect("an answer");
                    let v: serde_json::Value = resp.json().await.expect("json");
                    assert!(v.get("usage").is_some());
                } else {
                    let req = ChatRequest {
                        model: Some("chat".into()),
                        messages: vec![Message::text(Role::User, text)],
                        max_tokens: Some(128),
                        headers: vec![("x-bench-id".into(), id)],
                        deadline: Some(Duration::from_secs(30)),
                        ..ChatRequest::default()
                    };
                    router.chat(req).await.expect("an answer");
                }
            }
        };
        for i in 0..n / 10 {
            one(i).await;
        }
        let (cpu, wall) = (cpu_ms(), Instant::now());
        let gap = Duration::from_millis(value("--gap-ms").and_then(|v| v.parse().ok()).unwrap_or(0));
        for i in 0..n {
            one(i).await;
            if !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
        }
        let (cpu, wall) = (cpu_ms() - cpu, wall.elapsed());
        router.drain().await;
        println!(
            "{}: {n} requests, CPU {:.1} µs/request, wall {:.1} µs/request",
            if floor { "floor" } else { "router" },
            cpu * 1000.0 / n as f64,
            wall.as_secs_f64() * 1e6 / n as f64
        );
    });
}
