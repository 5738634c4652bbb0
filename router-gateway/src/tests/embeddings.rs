//! `POST /v1/embeddings` over a real socket: OpenAI's shapes, floats and base64, token ids, the
//! router's headers, and the same keys, tiers, metrics and refusals as chat.

use super::*;

/// A gateway over one OpenAI-compatible upstream with a chat model `small` and an embedding
/// model `te` (alias `embed`), tier `pro` (with `tier`) for `ACME`'s tenant.
async fn start_embedding(tier: &str) -> Running {
    let upstream = MockServer::start().await;
    let yaml = format!(
        "providers:
  - name: oa
    api: openai
    base_url: {}/v1
    api_key_env: OA_KEY
    models:
      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }} }}
      - {{ name: te, kind: embedding, aliases: [embed], price: {{ input: 0.02 }} }}
tenants:
  tiers:
    pro: {{ {tier} }}
  members:
    acme: pro
gateway:
  keys:
    - {{ sha256: {}, tenant: acme }}
",
        upstream.uri(),
        hash_key(ACME)
    );
    start_yaml(upstream, &yaml).await
}

/// The upstream answers every embeddings call with `vectors` (in reverse order, by index) and
/// 7 prompt tokens.
async fn upstream_embeds(r: &Running, vectors: Value) {
    let items: Vec<Value> = vectors
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .rev()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
        .collect();
    let answer = json!({"object": "list", "data": items, "model": "te",
                        "usage": {"prompt_tokens": 7, "total_tokens": 7}});
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(body_partial_json(json!({"encoding_format": "float"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .mount(&r.upstream)
        .await;
}

impl Running {
    async fn embed(&self, body: &Value) -> reqwest::Response {
        let url = format!("{}/v1/embeddings", self.base);
        let req = self.http.post(url).bearer_auth(ACME);
        req.json(body).send().await.unwrap()
    }
}

#[tokio::test]
async fn embeddings_answer_in_openai_shape_as_floats_with_the_router_headers() {
    let r = start_embedding("").await;
    upstream_embeds(&r, json!([[0.0023064255, -0.009327292], [0.5, 1.0]])).await;
    let response = r
        .embed(&json!({"model": "embed", "input": ["one", "two"], "user": "u-1"}))
        .await;
    assert_eq!(response.status(), 200);
    let h = response.headers().clone();
    assert_eq!(h["x-llmroute-provider"], "oa");
    assert_eq!(h["x-llmroute-model"], "te");
    assert_eq!(h["x-llmroute-cost-usd"], "0.00000014");
    assert!(h.contains_key("x-request-id"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({
            "object": "list",
            "data": [
                {"object": "embedding", "index": 0, "embedding": [0.0023064255, -0.009327292]},
                {"object": "embedding", "index": 1, "embedding": [0.5, 1.0]},
            ],
            "model": "te",
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        })
    );
    let sent: Value = r.upstream.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(sent["user"], "u-1");
    assert_eq!(sent["input"], json!(["one", "two"]));
}

#[tokio::test]
async fn base64_is_the_little_endian_f32_bytes_of_each_vector() {
    let r = start_embedding("").await;
    upstream_embeds(&r, json!([[1.0, -2.0], [0.0023064255]])).await;
    let body = json!({"model": "te", "input": ["a", "b"], "encoding_format": "base64"});
    let answer: Value = r.embed(&body).await.json().await.unwrap();
    // 1.0 = 00 00 80 3f, -2.0 = 00 00 00 c0; "ZicXOw==" is 66 27 17 3b.
    assert_eq!(answer["data"][0]["embedding"], "AACAPwAAAMA=");
    assert_eq!(answer["data"][1]["embedding"], "ZicXOw==");
    assert_eq!(
        f32::from_le_bytes([0x66, 0x27, 0x17, 0x3b]),
        0.002_306_425_5,
        "the bytes are the upstream's float"
    );
}

#[tokio::test]
async fn token_id_inputs_go_upstream_as_token_ids() {
    let r = start_embedding("").await;
    for (input, vectors) in [
        (json!([[9906, 1917], [40]]), json!([[1.0], [2.0]])),
        (json!([[9906, 1917]]), json!([[3.0]])),
    ] {
        let data: Vec<Value> = vectors
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
            .collect();
        Mock::given(method("POST"))
            .and(path("/v1/embeddings"))
            .and(body_partial_json(json!({"input": input})))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"data": data})))
            .expect(1)
            .mount(&r.upstream)
            .await;
    }
    let lists = r
        .embed(&json!({"model": "te", "input": [[9906, 1917], [40]]}))
        .await;
    let lists: Value = lists.json().await.unwrap();
    assert_eq!(lists["data"][1]["embedding"], json!([2.0]));
    // One list of ids is one input.
    let one = r
        .embed(&json!({"model": "te", "input": [9906, 1917]}))
        .await;
    let one: Value = one.json().await.unwrap();
    assert_eq!(
        one["data"],
        json!([{"object": "embedding", "index": 0, "embedding": [3.0]}])
    );
    // No usage from upstream: the estimate, one token per id.
    assert_eq!(one["usage"], json!({"prompt_tokens": 2, "total_tokens": 2}));
}

#[tokio::test]
async fn a_model_of_the_wrong_kind_is_400_naming_it() {
    let r = start_embedding("").await;
    let response = r.embed(&json!({"model": "chat", "input": "hi"})).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("model `chat` is a chat model")
            && message.contains("embedding models: te"),
        "{message}"
    );
    let chat = json!({"model": "embed", "messages": [{"role": "user", "content": "hi"}]});
    let response = r.post(Some(ACME), &chat).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("model `embed` is an embedding model"),
        "{message}"
    );
    assert!(r.upstream.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_bad_body_is_400_naming_the_field() {
    let r = start_embedding("").await;
    for (body, words) in [
        (json!({"model": "te", "input": [1, "a"]}), "`input[1]`"),
        (
            json!({"model": "te", "input": "a", "encoding_format": "hex"}),
            "`encoding_format`",
        ),
        (json!({"model": "te"}), "missing field `input`"),
        (
            json!({"model": "te", "input": ["a", ""]}),
            "input[1] is empty",
        ),
    ] {
        let response = r.embed(&body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{body}: {message}");
    }
}

#[tokio::test]
async fn embeddings_count_in_the_tier_and_the_metrics() {
    let r = start_embedding("rpm: 1").await;
    upstream_embeds(&r, json!([[1.0]])).await;
    let body = json!({"model": "te", "input": "hi"});
    let ok = r.embed(&body).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["x-ratelimit-remaining-requests"], "0");
    let url = format!("{}/v1/embeddings", r.base);
    let refused = r
        .http
        .post(url)
        .bearer_auth(ACME)
        .header("x-llmroute-timeout", "1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(refused.headers()["x-ratelimit-limit-requests"], "1");
    let wrong_key = r
        .http
        .post(format!("{}/v1/embeddings", r.base))
        .bearer_auth("llmr-nobody")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_key.status(), 401);
    let text = r.metrics_text().await;
    for line in [
        r#"llmroute_requests_total{tenant="acme",provider="oa",model="te",outcome="ok"} 1"#,
        r#"llmroute_requests_total{tenant="acme",provider="-",model="-",outcome="rate_limit_exceeded"} 1"#,
        r#"llmroute_tokens_total{tenant="acme",provider="oa",model="te",kind="prompt"} 7"#,
        r#"llmroute_tokens_total{tenant="acme",provider="oa",model="te",kind="completion"} 0"#,
        r#"llmroute_upstream_attempts_total{deployment="oa/te",outcome="ok"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
}
