//! What hostile or careless callers and providers send, over a real socket: bodies that never
//! finish, oversized declared lengths, bytes after the JSON, provider text that echoes a key,
//! restricted keys reading quotas, rate-limit headers, broken streams.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Sends `head` (request line and headers, without the blank line) and `body` on a new
/// connection, then reads until the gateway closes it; `None` if it is still open after
/// `within` of virtual time (the clock is paused once the bytes are out, so the gateway's own
/// timers decide).
async fn raw_exchange(r: &Running, head: &str, body: &[u8], within: Duration) -> Option<String> {
    let addr = r.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(format!("{head}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    socket.write_all(body).await.unwrap();
    tokio::time::pause();
    let mut answer = Vec::new();
    let read = socket.read_to_end(&mut answer);
    let closed = tokio::time::timeout(within, read).await.ok()?;
    closed.unwrap();
    Some(String::from_utf8_lossy(&answer).into_owned())
}

fn chat_head(content_length: usize) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ACME}\r\n\
         Content-Type: application/json\r\nContent-Length: {content_length}"
    )
}

#[tokio::test]
async fn a_body_that_never_finishes_gets_408_and_its_connection_closed() {
    let r = start("", "  body_timeout_secs: 5\n").await;
    let part = br#"{"model": "chat", "#;
    let answer = raw_exchange(&r, &chat_head(200), part, Duration::from_secs(60))
        .await
        .expect("the connection is closed once the body timeout passes");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains(r#""code":"body_timeout""#), "{answer}");
    assert!(answer.contains("`gateway.body_timeout_secs`"), "{answer}");
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_before_any_body_is_read() {
    let r = start("", "  body_limit_bytes: 2000\n").await;
    // No byte of the body is sent: the answer cannot wait for it.
    let answer = raw_exchange(&r, &chat_head(5_000_000), b"", Duration::from_secs(1))
        .await
        .expect("answered and closed at once");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains(r#""code":"body_too_large""#), "{answer}");
}

#[tokio::test]
async fn bytes_after_the_json_body_are_refused() {
    let r = start("", "").await;
    let one = hello().to_string();
    for body in [
        format!("{one}xx"),
        format!("{one}{one}"),
        format!("{one}\n[]"),
    ] {
        let response = r
            .http
            .post(format!("{}/v1/chat/completions", r.base))
            .bearer_auth(ACME)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("one JSON object alone"), "{message}");
    }
    // Whitespace after the object is no second value.
    upstream_answers(&r, "openai/ok.json", "application/json").await;
    let response = r
        .http
        .post(format!("{}/v1/chat/completions", r.base))
        .bearer_auth(ACME)
        .header("content-type", "application/json")
        .body(format!("{one} \r\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// A gateway over two providers at one mock server: `oa` (OpenAI, model `small`, alias `chat`)
/// and `an` (Anthropic, model `opus`, alias `deep`), tier `pro` with `tier` and deployments'
/// limits `limits`; `ACME` may use everything, `NARROW` only `small`.
async fn two_providers(tier: &str, limits: &str) -> Running {
    let upstream = MockServer::start().await;
    let base = upstream.uri();
    let yaml = format!(
        "defaults: {{ model: chat }}\n\
         providers:\n\
         \x20 - name: oa\n    api: openai\n    base_url: {base}/v1\n    api_key_env: OA_KEY\n    \
         models:\n      - {{ name: small, aliases: [chat], price: {{ input: 2, output: 8 }}, \
         limits: {{ {limits} }} }}\n\
         \x20 - name: an\n    api: anthropic\n    base_url: {base}\n    api_key_env: AN_KEY\n    \
         models:\n      - {{ name: opus, aliases: [deep], price: {{ input: 15, output: 75 }}, \
         limits: {{ {limits} }} }}\n\
         tenants:\n  tiers:\n    pro: {{ {tier} }}\n  members:\n    acme: pro\n\
         gateway:\n  keys:\n    - {{ sha256: {}, tenant: acme }}\n    \
         - {{ sha256: {}, tenant: acme, models: [small] }}\n",
        hash_key(ACME),
        hash_key(NARROW),
    );
    start_yaml(upstream, &yaml).await
}

#[tokio::test]
async fn a_restricted_key_sees_only_its_models_deployments_in_the_quota() {
    let r = two_providers("", "rpm: 100").await;
    let models = |quota: &Value| -> Vec<String> {
        let rows = quota["deployments"].as_array().unwrap();
        rows.iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d["provider"].as_str().unwrap(),
                    d["model"].as_str().unwrap()
                )
            })
            .collect()
    };
    let narrow = r.get_json(NARROW, "/v1/quota").await;
    assert_eq!(models(&narrow), ["oa/small"], "{narrow}");
    let listed = r.get_json(NARROW, "/v1/models").await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");
    let full = r.get_json(ACME, "/v1/quota").await;
    assert_eq!(models(&full), ["oa/small", "an/opus"], "{full}");
}
