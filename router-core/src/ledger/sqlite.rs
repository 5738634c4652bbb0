//! The embedded store: one SQLite file shared by every process on one machine.
//!
//! For many short-lived processes without a Redis, such as `llmroute chat` run in a shell loop:
//! each opens the same file and they share every limit as safely as instances sharing a Redis.
//!
//! # The model
//!
//! - **One transaction per operation.** Every call (admit over all candidates, settle, release,
//!   cooldown, observe, snapshot, tenant snapshot) is one `BEGIN IMMEDIATE` transaction: it
//!   takes the file's write lock before reading anything, loads the rows of the scopes and
//!   tenants it touches, runs the same engine as [`MemoryStore`](super::MemoryStore), writes
//!   back the rows that changed and commits. Admission across all candidates (and the tenant's
//!   limits and budget) is therefore one atomic step across processes, whatever the number of
//!   candidates (DESIGN.md I1), and the time is read once the lock is held, so decisions are
//!   made in commit order.
//! - **WAL, `synchronous=NORMAL`.** Readers never block the writer and a commit does not wait for
//!   the disk: a process that crashes loses nothing it committed; a power cut may lose the last
//!   few decisions, never the file's consistency (that only makes the ledger forget recent use
//!   for at most a minute).
//! - **Busy timeout.** A process that finds the file locked waits up to [`BUSY_TIMEOUT`] for the
//!   lock (an operation holds it for tens of microseconds), then fails with
//!   [`LedgerError::Sqlite`] rather than hanging the request.
//! - **Crashes.** A process that dies holding reservations never settles them: their concurrency
//!   slots expire after the request's slot TTL (and are deleted by the next operation on that
//!   scope once the settle grace has passed too), their tokens stay counted until their bucket
//!   leaves the window. Nothing else is held on behalf of a process: a process killed in the
//!   middle of an operation leaves nothing half-written (SQLite discards the unfinished
//!   transaction) and the operating system drops its lock on the file.
//! - **Dropped admissions.** A transaction on the blocking pool runs to its end even when its
//!   caller goes away (a dropped request waiting for another process's lock): what it granted
//!   is then voided by a transaction of its own, as the Redis store voids an admission whose
//!   answer no one read.
//! - **Bounded state.** Per scope (a tenant's limits are one more scope), one row, at most 61
//!   bucket rows and one row per request in flight or expired within the settle grace; per
//!   tenant, one spend row; never one per request (DESIGN.md I5). See the layout in `sqlite/rows.rs`.
//! - **Time.** Every process on one machine shares its wall clock: production passes
//!   [`SystemClock`](crate::clock::SystemClock), tests a [`ManualClock`](crate::clock::ManualClock).
//!
//! The blocking SQLite work runs on tokio's blocking pool ([`tokio::task::spawn_blocking`]); one
//! store holds one connection, and its callers queue for it without blocking a runtime thread.

mod rows;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use super::engine::Engine;
use super::scopes::ScopeTable;
use super::types::*;
use super::{Ledger, LedgerError, LedgerFuture};
use crate::clock::Clock;
use crate::config::{DeploymentId, Registry};
use rows::TxCells;

/// How long an operation waits for another process to release the file's write lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite-backed ledger: one connection to a file shared by every process on the machine.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    namespace: String,
    table: ScopeTable,
    clock: Arc<dyn Clock>,
    conn: Arc<tokio::sync::Mutex<Connection>>,
    /// Voids of abandoned admissions still running.
    voids: Arc<super::Voids>,
    /// Wake-ups for this process's waiting tickets, shared by its stores on the same file
    /// (other processes' waiters ask again when their wait ends).
    wakes: tokio::sync::broadcast::Sender<u64>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("namespace", &self.inner.namespace)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it and its directory when missing) the ledger file at `path` for
    /// `registry`'s deployments, in the registry's namespace. Blocks for as long as opening a
    /// file takes (or up to [`BUSY_TIMEOUT`] while another process creates the tables).
    pub fn open(
        path: &Path,
        registry: &Registry,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LedgerError> {
        let err = |source| LedgerError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| LedgerError::Io {
                path: path.display().to_string(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(err)?;
        prepare_retrying(&conn).map_err(err)?;
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                namespace: registry.namespace.clone(),
                table: ScopeTable::new(registry),
                clock,
                conn: Arc::new(tokio::sync::Mutex::new(conn)),
                voids: Arc::default(),
                wakes: wakes_of(path),
            }),
        })
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `op` in one `BEGIN IMMEDIATE` transaction on the blocking pool.
    fn run<T, F>(&self, op: F) -> LedgerFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(&Engine<'_>, &mut TxCells<'_>) -> Result<T, LedgerError> + Send + 'static,
    {
        let inner = self.inner.clone();
        async move {
            let mut conn = inner.conn.clone().lock_owned().await;
            let inner2 = inner.clone();
            let task = tokio::task::spawn_blocking(move || inner2.transact(&mut conn, op));
            match task.await {
                Ok(out) => out,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Only when the runtime shuts down before the task started.
                Err(_) => Err(inner.error(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_INTERRUPT),
                    Some("the runtime shut down before the operation ran".into()),
                ))),
            }
        }
        .boxed()
    }
}

/// The wake-up channel of the ledger file at `path`, shared by every store of this process
/// that opened it (other processes' waiters ask again when their wait ends).
fn wakes_of(path: &Path) -> tokio::sync::broadcast::Sender<u64> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    type Channels = HashMap<PathBuf, tokio::sync::broadcast::Sender<u64>>;
    static CHANNELS: LazyLock<Mutex<Channels>> = LazyLock::new(Mutex::default);
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let mut channels = CHANNELS.lock().unwrap_or_else(|e| e.into_inner());
    // A channel nobody holds any more belongs to a file no store has open.
    channels.retain(|_, sender| sender.receiver_count() > 0 || sender.strong_count() > 1);
    channels
        .entry(key)
        .or_insert_with(|| tokio::sync::broadcast::channel(super::memory::WAKES_BUFFER).0)
        .clone()
}

/// [`prepare`], retried while other processes prepare the same new file: switching a file to WAL
/// can fail at once with "database is locked" (SQLite skips the busy handler there to avoid a
/// deadlock), so wait a little and try again, for at most [`BUSY_TIMEOUT`].
fn prepare_retrying(conn: &Connection) -> rusqlite::Result<()> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match prepare(conn) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && start.elapsed() < BUSY_TIMEOUT =>
            {
                let _ = conn.execute_batch("ROLLBACK");
                std::thread::sleep(pause + Duration::from_micros(fastrand::u64(..1000)));
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Connection settings and the tables.
fn prepare(conn: &Connection) -> rusqlite::Result<()> {
    // First, so that the statements below wait for a process doing the same.
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Answers the mode now in force: a file system without shared memory stays in rollback
    // journal mode, which is slower but just as correct (every operation still takes the lock).
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {} COMMIT;", rows::SCHEMA))
}

impl Inner {
    fn error(&self, source: rusqlite::Error) -> LedgerError {
        LedgerError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn transact<T>(
        &self,
        conn: &mut Connection,
        op: impl FnOnce(&Engine<'_>, &mut TxCells<'_>) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.error(e))?;
        // Read the clock with the lock held: decisions are then made in commit order.
        let engine = Engine {
            table: &self.table,
            now: self.clock.now_ms(),
        };
        let mut cells = TxCells::new(&tx, &self.namespace, &self.table);
        let out = op(&engine, &mut cells);
        // A failed read is reported before the engine's answer; dropping `tx` rolls back.
        cells.write_back().map_err(|e| self.error(e))?;
        let out = out?;
        let wakes = std::mem::take(&mut cells.wakes);
        drop(cells);
        tx.commit().map_err(|e| self.error(e))?;
        for ticket in wakes {
            // No receiver: nobody waits in this process.
            let _ = self.wakes.send(ticket);
        }
        Ok(out)
    }
}

/// One settlement (or release) and the provider's report that came with it, as
/// [`Ledger::settle_batch`] answers for it.
fn settle_one(e: &Engine<'_>, c: &mut TxCells<'_>, s: &Settlement) -> Result<bool, LedgerError> {
    let done = match s.actual {
        Some(actual) => e.finish(c, &s.reservation, actual, false)?,
        None => e.finish(c, &s.reservation, ActualUsage::default(), true)?,
    };
    if let Some(observed) = s.observed {
        e.observe(c, s.reservation.deployment, observed)?;
    }
    Ok(done)
}

/// An admission whose caller may stop waiting for it (a dropped request, a timeout around it):
/// its transaction runs on the blocking pool, which cannot be cancelled, and a slot it grants
/// would stay held, unrenewed, for its whole TTL, its tokens and spend counted. Dropped before
/// the answer came, it has the admission voided on a task, whose transaction runs after the
/// admission's (they queue for the one connection): it finds what the admission granted, or
/// nothing if it never ran. The twin of the Redis store's `Abandoned`.
struct Abandoned {
    store: SqliteStore,
    need: Need,
    candidates: Vec<DeploymentId>,
    armed: bool,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (need, candidates) = (self.need.clone(), std::mem::take(&mut self.candidates));
        let void = self.store.run(move |e, c| e.void(c, &need, &candidates));
        self.store.inner.voids.abandoned(self.need.id, void);
    }
}

/// What to do about an SQLite error, for [`LedgerError::Sqlite`]'s message.
pub(crate) fn hint(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "another process held the ledger longer than the busy timeout; retry, and look for a \
             stuck llmroute process"
        }
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => {
            "check that the file and its directory exist and are writable by this user"
        }
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            "it is not a usable llmroute ledger: delete it (that only resets the shared counts) \
             or choose another path"
        }
        Some(ErrorCode::DiskFull) => "free some disk space",
        _ => "if the file is damaged, deleting it only resets the shared counts",
    }
}

impl Ledger for SqliteStore {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        let (need, candidates) = (need.clone(), candidates.to_vec());
        let guard = Abandoned {
            store: self.clone(),
            need: need.clone(),
            candidates: candidates.clone(),
            armed: true,
        };
        let admission = self.run(move |e, c| e.admit(c, &need, &candidates));
        async move {
            let mut guard = guard;
            let answer = admission.await;
            guard.armed = false;
            answer
        }
        .boxed()
    }

    fn settle<'a>(&'a self, r: &'a Reservation, actual: ActualUsage) -> LedgerFuture<'a, bool> {
        let r = r.clone();
        self.run(move |e, c| e.finish(c, &r, actual, false))
    }

    /// The batch in one transaction: one trip to the blocking pool and one commit for all of
    /// it, so that the queue's task keeps up with many requests at once (one transaction each
    /// would wait its turn behind every admission queued for the file). Should that transaction
    /// fail (a failed read or write fails it whole), each settlement is tried in one of its own,
    /// for an answer of its own.
    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        async move {
            let all = batch.to_vec();
            let together = self
                .run(move |e, c| Ok(all.iter().map(|s| settle_one(e, c, s)).collect::<Vec<_>>()));
            if let Ok(results) = together.await {
                return results;
            }
            let mut out = Vec::with_capacity(batch.len());
            for s in batch {
                let s = s.clone();
                out.push(self.run(move |e, c| settle_one(e, c, &s)).await);
            }
            out
        }
        .boxed()
    }

    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        let r = r.clone();
        self.run(move |e, c| e.finish(c, &r, ActualUsage::default(), true))
    }

    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        let r = r.clone();
        self.run(move |e, c| e.renew(c, &r, ttl))
    }

    fn cooldown(&self, d: DeploymentId, dur: Duration) -> LedgerFuture<'_, Duration> {
        self.run(move |e, c| e.cooldown(c, d, dur))
    }

    fn observe(&self, d: DeploymentId, obs: Observation) -> LedgerFuture<'_, ()> {
        self.run(move |e, c| e.observe(c, d, obs))
    }

    /// Each call waits for the blocking pool and a write to the file: an answer need not.
    fn settles_apart(&self) -> bool {
        true
    }

    /// Waits for the voids of abandoned admissions still running.
    fn close(&self) -> LedgerFuture<'_, ()> {
        async move {
            self.inner.voids.wait().await;
            Ok(())
        }
        .boxed()
    }

    fn snapshot<'a>(&'a self, ds: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        let ds = ds.to_vec();
        self.run(move |e, c| e.snapshot(c, &ds))
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        let tenant = tenant.clone();
        self.run(move |e, c| Ok(e.tenant_snapshot(c, &tenant)))
    }

    fn leave<'a>(&'a self, ticket: u64, ds: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        let ds = ds.to_vec();
        self.run(move |e, c| e.leave(c, ticket, &ds))
    }

    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        Some(self.inner.wakes.subscribe())
    }
}
