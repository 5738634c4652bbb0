//! The other sections and per-model settings: `retry`, ITPM/OTPM, `gateway`, `ledger`, `usage`, per-day
//! limits.

use super::*;

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
