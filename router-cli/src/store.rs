//! Which ledger the CLI uses: Redis when a state URL is configured (many machines), else the
//! embedded store on disk, which every `llmroute` process on this machine shares.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use router_core::clock::SystemClock;
use router_core::ledger::{Ledger, RedisStore, RedisStoreOptions, SqliteStore};

use crate::config::Loaded;
use crate::failure::Failure;

/// Environment variable naming the directory of the embedded store.
pub(crate) const STATE_DIR_ENV: &str = "LLMROUTE_STATE_DIR";

/// The embedded store's file: `$LLMROUTE_STATE_DIR/ledger.sqlite`, else the user's state
/// directory (`$XDG_STATE_HOME/llmroute`, `~/.local/state/llmroute`).
pub(crate) fn embedded_path() -> Result<PathBuf, Failure> {
    let dir = match std::env::var_os(STATE_DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => dirs::state_dir()
            .or_else(dirs::data_local_dir)
            .map(|d| d.join("llmroute"))
            .ok_or_else(|| {
                Failure::usage(anyhow!(
                    "no state directory found for the embedded ledger; set {STATE_DIR_ENV}"
                ))
            })?,
    };
    Ok(dir.join("ledger.sqlite"))
}

/// Where the ledger lives, for output.
pub(crate) fn describe(loaded: &Loaded) -> String {
    match (&loaded.registry.state_redacted(), embedded_path()) {
        (Some(url), _) => url.clone(),
        (None, Ok(path)) => format!("embedded {}", path.display()),
        (None, Err(_)) => "embedded (no state directory)".into(),
    }
}

/// Opens the ledger of `loaded`.
pub(crate) async fn open(loaded: &Loaded) -> Result<Arc<dyn Ledger>, Failure> {
    let registry = &loaded.registry;
    match &registry.state {
        Some(url) => {
            let options = RedisStoreOptions {
                namespace: registry.namespace.clone(),
                ..RedisStoreOptions::default()
            };
            let store = RedisStore::connect(url, registry, options)
                .await
                .map_err(|e| {
                    Failure::state(anyhow!(
                        "{e}; start Redis there, or fix --state / REDIS_URL / `state`"
                    ))
                })?;
            Ok(Arc::new(store))
        }
        None => {
            let path = embedded_path()?;
            let store = SqliteStore::open(&path, registry, Arc::new(SystemClock))
                .map_err(Failure::state)?;
            Ok(Arc::new(store))
        }
    }
}
