//! The smallest real use of llmroute: route one question to the cheapest provider with room.
//!
//! ```sh
//! export DEEPSEEK_API_KEY=...        # any provider of providers.yaml serving `chat`
//! cargo run -p router-sdk --example chat -- "Why is the sky blue?"
//! ```
#![allow(missing_docs)]

use router_sdk::{ChatRequest, Router};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let question = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Say hello in French.".into());
    let config = std::env::var("LLMROUTE_CONFIG").unwrap_or_else(|_| "providers.yaml".into());
    let router = Router::from_path(config).await?;
    let answer = router.chat(ChatRequest::new(question)).await?;
    println!("{}", answer.content);
    eprintln!(
        "-- {}/{}: {} prompt + {} completion tokens, ${:.6}, {} attempt(s)",
        answer.receipt.provider,
        answer.receipt.model,
        answer.receipt.usage.prompt_tokens,
        answer.receipt.usage.completion_tokens,
        answer.receipt.cost_usd,
        answer.receipt.attempts.len()
    );
    Ok(())
}
