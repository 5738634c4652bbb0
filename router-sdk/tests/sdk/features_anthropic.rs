//! Anthropic through the router: tool calls (a round trip, whole and streamed), images, JSON
//! answers, cached-token prices, extra headers and extra body fields, each request body matched
//! against a fixture in Anthropic's documented shape.

use futures_util::StreamExt;
use router_sdk::{
    ChatChunk, ChatRequest, FinishReason, Image, Message, Receipt, ResponseFormat, ThinkingDelta,
    Thought, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Match, Mock, Request};

use crate::support::*;

/// Matches a request whose JSON body is exactly `0`.
struct BodyIs(Value);

impl Match for BodyIs {
    fn matches(&self, request: &Request) -> bool {
        serde_json::from_slice::<Value>(&request.body).is_ok_and(|body| body == self.0)
    }
}

/// The request fixture `name` (under `anthropic/`), with `"stream": true` when streamed.
fn request_fixture(name: &str, stream: bool) -> Value {
    let mut body: Value = serde_json::from_slice(&fixture(&format!("anthropic/{name}"))).unwrap();
    if stream {
        body["stream"] = true.into();
    }
    body
}

fn body_is(name: &str, stream: bool) -> BodyIs {
    BodyIs(request_fixture(name, stream))
}

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("Get the current weather in a given location".into()),
        parameters: json!({
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA"
                },
                "unit": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "description": "The unit of temperature, either 'celsius' or 'fahrenheit'"
                }
            },
            "required": ["location"]
        }),
        strict: false,
    }
}

/// The first turn of `request_tools.json`.
fn weather_request() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("Use the tools when they help."),
            Message::user("What's the weather like in San Francisco?"),
        ],
        max_tokens: Some(1024),
        top_p: Some(0.9),
        stop: vec!["###".into()],
        seed: Some(7),
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: Some(false),
        user: Some("user-42".into()),
        ..ChatRequest::default()
    }
}

/// `first` answered by running its calls: the turn of `request_tool_result.json`.
fn with_results(text: &str, calls: Vec<ToolCall>) -> ChatRequest {
    let mut req = weather_request();
    let results: Vec<Message> = calls
        .iter()
        .map(|c| Message::tool_result(c.id.clone(), "15 degrees"))
        .collect();
    req.messages.push(Message::assistant_calls(text, calls));
    req.messages.extend(results);
    req
}

const CALL_ID: &str = "toolu_01A09q90qw90lq917835lq9";
const SAID: &str = "I'll check the current weather in San Francisco for you.";

fn json_schema_request() -> ChatRequest {
    ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            name: "weather_report".into(),
            schema: json!({
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "temperature": {"type": "number"},
                    "condition": {"type": "string"}
                },
                "required": ["location", "temperature", "condition"]
            }),
            strict: true,
        }),
        ..ChatRequest::new("Report the weather in San Francisco.")
    }
}

/// The request of `request_image.json`: a base64 image and one at a URL.
fn image_request() -> ChatRequest {
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let ant =
        "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg";
    let message = Message::user("What is in these images?")
        .with_image(Image::Base64 {
            media_type: "image/png".into(),
            data: png.into(),
        })
        .with_image(Image::Url { url: ant.into() });
    ChatRequest {
        messages: vec![message],
        ..ChatRequest::default()
    }
}

/// Everything a stream yielded.
#[derive(Debug, Default)]
struct Streamed {
    text: String,
    pieces: Vec<ToolCallDelta>,
    calls: Option<Vec<ToolCall>>,
    thinking: Vec<ThinkingDelta>,
    thoughts: Option<Vec<Thought>>,
    receipt: Option<Receipt>,
}

async fn stream(world: &World, req: ChatRequest) -> Streamed {
    let mut stream = world.router.chat_stream(req).await.unwrap();
    let mut got = Streamed::default();
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ChatChunk::Delta(t) => got.text.push_str(&t),
            ChatChunk::ToolCallDelta(d) => got.pieces.push(d),
            ChatChunk::ToolCalls(calls) => {
                assert!(got.calls.is_none(), "ToolCalls comes once");
                got.calls = Some(calls);
            }
            ChatChunk::Thinking(piece) => got.thinking.push(piece),
            ChatChunk::Thoughts(thoughts) => {
                assert!(got.thoughts.is_none(), "Thoughts comes once");
                got.thoughts = Some(thoughts);
            }
            ChatChunk::Done(receipt) => got.receipt = Some(receipt),
        }
    }
    got
}

#[tokio::test]
async fn a_tool_call_round_trip() {
    let w = World::new(&[Upstream::anthropic("an", (3.0, 15.0))]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_is("request_tools.json", false))
        .respond_with(ok_json("anthropic/tool_use.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_is("request_tool_result.json", false))
        .respond_with(ok_json("anthropic/weather_answer.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let first = w.router.chat(weather_request()).await.unwrap();
    assert_eq!(first.content, SAID);
    let call = ToolCall {
        id: CALL_ID.into(),
        name: "get_weather".into(),
        arguments: r#"{"location":"San Francisco, CA","unit":"celsius"}"#.into(),
    };
    assert_eq!(first.tool_calls, [call]);
    assert_eq!(first.receipt.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        first.receipt.response_id.as_deref(),
        Some("msg_01Aq9w938a90dw8q")
    );
    let second = with_results(&first.content, first.tool_calls);
    let answer = w.router.chat(second).await.unwrap();
    assert_eq!(
        answer.content,
        "It is 15 degrees Celsius in San Francisco right now."
    );
    assert!(answer.tool_calls.is_empty());
    assert_eq!(answer.receipt.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn a_streamed_tool_call_round_trip() {
    let w = World::new(&[Upstream::anthropic("an", (3.0, 15.0))]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_is("request_tools.json", true))
        .respond_with(ok_sse("anthropic/tool_use.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_is("request_tool_result.json", true))
        .respond_with(ok_sse("anthropic/stream.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let first = stream(&w, weather_request()).await;
    assert_eq!(first.text, SAID);
    let piece = |arguments: &str| ToolCallDelta {
        index: 0,
        id: None,
        name: None,
        arguments: arguments.into(),
    };
    let start = ToolCallDelta {
        id: Some(CALL_ID.into()),
        name: Some("get_weather".into()),
        ..piece("")
    };
    let want = [
        start,
        piece("{\"location\":"),
        piece(" \"San Francisc"),
        piece("o, CA\", \"unit\": \"celsius\"}"),
    ];
    assert_eq!(first.pieces, want);
    let call = ToolCall {
        id: CALL_ID.into(),
        name: "get_weather".into(),
        arguments: r#"{"location": "San Francisco, CA", "unit": "celsius"}"#.into(),
    };
    assert_eq!(first.calls, Some(vec![call.clone()]));
    let receipt = first.receipt.expect("Done");
    assert_eq!(receipt.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        receipt.response_id.as_deref(),
        Some("msg_014p7gG3wDgGV9EUtLvnow3U")
    );
    assert_eq!(receipt.usage, Usage::new(472, 89));
    let second = stream(&w, with_results(&first.text, vec![call])).await;
    assert_eq!(second.text, "Hello!");
    assert!(second.pieces.is_empty() && second.calls.is_none());
    assert_eq!(
        second.receipt.expect("Done").finish_reason,
        Some(FinishReason::Stop)
    );
}

#[tokio::test]
async fn images_go_as_base64_and_url_sources() {
    let w = World::new(&[Upstream::anthropic("an", (3.0, 15.0))]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_is("request_image.json", false))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(image_request()).await.unwrap();
    assert_eq!(answer.content, "Hi! My name is Claude.");
}

#[tokio::test]
async fn a_json_schema_answer_is_the_content_whole_and_streamed() {
    let w = World::new(&[Upstream::anthropic("an", (3.0, 15.0))]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_is("request_json_schema.json", false))
        .respond_with(ok_json("anthropic/json_answer.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_is("request_json_schema.json", true))
        .respond_with(ok_sse("anthropic/json_answer.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let want = json!({"location": "San Francisco, CA", "temperature": 15, "condition": "sunny"});
    let whole = w.router.chat(json_schema_request()).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&whole.content).unwrap(), want);
    assert!(whole.tool_calls.is_empty());
    assert_eq!(whole.receipt.finish_reason, Some(FinishReason::Stop));
    let streamed = stream(&w, json_schema_request()).await;
    assert_eq!(serde_json::from_str::<Value>(&streamed.text).unwrap(), want);
    assert!(streamed.pieces.is_empty() && streamed.calls.is_none());
    let receipt = streamed.receipt.expect("Done");
    assert_eq!(receipt.finish_reason, Some(FinishReason::Stop));
    assert_eq!(receipt.usage, Usage::new(849, 47));
}

#[tokio::test]
async fn cached_prompt_tokens_are_billed_at_the_cached_input_price() {
    let up = Upstream {
        cached_input: Some(0.3),
        ..Upstream::anthropic("an", (3.0, 15.0))
    };
    let w = World::new(&[up]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    // ok.json: 21 input + 188 cache creation + 1800 cache read prompt tokens, 393 output.
    let usage = answer.receipt.usage;
    assert_eq!(
        usage,
        Usage {
            cached_prompt_tokens: 1800,
            cache_write_tokens: 188,
            ..Usage::new(2009, 393)
        }
    );
    // The 188 written to the cache at Anthropic's five-minute write price: 1.25 times input.
    let cost = (21.0 * 3.0 + 188.0 * 3.75 + 1800.0 * 0.3 + 393.0 * 15.0) / 1e6;
    assert!(
        (answer.receipt.cost_usd - cost).abs() < 1e-12,
        "{} != {cost}",
        answer.receipt.cost_usd
    );
}

#[tokio::test]
async fn extra_headers_and_extra_body_fields_reach_anthropic() {
    let w = World::new(&[Upstream::anthropic("an", (3.0, 15.0))]).await;
    let mut want = request_fixture("request_image.json", false);
    // The caller's fields go in as given (those that decide what admission reserves, such as
    // `max_tokens`, are refused: see features_gemini).
    want["top_k"] = 5.into();
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(header("anthropic-beta", "prompt-caching-2024-07-31"))
        .and(header("x-trace-id", "trace-7"))
        .and(header("anthropic-version", "2023-06-01"))
        .and(header("x-api-key", planted_key("an").as_str()))
        .and(BodyIs(want))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let extra = json!({"top_k": 5});
    let req = ChatRequest {
        headers: vec![
            ("anthropic-beta".into(), "prompt-caching-2024-07-31".into()),
            ("x-trace-id".into(), "trace-7".into()),
        ],
        extra_body: extra.as_object().unwrap().clone(),
        ..image_request()
    };
    let answer = w.router.chat(req).await.unwrap();
    assert_eq!(answer.content, "Hi! My name is Claude.");
}
