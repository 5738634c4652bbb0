#![allow(clippy::unwrap_used)]

//! Routing rules: table-driven matches and the configuration errors.

use super::*;
use crate::config::{ConfigError, Registry};

const PROVIDERS: &str = r#"
providers:
  - name: p
    api: openai
    base_url: https://example.test/v1
    api_key_env: P_KEY
    models:
      - { name: small, aliases: [cheap], price: { input: 0.1, output: 0.2 } }
      - { name: large, aliases: [smart], price: { input: 2, output: 8 } }
      - { name: eyes, price: { input: 1, output: 4 } }
      - { name: blind, price: { input: 1, output: 4 }, capabilities: [json_schema] }
tenants:
  tiers: { free: {}, pro: {} }
"#;

fn registry(routes: &str) -> Result<Registry, ConfigError> {
    Registry::from_yaml_str(&format!("{PROVIDERS}{routes}"), "routes.yaml")
}

const AUTO: &str = r#"
routes:
  auto:
    - when: { images: true }
      model: eyes
    - when: { tools: true, tiers: [pro] }
      model: smart
    - when: { prompt_tokens: { below: 2000 }, priority: batch }
      model: cheap
    - when: { prompt_tokens: { at_least: 2000, below: 50000 } }
      model: smart
    - model: cheap
"#;

fn subject(prompt_tokens: u64, tools: bool, images: bool) -> Subject<'static> {
    Subject {
        prompt_tokens,
        features: Features {
            tools,
            images,
            ..Features::default()
        },
        tier: None,
        priority: Priority::Interactive,
    }
}

#[test]
fn the_first_matching_rule_wins() {
    let registry = registry(AUTO).unwrap();
    let route = registry.routes.get("auto").unwrap();
    let pro = |mut s: Subject<'static>| {
        s.tier = Some("pro");
        s
    };
    let batch = |mut s: Subject<'static>| {
        s.priority = Priority::Batch;
        s
    };
    let table: [(&str, Subject<'static>, usize, &str); 8] = [
        (
            "image beats everything",
            pro(subject(10, true, true)),
            0,
            "eyes",
        ),
        (
            "tools for a pro tier",
            pro(subject(10, true, false)),
            1,
            "smart",
        ),
        (
            "tools without a tier fall through",
            subject(10, true, false),
            4,
            "cheap",
        ),
        (
            "short batch",
            batch(subject(1999, false, false)),
            2,
            "cheap",
        ),
        (
            "short interactive falls to the range",
            subject(1999, false, false),
            4,
            "cheap",
        ),
        (
            "range start is inclusive",
            subject(2000, false, false),
            3,
            "smart",
        ),
        (
            "range end is exclusive",
            subject(50_000, false, false),
            4,
            "cheap",
        ),
        (
            "inside the range",
            batch(subject(49_999, false, false)),
            3,
            "smart",
        ),
    ];
    for (case, s, index, model) in table {
        let m = route.pick(&s).unwrap();
        assert_eq!((m.index, m.model.as_str()), (index, model), "{case}");
    }
}

#[test]
fn a_match_shows_its_rule() {
    let registry = registry(AUTO).unwrap();
    let m = registry
        .routes
        .get("auto")
        .unwrap()
        .pick(&subject(3000, false, false))
        .unwrap();
    assert_eq!(
        m.to_string(),
        "routes.auto[3] (prompt_tokens >= 2000, prompt_tokens < 50000) -> smart"
    );
    let last = registry
        .routes
        .get("auto")
        .unwrap()
        .pick(&subject(60_000, false, false));
    assert_eq!(last.unwrap().when, "always");
}

#[test]
fn no_rule_matching_is_none() {
    let registry =
        registry("routes:\n  auto:\n    - when: { tools: true }\n      model: smart\n").unwrap();
    assert!(
        registry
            .routes
            .get("auto")
            .unwrap()
            .pick(&subject(1, false, false))
            .is_none()
    );
}

#[test]
fn a_route_may_be_the_default_model() {
    let registry = registry(&format!("{AUTO}defaults:\n  model: auto\n")).unwrap();
    assert_eq!(registry.defaults.model.as_deref(), Some("auto"));
}

#[test]
fn configuration_errors_name_the_field_and_what_to_do() {
    let cases = [
        (
            "routes:\n  auto:\n    - model: nope\n",
            "routes.auto[0].model",
            "names no model",
        ),
        (
            "routes:\n  cheap:\n    - model: small\n",
            "routes.cheap",
            "already a model or alias",
        ),
        ("routes:\n  auto: []\n", "routes.auto", "at least one rule"),
        (
            "routes:\n  auto:\n    - when: { prompt_tokens: { at_least: 10, below: 10 } }\n      model: small\n",
            "routes.auto[0].when.prompt_tokens",
            "no prompt fits",
        ),
        (
            "routes:\n  auto:\n    - when: { prompt_tokens: {} }\n      model: small\n",
            "routes.auto[0].when.prompt_tokens",
            "give `at_least`",
        ),
        (
            "routes:\n  auto:\n    - when: { tiers: [gold] }\n      model: small\n",
            "routes.auto[0].when.tiers[0]",
            "use one of: free, pro",
        ),
        (
            "routes:\n  auto:\n    - when: { priority: urgent }\n      model: small\n",
            "routes.auto[0].when.priority",
            "`interactive` or `batch`",
        ),
        (
            "routes:\n  auto:\n    - when: { size: 3 }\n      model: small\n",
            "",
            "size",
        ),
        (
            "routes:\n  auto:\n    - when: { images: true }\n      model: blind\n",
            "routes.auto[0].model",
            "requests with images, but no deployment of `blind` has `vision`",
        ),
        (
            "routes:\n  auto:\n    - when: { tools: true }\n      model: blind\n",
            "routes.auto[0].model",
            "requests with tools, but no deployment of `blind` has `tools`",
        ),
    ];
    for (yaml, field, words) in cases {
        let err = registry(yaml).unwrap_err().to_string();
        assert!(err.contains(field) && err.contains(words), "{yaml}: {err}");
    }
}
