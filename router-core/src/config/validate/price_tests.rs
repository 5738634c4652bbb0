//! Prices as providers publish them: Anthropic's cache prices by default, bands for long
//! prompts, and each refusal naming its field and line.
#![allow(clippy::unwrap_used)]

use crate::config::{Billed, Registry};

/// One model of a provider speaking `api`, priced `price` (line 8).
fn yaml(api: &str, price: &str) -> String {
    format!(
        "providers:
  - name: p
    api: {api}
    base_url: https://example.com/v1
    api_key_env: P_KEY
    models:
      - name: m
        price: {price}
"
    )
}

fn load(api: &str, price: &str) -> Registry {
    Registry::from_yaml_str(&yaml(api, price), "price.yaml").unwrap()
}

fn error_of(api: &str, price: &str) -> String {
    let loaded = Registry::from_yaml_str(&yaml(api, price), "price.yaml");
    loaded.unwrap_err().to_string()
}

#[test]
fn an_anthropic_models_cache_prices_are_anthropics_multiples_unless_given() {
    let r = load("anthropic", "{ input: 3, output: 15 }");
    let base = r.deployments[0].price.base;
    assert_eq!(
        base.cached_input_per_mtok,
        Some(0.3),
        "no binary noise: {base:?}"
    );
    assert_eq!(base.cache_write_per_mtok, Some(3.75));
    assert_eq!(base.cache_write_1h_per_mtok, Some(6.0));
    let given = load(
        "anthropic",
        "{ input: 3, output: 15, cache_write: 4, cache_write_1h: 7 }",
    );
    let base = given.deployments[0].price.base;
    assert_eq!((base.write(), base.write_1h()), (4.0, 7.0));
    // Other providers bill no writes apart: reads and writes at the input price.
    let oa = load("openai", "{ input: 2, output: 8 }").deployments[0]
        .price
        .base;
    assert_eq!((oa.cached(), oa.write(), oa.write_1h()), (2.0, 2.0, 2.0));
}

#[test]
fn bands_take_their_own_prices_and_anthropics_defaults_from_their_own_input() {
    let price = "{ input: 1.25, output: 10, cached_input: 0.31, above: [{ prompt_tokens: 200000, \
                 input: 2.5, output: 15, cached_input: 0.625 }] }";
    let r = load("gemini", price);
    let p = &r.deployments[0].price;
    assert_eq!(p.above.len(), 1);
    assert_eq!(p.rates_for(200_000).input_per_mtok, 1.25);
    assert_eq!(p.rates_for(200_001).input_per_mtok, 2.5);
    let bill = |prompt| {
        p.bill(&Billed {
            prompt,
            output: 100,
            ..Billed::default()
        })
    };
    assert!((bill(300_000) - (300_000.0 * 2.5 + 100.0 * 15.0) / 1e6).abs() < 1e-12);
    let an = load(
        "anthropic",
        "{ input: 3, output: 15, above: [{ prompt_tokens: 200000, input: 6, output: 22.5 }] }",
    );
    let band = an.deployments[0].price.above[0].rates;
    assert_eq!((band.write(), band.write_1h()), (7.5, 12.0));
}

#[test]
fn bad_bands_and_cache_prices_name_their_field_and_line() {
    let cases = [
        (
            "{ input: 3, output: 15, cache_write: 0 }",
            "providers[p].models[m].price.cache_write",
        ),
        (
            "{ input: 3, output: 15, above: [{ prompt_tokens: 0, input: 6, output: 22 }] }",
            "price.above[0].prompt_tokens",
        ),
        (
            "{ input: 3, output: 15, above: [{ prompt_tokens: 1000, input: 6 }] }",
            "price.above[0].output",
        ),
        (
            "{ input: 3, output: 15, above: [{ prompt_tokens: 1000, input: 6, output: 22 }, \
             { prompt_tokens: 1000, input: 7, output: 23 }] }",
            "price.above[1].prompt_tokens",
        ),
        (
            "{ input: 3, output: 15, above: [{ prompt_tokens: 1000, input: 6, output: 22, \
             audio: 1 }] }",
            "audio",
        ),
    ];
    for (price, field) in cases {
        let message = error_of("anthropic", price);
        assert!(message.contains(field), "{price}: {message}");
        assert!(message.contains("price.yaml:8"), "{price}: {message}");
    }
}
