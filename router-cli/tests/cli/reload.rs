//! `llmroute serve` reloads its configuration file on SIGHUP: a valid change is served with no
//! restart; a broken file changes nothing, and the log says so.

use std::time::Duration;

use crate::keys::{keyed_scene, keys_json};
use crate::support::*;

/// Waits, 5 s at most, until `GET path` with `key` answers a body holding `text`.
async fn until_body_holds(base: &str, path: &str, key: &str, text: &str) {
    let http = reqwest::Client::new();
    let ask = || async {
        let response = http.get(format!("{base}{path}")).bearer_auth(key).send();
        response.await.unwrap().text().await.unwrap()
    };
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while !ask().await.contains(text) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert!(waited.await.is_ok(), "`{path}` never showed {text}");
}

/// Gives model `chat` the alias `fresh` in the configuration file at `config`.
fn add_fresh_alias(config: &std::path::Path) {
    let yaml = std::fs::read_to_string(config).unwrap();
    let fresh = yaml.replace("aliases: [chat]", "aliases: [chat, fresh]");
    assert_ne!(fresh, yaml, "the scene's file names the alias `chat`");
    std::fs::write(config, fresh).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_a_valid_file_and_keeps_serving_the_old_one_when_it_breaks() {
    let s = keyed_scene();
    let made = keys_json(&s, &["create", "--tenant", "acme"]);
    let key = made["key"].as_str().unwrap();
    let mut child = s
        .process(&["serve", "--listen", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let base = listening_on(&mut child);
    add_fresh_alias(&s.config);
    signal(child.id(), "HUP");
    until_body_holds(&base, "/v1/models", key, "\"fresh\"").await;
    std::fs::write(&s.config, "providers: [\n").unwrap();
    signal(child.id(), "HUP");
    let failed = "llmroute_config_reloads_total{result=\"error\"} 1";
    until_body_holds(&base, "/metrics", key, failed).await;
    until_body_holds(&base, "/v1/models", key, "\"fresh\"").await;
    signal(child.id(), "TERM");
    let output = exited(child).await;
    assert_eq!(output.status.code(), Some(0));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("configuration not reloaded, the old one kept"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_whose_ledger_is_in_memory_refuses_to_reload() {
    let s = keyed_scene();
    let mut child = s
        .process(&["--state", "memory", "serve", "--no-auth"])
        .args(["--listen", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let base = listening_on(&mut child);
    add_fresh_alias(&s.config);
    signal(child.id(), "HUP");
    let failed = "llmroute_config_reloads_total{result=\"error\"} 1";
    until_body_holds(&base, "/metrics", "", failed).await;
    let models = reqwest::get(format!("{base}/v1/models")).await.unwrap();
    let models = models.text().await.unwrap();
    assert!(
        models.contains("\"chat\"") && !models.contains("fresh"),
        "{models}"
    );
    signal(child.id(), "TERM");
    let output = exited(child).await;
    assert_eq!(output.status.code(), Some(0));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("`state: memory`"), "{stderr}");
}
