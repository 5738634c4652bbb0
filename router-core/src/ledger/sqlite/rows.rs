//! The SQLite row layout, and scope state loaded from it inside one transaction.
//!
//! [`TxCells`] hands the engine a scope's state the first time the operation asks for it (three
//! indexed reads), remembers what was stored, and after the operation writes back only the rows
//! that changed.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use crate::ledger::engine::{Cells, ScopeState};
use crate::ledger::scopes::ScopeTable;
use crate::ledger::window::{Slots, Window};

/// The tables, created when missing. `v1` is the layout's version: a layout change gets new
/// table names, so two versions never misread each other's rows. Rows are keyed by namespace
/// and scope name (`d:<provider>/<model>`, `p:<provider>`), never by position in a config.
///
/// - `llmroute_v1_scopes`: one row per scope: `oldest`, the oldest bucket that may hold anything
///   (see `window.rs`), and `cooldown`, the end of a deployment's cooldown in ms (0: none).
/// - `llmroute_v1_buckets`: one row per live window bucket holding anything: at most 61 per
///   scope; rows of buckets that leave the window are deleted by the next operation on it.
/// - `llmroute_v1_slots`: one row per concurrency slot held (reservation id, expiry ms), deleted
///   on settle, release or once expired.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS llmroute_v1_scopes (
    ns TEXT NOT NULL, scope TEXT NOT NULL, oldest INTEGER, cooldown INTEGER NOT NULL,
    PRIMARY KEY (ns, scope)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS llmroute_v1_buckets (
    ns TEXT NOT NULL, scope TEXT NOT NULL, bucket INTEGER NOT NULL,
    requests INTEGER NOT NULL, tokens INTEGER NOT NULL,
    PRIMARY KEY (ns, scope, bucket)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS llmroute_v1_slots (
    ns TEXT NOT NULL, scope TEXT NOT NULL, id INTEGER NOT NULL, expiry INTEGER NOT NULL,
    PRIMARY KEY (ns, scope, id)) WITHOUT ROWID;
";

// SQLite integers are i64. Times, buckets and counts fit; reservation ids are random u64 and are
// stored bit for bit.
fn to_db(v: u64) -> i64 {
    v as i64
}

fn from_db(v: i64) -> u64 {
    v as u64
}

/// One scope as loaded: the state the engine works on, and what was stored, to diff against.
#[derive(Debug, Default)]
struct Loaded {
    state: ScopeState,
    /// The scope row `(oldest, cooldown)`, if there was one.
    head: Option<(Option<u64>, u64)>,
    /// Stored bucket rows: bucket -> (requests, tokens).
    buckets: BTreeMap<u64, (u64, u64)>,
    /// Stored slot ids.
    slots: HashSet<u64>,
}

/// The scopes one operation touched, loaded from and written back to one transaction.
pub(super) struct TxCells<'c> {
    conn: &'c Connection,
    ns: &'c str,
    table: &'c ScopeTable,
    loaded: HashMap<usize, Loaded>,
    /// The first read that failed: the operation's answer is then discarded and the
    /// transaction rolled back, so a failed read never turns into a decision.
    failed: Option<rusqlite::Error>,
}

impl Cells for TxCells<'_> {
    fn scope(&mut self, s: usize) -> &mut ScopeState {
        match self.loaded.entry(s) {
            Entry::Occupied(o) => &mut o.into_mut().state,
            Entry::Vacant(v) => {
                let name = &self.table.def(s).name;
                let loaded = load(self.conn, self.ns, name).unwrap_or_else(|e| {
                    self.failed.get_or_insert(e);
                    Loaded::default()
                });
                &mut v.insert(loaded).state
            }
        }
    }
}

impl<'c> TxCells<'c> {
    pub(super) fn new(conn: &'c Connection, ns: &'c str, table: &'c ScopeTable) -> Self {
        Self {
            conn,
            ns,
            table,
            loaded: HashMap::new(),
            failed: None,
        }
    }

    /// Writes back the rows that changed; first reports a read that failed, if any.
    pub(super) fn write_back(self) -> rusqlite::Result<()> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        for (s, loaded) in &self.loaded {
            let name = &self.table.def(*s).name;
            write_scope(self.conn, self.ns, name, loaded)?;
        }
        Ok(())
    }
}

fn load(conn: &Connection, ns: &str, scope: &str) -> rusqlite::Result<Loaded> {
    let head = conn
        .prepare_cached(
            "SELECT oldest, cooldown FROM llmroute_v1_scopes WHERE ns = ?1 AND scope = ?2",
        )?
        .query_row(params![ns, scope], |r| {
            Ok((r.get::<_, Option<i64>>(0)?.map(from_db), from_db(r.get(1)?)))
        })
        .optional()?;
    let buckets = conn
        .prepare_cached(
            "SELECT bucket, requests, tokens FROM llmroute_v1_buckets WHERE ns = ?1 AND scope = ?2",
        )?
        .query_map(params![ns, scope], |r| {
            let k = from_db(r.get(0)?);
            Ok((k, (from_db(r.get(1)?), from_db(r.get(2)?))))
        })?
        .collect::<rusqlite::Result<BTreeMap<_, _>>>()?;
    let held = conn
        .prepare_cached("SELECT id, expiry FROM llmroute_v1_slots WHERE ns = ?1 AND scope = ?2")?
        .query_map(params![ns, scope], |r| {
            Ok((from_db(r.get(0)?), from_db(r.get(1)?)))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let (oldest, cooldown) = head.unwrap_or((None, 0));
    let rows = buckets.iter().map(|(&k, &(r, t))| (k, r, t));
    Ok(Loaded {
        state: ScopeState {
            window: Window::from_parts(oldest, rows),
            slots: Slots::from_held(held.clone()),
            cooldown,
        },
        head,
        slots: held.iter().map(|&(id, _)| id).collect(),
        buckets,
    })
}

/// Writes the difference between what was loaded and the state now.
fn write_scope(conn: &Connection, ns: &str, scope: &str, l: &Loaded) -> rusqlite::Result<()> {
    let head = (l.state.window.oldest(), l.state.cooldown);
    if l.head.unwrap_or((None, 0)) != head {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO llmroute_v1_scopes (ns, scope, oldest, cooldown) \
             VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![ns, scope, head.0.map(to_db), to_db(head.1)])?;
    }
    let buckets: BTreeMap<u64, (u64, u64)> = l
        .state
        .window
        .buckets()
        .map(|(k, r, t)| (k, (r, t)))
        .collect();
    for k in l.buckets.keys().filter(|k| !buckets.contains_key(k)) {
        conn.prepare_cached(
            "DELETE FROM llmroute_v1_buckets WHERE ns = ?1 AND scope = ?2 AND bucket = ?3",
        )?
        .execute(params![ns, scope, to_db(*k)])?;
    }
    for (&k, &(r, t)) in buckets.iter().filter(|(k, v)| l.buckets.get(k) != Some(v)) {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO llmroute_v1_buckets (ns, scope, bucket, requests, tokens) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![ns, scope, to_db(k), to_db(r), to_db(t)])?;
    }
    let held = l.state.slots.held();
    let now_held: HashSet<u64> = held.iter().map(|&(id, _)| id).collect();
    for id in l.slots.iter().filter(|id| !now_held.contains(id)) {
        conn.prepare_cached(
            "DELETE FROM llmroute_v1_slots WHERE ns = ?1 AND scope = ?2 AND id = ?3",
        )?
        .execute(params![ns, scope, to_db(*id)])?;
    }
    for &(id, expiry) in held.iter().filter(|(id, _)| !l.slots.contains(id)) {
        conn.prepare_cached(
            "INSERT INTO llmroute_v1_slots (ns, scope, id, expiry) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![ns, scope, to_db(id), to_db(expiry)])?;
    }
    Ok(())
}
