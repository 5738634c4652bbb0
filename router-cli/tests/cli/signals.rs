//! SIGINT / SIGTERM during `llmroute chat`: the request's slot and estimate are given back, and
//! the exit status says which signal stopped it.

use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::support::*;

/// An upstream that never answers: each request's arrival (its headers read) is sent on the
/// returned channel, then the connection is held open.
pub(crate) async fn silent_upstream() -> (String, mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let (seen, arrivals) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let (mut head, mut buf) = (Vec::new(), [0u8; 4096]);
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        let _ = seen.send(());
                        break;
                    }
                }
                // Hold the connection until the client goes away.
                while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    (base, arrivals)
}

/// `llmroute chat` of `scene`, spawned with piped output.
fn spawn_chat(s: &Scene, extra: &[&str]) -> Child {
    let prompt = s.prompt("Hi");
    let mut cmd = s.process(&["chat"]);
    cmd.args(extra).arg("-p").arg(prompt);
    cmd.spawn().unwrap()
}

/// What `quota --json` shows in flight on the only deployment.
pub(crate) async fn in_flight(s: &Scene) -> u64 {
    let mut cmd = s.llmroute(&[]);
    cmd.args(["quota", "--json"]);
    let v: Value = serde_json::from_str(&run_async(cmd, 0).await.0).unwrap();
    v["deployments"][0]["concurrency"]["in_flight"]
        .as_u64()
        .unwrap()
}

async fn a_signal_during_chat_frees_the_slot(name: &str, status: i32, extra: &[&str]) {
    let (base, mut arrivals) = silent_upstream().await;
    let s = one_upstream_at(base, "");
    let child = spawn_chat(&s, extra);
    let arrived = tokio::time::timeout(Duration::from_secs(60), arrivals.recv()).await;
    assert!(
        matches!(arrived, Ok(Some(()))),
        "the upstream saw no request"
    );
    assert_eq!(
        in_flight(&s).await,
        1,
        "the chat holds its slot while it waits"
    );
    signal(child.id(), name);
    let output = exited(child).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(status), "stderr: {stderr}");
    assert_eq!(
        stderr,
        format!("llmroute: chat stopped by SIG{name}\n"),
        "one line on stderr"
    );
    assert_eq!(
        in_flight(&s).await,
        0,
        "the slot is free right after the exit"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_during_a_streamed_chat_exits_130_and_frees_the_slot() {
    a_signal_during_chat_frees_the_slot("INT", 130, &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_a_whole_answer_chat_exits_143_and_frees_the_slot() {
    a_signal_during_chat_frees_the_slot("TERM", 143, &["--no-stream"]).await;
}

/// Whether process `pid`'s main thread is blocked reading its standard input (x86-64 Linux:
/// system call 0, `read`, on descriptor 0).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn reading_stdin(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|s| s.starts_with("0 0x0 "))
}

/// Ctrl-C or SIGTERM while `chat -p -` waits for its prompt ends it, as it would any program:
/// nothing is reserved yet. (SIGTERM here: a test run in the background, as `cmd &` in a
/// script, starts every child with SIGINT ignored, which a program should leave so.)
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[tokio::test(flavor = "multi_thread")]
async fn a_signal_while_chat_waits_for_its_prompt_on_stdin_ends_it() {
    let (base, _arrivals) = silent_upstream().await;
    let s = one_upstream_at(base, "");
    let mut child = s
        .process(&["chat", "-p", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // Standard input stays open: the prompt is never typed.
    let _typing = child.stdin.take().unwrap();
    let pid = child.id();
    let reading = async {
        while !reading_stdin(pid) {
            assert!(child.try_wait().unwrap().is_none(), "the chat exited early");
            tokio::task::yield_now().await;
        }
    };
    within_a_minute(reading, "read of standard input").await;
    signal(pid, "TERM");
    let output = exited(child).await;
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(output.status.signal(), Some(15), "{:?}", output.status);
    assert_eq!(in_flight(&s).await, 0);
}
