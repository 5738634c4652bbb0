#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::json;

#[test]
fn an_openai_body_becomes_a_chat_request() {
    let body = json!({
        "model": "auto",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                {"type": "image_url", "image_url": {"url": "https://example.test/a.jpg", "detail": "low"}},
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        ],
        "max_completion_tokens": 100,
        "stop": "END",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": true}},
        "reasoning_effort": "high",
        "stream": true,
        "stream_options": {"include_usage": true},
        "top_k": 40,
    });
    let read = read(body.to_string().as_bytes()).unwrap();
    assert!(read.stream && read.include_usage);
    let r = read.request;
    assert_eq!(r.model.as_deref(), Some("auto"));
    assert_eq!(r.messages[0].role, Role::System);
    assert_eq!(
        r.messages[1].images().collect::<Vec<_>>(),
        [
            &Image::Base64 {
                media_type: "image/png".into(),
                data: "iVBO".into()
            },
            &Image::Url {
                url: "https://example.test/a.jpg".into()
            }
        ]
    );
    assert!(matches!(
        r.messages[1].content[2],
        Part::Image {
            detail: Some(ImageDetail::Low),
            ..
        }
    ));
    assert_eq!(r.messages[2].tool_calls[0].name, "f");
    assert_eq!(r.messages[3].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(r.max_tokens, Some(100));
    assert_eq!(r.stop, ["END"]);
    assert!(r.tools[0].strict);
    assert_eq!(r.tool_choice, Some(ToolChoice::Function("f".into())));
    assert!(matches!(
        r.response_format,
        Some(ResponseFormat::JsonSchema { strict: true, .. })
    ));
    assert_eq!(r.reasoning.and_then(|x| x.effort), Some(Effort::High));
    // Every effort OpenAI's SDK sends, from `none` to `xhigh`.
    for (text, effort) in [
        ("none", Effort::None),
        ("minimal", Effort::Minimal),
        ("low", Effort::Low),
        ("medium", Effort::Medium),
        ("xhigh", Effort::Xhigh),
    ] {
        let body = json!({"model": "auto", "messages": [{"role": "user", "content": "Hi"}],
                          "reasoning_effort": text});
        let r = super::read(body.to_string().as_bytes()).unwrap().request;
        assert_eq!(r.reasoning.and_then(|x| x.effort), Some(effort), "{text}");
    }
    // Unknown fields pass through to the provider.
    assert_eq!(r.extra_body.get("top_k"), Some(&json!(40)));
    assert!(!r.extra_body.contains_key("stream"));
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (json!({"messages": []}), "missing field `model`"),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": 3}]}),
            "`messages[0].content`",
        ),
        (
            json!({"model": "m", "messages": [], "tool_choice": "sometimes"}),
            "`tool_choice`",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:nope"}}]}]}),
            "`messages[0].content`: an image `data:` URL",
        ),
    ];
    for (body, words) in cases {
        let err = read(body.to_string().as_bytes()).unwrap_err();
        assert!(err.contains(words), "{body}: {err}");
    }
}

#[test]
fn null_is_the_same_as_leaving_a_field_out() {
    // Each optional field alone as `null`, passed-on ones (`logprobs`) included.
    let fields = [
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "user",
        "metadata",
        "n",
        "stream",
        "stream_options",
        "logprobs",
    ];
    for field in fields {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
        body[field] = Value::Null;
        let read = read(body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("`{field}`: null is refused: {e}"));
        assert!(!read.stream && !read.include_usage, "{field}");
        let r = read.request;
        assert!(r.tools.is_empty() && r.tool_choice.is_none(), "{field}");
        assert!(r.metadata.is_empty() && r.stop.is_empty(), "{field}");
        assert!(
            r.max_tokens.is_none() && r.response_format.is_none(),
            "{field}"
        );
        assert!(r.extra_body.is_empty(), "`{field}`: {:?}", r.extra_body);
    }
    // Within messages, tools, `stream_options` and `response_format`.
    let body = json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": "Hi", "tool_calls": null, "tool_call_id": null},
            {"role": "assistant", "content": null, "tool_calls": null},
        ],
        "stream": true,
        "stream_options": {"include_usage": null},
        "tools": [{"type": "function", "function":
            {"name": "f", "description": null, "parameters": null, "strict": null}}],
        "response_format": {"type": "json_schema", "json_schema":
            {"name": "s", "schema": null, "strict": null}},
    });
    let read = read(body.to_string().as_bytes()).unwrap();
    assert!(read.stream && !read.include_usage);
    let r = read.request;
    assert!(
        r.messages
            .iter()
            .all(|m| m.tool_calls.is_empty() && m.tool_call_id.is_none())
    );
    assert!(r.messages[1].content.is_empty());
    assert_eq!(r.tools[0].parameters, json!({}));
    assert!(!r.tools[0].strict && r.tools[0].description.is_none());
    assert!(
        matches!(
            &r.response_format,
            Some(ResponseFormat::JsonSchema { schema, strict: false, .. }) if *schema == json!({})
        ),
        "{:?}",
        r.response_format
    );
}

#[test]
fn null_is_still_refused_where_a_value_is_required() {
    let cases = [
        (json!({"model": null, "messages": []}), "`model`"),
        (
            json!({"model": "m", "messages": [{"role": null, "content": "x"}]}),
            "`messages[0].role`",
        ),
    ];
    for (body, words) in cases {
        let err = read(body.to_string().as_bytes()).unwrap_err();
        assert!(err.contains(words), "{body}: {err}");
    }
}
