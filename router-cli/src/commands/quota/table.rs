//! `quota` as text: the state line, the tenant, one table row per deployment, provider totals.

use std::io::Write;

use router_state::quota::{LineView, Quota, Reported, TenantView, Used};

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
    if t.rpd.is_some() || t.tpd.is_some() {
        let today = per_day(t.rpd.as_ref(), t.tpd.as_ref());
        writeln!(out, "  today (UTC){}", today.replacen(',', ":", 1))?;
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
    parts.extend(r.input_tokens_remaining.map(|n| format!("{n} in tok")));
    parts.extend(r.output_tokens_remaining.map(|n| format!("{n} out tok")));
    format!("{} left {:.0}s ago", parts.join(", "), r.age_secs)
}

/// `3 (1 batch, first 2.1s)`: requests in line, the batch ones among them, and how long ago
/// the first one's place began.
fn waiting(l: &LineView) -> String {
    let batch = if l.batch > 0 {
        format!("{} batch, ", l.batch)
    } else {
        String::new()
    };
    match l.oldest_wait_secs {
        Some(secs) if l.waiting > 0 => format!("{} ({batch}first {secs:.1}s)", l.waiting),
        _ => l.waiting.to_string(),
    }
}

fn limit(l: Option<u64>) -> String {
    l.map_or("-".into(), |l| l.to_string())
}

/// `used/limit`, or `-` where the limit is not configured.
fn used(u: Option<&Used>) -> String {
    u.map_or("-".into(), |u| format!("{}/{}", u.used, limit(u.limit)))
}

/// `, itpm 800/1000, otpm 150/200` for the limits that are configured.
fn split_limits(itpm: Option<&Used>, otpm: Option<&Used>) -> String {
    let named = [("itpm", itpm), ("otpm", otpm)];
    let parts = named
        .iter()
        .filter_map(|(name, u)| u.map(|_| format!(", {name} {}", used(*u))));
    parts.collect()
}

/// `, rpd 3/100, tpd 900/100000` for the per-day limits that are configured.
fn per_day(rpd: Option<&Used>, tpd: Option<&Used>) -> String {
    let named = [("rpd", rpd), ("tpd", tpd)];
    let parts = named
        .iter()
        .filter_map(|(name, u)| u.map(|_| format!(", {name} {}", used(*u))));
    parts.collect()
}

/// `5h12m`.
fn hm(secs: f64) -> String {
    let s = secs as u64;
    format!("{}h{:02}m", s / 3600, s % 3600 / 60)
}

/// `, day resets in 5h12m` when a scope has a per-day limit.
fn day_resets(secs: Option<f64>) -> String {
    secs.map_or(String::new(), |s| format!(", day resets in {}", hm(s)))
}

/// The whole report as text.
pub(super) fn table(q: &Quota, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "state: {}", q.state)?;
    if let Some(l) = &q.ledger {
        let share = match (l.mode, l.instances) {
            ("local", n) if n > 1 => format!(", admitting within 1/{n} of each limit"),
            _ => String::new(),
        };
        writeln!(
            out,
            "ledger: {} for {:.0}s, {} instance{} at the last heartbeat{share}",
            l.mode,
            l.since_secs,
            l.instances,
            if l.instances == 1 { "" } else { "s" }
        )?;
    }
    if let Some(t) = &q.tenant {
        tenant_table(t, out)?;
    }
    // The itpm and otpm columns appear when some deployment has that limit.
    let split = q
        .deployments
        .iter()
        .any(|r| r.usage.itpm.is_some() || r.usage.otpm.is_some());
    // The rpd and tpd columns appear when some deployment has a per-day limit.
    let daily = q
        .deployments
        .iter()
        .any(|r| r.usage.rpd.is_some() || r.usage.tpd.is_some());
    let mut head = vec!["deployment".to_string(), "rpm".into(), "tpm".into()];
    if split {
        head.extend(["itpm".into(), "otpm".into()]);
    }
    if daily {
        head.extend(["rpd".into(), "tpd".into(), "day resets".into()]);
    }
    // The waiting column appears when some deployment has requests in line.
    let lines = q.deployments.iter().any(|r| r.line.waiting > 0);
    if lines {
        head.push("waiting".into());
    }
    head.extend(
        [
            "in flight",
            "cooldown",
            "$/Mtok in/out",
            "provider reported",
        ]
        .map(String::from),
    );
    let mut rows = vec![head];
    for r in &q.deployments {
        let mut row = vec![
            format!("{}/{}", r.provider, r.model),
            format!("{}/{}", r.usage.rpm.used, limit(r.usage.rpm.limit)),
            format!("{}/{}", r.usage.tpm.used, limit(r.usage.tpm.limit)),
        ];
        if split {
            row.extend([used(r.usage.itpm.as_ref()), used(r.usage.otpm.as_ref())]);
        }
        if daily {
            let resets = r.usage.day_resets_in_secs.map_or("-".into(), hm);
            row.extend([
                used(r.usage.rpd.as_ref()),
                used(r.usage.tpd.as_ref()),
                resets,
            ]);
        }
        if lines {
            row.push(waiting(&r.line));
        }
        row.extend([
            format!(
                "{}/{}",
                r.usage.concurrency.in_flight,
                limit(r.usage.concurrency.limit)
            ),
            r.cooldown_secs.map_or("-".into(), |c| format!("{c:.1}s")),
            format!(
                "{:.2}/{:.2}",
                r.price.input_per_mtok, r.price.output_per_mtok
            ),
            r.provider_reported.as_ref().map_or("-".into(), reported),
        ]);
        rows.push(row);
    }
    crate::table::write(out, &rows, "", usize::MAX)?;
    let mut seen = Vec::new();
    for r in &q.deployments {
        if let Some(p) = &r.provider_wide
            && !seen.contains(&r.provider)
        {
            seen.push(r.provider.clone());
            writeln!(
                out,
                "provider {}: rpm {}/{}, tpm {}/{}{}, in flight {}/{}{}{}",
                r.provider,
                p.rpm.used,
                limit(p.rpm.limit),
                p.tpm.used,
                limit(p.tpm.limit),
                split_limits(p.itpm.as_ref(), p.otpm.as_ref()),
                p.concurrency.in_flight,
                limit(p.concurrency.limit),
                per_day(p.rpd.as_ref(), p.tpd.as_ref()),
                day_resets(p.day_resets_in_secs),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_its_length_and_how_long_ago_the_first_place_began() {
        let line = |waiting, batch, oldest_wait_secs| LineView {
            waiting,
            batch,
            oldest_wait_secs,
        };
        assert_eq!(waiting(&line(3, 0, Some(2.14))), "3 (first 2.1s)");
        assert_eq!(waiting(&line(3, 1, Some(2.14))), "3 (1 batch, first 2.1s)");
        assert_eq!(waiting(&line(0, 0, None)), "0");
    }
}
