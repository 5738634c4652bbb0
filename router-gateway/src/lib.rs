//! llmroute's gateway: an OpenAI-compatible HTTP endpoint over a [`Router`], for every language
//! and every tool built on the OpenAI SDKs.
//!
//! [`app`] builds the service (`axum`), [`serve`] runs it until a shutdown signal and lets
//! requests in flight finish. Each request is authenticated by an API key from `gateway.keys`
//! (stored as SHA-256 hashes), which names its tenant: that tenant's tier (limits, budget)
//! applies, and the key may pin a priority and a set of models.
//!
//! - `POST /v1/chat/completions`: OpenAI's request and answer, whole or streamed (SSE
//!   `chat.completion.chunk`s, `stream_options.include_usage`, `data: [DONE]`), tools, images,
//!   JSON output; `model` is any configured model, alias or routed alias.
//! - `POST /v1/embeddings`: OpenAI's embeddings request and answer (`encoding_format` `float` or
//!   `base64`), routed to the cheapest embedding model with room.
//! - `GET /v1/models`: the models, aliases and routed aliases the key may use.
//! - `GET /v1/quota`: what `llmroute quota --tenant <caller> --json` shows, for the caller.
//! - `GET /v1/usage?since=24h&until=..&by=day,model&model=..`: what `llmroute usage --json`
//!   shows, over the caller's own records only.
//! - `GET /healthz`: the process is up. `GET /readyz`: the ledger answers.

mod app;
mod auth;
mod body;
mod calls;
mod cut;
mod errors;
mod inbound;
mod ingress;
pub mod keyring;
mod keys;
mod lifecycle;
mod metrics;
mod outbound;
mod ratelimit;
mod reload;
mod routes;
mod serve;
mod telemetry;

pub use app::{Apps, Reload, app, apps, apps_reloading};
pub use auth::{Access, hash_key, new_key};
pub use cut::Cut;
pub use keys::{KEYS_POLL, KeysSeen};
pub use lifecycle::{CUT_GRACE, Listeners, Reloading, run};
pub use reload::Rebuild;
pub use serve::{HEADER_READ_TIMEOUT, serve};

/// How the gateway admits callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Every request needs a key of `gateway.keys`.
    Keys,
    /// No key needed (and none read): requests have no tenant. Only for a loopback address.
    None,
}

#[cfg(test)]
mod tests;
