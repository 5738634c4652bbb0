//! `llmroute quota`: what the shared ledger holds now, per deployment.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use router_core::config::Registry;
use router_core::ledger::{DeploymentSnapshot, Ledger, ScopeUsage, TenantSpec};
use serde::Serialize;

use crate::context::Context;
use crate::failure::Failure;

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
    /// Refresh every SECS seconds (default 2) until interrupted
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
}

#[derive(Serialize)]
struct Quota<'a> {
    state: &'a str,
    tenant: Option<TenantView>,
    deployments: Vec<Row>,
}

/// A tenant's view: its tier, use and spend.
#[derive(Serialize)]
struct TenantView {
    name: String,
    /// `None`: no tier applies (no `members` entry, no `default_tier`): unlimited, untracked.
    tier: Option<String>,
    rpm: Option<Used>,
    tpm: Option<Used>,
    concurrency: Option<InFlight>,
    spend: Option<Spend>,
}

#[derive(Serialize)]
struct Spend {
    today_usd: f64,
    daily_budget_usd: Option<f64>,
    month_usd: f64,
    monthly_budget_usd: Option<f64>,
    /// This month's spend extrapolated linearly to the end of the month.
    projected_month_usd: f64,
    day_resets_in_secs: f64,
    month_resets_in_secs: f64,
}

#[derive(Serialize)]
struct Row {
    provider: String,
    model: String,
    rpm: Used,
    tpm: Used,
    concurrency: InFlight,
    cooldown_secs: Option<f64>,
    price: Price,
    provider_wide: Option<ProviderWide>,
    /// What the provider last reported in its rate-limit headers, within the last minute.
    provider_reported: Option<Reported>,
}

#[derive(Serialize)]
struct Reported {
    requests_remaining: Option<u64>,
    tokens_remaining: Option<u64>,
    age_secs: f64,
}

#[derive(Serialize)]
struct Used {
    used: u64,
    limit: Option<u64>,
}

#[derive(Serialize)]
struct InFlight {
    in_flight: u64,
    limit: Option<u64>,
}

#[derive(Serialize)]
struct Price {
    input_per_mtok: f64,
    output_per_mtok: f64,
}

#[derive(Serialize)]
struct ProviderWide {
    rpm: Used,
    tpm: Used,
    concurrency: InFlight,
}

fn dims(u: &ScopeUsage) -> (Used, Used, InFlight) {
    (
        Used {
            used: u.requests,
            limit: u.rpm_limit,
        },
        Used {
            used: u.tokens,
            limit: u.tpm_limit,
        },
        InFlight {
            in_flight: u.in_flight,
            limit: u.concurrency_limit,
        },
    )
}

fn row(registry: &Registry, s: &DeploymentSnapshot) -> Row {
    let d = registry.deployment(s.deployment);
    let (rpm, tpm, concurrency) = dims(&s.usage);
    Row {
        provider: registry.provider_of(s.deployment).name.clone(),
        model: d.model.clone(),
        rpm,
        tpm,
        concurrency,
        cooldown_secs: s.cooldown.map(|c| c.as_secs_f64()),
        price: Price {
            input_per_mtok: d.price.input_per_mtok,
            output_per_mtok: d.price.output_per_mtok,
        },
        provider_reported: s.reported.map(|r| Reported {
            requests_remaining: r.requests_remaining,
            tokens_remaining: r.tokens_remaining,
            age_secs: r.age.as_secs_f64(),
        }),
        provider_wide: s.provider.as_ref().map(|p| {
            let (rpm, tpm, concurrency) = dims(p);
            ProviderWide {
                rpm,
                tpm,
                concurrency,
            }
        }),
    }
}

/// Runs the command.
pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &QuotaArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let loaded = ctx.load()?;
    let ledger = ctx.open_ledger(&loaded).await?;
    let (registry, state) = (&loaded.registry, &loaded.ledger.describe());
    let every = match args.watch {
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(Failure::usage(anyhow::anyhow!(
                "--watch: must be a positive number of seconds, got {s}"
            )));
        }
        None => None,
    };
    let all: Vec<_> = registry.deployment_ids().collect();
    loop {
        let snaps = ledger.snapshot(&all).await.map_err(Failure::state)?;
        let tenant = match &args.tenant {
            Some(name) => Some(tenant_view(registry, &ledger, name).await?),
            None => None,
        };
        let deployments = snaps.iter().map(|s| row(registry, s)).collect();
        let quota = Quota {
            state,
            tenant,
            deployments,
        };
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

async fn tenant_view(
    registry: &Registry,
    ledger: &Arc<dyn Ledger>,
    name: &str,
) -> Result<TenantView, Failure> {
    let Some(tier) = registry.tier_of(name) else {
        let none = TenantView {
            name: name.to_owned(),
            tier: None,
            rpm: None,
            tpm: None,
            concurrency: None,
            spend: None,
        };
        return Ok(none);
    };
    let snap = ledger
        .tenant_snapshot(&TenantSpec::of_tier(name, tier))
        .await
        .map_err(Failure::state)?;
    let (rpm, tpm, concurrency) = dims(&snap.usage);
    let usd = |micros: u64| micros as f64 / 1e6;
    let month = usd(snap.spent_month_micros);
    let elapsed = snap.month_elapsed.as_secs_f64().max(1.0);
    let projected = month * (elapsed + snap.month_resets_in.as_secs_f64()) / elapsed;
    Ok(TenantView {
        name: name.to_owned(),
        tier: Some(tier.name.clone()),
        rpm: Some(rpm),
        tpm: Some(tpm),
        concurrency: Some(concurrency),
        spend: Some(Spend {
            today_usd: usd(snap.spent_today_micros),
            daily_budget_usd: tier.budget.daily_usd,
            month_usd: month,
            monthly_budget_usd: tier.budget.monthly_usd,
            projected_month_usd: projected,
            day_resets_in_secs: snap.day_resets_in.as_secs_f64(),
            month_resets_in_secs: snap.month_resets_in.as_secs_f64(),
        }),
    })
}

fn tenant_table(t: &TenantView, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(tier) = &t.tier else {
        return writeln!(
            out,
            "tenant {}: no tier applies (no `members` entry, no `default_tier`): unlimited",
            t.name
        );
    };
    writeln!(out, "tenant {} (tier {tier})", t.name)?;
    if let (Some(r), Some(k), Some(c)) = (&t.rpm, &t.tpm, &t.concurrency) {
        writeln!(
            out,
            "  rpm {}/{}, tpm {}/{}, in flight {}/{}",
            r.used,
            limit(r.limit),
            k.used,
            limit(k.limit),
            c.in_flight,
            limit(c.limit)
        )?;
    }
    if let Some(s) = &t.spend {
        let budget = |b: Option<f64>| b.map_or("unlimited".to_string(), |b| format!("${b:.2}"));
        writeln!(
            out,
            "  spent today ${:.6} of {} (resets in {:.0}s)",
            s.today_usd,
            budget(s.daily_budget_usd),
            s.day_resets_in_secs
        )?;
        writeln!(
            out,
            "  spent this month ${:.6} of {}, projected ${:.2} by month end",
            s.month_usd,
            budget(s.monthly_budget_usd),
            s.projected_month_usd
        )?;
    }
    Ok(())
}

/// `996 req, 180000 tok left 3s ago`.
fn reported(r: &Reported) -> String {
    let mut parts = Vec::new();
    parts.extend(r.requests_remaining.map(|n| format!("{n} req")));
    parts.extend(r.tokens_remaining.map(|n| format!("{n} tok")));
    format!("{} left {:.0}s ago", parts.join(", "), r.age_secs)
}

fn limit(l: Option<u64>) -> String {
    l.map_or("-".into(), |l| l.to_string())
}

fn table(q: &Quota<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "state: {}", q.state)?;
    if let Some(t) = &q.tenant {
        tenant_table(t, out)?;
    }
    let mut rows = vec![[
        "deployment".to_string(),
        "rpm".into(),
        "tpm".into(),
        "in flight".into(),
        "cooldown".into(),
        "$/Mtok in/out".into(),
        "provider reported".into(),
    ]];
    for r in &q.deployments {
        rows.push([
            format!("{}/{}", r.provider, r.model),
            format!("{}/{}", r.rpm.used, limit(r.rpm.limit)),
            format!("{}/{}", r.tpm.used, limit(r.tpm.limit)),
            format!("{}/{}", r.concurrency.in_flight, limit(r.concurrency.limit)),
            r.cooldown_secs.map_or("-".into(), |c| format!("{c:.1}s")),
            format!(
                "{:.2}/{:.2}",
                r.price.input_per_mtok, r.price.output_per_mtok
            ),
            r.provider_reported.as_ref().map_or("-".into(), reported),
        ]);
    }
    let rows: Vec<Vec<String>> = rows.into_iter().map(Vec::from).collect();
    crate::table::write(out, &rows, "", usize::MAX)?;
    let mut seen = Vec::new();
    for r in &q.deployments {
        if let Some(p) = &r.provider_wide
            && !seen.contains(&r.provider)
        {
            seen.push(r.provider.clone());
            writeln!(
                out,
                "provider {}: rpm {}/{}, tpm {}/{}, in flight {}/{}",
                r.provider,
                p.rpm.used,
                limit(p.rpm.limit),
                p.tpm.used,
                limit(p.tpm.limit),
                p.concurrency.in_flight,
                limit(p.concurrency.limit)
            )?;
        }
    }
    Ok(())
}
