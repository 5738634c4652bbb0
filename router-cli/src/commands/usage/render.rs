//! The usage report as a table with bars and a sparkline, as CSV, and the `--check` table.

use std::io::{self, Write};

use router_core::ledger::calendar;
use router_usage::{Group, Report, Totals, label};

use crate::table;

/// Bar width in cells at 100 %.
const BAR: usize = 20;
/// Most cells of the sparkline.
const SPARK: usize = 96;

/// The report as text: the period, the totals, the sparkline, the groups, the budgets.
pub(crate) fn table(report: &Report, sink: &str, out: &mut dyn Write) -> io::Result<()> {
    let t = &report.totals;
    writeln!(
        out,
        "usage {} → {} UTC   ({sink})",
        minute(report.since_ms),
        minute(report.until_ms),
    )?;
    let mut filters = Vec::new();
    if let Some(tenant) = &report.tenant {
        filters.push(format!("tenant {tenant}"));
    }
    if let Some(model) = &report.model {
        filters.push(format!("model {model}"));
    }
    if !filters.is_empty() {
        writeln!(out, "only {}", filters.join(", "))?;
    }
    writeln!(
        out,
        "{} requests ({} ok, {} failed, {} cancelled)   tokens {} prompt ({} cached) / {} \
         completion   cost {}",
        t.requests,
        t.ok,
        t.failed,
        t.cancelled,
        count(t.prompt_tokens),
        count(t.cached_tokens),
        count(t.completion_tokens),
        usd(t.cost_micros),
    )?;
    if t.requests > 0 {
        writeln!(
            out,
            "latency mean {:.0} ms, p50 {} / p95 {} / p99 {} ms, max {} ms   {} calls   waited \
             {:.1} s in all",
            t.mean_latency_ms,
            t.latency_p50_ms,
            t.latency_p95_ms,
            t.latency_p99_ms,
            t.max_latency_ms,
            t.attempts,
            t.waited_ms as f64 / 1000.0
        )?;
    }
    if let (Some(p50), Some(p95), Some(p99)) = (t.ttft_p50_ms, t.ttft_p95_ms, t.ttft_p99_ms) {
        writeln!(
            out,
            "first token p50 {p50} / p95 {p95} / p99 {p99} ms (streamed requests)"
        )?;
    }
    let costs: Vec<u64> = report.series.points.iter().map(|p| p.cost_micros).collect();
    if let (Some(first), Some(last)) = (report.series.points.first(), report.series.points.last()) {
        let per = match report.series.bucket {
            Group::Hour => "hour",
            _ => "day",
        };
        writeln!(
            out,
            "cost per {per}  {}  {} … {}  (max {})",
            sparkline(&costs),
            first.label,
            last.label,
            usd(costs.iter().copied().max().unwrap_or(0)),
        )?;
    }
    if !report.rows.is_empty() {
        writeln!(out)?;
        let mut rows = vec![header(&report.by)];
        for row in &report.rows {
            let mut cells = row.key.clone();
            cells.extend(numbers(&row.totals));
            let share = fraction(row.totals.cost_micros, t.cost_micros);
            cells.push(format!("{} {:>3.0}%", bar(share), share * 100.0));
            rows.push(cells);
        }
        table::write(out, &rows, "", report.by.len())?;
    }
    if !report.budgets.is_empty() {
        writeln!(out)?;
        writeln!(out, "budgets (UTC days and months, within the period)")?;
        for b in &report.budgets {
            let mut parts = Vec::new();
            if let (Some(daily), Some((day, spent))) = (b.daily_usd, &b.busiest_day) {
                parts.push(format!(
                    "busiest day {day} ${spent:.4} of ${daily:.2} daily {} {:.0}%",
                    bar(spent / daily),
                    spent / daily * 100.0
                ));
            }
            if let Some(monthly) = b.monthly_usd {
                for (month, spent) in &b.months {
                    parts.push(format!(
                        "{month} ${spent:.4} of ${monthly:.2} monthly {} {:.0}%",
                        bar(spent / monthly),
                        spent / monthly * 100.0
                    ));
                }
            }
            writeln!(out, "  {} ({}): {}", b.tenant, b.tier, parts.join("; "))?;
        }
    }
    Ok(())
}

/// The groups as CSV with a header line; one row of totals when the report has no groups.
pub(crate) fn csv(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    let mut head: Vec<String> = report.by.iter().map(|g| g.as_str().to_owned()).collect();
    head.extend(
        [
            "requests",
            "ok",
            "failed",
            "cancelled",
            "prompt_tokens",
            "cached_tokens",
            "completion_tokens",
            "reasoning_tokens",
            "cost_usd",
            "calls",
            "mean_latency_ms",
            "max_latency_ms",
            "latency_p50_ms",
            "latency_p95_ms",
            "latency_p99_ms",
            "ttft_p50_ms",
            "ttft_p95_ms",
            "ttft_p99_ms",
            "waited_ms",
        ]
        .map(str::to_owned),
    );
    writeln!(out, "{}", head.join(","))?;
    let line = |key: &[String], t: &Totals| {
        let mut cells: Vec<String> = key.iter().map(|k| quoted(k)).collect();
        cells.extend([
            t.requests.to_string(),
            t.ok.to_string(),
            t.failed.to_string(),
            t.cancelled.to_string(),
            t.prompt_tokens.to_string(),
            t.cached_tokens.to_string(),
            t.completion_tokens.to_string(),
            t.reasoning_tokens.to_string(),
            format!("{:.6}", t.cost_usd()),
            t.attempts.to_string(),
            format!("{:.1}", t.mean_latency_ms),
            t.max_latency_ms.to_string(),
            t.latency_p50_ms.to_string(),
            t.latency_p95_ms.to_string(),
            t.latency_p99_ms.to_string(),
            optional(t.ttft_p50_ms),
            optional(t.ttft_p95_ms),
            optional(t.ttft_p99_ms),
            t.waited_ms.to_string(),
        ]);
        cells.join(",")
    };
    if report.by.is_empty() {
        writeln!(out, "{}", line(&[], &report.totals))?;
    }
    for row in &report.rows {
        writeln!(out, "{}", line(&row.key, &row.totals))?;
    }
    Ok(())
}

/// One tenant of `--check`.
#[derive(Debug)]
pub(crate) struct CheckLine {
    pub(crate) tenant: String,
    pub(crate) day_ledger: u64,
    pub(crate) day_records: u64,
    pub(crate) month_ledger: u64,
    pub(crate) month_records: u64,
    pub(crate) in_flight: u64,
}

/// The `--check` table; returns how many tenants differ.
pub(crate) fn check(lines: &[CheckLine], now: u64, out: &mut dyn Write) -> io::Result<usize> {
    let (y, m, _) = calendar::date_of(now);
    writeln!(
        out,
        "ledger spend against usage records, UTC day {} and month {y:04}-{m:02}",
        label(Group::Day, now)
    )?;
    if lines.is_empty() {
        writeln!(
            out,
            "no tenant with a tier: the ledger keeps no spend to check"
        )?;
        return Ok(0);
    }
    let diff = |ledger: u64, records: u64| {
        let d = ledger as i128 - records as i128;
        if d == 0 {
            "=".to_owned()
        } else {
            format!(
                "{}{}",
                if d > 0 { "+" } else { "-" },
                usd(d.unsigned_abs() as u64)
            )
        }
    };
    let mut rows = vec![
        [
            "TENANT",
            "DAY LEDGER",
            "DAY RECORDS",
            "DIFF",
            "MONTH LEDGER",
            "MONTH RECORDS",
            "DIFF",
            "IN FLIGHT",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    let mut differs = 0;
    for l in lines {
        if l.day_ledger != l.day_records || l.month_ledger != l.month_records {
            differs += 1;
        }
        rows.push(vec![
            l.tenant.clone(),
            usd6(l.day_ledger),
            usd6(l.day_records),
            diff(l.day_ledger, l.day_records),
            usd6(l.month_ledger),
            usd6(l.month_records),
            diff(l.month_ledger, l.month_records),
            l.in_flight.to_string(),
        ]);
    }
    table::write(out, &rows, "", 1)?;
    if differs == 0 {
        writeln!(out, "ok: every tenant's records add up to its ledger spend")?;
    } else {
        writeln!(
            out,
            "{differs} differ: requests in flight hold their estimate in the ledger until they \
             settle; records of a request that crossed midnight count on the day it ended; \
             records still in a spill file are not in the sink yet"
        )?;
    }
    Ok(differs)
}

fn header(by: &[Group]) -> Vec<String> {
    let mut head: Vec<String> = by.iter().map(|g| g.as_str().to_uppercase()).collect();
    head.extend(
        [
            "REQUESTS",
            "OK",
            "FAILED",
            "CANCELLED",
            "PROMPT",
            "COMPLETION",
            "P50 MS",
            "P95 MS",
            "P99 MS",
            "COST",
            "SHARE OF COST",
        ]
        .map(str::to_owned),
    );
    head
}

fn numbers(t: &Totals) -> Vec<String> {
    vec![
        t.requests.to_string(),
        t.ok.to_string(),
        t.failed.to_string(),
        t.cancelled.to_string(),
        count(t.prompt_tokens),
        count(t.completion_tokens),
        t.latency_p50_ms.to_string(),
        t.latency_p95_ms.to_string(),
        t.latency_p99_ms.to_string(),
        usd(t.cost_micros),
    ]
}

fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A horizontal bar of `share` (0..=1, more is cut) in eighths of a cell, padded to [`BAR`].
pub(crate) fn bar(share: f64) -> String {
    const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let eighths = (share.clamp(0.0, 1.0) * (BAR * 8) as f64).round() as usize;
    let mut s: String = "█".repeat(eighths / 8);
    if !eighths.is_multiple_of(8) {
        s.push(EIGHTHS[eighths % 8]);
    }
    let width = s.chars().count();
    s.push_str(&" ".repeat(BAR - width));
    s
}

/// A sparkline of `values`: `▁` for nothing, `▂`..`█` scaled to the largest; at most [`SPARK`]
/// cells (neighbouring values summed).
pub(crate) fn sparkline(values: &[u64]) -> String {
    const LEVELS: [char; 7] = ['▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let per = values.len().div_ceil(SPARK).max(1);
    let cells: Vec<u64> = values.chunks(per).map(|c| c.iter().sum()).collect();
    let max = cells.iter().copied().max().unwrap_or(0);
    cells
        .iter()
        .map(|&v| {
            if v == 0 || max == 0 {
                '▁'
            } else {
                let level = ((v as f64 / max as f64) * LEVELS.len() as f64).ceil() as usize;
                LEVELS[level.clamp(1, LEVELS.len()) - 1]
            }
        })
        .collect()
}

fn minute(ms: u64) -> String {
    format!(
        "{} {:02}:{:02}",
        label(Group::Day, ms),
        (ms / 3_600_000) % 24,
        (ms / 60_000) % 60
    )
}

fn usd(micros: u64) -> String {
    format!("${:.4}", micros as f64 / 1e6)
}

fn usd6(micros: u64) -> String {
    format!("${:.6}", micros as f64 / 1e6)
}

/// 1234 → `1,234`; 1234567 → `1.2M`.
fn count(n: u64) -> String {
    match n {
        0..=99_999 => {
            let s = n.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
        100_000..=999_999 => format!("{:.0}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn quoted(cell: &str) -> String {
    if cell.contains([',', '"', '\n']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_owned()
    }
}

/// A number, or an empty cell.
fn optional(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_sparklines_scale() {
        assert_eq!(bar(1.0), "█".repeat(BAR));
        assert_eq!(bar(0.0), " ".repeat(BAR));
        assert_eq!(bar(0.5).trim_end(), "█".repeat(BAR / 2));
        assert!(bar(0.005).starts_with('▏'));
        assert!(bar(0.01).starts_with('▎'));
        assert_eq!(sparkline(&[0, 1, 2, 4, 8]), "▁▂▃▅█");
        assert_eq!(sparkline(&[]), "");
        assert_eq!(sparkline(&vec![1; 200]).chars().count(), 67);
    }

    #[test]
    fn counts_and_csv_cells() {
        assert_eq!(count(1_234), "1,234");
        assert_eq!(count(99_999), "99,999");
        assert_eq!(count(250_000), "250k");
        assert_eq!(count(1_250_000), "1.2M");
        assert_eq!(quoted("a,b"), "\"a,b\"");
        assert_eq!(quoted("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
