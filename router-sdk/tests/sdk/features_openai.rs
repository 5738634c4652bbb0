//! The full chat API on the OpenAI-compatible wire, through the router: a tool-call round trip
//! (whole and streamed), images, JSON schema, cached-token usage and cost, extra headers and
//! `extra_body`, each request body checked against a fixture in OpenAI's documented shape.

use futures_util::StreamExt;
use router_sdk::{
    ChatChunk, ChatRequest, FinishReason, Image, Message, ResponseFormat, Tool, ToolCall,
    ToolCallDelta, ToolChoice, Usage,
};
use serde_json::{Value, json};
use wiremock::matchers::{body_json, body_partial_json, header, method, path};
use wiremock::{Mock, MockServer};

use crate::support::*;

fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture(&format!("openai/{name}"))).unwrap()
}

/// The weather tool of OpenAI's function-calling guide.
pub fn weather_tool() -> Tool {
    Tool {
        name: "get_current_weather".into(),
        description: Some("Get the current weather in a given location".into()),
        parameters: json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        }),
        strict: false,
    }
}

fn ask_weather() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("What is the weather like in Boston today?")],
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: Some(false),
        ..ChatRequest::default()
    }
}

/// One OpenAI upstream serving `gpt-4o-mini` (alias `chat`, the default) at $2 / $8 per
/// million, $0.5 for cached input, with every capability.
pub async fn openai_world() -> World {
    let server = MockServer::start().await;
    let yaml = format!(
        "defaults:\n  model: chat\nproviders:\n  - name: oa\n    api: openai\n    base_url: {}/v1\n    \
         api_key_env: {}\n    models:\n      - name: gpt-4o-mini\n        aliases: [chat]\n        \
         price: {{ input: 2, output: 8, cached_input: 0.5 }}\n        \
         capabilities: [tools, vision, json_schema, reasoning]\n",
        server.uri(),
        key_var("oa")
    );
    World::from_yaml(&yaml, &["oa"], vec![server], |l| l).await
}

#[tokio::test]
async fn a_tool_call_round_trip_whole() {
    let w = openai_world().await;
    let mut first = fixture_json("request_tools.json");
    // The first turn: the question and the tool, nothing answered yet.
    first["messages"].as_array_mut().unwrap().truncate(1);
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_json(&first))
        .respond_with(ok_json("openai/tool_calls.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let req = ask_weather();
    let answer = w.router.chat(req.clone()).await.unwrap();
    assert_eq!(answer.receipt.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        answer.receipt.response_id.as_deref(),
        Some("chatcmpl-abc123")
    );
    let call = answer.tool_calls[0].clone();
    assert_eq!(
        (call.id.as_str(), call.name.as_str()),
        ("call_abc123", "get_current_weather")
    );
    let args: Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(args, json!({"location": "Boston, MA"}));

    // The second turn carries the call and its result, in the documented shape.
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_json(fixture_json("request_tools.json")))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let mut next = req;
    let sent = ToolCall {
        arguments: r#"{"location":"Boston, MA"}"#.into(),
        ..call
    };
    next.messages.push(Message::assistant_calls("", vec![sent]));
    next.messages.push(Message::tool_result(
        "call_abc123",
        r#"{"temperature":22,"unit":"celsius"}"#,
    ));
    let answer = w.router.chat(next).await.unwrap();
    assert_eq!(answer.content, "Hello! How can I help you today?");
    assert_eq!(answer.receipt.finish_reason, Some(FinishReason::Stop));
    // ok.json: 1117 prompt tokens, 1024 of them cached, 46 completion tokens.
    assert_eq!(answer.receipt.usage.cached_prompt_tokens, 1024);
    let cost = ((1117.0 - 1024.0) * 2.0 + 1024.0 * 0.5 + 46.0 * 8.0) / 1e6;
    assert!((answer.receipt.cost_usd - cost).abs() < 1e-12);
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn a_streamed_tool_call_arrives_in_pieces_then_whole() {
    let w = World::new(&[Upstream::openai("oa", (2.0, 8.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_partial_json(json!({
            "stream": true,
            "tools": [{"type": "function", "function": {"name": "get_current_weather"}}],
        })))
        .respond_with(ok_sse("openai/tool_calls.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let mut stream = w.router.chat_stream(ask_weather()).await.unwrap();
    let (mut pieces, mut whole, mut receipt) = (Vec::new(), None, None);
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ChatChunk::ToolCallDelta(d) => pieces.push(d),
            ChatChunk::ToolCalls(calls) => whole = Some(calls),
            ChatChunk::Done(r) => receipt = Some(r),
            ChatChunk::Thinking(_) | ChatChunk::Thoughts(_) => {}
            ChatChunk::Delta(t) => panic!("no text expected, got {t:?}"),
        }
    }
    assert_eq!(pieces.len(), 5);
    assert_eq!(
        pieces[0],
        ToolCallDelta {
            index: 0,
            id: Some("call_DdmO9pD3xa9XTPNJ32zg2hcA".into()),
            name: Some("get_weather".into()),
            arguments: String::new(),
        }
    );
    let whole = whole.expect("the assembled calls before Done");
    assert_eq!(whole.len(), 2);
    assert_eq!(whole[0].arguments, r#"{"location":"Paris"}"#);
    assert_eq!(whole[1].name, "get_time");
    let receipt = receipt.expect("Done");
    assert_eq!(receipt.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(receipt.response_id.as_deref(), Some("chatcmpl-tc1"));
    assert_eq!(
        receipt.usage,
        Usage {
            cached_prompt_tokens: 64,
            ..Usage::new(70, 25)
        }
    );
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn an_image_request() {
    let w = World::new(&[Upstream::openai("oa", (2.0, 8.0))]).await;
    let mut want = fixture_json("request_image.json");
    want["model"] = json!("gpt-test");
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_json(&want))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let url = want["messages"][0]["content"][1]["image_url"]["url"]
        .as_str()
        .unwrap();
    let message = Message::user("What's in these images?")
        .with_image(Image::Url { url: url.into() })
        .with_image(Image::Base64 {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        });
    let req = ChatRequest {
        messages: vec![message],
        max_tokens: Some(300),
        ..ChatRequest::default()
    };
    w.router.chat(req).await.unwrap();
}

#[tokio::test]
async fn a_json_schema_request_with_headers_and_extra_body() {
    // Reasoning needs a model that says it can: this one has every capability.
    let w = openai_world().await;
    let mut want = fixture_json("request_json_schema.json");
    // `extra_body` goes in as given, and wins over llmroute's own field.
    want["top_k"] = json!(40);
    want["seed"] = json!(7);
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(header("x-trace-id", "trace-42"))
        .and(body_json(&want))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let fixture = fixture_json("request_json_schema.json");
    let schema = fixture["response_format"]["json_schema"]["schema"].clone();
    let req = ChatRequest {
        messages: vec![
            Message::system("Extract the event information."),
            Message::user("Alice and Bob are going to a science fair on Friday."),
        ],
        response_format: Some(ResponseFormat::JsonSchema {
            name: "calendar_event".into(),
            schema,
            strict: true,
        }),
        seed: Some(42),
        top_p: Some(0.9),
        presence_penalty: Some(0.5),
        frequency_penalty: Some(0.25),
        reasoning: Some(router_sdk::Reasoning {
            effort: Some(router_sdk::Effort::Low),
            budget_tokens: None,
        }),
        user: Some("user-1234".into()),
        metadata: [("feature".to_owned(), "extract".to_owned())].into(),
        extra_body: json!({"top_k": 40, "seed": 7}).as_object().unwrap().clone(),
        headers: vec![("x-trace-id".into(), "trace-42".into())],
        request_id: Some("req-from-caller".into()),
        ..ChatRequest::default()
    };
    let answer = w.router.chat(req).await.unwrap();
    assert_eq!(answer.receipt.request_id, "req-from-caller");
}
