//! Runtime keys in an SQLite file, shared by the processes of one machine: beside the embedded
//! ledger, in a file of their own (`keys.sqlite`), so that key changes never wait for the
//! ledger's write lock. Each call is one transaction on tokio's blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{KeyFuture, KeyRecord, KeyStore, KeyStoreError, Listing, decode, encode};
use crate::ledger::BUSY_TIMEOUT;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS api_keys (id TEXT PRIMARY KEY, rev INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys_version (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL);
";

/// Runtime keys in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteKeys {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl SqliteKeys {
    /// Opens (or creates) the file at `path` and its directory.
    pub fn open(path: &Path) -> Result<Self, KeyStoreError> {
        let failed = |why: String| KeyStoreError::Sqlite {
            path: path.display().to_string(),
            why,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed(e.to_string()))?;
        }
        let conn = Connection::open(path).map_err(|e| failed(e.to_string()))?;
        prepare(&conn).map_err(|e| failed(e.to_string()))?;
        Ok(SqliteKeys {
            path: path.to_owned(),
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `op` on the connection on the blocking pool.
    fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Connection) -> Result<T, Failed> + Send + 'static,
    ) -> KeyFuture<'_, T> {
        let conn = self.conn.clone();
        let path = self.path.display().to_string();
        async move {
            let task = tokio::task::spawn_blocking(move || {
                let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                op(&mut conn)
            });
            match task.await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(Failed::Store(e))) => Err(e),
                Ok(Err(Failed::Sqlite(e))) => Err(KeyStoreError::Sqlite {
                    path,
                    why: e.to_string(),
                }),
                Err(e) => Err(KeyStoreError::Sqlite {
                    path,
                    why: e.to_string(),
                }),
            }
        }
        .boxed()
    }
}

/// How a call on the connection failed.
enum Failed {
    Store(KeyStoreError),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for Failed {
    fn from(e: rusqlite::Error) -> Self {
        Failed::Sqlite(e)
    }
}

fn prepare(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    conn.execute_batch(SCHEMA)
}

fn version_of(conn: &Connection) -> rusqlite::Result<u64> {
    let version: Option<i64> = conn
        .query_row(
            "SELECT version FROM api_keys_version WHERE one = 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(version.map_or(0, |v| u64::try_from(v).unwrap_or(0)))
}

impl KeyStore for SqliteKeys {
    fn version(&self) -> KeyFuture<'_, u64> {
        self.run(|conn| Ok(version_of(conn)?))
    }

    fn all(&self) -> KeyFuture<'_, Listing> {
        self.run(|conn| {
            let tx = conn.transaction()?;
            let version = version_of(&tx)?;
            let rows: Vec<(String, String)> = tx
                .prepare("SELECT id, body FROM api_keys ORDER BY id")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let records = rows
                .iter()
                .map(|(id, body)| decode(id, body))
                .collect::<Result<_, _>>()
                .map_err(Failed::Store)?;
            Ok(Listing { version, records })
        })
    }

    fn put<'a>(&'a self, record: &'a KeyRecord, read: Option<u64>) -> KeyFuture<'a, ()> {
        let record = record.clone();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let stored: Option<i64> = tx
                .query_row(
                    "SELECT rev FROM api_keys WHERE id = ?1",
                    [&record.id],
                    |r| r.get(0),
                )
                .optional()?;
            if stored.map(|r| u64::try_from(r).unwrap_or(u64::MAX)) != read {
                return Err(Failed::Store(KeyStoreError::Conflict { id: record.id }));
            }
            let rev = i64::try_from(record.rev).unwrap_or(i64::MAX);
            tx.execute(
                "INSERT INTO api_keys (id, rev, body) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (id) DO UPDATE SET rev = excluded.rev, body = excluded.body",
                params![record.id, rev, encode(&record)],
            )?;
            tx.execute(
                "INSERT INTO api_keys_version (one, version) VALUES (1, 1) \
                 ON CONFLICT (one) DO UPDATE SET version = version + 1",
                [],
            )?;
            tx.commit()?;
            Ok(())
        })
    }
}
