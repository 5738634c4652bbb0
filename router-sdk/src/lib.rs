//! llmroute SDK.
