//! Finding and loading the configuration, with the precedence `--help` documents.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use router_core::config::{ConfigError, Registry};
use router_state::store::{Environment, LedgerChoice, LocalStore, StateOverride};

use crate::cli::Global;
use crate::failure::Failure;

/// The configuration file when neither --config nor $LLMROUTE_CONFIG names one.
const DEFAULT_CONFIG: &str = "providers.yaml";

/// A validated configuration, where it came from, and the ledger it selects.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The file that was read.
    pub(crate) path: PathBuf,
    /// The validated configuration, as the file has it.
    pub(crate) registry: Registry,
    /// The ledger in effect: `--state`, else $REDIS_URL, else `state` of the file, else the
    /// embedded store (decided by [`LedgerChoice::resolve`]).
    pub(crate) ledger: LedgerChoice,
}

/// Load the configuration from --config / $LLMROUTE_CONFIG / ./providers.yaml, and choose its
/// ledger (an unusable --state or $REDIS_URL is an error naming it).
pub(crate) fn load(global: &Global) -> Result<Loaded, Failure> {
    let path = global
        .config
        .clone()
        .or_else(config_from_env)
        .unwrap_or_else(default_path);
    let registry = Registry::from_path(&path).map_err(|e| match e {
        ConfigError::Read { ref io, .. } if io.kind() == std::io::ErrorKind::NotFound => Failure::usage(anyhow!(
            "{e}; name the file with --config FILE or LLMROUTE_CONFIG (default ./providers.yaml)"
        )),
        other => Failure::usage(other),
    })?;
    let state_override = global.state.as_ref().map(|url| StateOverride {
        url: url.clone(),
        origin: "--state".to_owned(),
    });
    let ledger = LedgerChoice::resolve(
        &registry,
        state_override.as_ref(),
        LocalStore::Embedded,
        &Environment::process(),
    )
    .map_err(|e| match e {
        // A bad environment value: its message already names it ("REDIS_URL: ...").
        router_state::Error::InvalidRequest(message) => Failure::usage(anyhow!(message)),
        other => Failure::usage(other),
    })?;
    Ok(Loaded {
        path,
        registry,
        ledger,
    })
}

/// `$LLMROUTE_CONFIG`, unless it is unset or empty (as `REDIS_URL` and the other variables:
/// `LLMROUTE_CONFIG= llmroute ...` is the default file).
fn config_from_env() -> Option<PathBuf> {
    std::env::var_os("LLMROUTE_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `./providers.yaml`, else `providers.yaml` in the user's config directory if it exists there.
fn default_path() -> PathBuf {
    let here = PathBuf::from(DEFAULT_CONFIG);
    if here.exists() {
        return here;
    }
    dirs::config_dir()
        .map(|d| d.join("llmroute").join(DEFAULT_CONFIG))
        .filter(|p| p.exists())
        .unwrap_or(here)
}

/// What an API key's environment variable holds, as the router will read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyState {
    /// A key: text, not blank.
    Set,
    /// Nothing: unset, empty or only spaces (the router reads no key from it).
    NotSet,
    /// Bytes that are not valid UTF-8: no key can be read from it.
    NotUtf8,
}

impl KeyState {
    /// How `providers` shows it; never the value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KeyState::Set => "set",
            KeyState::NotSet => "not set",
            KeyState::NotUtf8 => "set, but not valid UTF-8",
        }
    }
}

/// What the environment variable `name` holds, as the router reads it (`EnvKeys`). The value
/// itself is never returned.
pub(crate) fn key_state(name: &str) -> KeyState {
    use router_sdk::KeySource;
    let keys = router_sdk::EnvKeys;
    if keys.key(name).is_some() {
        KeyState::Set
    } else if keys.unreadable(name) {
        KeyState::NotUtf8
    } else {
        KeyState::NotSet
    }
}

/// The path as given, for output.
pub(crate) fn shown(path: &Path) -> String {
    path.display().to_string()
}
