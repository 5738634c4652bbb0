//! Runtime API keys: created, changed, rotated and revoked while gateways run, kept in the
//! shared state store so that every instance sees each change.
//!
//! A [`KeyStore`] holds [`KeyRecord`]s (the SHA-256 of each secret, never the secret) and a
//! version that every change raises. Instances poll the version and reload the keys when it
//! moves. A change is stored only over the revision it read ([`KeyStore::put`]), so two admins
//! changing one key at once cannot lose either change: the second is told to read again.
//!
//! Three stores, as for the ledger: Redis ([`RedisKeys`], across machines), an SQLite file
//! ([`SqliteKeys`], the processes of one machine) and memory ([`MemoryKeys`], one process).

mod limits;
mod memory;
mod record;
mod redis;
mod sqlite;

use futures_util::future::BoxFuture;

pub use limits::KeyLimits;
pub use memory::MemoryKeys;
pub use record::{KeyRecord, KeySecret, KeyState, new_key_id};
pub use redis::RedisKeys;
pub use sqlite::SqliteKeys;

/// What a key store's call returns.
pub type KeyFuture<'a, T> = BoxFuture<'a, Result<T, KeyStoreError>>;

/// Every key of a store, and the version they are at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Raised by each change; 0 for a store never written.
    pub version: u64,
    /// The keys, by id.
    pub records: Vec<KeyRecord>,
}

/// Why a key store's call failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyStoreError {
    /// The key changed (or appeared, or is gone) since it was read: read it again.
    #[error("key `{id}` changed since it was read; read it again and retry")]
    Conflict {
        /// The key's id.
        id: String,
    },
    /// Redis failed or did not answer.
    #[error("the key store at {url} failed: {source}")]
    Redis {
        /// The URL, password removed.
        url: String,
        /// What failed.
        source: ::redis::RedisError,
    },
    /// The SQLite file failed.
    #[error("the key store {path} failed: {why}")]
    Sqlite {
        /// The file.
        path: String,
        /// What failed.
        why: String,
    },
    /// A stored key is not a key record (written by something else).
    #[error("the stored key `{id}` cannot be read ({why}); revoke it and create a new one")]
    Corrupt {
        /// The key's id.
        id: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Where runtime keys are kept.
pub trait KeyStore: Send + Sync + std::fmt::Debug {
    /// The version: raised by every change.
    fn version(&self) -> KeyFuture<'_, u64>;

    /// Every key, with the version they are at.
    fn all(&self) -> KeyFuture<'_, Listing>;

    /// Stores `record` if the stored key's revision is `read` (`None`: no key has its id yet),
    /// and raises the version; else [`KeyStoreError::Conflict`]. The record's `rev` must be one
    /// above `read` (0 for a new key).
    fn put<'a>(&'a self, record: &'a KeyRecord, read: Option<u64>) -> KeyFuture<'a, ()>;
}

/// The key `id` of `store`, if any.
pub async fn find(store: &dyn KeyStore, id: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
    let listing = store.all().await?;
    Ok(listing.records.into_iter().find(|r| r.id == id))
}

/// Reads the key `id`, changes it with `change` and stores it over the revision read, reading
/// again when another change came first. `Ok(None)`: no such key. `change` returning `Err`
/// stores nothing and hands the error back.
pub async fn update<E>(
    store: &dyn KeyStore,
    id: &str,
    mut change: impl FnMut(&mut KeyRecord) -> Result<(), E>,
) -> Result<Option<Result<KeyRecord, E>>, KeyStoreError> {
    const TRIES: usize = 8;
    let mut last = None;
    for _ in 0..TRIES {
        let Some(mut record) = find(store, id).await? else {
            return Ok(None);
        };
        let read = record.rev;
        if let Err(e) = change(&mut record) {
            return Ok(Some(Err(e)));
        }
        record.rev = read + 1;
        match store.put(&record, Some(read)).await {
            Ok(()) => return Ok(Some(Ok(record))),
            Err(e @ KeyStoreError::Conflict { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(KeyStoreError::Conflict { id: id.to_owned() }))
}

/// The record as stored: JSON.
fn encode(record: &KeyRecord) -> String {
    serde_json::to_string(record).expect("a key record is plain data")
}

/// A stored record.
fn decode(id: &str, text: &str) -> Result<KeyRecord, KeyStoreError> {
    serde_json::from_str(text).map_err(|e| KeyStoreError::Corrupt {
        id: id.to_owned(),
        why: e.to_string(),
    })
}
