//! `llmroute quota`: what the shared ledger holds now, per deployment.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use router_core::config::Registry;
use router_core::ledger::{DeploymentSnapshot, Ledger, ScopeUsage};
use serde::Serialize;

use crate::failure::Failure;

/// Options of `llmroute quota`.
#[derive(Debug, Args)]
pub(crate) struct QuotaArgs {
    /// Show this tenant's view (tenants' own limits and budgets are not configurable yet: the
    /// deployments are shown)
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
    tenant: Option<&'a str>,
    deployments: Vec<Row>,
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
    args: &QuotaArgs,
    registry: &Registry,
    ledger: &Arc<dyn Ledger>,
    state: &str,
    out: &mut dyn Write,
) -> Result<(), Failure> {
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
        let quota = Quota {
            state,
            tenant: args.tenant.as_deref(),
            deployments: snaps.iter().map(|s| row(registry, s)).collect(),
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

fn limit(l: Option<u64>) -> String {
    l.map_or("-".into(), |l| l.to_string())
}

fn table(q: &Quota<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "state: {}", q.state)?;
    if let Some(t) = q.tenant {
        writeln!(
            out,
            "tenant: {t} (no tenant limits configured: showing the deployments)"
        )?;
    }
    let mut rows = vec![[
        "deployment".to_string(),
        "rpm".into(),
        "tpm".into(),
        "in flight".into(),
        "cooldown".into(),
        "$/Mtok in/out".into(),
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
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
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
