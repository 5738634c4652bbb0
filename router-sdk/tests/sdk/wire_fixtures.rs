//! The wire translators against real recorded provider traffic: every answer in the directory
//! `LLMROUTE_WIRE_FIXTURES` names (its `index.json` lists them) is replayed through a `Router`
//! from a local upstream: HTTP, SSE framing, decoding, usage and settlement. A stream is served
//! twice: whole, and in 5-byte pieces, each written and flushed on its own. The expected
//! readings are the project's own ([`crate::wire_fixtures_expected`]); the recorded files stay
//! outside the repository.

use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use router_core::ledger::usd_to_micros;
use router_sdk::{ChatChunk, ChatRequest, FinishReason, ResponseFormat, ToolCall, Usage};
use serde_json::Value;

use crate::replay::{Delivery, PIECE, Replay};
use crate::support::*;
use crate::wire_fixtures_expected::{EXPECTED, Expect, KNOWN, Outcome, Text};

/// The variable naming the recorded fixtures' directory.
const VAR: &str = "LLMROUTE_WIRE_FIXTURES";

/// The completion tokens a router without history estimates: `output_tokens` in
/// [`config`]'s defaults. A receipt carries them when the provider reported no usage.
const ESTIMATED_OUTPUT: u64 = 100;

#[tokio::test]
#[ignore = "reads recorded traffic kept outside the repository; run with \
            LLMROUTE_WIRE_FIXTURES=/work/shared/wire-fixtures cargo test -p router-sdk \
            --test sdk wire_fixtures -- --ignored --nocapture"]
async fn the_translators_read_every_recorded_answer_whole_and_in_5_byte_pieces() {
    let dir = std::env::var_os(VAR).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{VAR} is not set: set it to the recorded fixtures' directory (the one holding index.json)")
    });
    let index = read_index(&dir);
    let mut correct = 0;
    let mut differ = Vec::new();
    for fixture in &index {
        let expect = expectation(&fixture.name);
        let known = KNOWN.iter().find(|(name, _)| *name == fixture.name);
        let mut read = true;
        for delivery in fixture.deliveries() {
            let diffs = replay(&dir, fixture, expect, *delivery).await;
            let what = format!("{} ({})", fixture.name, delivery.name());
            match (diffs.is_empty(), known) {
                (true, _) => println!("ok       {what}"),
                (false, Some((_, why))) => println!("known    {what}: {}; {why}", diffs.join("; ")),
                (false, None) => {
                    println!("DIFFERS  {what}: {}", diffs.join("; "));
                    differ.push(what);
                }
            }
            read &= diffs.is_empty();
        }
        correct += usize::from(read);
    }
    println!(
        "{correct} of {} fixtures read correctly (streams whole and in {PIECE}-byte pieces)",
        index.len()
    );
    assert!(differ.is_empty(), "read differently: {differ:?}");
}

/// One entry of `index.json`.
struct Fixture {
    name: String,
    api: String,
    stream: bool,
    file: String,
}

impl Fixture {
    /// How the fixture is served: a stream whole and in pieces, an answer whole.
    fn deliveries(&self) -> &'static [Delivery] {
        if self.stream {
            &[Delivery::Whole, Delivery::Pieces]
        } else {
            &[Delivery::Whole]
        }
    }
}

/// The fixtures `dir/index.json` lists; every one must have an expectation and every
/// expectation a fixture.
fn read_index(dir: &Path) -> Vec<Fixture> {
    let path = dir.join("index.json");
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let entries: Vec<Value> = serde_json::from_slice(&text).unwrap();
    let field = |e: &Value, name: &str| e[name].as_str().unwrap_or_default().to_owned();
    let index: Vec<Fixture> = entries
        .iter()
        .map(|e| Fixture {
            name: field(e, "name"),
            api: field(e, "api"),
            stream: field(e, "mode") == "stream",
            file: field(e, "file"),
        })
        .collect();
    let unlisted: Vec<&str> = EXPECTED
        .iter()
        .map(|x| x.name)
        .filter(|n| !index.iter().any(|f| f.name == *n))
        .collect();
    assert!(
        unlisted.is_empty(),
        "expected but not in index.json: {unlisted:?}"
    );
    index
}

fn expectation(name: &str) -> &'static Expect {
    let found = EXPECTED.iter().find(|x| x.name == name);
    found.unwrap_or_else(|| panic!("no expectation for fixture `{name}`"))
}

/// What the router made of one replay.
#[derive(Debug, Default)]
struct Seen {
    text: String,
    calls: Vec<ToolCall>,
    refusal: Option<String>,
    /// The finish reason and usage of the receipt, or the error's class.
    end: Option<Result<(Option<FinishReason>, Usage), &'static str>>,
    /// What is wrong with the settlement, if anything.
    settled: Option<String>,
}

/// Replays `fixture` through a router of its API, served as `delivery` says; what differs.
async fn replay(dir: &Path, fixture: &Fixture, expect: &Expect, delivery: Delivery) -> Vec<String> {
    let body = body_of(&dir.join(&fixture.file), fixture.stream);
    let kind = if fixture.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let server = Replay::start(body, kind, delivery).await;
    let up = match fixture.api.as_str() {
        "anthropic" => Upstream::anthropic("up", (1.0, 1000.0)),
        "gemini" => Upstream::gemini("up", (1.0, 1000.0)),
        _ => Upstream::openai("up", (1.0, 1000.0)),
    };
    let yaml = format!("{}{SPENDER}", config(&[(&up, server.base())]));
    let w = World::from_yaml(&yaml, &[up.name], Vec::new(), |l| l).await;
    let mut seen = if fixture.stream {
        streamed(&w, request(expect)).await
    } else {
        whole(&w, request(expect)).await
    };
    if w.in_flight().await != 0 {
        seen.settled = Some("a request is still in flight".into());
    }
    compare(expect, &seen)
}

/// The request: any question, for the metered tenant; a JSON answer where the recording was one.
fn request(expect: &Expect) -> ChatRequest {
    let format = expect.json_answer.then(|| ResponseFormat::JsonSchema {
        name: "json".into(),
        schema: serde_json::json!({"type": "object"}),
        strict: false,
    });
    ChatRequest {
        tenant: Some("acme".into()),
        response_format: format,
        ..ChatRequest::new("Hi")
    }
}

async fn whole(w: &World, req: ChatRequest) -> Seen {
    match w.router.chat(req).await {
        Ok(answer) => {
            let receipt = answer.receipt;
            Seen {
                text: answer.content,
                calls: answer.tool_calls,
                refusal: receipt.refusal.clone(),
                settled: charged(w, usd_to_micros(receipt.cost_usd), "its cost").await,
                end: Some(Ok((receipt.finish_reason, receipt.usage))),
            }
        }
        Err(err) => Seen {
            end: Some(Err(err.class())),
            ..Seen::default()
        },
    }
}

async fn streamed(w: &World, req: ChatRequest) -> Seen {
    let mut stream = match w.router.chat_stream(req).await {
        Ok(stream) => stream,
        Err(err) => {
            return Seen {
                end: Some(Err(err.class())),
                ..Seen::default()
            };
        }
    };
    // Open, the request holds its estimate.
    let estimate = spender_spent(w).await;
    let mut seen = Seen::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ChatChunk::Delta(text)) => seen.text.push_str(&text),
            Ok(ChatChunk::ToolCallDelta(_) | ChatChunk::Thinking(_) | ChatChunk::Thoughts(_)) => {}
            Ok(ChatChunk::ToolCalls(calls)) => seen.calls = calls,
            Ok(ChatChunk::Done(receipt)) => {
                seen.refusal = receipt.refusal.clone();
                seen.settled = charged(w, usd_to_micros(receipt.cost_usd), "its cost").await;
                seen.end = Some(Ok((receipt.finish_reason, receipt.usage)));
            }
            Err(err) => {
                // Broken after output: the estimate stays charged, not a partial count.
                seen.settled = charged(w, estimate, "the estimate").await;
                seen.end = Some(Err(err.class()));
            }
        }
    }
    seen
}

/// What the tenant was charged, if it is not `micros` (`what` names it).
async fn charged(w: &World, micros: u64, what: &str) -> Option<String> {
    let spent = spender_spent(w).await;
    (spent != micros).then(|| format!("charged {spent} micro-USD, not {what} ({micros})"))
}

/// Where `seen` differs from `expect`.
fn compare(expect: &Expect, seen: &Seen) -> Vec<String> {
    let mut diffs = Vec::new();
    if let Some(diff) = text_differs(expect.text, &seen.text) {
        diffs.push(diff);
    }
    diffs.extend(calls_differ(expect.calls, &seen.calls));
    if expect.refusal != seen.refusal.as_deref() {
        diffs.push(format!(
            "refusal {:?}, expected {:?}",
            seen.refusal, expect.refusal
        ));
    }
    diffs.extend(end_differs(expect.outcome, seen.end.as_ref()));
    diffs.extend(seen.settled.clone());
    diffs
}

fn text_differs(expect: Text, text: &str) -> Option<String> {
    let ok = match expect {
        Text::Starts(start, chars) => text.starts_with(start) && text.chars().count() == chars,
        Text::Json(pointer, value) => serde_json::from_str::<Value>(text).is_ok_and(|v| {
            v.pointer(pointer) == serde_json::from_str::<Value>(value).ok().as_ref()
        }),
    };
    let shown: String = text.chars().take(60).collect();
    let chars = text.chars().count();
    (!ok).then(|| format!("text {shown:?} ({chars} chars), expected {expect:?}"))
}

/// Names and arguments (as JSON, or as a start when the expected arguments are not JSON), and
/// an id for each call, no two alike.
fn calls_differ(expect: &[(&str, &str)], calls: &[ToolCall]) -> Option<String> {
    let json = |s: &str| serde_json::from_str::<Value>(s).ok();
    let same = |(name, args): &(&str, &str), call: &ToolCall| {
        let args_match = match json(args) {
            Some(want) => json(&call.arguments) == Some(want),
            None => call.arguments.starts_with(args),
        };
        call.name == *name && args_match && !call.id.is_empty()
    };
    let distinct = calls
        .iter()
        .enumerate()
        .all(|(i, c)| calls[..i].iter().all(|d| d.id != c.id));
    let ok = expect.len() == calls.len() && expect.iter().zip(calls).all(|(e, c)| same(e, c));
    let shown: Vec<String> = calls
        .iter()
        .map(|c| format!("{}#{}({})", c.name, c.id, c.arguments))
        .collect();
    (!ok || !distinct).then(|| format!("tool calls {shown:?}, expected {expect:?}"))
}

fn end_differs(
    expect: Outcome,
    end: Option<&Result<(Option<FinishReason>, Usage), &'static str>>,
) -> Option<String> {
    let ok = match (expect, end) {
        (Outcome::Answer(finish, usage), Some(Ok((got, counts)))) => {
            got.as_ref().map(FinishReason::as_str) == Some(finish) && usage_matches(usage, counts)
        }
        (Outcome::Fails(class), Some(Err(got))) => class == *got,
        _ => false,
    };
    (!ok).then(|| format!("ended {end:?}, expected {expect:?}"))
}

/// The reported counts exactly; none reported: the estimate's output, nothing cached or
/// reasoning.
fn usage_matches(expect: Option<[u64; 4]>, usage: &Usage) -> bool {
    let got = [
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_prompt_tokens,
        usage.reasoning_tokens,
    ];
    match expect {
        Some(counts) => got == counts,
        None => got[1..] == [ESTIMATED_OUTPUT, 0, 0],
    }
}

/// The recorded bytes; a stream ends with a blank line, as a provider ends every event (four
/// stored streams lack it).
fn body_of(path: &Path, stream: bool) -> Vec<u8> {
    let mut body = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if stream {
        let newline: &[u8] = if body.windows(2).any(|w| w == b"\r\n") {
            b"\r\n"
        } else {
            b"\n"
        };
        while !body.ends_with(&[newline, newline].concat()) {
            body.extend_from_slice(newline);
        }
    }
    body
}
