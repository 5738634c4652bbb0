//! A runtime key's own limits and budgets: shown, checked against its tenant's, changed field by
//! field, and enforced in admission beside its tenant's (a refusal names the key's limit, and
//! the tenant's other keys are not bound by it).

use router_core::clock::ManualClock;

use super::admin::{ADMIN, created};
use super::*;

/// 2027-01-01T00:00:00Z, on the gateway's clock.
const T0_MS: u64 = 1_798_761_600_000;

/// A gateway with an admin key whose tenant `acme` (tier `pro`) has `tier`.
async fn limited_gateway(tier: &str) -> Running {
    let upstream = MockServer::start().await;
    let extra = format!("  admin_keys: [{}]\n", hash_key(ADMIN));
    let yaml = yaml_over(&upstream.uri(), tier, &extra);
    let clock: Arc<dyn router_core::clock::Clock> = Arc::new(ManualClock::new(T0_MS));
    start_access(upstream, &yaml, |a| a.with_clock(clock)).await
}

impl Running {
    /// `PATCH /admin/v1/keys/{id}` with `body`.
    async fn patched(&self, id: &str, body: Value) -> (u16, Value) {
        let path = format!("/admin/v1/keys/{id}");
        self.call(reqwest::Method::PATCH, Some(ADMIN), &path, Some(body))
            .await
    }
}

#[tokio::test]
async fn a_keys_own_limits_are_shown_checked_against_its_tenants_and_patched_field_by_field() {
    let r = limited_gateway("rpm: 100, budget: { daily_usd: 5 }").await;
    let limits = json!({"limits": {"rpm": 10, "daily_usd": 2.5}});
    let (status, made) = r.admin_post("/admin/v1/keys", with_acme(limits)).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["limits"], json!({"rpm": 10, "daily_usd": 2.5}));
    let id = made["id"].as_str().unwrap();
    let cases = [
        (
            json!({"rpm": 500}),
            "`limits.rpm`: 500 is above tenant `acme`'s 100",
        ),
        (json!({"daily_usd": 6}), "`limits.daily_usd`: 6 is above"),
        (json!({"rpm": 0}), "`limits.rpm`: 0 admits nothing"),
        (
            json!({"monthly_usd": -1}),
            "`limits.monthly_usd`: -1 is no budget",
        ),
        (json!({"burst": 3}), "burst"),
    ];
    for (limits, words) in cases {
        let body = with_acme(json!({ "limits": limits }));
        let (status, answer) = r.admin_post("/admin/v1/keys", body).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(status, 400, "{limits}: {answer}");
        assert!(message.contains(words), "{limits}: {message}");
    }
    // A merge patch: a value sets, `null` removes, what is left out stays.
    let (status, body) = r
        .patched(id, json!({"limits": {"tpm": 1000, "rpm": null}}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["limits"], json!({"tpm": 1000, "daily_usd": 2.5}));
    let (status, body) = r.patched(id, json!({"limits": {"rpm": 101}})).await;
    assert_eq!(status, 400, "{body}");
    let (_, shown) = r
        .call(
            reqwest::Method::GET,
            Some(ADMIN),
            &format!("/admin/v1/keys/{id}"),
            None,
        )
        .await;
    assert_eq!(
        shown["limits"],
        json!({"tpm": 1000, "daily_usd": 2.5}),
        "unchanged"
    );
    let (status, body) = r.patched(id, json!({"limits": null})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["limits"], json!({}));
}

/// `body` for tenant `acme`.
fn with_acme(mut body: Value) -> Value {
    body["tenant"] = json!("acme");
    body
}

#[tokio::test]
async fn a_keys_own_rpm_refuses_with_429_naming_it_while_its_tenants_other_keys_are_served() {
    let r = limited_gateway("").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let (id, limited) = created(&r, json!({"limits": {"rpm": 2}})).await;
    let (_, free) = created(&r, json!({"name": "free"})).await;
    let send = |key: &str| {
        let url = format!("{}/v1/chat/completions", r.base);
        let req = r.http.post(url).bearer_auth(key);
        req.header("x-llmroute-timeout", "1").json(&hello()).send()
    };
    for _ in 0..2 {
        assert_eq!(send(&limited).await.unwrap().status(), 200);
    }
    let refused = send(&limited).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body = refused.text().await.unwrap();
    assert!(body.contains("key's rpm"), "{body}");
    assert_eq!(send(&free).await.unwrap().status(), 200);
    // The admin API shows the key's use against its own limits.
    let path = format!("/admin/v1/keys/{id}");
    let (_, shown) = r.call(reqwest::Method::GET, Some(ADMIN), &path, None).await;
    assert_eq!(
        shown["usage"]["rpm"],
        json!({"used": 2, "limit": 2}),
        "{shown}"
    );
    let (_, listed) = r
        .call(reqwest::Method::GET, Some(ADMIN), "/admin/v1/keys", None)
        .await;
    let free_row = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "free");
    assert!(free_row.unwrap().get("usage").is_none(), "{listed}");
}
