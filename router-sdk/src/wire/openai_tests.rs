#![allow(clippy::unwrap_used)]

use super::*;
use crate::wire::test_support::{decode_all, request};
use serde_json::json;

#[test]
fn body_has_messages_and_only_the_fields_that_are_set() {
    let plain = body(
        "gpt-4o-mini",
        &crate::types::ChatRequest::new("Hi"),
        false,
        false,
    );
    assert_eq!(
        plain,
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]})
    );
    let full = body("gpt-4o-mini", &request(), true, false);
    let want = json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
        "max_tokens": 64,
        "temperature": 0.5,
        "stop": ["END"],
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    assert_eq!(full, want);
}

#[test]
fn response_with_usage() {
    let got = parse_response(include_bytes!("../../tests/fixtures/openai/ok.json")).unwrap();
    assert_eq!(got.content, "Hello! How can I help you today?");
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
    let usage = Usage {
        cached_prompt_tokens: 1024,
        ..Usage::new(1117, 46)
    };
    assert_eq!(got.usage, Some(usage));
}

#[test]
fn finish_reasons() {
    for (name, want) in [
        ("stop", FinishReason::Stop),
        ("length", FinishReason::Length),
        ("content_filter", FinishReason::ContentFilter),
        ("tool_calls", FinishReason::ToolCalls),
        ("function_call", FinishReason::ToolCalls),
        ("other", FinishReason::Other("other".into())),
    ] {
        assert_eq!(finish_reason(name), want);
    }
}

#[test]
fn stream_fixture_to_exact_events() {
    let (events, failure) = decode_all(
        Api::OpenAi,
        include_str!("../../tests/fixtures/openai/stream.sse"),
    );
    assert_eq!(failure, None);
    assert_eq!(
        events,
        [
            StreamEvent::Id("chatcmpl-123".into()),
            StreamEvent::Delta("Hel".into()),
            StreamEvent::Delta("lo!".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage::new(9, 3)),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn a_refusal_is_read_whole_and_streamed() {
    let body = br#"{"id": "chatcmpl-9", "choices": [{"index": 0, "message":
        {"role": "assistant", "content": null, "refusal": "I can't help with that."},
        "finish_reason": "stop"}], "usage": {"prompt_tokens": 9, "completion_tokens": 6}}"#;
    let got = parse_response(body).unwrap();
    assert_eq!(
        (got.content.as_str(), got.refusal.as_deref()),
        ("", Some("I can't help with that."))
    );
    let sse = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"refusal\":\"I can't\"},\"finish_reason\":null}]}\n\n\
               data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\" help.\"},\"finish_reason\":\"stop\"}]}\n\n\
               data: [DONE]\n\n";
    let (events, failure) = decode_all(Api::OpenAi, sse);
    assert_eq!(failure, None);
    assert_eq!(
        events,
        [
            StreamEvent::Id("c".into()),
            StreamEvent::Refusal("I can't".into()),
            StreamEvent::Refusal(" help.".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn error_inside_a_stream_is_a_failure() {
    let (events, failure) = decode_all(
        Api::OpenAi,
        include_str!("../../tests/fixtures/openai/stream_error.sse"),
    );
    assert_eq!(
        events,
        [
            StreamEvent::Id("chatcmpl-456".into()),
            StreamEvent::Delta("Par".into())
        ]
    );
    let failure = failure.unwrap();
    assert_eq!(failure.class, FailureClass::RateLimited);
    assert_eq!(failure.status, None);
    assert_eq!(
        failure.message,
        "The server is overloaded, please retry later."
    );
}

#[test]
fn error_shapes() {
    let text = error_body(br#"{"error": "model 'x' not found"}"#).unwrap();
    assert_eq!(text.message, "model 'x' not found");
    let flat = br#"{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}"#;
    let flat = error_body(flat).unwrap();
    assert_eq!(
        (flat.code.as_deref(), flat.status),
        (Some("400"), Some(400))
    );
    assert_eq!(error_body(b"<html>502 Bad Gateway</html>"), None);
    assert_eq!(error_body(br#"{"detail": "nope"}"#), None);
}

fn fixture_json(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/openai/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The weather tool of OpenAI's function-calling guide.
fn weather_tool() -> Tool {
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

#[test]
fn a_tool_round_trip_is_sent_in_the_documented_shape() {
    let call = ToolCall {
        id: "call_abc123".into(),
        name: "get_current_weather".into(),
        arguments: r#"{"location":"Boston, MA"}"#.into(),
    };
    let req = ChatRequest {
        messages: vec![
            Message::user("What is the weather like in Boston today?"),
            Message::assistant_calls("", vec![call]),
            Message::tool_result("call_abc123", r#"{"temperature":22,"unit":"celsius"}"#),
        ],
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: Some(false),
        ..ChatRequest::default()
    };
    assert_eq!(
        body("gpt-4o-mini", &req, false, false),
        fixture_json("request_tools.json")
    );
}

#[test]
fn every_effort_goes_upstream_as_openai_names_it() {
    use crate::types::{Effort, Reasoning};
    for (effort, text) in [
        (Effort::None, "none"),
        (Effort::Minimal, "minimal"),
        (Effort::Low, "low"),
        (Effort::Medium, "medium"),
        (Effort::High, "high"),
        (Effort::Xhigh, "xhigh"),
    ] {
        let req = ChatRequest {
            reasoning: Some(Reasoning {
                effort: Some(effort),
                budget_tokens: None,
            }),
            ..ChatRequest::new("Think.")
        };
        assert_eq!(
            body("o4-mini", &req, false, false)["reasoning_effort"],
            text
        );
    }
    // A budget stands for one of the three every reasoning model takes.
    let req = ChatRequest {
        reasoning: Some(Reasoning {
            effort: None,
            budget_tokens: Some(30_000),
        }),
        ..ChatRequest::new("Think.")
    };
    assert_eq!(
        body("o4-mini", &req, false, false)["reasoning_effort"],
        "high"
    );
}

#[test]
fn reasoning_requests_cap_with_max_completion_tokens() {
    let req = ChatRequest {
        max_tokens: Some(2000),
        reasoning: Some(crate::types::Reasoning {
            effort: Some(crate::types::Effort::High),
            budget_tokens: None,
        }),
        ..ChatRequest::new("Think.")
    };
    let got = body("o4-mini", &req, false, false);
    assert_eq!(got["max_completion_tokens"], 2000);
    assert_eq!(got.get("max_tokens"), None);
    assert_eq!(got["reasoning_effort"], "high");
}

#[test]
fn tool_choices_and_strict_tools() {
    let named = tool_choice(&ToolChoice::Function("f".into()));
    assert_eq!(
        named,
        json!({"type": "function", "function": {"name": "f"}})
    );
    assert_eq!(tool_choice(&ToolChoice::Required), json!("required"));
    assert_eq!(tool_choice(&ToolChoice::None), json!("none"));
    let strict = tool(&Tool {
        strict: true,
        description: None,
        ..weather_tool()
    });
    assert_eq!(strict["function"]["strict"], json!(true));
    assert_eq!(strict["function"].get("description"), None);
}

#[test]
fn images_are_content_parts_by_url_or_data_url() {
    let url = "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg";
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
    assert_eq!(
        body("gpt-4o-mini", &req, false, false),
        fixture_json("request_image.json")
    );
}

#[test]
fn json_schema_sampling_reasoning_and_user_fields() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "date": {"type": "string"},
            "participants": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "date", "participants"],
        "additionalProperties": false,
    });
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
        reasoning: Some(crate::types::Reasoning {
            effort: None,
            budget_tokens: Some(1000),
        }),
        user: Some("user-1234".into()),
        metadata: [("feature".to_owned(), "extract".to_owned())].into(),
        ..ChatRequest::default()
    };
    assert_eq!(
        body("gpt-4o-mini", &req, false, false),
        fixture_json("request_json_schema.json")
    );
    let object = response_format(&ResponseFormat::JsonObject);
    assert_eq!(object, json!({"type": "json_object"}));
}

#[test]
fn a_tool_call_answer() {
    let got = parse_response(include_bytes!(
        "../../tests/fixtures/openai/tool_calls.json"
    ))
    .unwrap();
    assert_eq!(got.id.as_deref(), Some("chatcmpl-abc123"));
    assert_eq!(got.content, "");
    assert_eq!(got.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        got.tool_calls,
        [ToolCall {
            id: "call_abc123".into(),
            name: "get_current_weather".into(),
            arguments: "{\n\"location\": \"Boston, MA\"\n}".into(),
        }]
    );
    assert_eq!(got.usage, Some(Usage::new(82, 17)));
}

#[test]
fn streamed_tool_calls_arrive_in_pieces_per_index() {
    let (events, failure) = decode_all(
        Api::OpenAi,
        include_str!("../../tests/fixtures/openai/tool_calls.sse"),
    );
    assert_eq!(failure, None);
    let piece = |index, id: Option<&str>, name: Option<&str>, arguments: &str| {
        StreamEvent::ToolCall(ToolCallDelta {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: arguments.into(),
        })
    };
    assert_eq!(
        events,
        [
            StreamEvent::Id("chatcmpl-tc1".into()),
            piece(
                0,
                Some("call_DdmO9pD3xa9XTPNJ32zg2hcA"),
                Some("get_weather"),
                ""
            ),
            piece(0, None, None, "{\""),
            piece(0, None, None, "location"),
            piece(0, None, None, "\":\"Paris\"}"),
            piece(1, Some("call_2nd"), Some("get_time"), "{}"),
            StreamEvent::Finish(FinishReason::ToolCalls),
            StreamEvent::Usage(Usage {
                cached_prompt_tokens: 64,
                ..Usage::new(70, 25)
            }),
            StreamEvent::Done,
        ]
    );
    let mut assembly = crate::types::ToolCallAssembly::default();
    for event in &events {
        if let StreamEvent::ToolCall(delta) = event {
            assembly.push(delta);
        }
    }
    let calls = assembly.finish();
    assert_eq!(calls[0].arguments, r#"{"location":"Paris"}"#);
    assert_eq!(
        (calls[1].id.as_str(), calls[1].name.as_str()),
        ("call_2nd", "get_time")
    );
}

#[test]
fn an_error_with_no_status_takes_the_one_its_type_stands_for() {
    let cases = [
        (
            r#"{"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "too long"}}"#,
            Some(400),
        ),
        (
            r#"{"error": {"type": "invalid_request_error", "code": "invalid_api_key", "message": "no"}}"#,
            Some(401),
        ),
        (
            r#"{"error": {"type": "server_error", "message": "oops"}}"#,
            Some(500),
        ),
        (r#"{"error": {"type": "mystery", "message": "?"}}"#, None),
    ];
    for (body, status) in cases {
        assert_eq!(
            error_body(body.as_bytes()).unwrap().status,
            status,
            "{body}"
        );
    }
    // Inside a stream, an invalid request is returned, not retried elsewhere.
    let data = cases[0].0.as_bytes();
    let failure = crate::wire::error::stream_failure(error_body(data), data);
    assert_eq!(failure.class, crate::wire::classify::FailureClass::Invalid);
}

#[test]
fn an_images_detail_goes_upstream() {
    use crate::types::{Image, ImageDetail, Message, Part, Role};
    let mut message = Message::text(Role::User, "What is it?");
    message.content.push(Part::Image {
        image: Image::Url {
            url: "https://example.test/a.jpg".into(),
        },
        detail: Some(ImageDetail::Low),
    });
    let req = ChatRequest {
        messages: vec![message.with_image(Image::Url {
            url: "https://example.test/b.jpg".into(),
        })],
        ..ChatRequest::new("")
    };
    let got = body("gpt-test", &req, false, false);
    let parts = &got["messages"][0]["content"];
    assert_eq!(
        parts[1]["image_url"],
        json!({"url": "https://example.test/a.jpg", "detail": "low"})
    );
    assert_eq!(
        parts[2]["image_url"],
        json!({"url": "https://example.test/b.jpg"})
    );
}

/// A usage block as xAI reports it: reasoning outside `completion_tokens`, `total_tokens` the sum
/// of the three.
const REASONING_OUTSIDE: &str = r#"{"prompt_tokens": 300, "completion_tokens": 20,
    "total_tokens": 520, "prompt_tokens_details": {"cached_tokens": 250},
    "completion_tokens_details": {"reasoning_tokens": 200}}"#;

/// The same counts as OpenAI, DeepSeek and Groq report them: reasoning inside the completion.
const REASONING_INSIDE: &str = r#"{"prompt_tokens": 300, "completion_tokens": 220,
    "total_tokens": 520, "prompt_tokens_details": {"cached_tokens": 250},
    "completion_tokens_details": {"reasoning_tokens": 200}}"#;

#[test]
fn reasoning_that_total_tokens_counts_outside_the_completion_is_output() {
    let billed = Usage {
        cached_prompt_tokens: 250,
        reasoning_tokens: 200,
        ..Usage::new(300, 220)
    };
    for usage in [REASONING_OUTSIDE, REASONING_INSIDE] {
        let body = format!(
            r#"{{"id": "r1", "choices": [{{"index": 0, "message": {{"role": "assistant",
            "content": "4"}}, "finish_reason": "stop"}}], "usage": {usage}}}"#
        );
        let got = parse_response(body.as_bytes()).unwrap();
        assert_eq!(got.usage, Some(billed), "{usage}");
        let sse = format!(
            "data: {{\"id\":\"r1\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"4\"}},\"finish_reason\":\"stop\"}}]}}\n\n\
             data: {{\"id\":\"r1\",\"choices\":[],\"usage\":{}}}\n\ndata: [DONE]\n\n",
            usage.replace('\n', " ")
        );
        let (events, failure) = decode_all(Api::OpenAi, &sse);
        assert_eq!(failure, None);
        assert!(events.contains(&StreamEvent::Usage(billed)), "{events:?}");
    }
}

#[test]
fn reasoning_is_inside_the_completion_unless_the_total_says_otherwise() {
    let usage = |json: &str| Usage::from(serde_json::from_str::<UsageJson>(json).unwrap());
    let counts = |completion, total: &str| {
        format!(
            r#"{{"prompt_tokens": 10, "completion_tokens": {completion}, {total}
            "completion_tokens_details": {{"reasoning_tokens": 4}}}}"#
        )
    };
    let inside = Usage {
        reasoning_tokens: 4,
        ..Usage::new(10, 6)
    };
    // No total, a total of prompt + completion, or any other total: inside, as reported.
    assert_eq!(usage(&counts(6, "")), inside);
    assert_eq!(usage(&counts(6, r#""total_tokens": 16,"#)), inside);
    assert_eq!(usage(&counts(6, r#""total_tokens": 17,"#)), inside);
    assert_eq!(usage(&counts(6, r#""total_tokens": null,"#)), inside);
    // Prompt + completion + reasoning: outside, and counted as output.
    let outside = Usage {
        reasoning_tokens: 4,
        ..Usage::new(10, 10)
    };
    assert_eq!(usage(&counts(6, r#""total_tokens": 20,"#)), outside);
    // No reasoning: the completion as reported, whatever the total.
    let plain = r#"{"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}"#;
    assert_eq!(usage(plain), Usage::new(10, 6));
}

#[test]
fn a_legacy_function_call_is_one_tool_call_whole_and_streamed() {
    let body = br#"{"id": "chatcmpl-f1", "object": "chat.completion", "model": "gpt-4-0613",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
        "function_call": {"name": "get_current_weather", "arguments": "{\n  \"location\": \"Boston, MA\"\n}"}},
        "finish_reason": "function_call"}],
      "usage": {"prompt_tokens": 84, "completion_tokens": 18, "total_tokens": 102}}"#;
    let call = ToolCall {
        id: "call_0".into(),
        name: "get_current_weather".into(),
        arguments: "{\n  \"location\": \"Boston, MA\"\n}".into(),
    };
    let got = parse_response(body).unwrap();
    assert_eq!(got.tool_calls, std::slice::from_ref(&call));
    assert_eq!(got.finish_reason, Some(FinishReason::ToolCalls));
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-f1\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let sse = [
        chunk(
            r#"{"role":"assistant","content":null,"function_call":{"name":"get_current_weather","arguments":""}}"#,
            "null",
        ),
        chunk(r#"{"function_call":{"arguments":"{\n  \"location\""}}"#, "null"),
        chunk(r#"{"function_call":{"arguments":": \"Boston, MA\"\n}"}}"#, "null"),
        chunk("{}", "\"function_call\""),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let (events, failure) = decode_all(Api::OpenAi, &sse);
    assert_eq!(failure, None);
    let mut assembly = crate::types::ToolCallAssembly::default();
    let mut ids = Vec::new();
    for event in &events {
        if let StreamEvent::ToolCall(delta) = event {
            assembly.push(delta);
            ids.push(delta.id.clone());
        }
    }
    assert_eq!(assembly.finish(), [call]);
    // The id once, on the first piece, as a streamed tool call gives it.
    assert_eq!(ids, [Some("call_0".to_owned()), None, None]);
    assert!(events.contains(&StreamEvent::Finish(FinishReason::ToolCalls)));
}
