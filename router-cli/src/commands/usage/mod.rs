//! `llmroute usage`: what the usage records say over a period, grouped and filtered; `--check`
//! compares the ledger's spend counters with the records.

use std::io::Write;

use anyhow::anyhow;
use clap::Args;
use router_core::config::UsageSink;
use router_core::ledger::{TenantSpec, calendar};
use router_state::store::Environment;
use router_state::usage::{self, UsageDefault};
use router_usage::{Group, Query, Sink};

use crate::context::Context;
use crate::failure::Failure;

mod render;

/// Options of `llmroute usage`.
#[derive(Debug, Args)]
pub(crate) struct UsageArgs {
    /// Start of the period: a time ago (30m, 24h, 7d, 2w) or a UTC date or time (2026-11-01,
    /// 2026-11-01T14:00)
    #[arg(long, value_name = "WHEN", default_value = "24h")]
    since: String,
    /// End of the period (exclusive), written as --since; default: now
    #[arg(long, value_name = "WHEN")]
    until: Option<String>,
    /// Group by day, hour, tenant, model, provider or outcome; several as day,tenant (outermost
    /// first)
    #[arg(long, value_name = "GROUPS", value_delimiter = ',')]
    by: Vec<String>,
    /// Only this tenant's requests
    #[arg(long, value_name = "NAME")]
    tenant: Option<String>,
    /// Only requests that asked for or were served by this model
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Print the report as one JSON object
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print the groups as CSV (one row of totals without --by)
    #[arg(long)]
    csv: bool,
    /// Compare each tenant's spend counters in the ledger (this UTC day and month) with the sum
    /// of its usage records; exit status 1 when any differs (for the day and month: no --since,
    /// --until or --model)
    #[arg(long, conflicts_with_all = ["json", "csv", "by", "since", "until", "model"])]
    check: bool,
}

/// Runs the command.
pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &UsageArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let loaded = ctx.load()?;
    let env = Environment::process();
    let settings = usage::settings(&loaded.registry, UsageDefault::Sqlite, &env)
        .map_err(|e| Failure::usage(anyhow!("{e}")))?;
    if settings.sink == UsageSink::None {
        return Err(Failure::usage(anyhow!(
            "no usage records are kept: `usage` is none (in the configuration or {}); set it to \
             sqlite or a postgres:// URL",
            router_usage::USAGE_ENV
        )));
    }
    let sink = usage::reader(&settings, &env)
        .map_err(|e| crate::store::usage_failed(&settings, e))?
        .ok_or_else(|| Failure::usage(anyhow!("no usage sink configured")))?;
    let now = router_core::clock::Clock::now_ms(&router_core::clock::SystemClock);
    if args.check {
        let ledger = ctx.open_ledger(&loaded).await?;
        return check(&loaded.registry, &ledger, &sink, args, now, out).await;
    }
    let query = query(args, now)?;
    let report = router_usage::report(&sink, &loaded.registry, &query)
        .await
        .map_err(Failure::state)?;
    let written = if args.json {
        serde_json::to_writer(&mut *out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else if args.csv {
        render::csv(&report, out)
    } else {
        render::table(&report, &sink.describe(), out)
    };
    written.map_err(Failure::output)
}

/// The query the flags ask for.
fn query(args: &UsageArgs, now: u64) -> Result<Query, Failure> {
    let bad = |flag: &str, e: String| Failure::usage(anyhow!("{flag}: {e}"));
    let since = router_usage::parse_instant(&args.since, now).map_err(|e| bad("--since", e))?;
    let until = match &args.until {
        Some(text) => router_usage::parse_instant(text, now).map_err(|e| bad("--until", e))?,
        None => now + 1,
    };
    if since >= until {
        return Err(Failure::usage(anyhow!(
            "--since {} is not before --until {}: the period is empty",
            args.since,
            args.until.as_deref().unwrap_or("now")
        )));
    }
    let mut by = Vec::new();
    for name in &args.by {
        let g = Group::parse(name).map_err(|e| bad("--by", e))?;
        if !by.contains(&g) {
            by.push(g);
        }
    }
    Ok(Query {
        since_ms: since,
        until_ms: until,
        by,
        tenant: args.tenant.clone(),
        model: args.model.clone(),
    })
}

/// `--check`: every tenant with a tier that the configuration lists or the month's records
/// name, its ledger spend against its records, for this UTC day and month.
async fn check(
    registry: &router_core::config::Registry,
    ledger: &std::sync::Arc<dyn router_core::ledger::Ledger>,
    sink: &Sink,
    args: &UsageArgs,
    now: u64,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let (month_start, _) = calendar::month_of(now);
    let day_start = now / calendar::DAY * calendar::DAY;
    let sums = |since_ms: u64| Query {
        since_ms,
        until_ms: u64::MAX / 2,
        by: vec![Group::Tenant],
        tenant: args.tenant.clone(),
        model: None,
    };
    let month = sink
        .query(&sums(month_start))
        .await
        .map_err(Failure::state)?;
    let day = sink.query(&sums(day_start)).await.map_err(Failure::state)?;
    let mut tenants: Vec<String> = registry
        .tenants
        .members
        .iter()
        .map(|(t, _)| t.clone())
        .chain(month.iter().filter_map(|r| r.key.first().cloned()))
        // Requests without a tenant are charged to no budget, whatever `default_tier` says.
        .filter(|t| t != router_core::config::NO_TENANT)
        .filter(|t| args.tenant.as_ref().is_none_or(|only| only == t))
        .collect();
    if let Some(only) = &args.tenant {
        tenants.push(only.clone());
    }
    tenants.sort();
    tenants.dedup();
    let recorded = |rows: &[router_usage::Row], tenant: &str| {
        rows.iter()
            .find(|r| r.key.first().is_some_and(|k| k == tenant))
            .map_or(0, |r| r.totals.cost_micros)
    };
    let mut lines = Vec::new();
    for tenant in tenants {
        let Some(tier) = registry.tier_of(&tenant) else {
            continue;
        };
        let snap = ledger
            .tenant_snapshot(&TenantSpec::of_tier(&tenant, tier))
            .await
            .map_err(Failure::state)?;
        lines.push(render::CheckLine {
            day_ledger: snap.spent_today_micros,
            day_records: recorded(&day, &tenant),
            month_ledger: snap.spent_month_micros,
            month_records: recorded(&month, &tenant),
            in_flight: snap.usage.in_flight,
            tenant,
        });
    }
    let differs = render::check(&lines, now, out).map_err(Failure::output)?;
    if differs > 0 {
        return Err(Failure::differs(anyhow!(
            "{differs} tenant(s) differ between the ledger and the usage records"
        )));
    }
    Ok(())
}
