//! `llmroute serve` with the standard `OTEL_*` variables: its spans reach the collector they
//! name, with its service name and headers, and the last ones are sent when it stops; a bad
//! variable exits 2 naming it, never showing a header's value.

use llmroute_tests::otlp::{Answer, Collector, attribute, span_attribute};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

const TOKEN: &str = "planted-collector-S3CRET";

#[tokio::test(flavor = "multi_thread")]
async fn serve_sends_its_spans_where_the_otel_variables_say_and_flushes_them_at_stop() {
    let mut collector = Collector::start(Answer::Accept).await;
    let (s, upstream) = openai_scene("rpm: 100").await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json"),
        )
        .mount(&upstream)
        .await;
    let mut serve = s.process(&["serve", "--no-auth", "--listen", "127.0.0.1:0"]);
    // A minute between batches: only the flush at stop sends the span within the test.
    serve
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url)
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("x-collector-token={TOKEN}"),
        )
        .env("OTEL_SERVICE_NAME", "edge-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .env("RUST_LOG", "trace");
    let mut child = serve.spawn().unwrap();
    let base = listening_on(&mut child);
    let body = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "Hello"}]});
    let answer = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    signal(child.id(), "TERM");
    let export = collector.next_export().await;
    let output = exited(child).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        attribute(&export.resource, "service.name").as_deref(),
        Some("edge-test")
    );
    let token = export
        .headers
        .iter()
        .find(|(n, _)| n == "x-collector-token");
    assert_eq!(token.map(|(_, v)| v.as_str()), Some(TOKEN));
    let server = &export.spans[0];
    assert_eq!(
        span_attribute(server, "gen_ai.response.model").as_deref(),
        Some("gpt-test")
    );
    assert_eq!(export.spans.len(), 2, "{:?}", export.spans);
    // Every log line, from every crate: the collector's token is in none.
    assert!(!stderr.contains("S3CRET"), "{stderr}");
}

#[test]
fn a_bad_otel_variable_exits_2_naming_it_and_hides_header_values() {
    let s = scene(&[(
        "oa",
        "openai",
        "http://127.0.0.1:9/v1".into(),
        "gpt-test",
        2.0,
        8.0,
        "rpm: 100",
    )]);
    let cases = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "http://"),
        ("OTEL_TRACES_SAMPLER", "sometimes", "always_on"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-token:S3CRET", "key=value"),
    ];
    for (name, value, words) in cases {
        let mut cmd = s.llmroute(&["oa"]);
        cmd.env(name, value)
            .args(["serve", "--no-auth", "--listen", "127.0.0.1:0"]);
        let (_, stderr) = run(&mut cmd, 2);
        assert!(stderr.contains(name) && stderr.contains(words), "{stderr}");
        assert!(!stderr.contains("S3CRET"), "{stderr}");
    }
}
