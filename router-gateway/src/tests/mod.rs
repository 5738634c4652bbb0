//! The gateway over a real socket, against wiremock upstreams, one file per concern; here, the
//! gateway every test starts and what they share.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue};
use futures_util::stream::StreamExt;
use router_core::config::Registry;
use router_sdk::{Router, StaticKeys};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::cut::Streams;
use crate::routes::request_id_of;

/// A key of tenant `acme` (tier `pro`), one of `ghost` (no tier), one limited to `small`.
const ACME: &str = "llmr-acme-test-key";

const GHOST: &str = "llmr-ghost-test-key";

const NARROW: &str = "llmr-narrow-test-key";

/// A second provider's key: 40 characters, as a provider that echoes keys would be given.
const AN_SECRET: &str = "sk-ant-api03-Zq9XwV2pLm7RtY4uK8sN1bC6dF3";

struct Running {
    base: String,
    upstream: MockServer,
    router: Router,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
    cut: Cut,
    keys: crate::KeysSeen,
}

impl Running {
    /// `GET path` with `key`, read as JSON.
    async fn get_json(&self, key: &str, path: &str) -> Value {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(key);
        response.send().await.unwrap().json().await.unwrap()
    }

    /// What `/metrics` shows now.
    async fn metrics_text(&self) -> String {
        let response = self.http.get(format!("{}/metrics", self.base)).send();
        response.await.unwrap().text().await.unwrap()
    }

    /// `ACME`'s request of `body` that may take 1 s at most.
    async fn post_with_deadline_1s(&self, body: &Value) -> reqwest::Response {
        let url = format!("{}/v1/chat/completions", self.base);
        let req = self
            .http
            .post(url)
            .bearer_auth(ACME)
            .header("x-llmroute-timeout", "1");
        req.json(body).send().await.unwrap()
    }

    async fn post(&self, key: Option<&str>, body: &Value) -> reqwest::Response {
        let mut req = self.http.post(format!("{}/v1/chat/completions", self.base));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        req.json(body).send().await.unwrap()
    }
}

/// A gateway on a free port over one OpenAI upstream (`small`, alias `chat`), tiers `pro`
/// (with `tier_extra`) and the three keys, configured with `extra` YAML.
async fn start(tier_extra: &str, extra: &str) -> Running {
    let upstream = MockServer::start().await;
    let base = upstream.uri();
    start_over(upstream, &base, tier_extra, extra).await
}

/// Like [`start`], with the provider at `provider_base` instead of the mock server.
async fn start_over(
    upstream: MockServer,
    provider_base: &str,
    tier_extra: &str,
    extra: &str,
) -> Running {
    let yaml = yaml_over(provider_base, tier_extra, extra);
    start_yaml(upstream, &yaml).await
}

/// The configuration of [`start_over`].
fn yaml_over(provider_base: &str, tier_extra: &str, extra: &str) -> String {
    format!(
        "defaults: {{ model: chat }}\n\
         providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }} }}\n\
         tenants:\n  tiers:\n    pro: {{ {tier_extra} }}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n    - {{ sha256: {}, tenant: ghost }}\n    \
         - {{ sha256: {}, tenant: acme, models: [small] }}\n{extra}",
        provider_base,
        hash_key(ACME),
        hash_key(GHOST),
        hash_key(NARROW),
    )
}

/// The whole seconds of `response`'s `Retry-After`.
fn retry_after_secs(response: &reqwest::Response) -> u64 {
    let header = response.headers()["retry-after"].to_str().unwrap();
    header.parse().unwrap()
}

/// A gateway on a free port configured by `yaml`, whose providers' keys are in `OA_KEY`
/// (`sk-upstream-S3CRET`) and `AN_KEY` ([`AN_SECRET`]).
async fn start_yaml(upstream: MockServer, yaml: &str) -> Running {
    start_access(upstream, yaml, |access| access).await
}

/// Like [`start_yaml`], with the callers let in by `access` as `with` makes it.
async fn start_access(
    upstream: MockServer,
    yaml: &str,
    with: impl FnOnce(Access) -> Access,
) -> Running {
    let registry = Registry::from_yaml_str(yaml, "gateway.yaml").unwrap();
    let router = router_builder(registry).build().await.unwrap();
    serve_router(upstream, router, with).await
}

/// A router builder over `registry`, whose providers' keys are in `OA_KEY` and `AN_KEY`.
fn router_builder(registry: Registry) -> router_sdk::RouterBuilder {
    let keys = StaticKeys::new()
        .with("OA_KEY", "sk-upstream-S3CRET")
        .with("AN_KEY", AN_SECRET);
    Router::builder(registry).keys(Arc::new(keys))
}

/// A gateway on a free port over `router`, letting in the callers `access` as `with` makes it.
async fn serve_router(
    upstream: MockServer,
    router: Router,
    with: impl FnOnce(Access) -> Access,
) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let access = with(Access::new(&router.registry().gateway, Auth::Keys));
    access.load_keys().await.unwrap();
    let apps = apps(router.clone(), access);
    let app = apps.api.merge(apps.metrics);
    let done = tokio::spawn(serve(listener, app, async {
        let _ = stopped.await;
    }));
    Running {
        base,
        upstream,
        router,
        http: reqwest::Client::new(),
        stop: Some(stop),
        done,
        cut: apps.cut,
        keys: apps.keys,
    }
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../router-sdk/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap()
}

async fn upstream_answers(r: &Running, fixture_name: &str, content_type: &str) {
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(fixture(fixture_name), content_type))
        .mount(&r.upstream)
        .await;
}

fn hello() -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "Hello"}]})
}

/// An upstream that answers one streamed request by hand: it says when the request arrived,
/// sends the first SSE event, and the rest only when told; it says when the gateway hung up.
struct HeldUpstream {
    base: String,
    arrived: tokio::sync::mpsc::Receiver<()>,
    go: Option<tokio::sync::oneshot::Sender<()>>,
    hung_up: tokio::sync::mpsc::Receiver<()>,
}

async fn held_upstream() -> HeldUpstream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (arrived_tx, arrived) = tokio::sync::mpsc::channel(1);
    let (hung_tx, hung_up) = tokio::sync::mpsc::channel(1);
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The headers and the JSON body (the body ends the request's first read burst).
        while !String::from_utf8_lossy(&seen).contains("\"messages\"") {
            let n = socket.read(&mut buf).await.unwrap();
            seen.extend_from_slice(&buf[..n]);
        }
        arrived_tx.send(()).await.unwrap();
        let first = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n";
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(first.as_bytes()).await.unwrap();
        let rest = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo!\"},\"finish_reason\":\"stop\"}]}\n\n\
                    data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        tokio::select! {
            _ = go_rx => {
                socket.write_all(rest.as_bytes()).await.unwrap();
            }
            // The gateway hung up: reading gives the end of the stream.
            _ = socket.read(&mut buf) => {
                let _ = hung_tx.send(()).await;
            }
        }
    });
    HeldUpstream {
        base,
        arrived,
        go: Some(go),
        hung_up,
    }
}

fn streamed_hello() -> Value {
    let mut body = hello();
    body["stream"] = json!(true);
    body
}

/// What the ledger holds in flight over every deployment.
async fn in_flight(router: &Router) -> u64 {
    let all: Vec<_> = router.registry().deployment_ids().collect();
    let snaps = router.ledger().snapshot(&all).await.unwrap();
    snaps.iter().map(|s| s.usage.in_flight).sum()
}

mod admin;
mod admin_shared;
mod answers;
mod dashboard;
mod day_limits;
mod embeddings;
mod hardening;
mod key_limits;
mod lifecycle;
mod messages;
mod observability;
mod ready;
mod refusals;
mod reload;
mod reports;
mod responses;
mod traces;
