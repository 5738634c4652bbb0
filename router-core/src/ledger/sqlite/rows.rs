//! The SQLite row layout, and ledger state loaded from it inside one transaction.
//!
//! [`TxCells`] hands the engine a scope's or a tenant's state the first time the operation asks
//! for it (a few indexed reads), remembers what was stored, and after the operation writes back
//! only the rows that changed. A deployment's or provider's scope and a tenant's window and slots
//! are the same rows under different scope names (`scope.rs`); a tenant's spend is one more row
//! (`spend.rs`), and so is a scope's day when it has a per-day limit (`day.rs`).

mod day;
mod line;
mod scope;
mod spend;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use rusqlite::Connection;

use crate::ledger::day::DayCount;
use crate::ledger::engine::{Cells, ScopeState, Spend, TenantState};
use crate::ledger::line::Line;
use crate::ledger::scopes::ScopeTable;
use scope::Stored;

/// The tables, created when missing. `v4` is the layout's version: a layout change gets new
/// table names, so two versions never misread each other's rows (a new table is not a change:
/// opening an older file creates it). Rows are keyed by namespace and scope name:
/// `d:<provider>/<model>` and `p:<provider>` for a deployment's and a provider's limits,
/// `t:<tenant>` for a tenant's; never by position in a config.
///
/// - `llmroute_v4_scopes`: one row per scope: `oldest`, the oldest bucket that may hold anything
///   (see `window.rs`), `cooldown`, the end of a deployment's cooldown in ms (0: none; always
///   0 for providers and tenants), and what the provider last reported for a deployment:
///   `rep_requests`, `rep_tokens`, `rep_input` and `rep_output` (input and output tokens)
///   remaining (NULL: not reported) at `rep_at` ms (NULL: never).
/// - `llmroute_v4_buckets`: one row per live window bucket holding anything: at most 61 per
///   scope (requests, tokens, and the input and output parts of the tokens); rows of buckets that leave the window are deleted by the next operation on it.
/// - `llmroute_v4_slots`: one row per concurrency slot held or expired within the settle grace
///   (reservation id, expiry ms, the bucket its tokens were reserved in), deleted on settle,
///   release or once the grace has passed.
/// - `llmroute_v4_spend`: one row per tenant that has spent anything, keyed by the tenant's name
///   (without `t:`): the UTC day (days since the epoch) and month (`year * 12 + month - 1`) of
///   its last spend and the micro-USD spent in each. A period that has ended counts as nothing
///   spent; the row is overwritten by the next spend, so there is never more than one per tenant.
/// - `llmroute_v4_days`: one row per scope with a per-day limit (`rpd`, `tpd`) that counted
///   anything, by scope name: the day (its civil date as days since the epoch, in the scope's
///   `day_resets` zone; UTC for tenants and keys) and the requests and tokens it counted. Like
///   the spend row, a day that has ended counts as nothing and is overwritten.
/// - `llmroute_v4_lines`: one row per ticket waiting in a deployment's line (see `line.rs`),
///   by scope name and ticket id: its rank and expiry in ms, and whether it is a batch
///   request's. A line's rows are replaced when it
///   changes; expired ones go with the next change.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS llmroute_v4_scopes (
    ns TEXT NOT NULL, scope TEXT NOT NULL, oldest INTEGER, cooldown INTEGER NOT NULL,
    rep_requests INTEGER, rep_tokens INTEGER, rep_input INTEGER, rep_output INTEGER,
    rep_at INTEGER,
    PRIMARY KEY (ns, scope)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS llmroute_v4_buckets (
    ns TEXT NOT NULL, scope TEXT NOT NULL, bucket INTEGER NOT NULL,
    requests INTEGER NOT NULL, tokens INTEGER NOT NULL,
    input INTEGER NOT NULL, output INTEGER NOT NULL,
    PRIMARY KEY (ns, scope, bucket)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS llmroute_v4_slots (
    ns TEXT NOT NULL, scope TEXT NOT NULL, id INTEGER NOT NULL, expiry INTEGER NOT NULL,
    bucket INTEGER NOT NULL, PRIMARY KEY (ns, scope, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS llmroute_v4_spend (
    ns TEXT NOT NULL, tenant TEXT NOT NULL,
    day INTEGER NOT NULL, day_micros INTEGER NOT NULL,
    month INTEGER NOT NULL, month_micros INTEGER NOT NULL,
    PRIMARY KEY (ns, tenant)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS llmroute_v4_days (
    ns TEXT NOT NULL, scope TEXT NOT NULL,
    day INTEGER NOT NULL, requests INTEGER NOT NULL, tokens INTEGER NOT NULL,
    PRIMARY KEY (ns, scope)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS llmroute_v4_lines (
    ns TEXT NOT NULL, scope TEXT NOT NULL, ticket INTEGER NOT NULL,
    rank INTEGER NOT NULL, expiry INTEGER NOT NULL, batch INTEGER NOT NULL,
    PRIMARY KEY (ns, scope, ticket)) WITHOUT ROWID;
";

// SQLite integers are i64. Times, buckets, periods and amounts fit; reservation ids are random
// u64 and are stored bit for bit.
fn to_db(v: u64) -> i64 {
    v as i64
}

fn from_db(v: i64) -> u64 {
    v as u64
}

/// The scope name of tenant `name`'s window and slots.
fn tenant_scope(name: &str) -> String {
    format!("t:{name}")
}

/// One deployment's or provider's scope as loaded: its state and what was stored.
#[derive(Debug, Default)]
struct LoadedScope {
    state: ScopeState,
    stored: Stored,
    /// The day row, if there was one (read only for scopes with a per-day limit).
    day: Option<DayCount>,
    /// The line as stored (deployment scopes only).
    line: Line,
}

/// One tenant as loaded: its state, and what was stored of its scope and its spend.
#[derive(Debug, Default)]
struct LoadedTenant {
    state: TenantState,
    stored: Stored,
    /// The spend row, if there was one.
    spend: Option<Spend>,
    /// The day row, if there was one.
    day: Option<DayCount>,
}

/// The scopes and tenants one operation touched, loaded from and written back to one
/// transaction.
pub(super) struct TxCells<'c> {
    conn: &'c Connection,
    ns: &'c str,
    table: &'c ScopeTable,
    scopes: HashMap<usize, LoadedScope>,
    tenants: HashMap<String, LoadedTenant>,
    /// The first read that failed: the operation's answer is then discarded and the
    /// transaction rolled back, so a failed read never turns into a decision.
    failed: Option<rusqlite::Error>,
    /// The tickets the operation wakes, sent once it commits.
    pub(super) wakes: Vec<u64>,
}

impl Cells for TxCells<'_> {
    fn scope(&mut self, s: usize) -> &mut ScopeState {
        let def = self.table.def(s);
        let (conn, ns, name) = (self.conn, self.ns, &def.name);
        let per_day = def.limits.per_day();
        let deployment = s < self.table.deployments();
        let loaded = cached(&mut self.scopes, &s, &mut self.failed, || {
            let (mut state, stored) = scope::load(conn, ns, name)?;
            let day = if per_day {
                day::load(conn, ns, name)?
            } else {
                None
            };
            state.day = day.unwrap_or_default();
            let line = if deployment {
                line::load(conn, ns, name)?
            } else {
                Line::default()
            };
            state.line = line.clone();
            Ok(LoadedScope {
                state,
                stored,
                day,
                line,
            })
        });
        &mut loaded.state
    }

    fn tenant(&mut self, name: &str) -> &mut TenantState {
        let (conn, ns) = (self.conn, self.ns);
        let loaded = cached(&mut self.tenants, name, &mut self.failed, || {
            let scope_name = tenant_scope(name);
            let (mut scope, stored) = scope::load(conn, ns, &scope_name)?;
            let spend = spend::load(conn, ns, name)?;
            let day = day::load(conn, ns, &scope_name)?;
            scope.day = day.unwrap_or_default();
            let state = TenantState {
                scope,
                spend: spend.unwrap_or_default(),
            };
            Ok(LoadedTenant {
                state,
                stored,
                spend,
                day,
            })
        });
        &mut loaded.state
    }

    fn wake(&mut self, ticket: u64) {
        self.wakes.push(ticket);
    }
}

/// The entry for `key`, loaded by `load` the first time. A failed load leaves a default entry
/// (nothing stored) and is recorded in `failed`, which makes the whole operation fail.
fn cached<'m, K, Q, V>(
    map: &'m mut HashMap<K, V>,
    key: &Q,
    failed: &mut Option<rusqlite::Error>,
    load: impl FnOnce() -> rusqlite::Result<V>,
) -> &'m mut V
where
    K: Borrow<Q> + Hash + Eq,
    Q: ToOwned<Owned = K> + Hash + Eq + ?Sized,
    V: Default,
{
    if !map.contains_key(key) {
        let value = load().unwrap_or_else(|e| {
            failed.get_or_insert(e);
            V::default()
        });
        map.insert(key.to_owned(), value);
    }
    map.get_mut(key).expect("inserted above")
}

impl<'c> TxCells<'c> {
    pub(super) fn new(conn: &'c Connection, ns: &'c str, table: &'c ScopeTable) -> Self {
        Self {
            conn,
            ns,
            table,
            scopes: HashMap::new(),
            tenants: HashMap::new(),
            failed: None,
            wakes: Vec::new(),
        }
    }

    /// Writes back the rows that changed; first reports a read that failed, if any.
    pub(super) fn write_back(&mut self) -> rusqlite::Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        for (&s, l) in &self.scopes {
            let name = &self.table.def(s).name;
            scope::write(self.conn, self.ns, name, &l.state, &l.stored)?;
            day::write(self.conn, self.ns, name, &l.state.day, l.day)?;
            line::write(self.conn, self.ns, name, &l.state.line, &l.line)?;
        }
        for (name, l) in &self.tenants {
            let scope_name = tenant_scope(name);
            scope::write(self.conn, self.ns, &scope_name, &l.state.scope, &l.stored)?;
            day::write(self.conn, self.ns, &scope_name, &l.state.scope.day, l.day)?;
            spend::write(self.conn, self.ns, name, &l.state.spend, l.spend)?;
        }
        Ok(())
    }
}
