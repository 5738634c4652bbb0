//! Configuration errors, one test per kind of bad input, asserting on the message a user sees.
//!
//! Each test starts from [`BASE`], a valid file, changes one thing, and checks that the message
//! names the file, the field, the line, the bad value and what to do.
#![allow(clippy::unwrap_used)]

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
fn state_memory_is_kept_as_the_choice_of_this_process_only() {
    let yaml = with("namespace: demo\n", "namespace: demo\nstate: memory\n");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    assert_eq!(
        registry.state.as_deref(),
        Some(router_core::config::IN_MEMORY)
    );
    assert_eq!(registry.state_redacted().as_deref(), Some("memory"));
}

#[test]
fn an_unparsable_state_url_is_reported_without_its_password() {
    for url in [
        "redis://admin:planted-pw-42@:99999/0",
        "http://admin:planted-pw-42@host/0",
        "redis://admin:planted-pw-42@host/x",
    ] {
        let msg = error_of(&with(
            "namespace: demo\n",
            &format!("namespace: demo\nstate: {url}\n"),
        ));
        assert_mentions(
            &msg,
            &[
                "test.yaml:2:",
                "state",
                "admin:***@",
                "redis://",
                "`state: memory`",
            ],
        );
        assert!(!msg.contains("planted-pw-42"), "password leaked: {msg}");
    }
}

#[test]
fn a_valid_state_url_is_kept_but_never_shown_with_its_password() {
    let yaml = with(
        "namespace: demo\n",
        "namespace: demo\nstate: redis://admin:planted-pw-42@127.0.0.1:6379/0\n",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    assert_eq!(
        registry.state.as_deref(),
        Some("redis://admin:planted-pw-42@127.0.0.1:6379/0")
    );
    assert_eq!(
        registry.state_redacted().as_deref(),
        Some("redis://admin:***@127.0.0.1:6379/0")
    );
    assert!(
        !format!("{registry:?}").contains("planted-pw-42"),
        "Debug leaks the password"
    );
}

#[test]
fn a_cluster_state_is_a_comma_url_or_a_list_and_never_shows_a_password() {
    let comma = "redis+cluster://127.0.0.1:7000,app:planted-pw-42@127.0.0.1:7001";
    let list = "\n  - redis://127.0.0.1:7000\n  - redis://app:planted-pw-42@127.0.0.1:7001/0\n";
    for state in [comma, list] {
        let yaml = with(
            "namespace: demo\n",
            &format!("namespace: demo\nstate: {state}\n"),
        );
        let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
        assert_eq!(registry.state.as_deref(), Some(comma), "{state}");
        let shown = registry.state_redacted().unwrap_or_default();
        assert_eq!(shown, "redis+cluster://***,***@127.0.0.1:7001");
        assert!(!format!("{registry:?}").contains("planted-pw-42"));
    }
    // A bad node: named, with what to write, and no password.
    for (state, names) in [
        (
            "redis+cluster://app:planted-pw-42@127.0.0.1:7000,127.0.0.1:x",
            "node 2 (`127.0.0.1:x`)",
        ),
        (
            "[redis://app:planted-pw-42@127.0.0.1:7000, redis://127.0.0.1:7001/2]",
            "state[1]",
        ),
        ("[]", "empty list"),
    ] {
        let msg = error_of(&with(
            "namespace: demo\n",
            &format!("namespace: demo\nstate: {state}\n"),
        ));
        assert_mentions(&msg, &["test.yaml:2:", "state", names]);
        assert!(!msg.contains("planted-pw-42"), "password leaked: {msg}");
    }
    // REDIS_URL takes the comma form too.
    let registry = Registry::from_yaml_str(BASE, "test.yaml").unwrap();
    let err = registry
        .with_state_override("redis+cluster://:planted-pw-42@h1:7000,h2:bad", "REDIS_URL")
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["REDIS_URL: ", "node 2 (`h2:bad`)"]);
    assert!(!err.contains("planted-pw-42"), "password leaked: {err}");
}

#[test]
fn redis_url_override_replaces_state_and_names_its_origin_when_bad() {
    let registry = Registry::from_yaml_str(BASE, "test.yaml").unwrap();
    let moved = registry
        .clone()
        .with_state_override("redis://10.0.0.1:6380/2", "REDIS_URL")
        .unwrap();
    assert_eq!(moved.state.as_deref(), Some("redis://10.0.0.1:6380/2"));

    let err = registry
        .with_state_override("redis://u:planted-pw-42@:0/x", "REDIS_URL")
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::Override { .. }), "{err:?}");
    assert!(msg.starts_with("REDIS_URL: "), "{msg}");
    assert_mentions(&msg, &["u:***@", "not a usable Redis URL"]);
    assert!(!msg.contains("planted-pw-42"), "password leaked: {msg}");
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

#[test]
fn retry_settings_are_read_and_default_when_absent() {
    let registry = Registry::from_yaml_str(BASE, "test.yaml").unwrap();
    assert_eq!(
        registry.retry,
        router_core::config::RetrySettings::default()
    );
    let yaml = format!(
        "{BASE}retry:\n  max_attempts: 6\n  base_ms: 100\n  cap_ms: 5000\n  deadline_secs: 30\n  attempt_timeout_secs: 7\n"
    );
    let retry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap().retry;
    assert_eq!(retry.max_attempts, 6);
    assert_eq!(retry.base, std::time::Duration::from_millis(100));
    assert_eq!(retry.cap, std::time::Duration::from_secs(5));
    assert_eq!(retry.deadline, std::time::Duration::from_secs(30));
    assert_eq!(retry.attempt_timeout, std::time::Duration::from_secs(7));
}

#[test]
fn bad_retry_settings_are_rejected_with_the_field() {
    let msg = error_of(&format!("{BASE}retry:\n  max_attempts: 0\n"));
    assert_mentions(
        &msg,
        &["test.yaml:26:", "retry.max_attempts", "got 0", "default 4"],
    );
    let msg = error_of(&format!("{BASE}retry:\n  attempt_timeout_secs: 0\n"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:26:",
            "retry.attempt_timeout_secs",
            "got 0",
            "default 60",
        ],
    );
    let msg = error_of(&format!("{BASE}retry:\n  deadline_secs: -5\n"));
    assert_mentions(&msg, &["test.yaml:26:", "retry.deadline_secs", "got -5"]);
    let msg = error_of(&format!("{BASE}retry:\n  base_ms: 900\n  cap_ms: 800\n"));
    assert_mentions(
        &msg,
        &["test.yaml:26:", "retry.base_ms", "900", "cap_ms 800"],
    );
    let msg = error_of(&format!("{BASE}retry:\n  backoff: 3\n"));
    assert_mentions(&msg, &["test.yaml:", "backoff"]);
}

/// `tenants:` and `priorities:` as in the documented example, appended to [`BASE`] by
/// [`with_tenants`]: `tenants:` is line 25, `free` 28, `pro` 29, `acme` 32, `batch_share` 34.
const TENANTS: &str = "tenants:
  default_tier: free
  tiers:
    free: { rpm: 60, tpm: 100000, concurrency: 2, budget: { daily_usd: 1, monthly_usd: 10 } }
    pro: { rpm: 500, tpm: 1000000, concurrency: 20, budget: { daily_usd: 50, monthly_usd: 500 } }
    enterprise: { rpm: 10000, tpm: 10000000 }
  members:
    acme: pro
priorities:
  batch_share: 0.8
";

/// `BASE` followed by `TENANTS` with `from` (which must occur exactly once) replaced by `to`.
fn with_tenants(from: &str, to: &str) -> String {
    assert_eq!(
        TENANTS.matches(from).count(),
        1,
        "fixture must contain {from:?} exactly once"
    );
    format!("{BASE}{}", TENANTS.replacen(from, to, 1))
}

#[test]
fn tiers_members_and_batch_share_are_read_and_tier_of_falls_back_to_the_default() {
    let yaml = with_tenants("batch_share: 0.8", "batch_share: 0.5");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let names: Vec<&str> = registry
        .tenants
        .tiers
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["free", "pro", "enterprise"], "configuration order");
    assert_eq!(registry.tenants.default_tier.as_deref(), Some("free"));
    assert_eq!(
        registry.tenants.members,
        [("acme".to_owned(), "pro".to_owned())]
    );

    let acme = registry.tier_of("acme").unwrap();
    assert_eq!(acme.name, "pro");
    assert_eq!(acme.limits.rpm.map(|n| n.get()), Some(500));
    assert_eq!(acme.limits.tpm.map(|n| n.get()), Some(1_000_000));
    assert_eq!(acme.limits.concurrency.map(|n| n.get()), Some(20));
    assert_eq!(
        acme.budget,
        Budget {
            daily_usd: Some(50.0),
            monthly_usd: Some(500.0)
        }
    );
    assert_eq!(registry.tier_of("unknown").unwrap().name, "free");
    let enterprise = registry.tenants.tier("enterprise").unwrap();
    assert_eq!(
        enterprise.limits.concurrency, None,
        "omitted limit is unlimited"
    );
    assert_eq!(
        enterprise.budget,
        Budget::default(),
        "omitted budget is unlimited"
    );
    assert_eq!(registry.priorities.batch_share, 0.5);

    let yaml = with_tenants("  default_tier: free\n", "");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    assert_eq!(registry.tier_of("acme").unwrap().name, "pro");
    assert_eq!(
        registry.tier_of("unknown"),
        None,
        "no default tier: untracked"
    );
}

#[test]
fn absent_or_empty_tenants_and_priorities_sections_take_their_defaults() {
    for extra in [
        "",
        "tenants:\npriorities:\n",
        "tenants: {}\npriorities: {}\n",
    ] {
        let yaml = format!("{BASE}{extra}");
        let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
        assert_eq!(registry.tenants, Tenants::default(), "for {extra:?}");
        assert_eq!(registry.priorities, Priorities::default());
        assert_eq!(registry.tier_of("acme"), None);
    }
}

#[test]
fn a_tier_written_with_nothing_after_it_is_unlimited() {
    let yaml = with_tenants(
        "    enterprise: { rpm: 10000, tpm: 10000000 }\n",
        "    enterprise:\n",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let enterprise = registry.tenants.tier("enterprise").unwrap();
    assert!(enterprise.limits.is_unlimited());
    assert_eq!(enterprise.budget, Budget::default());
}

#[test]
fn unknown_fields_in_tenants_and_priorities_are_reported_with_their_line() {
    let cases = [
        ("  tiers:", "  tierz:", "test.yaml:27:", "`tierz`", "tiers"),
        ("{ rpm: 60,", "{ rpn: 60,", "test.yaml:28:", "`rpn`", "rpm"),
        (
            "{ daily_usd: 1,",
            "{ weekly_usd: 1,",
            "test.yaml:28:",
            "`weekly_usd`",
            "daily_usd",
        ),
        (
            "enterprise: { rpm: 10000,",
            "enterprise: { limits: { rpm: 10000 },",
            "test.yaml:30:",
            "`limits`",
            "concurrency",
        ),
        (
            "batch_share:",
            "batch: ",
            "test.yaml:34:",
            "`batch`",
            "batch_share",
        ),
    ];
    for (from, to, at, unknown, expected) in cases {
        let msg = error_of(&with_tenants(from, to));
        assert_mentions(&msg, &[at, "unknown field", unknown, expected]);
    }
}

#[test]
fn zero_negative_nan_and_infinite_budgets_are_rejected() {
    let cases = [
        (
            "daily_usd: 1,",
            "daily_usd: 0,",
            28,
            "free.budget.daily_usd",
            "got 0",
            "daily",
        ),
        (
            "monthly_usd: 10 ",
            "monthly_usd: -10 ",
            28,
            "free.budget.monthly_usd",
            "got -10",
            "monthly",
        ),
        (
            "daily_usd: 50,",
            "daily_usd: .nan,",
            29,
            "pro.budget.daily_usd",
            "got NaN",
            "daily",
        ),
        (
            "monthly_usd: 500 ",
            "monthly_usd: .inf ",
            29,
            "pro.budget.monthly_usd",
            "got inf",
            "monthly",
        ),
        (
            "daily_usd: 50,",
            "daily_usd: lots,",
            29,
            "pro.budget.daily_usd",
            "got `lots`",
            "daily",
        ),
    ];
    for (from, to, line, field, got, period) in cases {
        let msg = error_of(&with_tenants(from, to));
        let at = format!("test.yaml:{line}:");
        let field = format!("tenants.tiers.{field}");
        let hint = format!("for no {period} budget");
        assert_mentions(
            &msg,
            &[&at, &field, got, "positive, finite amount in USD", &hint],
        );
    }
}

#[test]
fn a_daily_budget_above_the_monthly_one_is_allowed() {
    let yaml = with_tenants("daily_usd: 1,", "daily_usd: 20,");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let free = registry.tenants.tier("free").unwrap();
    assert_eq!(
        free.budget,
        Budget {
            daily_usd: Some(20.0),
            monthly_usd: Some(10.0)
        }
    );
}

#[test]
fn zero_negative_and_fractional_tier_limits_name_the_field() {
    let cases = [
        (
            "{ rpm: 60,",
            "{ rpm: 0,",
            28,
            "tenants.tiers.free.rpm",
            "got 0",
            "rpm",
        ),
        (
            "tpm: 1000000,",
            "tpm: -1,",
            29,
            "tenants.tiers.pro.tpm",
            "got -1",
            "tpm",
        ),
        (
            "concurrency: 2,",
            "concurrency: 0,",
            28,
            "tenants.tiers.free.concurrency",
            "got 0",
            "concurrency",
        ),
        (
            "tpm: 10000000 ",
            "tpm: 1.5 ",
            30,
            "tenants.tiers.enterprise.tpm",
            "got 1.5",
            "tpm",
        ),
    ];
    for (from, to, line, field, got, key) in cases {
        let msg = error_of(&with_tenants(from, to));
        let at = format!("test.yaml:{line}:");
        let hint = format!("remove `{key}` for no limit");
        assert_mentions(&msg, &[&at, field, got, "whole number above zero", &hint]);
    }
}

#[test]
fn a_default_tier_naming_no_tier_lists_the_tiers() {
    let msg = error_of(&with_tenants("default_tier: free", "default_tier: gold"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:26:",
            "tenants.default_tier",
            "`gold` names no tier",
            "use one of: free, pro, enterprise",
        ],
    );
}

#[test]
fn a_member_of_an_unknown_tier_lists_the_tiers() {
    let msg = error_of(&with_tenants("acme: pro", "acme: gold"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:32:",
            "tenants.members.acme",
            "`gold` names no tier",
            "use one of: free, pro, enterprise",
        ],
    );
    let msg = error_of(&format!("{BASE}tenants:\n  members:\n    acme: pro\n"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:27:",
            "tenants.members.acme",
            "`pro` names no tier",
            "add it under `tenants.tiers`",
        ],
    );
}

#[test]
fn duplicate_tier_and_tenant_names_are_rejected_with_their_line() {
    // Written twice: the parser says so.
    let msg = error_of(&with_tenants(
        "    acme: pro\n",
        "    acme: pro\n    acme: free\n",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:33:",
            "duplicate mapping key",
            "acme",
            "remove one",
        ],
    );
    let msg = error_of(&with_tenants(
        "    enterprise: {",
        "    pro: { rpm: 1 }\n    enterprise: {",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:30:",
            "duplicate mapping key",
            "pro",
            "remove one",
        ],
    );
    // Written differently, the same name: validation says so.
    let msg = error_of(&with_tenants(
        "    acme: pro\n",
        "    1: pro\n    \"1\": free\n",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:33:",
            "tenants.members[1]",
            "duplicate tenant `1`",
            "first at line 32",
        ],
    );
    let msg = error_of(&with_tenants(
        "    enterprise: {",
        "    7: {}\n    \"7\": {}\n    enterprise: {",
    ));
    assert_mentions(
        &msg,
        &[
            "test.yaml:31:",
            "tenants.tiers[3]",
            "duplicate tier `7`",
            "first at line 30",
        ],
    );
}

#[test]
fn batch_share_must_be_above_zero_and_at_most_one() {
    for bad in ["0", "-0.5", "1.5", ".nan", ".inf", "lots", "true"] {
        let msg = error_of(&with_tenants(
            "batch_share: 0.8",
            &format!("batch_share: {bad}"),
        ));
        assert_mentions(
            &msg,
            &[
                "test.yaml:34:",
                "priorities.batch_share",
                "above 0 and at most 1",
                "got ",
                "default 0.8",
            ],
        );
    }
    for (good, share) in [("1", 1.0), ("1.0", 1.0), ("0.05", 0.05)] {
        let yaml = with_tenants("batch_share: 0.8", &format!("batch_share: {good}"));
        let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
        assert_eq!(registry.priorities.batch_share, share, "for {good}");
    }
}

#[test]
fn batch_aging_secs_is_read_and_must_be_seconds_up_to_an_hour() {
    let with_aging = |v: &str| {
        with_tenants(
            "batch_share: 0.8",
            &format!("batch_share: 0.8\n  batch_aging_secs: {v}"),
        )
    };
    for bad in ["-1", "3601", ".nan", "soon"] {
        let msg = error_of(&with_aging(bad));
        assert_mentions(
            &msg,
            &[
                "test.yaml:35:",
                "priorities.batch_aging_secs",
                "from 0 to 3600",
                "default 30",
            ],
        );
    }
    for (good, ms) in [("0", 0), ("2.5", 2_500), ("3600", 3_600_000)] {
        let registry = Registry::from_yaml_str(&with_aging(good), "test.yaml").unwrap();
        assert_eq!(
            registry.priorities.batch_aging.as_millis(),
            ms,
            "for {good}"
        );
    }
    let unchanged = with_tenants("batch_share: 0.8", "batch_share: 0.8");
    let registry = Registry::from_yaml_str(&unchanged, "test.yaml").unwrap();
    assert_eq!(registry.priorities.batch_aging.as_secs(), 30, "the default");
}

#[test]
fn tenant_names_must_be_non_empty_and_fit_in_the_namespace_hash_tag() {
    let cases = [
        ("\"\"", "tenant name must not be empty"),
        ("\"a{b}\"", "`a{b}` must not contain `{` or `}`"),
        ("\"x}\"", "hash tag"),
        ("\" acme\"", "leading or trailing spaces"),
    ];
    for (name, expected) in cases {
        let msg = error_of(&with_tenants("    acme: pro", &format!("    {name}: pro")));
        assert_mentions(&msg, &["test.yaml:32:", "tenants.members[0]", expected]);
    }
    let msg = error_of(&with_tenants("    free: {", "    \"\": {"));
    assert_mentions(
        &msg,
        &[
            "test.yaml:28:",
            "tenants.tiers[0]",
            "tier name must not be empty",
        ],
    );
}

#[test]
fn the_example_providers_yaml_has_tiers_members_and_batch_share() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../providers.yaml");
    let registry = Registry::from_path(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(registry.tier_of("acme").unwrap().name, "pro");
    assert_eq!(registry.tier_of("someone-else").unwrap().name, "free");
    assert_eq!(registry.priorities, Priorities::default());
}

#[test]
fn itpm_and_otpm_are_read_on_models_and_providers() {
    let yaml = with(
        "        aliases: [chat, fast]\n",
        "        aliases: [chat, fast]\n        limits: { rpm: 50, itpm: 30000, otpm: 8000 }\n",
    )
    .replace(
        "    api_key_env: ANTHROPIC_API_KEY\n",
        "    api_key_env: ANTHROPIC_API_KEY\n    limits: { itpm: 90000, otpm: 16000 }\n",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let model = registry.deployments[2].limits;
    assert_eq!(model.itpm.map(|n| n.get()), Some(30_000));
    assert_eq!(model.otpm.map(|n| n.get()), Some(8_000));
    assert_eq!(model.tpm, None, "itpm and otpm do not make a combined tpm");
    let provider = registry.providers[1].limits;
    assert_eq!(provider.itpm.map(|n| n.get()), Some(90_000));
    assert_eq!(provider.otpm.map(|n| n.get()), Some(16_000));
    assert!(!provider.is_unlimited());
}

#[test]
fn zero_or_fractional_itpm_and_otpm_are_rejected() {
    let cases = [
        (
            "tpm: 150000",
            "itpm: 0",
            14,
            "providers[deepseek].models[deepseek-chat].limits.itpm",
            "got 0",
            "itpm",
        ),
        (
            "tpm: 2000000",
            "otpm: 1.5",
            9,
            "providers[deepseek].limits.otpm",
            "got 1.5",
            "otpm",
        ),
    ];
    for (from, to, line, field, got, key) in cases {
        let msg = error_of(&with(from, to));
        let at = format!("test.yaml:{line}:");
        let hint = format!("remove `{key}` for no limit");
        assert_mentions(&msg, &[&at, field, got, &hint]);
    }
}

#[test]
fn the_gateway_section_is_checked_with_its_fields() {
    let hash = "a".repeat(64);
    let ok = format!(
        "{BASE}gateway:\n  listen: 0.0.0.0:9000\n  metrics_listen: 127.0.0.1:9100\n  \
         forward_headers: [Traceparent]\n  grace_secs: 5\n  body_timeout_secs: 7\n  keys:\n    - {{ sha256: {hash}, tenant: acme, priority: batch, models: [chat] }}\n"
    );
    let registry = Registry::from_yaml_str(&ok, "gw.yaml").unwrap();
    let g = &registry.gateway;
    assert_eq!(g.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(g.forward_headers, ["traceparent"]);
    assert_eq!(g.grace, std::time::Duration::from_secs(5));
    assert_eq!(g.body_timeout, std::time::Duration::from_secs(7));
    assert_eq!(g.keys[0].tenant, "acme");
    assert_eq!(g.keys[0].priority, Some(router_core::flow::Priority::Batch));
    let admin = format!("{ok}  admin_keys: [{}]\n", "B".repeat(64));
    let registry = Registry::from_yaml_str(&admin, "gw.yaml").unwrap();
    assert_eq!(registry.gateway.admin_keys, ["b".repeat(64)]);
    let cases = [
        (
            "gateway:\n  admin_keys: [sk-admin-key-pasted-here]\n".to_owned(),
            vec![
                "gateway.admin_keys[0]",
                "64 hex digits",
                "llmroute keys admin",
            ],
        ),
        (
            format!(
                "gateway:\n  keys:\n    - {{ sha256: {hash}, tenant: a }}\n  admin_keys: [{hash}]\n"
            ),
            vec!["gateway.admin_keys[0]", "also one of `gateway.keys`"],
        ),
        (
            "gateway:\n  keys:\n    - { sha256: sk-live-key-pasted-here, tenant: acme }\n"
                .to_owned(),
            vec![
                "gateway.keys[0].sha256",
                "64 hex digits",
                "llmroute keys new",
            ],
        ),
        (
            format!(
                "gateway:\n  keys:\n    - {{ sha256: {hash}, tenant: a }}\n    - {{ sha256: {hash}, tenant: b }}\n"
            ),
            vec!["gateway.keys[1].sha256", "gateway.keys[0]"],
        ),
        (
            format!("gateway:\n  keys:\n    - {{ sha256: {hash}, tenant: a, models: [nope] }}\n"),
            vec!["gateway.keys[0].models[0]", "`nope`"],
        ),
        (
            "gateway:\n  listen: localhost\n".to_owned(),
            vec!["gateway.listen", "IP:PORT"],
        ),
        (
            "gateway:\n  forward_headers: [Authorization]\n".to_owned(),
            vec!["gateway.forward_headers[0]", "never passes it on"],
        ),
        (
            "gateway:\n  body_timeout_secs: 0\n".to_owned(),
            vec!["gateway.body_timeout_secs", "whole seconds"],
        ),
    ];
    for (section, parts) in cases {
        let message = error_of(&format!("{BASE}{section}"));
        assert_mentions(&message, &parts);
        assert!(!message.contains("sk-live-key-pasted-here"), "{message}");
        assert!(!message.contains("sk-admin-key-pasted-here"), "{message}");
    }
}

#[test]
fn ledger_settings_are_read_with_their_defaults() {
    use router_core::config::{LedgerSettings, OnError};
    use std::time::Duration;
    let registry = Registry::from_yaml_str(BASE, "test.yaml").unwrap();
    assert_eq!(registry.ledger, LedgerSettings::default());
    assert_eq!(registry.ledger.timeout, Duration::from_millis(50));
    assert_eq!(registry.ledger.on_error, OnError::Local);
    let yaml = with(
        "namespace: demo\n",
        "namespace: demo\nledger: { timeout_ms: 15, on_error: closed, heartbeat_ms: 250 }\n",
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    assert_eq!(
        registry.ledger,
        LedgerSettings {
            timeout: Duration::from_millis(15),
            on_error: OnError::Closed,
            heartbeat: Duration::from_millis(250),
        }
    );
}

#[test]
fn an_unknown_ledger_mode_names_the_field_and_the_modes() {
    let yaml = with(
        "namespace: demo\n",
        "namespace: demo\nledger:\n  on_error: retry\n",
    );
    assert_mentions(
        &error_of(&yaml),
        &[
            "test.yaml:3",
            "ledger.on_error",
            "`retry`",
            "local",
            "closed",
            "open",
        ],
    );
}

#[test]
fn a_zero_ledger_timeout_is_refused() {
    let yaml = with(
        "namespace: demo\n",
        "namespace: demo\nledger:\n  timeout_ms: 0\n",
    );
    assert_mentions(
        &error_of(&yaml),
        &[
            "test.yaml:3",
            "ledger.timeout_ms",
            "above zero",
            "default 50",
        ],
    );
}

#[test]
fn a_ledger_timeout_or_heartbeat_beyond_its_most_is_refused() {
    for (key, value, most, default) in [
        ("timeout_ms", "30000", "10000", "default 50"),
        (
            "heartbeat_ms",
            "4000000000000000000",
            "60000",
            "default 2000",
        ),
    ] {
        let yaml = with(
            "namespace: demo\n",
            &format!("namespace: demo\nledger:\n  {key}: {value}\n"),
        );
        assert_mentions(
            &error_of(&yaml),
            &[
                "test.yaml:3",
                &format!("ledger.{key}"),
                value,
                most,
                default,
            ],
        );
    }
}

#[test]
fn a_usage_schema_postgresql_keeps_for_itself_is_refused() {
    let yaml = with(
        "namespace: demo\n",
        "namespace: demo\nusage:\n  sink: sqlite\n  schema: pg_usage\n",
    );
    assert_mentions(&error_of(&yaml), &["usage.schema", "pg_usage", "`pg_`"]);
    let ok = with(
        "namespace: demo\n",
        "namespace: demo\nusage:\n  sink: sqlite\n  schema: llm_usage\n",
    );
    assert!(Registry::from_yaml_str(&ok, "test.yaml").is_ok());
}

#[test]
fn a_provider_name_with_a_slash_or_a_comma_is_refused() {
    for name in ["deep/seek", "deep,seek"] {
        let yaml = with("  - name: deepseek\n", &format!("  - name: {name}\n"));
        assert_mentions(
            &error_of(&yaml),
            &["test.yaml:5", "providers[0].name", name, "rename it"],
        );
    }
}

#[test]
fn usage_retain_days_is_read_and_a_bad_one_names_what_to_write() {
    let yaml = |days: &str| {
        with(
            "namespace: demo\n",
            &format!("namespace: demo\nusage:\n  sink: sqlite\n  retain_days: {days}\n"),
        )
    };
    let registry = Registry::from_yaml_str(&yaml("90"), "test.yaml").unwrap();
    assert_eq!(registry.usage.as_ref().unwrap().retain_days, Some(90));
    for bad in ["0", "-3", "1.5", "9999"] {
        assert_mentions(
            &error_of(&yaml(bad)),
            &[
                "usage.retain_days",
                "1 to 3660",
                "remove it to keep every record",
            ],
        );
    }
}

#[test]
fn per_day_limits_take_a_known_time_zone_and_no_lease() {
    let msg = error_of(&with(
        "limits: { rpm: 500, tpm: 150000, concurrency: 20 }",
        "limits: { rpm: 500, rpd: 1000, day_resets: Pacific/Nowhere }",
    ));
    let field = "providers[deepseek].models[deepseek-chat].limits.day_resets";
    assert_mentions(
        &msg,
        &[
            "test.yaml:14",
            field,
            "`Pacific/Nowhere`",
            "America/Los_Angeles",
        ],
    );
    let msg = error_of(&with(
        "output: 5.0 }\n",
        "output: 5.0 }\n        limits: { tpd: 1000000 }\n        lease: auto\n",
    ));
    let field = "providers[anthropic].models[claude-haiku-4-5].lease";
    assert_mentions(&msg, &[field, "`rpd` or `tpd`", "remove `lease`"]);
    // A provider's time zone is its models' unless one sets its own.
    let yaml = with(
        "limits: { rpm: 10000, tpm: 2000000, concurrency: 100 }",
        "limits: { rpd: 100000, day_resets: America/Los_Angeles }",
    );
    let yaml = yaml.replacen(
        "price: { input: 0.55, output: 2.19 }",
        "price: { input: 0.55, output: 2.19 }\n        limits: { tpd: 5000000, day_resets: UTC }",
        1,
    );
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    let zone = |model: &str| {
        let d = registry.resolve(model)[0];
        registry.deployment(d).day_resets.name().to_owned()
    };
    assert_eq!(zone("deepseek-chat"), "America/Los_Angeles");
    assert_eq!(zone("deepseek-reasoner"), "utc");
    assert_eq!(
        registry.providers[0].limits.rpd.map(|v| v.get()),
        Some(100_000)
    );
}

#[test]
fn a_long_comment_block_is_only_a_comment() {
    // Sixty comment lines between a key and its list: a parser that buffered them while
    // looking ahead would refuse the file.
    let block: String = (0..60).map(|i| format!("  # note {i}\n")).collect();
    let yaml = with("providers:\n", &format!("providers:\n{block}"));
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").unwrap();
    assert_eq!(registry.providers.len(), 2);
}
