//! `llmroute keys new --tenant NAME`: a new random API key for the gateway, printed once with
//! the line that adds its hash to `gateway.keys` (the key itself is never stored).

use std::io::Write;

use anyhow::anyhow;
use clap::{Args, Subcommand};

use crate::context::Context;
use crate::failure::Failure;

/// Options of `llmroute keys`.
#[derive(Debug, Args)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Print a new key, and the line to add to `gateway.keys` (its SHA-256 and tenant)
    New {
        /// The tenant the key's requests are accounted to
        #[arg(long, value_name = "NAME")]
        tenant: String,
    },
}

pub(crate) async fn run(
    _ctx: &Context<'_>,
    args: &KeysArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let KeysCommand::New { tenant } = &args.command;
    // What the configuration accepts; the line below quotes the name, so that any of them
    // (`@ops`, `a: b`, `null`) loads as written.
    if let Some(problem) = router_core::config::tenant_name_problem(tenant) {
        return Err(Failure::usage(anyhow!("--tenant: {problem}")));
    }
    // A JSON string is a YAML double-quoted scalar.
    let quoted = serde_json::Value::from(tenant.as_str()).to_string();
    let key = router_gateway::new_key()
        .map_err(|e| Failure::usage(anyhow!("cannot draw a random key: {e}")))?;
    let hash = router_gateway::hash_key(&key);
    writeln!(
        out,
        "key: {key}\n\nGive the key to tenant `{tenant}`; it is not stored anywhere and is shown \
         only now. Add this line under `gateway.keys` in the configuration:\n\n    - {{ sha256: \
         {hash}, tenant: {quoted} }}"
    )
    .map_err(Failure::output)
}
