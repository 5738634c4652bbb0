//! Which deployments a request may reach: capabilities, the `providers` restriction and
//! routing rules, all decided before any provider is called.

use router_sdk::{ChatRequest, Error, Image, Message, Reasoning};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

use crate::features_openai::weather_tool;
use crate::support::*;

/// Two OpenAI-compatible providers on their own mock servers: `cheap` ($0.1 / $0.2, model
/// `small`, alias `chat`, capabilities `cheap_caps`) and `dear` ($2 / $8, model `large`, aliases
/// `chat` and `smart`, default capabilities); then `extra` YAML.
async fn two(cheap_caps: &str, extra: &str) -> World {
    let (cheap, dear) = (MockServer::start().await, MockServer::start().await);
    let yaml = format!(
        "defaults:\n  model: chat\nproviders:\n\
         - name: cheap\n  api: openai\n  base_url: {}/v1\n  api_key_env: {}\n  models:\n\
         \x20   - name: small\n      aliases: [chat]\n      price: {{ input: 0.1, output: 0.2 }}\n      capabilities: {cheap_caps}\n\
         - name: dear\n  api: openai\n  base_url: {}/v1\n  api_key_env: {}\n  models:\n\
         \x20   - name: large\n      aliases: [chat, smart]\n      price: {{ input: 2, output: 8 }}\n\
         {extra}",
        cheap.uri(),
        key_var("cheap"),
        dear.uri(),
        key_var("dear"),
    );
    World::from_yaml(&yaml, &["cheap", "dear"], vec![cheap, dear], |l| l).await
}

/// Each server answers `ok.json` and expects `calls` requests.
async fn answers(w: &World, calls: [u64; 2]) {
    for (server, n) in w.servers.iter().zip(calls) {
        Mock::given(method("POST"))
            .and(path(OPENAI_PATH))
            .respond_with(ok_json("openai/ok.json"))
            .expect(n)
            .mount(server)
            .await;
    }
}

fn with_tools() -> ChatRequest {
    ChatRequest {
        tools: vec![weather_tool()],
        ..ChatRequest::new("Weather in Boston?")
    }
}

#[tokio::test]
async fn a_request_with_tools_never_reaches_a_model_without_them() {
    let w = two("[vision]", "").await;
    answers(&w, [1, 1]).await;
    let served = w.router.chat(with_tools()).await.unwrap();
    assert_eq!(served.receipt.provider, "dear");
    // Without tools the cheaper model serves.
    let plain = w.router.chat(ChatRequest::new("Hi")).await.unwrap();
    assert_eq!(plain.receipt.provider, "cheap");
    let preview = w.router.preview(&with_tools()).unwrap();
    let providers: Vec<&str> = preview.candidates.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(providers, ["dear"]);
}

#[tokio::test]
async fn when_no_model_can_the_error_names_the_feature_and_the_models() {
    let w = two("[]", "").await;
    answers(&w, [0, 0]).await;
    let images = ChatRequest {
        model: Some("small".into()),
        messages: vec![Message::user("What is this?").with_image(Image::Url {
            url: "https://example.test/cat.png".into(),
        })],
        ..ChatRequest::default()
    };
    let err = w.router.chat(images).await.unwrap_err();
    match &err {
        Error::Unsupported {
            feature,
            capability,
            lacking,
        } => {
            assert_eq!(
                (feature.as_str(), capability.as_str()),
                ("images", "vision")
            );
            assert_eq!(lacking, &["cheap/small"]);
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("add `vision` to a model's `capabilities`")
    );
    // Reasoning is never assumed: no model here declares it.
    let reasoning = ChatRequest {
        reasoning: Some(Reasoning::default()),
        ..ChatRequest::new("Think.")
    };
    let err = w.router.chat(reasoning).await.unwrap_err().to_string();
    assert!(
        err.contains("reasoning controls") && err.contains("cheap/small, dear/large"),
        "{err}"
    );
}

#[tokio::test]
async fn a_request_may_name_its_providers() {
    let w = two("[tools]", "").await;
    answers(&w, [0, 1]).await;
    let only_dear = ChatRequest {
        providers: vec!["dear".into()],
        ..ChatRequest::new("Hi")
    };
    let served = w.router.chat(only_dear).await.unwrap();
    assert_eq!(served.receipt.provider, "dear");
    let unknown = ChatRequest {
        providers: vec!["elsewhere".into()],
        ..ChatRequest::new("Hi")
    };
    let err = w.router.chat(unknown).await.unwrap_err().to_string();
    assert!(
        err.contains("`elsewhere` is not a configured provider") && err.contains("cheap, dear"),
        "{err}"
    );
    let none_left = ChatRequest {
        model: Some("smart".into()),
        providers: vec!["cheap".into()],
        ..ChatRequest::new("Hi")
    };
    let err = w.router.chat(none_left).await.unwrap_err().to_string();
    assert!(err.contains("allows (cheap)"), "{err}");
}

const ROUTES: &str = "routes:\n  auto:\n    - when: { tools: true }\n      model: smart\n    \
                      - when: { prompt_tokens: { at_least: 1000 } }\n      model: smart\n    \
                      - model: small\n";

#[tokio::test]
async fn a_routed_alias_picks_the_model_by_the_request() {
    let w = two("[tools]", ROUTES).await;
    answers(&w, [2, 2]).await;
    let auto = |req: ChatRequest| ChatRequest {
        model: Some("auto".into()),
        ..req
    };
    let tools = w.router.chat(auto(with_tools())).await.unwrap();
    assert_eq!(tools.receipt.provider, "dear");
    let long = auto(ChatRequest::new("x".repeat(4000)));
    assert_eq!(w.router.chat(long).await.unwrap().receipt.provider, "dear");
    let short = w.router.chat(auto(ChatRequest::new("Hi"))).await.unwrap();
    assert_eq!(short.receipt.provider, "cheap");
    // Naming a model directly bypasses the rules.
    let direct = ChatRequest {
        model: Some("small".into()),
        ..with_tools()
    };
    assert_eq!(
        w.router.chat(direct).await.unwrap().receipt.provider,
        "cheap"
    );
}

#[tokio::test]
async fn preview_shows_the_rule_and_a_rule_change_shows_there() {
    let w = two("[tools]", ROUTES).await;
    let auto = ChatRequest {
        model: Some("auto".into()),
        ..ChatRequest::new("Hi")
    };
    let preview = w.router.preview(&auto).unwrap();
    let rule = preview.route.expect("a routed alias shows its rule");
    assert_eq!(rule.to_string(), "routes.auto[2] (always) -> small");
    assert_eq!(preview.candidates[0].1, "small");

    let changed = ROUTES.replace("at_least: 1000", "at_least: 1");
    let w = two("[tools]", &changed).await;
    let rule = w.router.preview(&auto).unwrap().route.unwrap();
    assert_eq!(
        rule.to_string(),
        "routes.auto[1] (prompt_tokens >= 1) -> smart"
    );
    assert_eq!(w.router.preview(&auto).unwrap().candidates[0].1, "large");
}

#[tokio::test]
async fn broken_tool_messages_fail_before_any_call() {
    let w = two("[tools]", "").await;
    answers(&w, [0, 0]).await;
    let mut bad_args = with_tools();
    bad_args.messages.push(Message::assistant_calls(
        "",
        vec![router_sdk::ToolCall {
            id: "call_1".into(),
            name: "get_current_weather".into(),
            arguments: "{not json".into(),
        }],
    ));
    let err = w.router.chat(bad_args).await.unwrap_err().to_string();
    assert!(
        err.contains("tool call `call_1`") && err.contains("not a JSON object"),
        "{err}"
    );
    let mut orphan = with_tools();
    orphan.messages.push(Message {
        tool_call_id: None,
        ..Message::tool_result("x", "42")
    });
    let err = w.router.chat(orphan).await.unwrap_err().to_string();
    assert!(err.contains("without `tool_call_id`"), "{err}");
    let unknown_choice = ChatRequest {
        tool_choice: Some(router_sdk::ToolChoice::Function("nope".into())),
        ..with_tools()
    };
    let err = w.router.chat(unknown_choice).await.unwrap_err().to_string();
    assert!(err.contains("`nope`"), "{err}");
    let bad_schema_name = ChatRequest {
        response_format: Some(router_sdk::ResponseFormat::JsonSchema {
            name: "my schema".into(),
            schema: serde_json::json!({"type": "object"}),
            strict: true,
        }),
        ..ChatRequest::new("Hi")
    };
    let err = w
        .router
        .chat(bad_schema_name)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("schema's name `my schema`"), "{err}");
}

#[tokio::test]
async fn anthropic_is_sent_the_output_cap_that_was_reserved() {
    let server = MockServer::start().await;
    let yaml = format!(
        "providers:\n  - name: an\n    api: anthropic\n    base_url: {}\n    api_key_env: {}\n    \
         models:\n      - {{ name: claude-test, aliases: [chat], price: {{ input: 1, output: 5 }}, \
         max_output_tokens: 1000 }}\n",
        server.uri(),
        key_var("an")
    );
    // Without max_tokens, Anthropic (which needs one) is sent the model's cap: what admission
    // reserved against its OTPM, not a constant of its own.
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(wiremock::matchers::body_partial_json(serde_json::json!({
            "max_tokens": 1000,
        })))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let w = World::from_yaml(&yaml, &["an"], vec![server], |l| l).await;
    let req = ChatRequest {
        model: Some("chat".into()),
        ..ChatRequest::new("Hi")
    };
    w.router.chat(req).await.unwrap();
}
