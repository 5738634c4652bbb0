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
#![forbid(unsafe_code)]

mod chat;
mod drive;
mod error;
mod guard;
mod renewals;
mod request;
mod router;
pub mod secret;
mod settler;
pub mod store;
mod stream;
pub mod time;
mod transport;
pub mod types;
pub(crate) mod wire;

pub use error::Error;
pub use router::{Preview, Router, RouterBuilder};
pub use secret::{ApiKey, EnvKeys, KeySource, StaticKeys};
pub use stream::ChatStream;
pub use types::{
    Attempt, AttemptOutcome, ChatChunk, ChatRequest, ChatResponse, Effort, Features, FinishReason,
    Image, Message, Part, Priority, Reasoning, Receipt, ResponseFormat, Role, Tool, ToolCall,
    ToolCallAssembly, ToolCallDelta, ToolChoice, Usage,
};
pub use wire::classify::FailureClass;
