//! llmroute's cross-crate integration tests: one binary, one module per area.
#![allow(unreachable_pub, missing_docs, clippy::unwrap_used)]

/// Instantiates async test functions `fn(Store)` once per store: memory, Redis, SQLite, and
/// Redis on a three-primary Redis Cluster.
macro_rules! every_store {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $( #[tokio::test] async fn $name() { super::$name(super::Store::Memory).await } )*
        }
        mod redis {
            $( #[tokio::test] async fn $name() { super::$name(super::Store::Redis).await } )*
        }
        mod sqlite {
            $( #[tokio::test] async fn $name() { super::$name(super::Store::Sqlite).await } )*
        }
        mod cluster {
            $( #[tokio::test] async fn $name() { super::$name(super::Store::Cluster).await } )*
        }
    };
}

mod cluster;
mod conformance;
mod contention;
mod day_limits;
mod differential;
mod input_output;
mod key_accounts;
mod keys;
mod lifecycle;
mod lines;
mod redis_keys;
mod redis_retry;
mod resilient;
mod sqlite;
mod support;
mod tenant_leases;
mod tenants;
