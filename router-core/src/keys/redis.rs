//! Runtime keys in Redis, beside the ledger's keys: `llmroute:{namespace}:keys:records` (a hash
//! of id to the record's JSON) and `llmroute:{namespace}:keys:version`. Both carry the
//! namespace's hash tag, so on a Redis Cluster each script's keys are on one slot. The scripts
//! are in `lua/keys/`, apart from the ledger's.

use std::sync::LazyLock;
use std::time::Duration;

use futures_util::FutureExt;
use redis::Script;

use super::{KeyFuture, KeyRecord, KeyStore, KeyStoreError, Listing, decode, encode};
use crate::config::redact_url;
use crate::ledger::RedisStoreOptions;
use crate::ledger::redis::conn::Conn;

static PUT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/keys/put.lua")));
static ALL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/keys/all.lua")));
static VERSION: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/keys/version.lua")));

/// Runtime keys in a Redis server or Cluster, shared by every instance of the namespace.
#[derive(Clone)]
pub struct RedisKeys {
    conn: Conn,
    url: String,
    records: String,
    version: String,
}

impl std::fmt::Debug for RedisKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisKeys")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RedisKeys {
    /// The keys of `namespace` at `url`, connected on the first call; each call waits at most
    /// `timeout`.
    pub async fn connect(
        url: &str,
        namespace: &str,
        timeout: Duration,
    ) -> Result<Self, KeyStoreError> {
        let shown = redact_url(url);
        let options = RedisStoreOptions {
            namespace: namespace.to_owned(),
            response_timeout: timeout,
            lazy: true,
            ..RedisStoreOptions::default()
        };
        let conn = Conn::open(url, &options)
            .await
            .map_err(|source| KeyStoreError::Redis {
                url: shown.clone(),
                source,
            })?;
        let prefix = format!("llmroute:{{{namespace}}}:keys");
        Ok(RedisKeys {
            conn,
            url: shown,
            records: format!("{prefix}:records"),
            version: format!("{prefix}:version"),
        })
    }

    fn failed(&self, source: redis::RedisError) -> KeyStoreError {
        KeyStoreError::Redis {
            url: self.url.clone(),
            source,
        }
    }
}

impl KeyStore for RedisKeys {
    fn version(&self) -> KeyFuture<'_, u64> {
        async move {
            let mut call = VERSION.prepare_invoke();
            call.key(&self.version);
            let version: String = self.conn.invoke(&call).await.map_err(|e| self.failed(e))?;
            Ok(version.parse().unwrap_or(0))
        }
        .boxed()
    }

    fn all(&self) -> KeyFuture<'_, Listing> {
        async move {
            let mut call = ALL.prepare_invoke();
            call.key(&self.records).key(&self.version);
            let (version, pairs): (String, Vec<String>) =
                self.conn.invoke(&call).await.map_err(|e| self.failed(e))?;
            let records = pairs
                .chunks_exact(2)
                .map(|pair| decode(&pair[0], &pair[1]))
                .collect::<Result<_, _>>()?;
            Ok(Listing {
                version: version.parse().unwrap_or(0),
                records,
            })
        }
        .boxed()
    }

    fn put<'a>(&'a self, record: &'a KeyRecord, read: Option<u64>) -> KeyFuture<'a, ()> {
        async move {
            let mut call = PUT.prepare_invoke();
            call.key(&self.records)
                .key(&self.version)
                .arg(&record.id)
                .arg(read.map_or_else(String::new, |r| r.to_string()))
                .arg(encode(record));
            let version: i64 = self.conn.invoke(&call).await.map_err(|e| self.failed(e))?;
            if version < 0 {
                return Err(KeyStoreError::Conflict {
                    id: record.id.clone(),
                });
            }
            Ok(())
        }
        .boxed()
    }
}
