//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::logging::LogFormat;

/// Send each LLM request to the cheapest provider with room for it, within every limit.
///
/// Limits are shared by every llmroute process: through Redis (--state, REDIS_URL or `state`)
/// across machines, else through an embedded store on this machine ($LLMROUTE_STATE_DIR, or the
/// user's state directory).
///
/// Logs go to stderr: warnings by default; -v adds info (and `chat`'s routing report), -vv debug,
/// -vvv trace; RUST_LOG, when set, chooses instead (e.g. RUST_LOG=router_sdk=debug);
/// --log-format json writes one JSON object per line.
///
/// Exit status: 0 success; 1 `usage --check` found a difference; 2 usage or configuration (bad
/// flags or YAML, unknown model, no key set, unreadable prompt, image or schema file, a feature
/// no model can serve); 3 no capacity before the deadline, or a tenant's budget exhausted; 4
/// provider error (error answer, timeout, connection, an answer that is not JSON for
/// `--json-schema`); 5 state store or usage sink unavailable; 130 / 143 `chat` or `embed` stopped
/// by SIGINT / SIGTERM (its reservation settled first).
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
#[derive(Debug, Clone, Args)]
pub(crate) struct Global {
    /// Configuration file. Precedence: --config, then $LLMROUTE_CONFIG (empty: unset), then
    /// ./providers.yaml, then providers.yaml in the user's config directory (~/.config/llmroute/)
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Redis URL of the shared ledger, or `memory` (this process only). Precedence: --state, then
    /// $REDIS_URL, then `state` in the configuration file; none of them: the embedded store on
    /// this machine
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) state: Option<String>,

    /// More on stderr: -v logs at info level and reports `chat`'s routing (candidates, the
    /// choice, retries, waits); -vv logs at debug, -vvv at trace. RUST_LOG, when set, chooses
    /// the log levels instead
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    /// Format of the log lines on stderr: `text`, or `json` (one JSON object per line)
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show the validated configuration: providers, models, prices, limits, state.
    ///
    /// API keys are never printed: only whether each key's environment variable is set.
    Providers(ProvidersArgs),
    /// Send a prompt to the cheapest provider with room; the answer on stdout.
    Chat(crate::commands::chat::ChatArgs),
    /// Embed texts with the cheapest embedding model with room: one line per vector (its size
    /// and first values) on stdout, or the whole answer with --json.
    Embed(crate::commands::embed::EmbedArgs),
    /// Show what the shared ledger holds: per deployment, use against limits, cooldowns, prices.
    Quota(crate::commands::quota::QuotaArgs),
    /// Report what the usage records say over a period: requests, tokens, cost, grouped by
    /// day, hour, tenant, model, provider or outcome, with spend against each tenant's budget;
    /// `--check` compares the ledger's spend counters with the records.
    ///
    /// Records are written by `chat` and `serve` (one per finished request) to `usage` of the
    /// configuration (default: usage.sqlite in the state directory; $LLMROUTE_USAGE replaces it).
    Usage(crate::commands::usage::UsageArgs),
    /// Simulate traffic through the real routing core against simulated providers that enforce
    /// the configured limits: no network, no keys. Prints what each deployment served, cost and
    /// 429s, against sending everything to the cheapest or the dearest deployment.
    Simulate(crate::commands::simulate::SimulateArgs),
    /// Serve an OpenAI-compatible endpoint (`/v1/chat/completions`, `/v1/embeddings`,
    /// `/v1/models`) over the router, for every language; callers authenticate with keys of
    /// `gateway.keys`.
    Serve(crate::commands::serve::ServeArgs),
    /// Make API keys for the gateway.
    Keys(crate::commands::keys::KeysArgs),
    /// Print a shell completion script.
    Completions(crate::commands::completions::CompletionsArgs),
}

/// Options of `llmroute providers`.
#[derive(Debug, Args)]
pub(crate) struct ProvidersArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Check each deployment's key and model with its provider's model endpoint (free: no
    /// prompt is sent); exit 4 when one fails
    #[arg(long)]
    pub(crate) check: bool,
}
