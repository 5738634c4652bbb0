//! What estimation costs on a request's path: the prompt's size, and the whole plan (each
//! candidate's two estimates, the ranking and what to reserve) for an 8,000-character prompt
//! over five candidates, and the size of a request with tools and an image. Beside them, the
//! exact tiktoken count kept for `chat -v` and `preview`. And a coding agent's turn of about
//! 30,000 tokens: its size, and the hashes of its prefixes admission looks up in the prompt
//! cache.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use router_core::config::Registry;
use router_core::estimate::{self, Estimator, PromptSize};
use router_core::flow::{Ask, Plan, Priority};
use router_sdk::{ChatRequest, Image, Message, Tool};

const YAML: &str = r#"
providers:
  - name: o
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: O_KEY
    models:
      - { name: m1, aliases: [chat], price: { input: 1, output: 1 }, limits: { tpm: 100000 } }
      - { name: m2, aliases: [chat], price: { input: 2, output: 1 }, limits: { tpm: 100000 } }
  - name: a
    api: anthropic
    base_url: http://127.0.0.1:1
    api_key_env: A_KEY
    models:
      - { name: m3, aliases: [chat], price: { input: 3, output: 1 }, limits: { itpm: 100000 } }
  - name: g
    api: gemini
    base_url: http://127.0.0.1:1/v1beta
    api_key_env: G_KEY
    models:
      - { name: m4, aliases: [chat], price: { input: 4, output: 1 } }
      - { name: m5, aliases: [chat], price: { input: 5, output: 1 } }
"#;

/// About 8,000 characters of English-like text.
fn prompt() -> String {
    let words = [
        "the", "router", "keeps", "every", "instance", "inside", "its", "limits,",
    ];
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 8_000 {
        text.push_str(words[i % words.len()]);
        text.push(' ');
        i += 1;
    }
    text.truncate(8_000);
    text
}

/// A request of `text`, five tool definitions with small JSON schemas and one image: what a
/// tool-calling agent sends.
fn request_with_tools(text: &str) -> ChatRequest {
    let tool = |i: usize| Tool {
        name: format!("tool_{i}"),
        description: Some("Looks something up for the model and returns it as JSON.".into()),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look up"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            "required": ["query"],
        }),
        strict: false,
    };
    let image = Image::Url {
        url: "https://example.test/chart.png".into(),
    };
    ChatRequest {
        messages: vec![Message::user(text).with_image(image)],
        tools: (0..5).map(tool).collect(),
        ..ChatRequest::default()
    }
}

/// A coding agent's turn: a system prompt of 15 times `text`, 12 tools, 20 messages, the
/// system prompt and the last message marked for caching.
fn agent_turn(text: &str) -> ChatRequest {
    let mut req = request_with_tools(text);
    let tools = req.tools.clone();
    req.tools.extend(tools.iter().cloned().map(|mut t| {
        t.name.push_str("_b");
        t
    }));
    req.tools.truncate(12);
    let mut messages = vec![Message {
        cache: true,
        ..Message::system(text.repeat(15))
    }];
    for i in 0..20 {
        let said = format!("turn {i}: {}", &text[..400]);
        messages.push(if i % 2 == 0 {
            Message::user(said)
        } else {
            Message::assistant(said)
        });
    }
    if let Some(last) = messages.last_mut() {
        last.cache = true;
    }
    req.messages = messages;
    req
}

fn estimation(c: &mut Criterion) {
    let registry = Registry::from_yaml_str(YAML, "bench.yaml").unwrap();
    let estimator = Estimator::new(&registry);
    let candidates = registry.resolve("chat");
    let text = prompt();
    let mut g = c.benchmark_group("estimate");
    g.bench_function("prompt_size_8000_chars", |b| {
        b.iter(|| PromptSize::of([black_box(text.as_str())]))
    });
    g.bench_function("plan_8000_chars_5_candidates", |b| {
        b.iter(|| {
            let ask = Ask {
                prompt: PromptSize::of([black_box(text.as_str())]),
                max_tokens: Some(256),
                accounts: Vec::new(),
                priority: Priority::Interactive,
                deadline: Duration::from_secs(60),
                cache_reads: Vec::new(),
                writes_cache: false,
            };
            Plan::new(&registry, &estimator, &candidates, ask, 0)
        })
    });
    let with_tools = request_with_tools(&text);
    g.bench_function("request_size_8000_chars_5_tools_1_image", |b| {
        b.iter(|| black_box(&with_tools).prompt_size())
    });
    // An agent's turn: a 120,000-character system prompt (about 30,000 tokens), 12 tools and
    // 20 messages of history, marked for caching: its size and its prefixes' hashes.
    let turn = agent_turn(&text);
    g.bench_function("agent_turn_120000_chars_size", |b| {
        b.iter(|| black_box(&turn).prompt_size())
    });
    g.bench_function("agent_turn_120000_chars_prefix_hashes", |b| {
        b.iter(|| black_box(&turn).prefix_hashes())
    });
    // Loaded once before timing, as `chat -v` pays it once per process.
    let _ = estimate::count(["warm up"]);
    g.bench_function("tiktoken_o200k_8000_chars", |b| {
        b.iter(|| estimate::count([black_box(text.as_str())]))
    });
    g.finish();
}

criterion_group!(benches, estimation);
criterion_main!(benches);
