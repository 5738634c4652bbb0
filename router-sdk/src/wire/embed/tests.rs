//! Embedding bodies against fixtures in each provider's documented shape, and answers read back.
#![allow(clippy::unwrap_used)]

use router_core::config::Api;
use serde_json::{Value, json};

use super::*;
use crate::embedding::{EmbedInput, EmbedRequest};

fn fixture(path: &str) -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    std::fs::read(format!("{dir}/{path}")).unwrap()
}

fn fixture_json(path: &str) -> Value {
    serde_json::from_slice(&fixture(path)).unwrap()
}

fn soup() -> EmbedRequest {
    EmbedRequest {
        dimensions: Some(768),
        user: Some("user-1234".into()),
        ..EmbedRequest::new(["The food was delicious.", "Waiter, the soup!"])
    }
}

fn body(api: Api, model: &str, req: &EmbedRequest) -> Value {
    format(api).unwrap().body(model, req)
}

#[test]
fn openai_asks_for_floats_with_the_inputs_as_a_list() {
    let got = body(Api::OpenAi, "text-embedding-3-small", &soup());
    assert_eq!(got, fixture_json("openai/request_embeddings.json"));
    let tokens = EmbedRequest::new([vec![9906u32, 1917], vec![40]]);
    let got = body(Api::OpenAi, "m", &tokens);
    assert_eq!(
        got,
        json!({"model": "m", "input": [[9906, 1917], [40]], "encoding_format": "float"})
    );
}

#[test]
fn gemini_sends_one_request_per_input_with_its_model_and_dimensions() {
    for model in ["gemini-embedding-001", "models/gemini-embedding-001"] {
        let got = body(Api::Gemini, model, &soup());
        assert_eq!(
            got,
            fixture_json("gemini/request_embeddings.json"),
            "{model}"
        );
    }
    let url = endpoint(
        Api::Gemini,
        "https://g.test/v1beta/",
        "models/gemini-embedding-001",
    );
    assert_eq!(
        url.unwrap().as_str(),
        "https://g.test/v1beta/models/gemini-embedding-001:batchEmbedContents"
    );
    assert!(!format(Api::Gemini).unwrap().takes_token_ids());
}

#[test]
fn the_key_goes_in_each_formats_header_never_the_url() {
    let key = ApiKey::new("sk-embed-S3CRET".into());
    for (api, header, value) in [
        (Api::OpenAi, "authorization", "Bearer sk-embed-S3CRET"),
        (Api::Gemini, "x-goog-api-key", "sk-embed-S3CRET"),
    ] {
        let url = endpoint(api, "https://p.test/v1", "m").unwrap();
        let target = Target {
            api,
            endpoint: &url,
            model: "m",
        };
        let request = build(&target, &key, &soup(), &HeaderMap::new());
        assert_eq!(request.headers[header], value, "{api:?}");
        assert_eq!(request.headers["content-type"], "application/json");
        assert!(!request.url.as_str().contains("S3CRET"));
    }
    let url = endpoint(Api::OpenAi, "https://api.openai.com/v1", "m").unwrap();
    assert_eq!(url.as_str(), "https://api.openai.com/v1/embeddings");
    assert!(endpoint(Api::Anthropic, "https://api.anthropic.com", "m").is_err());
}

#[test]
fn openai_answers_are_put_in_input_order_with_their_prompt_tokens() {
    let got = parse_response(Api::OpenAi, &fixture("openai/embeddings.json"), 2).unwrap();
    assert_eq!(
        got.vectors,
        [
            vec![0.002_306_425_5, -0.009_327_292, 0.015_797_347],
            vec![0.5, -2.0, 0.25]
        ]
    );
    assert_eq!(got.usage, Some(Usage::new(8, 0)));
    // A server that sends base64 anyway is read the same.
    let b64 = json!({"data": [{"index": 0, "embedding": "AACAPwAAAMA="}]}).to_string();
    let got = parse_response(Api::OpenAi, b64.as_bytes(), 1).unwrap();
    assert_eq!((got.vectors, got.usage), (vec![vec![1.0, -2.0]], None));
}

#[test]
fn gemini_answers_carry_no_usage() {
    let got = parse_response(Api::Gemini, &fixture("gemini/embeddings.json"), 2).unwrap();
    assert_eq!(got.vectors[1], [0.5, -2.0, 0.25]);
    assert_eq!(got.usage, None);
}

#[test]
fn an_answer_that_does_not_match_its_inputs_is_malformed() {
    let cases = [
        (Api::OpenAi, fixture("openai/embeddings.json"), 3, "no embedding of input 2"),
        (Api::OpenAi, fixture("openai/embeddings.json"), 1, "index 1 of 1 inputs"),
        (Api::Gemini, fixture("gemini/embeddings.json"), 3, "2 embeddings for 3 inputs"),
        (
            Api::OpenAi,
            json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]})
                .to_string()
                .into_bytes(),
            2,
            "index 0 twice",
        ),
        (
            Api::Gemini,
            json!({"embeddings": [{"values": []}]}).to_string().into_bytes(),
            1,
            "embedding 0 is empty",
        ),
        (
            Api::OpenAi,
            json!({"data": [{"index": 0, "embedding": [1.0]}], "usage": {"prompt_tokens": 1_000_000_000_000u64}})
                .to_string()
                .into_bytes(),
            1,
            "implausible usage",
        ),
        (Api::Gemini, b"<html>".to_vec(), 1, "expected value"),
    ];
    for (api, body, inputs, words) in cases {
        let e = parse_response(api, &body, inputs).unwrap_err().to_string();
        assert!(e.contains(words), "{api:?} {inputs}: {e}");
    }
}

#[test]
fn token_ids_are_kept_as_given() {
    let req = EmbedRequest::new([EmbedInput::Tokens(vec![0, u32::MAX])]);
    let got = body(Api::OpenAi, "m", &req);
    assert_eq!(got["input"], json!([[0, 4_294_967_295u64]]));
}
