//! Logs on stderr: `-v` / `-vv`, `RUST_LOG`, `--log-format json`; stdout keeps only the answer.

use serde_json::Value;
use wiremock::matchers::method;
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

const LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

/// A chat streaming "Hello!" from a mock upstream, run with `flags` before `chat`; (stdout,
/// stderr).
async fn chat_with(flags: &[&str], rust_log: Option<&str>) -> (String, String) {
    let (s, server) = openai_scene("rpm: 100").await;
    let sse =
        ResponseTemplate::new(200).set_body_raw(fixture("openai/stream.sse"), "text/event-stream");
    Mock::given(method("POST"))
        .respond_with(sse)
        .expect(1)
        .mount(&server)
        .await;
    let mut cmd = s.llmroute(&["oa"]);
    if let Some(filter) = rust_log {
        cmd.env("RUST_LOG", filter);
    }
    cmd.args(flags)
        .args(["chat", "-p"])
        .arg(s.prompt("Say hello"));
    run_async(cmd, 0).await
}

/// A line of the text format: `<RFC 3339 time> <LEVEL> ...`, or the routing report.
#[track_caller]
fn assert_text_line(line: &str) {
    if line.starts_with("llmroute: ") {
        return;
    }
    let mut words = line.split_whitespace();
    let time = words.next().unwrap_or_default();
    let level = words.next().unwrap_or_default();
    assert!(
        time.len() >= 20 && time.contains('T') && time.ends_with('Z'),
        "no time first: {line:?}"
    );
    assert!(LEVELS.contains(&level), "no level second: {line:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn twice_verbose_text_lines_are_well_formed_and_stdout_holds_only_the_answer() {
    let (stdout, stderr) = chat_with(&["-vv"], None).await;
    assert_eq!(stdout, "Hello!\n");
    assert!(stderr.contains("llmroute: estimate "), "{stderr}");
    assert!(
        stderr.contains("llmroute: attempt 1: oa/gpt-test answered"),
        "{stderr}"
    );
    stderr.lines().for_each(assert_text_line);
}

#[tokio::test(flavor = "multi_thread")]
async fn rust_log_trace_in_text_gives_well_formed_lines() {
    let (stdout, stderr) = chat_with(&[], Some("trace")).await;
    assert_eq!(stdout, "Hello!\n");
    assert!(stderr.lines().count() > 0, "trace logged nothing");
    assert!(
        !stderr.contains("llmroute: estimate"),
        "no report without -v: {stderr}"
    );
    stderr.lines().for_each(assert_text_line);
}

#[tokio::test(flavor = "multi_thread")]
async fn log_format_json_writes_one_object_per_line() {
    let (stdout, stderr) = chat_with(&["-vv", "--log-format", "json"], Some("trace")).await;
    assert_eq!(stdout, "Hello!\n");
    let events: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    for e in &events {
        let level = e["level"].as_str().unwrap_or_default();
        assert!(LEVELS.contains(&level), "{e}");
        assert!(e["timestamp"].is_string() && e["target"].is_string(), "{e}");
    }
    let report: Vec<&str> = events
        .iter()
        .filter(|e| e["target"] == "llmroute::report")
        .filter_map(|e| e["fields"]["message"].as_str())
        .collect();
    assert!(
        report[0].contains("candidates, cheapest first")
            && report.contains(&"attempt 1: oa/gpt-test answered"),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_flags_a_successful_chat_logs_nothing() {
    let (stdout, stderr) = chat_with(&[], None).await;
    assert_eq!((stdout.as_str(), stderr.as_str()), ("Hello!\n", ""));
    let (_, stderr) = chat_with(&["-v"], Some("off")).await;
    assert!(
        stderr.lines().all(|l| l.starts_with("llmroute: ")) && !stderr.is_empty(),
        "RUST_LOG=off keeps the routing report of -v: {stderr}"
    );
}

#[test]
fn an_unusable_rust_log_exits_2_naming_it() {
    let mut cmd = llmroute();
    cmd.env("RUST_LOG", "router_sdk=loud")
        .arg("--config")
        .arg(example())
        .arg("providers");
    let (stdout, stderr) = run(&mut cmd, 2);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.starts_with("llmroute: RUST_LOG: "), "{stderr}");
}
