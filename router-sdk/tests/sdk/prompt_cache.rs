//! An agent's turns on Anthropic: each reads the last turn's prompt from the provider's cache,
//! and admission expects it, so turns fit an input-token limit that their whole prompts would
//! not.

use std::time::Duration;

use router_sdk::{ChatRequest, Error, Message};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::support::*;

/// 80,000 characters: about 24,000 tokens by Anthropic's starting ratio.
fn system_prompt() -> String {
    "You are a careful agent. ".repeat(3_200)
}

/// Turn `n` of a conversation: the system prompt and `n` questions with their answers but the
/// last, the system prompt and the last question marked for caching when `cached`.
fn turn(n: usize, cached: bool) -> ChatRequest {
    let mark = |m: Message| Message { cache: cached, ..m };
    let mut messages = vec![mark(Message::system(system_prompt()))];
    for i in 1..=n {
        if i > 1 {
            messages.push(Message::assistant(format!("answer {}", i - 1)));
        }
        let question = Message::user(format!("question {i}"));
        messages.push(if i == n { mark(question) } else { question });
    }
    ChatRequest {
        messages,
        max_tokens: Some(100),
        deadline: Some(Duration::from_secs(10)),
        ..ChatRequest::default()
    }
}

/// An Anthropic deployment under a 30,000-token ITPM whose every answer read 20,000 of its
/// 24,000 prompt tokens from the cache.
async fn world() -> World {
    let mut an = Upstream::anthropic("an", (3.0, 15.0));
    an.cached_input = Some(0.3);
    an.limits = "itpm: 30000";
    let w = World::new(&[an]).await;
    let answer = json!({
        "id": "msg_1", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 500, "cache_creation_input_tokens": 3500,
                  "cache_read_input_tokens": 20000, "output_tokens": 10}
    });
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer))
        .mount(&w.servers[0])
        .await;
    w
}

#[tokio::test]
async fn turns_marked_for_caching_reserve_what_itpm_counts_and_fit_where_whole_prompts_do_not() {
    // Unmarked, each turn reserves its whole prompt: the third does not fit the minute.
    let w = world().await;
    for n in 1..=2 {
        w.router.chat(turn(n, false)).await.unwrap();
    }
    let err = w.router.chat(turn(3, false)).await.unwrap_err();
    assert!(matches!(err, Error::NoCapacity { .. }), "{err:?}");

    // Marked, the first turn is cold; each next one expects the last one's cache reads.
    let w = world().await;
    for n in 1..=5 {
        let preview = w.router.preview(&turn(n, true)).unwrap();
        let expected = if n == 1 { 0 } else { 20_000 };
        assert_eq!(preview.cached_tokens, expected, "turn {n}");
        let answer = w.router.chat(turn(n, true)).await.unwrap();
        // Cached tokens cost the cached price; the 3500 written, Anthropic's five-minute
        // write price (1.25 times the input price).
        let want = (500.0 * 3.0 + 3_500.0 * 3.75 + 20_000.0 * 0.3 + 10.0 * 15.0) / 1e6;
        assert!((answer.receipt.cost_usd - want).abs() < 1e-12, "turn {n}");
    }
    assert_eq!(w.in_flight().await, 0);
    // Another conversation (its history differs) expects nothing.
    let mut other = turn(2, true);
    other.messages[1] = Message::user("a different question");
    assert_eq!(w.router.preview(&other).unwrap().cached_tokens, 0);
}
