//! `llmroute keys new` and `llmroute serve`: a key made by the CLI lets an OpenAI-shaped request
//! through the gateway; SIGTERM stops it with exit 0; unsafe or useless setups exit 2.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// The key and its configuration line printed by `llmroute keys new --tenant acme`.
fn new_key() -> (String, String) {
    let (out, _) = run(llmroute().args(["keys", "new", "--tenant", "acme"]), 0);
    let key = out
        .lines()
        .find_map(|l| l.strip_prefix("key: "))
        .unwrap()
        .to_owned();
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("- { sha256:"))
        .unwrap()
        .trim()
        .to_owned();
    (key, line)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_from_keys_new_calls_the_gateway_and_sigterm_stops_it() {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json"),
        )
        .expect(1)
        .mount(&upstream)
        .await;
    let (key, line) = new_key();
    assert!(key.starts_with("llmr-") && key.len() == 53, "{key}");
    assert!(
        !line.contains(&key),
        "the line holds the hash, never the key"
    );
    let extra = format!(
        "tenants:\n  tiers: {{ pro: {{ rpm: 100 }} }}\n  members: {{ acme: pro }}\ngateway:\n  keys:\n    {line}\n"
    );
    let upstream_base = format!("{}/v1", upstream.uri());
    let s = scene_with(
        &[(
            "oa",
            "openai",
            upstream_base,
            "gpt-test",
            2.0,
            8.0,
            "rpm: 100",
        )],
        &extra,
    );
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("llmroute"));
    for var in ["LLMROUTE_CONFIG", "REDIS_URL"] {
        cmd.env_remove(var);
    }
    // Every log line, from every crate: neither key may appear in any of them.
    cmd.env("RUST_LOG", "trace")
        .arg("--config")
        .arg(&s.config)
        .env("LLMROUTE_STATE_DIR", s.dir.path().join("state"))
        .env("OA_KEY", "sk-planted-oa-S3CRET")
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (first, second) = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout);
        let (mut first, mut second) = (String::new(), String::new());
        lines.read_line(&mut first).unwrap();
        lines.read_line(&mut second).unwrap();
        (first, second)
    })
    .await
    .unwrap();
    let metrics_url = second
        .trim()
        .strip_prefix("llmroute metrics on ")
        .unwrap_or_else(|| panic!("{second:?}"))
        .to_owned();
    let base = first
        .trim()
        .strip_prefix("llmroute gateway listening on ")
        .unwrap_or_else(|| panic!("{first:?}"))
        .to_owned();
    let http = reqwest::Client::new();
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "Hello"}]});
    let response = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Hello! How can I help you today?"
    );
    let refused = http
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth("llmr-wrong")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    // Metrics on their own address, not on the API's.
    let metrics = http
        .get(&metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"llmroute_requests_total{tenant="acme",provider="oa",model="gpt-test",outcome="ok"} 1"#),
        "{metrics}"
    );
    let on_api = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(on_api.status(), 404);

    signal(child.id(), "TERM");
    let output = exited(child).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        !stderr.contains("S3CRET") && !stderr.contains(&key),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_then_the_grace_period_cuts_off_a_request_in_flight_and_settles_it() {
    cut_off_and_settled("grace_secs: 1", &["TERM"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_cuts_off_a_request_in_flight_at_once_and_settles_it() {
    cut_off_and_settled("grace_secs: 3600", &["TERM", "INT"]).await;
}

/// `llmroute serve` with `gateway.<grace>`, one request in flight that the provider never
/// answers, then `signals` sent in turn: the request is refused with 503 `gateway_stopping`,
/// the gateway exits 0, and the request's slot is free.
async fn cut_off_and_settled(grace: &str, signals: &[&str]) {
    let (base, mut arrivals) = crate::signals::silent_upstream().await;
    let s = one_upstream_at(base, &format!("gateway:\n  {grace}\n"));
    let mut child = s
        .process(&["serve", "--no-auth", "--listen", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let base = listening_on(&mut child);
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "Hello"}]});
    let request = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send();
    let client = tokio::spawn(request);
    // The provider has the request, and never answers it.
    within_a_minute(arrivals.recv(), "request at the provider")
        .await
        .unwrap();
    assert_eq!(crate::signals::in_flight(&s).await, 1);
    for name in signals {
        signal(child.id(), name);
    }
    // After the grace period, or at the second signal: refused, its call dropped, its slot
    // settled before the exit.
    let response = within_a_minute(client, "answer").await.unwrap().unwrap();
    assert_eq!(response.status(), 503);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "gateway_stopping", "{answer}");
    let output = exited(child).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        stderr.contains("cutting off what is still in flight"),
        "{stderr}"
    );
    assert_eq!(crate::signals::in_flight(&s).await, 0);
}

#[test]
fn unsafe_or_useless_setups_exit_2() {
    let s = scene(&[(
        "oa",
        "openai",
        "http://127.0.0.1:9/v1".into(),
        "gpt-test",
        2.0,
        8.0,
        "rpm: 100",
    )]);
    let cases: [(&[&str], &str); 2] = [
        (
            &["serve", "--listen", "127.0.0.1:0"],
            "`gateway.keys` is empty",
        ),
        (
            &["serve", "--no-auth", "--listen", "0.0.0.0:0"],
            "refused on an address other than loopback",
        ),
    ];
    for (args, words) in cases {
        let (_, stderr) = run(s.llmroute(&["oa"]).args(args), 2);
        assert!(stderr.contains(words), "{args:?}: {stderr}");
    }
    let (_, stderr) = run(llmroute().args(["keys", "new", "--tenant", "a{b}"]), 2);
    assert!(
        stderr.contains("--tenant") && stderr.contains("`{`"),
        "{stderr}"
    );
    let (_, stderr) = run(llmroute().args(["keys", "new", "--tenant", " acme"]), 2);
    assert!(stderr.contains("leading or trailing spaces"), "{stderr}");
}

#[test]
fn the_line_keys_new_prints_loads_as_that_tenant_whatever_its_name() {
    for tenant in [
        "acme",
        "@ops",
        "a: b, #c",
        "null",
        "'x",
        "[team]",
        "\"q\" \\ é",
    ] {
        let (out, _) = run(llmroute().args(["keys", "new", "--tenant", tenant]), 0);
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with("- { sha256:"))
            .unwrap_or_else(|| panic!("{out}"))
            .trim();
        let yaml = format!(
            "providers:\n  - name: p\n    api: openai\n    base_url: http://127.0.0.1:9/v1\n    \
             api_key_env: P_KEY\n    models:\n      - {{ name: m, price: {{ input: 1, output: 2 }} }}\n\
             gateway:\n  keys:\n    {line}\n"
        );
        let registry = router_core::config::Registry::from_yaml_str(&yaml, "keys.yaml")
            .unwrap_or_else(|e| panic!("{tenant:?}: {e}\n{yaml}"));
        assert_eq!(registry.gateway.keys[0].tenant, tenant);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_as_many_worker_threads_as_asked_and_one_per_core_by_default() {
    let (base, _arrivals) = crate::signals::silent_upstream().await;
    let s = one_upstream_at(base, "");
    let cores = std::thread::available_parallelism().unwrap().get();
    for (args, workers) in [(&["--workers", "3"][..], 3), (&[][..], cores)] {
        let serve = ["-v", "serve", "--no-auth", "--listen", "127.0.0.1:0"];
        let mut child = s.process(&[&serve[..], args].concat()).spawn().unwrap();
        listening_on(&mut child);
        signal(child.id(), "TERM");
        let output = exited(child).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        let said = format!("serving on {workers} worker threads");
        assert!(stderr.contains(&said), "{args:?}: {stderr}");
    }
    let (_, stderr) = run(s.llmroute(&[]).args(["serve", "--workers", "0"]), 2);
    assert!(stderr.contains("--workers"), "{stderr}");
}
