//! `/readyz?deployments=1`: each deployment's health as this instance judged it from real
//! traffic: unknown before any call, healthy after an answer, failing after an error that puts
//! no cooldown, cooling (with why) after one that does.

use super::*;

impl Running {
    /// `GET /readyz?deployments=1`'s only deployment.
    async fn deployment_health(&self) -> Value {
        let url = format!("{}/readyz?deployments=1", self.base);
        let response = self.http.get(url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], "ready", "{body}");
        body["deployments"][0].clone()
    }
}

/// The upstream's next answer: `status` with `fixture_name`, once.
async fn answers_once(r: &Running, status: u16, fixture_name: &str) {
    let answer =
        ResponseTemplate::new(status).set_body_raw(fixture(fixture_name), "application/json");
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(answer)
        .up_to_n_times(1)
        .mount(&r.upstream)
        .await;
}

#[tokio::test]
async fn each_deployment_is_unknown_healthy_failing_or_cooling_as_its_calls_went() {
    let r = start("", "").await;
    let plain = r
        .http
        .get(format!("{}/readyz", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.text().await.unwrap(), "ready\n");
    let d = r.deployment_health().await;
    assert_eq!(
        (d["name"].as_str(), d["state"].as_str()),
        (Some("oa/small"), Some("unknown"))
    );

    answers_once(&r, 200, "openai/ok.json").await;
    assert_eq!(r.post(Some(ACME), &hello()).await.status(), 200);
    let d = r.deployment_health().await;
    assert_eq!(d["state"], "healthy", "{d}");
    assert_eq!(d["last_call"]["outcome"], "ok");

    answers_once(&r, 400, "openai/bad_request_400.json").await;
    assert_eq!(r.post(Some(ACME), &hello()).await.status(), 400);
    let d = r.deployment_health().await;
    assert_eq!(d["state"], "failing", "{d}");
    assert_eq!(
        (
            d["last_call"]["outcome"].as_str(),
            d["last_call"]["status"].as_u64()
        ),
        (Some("invalid"), Some(400))
    );

    // Every answer a 500 from now on, saying to wait 30 s: the deployment cools down that long
    // (without a stated wait, its backoff's random draw may make the cooldown end before the
    // report is read).
    let broken = ResponseTemplate::new(500)
        .insert_header("retry-after", "30")
        .set_body_raw(fixture("openai/server_error_500.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(broken)
        .mount(&r.upstream)
        .await;
    let _ = r.post_with_deadline_1s(&hello()).await;
    let d = r.deployment_health().await;
    assert_eq!(d["state"], "cooling", "{d}");
    assert!(d["cooldown_secs"].as_f64().unwrap() > 0.0, "{d}");
    assert_eq!(d["cooldown_cause"]["status"], 500, "{d}");

    let bad = r
        .http
        .get(format!("{}/readyz?deployments=maybe", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert!(
        bad.text()
            .await
            .unwrap()
            .contains("`deployments` must be 1 or 0")
    );
}
