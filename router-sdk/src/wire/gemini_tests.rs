#![allow(clippy::unwrap_used)]

use super::*;
use crate::types::{Effort, Reasoning};
use crate::wire::test_support::{decode_all, request};

/// A request fixture: the body Gemini documents for it.
fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/gemini/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
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

const QUESTION: &str = "What's the weather in Boston and New York?";

fn calls() -> Vec<ToolCall> {
    let call = |id: &str, city: &str| ToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: json!({ "city": city }).to_string(),
    };
    vec![call("call_0", "Boston"), call("call_1", "New York")]
}

#[test]
fn body_uses_contents_system_instruction_and_generation_config() {
    let want = json!({
        "contents": [
            {"role": "user", "parts": [{"text": "Hi"}]},
            {"role": "model", "parts": [{"text": "Hello."}]},
            {"role": "user", "parts": [{"text": "Bye"}]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"maxOutputTokens": 64, "temperature": 0.5, "stopSequences": ["END"]},
    });
    assert_eq!(body(&request()), want);
    let plain = json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]});
    assert_eq!(body(&ChatRequest::new("Hi")), plain);
}

#[test]
fn urls() {
    let base = "https://generativelanguage.googleapis.com/v1beta";
    let plain = format!("{base}/models/gemini-2.5-flash:generateContent");
    assert_eq!(url(base, "gemini-2.5-flash", false), plain);
    let stream = format!("{base}/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    assert_eq!(url(base, "models/gemini-2.5-flash", true), stream);
}

#[test]
fn response_bills_thoughts_as_output() {
    let got = parse_response(include_bytes!("../../tests/fixtures/gemini/ok.json")).unwrap();
    assert_eq!(
        got.content,
        "AI learns patterns from data to make predictions."
    );
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
    let usage = Usage {
        reasoning_tokens: 1024,
        ..Usage::new(8, 10 + 1024)
    };
    assert_eq!(got.usage, Some(usage));
}

#[test]
fn thought_parts_and_blocked_prompts() {
    let body = br#"{"candidates":[{"content":{"parts":[{"text":"hmm","thought":true},
        {"text":"Yes."}]},"finishReason":"MAX_TOKENS"}]}"#;
    let got = parse_response(body).unwrap();
    assert_eq!(
        (got.content.as_str(), got.finish_reason),
        ("Yes.", Some(FinishReason::Length))
    );
    let blocked =
        br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":5}}"#;
    let got = parse_response(blocked).unwrap();
    assert_eq!(got.finish_reason, Some(FinishReason::ContentFilter));
    assert_eq!(got.usage, Some(Usage::new(5, 0)));
}

#[test]
fn stream_takes_the_latest_cumulative_usage_and_ends_with_done() {
    let sse = include_str!("../../tests/fixtures/gemini/stream.sse");
    let (events, failure) = decode_all(Api::Gemini, sse);
    assert_eq!(failure, None);
    assert_eq!(
        events,
        [
            StreamEvent::Id("Tp6taOvPNpXjz7IPpa3B8Qo".into()),
            StreamEvent::Delta("The".into()),
            StreamEvent::Delta(" sky is".into()),
            StreamEvent::Delta(" blue.".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage {
                reasoning_tokens: 28,
                ..Usage::new(9, 33)
            }),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn a_stream_cut_before_its_finish_reason_has_no_done() {
    let mut s = Stream::default();
    let chunk = r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}"#;
    assert_eq!(
        s.event("", chunk).unwrap(),
        [StreamEvent::Delta("Hi".into())]
    );
    assert_eq!(s.finish(), []);
}

#[test]
fn finish_reasons() {
    for (name, want) in [
        ("STOP", FinishReason::Stop),
        ("MAX_TOKENS", FinishReason::Length),
        ("SAFETY", FinishReason::ContentFilter),
        (
            "MALFORMED_FUNCTION_CALL",
            FinishReason::Other("MALFORMED_FUNCTION_CALL".into()),
        ),
    ] {
        assert_eq!(finish_reason(name), want);
    }
}

#[test]
fn tools_choice_sampling_and_thinking_go_where_gemini_documents_them() {
    let mut metadata = std::collections::BTreeMap::new();
    metadata.insert("team".to_owned(), "search".to_owned());
    let req = ChatRequest {
        messages: vec![
            Message::system("You answer weather questions."),
            Message::user(QUESTION),
        ],
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Function("get_weather".into())),
        parallel_tool_calls: Some(false),
        top_p: Some(0.9),
        presence_penalty: Some(0.1),
        frequency_penalty: Some(0.2),
        seed: Some(42),
        reasoning: Some(Reasoning {
            effort: Some(Effort::High),
            budget_tokens: Some(512),
        }),
        // No place for these in Gemini's API: left out.
        user: Some("user-7".into()),
        metadata,
        ..ChatRequest::default()
    };
    assert_eq!(body(&req), fixture("request_tools.json"));
}

#[test]
fn tool_calls_and_results_round_trip_as_function_call_and_response_parts() {
    let req = ChatRequest {
        messages: vec![
            Message::system("You answer weather questions."),
            Message::user(QUESTION),
            Message::assistant_calls("Checking both.", calls()),
            Message::tool_result("call_0", r#"{"temperature": 22, "unit": "celsius"}"#),
            Message::tool_result("call_1", "Sunny, 25 C"),
        ],
        tools: vec![weather_tool()],
        tool_choice: Some(ToolChoice::Auto),
        ..ChatRequest::default()
    };
    assert_eq!(body(&req), fixture("request_tool_results.json"));
}

#[test]
fn tool_results_name_the_latest_call_with_their_id_and_are_merged_only_when_consecutive() {
    let old = ToolCall {
        id: "a".into(),
        name: "old_name".into(),
        arguments: "{}".into(),
    };
    let new = ToolCall {
        name: "lookup".into(),
        // Not an object (request checks refuse it): sent as no arguments.
        arguments: "[1]".into(),
        ..old.clone()
    };
    let req = ChatRequest {
        messages: vec![
            Message::user("q"),
            Message::assistant_calls("", vec![old]),
            Message::tool_result("a", "[1, 2]"),
            Message::user("again"),
            Message::assistant_calls("", vec![new]),
            Message::tool_result("a", "done"),
            Message::tool_result("unknown", "{}"),
        ],
        ..ChatRequest::default()
    };
    let signature = NO_THOUGHT_SIGNATURE;
    let want = json!([
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [
            {"functionCall": {"id": "a", "name": "old_name", "args": {}}, "thoughtSignature": signature},
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "a", "name": "old_name", "response": {"content": "[1, 2]"}}},
        ]},
        {"role": "user", "parts": [{"text": "again"}]},
        {"role": "model", "parts": [
            {"functionCall": {"id": "a", "name": "lookup", "args": {}}, "thoughtSignature": signature},
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "a", "name": "lookup", "response": {"content": "done"}}},
            {"functionResponse": {"id": "unknown", "name": "unknown", "response": {}}},
        ]},
    ]);
    assert_eq!(body(&req)["contents"], want);
}

#[test]
fn tool_choices() {
    for (choice, want) in [
        (ToolChoice::Auto, json!({"mode": "AUTO"})),
        (ToolChoice::None, json!({"mode": "NONE"})),
        (ToolChoice::Required, json!({"mode": "ANY"})),
        (
            ToolChoice::Function("f".into()),
            json!({"mode": "ANY", "allowedFunctionNames": ["f"]}),
        ),
    ] {
        assert_eq!(function_calling_config(&choice), want);
    }
}

#[test]
fn images_go_inline_or_as_file_data_with_the_type_their_extension_names() {
    let req = ChatRequest {
        messages: vec![
            Message::user("What is in these images?")
                .with_image(Image::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==".into(),
                })
                .with_image(Image::Url {
                    url: "https://example.com/photos/cat.JPG?size=large".into(),
                })
                .with_image(Image::Url {
                    url: "https://example.com/render?id=7".into(),
                }),
        ],
        ..ChatRequest::default()
    };
    assert_eq!(body(&req), fixture("request_image.json"));
}

#[test]
fn image_types_by_extension() {
    for (url, want) in [
        ("https://x.test/a.png", Some("image/png")),
        ("https://x.test/a.jpeg#top", Some("image/jpeg")),
        ("https://x.test/a.gif", Some("image/gif")),
        ("https://x.test/a.WebP", Some("image/webp")),
        ("https://x.test/a.heic", Some("image/heic")),
        ("https://x.test/a.heif", Some("image/heif")),
        ("https://x.test/a.svg", None),
        ("https://x.test/dir.png/photo", None),
        ("https://x.test/", None),
        ("https://x.test", None),
        ("gs://bucket/a.png?x=y.gif", Some("image/png")),
    ] {
        assert_eq!(image_mime_type(url), want, "{url}");
    }
}

#[test]
fn a_json_schema_answer_sends_the_schema_as_response_json_schema() {
    let schema =
        fixture("request_json_schema.json")["generationConfig"]["responseJsonSchema"].clone();
    let req = ChatRequest {
        max_tokens: Some(400),
        temperature: Some(0.0),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "recipes".into(),
            schema,
            strict: true,
        }),
        ..ChatRequest::new("List two cookie recipes.")
    };
    assert_eq!(body(&req), fixture("request_json_schema.json"));
    let object = ChatRequest {
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatRequest::new("Hi")
    };
    assert_eq!(
        body(&object)["generationConfig"],
        json!({"responseMimeType": "application/json"})
    );
    let text = ChatRequest {
        response_format: Some(ResponseFormat::Text),
        reasoning: Some(Reasoning {
            effort: Some(Effort::Low),
            budget_tokens: None,
        }),
        ..ChatRequest::new("Hi")
    };
    assert_eq!(
        body(&text)["generationConfig"],
        json!({"thinkingConfig": {"thinkingBudget": 1024}})
    );
    let none = ChatRequest {
        reasoning: Some(Reasoning {
            effort: Some(Effort::None),
            budget_tokens: None,
        }),
        ..ChatRequest::new("Hi")
    };
    assert_eq!(
        body(&none)["generationConfig"],
        json!({"thinkingConfig": {"thinkingBudget": 0}}),
        "effort none turns thinking off"
    );
    let none_with_a_budget = ChatRequest {
        reasoning: Some(Reasoning {
            effort: Some(Effort::None),
            budget_tokens: Some(2000),
        }),
        ..ChatRequest::new("Hi")
    };
    assert_eq!(
        body(&none_with_a_budget)["generationConfig"]["thinkingConfig"]["thinkingBudget"],
        0
    );
}

#[test]
fn function_calls_become_tool_calls_with_ids_in_order() {
    let got = parse_response(include_bytes!(
        "../../tests/fixtures/gemini/function_call.json"
    ))
    .unwrap();
    assert_eq!(got.id.as_deref(), Some("fC7taK2pB5XRz7IP0ZqX8Qc"));
    assert_eq!(got.content, "Checking both.");
    assert_eq!(got.tool_calls, calls());
    assert_eq!(got.finish_reason, Some(FinishReason::ToolCalls));
    let usage = Usage {
        reasoning_tokens: 50,
        ..Usage::new(70, 30 + 50)
    };
    assert_eq!(got.usage, Some(usage));
}

#[test]
fn a_function_call_keeps_the_id_gemini_gives_it() {
    let body = br#"{"candidates":[{"content":{"parts":[
        {"functionCall":{"id":"abc","name":"f","args":{"x":[1,"y"]}}},
        {"functionCall":{"name":"g"}}]},"finishReason":"STOP"}]}"#;
    let got = parse_response(body).unwrap();
    let want = [
        ToolCall {
            id: "abc".into(),
            name: "f".into(),
            arguments: r#"{"x":[1,"y"]}"#.into(),
        },
        ToolCall {
            id: "call_1".into(),
            name: "g".into(),
            arguments: "{}".into(),
        },
    ];
    assert_eq!(got.tool_calls, want);
    assert_eq!(got.id, None);
    // Without a call, STOP stays a stop; other reasons stay what they are.
    let cut = br#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}}]},
        "finishReason":"MAX_TOKENS"}]}"#;
    assert_eq!(
        parse_response(cut).unwrap().finish_reason,
        Some(FinishReason::Length)
    );
}

#[test]
fn cached_content_tokens_are_cached_prompt_tokens() {
    let got = parse_response(include_bytes!("../../tests/fixtures/gemini/cached.json")).unwrap();
    let usage = Usage {
        cached_prompt_tokens: 8000,
        ..Usage::new(12_000, 100)
    };
    assert_eq!(got.usage, Some(usage));
    assert_eq!(got.id.as_deref(), Some("cA8taP6dE9Xkz7IP1bqH0Qo"));
}

#[test]
fn streamed_function_calls_are_whole_deltas_and_finish_as_tool_calls() {
    let sse = include_str!("../../tests/fixtures/gemini/function_call.sse");
    let (events, failure) = decode_all(Api::Gemini, sse);
    assert_eq!(failure, None);
    let call = |index: u32, city: &str| {
        StreamEvent::ToolCall(ToolCallDelta {
            index,
            id: Some(format!("call_{index}")),
            name: Some("get_weather".into()),
            arguments: json!({ "city": city }).to_string(),
        })
    };
    let thinking = |completion| Usage {
        reasoning_tokens: 50,
        ..Usage::new(70, completion)
    };
    assert_eq!(
        events,
        [
            StreamEvent::Id("kD7taJ3xK6Hbz7IPrJmY4Qs".into()),
            StreamEvent::Delta("Checking both.".into()),
            StreamEvent::Thinking(ThinkingDelta::Signature(
                "CiQB0e2Kb5hXb0Jf1Fn3tQ2q5s8v7w6x5y4z3A2B1C0D9E8F7G6H".into()
            )),
            call(0, "Boston"),
            call(1, "New York"),
            StreamEvent::Finish(FinishReason::ToolCalls),
            StreamEvent::Usage(thinking(30 + 50)),
            StreamEvent::Done,
        ]
    );
}

/// A chunk of candidate text with a running usage count, finished when `finish` is set.
fn running(text: &str, candidates: u64, finish: bool) -> String {
    let finish = if finish {
        r#","finishReason":"STOP""#
    } else {
        ""
    };
    format!(
        "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"{text}\"}}],\"role\":\"model\"}}{finish}}}],\"usageMetadata\":{{\"promptTokenCount\":7,\"candidatesTokenCount\":{candidates},\"thoughtsTokenCount\":40}}}}\r\n\r\n"
    )
}

#[test]
fn a_stream_reports_usage_only_once_its_candidate_has_finished() {
    let usage = |candidates: u64| Usage {
        reasoning_tokens: 40,
        ..Usage::new(7, candidates + 40)
    };
    let said = |sse: &str| {
        let (events, failure) = decode_all(Api::Gemini, sse);
        assert_eq!(failure, None);
        events
    };
    // Cut after some text: no usage at all, so the estimate is settled, not a running count.
    let cut = format!(
        "{}{}",
        running("The", 1, false),
        running(" capital", 3, false)
    );
    let want = [
        StreamEvent::Delta("The".into()),
        StreamEvent::Delta(" capital".into()),
    ];
    assert_eq!(said(&cut), want);
    // Finished: the finishing chunk's count, then a usage-only chunk's after it.
    let trailer = "data: {\"usageMetadata\":{\"promptTokenCount\":7,\"candidatesTokenCount\":9,\"thoughtsTokenCount\":40}}\r\n\r\n";
    let whole = format!("{cut}{}{trailer}", running(" is Cheyenne.", 8, true));
    let usages: Vec<StreamEvent> = said(&whole)
        .into_iter()
        .filter(|e| matches!(e, StreamEvent::Usage(_)))
        .collect();
    assert_eq!(
        usages,
        [StreamEvent::Usage(usage(8)), StreamEvent::Usage(usage(9))]
    );
}

#[test]
fn a_calls_signature_comes_back_to_gemini_on_the_next_turn() {
    let whole = include_bytes!("../../tests/fixtures/gemini/function_call.json");
    let answer = Gemini
        .parse_response(&ChatRequest::new("q"), whole)
        .unwrap();
    let signature = "CiQB0e2Kb5hXb0Jf1Fn3tQ2q5s8v7w6x5y4z3A2B1C0D9E8F7G6H";
    assert_eq!(answer.thinking.len(), 1);
    assert!(answer.thinking[0].goes_to(Api::Gemini));
    assert_eq!(answer.thinking[0].signature.as_deref(), Some(signature));
    // Streamed, the signature comes before the call it belongs to.
    let sse = include_str!("../../tests/fixtures/gemini/function_call.sse");
    let (events, failure) = decode_all(Api::Gemini, sse);
    assert_eq!(failure, None);
    let first = events
        .iter()
        .position(|e| matches!(e, StreamEvent::Thinking(_)))
        .unwrap();
    assert_eq!(
        events[first],
        StreamEvent::Thinking(ThinkingDelta::Signature(signature.into()))
    );
    assert!(matches!(events[first + 1], StreamEvent::ToolCall(_)));
    // Given back, Gemini gets its own signature on the call; another provider's is no use.
    let turn = |thinking| ChatRequest {
        messages: vec![
            Message::user("q"),
            Message {
                thinking,
                ..Message::assistant_calls("", answer.tool_calls.clone())
            },
            Message::tool_result(answer.tool_calls[0].id.clone(), "{}"),
        ],
        ..ChatRequest::default()
    };
    let sent = body(&turn(answer.thinking.clone()));
    assert_eq!(
        sent["contents"][1]["parts"][0]["thoughtSignature"],
        signature
    );
    let foreign = crate::types::Thought {
        origin: Api::Anthropic,
        ..answer.thinking[0].clone()
    };
    let sent = body(&turn(vec![foreign]));
    assert_eq!(
        sent["contents"][1]["parts"][0]["thoughtSignature"],
        NO_THOUGHT_SIGNATURE
    );
}
