//! Every failure: one line on stderr that says what to do, and its documented exit status.

use wiremock::matchers::method;
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

fn one_line(stderr: &str) -> &str {
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
    stderr.trim_end()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_prompt_file_exits_2_naming_it() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p", "no-such-prompt.txt"]);
    let line = run_async(cmd, 2).await.1;
    assert!(
        one_line(&line).contains("cannot read prompt file no-such-prompt.txt"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_yaml_exits_2_with_file_and_line() {
    let (s, _server) = openai_scene("rpm: 10").await;
    std::fs::write(
        &s.config,
        "providers:\n  - name: x\n    api: openai\n    bogus: 1\n",
    )
    .unwrap();
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert!(one_line(&line).contains("providers.yaml:4"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_model_exits_2_listing_the_known_ones() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-m", "gpt-9", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert_eq!(
        one_line(&line),
        "llmroute: unknown model `gpt-9`; known models and aliases: chat, gpt-test"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_key_set_exits_2_naming_the_variables() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&[]);
    cmd.args(["chat", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert_eq!(
        one_line(&line),
        "llmroute: no API key set for `chat`: set OA_KEY"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_unreachable_exits_5_naming_the_url_without_its_password() {
    let server = wiremock::MockServer::start().await;
    let base = format!("{}/v1", server.uri());
    // Time enough for the refusal to come back on a loaded machine: what it says is the point.
    let s = scene_with(
        &[("oa", "openai", base, "gpt-test", 2.0, 8.0, "rpm: 10")],
        "ledger: { timeout_ms: 5000 }\n",
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://admin:planted-pw-42@{}/0",
        closed.local_addr().unwrap()
    );
    drop(closed);
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["--state", &url, "chat", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 5).await.1;
    let line = one_line(&line);
    assert!(line.contains("redis://admin:***@127.0.0.1:"), "{line}");
    assert!(!line.contains("planted-pw-42"), "{line}");
    // Refused, not "no answer", and what to do.
    assert!(line.contains("refused"), "{line}");
    assert!(line.contains("start Redis at that address"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_capacity_before_the_deadline_exits_3_saying_when() {
    let (s, server) = openai_scene("rpm: 1").await;
    let ok = ResponseTemplate::new(200).set_body_raw(fixture("openai/ok.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(ok)
        .expect(1)
        .mount(&server)
        .await;
    let mut first = s.llmroute(&["oa"]);
    first
        .args(["chat", "--no-stream", "-p"])
        .arg(s.prompt("Hi"));
    run_async(first, 0).await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--timeout", "2", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 3).await.1;
    let line = one_line(&line);
    assert!(
        line.contains("no capacity before the deadline; retry after"),
        "{line}"
    );
    assert!(line.contains("oa/gpt-test: rpm full"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_error_exits_4() {
    let (s, server) = openai_scene("rpm: 10").await;
    let bad = ResponseTemplate::new(400)
        .set_body_raw(fixture("openai/bad_request_400.json"), "application/json");
    Mock::given(method("POST"))
        .respond_with(bad)
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p"]).arg(s.prompt("Hi"));
    let line = run_async(cmd, 4).await.1;
    assert!(
        one_line(&line).starts_with("llmroute: oa/gpt-test: invalid (HTTP 400)"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_or_reserved_header_exits_2_naming_it_and_never_its_value() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--header", "sk-nonsense", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert!(
        one_line(&line).contains("--header: an argument is not NAME=VALUE"),
        "{line}"
    );
    assert!(!line.contains("sk-nonsense"), "{line}");
    // Written as curl takes it, an `=` in the credentials or not (Basic's padding): the name
    // is shown, the credentials are not.
    for (arg, hidden) in [
        ("Authorization: Bearer sk-curl-S3CRET", ["S3CRET", "Bearer"]),
        (
            "Authorization: Basic dXNlcjpTM0NSRVQ=",
            ["dXNlcjpTM0NSRVQ", "Basic"],
        ),
    ] {
        let mut cmd = s.llmroute(&["oa"]);
        cmd.args(["chat", "--header", arg, "-p"])
            .arg(s.prompt("Hi"));
        let line = run_async(cmd, 2).await.1;
        assert!(
            one_line(&line).contains("write it as Authorization=VALUE"),
            "{line}"
        );
        assert!(hidden.iter().all(|h| !line.contains(h)), "{line}");
    }
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "--header", "x-api-key=sk-elsewhere", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert!(one_line(&line).contains("`x-api-key`"), "{line}");
    assert!(!line.contains("sk-elsewhere"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn numeric_flags_out_of_range_exit_2_naming_the_flag_and_the_range_and_send_nothing() {
    let (s, server) = openai_scene("rpm: 10").await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let prompt = s.prompt("Hi");
    let timeout = "--timeout: must be a number of seconds above 0 and at most 86400";
    let temperature = "--temperature: must be a number from 0 to 2";
    let cases: [(&[&str], &str, &str); 9] = [
        (&["--timeout", "1e300"], timeout, "got 1e300"),
        (&["--timeout", "inf"], timeout, "got inf"),
        (&["--timeout", "0"], timeout, "got 0"),
        (&["--timeout=-5"], timeout, "got -5"),
        (&["--timeout", "86401"], timeout, "got 86401"),
        (&["--temperature", "nan"], temperature, "got NaN"),
        (&["--temperature", "inf"], temperature, "got inf"),
        (&["--temperature", "2.5"], temperature, "got 2.5"),
        (
            &["--max-tokens", "0"],
            "--max-tokens: must be a whole number from 1 to 4294967295",
            "got 0",
        ),
    ];
    for (flags, range, value) in cases {
        let mut cmd = s.llmroute(&["oa"]);
        cmd.arg("chat").args(flags).arg("-p").arg(&prompt);
        let line = run_async(cmd, 2).await.1;
        let line = one_line(&line);
        assert!(line.starts_with("llmroute: "), "{flags:?}: {line}");
        assert!(
            line.contains(range),
            "{flags:?}: {range:?} missing from: {line}"
        );
        assert!(
            line.contains(value),
            "{flags:?}: {value:?} missing from: {line}"
        );
    }
    for (watch, value) in [("1e300", "got 1e300"), ("0", "got 0"), ("nan", "got NaN")] {
        let mut cmd = s.llmroute(&["oa"]);
        cmd.args(["quota", "--watch", watch]);
        let line = run_async(cmd, 2).await.1;
        let line = one_line(&line);
        assert!(
            line.contains("--watch: must be a number of seconds from 0.1 to 86400"),
            "{line}"
        );
        assert!(line.contains(value), "{value:?} missing from: {line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_binary_prompt_file_exits_2_saying_it_is_not_text() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let path = s.dir.path().join("prompt.bin");
    std::fs::write(&path, b"%PDF\xff\xfe\x00\x01").unwrap();
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p"]).arg(&path);
    let line = run_async(cmd, 2).await.1;
    let line = one_line(&line);
    assert!(line.contains("prompt.bin is not UTF-8 text"), "{line}");
    assert!(line.contains("offset 4"), "{line}");
    assert!(line.contains("convert it"), "{line}");
    assert!(!line.contains("pass an existing file"), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_prompt_on_stdin_exits_2_saying_how_to_give_one() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p", "-"]).write_stdin(" \n");
    let line = run_async(cmd, 2).await.1;
    assert_eq!(
        one_line(&line),
        "llmroute: the prompt on standard input (-p -) is empty; pipe the prompt in, e.g. \
         echo 'Hello' | llmroute chat -p -, or pass a file with -p FILE"
    );
    let mut cmd = s.llmroute(&["oa"]);
    cmd.args(["chat", "-p"]).arg(s.prompt(""));
    let line = run_async(cmd, 2).await.1;
    let line = one_line(&line);
    assert!(
        line.contains("prompt.txt is empty; write the prompt into it"),
        "{line}"
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_key_variable_that_is_not_utf8_exits_2_saying_so_without_its_value() {
    use std::os::unix::ffi::OsStrExt;
    let (s, _server) = openai_scene("rpm: 10").await;
    let key = std::ffi::OsStr::from_bytes(b"sk-planted-\xff-S3CRET");
    let mut cmd = s.llmroute(&[]);
    cmd.env("OA_KEY", key)
        .args(["chat", "-p"])
        .arg(s.prompt("Hi"));
    let line = run_async(cmd, 2).await.1;
    assert_eq!(
        one_line(&line),
        "llmroute: no usable API key for `chat`: OA_KEY is set but not valid UTF-8 (value not \
         shown); set it to the key itself, as plain text"
    );
    let mut cmd = s.llmroute(&[]);
    cmd.env("OA_KEY", key).arg("providers");
    let (out, err) = run_async(cmd, 0).await;
    assert!(out.contains("OA_KEY (set, but not valid UTF-8)"), "{out}");
    assert!(
        !out.contains("S3CRET") && !err.contains("S3CRET"),
        "{out}{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unusable_state_dir_exits_5_naming_the_variable_and_the_cause_once() {
    let (s, _server) = openai_scene("rpm: 10").await;
    let blocker = s.dir.path().join("blocker");
    std::fs::write(&blocker, "a file, not a directory").unwrap();
    let state = blocker.join("state");
    let mut cmd = s.llmroute(&["oa"]);
    cmd.env("LLMROUTE_STATE_DIR", &state).arg("quota");
    let line = run_async(cmd, 5).await.1;
    let line = one_line(&line);
    assert_eq!(line.matches("(os error").count(), 1, "{line}");
    let named = format!("LLMROUTE_STATE_DIR ({})", state.display());
    for part in [
        "cannot create its directory",
        named.as_str(),
        "set LLMROUTE_STATE_DIR to a directory this user can write",
        "Redis",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
    let mut cmd = s.llmroute(&["oa"]);
    cmd.env("LLMROUTE_STATE_DIR", &state).arg("usage");
    let line = run_async(cmd, 5).await.1;
    let line = one_line(&line);
    assert_eq!(line.matches("(os error").count(), 1, "{line}");
    assert!(line.contains(&format!("from {named}")), "{line}");
}

#[test]
fn simulate_flags_out_of_range_exit_2_naming_the_flag_and_the_range() {
    let (_, err) = run(
        llmroute().arg("--config").arg(example()).args([
            "simulate",
            "--duration",
            "10",
            "--latency-ms",
            "18446744073709551615",
        ]),
        2,
    );
    assert_eq!(
        one_line(&err),
        "llmroute: --latency-ms: must be a whole number from 0 to 3600000, got \
         18446744073709551615; e.g. 500"
    );
}

#[test]
fn simulate_html_into_a_missing_directory_exits_2_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("no-such-dir").join("sim.html");
    let (out, err) = run(
        llmroute()
            .arg("--config")
            .arg(example())
            .args(["simulate", "--duration", "60", "--html"])
            .arg(&page),
        2,
    );
    assert_eq!(out, "", "nothing printed when the page cannot be written");
    let line = one_line(&err);
    let named = format!(
        "llmroute: --html {}: cannot write the simulation page: ",
        page.display()
    );
    assert!(line.starts_with(&named), "{line}");
    assert!(
        line.ends_with("pass a file in an existing directory this user can write"),
        "{line}"
    );
}
