//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Send each LLM request to the cheapest provider with room for it, within every limit.
#[derive(Debug, Parser)]
#[command(name = "llmroute", version, propagate_version = true)]
pub(crate) struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub(crate) global: Global,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Configuration file. Precedence: --config, then $LLMROUTE_CONFIG, then ./providers.yaml
    #[arg(long, global = true, env = "LLMROUTE_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Redis URL of the shared ledger. Precedence: --state, then $REDIS_URL, then `state` in the
    /// configuration file; none of them: an in-process store
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) state: Option<String>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show the validated configuration: providers, models, prices, limits, state.
    ///
    /// API keys are never printed: only whether each key's environment variable is set.
    Providers(ProvidersArgs),
}

/// Options of `llmroute providers`.
#[derive(Debug, Args)]
pub(crate) struct ProvidersArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}
