//! `Router::check_deployments`: each deployment's key and model, asked of the provider's model
//! endpoint with the key in its header, and nothing else: no prompt, no chat call.

use router_sdk::{CheckOutcome, DeploymentCheck};
use serde_json::json;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// No POST reaches `server`: a check never sends a prompt.
async fn no_prompt(server: &MockServer) {
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(server)
        .await;
}

#[tokio::test]
async fn each_deployment_is_checked_by_its_free_model_endpoint_and_no_prompt_is_sent() {
    let w = World::new(&[
        Upstream::openai("oa", (2.0, 8.0)),
        Upstream::anthropic("an", (3.0, 15.0)),
        Upstream::gemini("ge", (1.0, 4.0)),
    ])
    .await;
    let list = json!({"object": "list", "data": [{"id": "gpt-test"}, {"id": "other"}]});
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .and(header(
            "authorization",
            format!("Bearer {}", planted_key("oa")).as_str(),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(list))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/models/claude-test"))
        .and(header("x-api-key", planted_key("an").as_str()))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(error_json(401, "anthropic/auth_401.json"))
        .expect(1)
        .mount(&w.servers[1])
        .await;
    Mock::given(method("GET"))
        .and(path("/v1beta/models/gemini-test"))
        .and(header("x-goog-api-key", planted_key("ge").as_str()))
        .respond_with(ResponseTemplate::new(404))
        .expect(1)
        .mount(&w.servers[2])
        .await;
    for server in &w.servers {
        no_prompt(server).await;
    }
    let checks = w.router.check_deployments().await;
    let outcome = |c: &DeploymentCheck| (c.provider.clone(), c.outcome.clone());
    let seen: Vec<_> = checks.iter().map(outcome).collect();
    assert_eq!(
        seen,
        [
            ("oa".to_owned(), CheckOutcome::Ok),
            (
                "an".to_owned(),
                CheckOutcome::KeyRefused { http_status: 401 }
            ),
            (
                "ge".to_owned(),
                CheckOutcome::ModelMissing { http_status: 404 }
            ),
        ]
    );
    let shown = format!("{checks:?}{}", serde_json::to_string(&checks).unwrap());
    for name in ["oa", "an", "ge"] {
        assert!(!shown.contains(&planted_key(name)), "{shown}");
    }
    assert_eq!(w.in_flight().await, 0, "nothing admitted");
}
