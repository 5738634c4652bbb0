//! Finding and loading the configuration, with the precedence `--help` documents.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use router_core::config::{ConfigError, Registry};

use crate::cli::Global;
use crate::failure::Failure;

/// The configuration file when neither --config nor $LLMROUTE_CONFIG names one.
const DEFAULT_CONFIG: &str = "providers.yaml";

/// Where the Redis URL in effect came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateFrom {
    /// `state` in the configuration file.
    File,
    /// The `REDIS_URL` environment variable.
    Env,
    /// The `--state` option.
    Option,
}

impl StateFrom {
    /// How output names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StateFrom::File => "config",
            StateFrom::Env => "REDIS_URL",
            StateFrom::Option => "--state",
        }
    }
}

/// A validated configuration and where its parts came from.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The file that was read.
    pub(crate) path: PathBuf,
    /// The validated configuration, overrides applied.
    pub(crate) registry: Registry,
    /// Where `registry.state` came from; `None` when it is the embedded store.
    pub(crate) state_from: Option<StateFrom>,
}

/// Load the configuration: the file from --config / $LLMROUTE_CONFIG / ./providers.yaml, then
/// `state` replaced by --state or else $REDIS_URL (an empty $REDIS_URL counts as unset).
pub(crate) fn load(global: &Global) -> Result<Loaded, Failure> {
    let path = global.config.clone().unwrap_or_else(default_path);
    let registry = Registry::from_path(&path).map_err(|e| match e {
        ConfigError::Read { ref io, .. } if io.kind() == std::io::ErrorKind::NotFound => Failure::usage(anyhow!(
            "{e}; name the file with --config FILE or LLMROUTE_CONFIG (default ./providers.yaml)"
        )),
        other => Failure::usage(other),
    })?;
    let from_file = registry.state.is_some().then_some(StateFrom::File);
    let (registry, state_from) = match (&global.state, redis_url_env()?) {
        (Some(url), _) => (
            override_state(registry, url, "--state")?,
            Some(StateFrom::Option),
        ),
        (None, Some(url)) => (
            override_state(registry, &url, "REDIS_URL")?,
            Some(StateFrom::Env),
        ),
        (None, None) => (registry, from_file),
    };
    Ok(Loaded {
        path,
        registry,
        state_from,
    })
}

fn override_state(registry: Registry, url: &str, origin: &str) -> Result<Registry, Failure> {
    registry
        .with_state_override(url, origin)
        .map_err(Failure::usage)
}

/// `$REDIS_URL`, `None` when unset or empty.
fn redis_url_env() -> Result<Option<String>, Failure> {
    match std::env::var("REDIS_URL") {
        Ok(url) if url.is_empty() => Ok(None),
        Ok(url) => Ok(Some(url)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(Failure::usage(anyhow!(
            "REDIS_URL: is not valid UTF-8; fix it or unset it"
        ))),
    }
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

/// Whether the environment variable `name` holds a non-empty value. Never reads the value out.
pub(crate) fn key_is_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// The path as given, for output.
pub(crate) fn shown(path: &Path) -> String {
    path.display().to_string()
}
