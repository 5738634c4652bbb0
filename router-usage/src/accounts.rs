//! Requests per tenant and key over a period, from the usage records: what the dashboard and the
//! admin API show as each tenant's and key's requests today, written once for SQLite and
//! PostgreSQL.

use serde::Serialize;

use crate::query::{Cells, Dialect, Param};
use crate::sink::{Sink, UsageError};

/// The failures a caller got a 429 for: a provider's 429 (`rate_limited`), no deployment with
/// room (`no_capacity`), or a budget that cannot cover the request (`budget`).
pub(crate) const LIMITED: &str = "failure IN ('rate_limited', 'no_capacity', 'budget')";

/// The requests of one tenant and key over a period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountCount {
    /// The tenant (`None`: none).
    pub tenant: Option<String>,
    /// The key's id (`None`: none).
    pub key_id: Option<String>,
    /// Requests, whatever their outcome.
    pub requests: u64,
    /// Of which the caller got a 429 for (see [`LIMITED`]).
    pub limited: u64,
    /// Their cost, micro-USD.
    pub cost_micros: u64,
}

impl Sink {
    /// Per tenant and key, the records that ended in `[since_ms, until_ms)`.
    pub async fn by_account(
        &self,
        since_ms: u64,
        until_ms: u64,
    ) -> Result<Vec<AccountCount>, UsageError> {
        let int = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
        let params = vec![Param::Int(int(since_ms)), Param::Int(int(until_ms))];
        match self {
            Sink::Sqlite(s) => {
                let sql = sql("usage_records", Dialect::Sqlite);
                s.select(sql, params, decode).await
            }
            Sink::Postgres(s) => {
                let sql = sql(&s.records_table(), Dialect::Postgres);
                s.select(sql, params, decode).await
            }
        }
    }
}

fn sql(table: &str, dialect: Dialect) -> String {
    let (since, until) = match dialect {
        Dialect::Sqlite => ("?1", "?2"),
        Dialect::Postgres => ("$1", "$2"),
    };
    format!(
        "SELECT tenant, key_id, COUNT(*), \
         CAST(COALESCE(SUM(CASE WHEN {LIMITED} THEN 1 ELSE 0 END), 0) AS BIGINT), \
         CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) \
         FROM {table} WHERE at_ms >= {since} AND at_ms < {until} \
         GROUP BY tenant, key_id ORDER BY tenant, key_id"
    )
}

fn decode(cells: &dyn Cells) -> Result<AccountCount, String> {
    let n = |i: usize| cells.int(i).map(|v| v.max(0) as u64);
    Ok(AccountCount {
        tenant: cells.opt_text(0)?,
        key_id: cells.opt_text(1)?,
        requests: n(2)?,
        limited: n(3)?,
        cost_micros: n(4)?,
    })
}
