//! The alert rules (`deploy/prometheus/llmroute.rules.yml`) and the Grafana dashboard
//! (`deploy/grafana/llmroute.json`) name only metrics that `/metrics` shows.

use std::collections::BTreeSet;

use super::*;

const RULES: &str = include_str!("../../../deploy/prometheus/llmroute.rules.yml");

const DASHBOARD: &str = include_str!("../../../deploy/grafana/llmroute.json");

/// Each rule's `expr` with its alert's name, read line by line: `expr: ...` on one line, or
/// `expr: |` (or `>`) and the lines indented under it.
fn rule_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut alert = String::new();
    let mut exprs = Vec::new();
    let indent = |l: &str| l.len() - l.trim_start().len();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            alert = name.trim().to_owned();
        }
        let Some(rest) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        let expr = if rest.starts_with('|') || rest.starts_with('>') {
            let under = lines[i + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || indent(l) > indent(line))
                .copied();
            under.collect::<Vec<_>>().join("\n")
        } else {
            rest.to_owned()
        };
        exprs.push((format!("alert {alert}"), expr));
    }
    exprs
}

/// Every `expr` in the dashboard with the title of the panel holding it, and the templating
/// variables' queries.
fn dashboard_exprs(v: &Value, title: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            let title = map.get("title").and_then(Value::as_str).unwrap_or(title);
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => {
                        out.push((format!("panel {title:?}"), expr.clone()));
                    }
                    ("definition", Value::String(query)) => {
                        let name = map.get("name").and_then(Value::as_str).unwrap_or("");
                        out.push((format!("variable {name:?}"), query.clone()));
                    }
                    _ => dashboard_exprs(value, title, out),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                dashboard_exprs(item, title, out);
            }
        }
        _ => {}
    }
}

/// The `llmroute_*` names a PromQL expression uses, its quoted strings (label values) left out.
fn metric_names(expr: &str) -> Vec<String> {
    let mut bare = String::new();
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => bare.push(c),
        }
    }
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = Vec::new();
    let mut rest = bare.as_str();
    while let Some(at) = rest.find("llmroute_") {
        let starts_word = !rest[..at].ends_with(is_name);
        let end = rest[at..]
            .find(|c| !is_name(c))
            .map_or(rest.len(), |n| at + n);
        if starts_word {
            names.push(rest[at..end].to_owned());
        }
        rest = &rest[end..];
    }
    names
}

/// A gateway on a free port over `upstream` (model `small`, alias `chat`, with RPM and TPM
/// limits), its ledger in `redis` (so that it has a mode), with an admin key and a reload that
/// always fails.
async fn observed(redis: &llmroute_tests::TestRedis, upstream: &MockServer) -> String {
    use router_state::store::{ChoiceOrigin, LedgerChoice};
    let yaml = format!(
        "namespace: {}\ndefaults: {{ model: chat }}\n\
         providers:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }}, limits: {{ rpm: 1000, tpm: 1000000 }} }}\n\
         tenants:\n  tiers:\n    pro: {{}}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n  admin_keys: [{}]\n",
        redis.namespace,
        upstream.uri(),
        hash_key(ACME),
        hash_key(super::admin::ADMIN),
    );
    let registry = Registry::from_yaml_str(&yaml, "gateway.yaml").unwrap();
    let choice = LedgerChoice::Redis {
        url: redis.url.clone(),
        from: ChoiceOrigin::Config,
    };
    let ledger = router_state::store::open(&choice, &registry).await.unwrap();
    let router = router_builder(registry)
        .ledger(ledger)
        .build()
        .await
        .unwrap();
    let rebuild: crate::Rebuild =
        Arc::new(|| Box::pin(async { Err("gateway.yaml:1: refused by the test".to_owned()) }));
    let access = Access::new(&router.registry().gateway, Auth::Keys);
    let apps = crate::apps_reloading(router, access, Some(rebuild));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        apps.api.merge(apps.metrics),
        std::future::pending(),
    ));
    base
}

/// The upstream's next answer: `status` with `body` of `content_type` (and a `retry-after` of
/// 30 s), once.
async fn answers_once(upstream: &MockServer, status: u16, body: Vec<u8>, content_type: &str) {
    let answer = ResponseTemplate::new(status)
        .set_body_raw(body, content_type)
        .insert_header("retry-after", "30");
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(answer)
        .up_to_n_times(1)
        .mount(upstream)
        .await;
}

/// The `llmroute_*` names of `/metrics`'s samples, as PromQL sees them: a counter's with
/// `_total`, a histogram's with `_bucket`, `_sum` and `_count`.
fn sample_names(text: &str) -> BTreeSet<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .filter(|name| name.starts_with("llmroute_"))
        .collect()
}

/// The names `exprs` use that are not in `samples`, each with where it is used.
fn missing(exprs: &[(String, String)], samples: &BTreeSet<&str>) -> Vec<String> {
    let mut missing = Vec::new();
    for (whose, expr) in exprs {
        for name in metric_names(expr) {
            if !samples.contains(name.as_str()) {
                missing.push(format!("{whose}: {name}"));
            }
        }
    }
    missing
}

/// prometheus-client writes a family's `# HELP` and `# TYPE` only once it has a sample, so the
/// gateway here does what gives every family one: an answer, a stream, a provider's 429 (and
/// its cooldown), a failed reload, over a Redis ledger and a deployment with limits.
#[tokio::test]
async fn every_metric_the_alerts_and_the_dashboard_name_is_on_metrics() {
    let rules = rule_exprs(RULES);
    let alerts = RULES.lines().filter(|l| l.contains("- alert:")).count();
    assert_eq!(rules.len(), alerts, "an alert without an expr: {rules:?}");
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let mut panels = Vec::new();
    dashboard_exprs(&dashboard, "", &mut panels);
    let targets = DASHBOARD.matches("\"refId\"").count();
    assert!(panels.len() >= targets, "a target without an expr");
    let exprs: Vec<_> = rules.into_iter().chain(panels).collect();
    for (whose, expr) in &exprs {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "{whose} names no llmroute metric: {expr}"
        );
    }
    assert!(alerts >= 9 && exprs.len() >= 25, "{alerts} {exprs:?}");

    let redis = llmroute_tests::redis_server();
    let upstream = MockServer::start().await;
    let base = observed(&redis, &upstream).await;
    let http = reqwest::Client::new();
    let chat = |body: Value| {
        let url = format!("{base}/v1/chat/completions");
        let request = http
            .post(url)
            .bearer_auth(ACME)
            .header("x-llmroute-timeout", "1");
        async move { request.json(&body).send().await.unwrap() }
    };
    answers_once(
        &upstream,
        200,
        fixture("openai/ok.json"),
        "application/json",
    )
    .await;
    assert_eq!(chat(hello()).await.status(), 200);
    answers_once(
        &upstream,
        200,
        fixture("openai/stream.sse"),
        "text/event-stream",
    )
    .await;
    let streamed = chat(streamed_hello()).await;
    assert_eq!(streamed.status(), 200);
    assert!(streamed.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    let limited = fixture("openai/rate_limit_429.json");
    answers_once(&upstream, 429, limited, "application/json").await;
    assert_ne!(chat(hello()).await.status(), 200);
    let reload = http
        .post(format!("{base}/admin/v1/reload"))
        .bearer_auth(super::admin::ADMIN)
        .send();
    assert_eq!(reload.await.unwrap().status(), 409);

    // A stream is counted as its relay drops, just after its last event: a few reads.
    let mut text = String::new();
    for _ in 0..50 {
        let response = http.get(format!("{base}/metrics")).send().await.unwrap();
        text = response.text().await.unwrap();
        if missing(&exprs, &sample_names(&text)).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let missing = missing(&exprs, &sample_names(&text));
    panic!(
        "not on /metrics:\n  {}\n\n/metrics:\n{text}",
        missing.join("\n  ")
    );
}

#[test]
fn names_are_read_as_promql_writes_them() {
    let expr = "sum by (job) (rate(llmroute_streams_total{ended=\"llmroute_x\"}[10m]))\n  \
                / (sum(rate(xllmroute_y[5m])) > 0) + llmroute_line_waiting";
    assert_eq!(
        metric_names(expr),
        ["llmroute_streams_total", "llmroute_line_waiting"]
    );
    let text = "# TYPE llmroute_requests counter\nllmroute_requests_total{outcome=\"ok\"} 1\n\
                llmroute_wait_seconds_bucket{le=\"+Inf\"} 1\nllmroute_mode 1\n# EOF\n";
    assert_eq!(
        sample_names(text),
        BTreeSet::from([
            "llmroute_requests_total",
            "llmroute_wait_seconds_bucket",
            "llmroute_mode"
        ])
    );
    let yaml = "      - alert: A\n        expr: |\n          up\n            > 1\n        for: 1m\n      \
                - alert: B\n        expr: down > 0\n";
    assert_eq!(
        rule_exprs(yaml),
        [
            (
                "alert A".to_owned(),
                "          up\n            > 1".to_owned()
            ),
            ("alert B".to_owned(), "down > 0".to_owned())
        ]
    );
}
