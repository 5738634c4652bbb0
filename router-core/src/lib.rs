//! llmroute core: configuration, the shared limits ledger and its stores, selection,
//! estimation, the retry policy and the request flow.
//!
//! No HTTP lives here: `router-sdk` adds the provider adapters on top.
//!
//! - [`config`]: `providers.yaml` parsed and validated into a [`config::Registry`].
//! - [`ledger`]: RPM, TPM, ITPM / OTPM, concurrency, cooldowns, tenant limits and budgets, kept
//!   by one algorithm in memory, in an embedded SQLite file, or in Redis through Lua scripts;
//!   every store passes the same conformance suite.
//! - [`select`]: candidates ranked by the estimated cost of a request.
//! - [`estimate`]: prompt tokens (tiktoken) and completion tokens (recent history).
//! - [`flow`]: the request flow, one sans-IO state machine every driver runs.
//! - [`retry`]: what to do after a failure or a refusal; it decides, the router acts.
//! - [`clock`]: time, injected, so tests move it instead of sleeping.
#![forbid(unsafe_code)]

pub mod clock;
pub mod config;
pub mod estimate;
pub mod flow;
pub mod keys;
pub mod ledger;
pub mod prompt_cache;
pub mod retry;
pub mod select;

/// A map keyed by llmroute's own numbers (deployment and provider ids, reservation and block
/// ids), hashed with FxHash (one multiplication per word) rather than SipHash: a request's path
/// looks several of them up. Their keys come from the router, never from users or providers, so
/// they need no defence against chosen collisions; maps keyed by names (tenants, variables) keep
/// the standard hasher.
pub type IdMap<K, V> = rustc_hash::FxHashMap<K, V>;
