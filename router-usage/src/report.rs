//! A usage report over a period: totals, the groups asked for, the spend over time, and each
//! tenant's spend against its budgets. Built once here for `llmroute usage` and `/v1/usage`.

use router_core::config::Registry;
use router_core::ledger::calendar;
use serde::Serialize;

use crate::query::{Group, Query, Row, Totals, label};
use crate::sink::{Sink, UsageError};

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// From, ms since the epoch (inclusive).
    pub since_ms: u64,
    /// Until, ms since the epoch (exclusive).
    pub until_ms: u64,
    /// The groupings, outermost first.
    pub by: Vec<Group>,
    /// The tenant filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The model filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Everything in the period.
    pub totals: Totals,
    /// The groups, in order of their keys.
    pub rows: Vec<Row>,
    /// Spend over the period, per hour (periods up to 2 days) or per day.
    pub series: Series,
    /// Each tenant with a budget that spent in the period: its spend against the budgets.
    pub budgets: Vec<BudgetUse>,
}

/// Spend over time, one point per bucket of the period (empty buckets included).
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// `hour` or `day`.
    pub bucket: Group,
    /// The buckets in order.
    pub points: Vec<Point>,
}

/// One bucket.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Its label (`2026-11-30` or `2026-11-30 14:00`).
    pub label: String,
    /// Its start, ms.
    pub start_ms: u64,
    /// Requests that ended in it.
    pub requests: u64,
    /// Their cost, micro-USD.
    pub cost_micros: u64,
}

/// A tenant's spend in the period against its tier's budgets (UTC days and months, as the
/// ledger enforces them).
#[derive(Debug, Clone, Serialize)]
pub struct BudgetUse {
    /// The tenant.
    pub tenant: String,
    /// Its tier.
    pub tier: String,
    /// The daily budget, USD.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_usd: Option<f64>,
    /// The day of the period it spent most on, and how much (USD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest_day: Option<(String, f64)>,
    /// The monthly budget, USD.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monthly_usd: Option<f64>,
    /// Each month the period touches (`2026-11`) and the spend in it within the period (USD).
    pub months: Vec<(String, f64)>,
}

/// Most buckets a series holds; longer periods are cut to their last buckets.
const MAX_POINTS: usize = 400;

/// Builds the report of `query` from `sink`; budgets from `registry`'s tiers.
pub async fn report(sink: &Sink, registry: &Registry, query: &Query) -> Result<Report, UsageError> {
    let totals_query = Query {
        by: Vec::new(),
        ..query.clone()
    };
    let totals = sink
        .query(&totals_query)
        .await?
        .into_iter()
        .next()
        .map(|r| r.totals)
        .unwrap_or_default();
    let rows = if query.by.is_empty() {
        Vec::new()
    } else {
        sink.query(query).await?
    };
    let bucket = if query.until_ms.saturating_sub(query.since_ms) <= 2 * calendar::DAY {
        Group::Hour
    } else {
        Group::Day
    };
    let by_bucket = sink
        .query(&Query {
            by: vec![bucket],
            ..query.clone()
        })
        .await?;
    let series = series(bucket, query.since_ms, query.until_ms, &by_bucket);
    let by_tenant_day = sink
        .query(&Query {
            by: vec![Group::Tenant, Group::Day],
            ..query.clone()
        })
        .await?;
    let budgets = budgets(registry, &by_tenant_day);
    Ok(Report {
        since_ms: query.since_ms,
        until_ms: query.until_ms,
        by: query.by.clone(),
        tenant: query.tenant.clone(),
        model: query.model.clone(),
        totals,
        rows,
        series,
        budgets,
    })
}

fn series(bucket: Group, since: u64, until: u64, rows: &[Row]) -> Series {
    let size = match bucket {
        Group::Hour => 3_600_000,
        _ => calendar::DAY,
    };
    let first = since / size * size;
    let count = (until.saturating_sub(first)).div_ceil(size).max(1) as usize;
    let skip = count.saturating_sub(MAX_POINTS);
    let mut points: Vec<Point> = (skip..count)
        .map(|i| {
            let start_ms = first + i as u64 * size;
            Point {
                label: label(bucket, start_ms),
                start_ms,
                requests: 0,
                cost_micros: 0,
            }
        })
        .collect();
    for row in rows {
        let Some(start) = row.start_ms else { continue };
        let Some(i) = ((start.saturating_sub(first)) / size).checked_sub(skip as u64) else {
            continue;
        };
        if let Some(p) = points.get_mut(i as usize) {
            p.requests += row.totals.requests;
            p.cost_micros += row.totals.cost_micros;
        }
    }
    Series { bucket, points }
}

fn budgets(registry: &Registry, by_tenant_day: &[Row]) -> Vec<BudgetUse> {
    let mut out: Vec<BudgetUse> = Vec::new();
    for row in by_tenant_day {
        let (Some(tenant), Some(day_ms)) = (row.key.first(), row.start_ms) else {
            continue;
        };
        // Requests without a tenant have no budget, whatever `default_tier` says.
        if tenant == router_core::config::NO_TENANT {
            continue;
        }
        let Some(tier) = registry.tier_of(tenant) else {
            continue;
        };
        let budget = tier.budget;
        if budget.daily_usd.is_none() && budget.monthly_usd.is_none() {
            continue;
        }
        if out.last().is_none_or(|b| &b.tenant != tenant) {
            out.push(BudgetUse {
                tenant: tenant.clone(),
                tier: tier.name.clone(),
                daily_usd: budget.daily_usd,
                busiest_day: None,
                monthly_usd: budget.monthly_usd,
                months: Vec::new(),
            });
        }
        let Some(entry) = out.last_mut() else {
            continue;
        };
        let usd = row.totals.cost_usd();
        if entry
            .busiest_day
            .as_ref()
            .is_none_or(|(_, most)| usd > *most)
        {
            entry.busiest_day = Some((label(Group::Day, day_ms), usd));
        }
        let (y, m, _) = calendar::date_of(day_ms);
        let month = format!("{y:04}-{m:02}");
        match entry.months.last_mut() {
            Some((name, spent)) if *name == month => *spent += usd,
            _ => entry.months.push((month, usd)),
        }
    }
    out
}

/// Reads an instant as `--since` / `--until` (and `/v1/usage`'s `since` / `until`) take it:
/// a time ago (`90s`, `30m`, `24h`, `7d`, `2w`), a UTC date (`2026-11-01`: its midnight), or a
/// UTC date and time (`2026-11-01T14:00`, seconds and a trailing `Z` allowed).
pub fn parse_instant(text: &str, now_ms: u64) -> Result<u64, String> {
    let text = text.trim();
    let err = || {
        format!(
            "`{text}` is not a time: write a time ago (30m, 24h, 7d, 2w) or a UTC date \
             (2026-11-01, 2026-11-01T14:00)"
        )
    };
    if let Some(unit) = text.chars().last().filter(char::is_ascii_alphabetic)
        && !text.contains('-')
    {
        let n: u64 = text[..text.len() - 1].parse().map_err(|_| err())?;
        let ms = match unit {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => calendar::DAY,
            'w' => 7 * calendar::DAY,
            _ => return Err(err()),
        };
        return Ok(now_ms.saturating_sub(n.saturating_mul(ms)));
    }
    let (date, time) = match text.split_once('T') {
        Some((d, t)) => (d, Some(t.trim_end_matches('Z'))),
        None => (text, None),
    };
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return Err(err());
    };
    let (y, m, d) = (
        y.parse::<i64>().map_err(|_| err())?,
        m.parse::<u64>().map_err(|_| err())?,
        d.parse::<u64>().map_err(|_| err())?,
    );
    let midnight = calendar::midnight(y, m, d).ok_or_else(err)?;
    let Some(time) = time else {
        return Ok(midnight);
    };
    let hms: Vec<&str> = time.split(':').collect();
    let field = |i: usize, max: u64| -> Result<u64, String> {
        match hms.get(i) {
            None => Ok(0),
            Some(v) => v.parse::<u64>().ok().filter(|n| *n <= max).ok_or_else(err),
        }
    };
    if hms.len() < 2 || hms.len() > 3 {
        return Err(err());
    }
    Ok(midnight + field(0, 23)? * 3_600_000 + field(1, 59)? * 60_000 + field(2, 59)? * 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-11-30T12:00:00Z
    const NOON: u64 = 1_796_040_000_000;

    #[test]
    fn instants_ago_dates_and_times() {
        assert_eq!(parse_instant("24h", NOON), Ok(NOON - 86_400_000));
        assert_eq!(parse_instant("7d", NOON), Ok(NOON - 7 * 86_400_000));
        assert_eq!(parse_instant("30m", NOON), Ok(NOON - 1_800_000));
        assert_eq!(parse_instant("2026-11-30", NOON), Ok(NOON - 43_200_000));
        // Years past any calendar arithmetic are refused, not wrapped.
        for far in [
            "600000000-01-01",
            "9223372036854775807-12-31",
            "10000-01-01T00:00",
        ] {
            assert!(parse_instant(far, NOON).is_err(), "{far}");
        }
        assert!(parse_instant("9999-12-31", NOON).is_ok());
        assert_eq!(
            parse_instant("2026-11-30T14:00Z", NOON),
            Ok(NOON + 7_200_000)
        );
        assert_eq!(
            parse_instant("2026-11-30T12:00:30", NOON),
            Ok(NOON + 30_000)
        );
        for bad in [
            "yesterday",
            "24x",
            "2026-13-01",
            "2026-02-30",
            "2026-11-30T25:00",
            "h",
        ] {
            let e = parse_instant(bad, NOON).expect_err(bad);
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn a_series_has_every_bucket_of_the_period() {
        let row = |start_ms: u64, cost: u64| Row {
            key: vec![label(Group::Hour, start_ms)],
            start_ms: Some(start_ms),
            totals: Totals {
                requests: 1,
                cost_micros: cost,
                ..Totals::default()
            },
        };
        let s = series(
            Group::Hour,
            NOON - 3 * 3_600_000 + 5,
            NOON + 5,
            &[row(NOON - 3_600_000, 7), row(NOON, 9)],
        );
        let costs: Vec<u64> = s.points.iter().map(|p| p.cost_micros).collect();
        assert_eq!(costs, vec![0, 0, 7, 9]);
        assert_eq!(s.points[3].label, "2026-11-30 12:00");
    }
}
