//! llmroute SDK: send each chat request to the cheapest provider with room for it, within every
//! provider's limits, shared by every instance.
//!
//! # The model
//!
//! A [`Router`] holds the validated configuration (deployments: one model at one provider, each
//! with a price and limits), a shared limits ledger and an HTTP client. For each request it:
//!
//! 1. **estimates**, per deployment, what its provider's limiter will count (a prompt estimate
//!    from the characters, calibrated by the provider's reports, plus `max_tokens`) and what the
//!    request will cost (the same prompt plus the expected completion from recent history), and
//!    ranks the deployments serving the requested model or alias by that cost;
//! 2. **admits** it through the ledger, in one atomic step, on the cheapest deployment whose
//!    RPM, TPM, ITPM / OTPM, concurrency and cooldown all have room for what its limiter will
//!    count (waiting, up to the request's deadline, when none has);
//! 3. **calls** the provider (OpenAI-compatible, Anthropic or Gemini wire format);
//! 4. **settles** with the usage the provider reported, counted as its limiter counts it, on
//!    every path: success, provider error, timeout, broken stream, and a dropped future or
//!    stream (with Redis, after the caller has its answer: see [`Router::drain`]);
//! 5. on failure, **classifies** before acting: rate limits, overloads, server errors and
//!    timeouts put a shared cooldown on that deployment (the provider's stated wait wins) and
//!    fail over to the next-cheapest at once; billing failures cool down for at least an hour;
//!    other 4xx are returned at once.
//!
//! # Example
//!
//! ```no_run
//! use router_sdk::{ChatRequest, Router};
//!
//! # async fn run() -> Result<(), router_sdk::Error> {
//! let router = Router::from_path("providers.yaml").await?;
//! let answer = router.chat(ChatRequest::new("Say hello in French.")).await?;
//! let how = &answer.receipt;
//! println!("{} (from {}/{}, ${:.6})", answer.content, how.provider, how.model, how.cost_usd);
//! # Ok(())
//! # }
//! ```
//!
//! Without a network, [`Router::preview`] shows what a request would be offered to, cheapest
//! first for *this* request's size (this example runs as a test):
//!
//! ```
//! use std::sync::Arc;
//!
//! use router_core::config::Registry;
//! use router_sdk::{ChatRequest, Router, StaticKeys};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let yaml = r#"
//! defaults: { model: chat }
//! providers:
//!   - name: deepseek
//!     api: openai
//!     base_url: https://api.deepseek.com/v1
//!     api_key_env: DEEPSEEK_API_KEY
//!     models:
//!       - { name: deepseek-chat, aliases: [chat], price: { input: 0.28, output: 0.42 } }
//!   - name: anthropic
//!     api: anthropic
//!     base_url: https://api.anthropic.com
//!     api_key_env: ANTHROPIC_API_KEY
//!     models:
//!       - { name: claude-haiku-4-5, aliases: [chat], price: { input: 1.0, output: 5.0 } }
//! "#;
//! let registry = Registry::from_yaml_str(yaml, "example.yaml")?;
//! let keys = StaticKeys::new().with("DEEPSEEK_API_KEY", "sk-1").with("ANTHROPIC_API_KEY", "sk-2");
//! let router = Router::builder(registry).keys(Arc::new(keys)).build().await?;
//! let preview = router.preview(&ChatRequest::new("Why is the sky blue?"))?;
//! let order: Vec<&str> = preview.candidates.iter().map(|(p, _, _)| p.as_str()).collect();
//! assert_eq!(order, ["deepseek", "anthropic"]);
//! # Ok(())
//! # }
//! ```
//!
//! # Tools
//!
//! A request carries tool definitions; the answer carries the model's calls (whole, or streamed
//! as [`ChatChunk::ToolCallDelta`]s and then the assembled [`ChatChunk::ToolCalls`]). Send the
//! calls back with their results and the model answers. The same request works on every wire
//! format, and goes only to models with the `tools` capability. This example runs as a test,
//! against a mock OpenAI-compatible server:
//!
//! ```
//! use std::sync::Arc;
//!
//! use router_core::config::Registry;
//! use router_sdk::{ChatRequest, FinishReason, Message, Router, StaticKeys, Tool};
//! use serde_json::json;
//! # use wiremock::{Mock, MockServer, ResponseTemplate, matchers::body_string_contains};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = MockServer::start().await;
//! # let call = json!({"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
//! #     "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
//! #     "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
//! #     "usage": {"prompt_tokens": 60, "completion_tokens": 15}});
//! # let answer = json!({"id": "chatcmpl-2", "choices": [{"index": 0, "finish_reason": "stop",
//! #     "message": {"role": "assistant", "content": "It is 18 °C in Paris."}}],
//! #     "usage": {"prompt_tokens": 90, "completion_tokens": 9}});
//! # Mock::given(body_string_contains("tool_call_id")).respond_with(ResponseTemplate::new(200)
//! #     .set_body_json(answer)).expect(1).mount(&server).await;
//! # Mock::given(wiremock::matchers::any()).respond_with(ResponseTemplate::new(200)
//! #     .set_body_json(call)).expect(1).mount(&server).await;
//! # let base_url = format!("{}/v1", server.uri());
//! let yaml = format!(r#"
//! providers:
//!   - name: openai
//!     api: openai
//!     base_url: {base_url}
//!     api_key_env: OPENAI_API_KEY
//!     models:
//!       - {{ name: gpt-4o-mini, price: {{ input: 0.15, output: 0.6, cached_input: 0.075 }} }}
//! "#);
//! let registry = Registry::from_yaml_str(&yaml, "example.yaml")?;
//! let keys = StaticKeys::new().with("OPENAI_API_KEY", "sk-example");
//! let router = Router::builder(registry).keys(Arc::new(keys)).build().await?;
//!
//! let weather = Tool {
//!     name: "get_weather".into(),
//!     description: Some("The current weather in a city".into()),
//!     parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
//!                        "required": ["city"]}),
//!     strict: false,
//! };
//! let mut req = ChatRequest {
//!     model: Some("gpt-4o-mini".into()),
//!     tools: vec![weather],
//!     ..ChatRequest::new("What is the weather in Paris?")
//! };
//! let first = router.chat(req.clone()).await?;
//! assert_eq!(first.receipt.finish_reason, Some(FinishReason::ToolCalls));
//! let call = &first.tool_calls[0];
//! let args: serde_json::Value = serde_json::from_str(&call.arguments)?;
//! assert_eq!((call.name.as_str(), &args["city"]), ("get_weather", &json!("Paris")));
//!
//! // Run the tool, then send the call and its result back.
//! req.messages.push(Message::assistant_calls(first.content, first.tool_calls.clone()));
//! req.messages.push(Message::tool_result(&call.id, r#"{"celsius": 18}"#));
//! let second = router.chat(req).await?;
//! assert_eq!(second.content, "It is 18 °C in Paris.");
//! # Ok(())
//! # }
//! ```
//!
//! # Embeddings
//!
//! [`Router::embed`] sends an [`EmbedRequest`] (texts, or token ids) to the cheapest embedding
//! model (`kind: embedding` in the configuration) with room, through the same flow: the same
//! limits (its estimated input reserved, no output), failover, tenant budgets, settlement and
//! usage record. Chats never go to embedding models, nor embeddings to chat models. The answer
//! holds one `f32` vector per input, in input order, and a [`Receipt`]. This example runs as a
//! test, against a mock OpenAI-compatible server:
//!
//! ```
//! use std::sync::Arc;
//!
//! use router_core::config::Registry;
//! use router_sdk::{EmbedRequest, Router, StaticKeys};
//! # use serde_json::json;
//! # use wiremock::{Mock, MockServer, ResponseTemplate, matchers::path};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = MockServer::start().await;
//! # let answer = json!({"object": "list", "model": "text-embedding-3-small",
//! #     "data": [{"object": "embedding", "index": 0, "embedding": [0.0023064255, -0.009327292]},
//! #              {"object": "embedding", "index": 1, "embedding": [0.015797347, 0.5]}],
//! #     "usage": {"prompt_tokens": 8, "total_tokens": 8}});
//! # Mock::given(path("/v1/embeddings")).respond_with(ResponseTemplate::new(200)
//! #     .set_body_json(answer)).expect(1).mount(&server).await;
//! # let base_url = format!("{}/v1", server.uri());
//! let yaml = format!(r#"
//! providers:
//!   - name: openai
//!     api: openai
//!     base_url: {base_url}
//!     api_key_env: OPENAI_API_KEY
//!     models:
//!       - {{ name: text-embedding-3-small, kind: embedding, price: {{ input: 0.02 }} }}
//! "#);
//! let registry = Registry::from_yaml_str(&yaml, "example.yaml")?;
//! let keys = StaticKeys::new().with("OPENAI_API_KEY", "sk-example");
//! let router = Router::builder(registry).keys(Arc::new(keys)).build().await?;
//!
//! let req = EmbedRequest {
//!     model: Some("text-embedding-3-small".into()),
//!     ..EmbedRequest::new(["The food was delicious.", "Waiter, the soup!"])
//! };
//! let answer = router.embed(req).await?;
//! assert_eq!(answer.embeddings.len(), 2);
//! assert_eq!(answer.embeddings[0], [0.0023064255, -0.009327292]);
//! assert_eq!(answer.receipt.usage.prompt_tokens, 8);
//! assert_eq!(router_sdk::base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod account;
mod asked;
mod chat;
mod check;
mod count;
mod drive;
mod embed;
pub mod embedding;
mod error;
mod guard;
mod line;
mod renewals;
mod request;
mod router;
pub mod secret;
mod settler;
mod stream;
pub mod thinking;
pub mod time;
pub mod trace;
mod transport;
pub mod types;
pub(crate) mod wire;

pub use check::{CheckOutcome, DeploymentCheck};
pub use count::{CountedBy, TokenCount};
pub use embedding::{EmbedInput, EmbedRequest, EmbedResponse, base64_f32};
pub use error::{Break, Error};
pub use request::is_request_id;
pub use router::{Preview, Router, RouterBuilder};
pub use secret::{ApiKey, EnvKeys, KeySource, MASKED_RUN, Masker, StaticKeys};
pub use stream::ChatStream;
pub use thinking::{ThinkingDelta, Thought, ThoughtAssembly};
pub use types::{
    Attempt, AttemptOutcome, ChatChunk, ChatRequest, ChatResponse, Effort, Features, FinishReason,
    Image, ImageDetail, Message, Part, Priority, Reasoning, Receipt, ResponseFormat, Role, Tool,
    ToolCall, ToolCallAssembly, ToolCallDelta, ToolChoice, Usage,
};
pub use wire::classify::FailureClass;
pub use wire::is_header_name;
