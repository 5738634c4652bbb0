//! `POST /v1/responses` over a real socket: a streamed answer served by an OpenAI-compatible
//! upstream, a whole one by Anthropic with the last turn's thinking given back.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::*;

async fn respond(r: &Running, body: &Value) -> reqwest::Response {
    let request = r.http.post(format!("{}/v1/responses", r.base));
    request.bearer_auth(ACME).json(body).send().await.unwrap()
}

/// The `(event name, data)` of each event of an SSE answer.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            };
            let data = serde_json::from_str(&field("data:")).unwrap();
            (field("event:"), data)
        })
        .collect()
}

/// The upstream's request `n`, as JSON.
async fn sent(r: &Running, n: usize) -> Value {
    let seen = r.upstream.received_requests().await.unwrap();
    serde_json::from_slice(&seen[n].body).unwrap()
}

#[tokio::test]
async fn a_streamed_response_through_a_chat_completions_upstream() {
    let r = start("", "").await;
    upstream_answers(&r, "openai/tool_calls.sse", "text/event-stream").await;
    let body = json!({
        "model": "chat", "stream": true, "instructions": "Be brief.",
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "Weather in Paris?"}]}],
        "tools": [
            {"type": "function", "name": "get_weather", "strict": false,
             "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}},
            {"type": "function", "name": "get_time"},
            {"type": "web_search"}
        ],
        "tool_choice": "auto", "parallel_tool_calls": true, "store": false,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "s-1"
    });
    let response = respond(&r, &body).await;
    assert_eq!(response.status(), 200);
    let h = response.headers().clone();
    assert_eq!(h["content-type"], "text/event-stream");
    assert_eq!(h["x-llmroute-dropped"], "tools[2]:web_search");
    assert_eq!(h["x-llmroute-provider"], "oa");
    let events = sse_events(&response.text().await.unwrap());
    for (n, (name, data)) in events.iter().enumerate() {
        assert_eq!(
            (&data["type"], &data["sequence_number"]),
            (&json!(name), &json!(n))
        );
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let delta = "response.function_call_arguments.delta";
    let args_done = "response.function_call_arguments.done";
    let (added, done) = ("response.output_item.added", "response.output_item.done");
    let want = [
        "response.created",
        "response.in_progress",
        added,
        delta,
        delta,
        delta,
        args_done,
        done,
        added,
        delta,
        args_done,
        done,
        "response.completed",
    ];
    assert_eq!(names, want);
    let end = &events[12].1["response"];
    let id = end["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"), "{end}");
    assert_eq!(events[0].1["response"]["id"], id);
    assert_eq!(end["status"], "completed");
    let calls: Vec<(&Value, &Value, &Value)> = end["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (&c["call_id"], &c["name"], &c["arguments"]))
        .collect();
    assert_eq!(
        calls,
        [
            (
                &json!("call_DdmO9pD3xa9XTPNJ32zg2hcA"),
                &json!("get_weather"),
                &json!("{\"location\":\"Paris\"}")
            ),
            (&json!("call_2nd"), &json!("get_time"), &json!("{}")),
        ]
    );
    assert_eq!(events[7].1["item"], end["output"][0]);
    assert_eq!(
        end["usage"],
        json!({"input_tokens": 70, "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
               "output_tokens": 25, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": 95})
    );
    // The upstream got a chat-completions request, without what it could not take.
    let up = sent(&r, 0).await;
    assert_eq!(up["model"], "small");
    assert_eq!(up["stream"], true);
    assert_eq!(
        up["messages"],
        json!([{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "Weather in Paris?"}])
    );
    let tools: Vec<&Value> = up["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["function"]["name"])
        .collect();
    assert_eq!(tools, [&json!("get_weather"), &json!("get_time")]);
    assert_eq!(
        (&up["tool_choice"], &up["parallel_tool_calls"]),
        (&json!("auto"), &json!(true))
    );
    for field in [
        "input",
        "instructions",
        "store",
        "include",
        "prompt_cache_key",
    ] {
        assert!(up.get(field).is_none(), "{field}: {up}");
    }
    assert_eq!(in_flight(&r.router).await, 0);
}

/// A gateway over one Anthropic upstream: model `opus` (alias `deep`), which reasons.
async fn anthropic() -> Running {
    let upstream = MockServer::start().await;
    let yaml = format!(
        "defaults: {{ model: deep }}\n\
         providers:\n\
         \x20 - name: an\n    api: anthropic\n    base_url: {}\n    api_key_env: AN_KEY\n    \
         models:\n      - {{ name: opus, aliases: [deep], price: {{ input: 15, output: 75 }}, \
         capabilities: [tools, reasoning] }}\n\
         tenants:\n  tiers:\n    pro: {{}}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n",
        upstream.uri(),
        hash_key(ACME),
    );
    start_yaml(upstream, &yaml).await
}

/// A thought as llmroute carries it in `encrypted_content`.
fn carried(thought: &Value) -> String {
    format!(
        "llmroute.v1.{}",
        URL_SAFE_NO_PAD.encode(thought.to_string())
    )
}

/// The thought an `encrypted_content` carries.
fn thought_in(encrypted: &Value) -> Value {
    let encoded = encrypted
        .as_str()
        .unwrap()
        .strip_prefix("llmroute.v1.")
        .unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).unwrap()).unwrap()
}

#[tokio::test]
async fn a_whole_response_through_anthropic_gives_the_thinking_back_both_ways() {
    let r = anthropic().await;
    let answer = json!({
        "id": "msg_up", "type": "message", "role": "assistant", "model": "claude-opus",
        "content": [
            {"type": "thinking", "thinking": "Answer now.", "signature": "sig-new"},
            {"type": "text", "text": "It is 18C."}
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 48, "output_tokens": 20}
    });
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&answer))
        .expect(1)
        .mount(&r.upstream)
        .await;
    let before =
        json!({"origin": "anthropic", "text": "Check the weather.", "signature": "sig-prev"});
    let body = json!({
        "model": "deep", "instructions": "Be brief.", "max_output_tokens": 4000,
        "reasoning": {"effort": "low", "summary": "auto"},
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "content": null, "encrypted_content": carried(&before),
             "summary": [{"type": "summary_text", "text": "Check the weather."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "toolu_prev", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "toolu_prev", "output": "18C"}
        ],
        "tools": [
            {"type": "function", "name": "get_weather",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
            {"type": "custom", "name": "apply_patch"}
        ]
    });
    let response = respond(&r, &body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-llmroute-dropped"],
        "tools[1]:custom:apply_patch"
    );
    let got: Value = response.json().await.unwrap();
    assert_eq!(got["object"], "response");
    assert_eq!(got["status"], "completed");
    assert_eq!(got["model"], "opus");
    let output = got["output"].as_array().unwrap();
    assert_eq!(output.len(), 2, "{got}");
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(output[0]["summary"][0]["text"], "Answer now.");
    let now = json!({"origin": "anthropic", "text": "Answer now.", "signature": "sig-new"});
    assert_eq!(thought_in(&output[0]["encrypted_content"]), now);
    assert_eq!(output[1]["content"][0]["text"], "It is 18C.");
    assert_eq!(got["usage"]["input_tokens"], 48);
    assert_eq!(got["usage"]["total_tokens"], 68);
    // Anthropic got a Messages request: the last turn's signed thinking first in its turn.
    let up = sent(&r, 0).await;
    assert_eq!(up["system"], "Be brief.");
    assert_eq!(up["max_tokens"], 4000);
    assert_eq!(up["thinking"]["type"], "enabled");
    let names: Vec<&Value> = up["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, [&json!("get_weather")]);
    let m = up["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "{up}");
    assert_eq!(
        m[1]["content"],
        json!([
            {"type": "thinking", "thinking": "Check the weather.", "signature": "sig-prev"},
            {"type": "tool_use", "id": "toolu_prev", "name": "get_weather", "input": {"city": "Paris"}}
        ])
    );
    assert_eq!(m[2]["content"][0]["type"], "tool_result");
    assert_eq!(m[2]["content"][0]["tool_use_id"], "toolu_prev");
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_request_naming_a_stored_response_is_refused_in_openai_shape() {
    let r = start("", "").await;
    let body = json!({"model": "chat", "input": "Hi", "previous_response_id": "resp_1"});
    let response = respond(&r, &body).await;
    assert_eq!(response.status(), 400);
    let got: Value = response.json().await.unwrap();
    let message = got["error"]["message"].as_str().unwrap();
    assert!(message.contains("`store`"), "{got}");
    assert_eq!(got["error"]["type"], "invalid_request_error");
    assert!(r.upstream.received_requests().await.unwrap().is_empty());
    let wrong = r
        .http
        .get(format!("{}/v1/responses", r.base))
        .bearer_auth(ACME);
    assert_eq!(wrong.send().await.unwrap().status(), 405);
}

#[tokio::test]
async fn what_was_left_out_is_listed_in_a_header_that_stays_short() {
    let r = start("", "").await;
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let mut input: Vec<Value> = (0..40)
        .map(|i| json!({"type": "web_search_call", "id": format!("ws_{i}"), "status": "completed"}))
        .collect();
    input.push(json!({"role": "user", "content": "Hi"}));
    let response = respond(&r, &json!({"model": "chat", "input": input})).await;
    assert_eq!(response.status(), 200);
    let listed = response.headers()["x-llmroute-dropped"]
        .to_str()
        .unwrap()
        .to_owned();
    let names: Vec<&str> = listed.split(',').collect();
    assert_eq!(names.len(), 33, "{listed}");
    assert_eq!(
        (names[0], names[31], names[32]),
        (
            "input[0]:web_search_call",
            "input[31]:web_search_call",
            "+8 more"
        )
    );
    let got: Value = response.json().await.unwrap();
    assert_eq!(
        got["output"][0]["content"][0]["text"],
        "Hello! How can I help you today?"
    );
}
