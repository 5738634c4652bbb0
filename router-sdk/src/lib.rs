//! llmroute SDK.

pub mod secret;
pub mod types;
pub(crate) mod wire;
