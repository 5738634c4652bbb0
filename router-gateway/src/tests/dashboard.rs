//! The dashboard over a real socket: `/ui` and its files asking a browser for an admin key
//! (HTTP Basic), the headers they carry, and the JSON they read: deployments with their cooldown
//! and its cause, the last requests and per-hour series from the usage records, with or without
//! a usage sink.

use base64::Engine;

use super::admin::ADMIN;
use super::*;

/// `Authorization: Basic` of `user` and `password`.
fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A gateway with an admin key and no usage sink.
async fn admin_gateway() -> Running {
    let upstream = MockServer::start().await;
    let extra = format!("  admin_keys: [{}]\n", hash_key(ADMIN));
    let yaml = yaml_over(&upstream.uri(), "", &extra);
    start_access(upstream, &yaml, |a| a).await
}

/// A gateway with an admin key and usage records in an SQLite file of `dir`.
async fn gateway_with_usage(dir: &std::path::Path) -> (Running, router_usage::Recorder) {
    use router_core::config::{UsageSettings, UsageSink};
    let mut settings = UsageSettings::with_sink(UsageSink::Sqlite(Some(dir.join("u.sqlite"))));
    settings.spill = Some(dir.join("u.spill"));
    let env = router_state::store::Environment::fixed::<&str>(&[], None);
    let recorder = router_state::usage::open(&settings, &env).unwrap().unwrap();
    let upstream = MockServer::start().await;
    let extra = format!("  admin_keys: [{}]\n", hash_key(ADMIN));
    let yaml = yaml_over(&upstream.uri(), "", &extra);
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
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let apps = apps(
        router.clone(),
        Access::new(&router.registry().gateway, Auth::Keys),
    );
    let done = tokio::spawn(serve(listener, apps.api.merge(apps.metrics), async {
        let _ = stopped.await;
    }));
    let running = Running {
        base,
        upstream,
        router,
        http: reqwest::Client::new(),
        stop: Some(stop),
        done,
        cut: apps.cut,
        keys: apps.keys,
    };
    (running, recorder)
}

impl Running {
    /// `GET path` with `authorization` (a whole header value), if any.
    async fn get_with(&self, path: &str, authorization: Option<&str>) -> reqwest::Response {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(value) = authorization {
            req = req.header("authorization", value);
        }
        req.send().await.unwrap()
    }

    /// `GET path` as an admin, read as JSON: the status and the answer.
    async fn admin_get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, Some(ADMIN), path, None)
            .await
    }
}

fn header<'r>(response: &'r reqwest::Response, name: &str) -> &'r str {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_dashboard_asks_a_browser_for_an_admin_key_and_serves_its_files() {
    let r = admin_gateway().await;
    let refusals = [
        (None, 401),
        (Some(basic("me", "llmr-not-a-key")), 401),
        (Some(basic("me", "")), 401),
        (Some("Basic %%%not-base64".to_owned()), 401),
        (Some(basic("me", ACME)), 403),
        (Some(format!("Bearer {ACME}")), 403),
    ];
    for path in ["/ui", "/ui/app.js", "/ui/app.css"] {
        for (authorization, status) in &refusals {
            let refused = r.get_with(path, authorization.as_deref()).await;
            assert_eq!(refused.status(), *status, "{path} with {authorization:?}");
            let challenge = header(&refused, "www-authenticate").to_owned();
            if *status == 401 {
                assert_eq!(
                    challenge,
                    r#"Basic realm="llmroute admin", charset="UTF-8""#
                );
            } else {
                assert_eq!(challenge, "", "a tenant's key is not asked again");
            }
            assert_eq!(
                header(&refused, "content-type"),
                "text/plain; charset=utf-8"
            );
            assert_eq!(header(&refused, "cache-control"), "no-store");
            let body = refused.text().await.unwrap();
            assert!(
                body.ends_with('\n') && body.lines().count() == 1,
                "{body:?}"
            );
            assert!(body.contains("admin key"), "{body}");
            assert!(!body.contains(ACME) && !body.contains("<"), "{body}");
        }
    }

    // Any user name; the password is the admin key. A bearer admin key works too.
    let page = r.get_with("/ui", Some(&basic("anyone", ADMIN))).await;
    assert_eq!(page.status(), 200);
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    assert_eq!(
        header(&page, "content-security-policy"),
        "default-src 'self'"
    );
    assert_eq!(header(&page, "cache-control"), "no-store");
    let html = page.text().await.unwrap();
    assert!(html.contains("<noscript>"), "{html}");
    assert!(!html.contains(ADMIN));
    let bearer = format!("Bearer {ADMIN}");
    assert_eq!(r.get_with("/ui", Some(&bearer)).await.status(), 200);

    // Every file the page and its scripts name is served, with its type and the same headers.
    let css = r.get_with("/ui/app.css", Some(&basic("", ADMIN))).await;
    assert_eq!(css.status(), 200);
    assert_eq!(header(&css, "content-type"), "text/css; charset=utf-8");
    let mut scripts = vec!["app.js".to_owned()];
    let mut seen = Vec::new();
    while let Some(name) = scripts.pop() {
        if seen.contains(&name) {
            continue;
        }
        let js = r
            .get_with(&format!("/ui/{name}"), Some(&basic("", ADMIN)))
            .await;
        assert_eq!(js.status(), 200, "{name}");
        assert_eq!(
            header(&js, "content-type"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(header(&js, "content-security-policy"), "default-src 'self'");
        let text = js.text().await.unwrap();
        for import in text.split("from \"./").skip(1) {
            scripts.push(import.split('"').next().unwrap().to_owned());
        }
        seen.push(name);
    }
    assert!(seen.len() >= 4, "{seen:?}");
    assert!(html.contains("src=\"/ui/app.js\""));
    let icon = r.get_with("/ui/favicon.svg", Some(&basic("", ADMIN))).await;
    assert_eq!(header(&icon, "content-type"), "image/svg+xml");
    assert!(html.contains("href=\"/ui/favicon.svg\""));

    // `/ui/` sends the browser to `/ui`; other paths under it are unknown.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let slash = client.get(format!("{}/ui/", r.base)).send().await.unwrap();
    assert_eq!(slash.status(), 308);
    assert_eq!(header(&slash, "location"), "/ui");
    let other = r.get_with("/ui/nope.js", Some(&basic("", ADMIN))).await;
    assert_eq!(other.status(), 404);

    // Basic credentials open the admin API, never the tenant API.
    let (status, _) = r.models_status(ACME).await;
    assert_eq!(status, 200);
    let models = r.get_with("/v1/models", Some(&basic("", ACME))).await;
    assert_eq!(models.status(), 401);
    let keys = r.get_with("/admin/v1/keys", Some(&basic("x", ADMIN))).await;
    assert_eq!(keys.status(), 200);
}

#[tokio::test]
async fn a_browsers_change_needs_the_dashboards_header() {
    let r = admin_gateway().await;
    let create = |with_header: bool| {
        let mut req = r
            .http
            .post(format!("{}/admin/v1/keys", r.base))
            .header("authorization", basic("me", ADMIN))
            .json(&json!({"tenant": "acme", "name": "from-ui"}));
        if with_header {
            req = req.header("x-llmroute-ui", "1");
        }
        req.send()
    };
    let refused = create(false).await.unwrap();
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "browser_change_refused");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-llmroute-ui"),
        "{body}"
    );
    let (_, listed) = r.admin_get("/admin/v1/keys").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 3, "nothing made");
    let made = create(true).await.unwrap();
    assert_eq!(made.status(), 201);
    let made: Value = made.json().await.unwrap();
    let id = made["id"].as_str().unwrap();
    // Revoking is a change too.
    let revoke = r
        .http
        .post(format!("{}/admin/v1/keys/{id}/revoke", r.base))
        .header("authorization", basic("me", ADMIN))
        .send()
        .await
        .unwrap();
    assert_eq!(revoke.status(), 403);
    let (_, shown) = r.admin_get(&format!("/admin/v1/keys/{id}")).await;
    assert_eq!(shown["state"], "active");
}

#[tokio::test]
async fn deployments_show_use_limits_and_why_one_cools_down() {
    let r = admin_gateway().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "30")
                .set_body_raw(fixture("openai/rate_limit_429.json"), "application/json"),
        )
        .mount(&r.upstream)
        .await;
    // The only deployment cools down: the request fails within its deadline.
    let refused = r.post_with_deadline_1s(&hello()).await;
    assert!(!refused.status().is_success(), "{}", refused.status());
    let (status, body) = r.admin_get("/admin/v1/deployments").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "in-process");
    assert!(body["ledger"].is_null(), "{body}");
    let row = &body["data"][0];
    assert_eq!(row["name"], "oa/small");
    assert_eq!(row["price"]["input_per_mtok"], 2.0);
    assert_eq!(row["rpm"]["used"], 1, "{row}");
    assert!(row["concurrency"]["in_flight"].is_u64(), "{row}");
    assert!(row["cooldown_secs"].as_f64().unwrap() > 0.0, "{row}");
    assert_eq!(row["cooldown_cause"]["kind"], "rate_limited", "{row}");
    assert_eq!(row["cooldown_cause"]["status"], 429, "{row}");
    assert!(row["cooldown_cause"]["cooldown_secs"].as_f64().unwrap() > 0.0);

    let get = reqwest::Method::GET;
    let (status, _) = r
        .call(get.clone(), None, "/admin/v1/deployments", None)
        .await;
    assert_eq!(status, 401);
    let (status, body) = r.call(get, Some(ACME), "/admin/v1/deployments", None).await;
    assert_eq!(status, 403);
    assert!(body.get("data").is_none());
}

#[tokio::test]
async fn the_last_requests_and_hourly_series_come_from_the_usage_records() {
    let dir = tempfile::tempdir().unwrap();
    let (r, recorder) = gateway_with_usage(dir.path()).await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json"),
        )
        .up_to_n_times(2)
        .mount(&r.upstream)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_raw(fixture("openai/bad_request_400.json"), "application/json"),
        )
        .mount(&r.upstream)
        .await;
    assert_eq!(r.post(Some(ACME), &hello()).await.status(), 200);
    assert_eq!(r.post(Some(ACME), &hello()).await.status(), 200);
    assert_eq!(r.post(Some(ACME), &hello()).await.status(), 400);
    recorder.flush().await;

    let (status, body) = r.admin_get("/admin/v1/requests?limit=2").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"], true);
    let rows = body["data"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "as many as asked");
    assert!(rows[0]["at_ms"].as_u64() >= rows[1]["at_ms"].as_u64());
    assert_eq!(rows[0]["outcome"], "failed", "newest first: {body}");
    assert_eq!(rows[0]["failure"], "invalid");
    let ok = &rows[1];
    assert_eq!(ok["outcome"], "ok");
    assert_eq!(ok["tenant"], "acme");
    assert_eq!(ok["key_id"], hash_key(ACME)[..12]);
    assert_eq!(ok["model_asked"], "chat");
    assert_eq!(ok["served_by"], "oa/small");
    assert_eq!(ok["prompt_tokens"], 1117);
    assert_eq!(ok["completion_tokens"], 46);
    assert!(ok["cost_usd"].as_f64().unwrap() > 0.0, "{ok}");
    assert!(ok["latency_ms"].is_u64());
    let (_, all) = r.admin_get("/admin/v1/requests").await;
    assert_eq!(all["data"].as_array().unwrap().len(), 3);
    assert!(!all.to_string().contains(ACME));

    let (status, series) = r.admin_get("/admin/v1/series?hours=3").await;
    assert_eq!(status, 200, "{series}");
    let hours = series["data"].as_array().unwrap();
    assert_eq!(hours.len(), 3);
    // The hour may have turned since the requests: sum over the three.
    let sum = |field: &str| -> u64 { hours.iter().map(|h| h[field].as_u64().unwrap()).sum() };
    assert_eq!(sum("requests"), 3, "{series}");
    assert_eq!(sum("errors"), 1);
    assert_eq!(sum("limited"), 0);
    assert!(hours.iter().any(|h| h["cost_usd"].as_f64().unwrap() > 0.0));
    let starts: Vec<u64> = hours
        .iter()
        .map(|h| h["start_ms"].as_u64().unwrap())
        .collect();
    assert!(
        starts.windows(2).all(|w| w[1] - w[0] == 3_600_000),
        "{starts:?}"
    );
    assert!(starts[2] <= r.router.now_ms() && r.router.now_ms() < starts[2] + 3_600_000);
    // Requests today per tenant and per key (unless the UTC day turned since they were sent).
    let first = all["data"][2]["at_ms"].as_u64().unwrap();
    if first / 86_400_000 == r.router.now_ms() / 86_400_000 {
        let (_, tenants) = r.admin_get("/admin/v1/tenants").await;
        let acme = &tenants["data"][0];
        assert_eq!(acme["name"], "acme", "{tenants}");
        assert_eq!(acme["today"], json!({"requests": 3, "limited": 0}));
        let (_, keys) = r.admin_get("/admin/v1/keys").await;
        let id = &hash_key(ACME)[..12];
        let row = keys["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == id);
        assert_eq!(
            row.unwrap()["today"],
            json!({"requests": 3, "limited": 0}),
            "{keys}"
        );
    }
    let (_, day) = r.admin_get("/admin/v1/series").await;
    assert_eq!(
        day["data"].as_array().unwrap().len(),
        24,
        "24 hours by default"
    );

    for (path, name) in [
        ("/admin/v1/requests?limit=0", "limit"),
        ("/admin/v1/requests?limit=501", "limit"),
        ("/admin/v1/requests?limit=ten", "limit"),
        ("/admin/v1/requests?tenant=acme", "tenant"),
        ("/admin/v1/series?hours=169", "hours"),
        ("/admin/v1/series?hours=-1", "hours"),
    ] {
        let (status, body) = r.admin_get(path).await;
        assert_eq!(status, 400, "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{name}`")), "{path}: {message}");
    }
    let get = reqwest::Method::GET;
    for path in ["/admin/v1/requests", "/admin/v1/series"] {
        let (status, _) = r.call(get.clone(), None, path, None).await;
        assert_eq!(status, 401, "{path}");
        let (status, body) = r.call(get.clone(), Some(ACME), path, None).await;
        assert_eq!(status, 403, "{path}");
        assert!(body.get("data").is_none());
    }
}

#[tokio::test]
async fn without_a_usage_sink_requests_and_series_say_so_and_list_nothing() {
    let r = admin_gateway().await;
    for path in ["/admin/v1/requests?limit=5", "/admin/v1/series?hours=2"] {
        let (status, body) = r.admin_get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["usage"], false);
        assert_eq!(body["data"], json!([]));
        assert!(body["note"].as_str().unwrap().contains("usage"), "{body}");
    }
    // A bad parameter is still refused.
    let (status, _) = r.admin_get("/admin/v1/requests?limit=9999").await;
    assert_eq!(status, 400);
}
