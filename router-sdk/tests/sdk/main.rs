//! Router tests against wiremock upstreams speaking each provider's documented wire format.
#![allow(missing_docs, unreachable_pub, clippy::unwrap_used)]

mod adapters;
mod chaos;
mod check;
mod embeddings;
mod failover;
mod faults;
mod features;
mod features_anthropic;
mod features_gemini;
mod features_openai;
mod lines;
mod prices;
mod prompt_cache;
mod replay;
mod secrets;
mod settle_queue;
mod settlement;
mod shared_redis;
mod support;
mod tenant_leases;
mod tenants;
mod traces;
mod upstreams;
mod usage;
mod wire_fixtures;
mod wire_fixtures_expected;
