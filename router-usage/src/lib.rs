//! Usage records for llmroute: one [`Record`] per finished request, handed to a [`Recorder`]
//! on the request's path (a channel send), written in batches to a [`Sink`] (an SQLite file or
//! a PostgreSQL schema) off it. A sink that is down or slow never fails or slows a request and
//! loses no record: batches go to an append-only spill file, replayed when the sink answers
//! again. [`Query`] gives totals over a period, grouped and filtered, from either sink;
//! [`Sink::recent`] the last records and [`Sink::hourly`] counts per hour.

mod accounts;
mod inbox;
mod query;
mod recent;
mod record;
mod recorder;
mod report;
mod retention;
mod sink;
mod spill;

pub use accounts::AccountCount;
pub use query::{Group, Query, Row, Totals, label};
pub use recent::{Hour, MAX_HOURS};
pub use record::{Outcome, Record};
pub use recorder::{Batching, Recorder, RecorderStats};
pub use report::{BudgetUse, Point, Report, Series, parse_instant, report};
pub use retention::{PRUNE_BATCH, keep_days};
pub use sink::{PostgresSink, SCHEMA_VERSION, Sink, SqliteSink, UsageError};

/// The default SQLite file's name inside the state directory.
pub const SQLITE_FILE: &str = "usage.sqlite";
/// The default spill file's name inside the state directory.
pub const SPILL_FILE: &str = "usage.spill";
/// The environment variable whose sink replaces `usage` of the configuration file.
pub const USAGE_ENV: &str = "LLMROUTE_USAGE";

/// Now, ms since the epoch, as the databases store it.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
