//! `llmroute chat --image` and `--json-schema`: what goes on the wire, the JSON check of the
//! answer (exit 4 when it is not JSON), and clear errors for unusable files.

use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

const OPENAI_PATH: &str = "/v1/chat/completions";

/// An OpenAI answer whose content is `content`.
fn answer(content: &str) -> ResponseTemplate {
    let body = json!({
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 10},
    });
    ResponseTemplate::new(200).set_body_json(body)
}

/// Upstream `oa` (`gpt-test`, $2 / $8) at `server`.
fn upstream_at(
    server: &wiremock::MockServer,
) -> (
    &'static str,
    &'static str,
    String,
    &'static str,
    f64,
    f64,
    &'static str,
) {
    let base = format!("{}/v1", server.uri());
    ("oa", "openai", base, "gpt-test", 2.0, 8.0, "rpm: 100")
}

fn schema_file(s: &Scene) -> std::path::PathBuf {
    let file = s.prompt("unused").with_file_name("event.json");
    let schema =
        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    std::fs::write(&file, schema.to_string()).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread")]
async fn json_schema_sends_the_schema_and_prints_the_checked_json() {
    let (s, server) = openai_scene("rpm: 100").await;
    let schema = schema_file(&s);
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_partial_json(json!({"response_format": {
            "type": "json_schema",
            "json_schema": {"name": "event", "strict": true, "schema": {"required": ["name"]}},
        }})))
        .respond_with(answer(r#"{"name":"fair"}"#))
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--json-schema"])
        .arg(&schema)
        .arg("-p")
        .arg(s.prompt("Extract the event."));
    let (stdout, _) = run_async(cmd, 0).await;
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(printed, json!({"name": "fair"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_is_not_json_exits_4() {
    let (s, server) = openai_scene("rpm: 100").await;
    let schema = schema_file(&s);
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(answer("Sure! The event is a fair."))
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--json-schema"])
        .arg(&schema)
        .arg("-p")
        .arg(s.prompt("Extract the event."));
    let (stdout, stderr) = run_async(cmd, 4).await;
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("oa/gpt-test answered with something that is not JSON")
            && stderr.contains("Sure! The event"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn images_go_inline_or_by_url() {
    let (s, server) = openai_scene("rpm: 100").await;
    let png = s.prompt("unused").with_file_name("dot.png");
    std::fs::write(&png, [0x89, b'P', b'N', b'G']).unwrap();
    let content = json!([
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
        {"type": "image_url", "image_url": {"url": "https://example.test/cat.jpg"}},
    ]);
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_partial_json(
            json!({"messages": [{"role": "user", "content": content}]}),
        ))
        .respond_with(answer("A dot."))
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--no-stream", "--image"])
        .arg(&png)
        .args(["--image", "https://example.test/cat.jpg", "-p"])
        .arg(s.prompt("What is this?"));
    assert_eq!(run_async(cmd, 0).await.0, "A dot.\n");
}

#[test]
fn unusable_images_and_schemas_exit_2_naming_the_file() {
    let s = scene(&[(
        "oa",
        "openai",
        "http://127.0.0.1:9/v1".into(),
        "gpt-test",
        2.0,
        8.0,
        "rpm: 100",
    )]);
    let prompt = s.prompt("Hi");
    let bmp = prompt.with_file_name("picture.bmp");
    let missing = prompt.with_file_name("missing.png");
    let not_json = prompt.with_file_name("schema.json");
    std::fs::write(&not_json, "{type: object").unwrap();
    let cases: [(&str, &std::path::Path, &str); 3] = [
        (
            "--image",
            &bmp,
            "not a .png, .jpg, .jpeg, .gif or .webp file",
        ),
        ("--image", &missing, "cannot read it"),
        ("--json-schema", &not_json, "not valid JSON"),
    ];
    for (flag, file, words) in cases {
        let mut cmd = s.llmroute(&["oa"]);
        cmd.args(["chat", flag]).arg(file).arg("-p").arg(&prompt);
        let (_, stderr) = run(&mut cmd, 2);
        assert!(
            stderr.contains(&file.display().to_string()) && stderr.contains(words),
            "{flag} {}: {stderr}",
            file.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_for_a_model_without_vision_exits_2_before_any_call() {
    let server = wiremock::MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(answer("never"))
        .expect(0)
        .mount(&server)
        .await;
    let upstream = upstream_at(&server);
    // Appended right after the only model's entry: its capabilities.
    let s = scene_with(&[upstream], "        capabilities: [tools]\n");
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--image", "https://example.test/cat.jpg", "-p"])
        .arg(s.prompt("What is this?"));
    let (_, stderr) = run_async(cmd, 2).await;
    assert!(
        stderr.contains(
            "it uses images, which needs the `vision` capability, and none of oa/gpt-test has it"
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn verbose_shows_the_routing_rule_that_matched() {
    let server = wiremock::MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(answer("Hi."))
        .expect(1)
        .mount(&server)
        .await;
    let upstream = upstream_at(&server);
    let routes = "routes:\n  auto:\n    - when: { tools: true }\n      model: gpt-test\n    \
                  - when: { prompt_tokens: { below: 100 } }\n      model: chat\n";
    let s = scene_with(&[upstream], routes);
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["-v", "chat", "--no-stream", "-m", "auto", "-p"])
        .arg(s.prompt("Hello"));
    let (stdout, stderr) = run_async(cmd, 0).await;
    assert_eq!(stdout, "Hi.\n");
    assert!(
        stderr.contains("route routes.auto[1] (prompt_tokens < 100) -> chat"),
        "{stderr}"
    );
}
