//! `llmroute keys create|list|show|update|rotate|revoke` on the shared key store (here the
//! embedded store): a key made by the CLI serves on a running gateway with no restart, and a
//! revoked one stops; bad input exits 2 naming it.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// A scene with tenant `acme` (tier `pro`) and no key in the file.
pub(crate) fn keyed_scene() -> Scene {
    one_upstream_at(
        "http://127.0.0.1:9/v1".to_owned(),
        "tenants:\n  tiers: { pro: { rpm: 100 } }\n  members: { acme: pro }\n",
    )
}

/// `llmroute keys ARGS --json` in `s`, read as JSON.
pub(crate) fn keys_json(s: &Scene, args: &[&str]) -> Value {
    let (out, _) = run(s.llmroute(&["oa"]).arg("keys").args(args).arg("--json"), 0);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Waits, 5 s at most, until `GET /v1/models` with `key` answers `status`.
async fn until_models_answer(base: &str, key: &str, status: u16) {
    let http = reqwest::Client::new();
    let ask = || {
        http.get(format!("{base}/v1/models"))
            .bearer_auth(key)
            .send()
    };
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        // The gateway reads the store every 500 ms: a few tries.
        while ask().await.unwrap().status().as_u16() != status {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert!(waited.await.is_ok(), "never answered {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_made_by_the_cli_serves_on_a_running_gateway_until_the_cli_revokes_it() {
    let s = keyed_scene();
    let made = keys_json(&s, &["create", "--tenant", "acme", "--name", "ci"]);
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    assert!(id.starts_with("key_") && key.starts_with("llmr-"), "{made}");
    // No key in the file: the one in the store lets the gateway start, and serves.
    let mut child = s
        .process(&["serve", "--listen", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let base = listening_on(&mut child);
    until_models_answer(&base, key, 200).await;
    // A second key made while it runs serves too.
    let second = keys_json(&s, &["create", "--tenant", "acme"]);
    until_models_answer(&base, second["key"].as_str().unwrap(), 200).await;
    let revoked = keys_json(&s, &["revoke", id]);
    assert_eq!(revoked["state"], "revoked");
    until_models_answer(&base, key, 401).await;
    signal(child.id(), "TERM");
    let output = exited(child).await;
    assert_eq!(output.status.code(), Some(0));
    let stderr = text(&output.stderr);
    assert!(!stderr.contains(key), "{stderr}");
}

#[test]
fn keys_are_listed_shown_updated_and_rotated_without_their_secret() {
    let s = keyed_scene();
    let made = keys_json(&s, &["create", "--tenant", "acme", "--model", "chat"]);
    let (id, key) = (made["id"].as_str().unwrap(), made["key"].as_str().unwrap());
    let (listed, _) = run(s.llmroute(&["oa"]).args(["keys", "list"]), 0);
    assert!(listed.contains(id) && listed.contains("active"), "{listed}");
    assert!(!listed.contains(key), "{listed}");
    let (shown, _) = run(s.llmroute(&["oa"]).args(["keys", "show", id]), 0);
    assert!(
        shown.contains("models:") && shown.contains("chat"),
        "{shown}"
    );
    assert!(!shown.contains(key), "{shown}");
    let updated = keys_json(&s, &["update", id, "--all-models", "--priority", "batch"]);
    assert_eq!(updated["models"], serde_json::json!([]));
    assert_eq!(updated["priority"], "batch");
    let rotated = keys_json(&s, &["rotate", id, "--grace-secs", "60"]);
    assert_eq!(rotated["id"], id);
    assert_ne!(rotated["key"], made["key"]);
    assert!(rotated["grace_until"].is_u64(), "{rotated}");
}

#[test]
fn a_keys_own_limits_are_set_shown_changed_and_removed() {
    let s = keyed_scene();
    let args = [
        "create",
        "--tenant",
        "acme",
        "--rpm",
        "10",
        "--daily-usd",
        "2.5",
    ];
    let made = keys_json(&s, &args);
    let id = made["id"].as_str().unwrap();
    let limits = serde_json::json!({"rpm": 10, "daily_usd": 2.5});
    assert_eq!(made["limits"], limits);
    let (shown, _) = run(s.llmroute(&["oa"]).args(["keys", "show", id]), 0);
    assert!(shown.contains("rpm 10, $2.5/day"), "{shown}");
    // The flags given change their limits; the others stay.
    let updated = keys_json(&s, &["update", id, "--concurrency", "3"]);
    let limits = serde_json::json!({"rpm": 10, "concurrency": 3, "daily_usd": 2.5});
    assert_eq!(updated["limits"], limits);
    let updated = keys_json(&s, &["update", id, "--no-limits", "--tpm", "500"]);
    assert_eq!(updated["limits"], serde_json::json!({"tpm": 500}));
}

#[test]
fn bad_key_commands_exit_2_naming_what_is_wrong() {
    let s = keyed_scene();
    let made = keys_json(&s, &["create", "--tenant", "acme"]);
    let id = made["id"].as_str().unwrap();
    run(s.llmroute(&["oa"]).args(["keys", "revoke", id]), 0);
    let cases: [(&[&str], &str); 7] = [
        (
            &["create", "--tenant", "acme", "--rpm", "101"],
            "`limits.rpm`: 101 is above tenant `acme`'s 100",
        ),
        (&["update", id, "--rpm", "1"], "revoked"),
        (&["create", "--tenant", "nobody"], "`nobody` has no tier"),
        (
            &["create", "--tenant", "acme", "--model", "nope"],
            "`nope` is no configured model",
        ),
        (
            &["show", "key_0000000000000000"],
            "no key has the id `key_0000000000000000`",
        ),
        (&["rotate", id], "revoked"),
        (
            &["create", "--tenant", "acme", "--priority", "urgent"],
            "interactive or batch",
        ),
    ];
    for (args, words) in cases {
        let (_, stderr) = run(s.llmroute(&["oa"]).arg("keys").args(args), 2);
        assert!(stderr.contains(words), "{args:?}: {stderr}");
    }
}
