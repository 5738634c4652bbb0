//! `quota` as text: the state line, the tenant, one table row per deployment, provider totals.

use std::io::Write;

use super::view::{Quota, Reported, TenantView};

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

/// The whole report as text.
pub(super) fn table(q: &Quota<'_>, out: &mut dyn Write) -> std::io::Result<()> {
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
