#![allow(clippy::unwrap_used)]

use super::body::JSON_TOOL;

/// The output cap the tests give the model.
const DEFAULT_MAX_TOKENS: u64 = 4096;
use super::*;
use crate::types::{
    Effort, Image, Message, Reasoning, ResponseFormat, StreamEvent, Tool, ToolCallDelta, ToolChoice,
};
use crate::wire::test_support::{decode_all, decode_all_for, request};
use router_core::config::Api;
use serde_json::json;

/// A request fixture: the body expected on the wire.
fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/anthropic/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// Reads a whole answer to `req`.
fn parse_for(req: &ChatRequest, body: &[u8]) -> Completion {
    Anthropic.parse_response(req, body).unwrap()
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
        strict: true,
    }
}

/// The first turn of the weather conversation: tools, sampling and the fields Anthropic has no
/// place for (seed, penalties, metadata tags).
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
        presence_penalty: Some(0.5),
        frequency_penalty: Some(0.25),
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: Some(false),
        user: Some("user-42".into()),
        metadata: [("team".to_owned(), "search".to_owned())].into(),
        ..ChatRequest::default()
    }
}

fn weather_call() -> ToolCall {
    ToolCall {
        id: "toolu_01A09q90qw90lq917835lq9".into(),
        name: "get_weather".into(),
        arguments: r#"{"location": "San Francisco, CA", "unit": "celsius"}"#.into(),
    }
}

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

#[test]
fn body_lifts_system_and_requires_max_tokens() {
    let want = json!({
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 64,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
        "temperature": 0.5,
        "stop_sequences": ["END"],
        "stream": true,
    });
    assert_eq!(
        body(
            "claude-sonnet-4-20250514",
            &request(),
            DEFAULT_MAX_TOKENS,
            true
        ),
        want
    );
    let mut two_systems = ChatRequest::new("Hi");
    two_systems
        .messages
        .insert(0, crate::types::Message::system("A."));
    two_systems
        .messages
        .insert(1, crate::types::Message::system("B."));
    let plain = body("m", &two_systems, DEFAULT_MAX_TOKENS, false);
    let want = json!({"model": "m", "max_tokens": DEFAULT_MAX_TOKENS, "system": "A.\n\nB.",
        "messages": [{"role": "user", "content": "Hi"}]});
    assert_eq!(plain, want);
}

#[test]
fn response_usage_counts_cache_as_prompt() {
    let body = include_bytes!("../../../tests/fixtures/anthropic/ok.json");
    let got = parse_response(body, None).unwrap();
    assert_eq!(got.id.as_deref(), Some("msg_013Zva2CMHLNnXjNJJKqJ2EF"));
    assert_eq!(got.content, "Hi! My name is Claude.");
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
    let prompt = 21 + 188 + 1800;
    let usage = Usage {
        cached_prompt_tokens: 1800,
        cache_write_tokens: 188,
        ..Usage::new(prompt, 393)
    };
    assert_eq!(got.usage, Some(usage));
}

#[test]
fn cache_writes_are_read_with_their_five_minute_and_hour_long_parts() {
    let body = include_bytes!("../../../tests/fixtures/anthropic/cache_writes.json");
    let got = parse_response(body, None).unwrap();
    let usage = Usage {
        cached_prompt_tokens: 500,
        cache_write_tokens: 3000,
        cache_write_1h_tokens: 2000,
        ..Usage::new(50 + 3000 + 500, 200)
    };
    assert_eq!(got.usage, Some(usage));
    // Only the breakdown: the writes are its sum. A delta without it keeps the start's.
    let mut s = Stream::default();
    let start = r#"{"type":"message_start","message":{"usage":{"input_tokens":10,
        "cache_creation":{"ephemeral_5m_input_tokens":30,"ephemeral_1h_input_tokens":40},
        "output_tokens":1}}}"#;
    s.event("message_start", start).unwrap();
    let delta = r#"{"type":"message_delta","delta":{},"usage":{"output_tokens":7}}"#;
    let usage = Usage {
        cache_write_tokens: 70,
        cache_write_1h_tokens: 40,
        ..Usage::new(80, 7)
    };
    assert_eq!(
        s.event("message_delta", delta).unwrap(),
        [StreamEvent::Usage(usage)]
    );
}

#[test]
fn finish_reasons() {
    for (name, want) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("refusal", FinishReason::ContentFilter),
        ("tool_use", FinishReason::ToolCalls),
        ("model_context_window_exceeded", FinishReason::Length),
        ("pause_turn", FinishReason::Other("pause_turn".into())),
    ] {
        assert_eq!(finish_reason(name), want);
    }
}

/// `usage` with the stream fixture's 100 cache-read and 10 cache-write tokens.
fn cached(usage: Usage) -> Usage {
    Usage {
        cached_prompt_tokens: 100,
        cache_write_tokens: 10,
        ..usage
    }
}

#[test]
fn stream_usage_is_assigned_not_added() {
    let sse = include_str!("../../../tests/fixtures/anthropic/stream.sse");
    let (events, failure) = decode_all(Api::Anthropic, sse);
    assert_eq!(failure, None);
    assert_eq!(
        events,
        [
            StreamEvent::Id("msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY".into()),
            StreamEvent::Ignore,
            StreamEvent::Ignore,
            StreamEvent::Delta("Hello".into()),
            StreamEvent::Delta("!".into()),
            StreamEvent::Ignore,
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(cached(Usage::new(135, 15))),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn message_delta_input_counts_replace_the_start_counts() {
    let mut s = Stream::default();
    let start =
        r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}"#;
    s.event("message_start", start).unwrap();
    let delta =
        r#"{"type":"message_delta","delta":{},"usage":{"input_tokens":12,"output_tokens":7}}"#;
    let usage = Usage::new(12, 7);
    assert_eq!(
        s.event("message_delta", delta).unwrap(),
        [StreamEvent::Usage(usage)]
    );
    let again = r#"{"type":"message_delta","delta":{},"usage":{"output_tokens":9}}"#;
    let usage = Usage::new(12, 9);
    assert_eq!(
        s.event("message_delta", again).unwrap(),
        [StreamEvent::Usage(usage)]
    );
}

#[test]
fn overloaded_error_event_after_200() {
    let sse = include_str!("../../../tests/fixtures/anthropic/stream_error_529.sse");
    let (events, failure) = decode_all(Api::Anthropic, sse);
    // message_start's usage is not reported: its output count is a placeholder.
    let want = [
        StreamEvent::Id("msg_01XFDUDYJgAACzvnptvVoYEL".into()),
        StreamEvent::Ignore,
        StreamEvent::Delta("Par".into()),
    ];
    assert_eq!(events, want);
    let failure = failure.unwrap();
    assert_eq!(failure.class, FailureClass::Overloaded);
    assert_eq!(
        (failure.status, failure.code.as_deref()),
        (None, Some("overloaded_error"))
    );
    assert_eq!(
        failure.class.kind(),
        router_core::retry::FailureKind::Overloaded
    );
}

#[test]
fn a_tool_conversation_has_tools_choice_and_results_in_the_documented_shape() {
    let first = weather_request();
    assert_eq!(
        body("claude-test", &first, DEFAULT_MAX_TOKENS, false),
        fixture("request_tools.json")
    );
    let mut second = weather_request();
    second.messages.extend([
        Message::assistant_calls(
            "I'll check the current weather in San Francisco for you.",
            vec![weather_call()],
        ),
        Message::tool_result("toolu_01A09q90qw90lq917835lq9", "15 degrees"),
    ]);
    assert_eq!(
        body("claude-test", &second, DEFAULT_MAX_TOKENS, false),
        fixture("request_tool_result.json")
    );
}

#[test]
fn consecutive_tool_results_and_the_next_user_message_make_one_user_turn() {
    let call = |id: &str, city: &str| ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: format!(r#"{{"location": "{city}"}}"#),
    };
    let chart = Image::Base64 {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    };
    let req = ChatRequest {
        messages: vec![
            Message::user("Paris or Rome?"),
            Message::assistant_calls("", vec![call("toolu_1", "Paris"), call("toolu_2", "Rome")]),
            Message::tool_result("toolu_1", "18 degrees"),
            Message::tool_result("toolu_2", "24 degrees").with_image(chart),
            Message::user("Which is warmer?"),
            Message::user("Answer in one word."),
        ],
        ..ChatRequest::default()
    };
    let want = json!([
        {"role": "user", "content": "Paris or Rome?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"location": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"location": "Rome"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 degrees"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [
                {"type": "text", "text": "24 degrees"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ]},
            {"type": "text", "text": "Which is warmer?"},
        ]},
        {"role": "user", "content": "Answer in one word."},
    ]);
    assert_eq!(body("m", &req, DEFAULT_MAX_TOKENS, false)["messages"], want);
}

#[test]
fn arguments_that_are_not_an_object_are_sent_as_an_empty_input() {
    let bad = ToolCall {
        arguments: "not json".into(),
        ..weather_call()
    };
    let req = ChatRequest {
        messages: vec![Message::assistant_calls("", vec![bad])],
        ..ChatRequest::default()
    };
    assert_eq!(
        body("m", &req, DEFAULT_MAX_TOKENS, false)["messages"][0]["content"][0]["input"],
        json!({})
    );
}

#[test]
fn images_are_base64_or_url_sources() {
    let req = ChatRequest {
        messages: vec![
            Message::user("What is in these images?")
                .with_image(Image::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==".into(),
                })
                .with_image(Image::Url {
                    url: "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg".into(),
                }),
        ],
        ..ChatRequest::default()
    };
    assert_eq!(
        body("claude-test", &req, DEFAULT_MAX_TOKENS, false),
        fixture("request_image.json")
    );
}

#[test]
fn a_json_schema_is_a_forced_answer_tool() {
    assert_eq!(
        body(
            "claude-test",
            &json_schema_request(),
            DEFAULT_MAX_TOKENS,
            false
        ),
        fixture("request_json_schema.json")
    );
    let object = ChatRequest {
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatRequest::new("Hi")
    };
    let got = body("m", &object, DEFAULT_MAX_TOKENS, false);
    let tool = json!([{
        "name": JSON_TOOL,
        "description": "Give your final answer as this tool's input.",
        "input_schema": {"type": "object"},
    }]);
    assert_eq!(got["tools"], tool);
    assert_eq!(
        got["tool_choice"],
        json!({"type": "tool", "name": JSON_TOOL})
    );
    let text = ChatRequest {
        response_format: Some(ResponseFormat::Text),
        ..ChatRequest::new("Hi")
    };
    assert_eq!(
        body("m", &text, DEFAULT_MAX_TOKENS, false).get("tools"),
        None
    );
}

#[test]
fn the_answer_tool_goes_next_to_the_requests_own_tools() {
    let choice = |tool_choice: Option<ToolChoice>| {
        let req = ChatRequest {
            tools: vec![weather_tool()],
            tool_choice,
            parallel_tool_calls: Some(false),
            ..json_schema_request()
        };
        let got = body("m", &req, DEFAULT_MAX_TOKENS, false);
        let names: Vec<&str> = got["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["get_weather", "weather_report"]);
        got["tool_choice"].clone()
    };
    let any = json!({"type": "any", "disable_parallel_tool_use": true});
    assert_eq!(choice(None), any);
    assert_eq!(choice(Some(ToolChoice::Auto)), any);
    assert_eq!(choice(Some(ToolChoice::Required)), any);
    assert_eq!(
        choice(Some(ToolChoice::None)),
        json!({"type": "tool", "name": "weather_report", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        choice(Some(ToolChoice::Function("get_weather".into()))),
        json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true})
    );
}

#[test]
fn tool_choices() {
    let choice = |tool_choice: Option<ToolChoice>, parallel: Option<bool>| {
        let req = ChatRequest {
            tools: vec![weather_tool()],
            tool_choice,
            parallel_tool_calls: parallel,
            ..ChatRequest::new("Hi")
        };
        body("m", &req, DEFAULT_MAX_TOKENS, false)
            .get("tool_choice")
            .cloned()
    };
    assert_eq!(choice(None, None), None);
    assert_eq!(choice(None, Some(true)), None);
    assert_eq!(
        choice(None, Some(false)),
        Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
    );
    assert_eq!(
        choice(Some(ToolChoice::Auto), None),
        Some(json!({"type": "auto"}))
    );
    assert_eq!(
        choice(Some(ToolChoice::Required), Some(true)),
        Some(json!({"type": "any"}))
    );
    assert_eq!(
        choice(Some(ToolChoice::None), Some(false)),
        Some(json!({"type": "none"}))
    );
    assert_eq!(
        choice(Some(ToolChoice::Function("get_weather".into())), None),
        Some(json!({"type": "tool", "name": "get_weather"}))
    );
}

#[test]
fn thinking_fits_its_budget_under_what_was_reserved() {
    let req = |reasoning: Reasoning, max_tokens: Option<u64>| ChatRequest {
        reasoning: Some(reasoning),
        max_tokens,
        temperature: Some(0.2),
        top_p: Some(0.5),
        ..ChatRequest::new("Hi")
    };
    let high = Reasoning {
        effort: Some(Effort::High),
        budget_tokens: None,
    };
    let got = body("m", &req(high, Some(20_000)), DEFAULT_MAX_TOKENS, false);
    assert_eq!(
        got["thinking"],
        json!({"type": "enabled", "budget_tokens": 16_384})
    );
    assert_eq!(got["max_tokens"], 20_000, "above the budget: as asked");
    assert_eq!((got.get("temperature"), got.get("top_p")), (None, None));
    // The budget is cut below max_tokens: the provider never counts more than was reserved.
    let got = body("m", &req(high, Some(8_000)), DEFAULT_MAX_TOKENS, false);
    assert_eq!(
        (&got["max_tokens"], &got["thinking"]["budget_tokens"]),
        (&json!(8_000), &json!(7_999))
    );
    let small = Reasoning {
        effort: None,
        budget_tokens: Some(100),
    };
    let got = body("m", &req(small, Some(2_000)), DEFAULT_MAX_TOKENS, false);
    assert_eq!(got["thinking"]["budget_tokens"], 1024, "Anthropic's least");
    // Effort `none`: no thinking, and the sampling settings go as asked.
    let none = Reasoning {
        effort: Some(Effort::None),
        budget_tokens: None,
    };
    let got = body("m", &req(none, Some(2_000)), DEFAULT_MAX_TOKENS, false);
    assert_eq!(got.get("thinking"), None);
    assert_eq!((&got["temperature"], got.get("top_p")), (&json!(0.2), None));
    // No room for the least budget under max_tokens: no thinking.
    let got = body("m", &req(small, Some(1_024)), DEFAULT_MAX_TOKENS, false);
    assert_eq!(
        (got.get("thinking"), &got["max_tokens"]),
        (None, &json!(1_024))
    );
    // Without max_tokens, the model's output cap is sent, thinking below it.
    let default = body("m", &req(Reasoning::default(), None), 6_000, false);
    assert_eq!(default["max_tokens"], 6_000);
    assert_eq!(default["thinking"]["budget_tokens"], 4096);
    let top_p = ChatRequest {
        top_p: Some(0.95),
        ..req(Reasoning::default(), None)
    };
    assert_eq!(body("m", &top_p, DEFAULT_MAX_TOKENS, false)["top_p"], 0.95);
    let json = ChatRequest {
        reasoning: Some(Reasoning::default()),
        ..json_schema_request()
    };
    assert_eq!(
        body("m", &json, DEFAULT_MAX_TOKENS, false)["tool_choice"],
        json!({"type": "auto"}),
        "thinking refuses forced tool use"
    );
}

#[test]
fn tool_use_answers_are_tool_calls() {
    let body = include_bytes!("../../../tests/fixtures/anthropic/tool_use.json");
    let got = parse_for(&weather_request(), body);
    assert_eq!(got.id.as_deref(), Some("msg_01Aq9w938a90dw8q"));
    assert_eq!(
        got.content,
        "I'll check the current weather in San Francisco for you."
    );
    let call = ToolCall {
        arguments: r#"{"location":"San Francisco, CA","unit":"celsius"}"#.into(),
        ..weather_call()
    };
    assert_eq!(got.tool_calls, [call]);
    assert_eq!(got.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(got.usage, Some(Usage::new(472, 89)));
}

#[test]
fn thinking_blocks_are_not_the_answer_but_are_carried() {
    let body = include_bytes!("../../../tests/fixtures/anthropic/thinking.json");
    let got = parse_for(&ChatRequest::new("GCD?"), body);
    assert_eq!(got.content, "Based on my analysis, the answer is 21.");
    assert!(got.tool_calls.is_empty());
    assert_eq!(got.usage, Some(Usage::new(48, 1210)));
    // The thinking is carried, signed or redacted, for the next turn.
    assert_eq!(got.thinking.len(), 2);
    assert!(got.thinking.iter().all(|t| t.goes_to(Api::Anthropic)));
    assert!(got.thinking[1].redacted.is_some());
}

#[test]
fn the_answer_tools_input_is_the_content() {
    let body = include_bytes!("../../../tests/fixtures/anthropic/json_answer.json");
    let got = parse_for(&json_schema_request(), body);
    let answer: Value = serde_json::from_str(&got.content).unwrap();
    let want = json!({"location": "San Francisco, CA", "temperature": 15, "condition": "sunny"});
    assert_eq!(answer, want);
    assert!(got.tool_calls.is_empty());
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
    // Without the response format, the same block is a tool call.
    let plain = parse_for(&ChatRequest::new("Hi"), body);
    assert_eq!(plain.content, "");
    assert_eq!(plain.tool_calls.len(), 1);
    assert_eq!(plain.finish_reason, Some(FinishReason::ToolCalls));
}

#[test]
fn streamed_tool_use_is_tool_call_pieces() {
    let sse = include_str!("../../../tests/fixtures/anthropic/tool_use.sse");
    let (events, failure) = decode_all(Api::Anthropic, sse);
    assert_eq!(failure, None);
    let piece = |arguments: &str| {
        StreamEvent::ToolCall(ToolCallDelta {
            index: 0,
            id: None,
            name: None,
            arguments: arguments.into(),
        })
    };
    let want = [
        StreamEvent::Id("msg_014p7gG3wDgGV9EUtLvnow3U".into()),
        StreamEvent::Ignore,
        StreamEvent::Ignore,
        StreamEvent::Delta("I'll check the current weather".into()),
        StreamEvent::Delta(" in San Francisco for you.".into()),
        StreamEvent::Ignore,
        StreamEvent::ToolCall(ToolCallDelta {
            index: 0,
            id: Some("toolu_01A09q90qw90lq917835lq9".into()),
            name: Some("get_weather".into()),
            arguments: String::new(),
        }),
        StreamEvent::Ignore,
        piece("{\"location\":"),
        piece(" \"San Francisc"),
        piece("o, CA\", \"unit\": \"celsius\"}"),
        StreamEvent::Ignore,
        StreamEvent::Finish(FinishReason::ToolCalls),
        StreamEvent::Usage(Usage::new(472, 89)),
        StreamEvent::Done,
    ];
    assert_eq!(events, want);
}

#[test]
fn streamed_tool_calls_are_numbered_by_their_order_among_tool_use_blocks() {
    let mut s = Stream::new(None);
    let start = |index: u32, id: &str| {
        format!(
            r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"tool_use","id":"{id}","name":"get_weather","input":{{}}}}}}"#
        )
    };
    let json = |index: u32, text: &str| {
        format!(
            r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"input_json_delta","partial_json":"{text}"}}}}"#
        )
    };
    let text =
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
    assert_eq!(s.event("content_block_start", text).unwrap(), []);
    let first = s
        .event("content_block_start", &start(1, "toolu_a"))
        .unwrap();
    let second = s
        .event("content_block_start", &start(2, "toolu_b"))
        .unwrap();
    let index = |events: &[StreamEvent]| match events {
        [StreamEvent::ToolCall(d)] => (d.index, d.id.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(index(&first), (0, Some("toolu_a".into())));
    assert_eq!(index(&second), (1, Some("toolu_b".into())));
    let piece = s.event("content_block_delta", &json(1, "{}")).unwrap();
    assert_eq!(index(&piece), (0, None));
    let piece = s.event("content_block_delta", &json(2, "{}")).unwrap();
    assert_eq!(index(&piece), (1, None));
    assert_eq!(s.event("content_block_delta", &json(7, "{}")).unwrap(), []);
}

#[test]
fn the_streamed_answer_tools_json_is_the_text() {
    let sse = include_str!("../../../tests/fixtures/anthropic/json_answer.sse");
    let (events, failure) = decode_all_for(Api::Anthropic, &json_schema_request(), sse);
    assert_eq!(failure, None);
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Delta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["temperature"], 15);
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::ToolCall(_))));
    assert!(events.contains(&StreamEvent::Finish(FinishReason::Stop)));
    assert_eq!(events.last(), Some(&StreamEvent::Done));
}

#[test]
fn streamed_thinking_is_carried_apart_from_the_answer() {
    let sse = include_str!("../../../tests/fixtures/anthropic/thinking.sse");
    let (events, failure) = decode_all(Api::Anthropic, sse);
    assert_eq!(failure, None);
    let mut thoughts = crate::thinking::ThoughtAssembly::new(Api::Anthropic);
    let said: Vec<&StreamEvent> = events
        .iter()
        .filter(|e| match e {
            StreamEvent::Thinking(piece) => {
                thoughts.push(piece);
                false
            }
            e => !matches!(e, StreamEvent::Ignore),
        })
        .collect();
    let want = [
        StreamEvent::Id("msg_01LQCYJ3VNHn2Vo8ZyCnZJvL".into()),
        StreamEvent::Delta("The greatest common divisor of 1071 and 462 is **21**.".into()),
        StreamEvent::Finish(FinishReason::Stop),
        StreamEvent::Usage(Usage::new(48, 1210)),
        StreamEvent::Done,
    ];
    assert_eq!(said, want.iter().collect::<Vec<_>>());
    let thoughts = thoughts.take();
    assert_eq!(thoughts.len(), 1, "{thoughts:?}");
    assert!(thoughts[0].text.starts_with("I need to find the GCD"));
    assert!(
        thoughts[0]
            .signature
            .as_deref()
            .is_some_and(|s| s.starts_with("EqQBCgIYAhIM"))
    );
}

#[test]
fn temperature_and_top_p_are_never_sent_together() {
    // Anthropic's newer models refuse the two together: the temperature is sent.
    let both = ChatRequest {
        temperature: Some(0.5),
        top_p: Some(0.9),
        ..ChatRequest::new("Hi")
    };
    let got = body("claude-sonnet-4-5", &both, 4096, false);
    assert_eq!(
        (got["temperature"].as_f64(), got.get("top_p")),
        (Some(0.5), None)
    );
    let top_p = ChatRequest {
        top_p: Some(0.9),
        ..ChatRequest::new("Hi")
    };
    let got = body("claude-sonnet-4-5", &top_p, 4096, false);
    assert_eq!(
        (got.get("temperature"), got["top_p"].as_f64()),
        (None, Some(0.9))
    );
}

/// A JSON answer with thinking: the answer tool is offered with `auto`, and the model may say
/// something before it calls it.
const TEXT_THEN_ANSWER: &str = r#"{"id": "msg_1", "type": "message", "role": "assistant",
  "content": [
    {"type": "thinking", "thinking": "The user wants the weather.", "signature": "sig"},
    {"type": "text", "text": "Here is the report:"},
    {"type": "tool_use", "id": "toolu_1", "name": "weather_report",
     "input": {"location": "San Francisco, CA", "temperature": 15, "condition": "sunny"}}
  ],
  "stop_reason": "tool_use",
  "usage": {"input_tokens": 10, "output_tokens": 20}}"#;

#[test]
fn text_before_the_answer_tool_is_not_part_of_a_json_answer() {
    let got = parse_for(&json_schema_request(), TEXT_THEN_ANSWER.as_bytes());
    let answer: Value = serde_json::from_str(&got.content).unwrap();
    assert_eq!(answer["temperature"], 15);
    // No answer tool came: the text is the answer.
    let text_only = r#"{"id": "msg_2", "type": "message", "role": "assistant",
      "content": [{"type": "text", "text": "{\"temperature\": 15}"}],
      "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 5}}"#;
    let got = parse_for(&json_schema_request(), text_only.as_bytes());
    assert_eq!(got.content, r#"{"temperature": 15}"#);
}

/// The streamed text of `sse`, decoded for a JSON-schema request.
fn streamed_json_text(sse: &str) -> String {
    let (events, failure) = decode_all_for(Api::Anthropic, &json_schema_request(), sse);
    assert_eq!(failure, None);
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Delta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn streamed_text_before_the_answer_tool_is_held_back_and_dropped() {
    let start = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Here is the report:"}}

"#;
    let tool = r#"event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"weather_report","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"temperature\": 15}"}}

"#;
    let end = |reason: &str| {
        format!(
            "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{reason}\"}},\"usage\":{{\"output_tokens\":20}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        )
    };
    let with_tool = format!("{start}{tool}{}", end("tool_use"));
    assert_eq!(streamed_json_text(&with_tool), r#"{"temperature": 15}"#);
    // No answer tool came: the held text is the answer, given before the finish.
    let text_only = format!("{start}{}", end("end_turn"));
    assert_eq!(streamed_json_text(&text_only), "Here is the report:");
    // Nor at the end without a stop reason before it.
    let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    assert_eq!(
        streamed_json_text(&format!("{start}{stop}")),
        "Here is the report:"
    );
}

#[test]
fn thinking_tokens_are_reasoning_whole_and_streamed() {
    let body = br#"{"id": "msg_t", "type": "message", "role": "assistant",
      "content": [{"type": "thinking", "thinking": "Factor it.", "signature": "sig"},
                  {"type": "text", "text": "x = 1, 2, 3"}],
      "stop_reason": "end_turn",
      "usage": {"input_tokens": 51, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0, "output_tokens": 700,
                "output_tokens_details": {"thinking_tokens": 139}}}"#;
    let thinking = |reasoning, completion| Usage {
        reasoning_tokens: reasoning,
        ..Usage::new(51, completion)
    };
    let got = parse_response(body, None).unwrap();
    assert_eq!(got.usage, Some(thinking(139, 700)));
    // Streamed: cumulative, so each message_delta's count replaces the last (never added), and
    // one that leaves it out keeps it.
    let mut s = Stream::default();
    let start =
        r#"{"type":"message_start","message":{"usage":{"input_tokens":51,"output_tokens":2}}}"#;
    s.event("message_start", start).unwrap();
    let delta = |usage: &str| format!(r#"{{"type":"message_delta","delta":{{}},"usage":{usage}}}"#);
    let steps = [
        (
            r#"{"output_tokens":300,"output_tokens_details":{"thinking_tokens":120}}"#,
            thinking(120, 300),
        ),
        (r#"{"output_tokens":400}"#, thinking(120, 400)),
        (
            r#"{"output_tokens":700,"output_tokens_details":{"thinking_tokens":139}}"#,
            thinking(139, 700),
        ),
    ];
    for (usage, want) in steps {
        let got = s.event("message_delta", &delta(usage)).unwrap();
        assert_eq!(got, [StreamEvent::Usage(want)], "{usage}");
    }
}

/// A streamed answer: some text, then a `tool_use` block (index 1) whose JSON deltas are
/// `json` (`""` is the one empty delta a tool without arguments gets), ended by a block stop
/// when `stop` is set, then the message's end.
fn tool_stream(name: &str, json: &[&str], stop: bool) -> String {
    let mut sse = String::from(
        r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_n","type":"message","role":"assistant","content":[],"usage":{"input_tokens":565,"output_tokens":7}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Updating."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

"#,
    );
    sse.push_str(&format!(
        "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_n\",\"name\":\"{name}\",\"input\":{{}}}}}}\n\n"
    ));
    for piece in json {
        let piece = serde_json::to_string(piece).unwrap();
        sse.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{piece}}}}}\n\n"
        ));
    }
    if stop {
        sse.push_str(
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
        );
    }
    sse.push_str(
        r#"event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":48}}

event: message_stop
data: {"type":"message_stop"}

"#,
    );
    sse
}

/// The tool calls of a streamed answer to `req`, assembled from their pieces, and its text.
fn streamed_calls(req: &ChatRequest, sse: &str) -> (Vec<ToolCall>, String) {
    let (events, failure) = decode_all_for(Api::Anthropic, req, sse);
    assert_eq!(failure, None);
    let mut assembly = crate::types::ToolCallAssembly::default();
    let mut text = String::new();
    for event in &events {
        match event {
            StreamEvent::ToolCall(delta) => assembly.push(delta),
            StreamEvent::Delta(t) => text.push_str(t),
            _ => {}
        }
    }
    (assembly.finish(), text)
}

#[test]
fn a_streamed_tool_call_without_arguments_has_the_empty_object_as_arguments() {
    let plain = ChatRequest::new("Update the issue list");
    let call = |arguments: &str| ToolCall {
        id: "toolu_n".into(),
        name: "updateIssueList".into(),
        arguments: arguments.into(),
    };
    // One empty delta, or none, with the block's stop or with only the message's end.
    for (json, stop) in [(&[""][..], true), (&[], true), (&[""], false), (&[], false)] {
        let sse = tool_stream("updateIssueList", json, stop);
        let (calls, text) = streamed_calls(&plain, &sse);
        assert_eq!(calls, [call("{}")], "deltas {json:?}, block stop {stop}");
        assert_eq!(text, "Updating.");
    }
    // JSON deltas are the arguments, unchanged, with or without the block's stop.
    for stop in [true, false] {
        let sse = tool_stream("updateIssueList", &["", "{\"all\":", " true}"], stop);
        let (calls, _) = streamed_calls(&plain, &sse);
        assert_eq!(calls, [call(r#"{"all": true}"#)], "block stop {stop}");
    }
    // The answer tool of a JSON answer, called with no JSON: the answer is `{}`, as whole.
    let sse = tool_stream("weather_report", &[""], true);
    let (calls, text) = streamed_calls(&json_schema_request(), &sse);
    assert_eq!((calls, text.as_str()), (vec![], "{}"));
}
