//! The Responses ingress: bodies read into the router's request ([`read`]), answers written as
//! OpenAI writes them, whole ([`answer`]) and streamed ([`stream`]), and the thinking carried
//! between turns.
#![allow(clippy::unwrap_used)]

mod answer;
mod read;
mod stream;

use axum::http::HeaderMap;
use router_core::config::Api;
use router_sdk::{FinishReason, Receipt, Thought, Usage};
use serde_json::{Value, json};

use super::thought::{self, Decoded};
use super::{Asked, Responses};
use crate::ingress::{Answering, Ingress, Read};

fn read(body: &Value) -> Result<(Read, Asked), String> {
    Responses::read(body.to_string().as_bytes(), &HeaderMap::new())
}

/// What a request of `tools` (and `auto`) leaves for its answer.
fn asked(tools: Value) -> Asked {
    let body = json!({"model": "m", "input": "Hi", "tools": tools});
    read(&body).unwrap().1
}

fn at() -> Answering {
    Answering {
        request_id: "r1".into(),
        model: "claude-sonnet-4-5".into(),
        created: 1_700_000_000,
        origin: Some(Api::Anthropic),
    }
}

fn receipt(finish: FinishReason) -> Receipt {
    Receipt {
        request_id: "r1".into(),
        response_id: Some("msg_up".into()),
        finish_reason: Some(finish),
        refusal: None,
        provider: "an".into(),
        model: "claude-sonnet-4-5".into(),
        usage: Usage {
            cached_prompt_tokens: 900,
            reasoning_tokens: 20,
            ..Usage::new(1000, 50)
        },
        cost_usd: 0.0,
        attempts: Vec::new(),
        waited: std::time::Duration::ZERO,
        queue_position: None,
        upstream: std::time::Duration::ZERO,
        tenant_window: None,
    }
}

/// A thought Anthropic signed.
fn signed(text: &str) -> Thought {
    Thought {
        origin: Api::Anthropic,
        text: text.into(),
        signature: Some("sig-1".into()),
        redacted: None,
    }
}

#[test]
fn a_thought_survives_its_encoding_and_nothing_else_decodes_as_one() {
    let redacted = Thought {
        origin: Api::Anthropic,
        text: String::new(),
        signature: None,
        redacted: Some("opaque+/==".into()),
    };
    for t in [signed("Plan: run it.\n"), redacted] {
        let encoded = thought::encode(&t);
        let body = encoded.strip_prefix("llmroute.v1.").unwrap();
        let url_safe = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        assert!(body.chars().all(url_safe), "{encoded}");
        assert_eq!(thought::decode(&encoded), Decoded::Thought(t));
    }
    // OpenAI's own encrypted reasoning, and what is llmroute's in name only.
    assert_eq!(thought::decode("gAAAAABo-openai"), Decoded::Foreign);
    assert_eq!(thought::decode("llmroute.v1.!!!"), Decoded::Malformed);
    let not_a_thought = format!("llmroute.v1.{}", "eyJ4IjoxfQ"); // {"x":1}
    assert_eq!(thought::decode(&not_a_thought), Decoded::Malformed);
}
