//! Opening the ledger the configuration selects (the choice itself is
//! [`router_state::store`]'s), with a hint on what to fix when it, or the usage sink, cannot be
//! opened.

use std::path::Path;
use std::sync::Arc;

use anyhow::anyhow;
use router_core::config::{UsageSettings, UsageSink};
use router_core::ledger::Ledger;
use router_state::store::{ChoiceOrigin, LedgerChoice, STATE_DIR_ENV};
use router_usage::{USAGE_ENV, UsageError};

use crate::config::Loaded;
use crate::failure::Failure;

/// Opens the ledger of `loaded`: exit status 5 when it is unavailable.
pub(crate) async fn open(loaded: &Loaded) -> Result<Arc<dyn Ledger>, Failure> {
    router_state::store::open(&loaded.ledger, &loaded.registry)
        .await
        .map_err(|e| match &loaded.ledger {
            LedgerChoice::Redis { from, .. } => {
                Failure::state(anyhow!("{e}; start Redis there, or fix {}", fix(from)))
            }
            LedgerChoice::Embedded { path, from } => {
                Failure::state(anyhow!("{e}; {}", embedded_fix(path, from)))
            }
            LedgerChoice::Memory => Failure::state(e),
        })
}

/// What to fix for a Redis URL from `from`.
fn fix(from: &ChoiceOrigin) -> String {
    match from {
        ChoiceOrigin::Config => "`state` in the configuration file".to_owned(),
        other => other.as_str().to_owned(),
    }
}

/// What to do when the embedded ledger file `path` cannot be opened: its directory came from
/// `from` ($LLMROUTE_STATE_DIR, or the user's state directory).
fn embedded_fix(path: &Path, from: &ChoiceOrigin) -> String {
    let dir = path.parent().unwrap_or(path).display();
    let redis = "or share limits through Redis (--state, REDIS_URL or `state`)";
    match from {
        ChoiceOrigin::Env(name) if *name == STATE_DIR_ENV => format!(
            "its directory comes from {STATE_DIR_ENV} ({dir}): set {STATE_DIR_ENV} to a \
             directory this user can write, {redis}"
        ),
        _ => format!(
            "its directory is the user's state directory ({dir}): make it writable, set \
             {STATE_DIR_ENV} to a directory this user can write, {redis}"
        ),
    }
}

/// A usage sink that cannot be opened (exit status 5). When it is the default file in the state
/// directory and $LLMROUTE_STATE_DIR chose that directory, the message says so and what to do.
/// PostgreSQL is reached only at the first write or query: opening its sink fails only on its
/// URL (say, a port out of range or an unknown `sslmode`), a configuration error (exit status
/// 2) whose message names where the URL came from. (A state directory it cannot find, for the
/// spill file, is exit status 5 as for any sink.)
pub(crate) fn usage_failed(settings: &UsageSettings, e: router_state::Error) -> Failure {
    if let (UsageSink::Postgres(_), router_state::Error::Usage(UsageError::Sink { .. })) =
        (&settings.sink, &e)
    {
        let from = if std::env::var_os(USAGE_ENV).is_some_and(|v| !v.is_empty()) {
            format!("${USAGE_ENV}")
        } else {
            "`usage` in the configuration".to_owned()
        };
        return Failure::usage(anyhow!("{e} (the URL is {from})"));
    }
    let dir = std::env::var_os(STATE_DIR_ENV).filter(|d| !d.is_empty());
    match dir {
        Some(dir) if settings.sink == UsageSink::Sqlite(None) => Failure::state(anyhow!(
            "{e}; its directory comes from {STATE_DIR_ENV} ({}): set {STATE_DIR_ENV} to a \
             directory this user can write, or `usage` (or {USAGE_ENV}) to a sink elsewhere",
            Path::new(&dir).display()
        )),
        _ => Failure::state(e),
    }
}
