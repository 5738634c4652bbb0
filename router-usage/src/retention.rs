//! Retention: records older than `usage.retain_days` are deleted in small batches, each its own
//! statement, so that writers wait for one batch at most; an hourly task keeps it so.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::query::{Dialect, Param};
use crate::sink::{Sink, UsageError};

/// Records deleted per statement.
pub const PRUNE_BATCH: u64 = 1_000;

/// How often the retention task prunes.
const EVERY: Duration = Duration::from_secs(3_600);

impl Sink {
    /// Deletes every record that ended before `before_ms`, at most [`PRUNE_BATCH`] per
    /// statement; returns how many.
    pub async fn prune(&self, before_ms: u64) -> Result<u64, UsageError> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        let mut deleted = 0;
        loop {
            let params = vec![Param::Int(before)];
            let n = match self {
                Sink::Sqlite(s) => {
                    s.execute(sql("usage_records", Dialect::Sqlite), params)
                        .await?
                }
                Sink::Postgres(s) => {
                    let sql = sql(&s.records_table(), Dialect::Postgres);
                    s.execute(sql, params).await?
                }
            };
            deleted += n;
            if n < PRUNE_BATCH {
                return Ok(deleted);
            }
        }
    }
}

fn sql(table: &str, dialect: Dialect) -> String {
    let before = match dialect {
        Dialect::Sqlite => "?1",
        Dialect::Postgres => "$1",
    };
    format!(
        "DELETE FROM {table} WHERE id IN \
         (SELECT id FROM {table} WHERE at_ms < {before} LIMIT {PRUNE_BATCH})"
    )
}

/// Starts the task that keeps `sink` to the last `days` days: at once, then every hour. A
/// failed prune is logged and tried again at the next hour.
pub fn keep_days(sink: Arc<Sink>, days: u64) {
    tokio::spawn(async move {
        loop {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let before =
                now.saturating_sub(days.saturating_mul(router_core::ledger::calendar::DAY));
            match sink.prune(before).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, days, "usage: records past retention deleted"),
                Err(e) => tracing::warn!(error = %e, "usage: records past retention not deleted"),
            }
            tokio::time::sleep(EVERY).await;
        }
    });
}
