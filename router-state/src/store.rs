//! Which ledger a driver uses, decided in one place.
//!
//! Limits are shared through Redis across machines, through an embedded SQLite file by the
//! processes of one machine, or held in memory by one process. [`LedgerChoice::resolve`] decides
//! which from, highest precedence first:
//!
//! 1. an explicit override ([`StateOverride`], e.g. the CLI's `--state`);
//! 2. `$REDIS_URL` (empty counts as unset);
//! 3. `state` in the configuration file;
//! 4. else the local store the driver asked for ([`LocalStore`]): the embedded file in
//!    `$LLMROUTE_STATE_DIR`, else in the user's state directory (`$XDG_STATE_HOME/llmroute`,
//!    `~/.local/state/llmroute`); or memory.
//!
//! `memory` as 1 or 3 chooses memory: limits held by this process only, none kept on disk.
//!
//! [`open`] then opens what was chosen. A Redis URL's password never shows in `Debug` output,
//! in [`LedgerChoice::describe`] or in an error.
//!
//! ```
//! use router_core::config::Registry;
//! use router_state::store::{ChoiceOrigin, Environment, LedgerChoice, LocalStore};
//!
//! let yaml = "providers:\n  - name: oa\n    api: openai\n    base_url: https://api.openai.com/v1\n    api_key_env: OPENAI_API_KEY\n    models:\n      - { name: gpt-4o-mini, price: { input: 0.15, output: 0.6 } }\n";
//! let registry = Registry::from_yaml_str(yaml, "example.yaml")?;
//! let env = Environment::fixed(&[("LLMROUTE_STATE_DIR", "/var/lib/llmroute")], None);
//! let choice = LedgerChoice::resolve(&registry, None, LocalStore::Embedded, &env)?;
//! assert_eq!(choice.describe(), "embedded /var/lib/llmroute/ledger.sqlite");
//! assert_eq!(choice.origin(), Some(&ChoiceOrigin::Env("LLMROUTE_STATE_DIR")));
//! # Ok::<(), router_state::Error>(())
//! ```

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Arc;

use router_core::clock::{Clock, SystemClock};
use router_core::config::{IN_MEMORY, Registry, redact_url};
use router_core::ledger::{
    Ledger, LedgerError, MemoryStore, RedisStore, RedisStoreOptions, ResilientStore, SqliteStore,
};

use crate::Error;

/// The environment variable holding a Redis URL that replaces `state` of the file.
pub const REDIS_URL_ENV: &str = "REDIS_URL";
/// The environment variable naming the embedded ledger's directory.
pub const STATE_DIR_ENV: &str = "LLMROUTE_STATE_DIR";
/// The embedded ledger's file name inside its directory.
pub const EMBEDDED_FILE: &str = "ledger.sqlite";

/// Where a [`LedgerChoice`] came from, for output (`providers`, `quota`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChoiceOrigin {
    /// An explicit override, named as its [`StateOverride`] names it (e.g. `--state`).
    Override(String),
    /// An environment variable: [`REDIS_URL_ENV`] or [`STATE_DIR_ENV`].
    Env(&'static str),
    /// `state` in the configuration file.
    Config,
    /// The user's state directory.
    UserStateDir,
}

impl ChoiceOrigin {
    /// How output names it: `--state`, `REDIS_URL`, `LLMROUTE_STATE_DIR`, `config`, or
    /// `user state directory`.
    pub fn as_str(&self) -> &str {
        match self {
            ChoiceOrigin::Override(name) => name,
            ChoiceOrigin::Env(name) => name,
            ChoiceOrigin::Config => "config",
            ChoiceOrigin::UserStateDir => "user state directory",
        }
    }
}

/// The ledger a driver uses.
#[derive(Clone, PartialEq, Eq)]
pub enum LedgerChoice {
    /// Redis at `url`, shared by every instance anywhere.
    Redis {
        /// The URL, password included: show it with [`LedgerChoice::describe`] only.
        url: String,
        /// Where the URL came from.
        from: ChoiceOrigin,
    },
    /// The embedded SQLite file at `path`, shared by the processes of this machine.
    Embedded {
        /// The ledger file.
        path: PathBuf,
        /// Where its directory came from.
        from: ChoiceOrigin,
    },
    /// Memory of this process only: nothing is shared.
    Memory,
}

impl std::fmt::Debug for LedgerChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerChoice::Redis { url, from } => f
                .debug_struct("Redis")
                .field("url", &redact_url(url))
                .field("from", from)
                .finish(),
            LedgerChoice::Embedded { path, from } => f
                .debug_struct("Embedded")
                .field("path", path)
                .field("from", from)
                .finish(),
            LedgerChoice::Memory => f.write_str("Memory"),
        }
    }
}

/// What to use when no Redis URL is configured anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalStore {
    /// The embedded file, shared by every process of this machine (the CLI's choice).
    #[default]
    Embedded,
    /// Memory of this process (a library embedded in one long-lived process).
    Memory,
}

/// A Redis URL given outside the configuration file, with the name of where it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct StateOverride {
    /// The Redis URL.
    pub url: String,
    /// Where it came from, as errors and output name it (e.g. `--state`).
    pub origin: String,
}

impl std::fmt::Debug for StateOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateOverride")
            .field("url", &redact_url(&self.url))
            .field("origin", &self.origin)
            .finish()
    }
}

/// What the choice reads from outside: environment variables and the user's state directory.
/// [`Environment::process`] reads the real ones; [`Environment::fixed`] gives set values (tests).
#[derive(Debug, Clone)]
pub struct Environment {
    vars: Option<HashMap<String, OsString>>,
    user_state_dir: Option<PathBuf>,
}

impl Environment {
    /// This process's environment, and the user's state directory (`$XDG_STATE_HOME`, else
    /// `~/.local/state`; the local data directory where there is no state directory).
    pub fn process() -> Environment {
        Environment {
            vars: None,
            user_state_dir: dirs::state_dir().or_else(dirs::data_local_dir),
        }
    }

    /// Exactly `vars` (every other variable unset) and `user_state_dir` (`None`: there is none).
    pub fn fixed<V: AsRef<OsStr>>(
        vars: &[(&str, V)],
        user_state_dir: Option<PathBuf>,
    ) -> Environment {
        let vars = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_ref().to_owned()))
            .collect();
        Environment {
            vars: Some(vars),
            user_state_dir,
        }
    }

    /// The variable `name`; `None` when unset or empty.
    pub(crate) fn var(&self, name: &str) -> Option<OsString> {
        let value = match &self.vars {
            Some(vars) => vars.get(name).cloned(),
            None => std::env::var_os(name),
        };
        value.filter(|v| !v.is_empty())
    }
}

impl LedgerChoice {
    /// Decides which ledger to use, with the precedence the [module docs](self) give. A Redis URL
    /// is checked here, whatever its origin: an unusable one is [`Error::Config`] naming that
    /// origin (`--state`, `REDIS_URL`, the file) without the password.
    pub fn resolve(
        registry: &Registry,
        state_override: Option<&StateOverride>,
        local: LocalStore,
        env: &Environment,
    ) -> Result<LedgerChoice, Error> {
        if let Some(o) = state_override {
            if o.url == IN_MEMORY {
                return Ok(LedgerChoice::Memory);
            }
            return redis(
                registry,
                &o.url,
                &o.origin,
                ChoiceOrigin::Override(o.origin.clone()),
            );
        }
        if let Some(url) = env.var(REDIS_URL_ENV) {
            let url = url.into_string().map_err(|_| {
                Error::InvalidRequest(format!(
                    "{REDIS_URL_ENV}: is not valid UTF-8; fix it or unset it"
                ))
            })?;
            return redis(
                registry,
                &url,
                REDIS_URL_ENV,
                ChoiceOrigin::Env(REDIS_URL_ENV),
            );
        }
        if let Some(url) = &registry.state {
            if url == IN_MEMORY {
                return Ok(LedgerChoice::Memory);
            }
            return Ok(LedgerChoice::Redis {
                url: url.clone(),
                from: ChoiceOrigin::Config,
            });
        }
        match local {
            LocalStore::Memory => Ok(LedgerChoice::Memory),
            LocalStore::Embedded => embedded(env),
        }
    }

    /// Where it came from; `None` for memory.
    pub fn origin(&self) -> Option<&ChoiceOrigin> {
        match self {
            LedgerChoice::Redis { from, .. } | LedgerChoice::Embedded { from, .. } => Some(from),
            LedgerChoice::Memory => None,
        }
    }

    /// The Redis URL with any password as `***`; `None` when the ledger is not Redis.
    pub fn redis_url_redacted(&self) -> Option<String> {
        match self {
            LedgerChoice::Redis { url, .. } => Some(redact_url(url)),
            _ => None,
        }
    }

    /// One line for output: the redacted Redis URL, `embedded <path>`, or `memory`.
    pub fn describe(&self) -> String {
        match self {
            LedgerChoice::Redis { url, .. } => redact_url(url),
            LedgerChoice::Embedded { path, .. } => format!("embedded {}", path.display()),
            LedgerChoice::Memory => "memory".to_owned(),
        }
    }
}

/// A Redis choice of `url` from `origin`, checked as `state` in the file is.
fn redis(
    registry: &Registry,
    url: &str,
    origin: &str,
    from: ChoiceOrigin,
) -> Result<LedgerChoice, Error> {
    // The configuration's own check, so an override is held to exactly the rules `state` is;
    // a registry is small and this runs once per process.
    registry.clone().with_state_override(url, origin)?;
    Ok(LedgerChoice::Redis {
        url: url.to_owned(),
        from,
    })
}

/// The embedded file: in the state directory.
fn embedded(env: &Environment) -> Result<LedgerChoice, Error> {
    let (dir, from) = state_dir(env)?;
    Ok(LedgerChoice::Embedded {
        path: dir.join(EMBEDDED_FILE),
        from,
    })
}

/// llmroute's state directory: `$LLMROUTE_STATE_DIR`, else `llmroute` in the user's state
/// directory; and where it came from.
pub(crate) fn state_dir(env: &Environment) -> Result<(PathBuf, ChoiceOrigin), Error> {
    Ok(match env.var(STATE_DIR_ENV) {
        Some(dir) => (PathBuf::from(dir), ChoiceOrigin::Env(STATE_DIR_ENV)),
        None => match &env.user_state_dir {
            Some(dir) => (dir.join("llmroute"), ChoiceOrigin::UserStateDir),
            None => return Err(no_state_dir()),
        },
    })
}

fn no_state_dir() -> Error {
    Error::Ledger(LedgerError::Io {
        path: format!("${STATE_DIR_ENV}/{EMBEDDED_FILE}"),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "this user has no state directory (no $XDG_STATE_HOME, no home); \
                 set {STATE_DIR_ENV} to a writable directory, or use Redis"
            ),
        ),
    })
}

/// Opens the ledger `choice` names for `registry`'s deployments, in its namespace, on the
/// system clock. Redis: connects (failing with [`Error::Ledger`] naming the redacted URL when
/// it cannot); embedded: opens or creates the file and its directory (blocking while it does).
pub async fn open(choice: &LedgerChoice, registry: &Registry) -> Result<Arc<dyn Ledger>, Error> {
    open_with_clock(choice, registry, Arc::new(SystemClock)).await
}

/// Like [`open`], on `clock` (the embedded and in-memory stores read it; Redis reads its own,
/// and the clock only times local mode).
pub async fn open_with_clock(
    choice: &LedgerChoice,
    registry: &Registry,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn Ledger>, Error> {
    Ok(match choice {
        LedgerChoice::Redis { url, .. } => {
            // Connected lazily: an instance starts (and admits per `ledger.on_error`) while
            // Redis is away.
            let options = RedisStoreOptions {
                namespace: registry.namespace.clone(),
                response_timeout: registry.ledger.timeout,
                lazy: true,
                ..RedisStoreOptions::default()
            };
            let shared = RedisStore::connect(url, registry, options).await?;
            Arc::new(ResilientStore::new(shared, registry, clock).await)
        }
        LedgerChoice::Embedded { path, .. } => Arc::new(SqliteStore::open(path, registry, clock)?),
        LedgerChoice::Memory => Arc::new(MemoryStore::with_clock(registry, clock)),
    })
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
