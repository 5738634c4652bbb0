//! `llmroute quota`: what the shared ledger holds now, per deployment.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use crate::context::Context;
use crate::failure::Failure;
use crate::flags;

mod table;

use table::table;

/// Options of `llmroute quota`.
#[derive(Debug, Args)]
pub(crate) struct QuotaArgs {
    /// Also show this tenant's tier, use against its limits, and spend today and this month
    /// against its budget with a projection to the end of the month
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// Print one JSON object instead of a table
    #[arg(long)]
    json: bool,
    /// Refresh every SECS seconds (default 2; from 0.1 to 86400) until interrupted
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
}

/// Runs the command.
pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &QuotaArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    // A bad flag is reported before the configuration is loaded or the ledger opened.
    let every: Option<Duration> = args.watch.map(flags::watch).transpose()?;
    let loaded = ctx.load()?;
    let ledger = ctx.open_ledger(&loaded).await?;
    let (registry, state) = (&loaded.registry, &loaded.ledger.describe());
    let all: Vec<_> = registry.deployment_ids().collect();
    loop {
        let tenant = args.tenant.as_deref();
        let quota = router_state::quota::quota(registry, &ledger, state, tenant, &all)
            .await
            .map_err(Failure::state)?;
        if args.json {
            serde_json::to_writer(&mut *out, &quota).map_err(|e| Failure::output(e.into()))?;
            writeln!(out).map_err(Failure::output)?;
        } else {
            table(&quota, out).map_err(Failure::output)?;
        }
        out.flush().map_err(Failure::output)?;
        let Some(every) = every else { return Ok(()) };
        tokio::time::sleep(every).await;
    }
}
