//! Bodies read into the router's request.

use router_sdk::{Effort, Image, ImageDetail, Part, ResponseFormat, Role, ToolChoice};

use super::*;

/// A turn of Codex's, cut down from a capture: developer and user messages with ids, Codex's
/// code-mode tools item, the last turn's reasoning (llmroute's encoding), call and output, an
/// OpenAI reasoning item, a namespaced call; function tools, a custom and a hosted tool, a
/// namespace, tool search.
fn codex_turn() -> Value {
    let ours = thought::encode(&signed("Run the command."));
    json!({
        "model": "gpt-5.5",
        "stream": true,
        "input": [
            {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": []},
            {"type": "message", "id": "msg_1", "role": "developer",
             "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "id": "msg_2", "role": "developer", "content": [
                {"type": "input_text", "text": "<skills_instructions>"},
                {"type": "input_text", "text": "<permissions instructions>"}]},
            {"type": "message", "id": "msg_3", "role": "user",
             "content": [{"type": "input_text", "text": "<environment_context>"}]},
            {"type": "message", "id": "msg_4", "role": "user",
             "content": [{"type": "input_text", "text": "Run echo ok"}]},
            {"type": "reasoning", "id": "rs_1", "content": null, "encrypted_content": ours,
             "summary": [{"type": "summary_text", "text": "Run the command."}]},
            {"type": "function_call", "status": "completed", "id": "fc_1", "name": "exec_command",
             "arguments": "{\"cmd\": \"echo ok\"}", "call_id": "call_1"},
            {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "ok\n"},
            {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAAABoOpenAI"},
            {"type": "function_call", "id": "fc_2", "name": "spawn_agent",
             "namespace": "multi_agent_v1", "arguments": "{}", "call_id": "call_2"},
            {"type": "function_call_output", "call_id": "call_2", "output": "spawned"}
        ],
        "tools": [
            {"type": "function", "name": "exec_command", "description": "Runs a command",
             "strict": false, "parameters": {"type": "object", "properties": {
                "cmd": {"type": "string"}}, "required": ["cmd"], "additionalProperties": false}},
            {"type": "custom", "name": "apply_patch", "description": "Edit files",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": [
                {"type": "function", "name": "spawn_agent", "strict": false,
                 "parameters": {"type": "object", "properties": {}}},
                {"type": "function", "name": "wait_agent", "description": "Wait"}]},
            {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}},
            {"type": "web_search", "external_web_access": true}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"effort": "medium"},
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "01a243d0",
        "text": {"verbosity": "low"},
        "client_metadata": {"x-codex-installation-id": "b110ba18"}
    })
}

#[test]
fn a_codex_turn_reads_into_the_routers_request() {
    let (read, asked) = read(&codex_turn()).unwrap();
    assert!(read.stream);
    assert_eq!(
        read.dropped,
        [
            "input[0]:additional_tools",
            "tools[1]:custom:apply_patch",
            "tools[3]:tool_search",
            "tools[4]:web_search"
        ]
    );
    let r = read.request;
    assert_eq!(r.model.as_deref(), Some("gpt-5.5"));
    assert_eq!(r.reasoning.unwrap().effort, Some(Effort::Medium));
    assert_eq!(
        (r.tool_choice, r.parallel_tool_calls),
        (Some(ToolChoice::Auto), Some(true))
    );
    let names: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "exec_command",
            "multi_agent_v1__spawn_agent",
            "multi_agent_v1__wait_agent"
        ]
    );
    assert_eq!(r.tools[0].parameters["required"], json!(["cmd"]));
    assert_eq!(
        r.tools[2].parameters,
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(
        asked.names.caller("multi_agent_v1__wait_agent"),
        (Some("multi_agent_v1"), "wait_agent")
    );
    let m = &r.messages;
    let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
    use Role::{Assistant, System, Tool, User};
    assert_eq!(
        roles,
        [System, System, User, User, Assistant, Tool, Assistant, Tool]
    );
    let texts: Vec<&str> = m[1].texts().collect();
    assert_eq!(
        texts,
        ["<skills_instructions>", "<permissions instructions>"]
    );
    // The last turn's call, with its thought given back whole; OpenAI's reasoning is left out.
    assert_eq!(m[4].tool_calls[0].id, "call_1");
    assert_eq!(m[4].tool_calls[0].arguments, "{\"cmd\": \"echo ok\"}");
    assert_eq!(m[4].thinking, [signed("Run the command.")]);
    assert!(m[4].content.is_empty());
    assert_eq!(
        (m[5].tool_call_id.as_deref(), m[5].text_content().as_str()),
        (Some("call_1"), "ok\n")
    );
    assert!(m[6].thinking.is_empty());
    assert_eq!(m[6].tool_calls[0].name, "multi_agent_v1__spawn_agent");
    // What only OpenAI's API knows is not passed on.
    assert!(r.extra_body.is_empty() && r.metadata.is_empty() && r.headers.is_empty());
    assert_eq!(r.response_format, None);
}

#[test]
fn instructions_a_string_input_and_the_answers_shape_read_as_the_router_takes_them() {
    let body = json!({
        "model": "m", "instructions": "Be brief.", "input": "Hi",
        "max_output_tokens": 300, "temperature": 0.2, "top_p": 0.9,
        "metadata": {"job": "7"}, "safety_identifier": "u-1", "store": true,
        "reasoning": {"summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "answer", "strict": true,
                            "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}},
        // Codex's compaction call: no tools, and a choice that then means nothing.
        "tools": [], "tool_choice": "required", "parallel_tool_calls": true
    });
    let (read, asked) = read(&body).unwrap();
    assert!(!read.stream, "no `stream`: a whole answer");
    assert_eq!(read.dropped, ["store"]);
    let r = read.request;
    assert_eq!(r.messages[0].role, Role::System);
    assert_eq!(r.messages[0].text_content(), "Be brief.");
    assert_eq!(r.messages[1].role, Role::User);
    assert_eq!(r.messages[1].text_content(), "Hi");
    assert_eq!(
        (r.max_tokens, r.temperature, r.top_p),
        (Some(300), Some(0.2), Some(0.9))
    );
    assert_eq!(r.metadata["job"], "7");
    assert_eq!(r.user.as_deref(), Some("u-1"));
    // A summary without an effort asks for no reasoning: any model can serve it.
    assert_eq!(r.reasoning, None);
    assert_eq!(
        r.response_format,
        Some(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            strict: true,
        })
    );
    assert!(r.tools.is_empty());
    assert_eq!((r.tool_choice, r.parallel_tool_calls), (None, None));
    assert_eq!(asked.echo.tool_choice, "required");
    let object = json!({"model": "m", "input": "Hi", "text": {"format": {"type": "json_object"}}});
    let r = super::read(&object).unwrap().0.request;
    assert_eq!(r.response_format, Some(ResponseFormat::JsonObject));
}

#[test]
fn an_assistant_message_and_the_calls_after_it_are_one_turn() {
    let broken = "llmroute.v1.bm90IGEgdGhvdWdodA";
    let body = json!({"model": "m", "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K", "detail": "low"},
            {"type": "input_file", "file_id": "file-1"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": broken},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Looking.", "annotations": []}]},
        {"type": "function_call", "name": "zoom", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call", "name": "crop", "arguments": "{}", "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "zoomed"},
            {"type": "input_image", "image_url": "https://x.test/z.png"}]},
        {"type": "function_call_output", "call_id": "c2", "output": "cropped"},
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"}
    ]});
    let (read, _) = read(&body).unwrap();
    assert_eq!(
        read.dropped,
        [
            "input[0].content[2]:input_file",
            "input[1]:reasoning",
            "input[8]:web_search_call"
        ]
    );
    let m = &read.request.messages;
    assert_eq!(m.len(), 5);
    assert_eq!(
        m[0].content[1],
        Part::Image {
            image: Image::Base64 {
                media_type: "image/png".into(),
                data: "iVBORw0K".into()
            },
            detail: Some(ImageDetail::Low),
        }
    );
    assert_eq!(m[1].role, Role::Assistant);
    assert_eq!(m[1].text_content(), "Looking.");
    let calls: Vec<&str> = m[1].tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(calls, ["c1", "c2"]);
    assert_eq!(m[2].text_content(), "zoomed");
    assert_eq!(m[2].images().count(), 1);
    assert_eq!(m[3].tool_call_id.as_deref(), Some("c2"));
    assert_eq!(
        (m[4].role, m[4].text_content().as_str()),
        (Role::Assistant, "No.")
    );
}

#[test]
fn what_needs_a_stored_response_is_refused_naming_store() {
    let cases = [
        json!({"model": "m", "input": "Hi", "previous_response_id": "resp_1"}),
        json!({"model": "m", "input": "Hi", "conversation": "conv_1"}),
        json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}),
    ];
    for body in cases {
        let err = read(&body).unwrap_err();
        assert!(err.contains("`store`"), "{err}");
    }
    let err =
        read(&json!({"model": "m", "input": "Hi", "previous_response_id": "resp_1"})).unwrap_err();
    assert!(err.starts_with("`previous_response_id`: "), "{err}");
    assert!(
        err.contains("send the whole conversation as `input`"),
        "{err}"
    );
    let err = read(&json!({"model": "m", "input": "Hi", "background": true})).unwrap_err();
    assert!(err.starts_with("`background`"), "{err}");
    // `null`s and `false` are what leaving them out is.
    let fine = json!({"model": "m", "input": "Hi", "previous_response_id": null,
                      "background": false, "store": false, "tools": null, "tool_choice": null});
    assert!(read(&fine).unwrap().0.dropped.is_empty());
}

#[test]
fn a_malformed_body_is_refused_naming_the_field() {
    let item = |item: Value| json!({"model": "m", "input": [item]});
    let cases = [
        (json!({"input": "Hi"}), "missing field `model`"),
        (json!({"model": "m"}), "missing field `input`"),
        (json!({"model": "m", "input": 7}), "`input`"),
        (item(json!("Hi")), "`input[0]`: not an object"),
        (item(json!({"id": "x"})), "`input[0]`: missing field `type`"),
        (
            item(json!({"role": "robot", "content": "x"})),
            "`input[0].role`",
        ),
        (
            item(json!({"role": "user", "content": [{"type": "input_text"}]})),
            "`input[0].content[0]`: missing field `text`",
        ),
        (
            item(
                json!({"role": "user", "content": [{"type": "input_image", "image_url": "data:xx"}]}),
            ),
            "`input[0].content[0].image_url`: an image `data:` URL",
        ),
        (
            item(json!({"type": "function_call", "name": "f", "arguments": "{}"})),
            "`input[0]`: missing field `call_id`",
        ),
        (
            json!({"model": "m", "input": "Hi", "tools": [{"type": "function", "parameters": {}}]}),
            "`tools[0]`: missing field `name`",
        ),
        (
            json!({"model": "m", "input": "Hi", "tools": [{"type": "namespace", "name": "n",
                   "tools": [{"type": "function", "name": 3}]}]}),
            "`tools[0].tools[0].name`",
        ),
        (
            json!({"model": "m", "input": "Hi", "tools": [{"type": "function", "name": "f"}],
                   "tool_choice": "sometimes"}),
            "`tool_choice`: `sometimes`",
        ),
        (
            json!({"model": "m", "input": "Hi", "reasoning": {"effort": "huge"}}),
            "`reasoning.effort`",
        ),
        (
            json!({"model": "m", "input": "Hi", "text": {"format": {"type": "xml"}}}),
            "`text.format.type`: unknown variant `xml`",
        ),
    ];
    for (body, want) in cases {
        let err = read(&body).unwrap_err();
        assert!(err.contains(want), "{body}: {err}");
    }
}
