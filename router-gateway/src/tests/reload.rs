//! Reloading the configuration (`POST /admin/v1/reload`, as SIGHUP does): a new price and a
//! new deployment take effect while a stream in flight finishes on the old configuration;
//! limits used before stay counted; a broken file, or one that would move the ledger, changes
//! nothing and says why.

use std::sync::Mutex;

use router_core::clock::SystemClock;
use router_core::ledger::SqliteStore;

use super::admin::ADMIN;
use super::*;
use crate::{Rebuild, apps_reloading};

/// A gateway whose configuration file is `file`, over an embedded ledger in `dir`.
struct Reloadable {
    base: String,
    http: reqwest::Client,
    file: Arc<Mutex<String>>,
    router: Router,
    _dir: tempfile::TempDir,
}

/// The configuration: model `small` (alias `chat`) at `base` with `limits`, and `more`
/// models; admin key [`ADMIN`], tenant key [`ACME`].
fn config(base: &str, limits: &str, more: &str, namespace: &str) -> String {
    format!(
        "namespace: {namespace}\ndefaults: {{ model: chat }}\n\
         providers:\n  - name: oa\n    api: openai\n    base_url: {base}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }}, limits: {{ {limits} }} }}\n{more}\
         tenants:\n  tiers:\n    pro: {{}}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n  admin_keys: [{}]\n",
        hash_key(ACME),
        hash_key(ADMIN),
    )
}

/// A router over `yaml`, on the ledger file `db`.
async fn built(yaml: String, db: std::path::PathBuf) -> Result<Router, String> {
    let registry = Registry::from_yaml_str(&yaml, "gateway.yaml").map_err(|e| e.to_string())?;
    let ledger =
        SqliteStore::open(&db, &registry, Arc::new(SystemClock)).map_err(|e| e.to_string())?;
    let keys = StaticKeys::new().with("OA_KEY", "sk-upstream-S3CRET");
    Router::builder(registry)
        .keys(Arc::new(keys))
        .ledger(Arc::new(ledger))
        .build()
        .await
        .map_err(|e| e.to_string())
}

async fn reloadable(yaml: String) -> Reloadable {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.sqlite");
    let file = Arc::new(Mutex::new(yaml.clone()));
    let rebuild: Rebuild = {
        let (file, db) = (file.clone(), db.clone());
        Arc::new(move || {
            let yaml = file.lock().unwrap().clone();
            Box::pin(built(yaml, db.clone()))
        })
    };
    let router = built(yaml, db).await.unwrap();
    let access = Access::new(&router.registry().gateway, Auth::Keys);
    let apps = apps_reloading(router.clone(), access, Some(rebuild));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        apps.api.merge(apps.metrics),
        std::future::pending(),
    ));
    Reloadable {
        base,
        http: reqwest::Client::new(),
        file,
        router,
        _dir: dir,
    }
}

impl Reloadable {
    fn write(&self, yaml: String) {
        *self.file.lock().unwrap() = yaml;
    }

    async fn reload(&self) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/admin/v1/reload", self.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn chat(&self, body: &Value) -> reqwest::Response {
        let url = format!("{}/v1/chat/completions", self.base);
        self.http
            .post(url)
            .bearer_auth(ACME)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn models(&self) -> Vec<String> {
        let url = format!("{}/v1/models", self.base);
        let body: Value = self
            .http
            .get(url)
            .bearer_auth(ACME)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let models = body["data"].as_array().unwrap().iter();
        models
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// An upstream answering every chat request with the recorded answer.
async fn answering() -> MockServer {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json"),
        )
        .mount(&upstream)
        .await;
    upstream
}

#[tokio::test]
async fn a_reload_serves_a_new_deployment_while_a_stream_in_flight_ends_on_the_old_one() {
    let mut held = held_upstream().await;
    let r = reloadable(config(&held.base, "rpm: 100", "", "reload")).await;
    let url = format!("{}/v1/chat/completions", r.base);
    let streaming = r
        .http
        .post(url)
        .bearer_auth(ACME)
        .json(&streamed_hello())
        .send();
    let client = tokio::spawn(async move { streaming.await.unwrap().text().await.unwrap() });
    held.arrived.recv().await.unwrap();
    // The provider moves and a model is added, with a price of its own.
    let upstream = answering().await;
    let big = "      - { name: big, price: { input: 5, output: 15 } }\n";
    r.write(config(&upstream.uri(), "rpm: 100", big, "reload"));
    let (status, answer) = r.reload().await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["serving"]
            .as_str()
            .unwrap()
            .contains("2 deployments"),
        "{answer}"
    );
    assert!(r.models().await.contains(&"big".to_owned()));
    // The stream started before finishes on the provider it started with.
    held.go.take().unwrap().send(()).unwrap();
    let text = client.await.unwrap();
    assert!(
        text.contains("lo!") && text.trim_end().ends_with("data: [DONE]"),
        "{text}"
    );
    // New requests go to the new provider.
    let response = r.chat(&hello()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
    // Nothing left in flight, on either configuration.
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn limits_used_before_a_reload_stay_counted() {
    let upstream = answering().await;
    let r = reloadable(config(&upstream.uri(), "rpm: 2", "", "counted")).await;
    for _ in 0..2 {
        assert_eq!(r.chat(&hello()).await.status(), 200);
    }
    // A new price, the same limit: the two requests of this minute still count.
    let cheaper =
        config(&upstream.uri(), "rpm: 2", "", "counted").replace("input: 2,", "input: 1,");
    r.write(cheaper);
    assert_eq!(r.reload().await.0, 200);
    // Refused at once rather than after a wait for the window.
    let url = format!("{}/v1/chat/completions", r.base);
    let asked = r
        .http
        .post(url)
        .bearer_auth(ACME)
        .header("x-llmroute-timeout", "1");
    let refused = asked.json(&hello()).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_broken_file_or_a_moved_ledger_changes_nothing_and_says_why() {
    let upstream = answering().await;
    let yaml = config(&upstream.uri(), "rpm: 100", "", "kept");
    let r = reloadable(yaml.clone()).await;
    r.write("providers: [\n".to_owned());
    let (status, answer) = r.reload().await;
    assert_eq!(status, 409, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the old one is served") && message.contains("gateway.yaml"),
        "{message}"
    );
    r.write(yaml.replace("namespace: kept", "namespace: elsewhere"));
    let (status, answer) = r.reload().await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("restart"),
        "{answer}"
    );
    // Still served as before.
    assert_eq!(r.models().await, ["chat", "small"]);
    assert_eq!(r.chat(&hello()).await.status(), 200);
    let metrics = r
        .http
        .get(format!("{}/metrics", r.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("llmroute_config_reloads_total{result=\"error\"} 2"),
        "{metrics}"
    );
    // A tenant's key may not reload.
    let refused = r
        .http
        .post(format!("{}/admin/v1/reload", r.base))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
}
