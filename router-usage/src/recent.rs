//! The last records, newest first, and per-hour counts over a period: what the gateway's
//! dashboard shows, written once for SQLite and PostgreSQL.

use serde::Serialize;

use crate::query::{Cells, Dialect, Param};
use crate::record::{Outcome, Record};
use crate::sink::{Sink, UsageError};

/// One hour's requests, from the records that ended in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Hour {
    /// The hour's start, ms since the epoch (UTC, on the hour).
    pub start_ms: u64,
    /// Requests that ended in the hour, whatever their outcome.
    pub requests: u64,
    /// Of which failed (outcome `failed`: the caller got an error).
    pub failed: u64,
    /// Of which the caller got a 429 for: the last provider answered 429 (`rate_limited`),
    /// llmroute found no deployment with room (`no_capacity`), or a budget could not cover it
    /// (`budget`).
    pub limited: u64,
    /// Requests with at least one provider call answered 429, failed over or not.
    pub upstream_429: u64,
    /// What the hour's requests cost, micro-USD.
    pub cost_micros: u64,
}

const HOUR_MS: u64 = 3_600_000;

/// The most hours [`Sink::hourly`] gives: a leap year's.
pub const MAX_HOURS: u64 = 366 * 24;

/// The columns read back, in [`Record`]'s order; `attempts` widened (PostgreSQL's `INTEGER`).
const COLUMNS: &str = "id, at_ms, request_id, tenant, key_id, model_asked, route, provider, \
    model, prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens, cost_micros, \
    latency_ms, first_token_ms, CAST(attempts AS BIGINT), failed_attempts, waited_ms, outcome, \
    failure, priority, stream, queue_position";

impl Sink {
    /// The last `limit` records to end, newest first (ties: by id).
    pub async fn recent(&self, limit: u32) -> Result<Vec<Record>, UsageError> {
        let sql = |table: &str| {
            format!("SELECT {COLUMNS} FROM {table} ORDER BY at_ms DESC, id DESC LIMIT {limit}")
        };
        match self {
            Sink::Sqlite(s) => s.select(sql("usage_records"), Vec::new(), decode).await,
            Sink::Postgres(s) => s.select(sql(&s.records_table()), Vec::new(), decode).await,
        }
    }

    /// Every hour from the one holding `since_ms` to the one before `until_ms`, oldest first,
    /// counting the records that ended in `[since_ms, until_ms)`; hours without any are zero. At
    /// most [`MAX_HOURS`] hours, the first ones.
    pub async fn hourly(&self, since_ms: u64, until_ms: u64) -> Result<Vec<Hour>, UsageError> {
        let params = vec![Param::Int(int(since_ms)), Param::Int(int(until_ms))];
        let rows = match self {
            Sink::Sqlite(s) => {
                let sql = hourly_sql("usage_records", Dialect::Sqlite);
                s.select(sql, params, decode_hour).await?
            }
            Sink::Postgres(s) => {
                let sql = hourly_sql(&s.records_table(), Dialect::Postgres);
                s.select(sql, params, decode_hour).await?
            }
        };
        let first = since_ms / HOUR_MS;
        let last = (until_ms.saturating_sub(1) / HOUR_MS).min(first + MAX_HOURS - 1);
        let mut hours: Vec<Hour> = (first..=last.max(first))
            .map(|h| Hour {
                start_ms: h * HOUR_MS,
                ..Hour::default()
            })
            .collect();
        for row in rows {
            let at = (row.start_ms / HOUR_MS).saturating_sub(first);
            if let Some(slot) = usize::try_from(at).ok().and_then(|i| hours.get_mut(i)) {
                *slot = row;
            }
        }
        Ok(hours)
    }
}

fn hourly_sql(table: &str, dialect: Dialect) -> String {
    let (since, until) = match dialect {
        Dialect::Sqlite => ("?1", "?2"),
        Dialect::Postgres => ("$1", "$2"),
    };
    let count = |condition: &str| {
        format!("CAST(COALESCE(SUM(CASE WHEN {condition} THEN 1 ELSE 0 END), 0) AS BIGINT)")
    };
    format!(
        "SELECT at_ms / {HOUR_MS}, COUNT(*), {}, {}, {}, \
         CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) \
         FROM {table} WHERE at_ms >= {since} AND at_ms < {until} \
         GROUP BY at_ms / {HOUR_MS} ORDER BY at_ms / {HOUR_MS}",
        count("outcome = 'failed'"),
        count(crate::accounts::LIMITED),
        count("failed_attempts LIKE '%rate_limited%'"),
    )
}

fn decode_hour(cells: &dyn Cells) -> Result<Hour, String> {
    let n = |i: usize| cells.int(i).map(|v| v.max(0) as u64);
    Ok(Hour {
        start_ms: n(0)? * HOUR_MS,
        requests: n(1)?,
        failed: n(2)?,
        limited: n(3)?,
        upstream_429: n(4)?,
        cost_micros: n(5)?,
    })
}

fn decode(cells: &dyn Cells) -> Result<Record, String> {
    let n = |i: usize| cells.int(i).map(|v| v.max(0) as u64);
    let outcome = cells.text(19)?;
    let failed = cells.text(17)?;
    Ok(Record {
        id: cells.text(0)?,
        at_ms: n(1)?,
        request_id: cells.text(2)?,
        tenant: cells.opt_text(3)?,
        key_id: cells.opt_text(4)?,
        model_asked: cells.text(5)?,
        route: cells.opt_text(6)?,
        provider: cells.opt_text(7)?,
        model: cells.opt_text(8)?,
        prompt_tokens: n(9)?,
        cached_tokens: n(10)?,
        completion_tokens: n(11)?,
        reasoning_tokens: n(12)?,
        cost_micros: n(13)?,
        latency_ms: n(14)?,
        first_token_ms: cells.opt_int(15)?.map(|v| v.max(0) as u64),
        attempts: u32::try_from(n(16)?).unwrap_or(u32::MAX),
        failed_attempts: failed
            .split(',')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect(),
        waited_ms: n(18)?,
        queue_position: cells.opt_int(23)?.map(|v| v.max(0) as u64),
        outcome: Outcome::parse(&outcome).ok_or_else(|| {
            format!("a record's outcome `{outcome}` is not ok, failed or cancelled")
        })?,
        failure: cells.opt_text(20)?,
        priority: cells.text(21)?,
        stream: cells.flag(22)?,
    })
}

fn int(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}
