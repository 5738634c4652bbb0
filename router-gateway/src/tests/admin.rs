//! `/admin/v1` over a real socket: who may call it, the key lifecycle (create, use, update,
//! rotate with a grace that ends, expire, revoke), refusals naming the field, audit lines
//! without secrets, the tenants and the running configuration.

use router_core::clock::ManualClock;

use super::*;

/// An admin key of `gateway.admin_keys`.
pub(super) const ADMIN: &str = "llmr-admin-test-key";

/// 2027-01-01T00:00:00Z, on the gateway's clock.
const T0_MS: u64 = 1_798_761_600_000;

/// A gateway with an admin key, on `clock`.
async fn admin_gateway(clock: &ManualClock) -> Running {
    let upstream = MockServer::start().await;
    let extra = format!("  admin_keys: [{}]\n", hash_key(ADMIN));
    let yaml = yaml_over(&upstream.uri(), "", &extra);
    let clock: Arc<dyn router_core::clock::Clock> = Arc::new(clock.clone());
    start_access(upstream, &yaml, |a| a.with_clock(clock)).await
}

impl Running {
    /// `method path` with `key` and a JSON `body`: the status and the JSON answer.
    pub(super) async fn call(
        &self,
        method: reqwest::Method,
        key: Option<&str>,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let response = req.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(super) async fn admin_post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, Some(ADMIN), path, Some(body))
            .await
    }

    /// The status of `GET /v1/models` with `key`: whether the key gets in.
    pub(super) async fn models_status(&self, key: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, Some(key), "/v1/models", None)
            .await
    }
}

/// Creates a key of `acme` with `extra` fields: its id and secret.
pub(super) async fn created(r: &Running, extra: Value) -> (String, String) {
    let mut body = json!({"tenant": "acme", "name": "ci"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, key) = r.admin_post("/admin/v1/keys", body).await;
    assert_eq!(status, 201, "{key}");
    let id = key["id"].as_str().unwrap().to_owned();
    (id, key["key"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn the_admin_api_takes_admin_keys_only() {
    let r = admin_gateway(&ManualClock::new(T0_MS)).await;
    let get = reqwest::Method::GET;
    let (status, body) = r.call(get.clone(), None, "/admin/v1/keys", None).await;
    assert_eq!(status, 401, "{body}");
    let bare = r
        .http
        .get(format!("{}/admin/v1/keys", r.base))
        .send()
        .await
        .unwrap();
    let challenge = bare.headers().get("www-authenticate").unwrap();
    assert_eq!(
        challenge, "Bearer realm=\"llmroute\"",
        "a 401 names the scheme"
    );
    let (status, body) = r
        .call(get.clone(), Some("llmr-nope"), "/admin/v1/keys", None)
        .await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = r
        .call(get.clone(), Some(ACME), "/admin/v1/keys", None)
        .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "not_admin");
    // Nothing but the error: no key listed.
    assert!(body.get("data").is_none(), "{body}");
    // And an admin key is no tenant key.
    let (status, _) = r.models_status(ADMIN).await;
    assert_eq!(status, 401);
    let (status, body) = r.call(get, Some(ADMIN), "/admin/v1/keys", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["data"].as_array().unwrap().len(),
        3,
        "the three of `gateway.keys`"
    );
    assert!(
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["source"] == "config")
    );
}

#[tokio::test]
async fn a_created_key_serves_at_once_and_its_secret_is_shown_only_then() {
    let (logs, _capture) = llmroute_tests::Logs::capture();
    let r = admin_gateway(&ManualClock::new(T0_MS)).await;
    let (id, secret) = created(&r, json!({"models": ["chat"], "priority": "batch"})).await;
    assert!(id.starts_with("key_"), "{id}");
    let (status, models) = r.models_status(&secret).await;
    assert_eq!(status, 200, "{models}");
    assert_eq!(
        models["data"][0]["id"], "chat",
        "only the models it may use"
    );
    let get = reqwest::Method::GET;
    let (status, shown) = r
        .call(
            get.clone(),
            Some(ADMIN),
            &format!("/admin/v1/keys/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(shown["tenant"], "acme");
    assert_eq!(shown["state"], "active");
    assert_eq!(shown["priority"], "batch");
    let (_, listed) = r
        .call(get, Some(ADMIN), "/admin/v1/keys?tenant=acme", None)
        .await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 3, "{listed}");
    for text in [shown.to_string(), listed.to_string(), logs.text()] {
        assert!(!text.contains(&secret), "{text}");
        assert!(!text.contains(&hash_key(&secret)), "{text}");
    }
    let log = logs.text();
    assert!(
        log.contains("llmroute::audit") && log.contains("keys.create"),
        "{log}"
    );
    assert!(log.contains(&id) && log.contains(&format!("admin:{}", &hash_key(ADMIN)[..12])));
    assert!(!log.contains(ADMIN), "{log}");
}

#[tokio::test]
async fn a_rotated_keys_old_secret_works_for_its_grace_and_then_not() {
    let clock = ManualClock::new(T0_MS);
    let r = admin_gateway(&clock).await;
    let (id, old) = created(&r, json!({})).await;
    let (status, rotated) = r
        .admin_post(
            &format!("/admin/v1/keys/{id}/rotate"),
            json!({"grace_secs": 60}),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    assert_eq!(rotated["id"], id.as_str(), "the id survives rotation");
    let new = rotated["key"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(rotated["grace_until"], T0_MS / 1000 + 60);
    clock.advance_ms(59_000);
    assert_eq!(r.models_status(&old).await.0, 200);
    assert_eq!(r.models_status(&new).await.0, 200);
    clock.advance_ms(1_000);
    let (status, body) = r.models_status(&old).await;
    assert_eq!(status, 401);
    assert!(body.to_string().contains("grace period is over"), "{body}");
    assert_eq!(r.models_status(&new).await.0, 200);
}

#[tokio::test]
async fn a_revoked_key_is_refused_at_once_and_an_expired_one_at_its_time() {
    let clock = ManualClock::new(T0_MS);
    let r = admin_gateway(&clock).await;
    let (id, secret) = created(&r, json!({})).await;
    let (status, body) = r
        .call(
            reqwest::Method::DELETE,
            Some(ADMIN),
            &format!("/admin/v1/keys/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "revoked");
    let (status, body) = r.models_status(&secret).await;
    assert_eq!(status, 401);
    assert!(body.to_string().contains("revoked"), "{body}");
    // Revoked: no rotation, no change.
    let (status, body) = r
        .admin_post(&format!("/admin/v1/keys/{id}/rotate"), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    let patch = r
        .call(
            reqwest::Method::PATCH,
            Some(ADMIN),
            &format!("/admin/v1/keys/{id}"),
            Some(json!({"name": "x"})),
        )
        .await;
    assert_eq!(patch.0, 409, "{}", patch.1);
    // A key for a day works until the day ends.
    let (_, day) = created(&r, json!({"expires_in_days": 1})).await;
    clock.advance_ms(86_399_000);
    assert_eq!(r.models_status(&day).await.0, 200);
    clock.advance_ms(1_000);
    let (status, body) = r.models_status(&day).await;
    assert_eq!(status, 401);
    assert!(body.to_string().contains("expired"), "{body}");
}

#[tokio::test]
async fn an_update_changes_what_the_key_may_use() {
    let r = admin_gateway(&ManualClock::new(T0_MS)).await;
    let (id, secret) = created(&r, json!({})).await;
    let (status, body) = r
        .call(
            reqwest::Method::PATCH,
            Some(ADMIN),
            &format!("/admin/v1/keys/{id}"),
            Some(json!({"models": ["small"], "name": "renamed"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "renamed");
    let (_, models) = r.models_status(&secret).await;
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["small"]);
}

#[tokio::test]
async fn bad_admin_requests_name_what_is_wrong_and_change_nothing() {
    let r = admin_gateway(&ManualClock::new(T0_MS)).await;
    let cases = [
        (json!({"tenant": "acme", "colour": "red"}), "colour"),
        (json!({"name": "no tenant"}), "tenant"),
        (json!({"tenant": "ghost"}), "`ghost` has no tier"),
        (
            json!({"tenant": "acme", "models": ["chat", "nope"]}),
            "models[1]",
        ),
        (json!({"tenant": "acme", "expires_at": 5}), "in the past"),
        (
            json!({"tenant": "acme", "expires_at": 2_000_000_000u64, "expires_in_days": 1}),
            "not both",
        ),
        (json!({"tenant": "acme", "priority": "urgent"}), "priority"),
    ];
    for (body, named) in cases {
        let (status, answer) = r.admin_post("/admin/v1/keys", body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{body} -> {message}");
    }
    let get = reqwest::Method::GET;
    let (_, listed) = r
        .call(get.clone(), Some(ADMIN), "/admin/v1/keys", None)
        .await;
    assert_eq!(
        listed["data"].as_array().unwrap().len(),
        3,
        "nothing was created"
    );
    let (status, body) = r
        .call(
            get,
            Some(ADMIN),
            "/admin/v1/keys/key_0000000000000000",
            None,
        )
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "key_not_found");
    // A key of the file is read-only here.
    let config_id = &hash_key(ACME)[..12];
    let (status, body) = r
        .admin_post(&format!("/admin/v1/keys/{config_id}/revoke"), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("configuration file")
    );
    assert_eq!(r.models_status(ACME).await.0, 200);
}

#[tokio::test]
async fn tenants_and_the_running_configuration_are_shown_without_secrets() {
    let r = admin_gateway(&ManualClock::new(T0_MS)).await;
    created(&r, json!({})).await;
    let get = reqwest::Method::GET;
    let (status, tenants) = r
        .call(get.clone(), Some(ADMIN), "/admin/v1/tenants", None)
        .await;
    assert_eq!(status, 200, "{tenants}");
    let acme = tenants["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "acme")
        .unwrap()
        .clone();
    assert_eq!(acme["tier"], "pro");
    assert_eq!(
        acme["active_keys"], 3,
        "two of the file and the one created"
    );
    assert!(acme["spend"]["today_usd"].is_number(), "{acme}");
    let (status, config) = r.call(get, Some(ADMIN), "/admin/v1/config", None).await;
    assert_eq!(status, 200, "{config}");
    assert_eq!(config["providers"][0]["api_key_env"], "OA_KEY");
    assert_eq!(config["gateway"]["admin_keys"], 1);
    let text = config.to_string();
    for secret in [
        "sk-upstream-S3CRET",
        ADMIN,
        &hash_key(ADMIN),
        &hash_key(ACME),
    ] {
        assert!(!text.contains(secret), "{text}");
    }
}
