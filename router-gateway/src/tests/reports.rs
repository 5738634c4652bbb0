//! What the gateway reports: `/metrics`, and `/v1/usage` over the caller's own records.

use super::*;

#[tokio::test]
async fn metrics_count_requests_tokens_cost_and_refusals() {
    let r = start("rpm: 1", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    assert_eq!(r.post(Some(ACME), &hello()).await.status(), 200);
    let refused = r.post_with_deadline_1s(&hello()).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(r.post(Some("llmr-nobody"), &hello()).await.status(), 401);
    let text = r.metrics_text().await;
    for line in [
        r#"llmroute_requests_total{tenant="acme",provider="oa",model="small",outcome="ok"} 1"#,
        r#"llmroute_requests_total{tenant="acme",provider="-",model="-",outcome="rate_limit_exceeded"} 1"#,
        r#"llmroute_requests_total{tenant="-",provider="-",model="-",outcome="invalid_api_key"} 1"#,
        r#"llmroute_tokens_total{tenant="acme",provider="oa",model="small",kind="cached"} 1024"#,
        r#"llmroute_tokens_total{tenant="acme",provider="oa",model="small",kind="completion"} 46"#,
        r#"llmroute_upstream_attempts_total{deployment="oa/small",outcome="ok"} 1"#,
        r#"llmroute_deployment_in_flight{deployment="oa/small"} 0"#,
        "llmroute_admission_wait_seconds_count 1",
        "llmroute_router_added_seconds_count 1",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(text.contains("llmroute_cost_usd_total{"), "{text}");
    assert!(
        !text.contains(ACME) && !text.contains("Hello"),
        "no key, no prompt"
    );
}

#[tokio::test]
async fn usage_shows_a_key_its_own_tenants_records_only_on_sqlite() {
    usage_shows_a_key_its_own_tenants_records_only(None).await;
}

#[tokio::test]
async fn usage_shows_a_key_its_own_tenants_records_only_on_postgres() {
    usage_shows_a_key_its_own_tenants_records_only(Some(llmroute_tests::TestPostgres::new())).await;
}

/// Records to SQLite, or to PostgreSQL when `pg` is given.
async fn usage_shows_a_key_its_own_tenants_records_only(pg: Option<llmroute_tests::TestPostgres>) {
    use router_core::config::{UsageSettings, UsageSink};
    let dir = tempfile::tempdir().unwrap();
    let mut settings = match &pg {
        None => UsageSettings::with_sink(UsageSink::Sqlite(Some(dir.path().join("u.sqlite")))),
        Some(pg) => {
            let mut s = UsageSettings::with_sink(UsageSink::Postgres(pg.url().to_owned()));
            s.schema = pg.schema().to_owned();
            s
        }
    };
    settings.spill = Some(dir.path().join("u.spill"));
    let env = router_state::store::Environment::fixed::<&str>(&[], None);
    let recorder = router_state::usage::open(&settings, &env).unwrap().unwrap();
    let upstream = MockServer::start().await;
    let yaml = format!(
        "defaults: {{ model: chat }}\n\
         providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }} }}\n\
         tenants:\n  default_tier: pro\n  tiers:\n    pro: {{ rpm: 100 }}\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n    - {{ sha256: {}, tenant: globex }}\n",
        upstream.uri(),
        hash_key(ACME),
        hash_key(GHOST),
    );
    let registry = Registry::from_yaml_str(&yaml, "gateway.yaml").unwrap();
    let keys = StaticKeys::new().with("OA_KEY", "sk-upstream-S3CRET");
    let router = Router::builder(registry)
        .keys(Arc::new(keys))
        .usage(recorder.clone())
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        app(
            router.clone(),
            Access::new(&router.registry().gateway, Auth::Keys),
        ),
        std::future::pending(),
    ));
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json"),
        )
        .mount(&upstream)
        .await;
    let http = reqwest::Client::new();
    for key in [ACME, ACME, GHOST] {
        let sent = http
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&hello())
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 200);
    }
    recorder.flush().await;
    let get = |key: &'static str, query: &'static str| {
        let http = http.clone();
        let url = format!("{base}/v1/usage{query}");
        async move { http.get(url).bearer_auth(key).send().await.unwrap() }
    };

    let acme: Value = get(ACME, "?by=tenant,model").await.json().await.unwrap();
    assert_eq!(acme["tenant"], "acme");
    assert_eq!(acme["totals"]["requests"], 2);
    let rows = acme["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["key"], json!(["acme", "small"]));
    let globex: Value = get(GHOST, "").await.json().await.unwrap();
    assert_eq!(globex["totals"]["requests"], 1);

    let refused = get(ACME, "?tenant=globex").await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "other_tenant");
    let own: Value = get(ACME, "?tenant=acme&since=1h")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(own["totals"]["requests"], 2);
    let bad = get(ACME, "?by=week").await;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`by`: unknown grouping `week`")
    );
    assert_eq!(
        http.get(format!("{base}/v1/usage"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(
        metrics.contains("llmroute_usage_records_total{to=\"sink\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("llmroute_usage_sink_down 0"), "{metrics}");

    // The records name the key by a prefix of its hash, never the key.
    let stored = match &pg {
        None => rusqlite_free_read(&dir.path().join("u.sqlite")),
        Some(pg) => {
            let sql = format!("SELECT key_id FROM \"{}\".usage_records", pg.schema());
            let rows = pg.client().await.query(&sql, &[]).await.unwrap();
            let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            ids.join(" ")
        }
    };
    assert!(stored.contains(&hash_key(ACME)[..12]));
    assert!(!stored.contains(ACME) && !stored.contains("S3CRET"));
}

/// The SQLite file's bytes as text (records are stored as plain text columns).
fn rusqlite_free_read(path: &std::path::Path) -> String {
    let mut text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    let wal = path.with_extension("sqlite-wal");
    if let Ok(bytes) = std::fs::read(wal) {
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    text
}
