//! Where records are kept: an SQLite file or a PostgreSQL schema, with the same table, the same
//! versioned migrations (applied at start) and the same report query.

mod postgres;
mod sqlite;

use std::path::Path;

use router_core::config::{UsageSettings, UsageSink};

use crate::query::{Query, Row};
use crate::record::Record;

pub use self::postgres::PostgresSink;
pub use self::sqlite::SqliteSink;

/// A usage sink's failure. Never shows a password: sinks are named by
/// [`UsageSink::describe`].
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The sink could not be opened, written or read.
    #[error("usage sink {sink}: {message}")]
    Sink {
        /// The sink, redacted.
        sink: String,
        /// What failed.
        message: String,
    },
    /// The spill file could not be written or read.
    #[error("usage spill file {path}: {source}")]
    Spill {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The schema, one migration per version, in order: applied at start, each once, in a
/// transaction, recorded in `usage_migrations`. `{p}` is the table prefix (the PostgreSQL
/// schema, quoted, and a dot; nothing for SQLite). Written in the SQL both databases speak.
pub(crate) const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE {p}usage_records (
        id                TEXT PRIMARY KEY,
        at_ms             BIGINT NOT NULL,
        request_id        TEXT NOT NULL,
        tenant            TEXT,
        key_id            TEXT,
        model_asked       TEXT NOT NULL,
        route             TEXT,
        provider          TEXT,
        model             TEXT,
        prompt_tokens     BIGINT NOT NULL,
        cached_tokens     BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        reasoning_tokens  BIGINT NOT NULL,
        cost_micros       BIGINT NOT NULL,
        latency_ms        BIGINT NOT NULL,
        first_token_ms    BIGINT,
        attempts          INTEGER NOT NULL,
        failed_attempts   TEXT NOT NULL,
        waited_ms         BIGINT NOT NULL,
        outcome           TEXT NOT NULL,
        failure           TEXT,
        priority          TEXT NOT NULL,
        stream            BOOLEAN NOT NULL
    );
    CREATE INDEX usage_records_at ON {p}usage_records (at_ms);
    CREATE INDEX usage_records_tenant_at ON {p}usage_records (tenant, at_ms);",
    ),
    (
        2,
        "ALTER TABLE {p}usage_records ADD COLUMN queue_position BIGINT;",
    ),
];

/// The latest schema version.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The bookkeeping table of migrations.
pub(crate) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS {p}usage_migrations (
    version    BIGINT PRIMARY KEY,
    applied_ms BIGINT NOT NULL
)";

/// The columns written, in the order of [`columns`].
pub(crate) const COLUMNS: &str = "id, at_ms, request_id, tenant, key_id, model_asked, route, \
    provider, model, prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens, \
    cost_micros, latency_ms, first_token_ms, attempts, failed_attempts, waited_ms, outcome, \
    failure, priority, stream, queue_position";

/// The failed attempts' classes as stored: comma-separated.
pub(crate) fn failed_text(r: &Record) -> String {
    r.failed_attempts.join(",")
}

/// A sink, open.
// One per process, behind an `Arc`: the PostgreSQL variant's size costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Sink {
    /// An SQLite file.
    Sqlite(SqliteSink),
    /// A PostgreSQL schema.
    Postgres(PostgresSink),
}

impl Sink {
    /// Opens what `settings` names (`state_dir`: where the default SQLite file lives). SQLite is
    /// opened and migrated now; PostgreSQL is checked now and connected (and migrated) at the
    /// first write or query, so a server that is down delays nothing. `None` for `usage: none`.
    pub fn open(settings: &UsageSettings, state_dir: &Path) -> Result<Option<Sink>, UsageError> {
        Ok(match &settings.sink {
            UsageSink::None => None,
            UsageSink::Sqlite(path) => {
                let path = path
                    .clone()
                    .unwrap_or_else(|| state_dir.join(crate::SQLITE_FILE));
                Some(Sink::Sqlite(SqliteSink::open(&path)?))
            }
            UsageSink::Postgres(url) => Some(Sink::Postgres(PostgresSink::new(
                url,
                &settings.schema,
                settings.timeout,
            )?)),
        })
    }

    /// Writes `records`; a record already there (same id) is kept as it is.
    pub async fn write(&self, records: &[Record]) -> Result<(), UsageError> {
        match self {
            Sink::Sqlite(s) => s.write(records).await,
            Sink::Postgres(s) => s.write(records).await,
        }
    }

    /// The groups `query` asks for.
    pub async fn query(&self, query: &Query) -> Result<Vec<Row>, UsageError> {
        match self {
            Sink::Sqlite(s) => s.query(query).await,
            Sink::Postgres(s) => s.query(query).await,
        }
    }

    /// For output, without any password.
    pub fn describe(&self) -> String {
        match self {
            Sink::Sqlite(s) => s.describe(),
            Sink::Postgres(s) => s.describe(),
        }
    }
}
