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
    let valid = !tenant.trim().is_empty()
        && tenant.trim() == tenant
        && !tenant.contains(['{', '}', ',', ':', '#']);
    if !valid {
        return Err(Failure::usage(anyhow!(
            "--tenant {tenant:?}: a tenant name must be non-empty, without surrounding spaces \
             and without `{{ }} , : #`; use letters, digits, `-` and `_`"
        )));
    }
    let key = router_gateway::new_key()
        .map_err(|e| Failure::usage(anyhow!("cannot draw a random key: {e}")))?;
    let hash = router_gateway::hash_key(&key);
    writeln!(
        out,
        "key: {key}\n\nGive the key to tenant `{tenant}`; it is not stored anywhere and is shown \
         only now. Add this line under `gateway.keys` in the configuration:\n\n    - {{ sha256: \
         {hash}, tenant: {tenant} }}"
    )
    .map_err(Failure::output)
}
