//! The Gemini wire format through the router: tool calls (whole and streamed), images, JSON
//! schemas, cached-token usage and cost, extra headers and extra body fields. Request bodies are
//! matched whole against the documented shapes in `tests/fixtures/gemini/`.

use std::sync::Arc;

use futures_util::StreamExt;
use router_core::config::Registry;
use router_sdk::{
    ChatChunk, ChatRequest, Effort, FinishReason, Image, Message, Reasoning, ResponseFormat,
    Router, StaticKeys, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};
use serde_json::{Value, json};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer};

use crate::support::*;

const WHOLE: &str = "/v1beta/models/gemini-test:generateContent";
const STREAMED: &str = "/v1beta/models/gemini-test:streamGenerateContent";
const QUESTION: &str = "What's the weather in Boston and New York?";
const SYSTEM: &str = "You answer weather questions.";

/// USD per million tokens: input, output, cached input.
const PRICE: (f64, f64, f64) = (0.3, 2.5, 0.075);

/// A router with one Gemini deployment at `server`, priced with a cached-input price, with
/// every capability (reasoning is never assumed).
async fn router(server: &MockServer) -> Router {
    let up = Upstream::gemini("ge", (PRICE.0, PRICE.1));
    let yaml = config(&[(&up, server.uri())]).replace(
        &format!("price: {{ input: {}, output: {} }}", PRICE.0, PRICE.1),
        &format!(
            "price: {{ input: {}, output: {}, cached_input: {} }}\n        capabilities: [tools, vision, json_schema, reasoning]",
            PRICE.0, PRICE.1, PRICE.2
        ),
    );
    assert!(yaml.contains("cached_input"), "{yaml}");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let keys = StaticKeys::new().with(key_var("ge"), planted_key("ge"));
    Router::builder(registry)
        .keys(Arc::new(keys))
        .seed(7)
        .build()
        .await
        .unwrap()
}

fn gemini_fixture(name: &str) -> Value {
    serde_json::from_slice(&fixture(&format!("gemini/{name}"))).unwrap()
}

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("Get the current weather in a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": false,
        }),
        strict: true,
    }
}

/// The first turn: `request_tools.json`.
fn ask() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::system(SYSTEM), Message::user(QUESTION)],
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Function("get_weather".into())),
        top_p: Some(0.9),
        presence_penalty: Some(0.1),
        frequency_penalty: Some(0.2),
        seed: Some(42),
        reasoning: Some(Reasoning {
            effort: Some(Effort::Low),
            budget_tokens: Some(512),
        }),
        user: Some("user-7".into()),
        ..ChatRequest::default()
    }
}

/// The second turn, answering `calls` made after saying `text`: `request_tool_results.json`.
fn answer(text: &str, calls: Vec<ToolCall>) -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system(SYSTEM),
            Message::user(QUESTION),
            Message::assistant_calls(text, calls),
            Message::tool_result("call_0", r#"{"temperature": 22, "unit": "celsius"}"#),
            Message::tool_result("call_1", "Sunny, 25 C"),
        ],
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Auto),
        ..ChatRequest::default()
    }
}

/// The calls Gemini made in `function_call.json` and `function_call.sse` (it gave no ids).
fn made_calls() -> Vec<ToolCall> {
    let call = |id: &str, city: &str| ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: json!({ "city": city }).to_string(),
    };
    vec![call("call_0", "Boston"), call("call_1", "New York")]
}

#[tokio::test]
async fn a_tool_call_round_trip() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(WHOLE))
        .and(body_json(gemini_fixture("request_tools.json")))
        .respond_with(ok_json("gemini/function_call.json"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(WHOLE))
        .and(body_json(gemini_fixture("request_tool_results.json")))
        .respond_with(ok_json("gemini/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let router = router(&server).await;
    let first = router.chat(ask()).await.unwrap();
    assert_eq!(first.content, "Checking both.");
    assert_eq!(first.tool_calls, made_calls());
    assert_eq!(first.receipt.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        first.receipt.response_id.as_deref(),
        Some("fC7taK2pB5XRz7IP0ZqX8Qc")
    );
    let second = router
        .chat(answer(&first.content, first.tool_calls))
        .await
        .unwrap();
    assert_eq!(
        second.content,
        "AI learns patterns from data to make predictions."
    );
    assert!(second.tool_calls.is_empty());
    assert_eq!(second.receipt.finish_reason, Some(FinishReason::Stop));
}

/// Everything a stream yields: text, tool-call pieces, assembled calls, the receipt.
struct Streamed {
    text: String,
    deltas: Vec<ToolCallDelta>,
    calls: Option<Vec<ToolCall>>,
    done: router_sdk::Receipt,
}

async fn stream(router: &Router, req: ChatRequest) -> Streamed {
    let mut stream = router.chat_stream(req).await.unwrap();
    let (mut text, mut deltas, mut calls, mut done) = (String::new(), Vec::new(), None, None);
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ChatChunk::Delta(t) => text.push_str(&t),
            ChatChunk::ToolCallDelta(d) => deltas.push(d),
            ChatChunk::ToolCalls(c) => calls = Some(c),
            ChatChunk::Done(receipt) => done = Some(receipt),
            ChatChunk::Thinking(_) | ChatChunk::Thoughts(_) => {}
        }
    }
    Streamed {
        text,
        deltas,
        calls,
        done: done.expect("a Done item"),
    }
}

#[tokio::test]
async fn a_streamed_tool_call_round_trip() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(STREAMED))
        .and(query_param("alt", "sse"))
        .and(body_json(gemini_fixture("request_tools.json")))
        .respond_with(ok_sse("gemini/function_call.sse"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(STREAMED))
        .and(body_json(gemini_fixture("request_tool_results.json")))
        .respond_with(ok_sse("gemini/stream.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let router = router(&server).await;
    let first = stream(&router, ask()).await;
    assert_eq!(first.text, "Checking both.");
    let delta = |index: u32, city: &str| ToolCallDelta {
        index,
        id: Some(format!("call_{index}")),
        name: Some("get_weather".into()),
        arguments: json!({ "city": city }).to_string(),
    };
    assert_eq!(first.deltas, [delta(0, "Boston"), delta(1, "New York")]);
    assert_eq!(first.calls, Some(made_calls()));
    assert_eq!(first.done.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        first.done.response_id.as_deref(),
        Some("kD7taJ3xK6Hbz7IPrJmY4Qs")
    );
    assert_eq!(
        first.done.usage,
        Usage {
            reasoning_tokens: 50,
            ..Usage::new(70, 30 + 50)
        }
    );
    let calls = first.calls.unwrap();
    let second = stream(&router, answer(&first.text, calls)).await;
    assert_eq!(second.text, "The sky is blue.");
    assert!(second.deltas.is_empty() && second.calls.is_none());
    assert_eq!(second.done.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn an_image_request() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(WHOLE))
        .and(body_json(gemini_fixture("request_image.json")))
        .respond_with(ok_json("gemini/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let message = Message::user("What is in these images?")
        .with_image(Image::Base64 {
            media_type: "image/png".into(),
            data: png.into(),
        })
        .with_image(Image::Url {
            url: "https://example.com/photos/cat.JPG?size=large".into(),
        })
        .with_image(Image::Url {
            url: "https://example.com/render?id=7".into(),
        });
    let req = ChatRequest {
        messages: vec![message],
        ..ChatRequest::default()
    };
    router(&server).await.chat(req).await.unwrap();
}

#[tokio::test]
async fn a_json_schema_request() {
    let server = MockServer::start().await;
    let want = gemini_fixture("request_json_schema.json");
    Mock::given(method("POST"))
        .and(path(WHOLE))
        .and(body_json(&want))
        .respond_with(ok_json("gemini/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let req = ChatRequest {
        max_tokens: Some(400),
        temperature: Some(0.0),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "recipes".into(),
            schema: want["generationConfig"]["responseJsonSchema"].clone(),
            strict: true,
        }),
        ..ChatRequest::new("List two cookie recipes.")
    };
    router(&server).await.chat(req).await.unwrap();
}

#[tokio::test]
async fn cached_tokens_are_billed_at_the_cached_input_price() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(WHOLE))
        .respond_with(ok_json("gemini/cached.json"))
        .expect(1)
        .mount(&server)
        .await;
    let answer = router(&server)
        .await
        .chat(ChatRequest::new("When does the contract renew?"))
        .await
        .unwrap();
    assert_eq!(answer.content, "The contract renews on 1 March.");
    assert_eq!(
        answer.receipt.usage,
        Usage {
            cached_prompt_tokens: 8000,
            ..Usage::new(12_000, 100)
        }
    );
    let (input, output, cached) = PRICE;
    let want = ((12_000.0 - 8000.0) * input + 8000.0 * cached + 100.0 * output) / 1e6;
    assert!(
        (answer.receipt.cost_usd - want).abs() < 1e-12,
        "{} != {want}",
        answer.receipt.cost_usd
    );
}

#[tokio::test]
async fn extra_headers_and_extra_body_fields_reach_gemini() {
    let server = MockServer::start().await;
    // The caller's fields go in at the top level, after llmroute's own: they win, and an
    // object llmroute also wrote is merged into its own.
    let want = json!({
        "contents": [{"role": "user", "parts": [{"text": "Hello"}]}],
        "generationConfig": {"temperature": 0.5, "topK": 3},
        "safetySettings": [
            {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}
        ],
    });
    Mock::given(method("POST"))
        .and(path(WHOLE))
        .and(header("x-goog-api-key", planted_key("ge").as_str()))
        .and(header("x-trace-id", "trace-7"))
        .and(body_json(&want))
        .respond_with(ok_json("gemini/ok.json"))
        .expect(1)
        .mount(&server)
        .await;
    let mut extra_body = serde_json::Map::new();
    extra_body.insert("generationConfig".into(), json!({"topK": 3}));
    extra_body.insert("safetySettings".into(), want["safetySettings"].clone());
    let req = ChatRequest {
        temperature: Some(0.5),
        headers: vec![("x-trace-id".into(), "trace-7".into())],
        extra_body,
        ..ChatRequest::new("Hello")
    };
    router(&server).await.chat(req).await.unwrap();
}

#[tokio::test]
async fn extra_body_fields_that_decide_what_admission_reserves_are_refused() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ok_json("gemini/ok.json"))
        .expect(0)
        .mount(&server)
        .await;
    let router = router(&server).await;
    for (name, value, path) in [
        (
            "contents",
            json!([{"parts": [{"text": "a much longer prompt"}]}]),
            "contents",
        ),
        ("max_tokens", json!(60_000), "max_tokens"),
        ("stream", json!(true), "stream"),
        (
            "generationConfig",
            json!({"topK": 3, "maxOutputTokens": 60_000}),
            "generationConfig.maxOutputTokens",
        ),
    ] {
        let mut extra_body = serde_json::Map::new();
        extra_body.insert(name.into(), value);
        let req = ChatRequest {
            extra_body,
            ..ChatRequest::new("Hello")
        };
        let err = router.chat(req).await.unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, router_sdk::Error::InvalidRequest(_))
                && message.contains(&format!("`{path}`")),
            "{name}: {message}"
        );
    }
}
