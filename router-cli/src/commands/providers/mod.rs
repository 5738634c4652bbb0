//! `llmroute providers`: print the validated configuration, as text or one JSON object; with
//! `--check`, check each deployment's key and model.

mod check;

use std::io::{self, Write};

use router_state::store::LedgerChoice;

use crate::cli::ProvidersArgs;
use crate::config::key_state;
use crate::context::Context;
use crate::failure::Failure;
use crate::view::{ConfigView, LimitsView, ProviderView, RatesView};

/// Load and validate the configuration, then print it on `out`.
pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &ProvidersArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let loaded = ctx.load()?;
    if args.check {
        return check::run(loaded.registry, args.json, out).await;
    }
    let view = ConfigView::new(&loaded, key_state);
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &view).map_err(|e| Failure::output(e.into()))?;
        writeln!(out).map_err(Failure::output)
    } else {
        write_text(out, &view, &loaded.ledger).map_err(Failure::output)
    }
}

/// The human-readable form.
fn write_text(out: &mut dyn Write, view: &ConfigView, ledger: &LedgerChoice) -> io::Result<()> {
    let state = match (&view.state, &view.state_from, ledger) {
        (Some(url), Some(from), _) => format!("{url} (from {from})"),
        (Some(url), None, _) => url.clone(),
        (None, _, LedgerChoice::Embedded { path, .. }) => format!(
            "embedded store {} (shared by llmroute processes on this machine; set `state`, REDIS_URL or --state to share limits across machines)",
            path.display()
        ),
        (None, _, _) => ledger.describe(),
    };
    let d = &view.defaults;
    writeln!(out, "config:     {}", view.config)?;
    writeln!(out, "state:      {state}")?;
    writeln!(out, "namespace:  {}", view.namespace)?;
    let model = d.model.as_deref().unwrap_or("(none)");
    writeln!(
        out,
        "defaults:   model {model}, output_tokens {}, slot_ttl_secs {}",
        d.output_tokens, d.slot_ttl_secs
    )?;
    for provider in &view.providers {
        writeln!(out)?;
        write_provider(out, provider)?;
    }
    for route in &view.routes {
        writeln!(out)?;
        writeln!(out, "route {}", route.alias)?;
        for (i, rule) in route.rules.iter().enumerate() {
            writeln!(out, "  [{i}] {} -> {}", rule.when, rule.model)?;
        }
    }
    Ok(())
}

fn write_provider(out: &mut dyn Write, p: &ProviderView) -> io::Result<()> {
    writeln!(out, "provider {}", p.name)?;
    writeln!(out, "  api:       {}", p.api)?;
    writeln!(out, "  base_url:  {}", p.base_url)?;
    writeln!(out, "  key:       {} ({})", p.api_key_env, p.api_key)?;
    writeln!(out, "  limits:    {}", limits_line(&p.limits))?;
    // itpm and otpm columns only for a provider with a model that sets them; rpd and tpd alike.
    let split = p
        .models
        .iter()
        .any(|m| m.limits.itpm.is_some() || m.limits.otpm.is_some());
    let daily = p
        .models
        .iter()
        .any(|m| m.limits.rpd.is_some() || m.limits.tpd.is_some());
    // Cache columns only for a provider with a model that has those prices.
    let cached = p
        .models
        .iter()
        .any(|m| m.price.rates.cached_input.is_some());
    let writes = p.models.iter().any(|m| m.price.rates.cache_write.is_some());
    let mut head = row(["model", "aliases", "input $/Mtok"]);
    if cached {
        head.push("cached $/Mtok".to_owned());
    }
    if writes {
        head.extend(row(["write 5m $/Mtok", "write 1h $/Mtok"]));
    }
    head.extend(row(["output $/Mtok", "rpm", "tpm"]));
    if split {
        head.extend(row(["itpm", "otpm"]));
    }
    if daily {
        head.extend(row(["rpd", "tpd"]));
    }
    head.extend(row(["concurrency", "capabilities"]));
    // A lease column only for a provider with a model that leases.
    let leases = p.models.iter().any(|m| m.lease.is_some());
    if leases {
        head.push("lease".to_owned());
    }
    let mut rows = vec![head];
    for m in &p.models {
        let aliases = if m.aliases.is_empty() {
            "-".to_owned()
        } else {
            m.aliases.join(",")
        };
        let r = &m.price.rates;
        let mut cells = vec![m.name.clone(), aliases, usd(r.input)];
        if cached {
            cells.push(r.cached_input.map_or_else(|| "-".to_owned(), usd));
        }
        if writes {
            cells.push(r.cache_write.map_or_else(|| "-".to_owned(), usd));
            cells.push(r.cache_write_1h.map_or_else(|| "-".to_owned(), usd));
        }
        cells.extend([usd(r.output), limit(m.limits.rpm), limit(m.limits.tpm)]);
        if split {
            cells.extend([limit(m.limits.itpm), limit(m.limits.otpm)]);
        }
        if daily {
            cells.extend([limit(m.limits.rpd), limit(m.limits.tpd)]);
        }
        cells.push(limit(m.limits.concurrency));
        cells.push(match (m.kind, m.dimensions) {
            ("embedding", Some(d)) => format!("embedding ({d} dimensions)"),
            ("embedding", None) => "embedding".to_owned(),
            _ if m.capabilities.is_empty() => "-".to_owned(),
            _ => m.capabilities.join(","),
        });
        if leases {
            cells.push(
                m.lease
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |l| l.to_string()),
            );
        }
        rows.push(cells);
    }
    write_table(out, &rows)?;
    for m in &p.models {
        for t in &m.price.above {
            writeln!(
                out,
                "  {} above {} prompt tokens: {}",
                m.name,
                t.prompt_tokens,
                rates_line(&t.rates)
            )?;
        }
    }
    Ok(())
}

/// `input $6.00, output $22.50, cached $0.60, write 5m $7.50, write 1h $12.00` per million
/// tokens.
fn rates_line(r: &RatesView) -> String {
    let mut parts = vec![
        format!("input ${}", usd(r.input)),
        format!("output ${}", usd(r.output)),
    ];
    let optional = [
        ("cached", r.cached_input),
        ("write 5m", r.cache_write),
        ("write 1h", r.cache_write_1h),
    ];
    for (name, v) in optional {
        if let Some(v) = v {
            parts.push(format!("{name} ${}", usd(v)));
        }
    }
    format!("{} per million tokens", parts.join(", "))
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

/// Rows with columns padded to a common width, indented by two spaces.
fn write_table(out: &mut dyn Write, rows: &[Vec<String>]) -> io::Result<()> {
    crate::table::write(out, rows, "  ", usize::MAX)
}

/// `rpm 500, tpm 30000` or `unlimited`.
fn limits_line(l: &LimitsView) -> String {
    let parts: Vec<String> = [
        ("rpm", l.rpm),
        ("tpm", l.tpm),
        ("itpm", l.itpm),
        ("otpm", l.otpm),
        ("concurrency", l.concurrency),
        ("rpd", l.rpd),
        ("tpd", l.tpd),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} {v}")))
    .chain(
        l.day_resets
            .iter()
            .map(|z| format!("days end at midnight {z}")),
    )
    .collect();
    if parts.is_empty() {
        "unlimited".to_owned()
    } else {
        parts.join(", ")
    }
}

/// A limit, or `-` for unlimited.
fn limit(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A price with at least two decimals, and more only when needed (`0.075`).
fn usd(x: f64) -> String {
    let two = format!("{x:.2}");
    if two.parse::<f64>() == Ok(x) {
        two
    } else {
        x.to_string()
    }
}
