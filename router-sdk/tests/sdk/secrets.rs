//! Keys never leak: not in errors, attempts, Debug output or URLs. A missing key is named by its
//! variable.

use std::sync::Arc;

use router_core::config::Registry;
use router_sdk::{ChatRequest, Error, FailureClass, Router, StaticKeys};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

#[tokio::test]
async fn a_401_names_the_variable_and_nothing_shows_the_key() {
    let w = World::new(&[Upstream::openai("oa", (1.0, 1.0))]).await;
    // A provider that echoes the key back: it must be masked.
    let body = format!(
        r#"{{"error": {{"message": "Incorrect API key provided: {}.", "type": "invalid_request_error", "code": "invalid_api_key"}}}}"#,
        planted_key("oa")
    );
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(ResponseTemplate::new(401).set_body_raw(body, "application/json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let err = w.router.chat(ChatRequest::new("Hello")).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Provider {
                class: FailureClass::Auth,
                status: Some(401),
                ..
            }
        ),
        "{err:?}"
    );
    let shown = [
        err.to_string(),
        format!("{err:?}"),
        format!("{:?}", w.router),
        format!("{:?}", err.attempts()),
    ];
    for text in &shown {
        assert!(!text.contains(&planted_key("oa")), "key leaked: {text}");
        assert!(!text.contains("S3CRET"), "key leaked: {text}");
    }
    assert!(
        shown[0].contains("OA_API_KEY"),
        "names the variable: {}",
        shown[0]
    );
}

#[tokio::test]
async fn a_missing_key_names_the_variables_to_set() {
    let up = Upstream::openai("oa", (1.0, 1.0));
    let registry =
        Registry::from_yaml_str(&config(&[(&up, "http://127.0.0.1:9".into())]), "t.yaml").unwrap();
    let router = Router::builder(registry)
        .keys(Arc::new(StaticKeys::new()))
        .build()
        .await
        .unwrap();
    let err = router.chat(ChatRequest::new("Hello")).await.unwrap_err();
    assert!(
        matches!(&err, Error::MissingKey { vars, .. } if vars == &["OA_API_KEY".to_string()]),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "no API key set for `chat`: set OA_API_KEY");
}

#[tokio::test]
async fn an_unknown_model_lists_the_known_ones() {
    let w = World::new(&[Upstream::openai("oa", (1.0, 1.0))]).await;
    let req = ChatRequest {
        model: Some("gpt-9".into()),
        ..ChatRequest::new("Hello")
    };
    let err = w.router.chat(req).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown model `gpt-9`; known models and aliases: chat, gpt-test"
    );
}
