//! Totals over a period, grouped and filtered: the one query behind `llmroute usage`,
//! `/v1/usage` and `usage --check`, written once for SQLite and PostgreSQL.

use router_core::ledger::calendar;
use serde::Serialize;

/// What records are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// UTC day of the request's end (`2026-11-30`).
    Day,
    /// UTC hour (`2026-11-30 14:00`).
    Hour,
    /// Tenant (`-` for none).
    Tenant,
    /// The model that served (the one asked for, when none did).
    Model,
    /// The provider that served (`-` for none).
    Provider,
    /// `ok`, `failed` or `cancelled`.
    Outcome,
}

impl Group {
    /// Every grouping.
    pub const ALL: [Group; 6] = [
        Group::Day,
        Group::Hour,
        Group::Tenant,
        Group::Model,
        Group::Provider,
        Group::Outcome,
    ];

    /// Its name: `day`, `hour`, `tenant`, `model`, `provider`, `outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Day => "day",
            Group::Hour => "hour",
            Group::Tenant => "tenant",
            Group::Model => "model",
            Group::Provider => "provider",
            Group::Outcome => "outcome",
        }
    }

    /// The grouping named `name`; the error lists the names.
    pub fn parse(name: &str) -> Result<Group, String> {
        Group::ALL
            .into_iter()
            .find(|g| g.as_str() == name.trim())
            .ok_or_else(|| {
                format!(
                    "unknown grouping `{name}`; use day, hour, tenant, model, provider or outcome \
                     (several: day,tenant)"
                )
            })
    }

    /// The SQL expression grouped on.
    fn expr(self) -> &'static str {
        match self {
            Group::Day => "at_ms / 86400000",
            Group::Hour => "at_ms / 3600000",
            // `router_core::config::NO_TENANT`, which no tenant may be called.
            Group::Tenant => "COALESCE(tenant, '-')",
            Group::Model => "COALESCE(model, model_asked)",
            Group::Provider => "COALESCE(provider, '-')",
            Group::Outcome => "outcome",
        }
    }

    /// Whether the column is a number (a day or an hour since the epoch).
    fn numeric(self) -> bool {
        matches!(self, Group::Day | Group::Hour)
    }
}

/// Which records, and how grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// From, ms since the epoch (inclusive).
    pub since_ms: u64,
    /// Until, ms since the epoch (exclusive).
    pub until_ms: u64,
    /// Groupings, outermost first; empty: one row of totals.
    pub by: Vec<Group>,
    /// Only this tenant's records.
    pub tenant: Option<String>,
    /// Only records asking for or served by this model.
    pub model: Option<String>,
}

/// Sums over a set of records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Requests.
    pub requests: u64,
    /// Of which answered.
    pub ok: u64,
    /// Of which failed.
    pub failed: u64,
    /// Of which cancelled by the caller.
    pub cancelled: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Cached prompt tokens.
    pub cached_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
    /// Cost, micro-USD.
    pub cost_micros: u64,
    /// Provider calls.
    pub attempts: u64,
    /// Mean latency, ms.
    pub mean_latency_ms: f64,
    /// Longest latency, ms.
    pub max_latency_ms: u64,
    /// Latency percentiles, ms (nearest rank: the least latency at least that share of the
    /// requests took no longer than).
    pub latency_p50_ms: u64,
    /// 95th percentile.
    pub latency_p95_ms: u64,
    /// 99th percentile.
    pub latency_p99_ms: u64,
    /// Time to first token percentiles over the streamed requests that had one, ms; `None`
    /// without any.
    pub ttft_p50_ms: Option<u64>,
    /// 95th percentile.
    pub ttft_p95_ms: Option<u64>,
    /// 99th percentile.
    pub ttft_p99_ms: Option<u64>,
    /// Time waited for capacity, summed, ms.
    pub waited_ms: u64,
}

impl Totals {
    /// The cost in USD.
    pub fn cost_usd(&self) -> f64 {
        self.cost_micros as f64 / 1e6
    }
}

/// One group: its key (one value per grouping, in order) and its totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The group's values: a date (`2026-11-30`), an hour (`2026-11-30 14:00`), or a name.
    pub key: Vec<String>,
    /// The group's start, ms, when grouped by day or hour (the first such grouping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// Its sums.
    #[serde(flatten)]
    pub totals: Totals,
}

/// The placeholder style of a database: SQLite `?1`, PostgreSQL `$1`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A parameter of the query.
#[derive(Debug, Clone)]
pub(crate) enum Param {
    Int(i64),
    Text(String),
}

/// The totals' columns, after the group keys.
const TOTALS: &str = "COUNT(*), \
    COALESCE(SUM(CASE WHEN outcome = 'ok' THEN 1 ELSE 0 END), 0), \
    COALESCE(SUM(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END), 0), \
    COALESCE(SUM(CASE WHEN outcome = 'cancelled' THEN 1 ELSE 0 END), 0), \
    CAST(COALESCE(SUM(prompt_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(cached_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(completion_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(reasoning_tokens), 0) AS BIGINT), \
    CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT), \
    CAST(COALESCE(SUM(attempts), 0) AS BIGINT), \
    CAST(COALESCE(AVG(latency_ms), 0) AS DOUBLE PRECISION), \
    CAST(COALESCE(MAX(latency_ms), 0) AS BIGINT), \
    CAST(COALESCE(SUM(waited_ms), 0) AS BIGINT), \
    CAST(COALESCE(MIN(CASE WHEN rl * 100 >= n * 50 THEN latency_ms END), 0) AS BIGINT), \
    CAST(COALESCE(MIN(CASE WHEN rl * 100 >= n * 95 THEN latency_ms END), 0) AS BIGINT), \
    CAST(COALESCE(MIN(CASE WHEN rl * 100 >= n * 99 THEN latency_ms END), 0) AS BIGINT), \
    CAST(MIN(CASE WHEN first_token_ms IS NOT NULL AND rt * 100 >= nt * 50 \
        THEN first_token_ms END) AS BIGINT), \
    CAST(MIN(CASE WHEN first_token_ms IS NOT NULL AND rt * 100 >= nt * 95 \
        THEN first_token_ms END) AS BIGINT), \
    CAST(MIN(CASE WHEN first_token_ms IS NOT NULL AND rt * 100 >= nt * 99 \
        THEN first_token_ms END) AS BIGINT)";

/// The records of a query with, per group, each one's rank by latency (`rl`) and by time to
/// first token among those that have one (`rt`), and the group's counts of each (`n`, `nt`):
/// what the percentiles of [`TOTALS`] pick from. One text for SQLite and PostgreSQL (window
/// functions, both); `{keys}` is the `PARTITION BY` list, or nothing.
fn ranked(table: &str, filter: &str, keys: &str) -> String {
    let (by, by_and) = if keys.is_empty() {
        (String::new(), String::new())
    } else {
        (format!("PARTITION BY {keys}"), format!("{keys}, "))
    };
    format!(
        "(SELECT *, \
         ROW_NUMBER() OVER ({by} ORDER BY latency_ms) AS rl, \
         COUNT(*) OVER ({by}) AS n, \
         ROW_NUMBER() OVER (PARTITION BY {by_and}first_token_ms IS NULL ORDER BY first_token_ms) \
         AS rt, \
         COUNT(first_token_ms) OVER ({by}) AS nt \
         FROM {table} WHERE {filter}) AS ranked"
    )
}

impl Query {
    /// The SQL over `table` and its parameters, in `dialect`.
    pub(crate) fn sql(&self, table: &str, dialect: Dialect) -> (String, Vec<Param>) {
        let mut params = vec![
            Param::Int(clamp(self.since_ms)),
            Param::Int(clamp(self.until_ms)),
        ];
        let place = |params: &mut Vec<Param>, p: Param| {
            params.push(p);
            match dialect {
                Dialect::Sqlite => format!("?{}", params.len()),
                Dialect::Postgres => format!("${}", params.len()),
            }
        };
        let (since, until) = match dialect {
            Dialect::Sqlite => ("?1", "?2"),
            Dialect::Postgres => ("$1", "$2"),
        };
        let mut filter = format!("at_ms >= {since} AND at_ms < {until}");
        if let Some(tenant) = &self.tenant {
            let p = place(&mut params, Param::Text(tenant.clone()));
            filter.push_str(&format!(" AND tenant = {p}"));
        }
        if let Some(model) = &self.model {
            let p = place(&mut params, Param::Text(model.clone()));
            filter.push_str(&format!(" AND (model = {p} OR model_asked = {p})"));
        }
        let keys = self
            .by
            .iter()
            .map(|g| g.expr())
            .collect::<Vec<_>>()
            .join(", ");
        let from = ranked(table, &filter, &keys);
        let sql = if keys.is_empty() {
            format!("SELECT {TOTALS} FROM {from}")
        } else {
            format!("SELECT {keys}, {TOTALS} FROM {from} GROUP BY {keys} ORDER BY {keys}")
        };
        (sql, params)
    }

    /// One result row, read through `cells`.
    pub(crate) fn decode(&self, cells: &dyn Cells) -> Result<Row, String> {
        let mut key = Vec::with_capacity(self.by.len());
        let mut start_ms = None;
        for (i, g) in self.by.iter().enumerate() {
            if g.numeric() {
                let n = cells.int(i)?.max(0) as u64;
                let ms = match g {
                    Group::Day => n * calendar::DAY,
                    _ => n * 3_600_000,
                };
                start_ms.get_or_insert(ms);
                key.push(label(*g, ms));
            } else {
                key.push(cells.text(i)?);
            }
        }
        let at = |j: usize| self.by.len() + j;
        let int = |j: usize| cells.int(at(j)).map(|v| v.max(0) as u64);
        let opt = |j: usize| cells.opt_int(at(j)).map(|v| v.map(|v| v.max(0) as u64));
        let totals = Totals {
            requests: int(0)?,
            ok: int(1)?,
            failed: int(2)?,
            cancelled: int(3)?,
            prompt_tokens: int(4)?,
            cached_tokens: int(5)?,
            completion_tokens: int(6)?,
            reasoning_tokens: int(7)?,
            cost_micros: int(8)?,
            attempts: int(9)?,
            mean_latency_ms: cells.float(at(10))?,
            max_latency_ms: int(11)?,
            waited_ms: int(12)?,
            latency_p50_ms: int(13)?,
            latency_p95_ms: int(14)?,
            latency_p99_ms: int(15)?,
            ttft_p50_ms: opt(16)?,
            ttft_p95_ms: opt(17)?,
            ttft_p99_ms: opt(18)?,
        };
        Ok(Row {
            key,
            start_ms,
            totals,
        })
    }
}

/// A day's or an hour's label.
pub fn label(group: Group, ms: u64) -> String {
    let (y, m, d) = calendar::date_of(ms);
    match group {
        Group::Hour => format!("{y:04}-{m:02}-{d:02} {:02}:00", (ms / 3_600_000) % 24),
        _ => format!("{y:04}-{m:02}-{d:02}"),
    }
}

fn clamp(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A result row's cells, whichever the database.
pub(crate) trait Cells {
    fn int(&self, i: usize) -> Result<i64, String>;
    fn float(&self, i: usize) -> Result<f64, String>;
    fn text(&self, i: usize) -> Result<String, String>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, String>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, String>;
    fn flag(&self, i: usize) -> Result<bool, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_groupings_make_one_statement_per_dialect() {
        let q = Query {
            since_ms: 10,
            until_ms: 20,
            by: vec![Group::Day, Group::Tenant],
            tenant: Some("acme".into()),
            model: Some("gpt".into()),
        };
        let (sql, params) = q.sql("t", Dialect::Postgres);
        assert!(sql.contains("tenant = $3"), "{sql}");
        assert!(sql.contains("model = $4 OR model_asked = $4"), "{sql}");
        assert!(sql.contains("GROUP BY at_ms / 86400000, COALESCE(tenant, '-')"));
        assert_eq!(params.len(), 4);
        let (sql, _) = q.sql("t", Dialect::Sqlite);
        assert!(
            sql.contains("at_ms >= ?1 AND at_ms < ?2 AND tenant = ?3"),
            "{sql}"
        );
    }

    #[test]
    fn labels_are_utc_dates_and_hours() {
        // 2026-11-29T08:41:54Z
        assert_eq!(label(Group::Day, 1_795_941_714_000), "2026-11-29");
        assert_eq!(label(Group::Hour, 1_795_939_200_000), "2026-11-29 08:00");
    }
}
