//! Each adapter through the router, whole and streamed: the request on the wire, the answer,
//! usage, cost, and the ledger settled with the provider's usage.

use futures_util::StreamExt;
use router_sdk::{ChatChunk, ChatRequest, FinishReason, Usage};
use serde_json::json;
use wiremock::Mock;
use wiremock::matchers::{body_partial_json, header, method, path, query_param_is_missing};

use crate::support::*;

async fn collect(world: &World) -> (String, Option<router_sdk::Receipt>) {
    let mut stream = world
        .router
        .chat_stream(ChatRequest::new("Hello"))
        .await
        .unwrap();
    let (mut text, mut done) = (String::new(), None);
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ChatChunk::Delta(t) => text.push_str(&t),
            ChatChunk::Done(summary) => done = Some(summary),
            ChatChunk::ToolCallDelta(_) | ChatChunk::ToolCalls(_) => {}
            ChatChunk::Thinking(_) | ChatChunk::Thoughts(_) => {}
        }
    }
    (text, done)
}

#[tokio::test]
async fn openai_chat_returns_content_usage_and_cost_and_settles() {
    let w = World::new(&[Upstream::openai("oa", (2.0, 8.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(header(
            "authorization",
            format!("Bearer {}", planted_key("oa")).as_str(),
        ))
        .and(body_partial_json(
            json!({"model": "gpt-test", "messages": [{"role": "user", "content": "Hello"}]}),
        ))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.content, "Hello! How can I help you today?");
    assert_eq!(answer.receipt.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        answer.receipt.usage,
        Usage {
            cached_prompt_tokens: 1024,
            ..Usage::new(1117, 46)
        }
    );
    assert!((answer.receipt.cost_usd - (1117.0 * 2.0 + 46.0 * 8.0) / 1e6).abs() < 1e-12);
    assert_eq!(
        (
            answer.receipt.provider.as_str(),
            answer.receipt.model.as_str()
        ),
        ("oa", "gpt-test")
    );
    // An OpenAI-compatible limiter counts at arrival and never gives back: the window keeps
    // the larger of the reported prompt (1117) and the estimate, plus the model's output cap
    // (`defaults.max_output_tokens`, 4096: the request set no max_tokens) over the 46 used.
    let snap = w.snapshot("gpt-test").await;
    assert_eq!(
        (snap.usage.requests, snap.usage.tokens, snap.usage.in_flight),
        (1, 1117 + 4096, 0)
    );
}

#[tokio::test]
async fn anthropic_chat_sends_its_headers_and_counts_cache_tokens_as_prompt_but_not_as_its_limiter_does()
 {
    let w = World::new(&[Upstream::anthropic("an", (3.0, 15.0))]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(header("x-api-key", planted_key("an").as_str()))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(ok_json("anthropic/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(answer.content, "Hi! My name is Claude.");
    assert_eq!(
        answer.receipt.usage,
        Usage {
            cached_prompt_tokens: 1800,
            cache_write_tokens: 188,
            ..Usage::new(21 + 188 + 1800, 393)
        }
    );
    // Anthropic's limiter leaves the 1800 cache reads out: the window keeps the 21 uncached
    // and the 188 written to the cache, and the output.
    assert_eq!(w.snapshot("claude-test").await.usage.tokens, 209 + 393);
}

#[tokio::test]
async fn gemini_chat_keeps_the_key_out_of_the_url_and_bills_thoughts_as_output() {
    let w = World::new(&[Upstream::gemini("ge", (0.3, 2.5))]).await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-test:generateContent"))
        .and(header("x-goog-api-key", planted_key("ge").as_str()))
        .and(query_param_is_missing("key"))
        .respond_with(ok_json("gemini/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let answer = w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    assert_eq!(
        answer.content,
        "AI learns patterns from data to make predictions."
    );
    assert_eq!(
        answer.receipt.usage,
        Usage {
            reasoning_tokens: 1024,
            ..Usage::new(8, 10 + 1024)
        }
    );
}

#[tokio::test]
async fn openai_stream_asks_for_usage_and_ends_with_it() {
    let w = World::new(&[Upstream::openai("oa", (2.0, 8.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(body_partial_json(
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ))
        .respond_with(ok_sse("openai/stream.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let (text, done) = collect(&w).await;
    assert_eq!(text, "Hello!");
    let done = done.expect("a Done item");
    assert_eq!(done.usage, Usage::new(9, 3));
    assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    assert!((done.cost_usd - (9.0 * 2.0 + 3.0 * 8.0) / 1e6).abs() < 1e-12);
    // Counted at arrival: the 9 reported prompt tokens and the 4096 output cap.
    let snap = w.snapshot("gpt-test").await;
    assert_eq!((snap.usage.tokens, snap.usage.in_flight), (9 + 4096, 0));
}

#[tokio::test]
async fn anthropic_stream_assigns_cumulative_usage() {
    let w = World::new(&[Upstream::anthropic("an", (3.0, 15.0))]).await;
    Mock::given(method("POST"))
        .and(path(ANTHROPIC_PATH))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ok_sse("anthropic/stream.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let (text, done) = collect(&w).await;
    assert_eq!(text, "Hello!");
    // message_start: input 25 + cache 10 + 100; message_delta output 15 replaces the 1.
    assert_eq!(
        done.expect("Done").usage,
        Usage {
            cached_prompt_tokens: 100,
            cache_write_tokens: 10,
            ..Usage::new(135, 15)
        }
    );
    // The window keeps what Anthropic's limiter counts: the 100 cache reads left out.
    assert_eq!(w.snapshot("claude-test").await.usage.tokens, 35 + 15);
}

#[tokio::test]
async fn gemini_stream_takes_the_last_cumulative_usage() {
    let w = World::new(&[Upstream::gemini("ge", (0.3, 2.5))]).await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-test:streamGenerateContent"))
        .and(wiremock::matchers::query_param("alt", "sse"))
        .and(query_param_is_missing("key"))
        .respond_with(ok_sse("gemini/stream.sse"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let (text, done) = collect(&w).await;
    assert_eq!(text, "The sky is blue.");
    assert_eq!(
        done.expect("Done").usage,
        Usage {
            reasoning_tokens: 28,
            ..Usage::new(9, 5 + 28)
        }
    );
    assert_eq!(w.in_flight().await, 0);
}

#[tokio::test]
async fn provider_rate_limit_headers_are_ground_truth_for_the_ledger() {
    let w = World::new(&[Upstream::openai("oa", (2.0, 8.0))]).await;
    // We allow 1000 rpm; the provider says only 3 requests remain until it resets in 6m0s.
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(
            ok_json("openai/ok.json")
                .insert_header("x-ratelimit-limit-requests", "1000")
                .insert_header("x-ratelimit-remaining-requests", "3")
                .insert_header("x-ratelimit-reset-requests", "6m0s"),
        )
        .mount(&w.servers[0])
        .await;
    w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    // 1 admitted + 996 counted so that exactly 3 remain, as the provider says.
    assert_eq!(w.snapshot("gpt-test").await.usage.requests, 997);
    for _ in 0..3 {
        w.router.chat(ChatRequest::new("Hello")).await.unwrap();
    }
    let req = ChatRequest {
        deadline: Some(std::time::Duration::from_secs(5)),
        ..ChatRequest::new("Hello")
    };
    assert!(matches!(
        w.router.chat(req).await,
        Err(router_sdk::Error::NoCapacity { .. })
    ));
}

#[tokio::test]
async fn extra_headers_reach_the_provider_and_never_show_their_values() {
    let w = World::new(&[Upstream::openai("oa", (2.0, 8.0))]).await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(header("x-trace-id", "trace-7"))
        .and(header(
            "authorization",
            format!("Bearer {}", planted_key("oa")).as_str(),
        ))
        .respond_with(ok_json("openai/ok.json"))
        .expect(1)
        .mount(&w.servers[0])
        .await;
    let req = ChatRequest {
        headers: vec![("x-trace-id".into(), "trace-7".into())],
        ..ChatRequest::new("Hello")
    };
    assert!(!format!("{req:?}").contains("trace-7"), "{req:?}");
    w.router.chat(req).await.unwrap();
    // A header that would carry the key is refused before anything is sent, naming it.
    let bad = ChatRequest {
        headers: vec![("Authorization".into(), "Bearer sk-other".into())],
        ..ChatRequest::new("Hello")
    };
    let err = w.router.chat(bad).await.unwrap_err().to_string();
    assert!(
        err.contains("`Authorization`") && !err.contains("sk-other"),
        "{err}"
    );
}
