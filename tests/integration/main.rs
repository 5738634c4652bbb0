//! llmroute's cross-crate integration tests: one binary, one module per area.
#![allow(unreachable_pub, missing_docs, clippy::unwrap_used)]

mod conformance;
mod contention;
mod redis_keys;
mod sqlite;
mod support;
mod tenants;
