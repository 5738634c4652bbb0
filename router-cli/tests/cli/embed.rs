//! `llmroute embed` against a mock upstream: one line per vector, `--json`, and a chat model
//! refused.

use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A scene with one OpenAI-compatible upstream `oa` serving an embedding model `te` (the
/// default) and a chat model `talk`, and its mock server.
async fn embedding_scene() -> (Scene, MockServer) {
    let server = MockServer::start().await;
    let yaml = format!(
        "defaults: {{ model: te }}
providers:
  - name: oa
    api: openai
    base_url: {}/v1
    api_key_env: OA_KEY
    models:
      - {{ name: te, kind: embedding, price: {{ input: 0.02 }} }}
      - {{ name: talk, price: {{ input: 1, output: 2 }} }}
",
        server.uri()
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("providers.yaml");
    std::fs::write(&config, yaml).unwrap();
    (Scene { dir, config }, server)
}

/// The upstream embeds `["from a file", "two"]` as two vectors, 6 prompt tokens.
async fn upstream_embeds(server: &MockServer) {
    let answer = json!({
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -2.0, 0.25, 1.0, 3.0]},
            {"object": "embedding", "index": 1, "embedding": [0.125]},
        ],
        "model": "te",
        "usage": {"prompt_tokens": 6, "total_tokens": 6},
    });
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(body_partial_json(
            json!({"model": "te", "input": ["from a file", "two"]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .expect(1)
        .mount(server)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn embed_prints_one_line_per_vector_with_its_size_and_first_values() {
    let (s, server) = embedding_scene().await;
    upstream_embeds(&server).await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["embed", "-p"])
        .arg(s.prompt("from a file\n"))
        .args(["--text", "two"]);
    let (stdout, stderr) = run_async(cmd, 0).await;
    assert_eq!(
        stdout,
        "0  5 dimensions  [0.5, -2, 0.25, 1, ...]\n1  1 dimensions  [0.125]\n"
    );
    assert_eq!(stderr, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn embed_json_prints_the_whole_answer() {
    let (s, server) = embedding_scene().await;
    upstream_embeds(&server).await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["embed", "--json", "--text", "from a file", "--text", "two"]);
    let (stdout, _) = run_async(cmd, 0).await;
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["provider"], "oa");
    assert_eq!(answer["model"], "te");
    assert_eq!(
        answer["embeddings"],
        json!([[0.5, -2.0, 0.25, 1.0, 3.0], [0.125]])
    );
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 6, "total_tokens": 6})
    );
    let cost = answer["cost_usd"].as_f64().unwrap();
    assert!((cost - 6.0 * 0.02 / 1e6).abs() < 1e-15, "{cost}");
    assert_eq!(answer["attempts"][0]["outcome"], "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn embed_with_a_chat_model_exits_2_naming_it() {
    let (s, _server) = embedding_scene().await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["embed", "-m", "talk", "--text", "hi"]);
    let (stdout, stderr) = run_async(cmd, 2).await;
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("model `talk` is a chat model") && stderr.contains("embedding models: te"),
        "{stderr}"
    );
    let mut nothing = s.llmroute(&["oa"]);
    nothing.arg("embed");
    let (_, stderr) = run_async(nothing, 2).await;
    assert!(stderr.contains("nothing to embed"), "{stderr}");
}

#[test]
fn providers_shows_each_models_kind_and_dimensions() {
    let yaml = "providers:
  - name: x
    api: openai
    base_url: https://api.example.com/v1
    api_key_env: X_KEY
    models:
      - { name: te, kind: embedding, price: { input: 0.02 }, dimensions: 1536 }
      - { name: chat, price: { input: 1, output: 2 } }
";
    let (_dir, config) = config_file("providers.yaml", yaml);
    let (out, _) = run(llmroute().arg("--config").arg(&config).arg("providers"), 0);
    assert!(out.contains("embedding (1536 dimensions)"), "{out}");
    let (out, _) = run(
        llmroute()
            .arg("--config")
            .arg(&config)
            .args(["providers", "--json"]),
        0,
    );
    let json: Value = serde_json::from_str(&out).unwrap();
    let models = &json["providers"][0]["models"];
    assert_eq!(
        (&models[0]["kind"], &models[0]["dimensions"]),
        (&json!("embedding"), &json!(1536))
    );
    assert_eq!(models[0]["price"]["output"], 0.0);
    assert_eq!(models[1]["kind"], "chat");
    assert!(models[1].get("dimensions").is_none(), "{}", models[1]);
}
