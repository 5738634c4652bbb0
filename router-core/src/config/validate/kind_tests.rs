//! Model kinds: how a model becomes an embedding model, and each refusal naming its field.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::config::{Capability, ModelKind, Registry};
use crate::estimate::{Estimator, PromptSize};
use crate::flow::{Ask, Plan, Priority};

/// A chat model and an embedding model at one OpenAI-compatible provider; `embed` is the
/// embedding model's entry (line 9).
fn yaml(embed: &str) -> String {
    format!(
        "providers:
  - name: oa
    api: openai
    base_url: https://api.openai.com/v1
    api_key_env: OA_KEY
    models:
      - name: gpt-4o-mini
        price: {{ input: 0.15, output: 0.6 }}
      - {embed}
"
    )
}

fn load(embed: &str) -> Registry {
    Registry::from_yaml_str(&yaml(embed), "kind.yaml").unwrap()
}

fn error_of(embed: &str) -> String {
    Registry::from_yaml_str(&yaml(embed), "kind.yaml")
        .unwrap_err()
        .to_string()
}

#[track_caller]
fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
}

#[test]
fn kind_embedding_makes_an_embedding_model_without_capabilities_or_output_price() {
    let r = load("{ name: te3, kind: embedding, price: { input: 0.02 }, dimensions: 1536 }");
    let (chat, embed) = (&r.deployments[0], &r.deployments[1]);
    assert_eq!(chat.kind, ModelKind::Chat);
    assert!(chat.capabilities.has(Capability::Tools));
    assert_eq!(chat.dimensions, None);
    assert_eq!(embed.kind, ModelKind::Embedding);
    assert!(embed.capabilities.list().is_empty());
    assert_eq!(embed.dimensions, Some(1536));
    assert_eq!(embed.price.base.output_per_mtok, 0.0);
    assert_eq!(embed.price.base.input_per_mtok, 0.02);
}

#[test]
fn an_embedding_capability_makes_an_embedding_model_and_an_output_price_of_zero_is_taken() {
    let r = load("{ name: te3, capabilities: [embedding], price: { input: 0.02, output: 0 } }");
    assert_eq!(r.deployments[1].kind, ModelKind::Embedding);
    assert_eq!(r.deployments[1].price.base.output_per_mtok, 0.0);
    let both =
        load("{ name: te3, kind: embedding, capabilities: [embedding], price: { input: 1 } }");
    assert_eq!(both.deployments[1].kind, ModelKind::Embedding);
    let chat = load("{ name: m, kind: chat, price: { input: 1, output: 2 } }");
    assert_eq!(chat.deployments[1].kind, ModelKind::Chat);
}

#[test]
fn an_unknown_kind_is_refused_with_its_field_and_line() {
    let e = error_of("{ name: te3, kind: embeddings, price: { input: 1 } }");
    assert_mentions(
        &e,
        &[
            "kind.yaml:9",
            "providers[oa].models[te3].kind",
            "`embeddings` is not a kind",
            "`chat` or `embedding`",
        ],
    );
}

#[test]
fn a_chat_kind_listing_the_embedding_capability_is_refused() {
    let e = error_of(
        "{ name: te3, kind: chat, capabilities: [embedding], price: { input: 1, output: 1 } }",
    );
    assert_mentions(
        &e,
        &["providers[oa].models[te3].capabilities", "remove one"],
    );
}

#[test]
fn an_embedding_model_with_chat_capabilities_or_an_output_cap_is_refused() {
    let e = error_of("{ name: te3, capabilities: [embedding, tools], price: { input: 1 } }");
    assert_mentions(
        &e,
        &[
            "providers[oa].models[te3].capabilities",
            "no chat capabilities; remove `tools`",
        ],
    );
    let e = error_of("{ name: te3, kind: embedding, max_output_tokens: 10, price: { input: 1 } }");
    assert_mentions(
        &e,
        &["providers[oa].models[te3].max_output_tokens", "no output"],
    );
}

#[test]
fn an_embedding_model_needs_an_input_price_and_a_chat_model_an_output_price() {
    let e = error_of("{ name: te3, kind: embedding, price: { input: 0 } }");
    assert_mentions(&e, &["providers[oa].models[te3].price.input", "a positive"]);
    let e = error_of("{ name: te3, kind: embedding, price: { input: 1, output: -1 } }");
    assert_mentions(
        &e,
        &["providers[oa].models[te3].price.output", "a non-negative"],
    );
    let e = error_of("{ name: m, price: { input: 1 } }");
    assert_mentions(
        &e,
        &[
            "kind.yaml:9",
            "providers[oa].models[m].price.output",
            "missing",
            "only an embedding model",
        ],
    );
}

#[test]
fn dimensions_belong_to_embedding_models_and_are_whole_numbers() {
    let e = error_of("{ name: m, dimensions: 8, price: { input: 1, output: 1 } }");
    assert_mentions(
        &e,
        &[
            "providers[oa].models[m].dimensions",
            "only an embedding model",
        ],
    );
    let e = error_of("{ name: te3, kind: embedding, dimensions: 0, price: { input: 1 } }");
    assert_mentions(&e, &["providers[oa].models[te3].dimensions", "got 0"]);
    let e = error_of("{ name: te3, kind: embedding, dimensions: 5000000000, price: { input: 1 } }");
    assert_mentions(&e, &["5000000000 is more than"]);
}

#[test]
fn an_embedding_model_at_anthropic_is_refused_naming_it() {
    let yaml = "providers:
  - name: an
    api: anthropic
    base_url: https://api.anthropic.com
    api_key_env: AN_KEY
    models:
      - { name: voyage-3, kind: embedding, price: { input: 0.06 } }
";
    let e = Registry::from_yaml_str(yaml, "an.yaml")
        .unwrap_err()
        .to_string();
    assert_mentions(
        &e,
        &[
            "an.yaml:7",
            "providers[an].models[voyage-3].kind",
            "`voyage-3` is an embedding model",
            "Anthropic's API has no embeddings",
        ],
    );
}

#[test]
fn an_embedding_model_is_planned_with_no_output() {
    let r = load("{ name: te3, kind: embedding, price: { input: 0.02 } }");
    let estimator = Estimator::new(&r);
    let ask = Ask {
        prompt: PromptSize::of(["x".repeat(400).as_str()]),
        max_tokens: None,
        accounts: Vec::new(),
        priority: Priority::Interactive,
        deadline: Duration::from_secs(10),
        cache_reads: Vec::new(),
        writes_cache: false,
    };
    let d = r.resolve("te3")[0];
    let plan = Plan::new(&r, &estimator, &[d], ask, 0);
    let e = plan.estimate_of(d);
    assert_eq!((e.prompt_tokens, e.completion_tokens), (100, 0));
    assert_eq!((e.counted_prompt, e.counted_output), (100, 0));
    assert_eq!(plan.need.tokens_on(0), 100);
}
