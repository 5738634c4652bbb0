//! `POST /v1/messages` over a real socket: Claude Code's turns through an Anthropic upstream
//! (signed thinking and cache breakpoints carried, `anthropic-beta` passed on) and through an
//! OpenAI-compatible one, the token count, and refusals in Anthropic's shape.

use super::*;

/// A gateway over one mock serving Anthropic (`claude`, thinking) and OpenAI (`small`) models.
async fn start_two() -> Running {
    let upstream = MockServer::start().await;
    let base = upstream.uri();
    let yaml = format!(
        "providers:\n\
         \x20 - name: an\n    api: anthropic\n    base_url: {base}\n    api_key_env: AN_KEY\n    \
         models:\n      - {{ name: claude-x, aliases: [claude], price: {{ input: 3, output: 15, cached_input: 0.3 }}, \
         capabilities: [tools, vision, json_schema, reasoning] }}\n\
         \x20 - name: oa\n    api: openai\n    base_url: {base}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, price: {{ input: 2, output: 8 }}, \
         capabilities: [tools, vision, json_schema, reasoning] }}\n\
         tenants:\n  tiers:\n    pro: {{}}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n",
        hash_key(ACME),
    );
    start_yaml(upstream, &yaml).await
}

/// Anthropic's stream of a signed thought and a call of `Bash`.
const THINK_AND_CALL: &str = concat!(
    "event: message_start\n",
    r#"data: {"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":40,"cache_read_input_tokens":2000,"cache_creation_input_tokens":0,"output_tokens":1}}}"#,
    "\n\nevent: content_block_start\n",
    r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
    "\n\nevent: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Run it."}}"#,
    "\n\nevent: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG-up"}}"#,
    "\n\nevent: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":0}"#,
    "\n\nevent: content_block_start\n",
    r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}"#,
    "\n\nevent: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"command\":\"echo ok\"}"}}"#,
    "\n\nevent: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":1}"#,
    "\n\nevent: message_delta\n",
    r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"input_tokens":40,"cache_read_input_tokens":2000,"output_tokens":30}}"#,
    "\n\nevent: message_stop\n",
    r#"data: {"type":"message_stop"}"#,
    "\n\n",
);

/// Claude Code's first turn, cut down.
fn first_turn(model: &str) -> Value {
    json!({
        "model": model, "max_tokens": 32000, "stream": true,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Bash", "description": "Run", "input_schema":
                   {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}],
        "thinking": {"type": "enabled", "budget_tokens": 31999, "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "{\"session\":\"s\"}"},
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Run echo ok", "cache_control": {"type": "ephemeral"}}]}]
    })
}

/// The turn after `first_turn`'s call: its thinking and call given back, then the result.
fn second_turn(model: &str, signature: &str) -> Value {
    let mut body = first_turn(model);
    body["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Run it.", "signature": signature},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo ok"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok\n",
             "cache_control": {"type": "ephemeral"}}]}),
    ]);
    body
}

impl Running {
    /// `body` to `/v1/messages?beta=true` as Claude Code sends it: `x-api-key`,
    /// `Accept: application/json` whether streamed or not, and its betas.
    async fn post_messages(&self, key: Option<&str>, body: &Value) -> reqwest::Response {
        let url = format!("{}/v1/messages?beta=true", self.base);
        let mut req = self
            .http
            .post(url)
            .header("accept", "application/json")
            .header("anthropic-version", "2023-06-01")
            .header(
                "anthropic-beta",
                "interleaved-thinking-2025-05-14,claude-code-20250219",
            );
        if let Some(key) = key {
            req = req.header("x-api-key", key);
        }
        req.json(body).send().await.unwrap()
    }
}

/// The `(event, data)` pairs of an SSE body.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let field = |name: &str| {
                e.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_default()
            };
            let data = serde_json::from_str(&field("data:")).unwrap();
            (field("event:"), data)
        })
        .collect()
}

/// The JSON bodies the upstream received at `path`.
async fn received(r: &Running, at: &str) -> Vec<Value> {
    let requests = r.upstream.received_requests().await.unwrap();
    requests
        .iter()
        .filter(|q| q.url.path() == at)
        .map(|q| serde_json::from_slice(&q.body).unwrap())
        .collect()
}

#[tokio::test]
async fn claude_codes_tool_turn_streams_through_anthropic_with_its_thinking_signed() {
    let r = start_two().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(THINK_AND_CALL, "text/event-stream"))
        .mount(&r.upstream)
        .await;
    let response = r.post_messages(Some(ACME), &first_turn("claude")).await;
    let status = response.status();
    if status != 200 {
        panic!("{status}: {}", response.text().await.unwrap());
    }
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = sse_events(&response.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "ping"]);
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    let data = |kind: &str| -> Vec<&Value> {
        let deltas = events
            .iter()
            .map(|(_, d)| d)
            .filter(|d| d["type"] == "content_block_delta");
        deltas.filter(|d| d["delta"]["type"] == kind).collect()
    };
    assert_eq!(data("thinking_delta")[0]["delta"]["thinking"], "Run it.");
    assert_eq!(data("signature_delta")[0]["delta"]["signature"], "SIG-up");
    assert_eq!(
        data("input_json_delta")[0]["delta"]["partial_json"],
        "{\"command\":\"echo ok\"}"
    );
    let end = &events[events.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "tool_use");
    assert_eq!(end["usage"]["cache_read_input_tokens"], 2000);
    assert_eq!(end["usage"]["input_tokens"], 40);
    // What Anthropic received: the budget under the cap, the breakpoints, no Anthropic-only
    // field the other providers would refuse.
    let requests = r.upstream.received_requests().await.unwrap();
    assert_eq!(
        requests[0].headers["anthropic-beta"],
        "interleaved-thinking-2025-05-14,claude-code-20250219"
    );
    let sent = &received(&r, "/v1/messages").await[0];
    assert_eq!(sent["thinking"]["budget_tokens"], 31999);
    assert_eq!(sent["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(
        sent["messages"][0]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(sent.get("context_management"), None);

    // The next turn gives the signed thought back: Anthropic gets it first in the call's turn.
    let response = r
        .post_messages(Some(ACME), &second_turn("claude", "SIG-up"))
        .await;
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();
    let sent = &received(&r, "/v1/messages").await[1];
    let turn = &sent["messages"][1]["content"];
    assert_eq!(
        turn[0],
        json!({"type": "thinking", "thinking": "Run it.", "signature": "SIG-up"})
    );
    assert_eq!(turn[1]["type"], "tool_use");
    assert_eq!(
        sent["messages"][2]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(sent["thinking"]["budget_tokens"], 31999);
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_messages_turn_is_served_whole_by_an_openai_compatible_upstream() {
    let r = start_two().await;
    let call = json!({"id": "call_9", "type": "function",
                      "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}});
    let answer = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "small",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": "Listing.", "tool_calls": [call]}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 9,
                  "prompt_tokens_details": {"cached_tokens": 100}}});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .mount(&r.upstream)
        .await;
    let mut body = second_turn("small", "SIG-from-anthropic");
    body["stream"] = json!(false);
    let response = r.post_messages(Some(ACME), &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-llmroute-provider"], "oa");
    let got: Value = response.json().await.unwrap();
    assert_eq!(got["type"], "message");
    assert_eq!(got["stop_reason"], "tool_use");
    assert_eq!(
        got["content"][0],
        json!({"type": "text", "text": "Listing."})
    );
    assert_eq!(
        got["content"][1],
        json!({"type": "tool_use", "id": "call_9", "name": "Bash", "input": {"command": "ls"}})
    );
    assert_eq!(
        got["usage"],
        json!({"input_tokens": 20, "output_tokens": 9, "cache_read_input_tokens": 100,
               "cache_creation_input_tokens": 0})
    );
    // OpenAI got chat completions: the call and its result, no thinking, no Anthropic header.
    let requests = r.upstream.received_requests().await.unwrap();
    assert!(requests[0].headers.get("anthropic-beta").is_none());
    let sent: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let messages = sent["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(messages[2]["tool_calls"][0]["id"], "toolu_1");
    assert_eq!(messages[3]["tool_call_id"], "toolu_1");
    assert!(!sent.to_string().contains("SIG-from-anthropic"));
    assert!(sent.get("reasoning_effort").is_some());
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn refusals_come_in_anthropics_shape_and_status() {
    let r = start_two().await;
    let error = |status: u16, kind: &str| (status, kind.to_owned());
    let shape = |v: &Value| {
        assert_eq!(v["type"], "error", "{v}");
        v["error"]["type"].as_str().unwrap().to_owned()
    };
    let cases = [
        (
            None,
            first_turn("claude"),
            error(401, "authentication_error"),
        ),
        (
            Some(ACME),
            json!({"model": "claude", "messages": 7}),
            error(400, "invalid_request_error"),
        ),
        (
            Some(ACME),
            first_turn("no-such-model"),
            error(404, "not_found_error"),
        ),
    ];
    for (key, body, (status, kind)) in cases {
        let response = r.post_messages(key, &body).await;
        assert_eq!(response.status(), status, "{body}");
        let got: Value = response.json().await.unwrap();
        assert_eq!(shape(&got), kind, "{got}");
    }
    let response = r
        .post_messages(Some(ACME), &json!({"model": "claude", "messages": 7}))
        .await;
    let got: Value = response.json().await.unwrap();
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`messages`"),
        "{got}"
    );
    // An overloaded Anthropic is 529 `overloaded_error`, as Anthropic itself says it.
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(
            ResponseTemplate::new(529).set_body_json(json!({"type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        )
        .mount(&r.upstream)
        .await;
    let mut whole = first_turn("claude");
    whole["stream"] = json!(false);
    let response = r.post_messages(Some(ACME), &whole).await;
    assert_eq!(response.status(), 529);
    let got: Value = response.json().await.unwrap();
    assert_eq!(shape(&got), "overloaded_error");
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn count_tokens_is_anthropics_count_where_it_can_count_else_the_estimate() {
    let r = start_two().await;
    let url = format!("{}/v1/messages/count_tokens?beta=true", r.base);
    let count = |body: Value| {
        let req = r.http.post(&url).header("x-api-key", ACME).json(&body);
        async move { req.send().await.unwrap() }
    };
    let ask = |model: &str, text: &str| {
        json!({"model": model, "max_tokens": 100, "metadata": {"user_id": "u"},
               "messages": [{"role": "user", "content": text}]})
    };
    // An OpenAI-compatible model: the router's estimate, and no provider is asked.
    let small = count(ask("small", "foo")).await;
    assert_eq!(small.status(), 200);
    assert_eq!(small.headers()["x-llmroute-token-count"], "estimate");
    let small: u64 = small.json::<Value>().await.unwrap()["input_tokens"]
        .as_u64()
        .unwrap();
    let long = "word ".repeat(2000);
    let big = count(ask("small", &long)).await;
    let big: u64 = big.json::<Value>().await.unwrap()["input_tokens"]
        .as_u64()
        .unwrap();
    assert!(small > 0 && big > 2000 && big > small, "{small} {big}");
    assert!(r.upstream.received_requests().await.unwrap().is_empty());

    // Anthropic counts its own, sent only the prompt's fields.
    Mock::given(method("POST"))
        .and(path("/v1/messages/count_tokens"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"input_tokens": 1234})))
        .up_to_n_times(1)
        .mount(&r.upstream)
        .await;
    let counted = count(ask("claude", "foo")).await;
    assert_eq!(counted.headers()["x-llmroute-token-count"], "provider");
    assert_eq!(counted.headers()["x-llmroute-provider"], "an");
    assert_eq!(counted.json::<Value>().await.unwrap()["input_tokens"], 1234);
    let sent = &received(&r, "/v1/messages/count_tokens").await[0];
    let mut fields: Vec<&str> = sent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["messages", "model"]);
    // When it cannot count (here 404: no more answers), the estimate stands.
    let fallback = count(ask("claude", "foo")).await;
    assert_eq!(fallback.status(), 200);
    assert_eq!(fallback.headers()["x-llmroute-token-count"], "estimate");
    let bad = count(json!({"model": "claude"})).await;
    assert_eq!(bad.status(), 400);
    let bad: Value = bad.json().await.unwrap();
    assert_eq!(bad["error"]["type"], "invalid_request_error");
    assert_eq!(in_flight(&r.router).await, 0);
}
