//! Configuration errors, one test per kind of bad input, asserting on the message a user sees.
//!
//! Each test starts from [`BASE`], a valid file, changes one thing, and checks that the message
//! names the file, the field, the line, the bad value and what to do. The shared fixture and
//! helpers are here, with the providers, models, limits and prices; `state`, `tenants` and the
//! other sections have files of their own.
#![allow(clippy::unwrap_used)]

mod sections;
mod state;
mod tenants;

use std::path::Path;

use router_core::config::{Api, Budget, ConfigError, Priorities, Registry, Tenants};

/// A valid configuration. Line numbers matter: tests assert on them.
const BASE: &str = r#"namespace: demo
defaults:
  model: chat
providers:
  - name: deepseek
    api: openai
    base_url: https://api.deepseek.com/v1
    api_key_env: DEEPSEEK_API_KEY
    limits: { rpm: 10000, tpm: 2000000, concurrency: 100 }
    models:
      - name: deepseek-chat
        aliases: [chat]
        price: { input: 0.27, output: 1.10 }
        limits: { rpm: 500, tpm: 150000, concurrency: 20 }
      - name: deepseek-reasoner
        price: { input: 0.55, output: 2.19 }
  - name: anthropic
    api: anthropic
    base_url: https://api.anthropic.com
    api_key_env: ANTHROPIC_API_KEY
    models:
      - name: claude-haiku-4-5
        aliases: [chat, fast]
        price: { input: 1.0, output: 5.0 }
"#;

/// `BASE` with `from` (which must occur exactly once) replaced by `to`.
fn with(from: &str, to: &str) -> String {
    assert_eq!(
        BASE.matches(from).count(),
        1,
        "fixture must contain {from:?} exactly once"
    );
    BASE.replacen(from, to, 1)
}

/// The error message for `yaml`, which must be invalid.
fn error_of(yaml: &str) -> String {
    match Registry::from_yaml_str(yaml, "test.yaml") {
        Ok(registry) => panic!("expected an error, got {registry:#?}\nfor:\n{yaml}"),
        Err(err) => err.to_string(),
    }
}

/// Assert that `message` contains every one of `parts`, printing all of them if not.
#[track_caller]
fn assert_mentions(message: &str, parts: &[&str]) {
    let missing: Vec<&&str> = parts.iter().filter(|p| !message.contains(**p)).collect();
    assert!(
        missing.is_empty(),
        "message:\n  {message}\nlacks:\n  {missing:?}"
    );
    assert!(
        !message.contains('\n'),
        "message is not one line:\n{message}"
    );
}

#[test]
fn base_fixture_is_valid_and_resolves_an_alias_across_providers() {
    let registry = Registry::from_yaml_str(BASE, "test.yaml").unwrap();
    let chat: Vec<String> = registry
        .resolve("chat")
        .into_iter()
        .map(|id| registry.deployment_name(id))
        .collect();
    assert_eq!(
        chat,
        ["deepseek/deepseek-chat", "anthropic/claude-haiku-4-5"]
    );
    assert_eq!(registry.namespace, "demo");
    assert_eq!(registry.defaults.model.as_deref(), Some("chat"));
    assert_eq!(registry.providers[1].api, Api::Anthropic);
    let limits = registry.deployments[0].limits;
    assert_eq!(limits.rpm.map(|n| n.get()), Some(500));
    assert_eq!(limits.tpm.map(|n| n.get()), Some(150_000));
    assert_eq!(limits.concurrency.map(|n| n.get()), Some(20));
    assert!(registry.deployments[1].limits.is_unlimited());
    assert_eq!(registry.deployments[0].price.base.output_per_mtok, 1.10);
}

#[test]
fn omitted_optional_sections_take_their_defaults() {
    let yaml = "providers:\n  - name: p\n    api: gemini\n    base_url: https://example.com/\n    \
                api_key_env: K\n    models:\n      - name: m\n        price: { input: 1, output: 2 }\n";
    let registry = Registry::from_yaml_str(yaml, "test.yaml").unwrap();
    assert_eq!(registry.state, None);
    assert_eq!(registry.namespace, "default");
    assert_eq!(registry.defaults.model, None);
    assert_eq!(registry.defaults.output_tokens, 512);
    assert_eq!(registry.defaults.slot_ttl_ms, 600_000);
    assert!(registry.providers[0].limits.is_unlimited());
    assert!(registry.deployments[0].aliases.is_empty());
    assert_eq!(
        registry.providers[0].base_url, "https://example.com",
        "trailing slash dropped"
    );
}

#[test]
fn defaults_are_read_and_slot_ttl_becomes_milliseconds() {
    let yaml = with(
        "  model: chat\n",
        "  model: chat\n  output_tokens: 300\n  slot_ttl_secs: 90\n",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    assert_eq!(registry.defaults.output_tokens, 300);
    assert_eq!(registry.defaults.slot_ttl_ms, 90_000);
}

#[test]
fn unknown_field_reports_serde_saphyr_message_with_line() {
    let msg = error_of(&with("{ rpm: 500,", "{ rmp: 500,"));
    assert_mentions(&msg, &["test.yaml:14:", "unknown field `rmp`", "rpm"]);
    let msg = error_of(&with(
        "namespace: demo\n",
        "namespace: demo\nstat: redis://x\n",
    ));
    assert_mentions(&msg, &["test.yaml:2:", "unknown field `stat`", "state"]);
}

#[test]
fn a_bad_lease_is_named_with_its_line_and_what_to_write() {
    let field = "providers[anthropic].models[claude-haiku-4-5].lease";
    let lease = |value: &str| {
        error_of(&with(
            "output: 5.0 }\n",
            &format!("output: 5.0 }}\n        lease: {value}\n"),
        ))
    };
    for bad in ["sometimes", "5", "true"] {
        let msg = lease(bad);
        let named = format!("`{bad}` is not a lease");
        assert_mentions(&msg, &["test.yaml:25", field, &named, "`auto`"]);
    }
    let msg = lease("{ requests: 0.5 }");
    let requests = format!("{field}.requests");
    assert_mentions(
        &msg,
        &["test.yaml:25", &requests, "got 0.5", "whole number"],
    );
    let msg = lease("{ requests: 5, tokenz: 3 }");
    assert_mentions(&msg, &["test.yaml:25:", "unknown field `tokenz`", "tokens"]);
    // A list is not a block.
    let msg = lease("[5]");
    assert_mentions(&msg, &["test.yaml:25:", "`auto`, or a block"]);
}

#[test]
fn a_key_pasted_as_api_key_is_not_echoed_and_the_hint_names_api_key_env() {
    let msg = error_of(&with(
        "    api_key_env: ANTHROPIC_API_KEY\n",
        "    api_key: sk-ant-planted-secret-123\n",
    ));
    assert_mentions(
        &msg,
        &["test.yaml:20:", "unknown field `api_key`", "api_key_env"],
    );
    assert!(!msg.contains("planted-secret"), "{msg}");
}

#[test]
fn a_limit_that_is_not_a_whole_number_is_named_with_its_value() {
    for (bad, got) in [
        ("1.5", "got 1.5"),
        ("lots", "got `lots`"),
        ("\"20\"", "got `20`"),
        ("true", "got `true`"),
    ] {
        let msg = error_of(&with("concurrency: 20", &format!("concurrency: {bad}")));
        let field = "providers[deepseek].models[deepseek-chat].limits.concurrency";
        assert_mentions(
            &msg,
            &["test.yaml:14:", field, "whole number above zero", got],
        );
    }
}

#[test]
fn a_limit_written_as_a_whole_decimal_is_that_number_and_others_are_shown_as_written() {
    let yaml = with(
        "limits: { rpm: 500, tpm: 150000, concurrency: 20 }",
        "limits: { rpm: 500.0, tpm: 1.5e5, concurrency: 2e1 }",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let limits = registry.deployments[0].limits;
    assert_eq!(limits.rpm.map(|n| n.get()), Some(500));
    assert_eq!(limits.tpm.map(|n| n.get()), Some(150_000));
    assert_eq!(limits.concurrency.map(|n| n.get()), Some(20));
    for (bad, got) in [
        ("0.0", "got 0.0"),
        ("-3.0", "got -3.0"),
        ("1e17", "1e17 is past what a decimal"),
        ("1e300", "1e300 is too large"),
    ] {
        let msg = error_of(&with("concurrency: 20", &format!("concurrency: {bad}")));
        assert_mentions(&msg, &["test.yaml:14:", "limits.concurrency", got]);
    }
}

#[test]
fn a_duplicate_key_is_reported_with_its_line_and_without_library_advice() {
    let msg = error_of(&with(
        "    api: openai\n",
        "    api: openai\n    api: gemini\n",
    ));
    assert_mentions(
        &msg,
        &["test.yaml:7:", "duplicate mapping key", "remove one"],
    );
    assert!(!msg.contains("DuplicateKeyPolicy"), "{msg}");
}

#[test]
fn a_limit_beyond_u64_is_too_large() {
    let msg = error_of(&with("tpm: 150000", "tpm: 99999999999999999999999"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:14:",
            "limits.tpm",
            "too large",
            "remove `tpm` for no limit",
        ],
    );
}

#[test]
fn a_price_that_is_not_a_number_is_named_with_its_value() {
    let msg = error_of(&with("input: 0.27", "input: cheap"));
    assert_mentions(&msg, &["test.yaml:13:", "price.input", "got `cheap`"]);
    let registry = Registry::from_yaml_str(&with("input: 0.27", "input: 3"), "test.yaml").unwrap();
    assert_eq!(
        registry.deployments[0].price.base.input_per_mtok, 3.0,
        "whole-number prices are fine"
    );
}

#[test]
fn a_map_where_a_number_belongs_is_a_syntax_error_with_line() {
    let msg = error_of(&with("concurrency: 20", "concurrency: { max: 20 }"));
    assert_mentions(&msg, &["test.yaml:14:"]);
}

#[test]
fn duplicate_provider_name_points_at_both() {
    let msg = error_of(&with("- name: anthropic", "- name: deepseek"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:17:",
            "providers[1].name",
            "duplicate provider name `deepseek`",
            "first at line 5",
            "rename",
        ],
    );
}

#[test]
fn duplicate_model_within_a_provider_is_an_error_but_across_providers_is_not() {
    let msg = error_of(&with("- name: deepseek-reasoner", "- name: deepseek-chat"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:15:",
            "providers[deepseek].models[1].name",
            "duplicate model `deepseek-chat`",
            "first at line 11",
        ],
    );
    let across = with("- name: claude-haiku-4-5", "- name: deepseek-chat");
    let registry = Registry::from_yaml_str(&across, "test.yaml").unwrap();
    assert_eq!(registry.resolve("deepseek-chat").len(), 2);
}

#[test]
fn unknown_api_lists_the_valid_ones() {
    let msg = error_of(&with("api: openai", "api: openia"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:6:",
            "providers[deepseek].api",
            "`openia`",
            "openai, anthropic, gemini",
        ],
    );
}

#[test]
fn zero_and_negative_limits_name_the_field_and_how_to_lift_the_limit() {
    let cases = [
        (
            "rpm: 500,",
            "rpm: 0,",
            14,
            "providers[deepseek].models[deepseek-chat].limits.rpm",
            "got 0",
            "rpm",
        ),
        (
            "tpm: 150000",
            "tpm: -1",
            14,
            "providers[deepseek].models[deepseek-chat].limits.tpm",
            "got -1",
            "tpm",
        ),
        (
            "concurrency: 20",
            "concurrency: 0",
            14,
            "providers[deepseek].models[deepseek-chat].limits.concurrency",
            "got 0",
            "concurrency",
        ),
        (
            "rpm: 10000",
            "rpm: 0",
            9,
            "providers[deepseek].limits.rpm",
            "got 0",
            "rpm",
        ),
        (
            "tpm: 2000000",
            "tpm: -5",
            9,
            "providers[deepseek].limits.tpm",
            "got -5",
            "tpm",
        ),
        (
            "concurrency: 100",
            "concurrency: -100",
            9,
            "providers[deepseek].limits.concurrency",
            "got -100",
            "concurrency",
        ),
    ];
    for (from, to, line, field, got, key) in cases {
        let msg = error_of(&with(from, to));
        let at = format!("test.yaml:{line}:");
        let hint = format!("remove `{key}` for no limit");
        assert_mentions(&msg, &[&at, field, got, "above zero", &hint]);
    }
}

#[test]
fn zero_negative_nan_and_infinite_prices_are_rejected() {
    let cases = [
        ("input: 0.27", "input: 0", "price.input", "got 0"),
        ("output: 1.10", "output: -1.10", "price.output", "got -1.1"),
        ("input: 0.27", "input: .nan", "price.input", "got NaN"),
        ("output: 1.10", "output: .inf", "price.output", "got inf"),
    ];
    for (from, to, key, got) in cases {
        let msg = error_of(&with(from, to));
        let field = format!("providers[deepseek].models[deepseek-chat].{key}");
        assert_mentions(
            &msg,
            &["test.yaml:13:", &field, got, "USD per million tokens"],
        );
    }
}

#[test]
fn a_provider_without_models_is_an_error() {
    let anthropic_models = "    models:\n      - name: claude-haiku-4-5\n        aliases: [chat, fast]\n        \
                            price: { input: 1.0, output: 5.0 }\n";
    for replacement in ["    models: []\n", ""] {
        let msg = error_of(&with(anthropic_models, replacement));
        assert_mentions(
            &msg,
            &[
                "test.yaml:",
                "providers[anthropic].models",
                "at least one model",
            ],
        );
    }
}

#[test]
fn no_providers_or_an_empty_file_is_an_error() {
    for yaml in [
        "namespace: demo\nproviders: []\n",
        "namespace: demo\n",
        "",
        "# only a comment\n",
    ] {
        let msg = error_of(yaml);
        assert_mentions(&msg, &["test.yaml", "providers", "at least one provider"]);
    }
}

#[test]
fn a_default_model_that_resolves_to_nothing_lists_the_known_models() {
    let msg = error_of(&with("model: chat", "model: gpt-9"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:3:",
            "defaults.model",
            "`gpt-9`",
            "chat, claude-haiku-4-5, deepseek-chat, deepseek-reasoner, fast",
        ],
    );
}

#[test]
fn zero_default_output_tokens_and_slot_ttl_are_rejected() {
    let msg = error_of(&with(
        "  model: chat\n",
        "  model: chat\n  output_tokens: 0\n",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:4:",
            "defaults.output_tokens",
            "got 0",
            "default 512",
        ],
    );
    let msg = error_of(&with(
        "  model: chat\n",
        "  model: chat\n  slot_ttl_secs: -1\n",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:4:",
            "defaults.slot_ttl_secs",
            "got -1",
            "default 600",
        ],
    );
}

#[test]
fn empty_names_are_rejected_with_their_position() {
    let cases = [
        ("- name: deepseek\n", "- name: \"\"\n", "providers[0].name"),
        (
            "- name: deepseek-reasoner",
            "- name: \"  \"",
            "providers[deepseek].models[1].name",
        ),
        (
            "aliases: [chat, fast]",
            "aliases: [chat, \"\"]",
            "providers[anthropic].models[claude-haiku-4-5].aliases[1]",
        ),
        ("  model: chat", "  model: \"\"", "defaults.model"),
    ];
    for (from, to, field) in cases {
        let msg = error_of(&with(from, to));
        assert_mentions(&msg, &["test.yaml:", field, "must not be empty"]);
    }
}

#[test]
fn api_key_env_must_name_a_variable_and_a_key_is_never_echoed() {
    let key_like = "api_key_env names an environment variable, not a key";
    let cases = [
        ("\"\"", "must not be empty"),
        ("sk-planted-secret-123", key_like),
        ("AIzaPlantedSecret123", key_like),
        ("DEEPSEEK_API_KEY=sk-planted-secret-123", key_like),
        ("K=planted-secret", "without `=`"),
        (
            "MY-KEY",
            "`MY-KEY` is not a valid environment variable name",
        ),
    ];
    for (value, expected) in cases {
        let msg = error_of(&with(
            "api_key_env: DEEPSEEK_API_KEY",
            &format!("api_key_env: {value}"),
        ));
        assert_mentions(
            &msg,
            &["test.yaml:8:", "providers[deepseek].api_key_env", expected],
        );
        assert!(!msg.contains("planted"), "key leaked: {msg}");
    }
}

#[test]
fn namespace_must_fit_in_a_redis_hash_tag() {
    for (value, expected) in [
        ("\"\"", "must not be empty"),
        ("a{b}", "`{` or `}`"),
        ("x}", "hash tag"),
    ] {
        let msg = error_of(&with(
            "namespace: demo",
            &format!("namespace: \"{}\"", value.trim_matches('"')),
        ));
        assert_mentions(&msg, &["test.yaml:1:", "namespace", expected]);
    }
}

#[test]
fn base_url_must_be_http_or_https() {
    let cases = [
        ("api.deepseek.com/v1", "must start with http:// or https://"),
        ("ftp://h", "http://"),
        ("https://", "no host"),
    ];
    for (value, expected) in cases {
        let msg = error_of(&with(
            "base_url: https://api.deepseek.com/v1",
            &format!("base_url: \"{value}\""),
        ));
        assert_mentions(
            &msg,
            &["test.yaml:7:", "providers[deepseek].base_url", expected],
        );
    }
}

#[test]
fn an_alias_repeated_within_a_model_is_an_error() {
    let msg = error_of(&with(
        "aliases: [chat, fast]",
        "aliases: [chat, fast, chat]",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:23:",
            "providers[anthropic].models[claude-haiku-4-5].aliases[2]",
            "`chat` is listed twice",
            "remove one",
        ],
    );
    let msg = error_of(&with(
        "aliases: [chat, fast]",
        "aliases: [chat, claude-haiku-4-5]",
    ));
    assert_mentions(&msg, &["aliases[1]", "the model's own name"]);
}

#[test]
fn an_unreadable_file_names_the_path_and_the_os_error() {
    let path = Path::new("/nonexistent-llmroute-dir/providers.yaml");
    let err = Registry::from_path(path).unwrap_err();
    assert_mentions(
        &err.to_string(),
        &["/nonexistent-llmroute-dir/providers.yaml", "No such file"],
    );
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
}

#[test]
fn accessors_expose_file_line_and_field() {
    let err = Registry::from_yaml_str(&with("rpm: 500,", "rpm: 0,"), "test.yaml").unwrap_err();
    assert_eq!(err.source_name(), "test.yaml");
    assert_eq!(err.line(), Some(14));
    assert_eq!(
        err.field(),
        Some("providers[deepseek].models[deepseek-chat].limits.rpm")
    );
}

/// The documented example at the repository root must stay valid.
#[test]
fn the_example_providers_yaml_is_valid_and_chat_has_several_candidates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../providers.yaml");
    let registry = Registry::load(&path, None).unwrap_or_else(|e| panic!("{e}"));
    let chat = registry.resolve("chat");
    let providers: std::collections::BTreeSet<_> = chat
        .iter()
        .map(|&id| registry.deployment(id).provider)
        .collect();
    assert!(chat.len() >= 4, "chat resolves to {chat:?}");
    assert!(providers.len() >= 3, "chat spans only {providers:?}");
    assert_eq!(registry.defaults.model.as_deref(), Some("chat"));
    let anthropic = registry
        .deployments
        .iter()
        .filter(|d| registry.providers[d.provider.0].api == Api::Anthropic);
    for d in anthropic {
        assert!(
            d.limits.itpm.is_some() && d.limits.otpm.is_some() && d.limits.tpm.is_none(),
            "the example's Anthropic models limit input and output apart: {:?}",
            d.limits
        );
    }
    assert_eq!(
        registry.state, None,
        "the example keeps state commented out"
    );
    for api in Api::ALL {
        assert!(
            registry.providers.iter().any(|p| p.api == api),
            "no {api:?} provider"
        );
    }

    let moved = Registry::load(&path, Some("redis://127.0.0.1:6379/3")).unwrap();
    assert_eq!(moved.state.as_deref(), Some("redis://127.0.0.1:6379/3"));
    let err = Registry::load(&path, Some("nope")).unwrap_err();
    assert!(err.to_string().starts_with("REDIS_URL: "), "{err}");
}

#[test]
fn a_slot_ttl_above_one_hour_is_rejected() {
    let msg = error_of(&with(
        "  model: chat\n",
        "  model: chat\n  slot_ttl_secs: 3601\n",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:4:",
            "defaults.slot_ttl_secs",
            "3601",
            "maximum 3600",
        ],
    );
}
