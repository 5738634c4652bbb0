//! The in-process store: one mutex over plain arrays. For a single process; several processes on
//! one machine share limits through [`SqliteStore`](super::SqliteStore), several machines through
//! [`RedisStore`](super::RedisStore).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;

use std::collections::HashMap;

use super::engine::{Cells, Engine, ScopeState, TenantState};
use super::scopes::ScopeTable;
use super::types::*;
use super::{Ledger, LedgerFuture};
use crate::clock::{Clock, SystemClock};
use crate::config::{DeploymentId, Registry};

/// Every scope's state, by scope index, and every tenant's, by name; and the tickets the
/// operation under way wakes.
#[derive(Debug)]
struct State(Vec<ScopeState>, HashMap<String, TenantState>, Vec<u64>);

impl Cells for State {
    fn scope(&mut self, s: usize) -> &mut ScopeState {
        &mut self.0[s]
    }

    fn tenant(&mut self, name: &str) -> &mut TenantState {
        self.1.entry(name.to_owned()).or_default()
    }

    fn wake(&mut self, ticket: u64) {
        self.2.push(ticket);
    }
}

/// How many wake-ups a slow waiter may fall behind by before it misses some (it then asks
/// again, as when its wait ends).
pub(crate) const WAKES_BUFFER: usize = 1024;

/// The in-memory ledger. Cheap to share behind an `Arc`; every operation takes one short lock.
#[derive(Debug)]
pub struct MemoryStore {
    table: ScopeTable,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Wake-ups for waiting tickets, sent after each operation that makes them.
    wakes: tokio::sync::broadcast::Sender<u64>,
}

impl MemoryStore {
    /// A store for `registry`'s deployments on the system clock.
    pub fn new(registry: &Registry) -> Self {
        Self::with_clock(registry, Arc::new(SystemClock))
    }

    /// A store reading time from `clock` (tests pass a [`ManualClock`](crate::clock::ManualClock)).
    pub fn with_clock(registry: &Registry, clock: Arc<dyn Clock>) -> Self {
        let table = ScopeTable::new(registry);
        let scopes = (0..table.len()).map(|_| ScopeState::default()).collect();
        let state = State(scopes, HashMap::new(), Vec::new());
        Self {
            table,
            clock,
            state: Mutex::new(state),
            wakes: tokio::sync::broadcast::channel(WAKES_BUFFER).0,
        }
    }

    /// Runs one engine operation at the clock's now, under the lock.
    fn run<T>(&self, op: impl FnOnce(&Engine<'_>, &mut State) -> T) -> T {
        let engine = Engine {
            table: &self.table,
            now: self.clock.now_ms(),
        };
        // A panic while holding the lock cannot leave the counters half-written in a way that
        // matters more than losing the whole ledger would, so keep going with the data.
        let mut state: MutexGuard<'_, State> = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let out = op(&engine, &mut state);
        for ticket in state.2.drain(..) {
            // No receiver: nobody waits in this process.
            let _ = self.wakes.send(ticket);
        }
        out
    }
}

impl Ledger for MemoryStore {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        let out = self.run(|e, s| e.admit(s, need, candidates));
        std::future::ready(out).boxed()
    }

    fn settle<'a>(&'a self, r: &'a Reservation, actual: ActualUsage) -> LedgerFuture<'a, bool> {
        std::future::ready(self.run(|e, s| e.finish(s, r, actual, false))).boxed()
    }

    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        std::future::ready(self.run(|e, s| e.finish(s, r, ActualUsage::default(), true))).boxed()
    }

    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        std::future::ready(self.run(|e, s| e.renew(s, r, ttl))).boxed()
    }

    fn cooldown(&self, d: DeploymentId, dur: Duration) -> LedgerFuture<'_, Duration> {
        std::future::ready(self.run(|e, s| e.cooldown(s, d, dur))).boxed()
    }

    fn observe(&self, d: DeploymentId, obs: Observation) -> LedgerFuture<'_, ()> {
        std::future::ready(self.run(|e, s| e.observe(s, d, obs))).boxed()
    }

    fn snapshot<'a>(&'a self, ds: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        std::future::ready(self.run(|e, s| e.snapshot(s, ds))).boxed()
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        std::future::ready(Ok(self.run(|e, s| e.tenant_snapshot(s, tenant)))).boxed()
    }

    fn leave<'a>(&'a self, ticket: u64, ds: &'a [DeploymentId]) -> LedgerFuture<'a, ()> {
        std::future::ready(self.run(|e, s| e.leave(s, ticket, ds))).boxed()
    }

    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        Some(self.wakes.subscribe())
    }
}
