//! Where runtime API keys live: beside the ledger the driver chose. Redis keeps them for every
//! instance of the namespace, the embedded store in `keys.sqlite` next to the ledger file (for
//! the processes of one machine), memory for one process.

use std::sync::Arc;
use std::time::Duration;

use router_core::config::Registry;
use router_core::keys::{KeyStore, KeyStoreError, MemoryKeys, RedisKeys, SqliteKeys};

use crate::store::LedgerChoice;

/// The key file's name, in the embedded ledger's directory.
pub const KEYS_FILE: &str = "keys.sqlite";

/// How long one call to a Redis key store may take: key changes and the instances' polls are
/// off the request path, so they wait longer than the ledger's calls.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Opens the key store beside `choice`, in `registry`'s namespace. Redis is reached on the
/// first call, each call bounded by [`TIMEOUT`].
pub async fn open(
    choice: &LedgerChoice,
    registry: &Registry,
) -> Result<Arc<dyn KeyStore>, KeyStoreError> {
    Ok(match choice {
        LedgerChoice::Redis { url, .. } => {
            Arc::new(RedisKeys::connect(url, &registry.namespace, TIMEOUT).await?)
        }
        LedgerChoice::Embedded { path, .. } => {
            Arc::new(SqliteKeys::open(&path.with_file_name(KEYS_FILE))?)
        }
        LedgerChoice::Memory => Arc::new(MemoryKeys::default()),
    })
}

/// Where `choice`'s keys are, for output: `redis ...`, the file, or `memory`.
pub fn describe(choice: &LedgerChoice) -> String {
    match choice {
        LedgerChoice::Embedded { path, .. } => {
            format!("embedded {}", path.with_file_name(KEYS_FILE).display())
        }
        other => other.describe(),
    }
}
