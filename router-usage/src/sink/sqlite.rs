//! The SQLite sink: one file, shared by the processes of one machine (WAL, busy timeout), written
//! on a blocking thread so the runtime never waits on the disk.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params, params_from_iter};

use super::{COLUMNS, MIGRATIONS, MIGRATIONS_TABLE, UsageError, failed_text};
use crate::query::{Cells, Dialect, Param, Query, Row};
use crate::record::Record;

/// How long a write waits for another process holding the file.
const BUSY: std::time::Duration = std::time::Duration::from_secs(5);

/// Records in an SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteSink {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl SqliteSink {
    /// Opens (creating it and its directory when missing) and migrates the file at `path`.
    pub fn open(path: &Path) -> Result<Self, UsageError> {
        let err = |message: String| UsageError::Sink {
            sink: format!("sqlite {}", path.display()),
            message,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                err(format!(
                    "cannot create the directory {}: {e}; set usage to a writable path",
                    dir.display()
                ))
            })?;
        }
        let mut conn = Connection::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
        let setup = |conn: &mut Connection| -> rusqlite::Result<()> {
            conn.busy_timeout(BUSY)?;
            let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            migrate(conn)
        };
        setup(&mut conn).map_err(|e| err(format!("cannot set up the usage tables: {e}")))?;
        Ok(Self {
            path: path.to_owned(),
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// `sqlite PATH`.
    pub fn describe(&self) -> String {
        format!("sqlite {}", self.path.display())
    }

    /// Writes `records` in one transaction.
    pub async fn write(&self, records: &[Record]) -> Result<(), UsageError> {
        let records = records.to_vec();
        self.blocking(move |conn| insert(conn, &records)).await
    }

    /// The rows of `query`.
    pub async fn query(&self, query: &Query) -> Result<Vec<Row>, UsageError> {
        let (sql, params) = query.sql("usage_records", Dialect::Sqlite);
        let query = query.clone();
        self.select(sql, params, move |cells| query.decode(cells))
            .await
    }

    /// Runs the statement `sql` with `params`; returns the rows it changed.
    pub(crate) async fn execute(&self, sql: String, params: Vec<Param>) -> Result<u64, UsageError> {
        self.blocking(move |conn| {
            let values = params.iter().map(|p| match p {
                Param::Int(n) => rusqlite::types::Value::Integer(*n),
                Param::Text(t) => rusqlite::types::Value::Text(t.clone()),
            });
            conn.execute(&sql, params_from_iter(values))
                .map(|n| n as u64)
        })
        .await
    }

    /// The rows of `sql` with `params`, each read by `decode`.
    pub(crate) async fn select<T: Send + 'static>(
        &self,
        sql: String,
        params: Vec<Param>,
        decode: impl Fn(&dyn Cells) -> Result<T, String> + Send + 'static,
    ) -> Result<Vec<T>, UsageError> {
        self.blocking(move |conn| {
            let mut stmt = conn.prepare(&sql)?;
            let values = params.iter().map(|p| match p {
                Param::Int(n) => rusqlite::types::Value::Integer(*n),
                Param::Text(t) => rusqlite::types::Value::Text(t.clone()),
            });
            let mut rows = stmt.query(params_from_iter(values))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let row = decode(&SqliteCells(row)).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        0,
                        rusqlite::types::Type::Null,
                        e.into(),
                    )
                })?;
                out.push(row);
            }
            Ok(out)
        })
        .await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, UsageError> {
        let conn = self.conn.clone();
        let sink = self.describe();
        let joined = tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut conn)
        })
        .await;
        match joined {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(UsageError::Sink {
                sink,
                message: e.to_string(),
            }),
            Err(e) => Err(UsageError::Sink {
                sink,
                message: format!("the writing thread failed: {e}"),
            }),
        }
    }
}

/// Applies the migrations not applied yet, each in its own immediate transaction (so two
/// processes starting together apply each once). A file with every one applied is only read:
/// opening it then never waits behind another process's write.
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    if migrated(conn)? {
        return Ok(());
    }
    conn.execute_batch(&MIGRATIONS_TABLE.replace("{p}", ""))?;
    for (version, sql) in MIGRATIONS {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if !applied(&tx, *version)? {
            tx.execute_batch(&sql.replace("{p}", ""))?;
            tx.execute(
                "INSERT INTO usage_migrations (version, applied_ms) VALUES (?1, ?2)",
                params![version, crate::now_ms()],
            )?;
        }
        tx.commit()?;
    }
    Ok(())
}

/// Whether every migration is applied, read without a write lock.
fn migrated(conn: &Connection) -> rusqlite::Result<bool> {
    let table: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'usage_migrations'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if table.is_none() {
        return Ok(false);
    }
    for (version, _) in MIGRATIONS {
        if !applied(conn, *version)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether migration `version` is recorded as applied.
fn applied(conn: &Connection, version: i64) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT version FROM usage_migrations WHERE version = ?1",
        [version],
        |r| r.get::<_, i64>(0),
    )
    .optional()
    .map(|v| v.is_some())
}

fn insert(conn: &mut Connection, records: &[Record]) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let sql = format!(
            "INSERT OR IGNORE INTO usage_records ({COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
              ?19, ?20, ?21, ?22, ?23, ?24)"
        );
        let mut stmt = tx.prepare_cached(&sql)?;
        for r in records {
            stmt.execute(params![
                r.id,
                int(r.at_ms),
                r.request_id,
                r.tenant,
                r.key_id,
                r.model_asked,
                r.route,
                r.provider,
                r.model,
                int(r.prompt_tokens),
                int(r.cached_tokens),
                int(r.completion_tokens),
                int(r.reasoning_tokens),
                int(r.cost_micros),
                int(r.latency_ms),
                r.first_token_ms.map(int),
                r.attempts,
                failed_text(r),
                int(r.waited_ms),
                r.outcome.as_str(),
                r.failure,
                r.priority,
                r.stream,
                r.queue_position.map(int),
            ])?;
        }
    }
    tx.commit()
}

/// A count as SQLite's integer (counts never come near 2^63).
pub(crate) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

struct SqliteCells<'a>(&'a rusqlite::Row<'a>);

impl Cells for SqliteCells<'_> {
    fn int(&self, i: usize) -> Result<i64, String> {
        self.0.get(i).map_err(|e| e.to_string())
    }
    fn float(&self, i: usize) -> Result<f64, String> {
        self.0.get(i).map_err(|e| e.to_string())
    }
    fn text(&self, i: usize) -> Result<String, String> {
        self.0.get(i).map_err(|e| e.to_string())
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, String> {
        self.0.get(i).map_err(|e| e.to_string())
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        self.0.get(i).map_err(|e| e.to_string())
    }
    fn flag(&self, i: usize) -> Result<bool, String> {
        self.0.get(i).map_err(|e| e.to_string())
    }
}
