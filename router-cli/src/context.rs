//! What every command gets besides its own arguments: the global options, and the ways to load
//! the configuration and open the ledger they select.

use std::sync::Arc;

use router_core::ledger::Ledger;
use router_sdk::Router;
use router_state::store::Environment;
use router_state::usage::{self, UsageDefault};

use crate::cli::Global;
use crate::config::{self, Loaded};
use crate::failure::Failure;

/// The context of one command run.
#[derive(Debug)]
pub(crate) struct Context<'a> {
    global: &'a Global,
}

impl<'a> Context<'a> {
    /// The context of the global options `global`.
    pub(crate) fn new(global: &'a Global) -> Self {
        Context { global }
    }

    /// The global options.
    pub(crate) fn global(&self) -> &'a Global {
        self.global
    }

    /// Whether `-v` was given: commands report what they decide on stderr.
    pub(crate) fn verbose(&self) -> bool {
        self.global.verbose > 0
    }

    /// Loads the configuration and chooses its ledger (exit status 2 when either is unusable).
    pub(crate) fn load(&self) -> Result<Loaded, Failure> {
        config::load(self.global)
    }

    /// A router over `loaded`, the ledger it selects (exit status 5 when the ledger is
    /// unavailable) and its usage sink (default: the embedded SQLite file; exit status 2 for an
    /// unusable `$LLMROUTE_USAGE`, 5 for a file that cannot be opened).
    pub(crate) async fn router(&self, loaded: Loaded) -> Result<Router, Failure> {
        let ledger = self.open_ledger(&loaded).await?;
        let env = Environment::process();
        let settings = usage::settings(&loaded.registry, UsageDefault::Sqlite, &env)
            .map_err(|e| Failure::usage(anyhow::anyhow!("{e}")))?;
        let recorder =
            usage::open(&settings, &env).map_err(|e| crate::store::usage_failed(&settings, e))?;
        let builder = Router::builder(loaded.registry).ledger(ledger);
        let builder = match recorder {
            Some(recorder) => builder.usage(recorder),
            None => builder,
        };
        builder.build().await.map_err(Failure::router)
    }

    /// Opens the ledger `loaded` selects (exit status 5 when it is unavailable).
    pub(crate) async fn open_ledger(&self, loaded: &Loaded) -> Result<Arc<dyn Ledger>, Failure> {
        crate::store::open(loaded).await
    }
}
