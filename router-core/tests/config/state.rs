//! `state`: memory, a Redis URL or a cluster's nodes, never shown with a password.

use super::*;

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
