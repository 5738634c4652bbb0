//! Chaos with separate processes: two `llmroute serve` gateways share one Redis, which the test
//! kills and restarts empty while they serve traffic through an upstream that enforces its RPM
//! exactly. No request fails for a ledger reason, the upstream never refuses, and afterwards
//! nothing is left in flight.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use llmroute_tests::enforcer::Enforcer;
use llmroute_tests::redis_server;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

use crate::support::*;

const RPM: usize = 60;

/// A gateway process and its address; killed on drop.
struct Gateway {
    child: Child,
    base: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gateway(s: &Scene) -> Gateway {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("llmroute"));
    for var in ["LLMROUTE_CONFIG", "REDIS_URL"] {
        cmd.env_remove(var);
    }
    cmd.arg("--config")
        .arg(&s.config)
        .env("OA_KEY", "sk-planted-oa-S3CRET")
        .args(["serve", "--no-auth", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let base = listening_on(&mut child);
    Gateway { child, base }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateway_processes_ride_out_a_redis_restart() {
    let mut redis = redis_server();
    let upstream = MockServer::start().await;
    let enforcer = Enforcer::new(RPM, fixture("openai/ok.json"));
    Mock::given(method("POST"))
        .respond_with(enforcer.responder())
        .mount(&upstream)
        .await;
    let extra = format!(
        "state: {}\nledger: {{ timeout_ms: 15, heartbeat_ms: 100 }}\n",
        redis.url
    );
    let s = scene_with(
        &[(
            "oa",
            "openai",
            format!("{}/v1", upstream.uri()),
            "gpt-test",
            2.0,
            8.0,
            "rpm: 60",
        )],
        &extra,
    );
    let gateways = [gateway(&s), gateway(&s)];
    let http = reqwest::Client::new();
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "Hello"}]});
    let (ok, full, failed) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let start = Instant::now();
    let mut sends = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    let (mut killed, mut restarted) = (false, false);
    let mut i = 0;
    while start.elapsed() < Duration::from_secs(4) {
        tick.tick().await;
        if !killed && start.elapsed() >= Duration::from_millis(1_000) {
            redis.kill();
            killed = true;
        }
        if !restarted && start.elapsed() >= Duration::from_millis(2_500) {
            redis.restart();
            restarted = true;
        }
        let url = format!("{}/v1/chat/completions", gateways[i % 2].base);
        i += 1;
        let (http, body) = (http.clone(), body.clone());
        let (ok, full, failed) = (ok.clone(), full.clone(), failed.clone());
        sends.push(tokio::spawn(async move {
            // A request the limit refuses gives up at once (the window frees in a minute);
            // the deadline only bounds the wait through the outage and a slow machine's call.
            let sent = http
                .post(url)
                .header("x-llmroute-timeout", "5")
                .json(&body)
                .timeout(Duration::from_secs(15))
                .send()
                .await;
            let counter = match sent {
                Ok(r) if r.status() == 200 => &ok,
                Ok(r) if r.status() == 429 => &full,
                Ok(r) => {
                    let status = r.status();
                    eprintln!("failed: {status} {}", r.text().await.unwrap_or_default());
                    &failed
                }
                Err(e) => {
                    eprintln!("failed: {e}");
                    &failed
                }
            };
            counter.fetch_add(1, Ordering::SeqCst);
        }));
    }
    for t in sends {
        t.await.unwrap();
    }
    let outcome = (
        ok.load(Ordering::SeqCst),
        full.load(Ordering::SeqCst),
        failed.load(Ordering::SeqCst),
    );
    assert_eq!(
        outcome.2, 0,
        "ok, refused for capacity, failed: {outcome:?}"
    );
    assert_eq!(enforcer.refused(), 0, "{outcome:?}");
    let served = enforcer.served();
    assert!(
        (RPM - 6..=RPM).contains(&served),
        "{served} served: {outcome:?}"
    );
    assert!(outcome.1 > 0, "the limit was reached: {outcome:?}");
    // Stopped gracefully, each gateway lands its settlements first; then `llmroute quota` (a
    // third process) finds nothing in flight in the restarted Redis.
    for mut g in gateways {
        let term = Command::new("kill")
            .args(["-TERM", &g.child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let status = tokio::task::spawn_blocking(move || g.child.wait().unwrap())
            .await
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }
    // The 15 ms timeout was the gateways' (to go local fast); the reader has no such hurry.
    let config = std::fs::read_to_string(&s.config).unwrap();
    assert!(config.contains("timeout_ms: 15"), "{config}");
    std::fs::write(
        &s.config,
        config.replace("timeout_ms: 15", "timeout_ms: 5000"),
    )
    .unwrap();
    let quota = s.llmroute(&[]).args(["quota", "--json"]).output().unwrap();
    let quota: serde_json::Value = serde_json::from_slice(&quota.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&quota.stderr)));
    let row = &quota["deployments"][0];
    assert_eq!(row["concurrency"]["in_flight"], 0, "{quota}");
    assert_eq!(row["rpm"]["used"], served as u64, "{quota}");
    assert_eq!(quota["ledger"]["mode"], "shared", "{quota}");
}
