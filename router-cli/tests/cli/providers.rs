//! `llmroute providers`, configuration precedence and configuration errors.

use crate::support::*;

/// A valid configuration whose `state` holds a password.
const STATEFUL: &str = "state: redis://admin:planted-pw-42@127.0.0.1:6379/0
providers:
  - name: deepseek
    api: openai
    base_url: https://api.deepseek.com/v1
    api_key_env: DEEPSEEK_API_KEY
    models:
      - name: deepseek-chat
        price: { input: 0.28, output: 0.42 }
";

#[test]
fn providers_lists_the_example_configuration() {
    let (out, _) = run(
        llmroute().arg("--config").arg(example()).arg("providers"),
        0,
    );
    for part in [
        "provider deepseek",
        "deepseek-chat",
        "https://api.deepseek.com/v1",
        "DEEPSEEK_API_KEY (not set)",
        "itpm",
        "30000",
        "otpm",
        "cached $/Mtok",
        "write 5m $/Mtok",
        "write 1h $/Mtok",
        "claude-sonnet-4-5 above 200000 prompt tokens: input $6.00, output $22.50, cached $0.60, \
         write 5m $7.50, write 1h $12.00 per million tokens",
        "tools,vision,json_schema,reasoning",
        "route auto",
        "[2] tools: true, tier in [pro, enterprise] -> smart",
        "[3] always -> chat",
    ] {
        assert!(out.contains(part), "{part:?} missing from:\n{out}");
    }
    assert!(out.contains("embedded store"), "{out}");
}

#[test]
fn providers_json_is_one_object_with_every_provider() {
    let (out, _) = run(
        llmroute()
            .arg("--config")
            .arg(example())
            .args(["providers", "--json"]),
        0,
    );
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let providers = json["providers"].as_array().unwrap();
    let names: Vec<&str> = providers
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["openai", "anthropic", "gemini", "deepseek"]);
    let deepseek = &providers[3];
    assert_eq!(deepseek["api"], "openai");
    assert_eq!(deepseek["api_key"], "not set");
    assert_eq!(deepseek["models"][0]["price"]["input"], 0.28);
    assert_eq!(deepseek["models"][0]["price"]["cached_input"], 0.028);
    assert_eq!(
        deepseek["models"][0]["capabilities"],
        serde_json::json!(["tools"])
    );
    assert_eq!(json["routes"][0]["alias"], "auto");
    assert_eq!(
        json["routes"][0]["rules"][1]["when"],
        "prompt_tokens >= 20000"
    );
    // Every price a model has: Anthropic's cache prices by default, and its long-prompt band.
    let price = &providers[1]["models"][0]["price"];
    let want = serde_json::json!({
        "input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75,
        "cache_write_1h": 6.0,
        "above": [{"prompt_tokens": 200000, "input": 6.0, "output": 22.5, "cached_input": 0.6,
                   "cache_write": 7.5, "cache_write_1h": 12.0}]
    });
    assert_eq!(price, &want);
    let sonnet = &providers[1]["models"][0]["limits"];
    assert_eq!(
        (&sonnet["itpm"], &sonnet["otpm"], &sonnet["tpm"]),
        (&30_000.into(), &8_000.into(), &serde_json::Value::Null)
    );
    assert_eq!(json["state"], serde_json::Value::Null);
    assert_eq!(json["namespace"], "default");
}

#[test]
fn providers_shows_each_models_lease() {
    let yaml = "providers:
  - name: x
    api: openai
    base_url: https://api.example.com/v1
    api_key_env: X_KEY
    models:
      - { name: a, price: { input: 1, output: 2 }, limits: { rpm: 10 }, lease: auto }
      - { name: b, price: { input: 1, output: 2 }, limits: { rpm: 10 }, lease: { requests: 5, secs: 20 } }
      - { name: c, price: { input: 1, output: 2 }, lease: { requests: 5, tokens: 900 } }
      - { name: d, price: { input: 1, output: 2 } }
";
    let (_dir, config) = config_file("providers.yaml", yaml);
    let (out, _) = run(llmroute().arg("--config").arg(&config).arg("providers"), 0);
    for part in ["lease", "auto", "5 req, 20 s", "5 req, 900 tok, 10 s"] {
        assert!(out.contains(part), "{part:?} missing from:\n{out}");
    }
    let (out, _) = run(
        llmroute()
            .arg("--config")
            .arg(&config)
            .args(["providers", "--json"]),
        0,
    );
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let models = &json["providers"][0]["models"];
    assert_eq!(models[0]["lease"], "auto");
    assert_eq!(
        models[1]["lease"],
        serde_json::json!({ "requests": 5, "secs": 20 })
    );
    assert_eq!(
        models[2]["lease"],
        serde_json::json!({ "requests": 5, "tokens": 900, "secs": 10 })
    );
    assert!(models[3].get("lease").is_none(), "{}", models[3]);
}

#[test]
fn providers_shows_per_day_limits_and_where_each_day_ends() {
    let yaml = "providers:
  - name: g
    api: gemini
    base_url: https://generativelanguage.googleapis.com/v1beta
    api_key_env: G_KEY
    limits: { day_resets: America/Los_Angeles }
    models:
      - { name: a, price: { input: 1, output: 2 }, limits: { rpm: 10, rpd: 500, tpd: 90000 } }
      - { name: b, price: { input: 1, output: 2 }, limits: { rpd: 7, day_resets: utc } }
";
    let (_dir, config) = config_file("providers.yaml", yaml);
    let (out, _) = run(llmroute().arg("--config").arg(&config).arg("providers"), 0);
    for part in [
        "rpd",
        "tpd",
        "500",
        "90000",
        "days end at midnight America/Los_Angeles",
    ] {
        assert!(out.contains(part), "{part:?} missing from:\n{out}");
    }
    let args = ["providers", "--json"];
    let (out, _) = run(llmroute().arg("--config").arg(&config).args(args), 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let models = &json["providers"][0]["models"];
    assert_eq!(models[0]["limits"]["rpd"], 500);
    assert_eq!(models[0]["limits"]["day_resets"], "America/Los_Angeles");
    assert_eq!(models[1]["limits"]["day_resets"], "utc");
}

#[test]
fn a_planted_api_key_is_never_printed_but_reported_as_set() {
    let secret = "sk-planted-secret-123";
    let logging: [(&[&str], Option<&str>); 4] = [
        (&[], None),
        (&["-vv"], None),
        (&["-vvv"], Some("trace")),
        (&["--log-format", "json"], Some("trace")),
    ];
    for (json, (flags, rust_log)) in [false, true]
        .into_iter()
        .flat_map(|j| logging.map(|l| (j, l)))
    {
        let mut cmd = llmroute();
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        cmd.env("DEEPSEEK_API_KEY", secret)
            .args(flags)
            .arg("--config")
            .arg(example())
            .arg("providers");
        if json {
            cmd.arg("--json");
        }
        let (out, err) = run(&mut cmd, 0);
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "key leaked:\n{out}\n{err}"
        );
        let expected = if json {
            "\"api_key\": \"set\""
        } else {
            "DEEPSEEK_API_KEY (set)"
        };
        assert!(out.contains(expected), "{expected:?} missing from:\n{out}");
    }
}

#[test]
fn a_bad_config_exits_2_naming_the_file_and_field() {
    let (_dir, path) = config_file("bad.yaml", &STATEFUL.replace("0.28", "0"));
    let (out, err) = run(llmroute().arg("--config").arg(&path).arg("providers"), 2);
    assert!(out.is_empty(), "{out}");
    assert!(err.starts_with("llmroute: "), "{err}");
    for part in [
        "bad.yaml:9:",
        "providers[deepseek].models[deepseek-chat].price.input",
        "got 0",
    ] {
        assert!(err.contains(part), "{part:?} missing from:\n{err}");
    }
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_missing_config_file_exits_2_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let (_, err) = run(llmroute().current_dir(dir.path()).arg("providers"), 2);
    assert!(
        err.contains("providers.yaml") && err.contains("--config"),
        "{err}"
    );
    let (_, err) = run(
        llmroute().args(["--config", "/nonexistent/llmroute.yaml", "providers"]),
        2,
    );
    assert!(err.contains("/nonexistent/llmroute.yaml"), "{err}");
}

#[test]
fn config_precedence_is_option_then_env_then_working_directory() {
    let (dir, path) = config_file("providers.yaml", STATEFUL);
    let (out, _) = run(llmroute().current_dir(dir.path()).arg("providers"), 0);
    assert!(out.contains("config:     providers.yaml"), "{out}");
    let (out, _) = run(llmroute().env("LLMROUTE_CONFIG", &path).arg("providers"), 0);
    assert!(out.contains(&path.display().to_string()), "{out}");
    // Empty is unset, as for every other variable: the working directory's file.
    let mut cmd = llmroute();
    cmd.env("LLMROUTE_CONFIG", "").current_dir(dir.path());
    let (out, _) = run(cmd.arg("providers"), 0);
    assert!(out.contains("config:     providers.yaml"), "{out}");
    let mut cmd = llmroute();
    cmd.env("LLMROUTE_CONFIG", "/nonexistent/env.yaml")
        .arg("--config")
        .arg(example());
    run(cmd.arg("providers"), 0);
}

#[test]
fn state_precedence_is_option_then_redis_url_then_file_and_passwords_stay_hidden() {
    let (_dir, path) = config_file("stateful.yaml", STATEFUL);
    let base = || {
        let mut cmd = llmroute();
        cmd.arg("--config").arg(&path);
        cmd
    };
    let (out, _) = run(base().arg("providers"), 0);
    assert!(
        out.contains("redis://admin:***@127.0.0.1:6379/0 (from config)"),
        "{out}"
    );
    let (out, _) = run(
        base()
            .env("REDIS_URL", "redis://10.0.0.2:6379/1")
            .arg("providers"),
        0,
    );
    assert!(
        out.contains("redis://10.0.0.2:6379/1 (from REDIS_URL)"),
        "{out}"
    );
    let mut cmd = base();
    cmd.env("REDIS_URL", "redis://10.0.0.2:6379/1").args([
        "--state",
        "redis://10.0.0.3:6379/2",
        "providers",
    ]);
    let (out, _) = run(&mut cmd, 0);
    assert!(
        out.contains("redis://10.0.0.3:6379/2 (from --state)"),
        "{out}"
    );
    let (out, err) = run(base().args(["providers", "--json"]), 0);
    assert!(
        !out.contains("planted-pw-42") && !err.contains("planted-pw-42"),
        "password leaked:\n{out}"
    );
}

#[test]
fn a_bad_state_override_exits_2_naming_its_origin_without_the_password() {
    let bad = "redis://u:planted-pw-42@:0/x";
    let (_, err) = run(
        llmroute()
            .env("REDIS_URL", bad)
            .arg("--config")
            .arg(example())
            .arg("providers"),
        2,
    );
    assert!(
        err.starts_with("llmroute: REDIS_URL: ") && !err.contains("planted-pw-42"),
        "{err}"
    );
    let (_, err) = run(
        llmroute()
            .args(["--state", bad, "--config"])
            .arg(example())
            .arg("providers"),
        2,
    );
    assert!(
        err.starts_with("llmroute: --state: ") && !err.contains("planted-pw-42"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2() {
    run(llmroute().arg("no-such-command"), 2);
    run(llmroute().args(["providers", "--no-such-flag"]), 2);
}

#[cfg(unix)]
#[test]
fn a_redis_url_that_is_not_utf8_exits_2_naming_it() {
    use std::os::unix::ffi::OsStrExt;
    let url = std::ffi::OsStr::from_bytes(b"redis://h\xffx:6379/0");
    let (_, err) = run(
        llmroute()
            .env("REDIS_URL", url)
            .arg("--config")
            .arg(example())
            .arg("providers"),
        2,
    );
    assert_eq!(
        err,
        "llmroute: REDIS_URL: is not valid UTF-8; fix it or unset it\n"
    );
}

/// A configuration whose one provider's `base_url` (line 4) is `url`.
fn with_base_url(url: &str) -> String {
    format!(
        "providers:
  - name: x
    api: openai
    base_url: \"{url}\"
    api_key_env: X_KEY
    models:
      - name: m
        price: {{ input: 1, output: 2 }}
"
    )
}

#[test]
fn a_secret_in_base_url_is_refused_at_load_and_never_printed() {
    let cases = [
        ("https://api.x.com/v1?key=AIzaSECRET", "query string"),
        ("https://api.x.com/v1#AIzaSECRET", "fragment"),
        (
            "https://user:AIzaSECRET@api.x.com/v1",
            "user name or password",
        ),
    ];
    for (url, problem) in cases {
        let (_dir, path) = config_file("secret.yaml", &with_base_url(url));
        for json in [false, true] {
            let mut cmd = llmroute();
            cmd.arg("--config").arg(&path).arg("providers");
            if json {
                cmd.arg("--json");
            }
            let (out, err) = run(&mut cmd, 2);
            assert!(out.is_empty(), "{out}");
            assert_eq!(err.lines().count(), 1, "{err}");
            for part in ["secret.yaml:4:", "providers[x].base_url", problem] {
                assert!(err.contains(part), "{url}: {part:?} missing from: {err}");
            }
            assert!(!err.contains("SECRET"), "the secret leaked: {err}");
        }
    }
    let (_dir, path) = config_file("secret.yaml", &with_base_url(cases[0].0));
    let (_, err) = run(llmroute().arg("--config").arg(&path).arg("providers"), 2);
    assert!(err.contains("`api_key_env`"), "{err}");
}

#[test]
fn a_base_url_the_client_cannot_send_to_is_refused_at_load_with_file_and_line() {
    for (url, problem) in [
        ("https://x:99999/v1", "not a number from 1 to 65535"),
        ("https://x:0/v1", "port 0, out of range"),
        ("https://10.0.0.300/v1", "not an IPv4 address"),
        ("https://api.x.com/v 1", "a space"),
    ] {
        let (_dir, path) = config_file("urls.yaml", &with_base_url(url));
        let (out, err) = run(llmroute().arg("--config").arg(&path).arg("providers"), 2);
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "{err}");
        for part in ["urls.yaml:4:", "providers[x].base_url", problem] {
            assert!(err.contains(part), "{url}: {part:?} missing from: {err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn providers_check_asks_the_free_model_endpoint_and_exits_4_when_a_deployment_fails() {
    let server = wiremock::MockServer::start().await;
    let list = serde_json::json!({"object": "list", "data": [{"id": "gpt-test"}]});
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .and(wiremock::matchers::path("/v1/models"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(list))
        .mount(&server)
        .await;
    // A check sends no prompt.
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let base = format!("{}/v1", server.uri());
    let oa = (
        "oa",
        "openai",
        base.clone(),
        "gpt-test",
        2.0,
        8.0,
        "rpm: 100",
    );
    let s = scene_with(std::slice::from_ref(&oa), "");
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["providers", "--check"]);
    let (out, _) = run_async(cmd, 0).await;
    assert!(
        out.contains("oa/gpt-test") && out.contains("ok: the key works"),
        "{out}"
    );

    // Another provider without its key set, and a model the first does not list.
    let missing = ("oa2", "openai", base, "gpt-gone", 2.0, 8.0, "rpm: 100");
    let an = (
        "an",
        "anthropic",
        server.uri(),
        "claude-test",
        3.0,
        15.0,
        "rpm: 100",
    );
    let s = scene_with(&[oa, missing, an], "");
    let mut cmd = s.llmroute(&["oa", "oa2"]);
    cmd.args(["providers", "--check", "--json"]);
    let (out, err) = run_async(cmd, 4).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let status: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["ok", "model_missing", "no_key"], "{out}");
    assert_eq!(v["checks"][2]["variable"], "AN_KEY");
    assert!(
        err.contains("2 of 3 deployments failed their check"),
        "{err}"
    );
    assert!(
        !out.contains("sk-planted") && !err.contains("sk-planted"),
        "{out}{err}"
    );
}
