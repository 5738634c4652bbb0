#![allow(clippy::unwrap_used)]

use super::classify::FailureClass;
use super::test_support::request;
use super::*;
use crate::types::StreamEvent;
use crate::types::{FinishReason, Usage};

const PLANTED: &str = "sk-planted-7e1d0c4b9a";

#[test]
fn requests_put_the_key_only_in_a_sensitive_header() {
    let key = ApiKey::new(PLANTED.to_owned());
    let table = [
        (
            Api::OpenAi,
            "https://api.openai.com/v1/",
            "https://api.openai.com/v1/chat/completions",
            "authorization",
            format!("Bearer {PLANTED}"),
        ),
        (
            Api::Anthropic,
            "https://api.anthropic.com",
            "https://api.anthropic.com/v1/messages",
            "x-api-key",
            PLANTED.to_owned(),
        ),
        (
            Api::Gemini,
            "https://generativelanguage.googleapis.com/v1beta/",
            "https://generativelanguage.googleapis.com/v1beta/models/m:streamGenerateContent?alt=sse",
            "x-goog-api-key",
            PLANTED.to_owned(),
        ),
    ];
    for (api, base, url, auth, value) in table {
        let wire = build(
            &target(api, &endpoints(api, base, "m").unwrap()),
            &key,
            &request(),
            &HeaderMap::new(),
            true,
        );
        assert_eq!(wire.url.as_str(), url, "{api:?}");
        assert_eq!(wire.headers["content-type"], "application/json");
        assert_eq!(wire.headers[auth], value.as_str(), "{api:?}");
        assert!(wire.headers[auth].is_sensitive(), "{api:?}");
        let shown = format!("{wire:?}");
        assert!(!shown.contains(PLANTED), "{api:?} leaked the key: {shown}");
        assert!(!wire.body.to_string().contains(PLANTED));
    }
    let anthropic = build(
        &target(
            Api::Anthropic,
            &endpoints(Api::Anthropic, "http://x", "m").unwrap(),
        ),
        &key,
        &request(),
        &HeaderMap::new(),
        false,
    );
    assert_eq!(anthropic.headers["anthropic-version"], "2023-06-01");
    assert_eq!(anthropic.headers.len(), 3);
}

#[test]
fn a_key_that_cannot_be_a_header_is_left_out() {
    let key = ApiKey::new("sk-bad\nkey".to_owned());
    let wire = build(
        &target(
            Api::OpenAi,
            &endpoints(Api::OpenAi, "http://x/v1", "m").unwrap(),
        ),
        &key,
        &request(),
        &HeaderMap::new(),
        false,
    );
    assert!(wire.headers.get("authorization").is_none());
    assert!(!format!("{wire:?}").contains("sk-bad"));
}

#[test]
fn parse_response_dispatches_and_keeps_an_excerpt_on_decode_errors() {
    let ok = parse_response(
        Api::OpenAi,
        &ChatRequest::default(),
        include_bytes!("../../tests/fixtures/openai/ok.json"),
    );
    assert_eq!(ok.unwrap().finish_reason, Some(FinishReason::Stop));
    let long = format!("<html>{}</html>", "é".repeat(1000));
    for api in Api::ALL {
        let err = parse_response(api, &ChatRequest::default(), long.as_bytes()).unwrap_err();
        assert_eq!(err.api, api.as_str());
        assert!(err.excerpt.starts_with("<html>éé") && err.excerpt.ends_with('…'));
        assert_eq!(err.excerpt.chars().count(), EXCERPT_MAX + 1);
        assert!(err.to_string().starts_with("cannot decode the "), "{err}");
        assert_eq!(Failure::from(err).class, FailureClass::Decode);
    }
}

#[test]
fn malformed_stream_events_are_decode_failures() {
    for api in Api::ALL {
        let mut decoder = StreamDecoder::new(api, &ChatRequest::default());
        assert_eq!(decoder.event("", "  ").unwrap(), [StreamEvent::Ignore]);
        let failure = decoder.event("message_delta", "{not json").unwrap_err();
        assert_eq!(
            (failure.class, failure.status),
            (FailureClass::Decode, None),
            "{api:?}"
        );
        assert!(
            failure.message.contains("{not json"),
            "{api:?}: {}",
            failure.message
        );
    }
}

#[test]
fn finish_adds_nothing_once_done_was_seen() {
    let mut openai = StreamDecoder::new(Api::OpenAi, &ChatRequest::default());
    let text = r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
    assert_eq!(
        openai.event("", text).unwrap(),
        [StreamEvent::Delta("Hi".into())]
    );
    assert_eq!(openai.event("", "[DONE]").unwrap(), [StreamEvent::Done]);
    assert_eq!(
        openai.event("", r#"{"choices":[]}"#).unwrap(),
        [StreamEvent::Ignore]
    );
    assert_eq!(openai.finish(), []);
    let mut anthropic = StreamDecoder::new(Api::Anthropic, &ChatRequest::default());
    let text = r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"Hi"}}"#;
    anthropic.event("content_block_delta", text).unwrap();
    let stop = r#"{"type":"message_stop"}"#;
    assert_eq!(
        anthropic.event("message_stop", stop).unwrap(),
        [StreamEvent::Done]
    );
    assert_eq!(anthropic.finish(), []);
    let mut gemini = StreamDecoder::new(Api::Gemini, &ChatRequest::default());
    let last = r#"{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3}}"#;
    let usage = Usage::new(3, 0);
    let want = [
        StreamEvent::Finish(FinishReason::Stop),
        StreamEvent::Usage(usage),
    ];
    assert_eq!(gemini.event("", last).unwrap(), want);
    assert_eq!(gemini.finish(), [StreamEvent::Done]);
    assert_eq!(gemini.finish(), []);
}

#[test]
fn an_unreadable_answer_is_the_deployments_fault() {
    let err =
        parse_response(Api::Anthropic, &ChatRequest::default(), b"<html>502</html>").unwrap_err();
    assert_eq!(
        Failure::from(err).class.kind(),
        router_core::retry::FailureKind::ServerError
    );
}

#[test]
fn answers_with_no_choice_candidate_or_content_are_malformed() {
    let cases: [(Api, &[u8], &str); 5] = [
        (
            Api::OpenAi,
            br#"{"choices":[],"usage":{"prompt_tokens":3}}"#,
            "no choices",
        ),
        (Api::OpenAi, br#"{"id":"x"}"#, "no choices"),
        (
            Api::Gemini,
            br#"{"candidates":[],"usageMetadata":{}}"#,
            "no candidates",
        ),
        (Api::Gemini, b"{}", "no candidates"),
        (
            Api::Anthropic,
            br#"{"content":[],"stop_reason":null}"#,
            "no content",
        ),
    ];
    for (api, body, want) in cases {
        let err = parse_response(api, &ChatRequest::default(), body).unwrap_err();
        assert!(err.reason.contains(want), "{api:?}: {err}");
    }
    let ended = br#"{"content":[],"stop_reason":"end_turn","usage":{"input_tokens":3}}"#;
    assert_eq!(
        parse_response(Api::Anthropic, &ChatRequest::default(), ended)
            .unwrap()
            .finish_reason,
        Some(FinishReason::Stop),
        "an empty answer that says why it stopped is an answer"
    );
}

#[test]
fn streams_that_deliver_nothing_are_malformed() {
    let cases = [
        (
            Api::OpenAi,
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n",
        ),
        (Api::OpenAi, "data: [DONE]\n\n"),
        (
            Api::Anthropic,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
             event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ),
        (
            Api::Gemini,
            "data: {\"candidates\":[],\"usageMetadata\":{}}\n\n",
        ),
    ];
    for (api, sse) in cases {
        let (events, failure) = test_support::decode_all(api, sse);
        let failure = failure.unwrap_or_else(|| panic!("{api:?}: {events:?}"));
        assert_eq!(failure.class, FailureClass::Decode, "{api:?}");
        assert!(!events.contains(&StreamEvent::Done), "{api:?}");
    }
}

const U64_MAX: &str = "18446744073709551615";

#[test]
fn usage_above_the_plausibility_bound_or_overflowing_is_malformed() {
    let bound = MAX_PLAUSIBLE_TOKENS;
    let above = bound + 1;
    let text = r#""choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop"}]"#;
    let anthropic = r#""content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn""#;
    let gemini = r#""candidates":[{"content":{"parts":[{"text":"Hi"}]},"finishReason":"STOP"}]"#;
    let cases = [
        (
            Api::OpenAi,
            format!(r#"{{{text},"usage":{{"prompt_tokens":{above}}}}}"#),
        ),
        (
            Api::OpenAi,
            format!(r#"{{{text},"usage":{{"completion_tokens":{U64_MAX}}}}}"#),
        ),
        (
            Api::Anthropic,
            format!(
                r#"{{{anthropic},"usage":{{"input_tokens":1,"cache_read_input_tokens":{U64_MAX}}}}}"#
            ),
        ),
        (
            Api::Anthropic,
            format!(
                r#"{{{anthropic},"usage":{{"input_tokens":{bound},"cache_creation_input_tokens":1}}}}"#
            ),
        ),
        (
            Api::Gemini,
            format!(
                r#"{{{gemini},"usageMetadata":{{"candidatesTokenCount":{U64_MAX},"thoughtsTokenCount":1}}}}"#
            ),
        ),
    ];
    for (api, body) in cases {
        let err = parse_response(api, &ChatRequest::default(), body.as_bytes()).unwrap_err();
        assert!(err.reason.contains("100000000 tokens"), "{api:?}: {err}");
        let mut decoder = StreamDecoder::new(api, &ChatRequest::default());
        let (name, data) = match api {
            Api::Anthropic => {
                // message_start's usage is reported with message_delta's.
                let start = format!(r#"{{"type":"message_start","message":{body}}}"#);
                decoder.event("message_start", &start).unwrap();
                let delta = r#"{"type":"message_delta","delta":{},"usage":{"output_tokens":1}}"#;
                ("message_delta", delta.to_owned())
            }
            _ => ("", body.clone()),
        };
        let failure = decoder.event(name, &data).unwrap_err();
        assert_eq!(failure.class, FailureClass::Decode, "{api:?}");
    }
    let at_bound = format!(r#"{{{text},"usage":{{"prompt_tokens":{bound}}}}}"#);
    assert!(parse_response(Api::OpenAi, &ChatRequest::default(), at_bound.as_bytes()).is_ok());
}

#[test]
fn cached_and_reasoning_counts_above_their_whole_are_cut_to_it() {
    let text = r#""choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop"}]"#;
    let usage = format!(
        r#""usage":{{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{{"cached_tokens":{U64_MAX}}},"completion_tokens_details":{{"reasoning_tokens":{U64_MAX}}}}}"#
    );
    let whole = Usage {
        cached_prompt_tokens: 10,
        reasoning_tokens: 5,
        ..Usage::new(10, 5)
    };
    let body = format!("{{{text},{usage}}}");
    let parsed = parse_response(Api::OpenAi, &ChatRequest::default(), body.as_bytes()).unwrap();
    assert_eq!(parsed.usage, Some(whole));
    let chunk = format!(r#"{{"choices":[],{usage}}}"#);
    let mut decoder = StreamDecoder::new(Api::OpenAi, &ChatRequest::default());
    assert_eq!(
        decoder.event("", &chunk).unwrap(),
        [StreamEvent::Usage(whole)]
    );
}

#[test]
fn total_tokens_saturates() {
    let usage = Usage::new(u64::MAX, 2);
    assert_eq!(usage.total_tokens(), u64::MAX);
}

#[test]
fn extra_headers_go_upstream_on_every_wire_format_and_never_replace_the_key() {
    // Anthropic's own headers go to Anthropic alone.
    let key = ApiKey::new(PLANTED.to_owned());
    let extra = extra_headers(&[
        ("x-bench-id".to_owned(), "req-7".to_owned()),
        ("anthropic-beta".to_owned(), "feature-1".to_owned()),
    ])
    .unwrap();
    for api in [Api::OpenAi, Api::Anthropic, Api::Gemini] {
        let endpoints = endpoints(api, "http://x", "m").unwrap();
        let wire = build(&target(api, &endpoints), &key, &request(), &extra, false);
        assert_eq!(wire.headers["x-bench-id"], "req-7", "{api:?}");
        let beta = wire.headers.get("anthropic-beta");
        let want = (api == Api::Anthropic).then_some("feature-1");
        assert_eq!(beta.map(|v| v.to_str().unwrap()), want, "{api:?}");
        assert_eq!(wire.headers["content-type"], "application/json", "{api:?}");
    }
}

#[test]
fn extra_headers_that_carry_a_key_or_are_malformed_are_refused_by_name() {
    for name in [
        "Authorization",
        "x-api-key",
        "X-Goog-Api-Key",
        "content-type",
        "host",
    ] {
        let err = extra_headers(&[(name.to_owned(), "v".to_owned())]).unwrap_err();
        assert!(err.contains(&format!("`{name}`")), "{err}");
        assert!(err.contains("set by llmroute"), "{err}");
    }
    let err = extra_headers(&[("bad name".to_owned(), "v".to_owned())]).unwrap_err();
    assert!(
        err.contains("`bad name`") && err.contains("not a valid"),
        "{err}"
    );
    let err = extra_headers(&[("x-trace".to_owned(), "a\nb".to_owned())]).unwrap_err();
    assert!(err.contains("`x-trace`") && err.contains("value"), "{err}");
}

/// Model `m` of `api` at `base`, with a 4,096-token output cap.
fn target(api: Api, endpoints: &[Url; 2]) -> Target<'_> {
    Target {
        api,
        endpoints,
        model: "m",
        output_cap: 4096,
    }
}

#[test]
fn a_base_url_the_client_cannot_send_to_is_refused_when_the_router_is_built() {
    let yaml = "providers:\n  - name: far\n    api: openai\n    base_url: http://host/v1\n    \
                api_key_env: FAR_KEY\n    models:\n      - { name: m, price: { input: 1, output: 1 } }\n";
    let mut registry = Registry::from_yaml_str(yaml, "endpoints.yaml").unwrap();
    // Loading refuses such a URL; a registry built or changed in code is checked again here.
    registry.providers[0].base_url = "http://user:pw-planted@host:99999/v1".into();
    let err = Endpoints::new(&registry).unwrap_err();
    assert!(err.contains("provider `far`"), "{err}");
    assert!(err.contains("base_url"), "{err}");
    assert!(err.contains("port"), "{err}");
    assert!(
        !err.contains("pw-planted"),
        "the URL's password leaked: {err}"
    );
    let fine = registry_with("http://host:8080/v1/");
    let got = Endpoints::new(&fine).unwrap();
    assert_eq!(
        got.of(DeploymentId(0))[0].as_str(),
        "http://host:8080/v1/chat/completions"
    );
}

fn registry_with(base: &str) -> Registry {
    let yaml = format!(
        "providers:\n  - name: near\n    api: openai\n    base_url: {base}\n    api_key_env: NEAR_KEY\n    \
         models:\n      - {{ name: m, price: {{ input: 1, output: 1 }} }}\n"
    );
    Registry::from_yaml_str(&yaml, "endpoints.yaml").unwrap()
}

#[test]
fn is_header_name_says_what_extra_headers_can_send() {
    assert!(is_header_name("x-trace-id") && is_header_name("X-Trace_Id"));
    for name in ["Authorization: Bearer sk", "a b", "", "x\ny"] {
        assert!(!is_header_name(name), "{name:?}");
        assert!(extra_headers(&[(name.to_owned(), "v".to_owned())]).is_err());
    }
}

#[test]
fn the_output_cap_goes_as_max_completion_tokens_to_openais_own_api() {
    let key = ApiKey::new(PLANTED.to_owned());
    let req = crate::types::ChatRequest {
        max_tokens: Some(100),
        ..crate::types::ChatRequest::new("Hi")
    };
    let cap_of = |base: &str| {
        let endpoints = endpoints(Api::OpenAi, base, "m").unwrap();
        let target = target(Api::OpenAi, &endpoints);
        let body = build(&target, &key, &req, &HeaderMap::new(), false).body;
        let names = ["max_tokens", "max_completion_tokens"];
        let sent: Vec<&str> = names
            .into_iter()
            .filter(|n| body.get(*n) == Some(&serde_json::json!(100)))
            .collect();
        sent
    };
    // OpenAI's reasoning models refuse `max_tokens`; its API takes the newer name for any model.
    assert_eq!(
        cap_of("https://api.openai.com/v1"),
        ["max_completion_tokens"]
    );
    assert_eq!(
        cap_of("https://eu.api.openai.com/v1"),
        ["max_completion_tokens"]
    );
    // Other OpenAI-compatible servers may know only `max_tokens`.
    assert_eq!(cap_of("https://api.deepseek.com/v1"), ["max_tokens"]);
    assert_eq!(
        cap_of("https://notapi.openai.com.example/v1"),
        ["max_tokens"]
    );
}

#[test]
fn a_generation_config_in_either_spelling_merges_into_geminis_own() {
    let key = ApiKey::new(PLANTED.to_owned());
    let endpoints = endpoints(Api::Gemini, "http://x", "m").unwrap();
    for spelling in ["generationConfig", "generation_config"] {
        let mut extra_body = serde_json::Map::new();
        extra_body.insert(spelling.into(), serde_json::json!({"topK": 3}));
        let req = crate::types::ChatRequest {
            max_tokens: Some(64),
            extra_body,
            ..crate::types::ChatRequest::new("Hi")
        };
        let body = build(
            &target(Api::Gemini, &endpoints),
            &key,
            &req,
            &HeaderMap::new(),
            false,
        )
        .body;
        assert_eq!(
            body["generationConfig"],
            serde_json::json!({"maxOutputTokens": 64, "topK": 3}),
            "{spelling}"
        );
        assert_eq!(body.get("generation_config"), None, "{spelling}");
    }
}

#[test]
fn a_tool_calls_finish_with_nothing_to_call_is_malformed_whole_and_streamed() {
    let openai_whole = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Let me check."},"finish_reason":"tool_calls"}]}"#;
    let openai_stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me check.\"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    let anthropic_whole = br#"{"id":"msg_1","type":"message","content":[{"type":"text","text":"Let me check."}],"stop_reason":"tool_use","usage":{"input_tokens":9,"output_tokens":4}}"#;
    let anthropic_stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me check.\"}}\n\n\
        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let cases: [(Api, &[u8], &str); 2] = [
        (Api::OpenAi, openai_whole, openai_stream),
        (Api::Anthropic, anthropic_whole, anthropic_stream),
    ];
    for (api, whole, stream) in cases {
        let err = parse_response(api, &ChatRequest::default(), whole).unwrap_err();
        assert!(err.reason.contains("named no tool call"), "{api:?}: {err}");
        assert_eq!(Failure::from(err).class, FailureClass::Decode);
        let (events, failure) = test_support::decode_all(api, stream);
        let failure = failure.unwrap_or_else(|| panic!("{api:?}: {events:?}"));
        assert_eq!(failure.class, FailureClass::Decode, "{api:?}");
        assert!(failure.message.contains("named no tool call"), "{api:?}");
        assert!(!events.contains(&StreamEvent::Done), "{api:?}");
    }
}

#[test]
fn answers_that_call_no_tool_for_the_caller_finish_as_they_said() {
    // Server-side tools (run by Anthropic), and a JSON answer's tool: no call for the caller,
    // and no tool_calls finish.
    let server_tools = br#"{"id":"msg_2","type":"message","content":[
        {"type":"server_tool_use","id":"srvtoolu_1","name":"web_fetch","input":{"url":"https://example.com"}},
        {"type":"web_fetch_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"web_fetch_result"}},
        {"type":"text","text":"A placeholder page."}],
        "stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":4}}"#;
    let got = parse_response(Api::Anthropic, &ChatRequest::default(), server_tools).unwrap();
    assert_eq!(
        (got.tool_calls.len(), got.finish_reason),
        (0, Some(FinishReason::Stop))
    );
    let json_answer = ChatRequest {
        response_format: Some(crate::types::ResponseFormat::JsonObject),
        ..ChatRequest::default()
    };
    let answer_tool = br#"{"id":"msg_3","type":"message","content":[
        {"type":"tool_use","id":"toolu_1","name":"json_answer","input":{"ok":true}}],
        "stop_reason":"tool_use","usage":{"input_tokens":9,"output_tokens":4}}"#;
    let got = parse_response(Api::Anthropic, &json_answer, answer_tool).unwrap();
    assert_eq!(
        (got.content.as_str(), got.finish_reason),
        (r#"{"ok":true}"#, Some(FinishReason::Stop))
    );
    let streamed = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_3\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"json_answer\",\"input\":{}}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"ok\\\":true}\"}}\n\n\
        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let (events, failure) = test_support::decode_all_for(Api::Anthropic, &json_answer, streamed);
    assert_eq!(failure, None);
    assert!(events.contains(&StreamEvent::Finish(FinishReason::Stop)));
    assert_eq!(events.last(), Some(&StreamEvent::Done));
}
