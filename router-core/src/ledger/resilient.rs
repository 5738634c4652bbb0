//! Staying within the limits when Redis is slow, away, or comes back empty.
//!
//! [`ResilientStore`] wraps the [`RedisStore`] every instance shares. Each call to Redis has
//! `ledger.timeout_ms`; one that fails or times out puts the instance in the mode
//! `ledger.on_error` names (in `local`, an admission or a heartbeat that times out is first sent
//! once more, and Redis answers a repeated admission with the first one's grant if it ran it:
//! one slow answer is not an outage, and an instance that went local on it would admit on its
//! own while the others fill the shared windows):
//!
//! - **local** (the default; an instance that has not had one heartbeat answered yet fails as
//!   `closed` does, since it cannot know its share): the instance admits against an in-process
//!   ledger holding its share of every limit: the limit ÷ the instances alive at the last
//!   heartbeat, rounded down. That ledger starts with the same share of what the shared windows
//!   held at the last heartbeat (and of each recently served tenant's window and spend), with
//!   all this instance put into them since (its admissions, and what it wrote back after an
//!   earlier outage), with its admissions still awaiting an answer as if granted, and with its
//!   requests in flight, at least its share of every instance's requests in flight at the last
//!   heartbeat, so the instances together stay within each limit while Redis is away. The heartbeat keeps checking; when Redis answers, what was admitted locally is
//!   written into the shared windows (lua/restore.lua) before shared admission resumes, so the
//!   minute after the outage stays within the limits too. Until every other live instance has
//!   done the same (or said with a heartbeat that it admitted nothing on its own), an instance
//!   back from local mode admits nothing: the shared windows would miss what the others
//!   admitted meanwhile. A heartbeat that fails puts an instance in local mode too, so that one
//!   idle through an outage waits for the others as well (see lua/common.lua, the rejoin set).
//! - **closed**: the request fails with the store's error.
//! - **open**: admit without counting anything until Redis answers again.
//!
//! A Redis that restarted empty has no epoch key (see lua/heartbeat.lua): the first instance to
//! notice writes back the tenants' spends as it last saw them, every live instance writes back
//! what it admitted through the store in the last minute and the slots of its requests in
//! flight, and admissions carry the epoch they expect so that none is made against the emptied
//! windows before that. What an instance that has exited since admitted in that minute is not
//! written back: the windows miss it until it leaves them.
//!
//! An admission whose reply timed out may still have been counted by Redis later: it is remembered
//! and handed back (`RedisStore::void`) before the restore.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::engine::{Cells, Engine, ScopeState, TenantState};
use super::leases::{Granted, Leases, Owed, Unanswered};
use super::redis::SLOTS_TTL_MS;
use super::redis::lease::{Ask, Leased, Room};
use super::redis::recovery::{Beat, BeatAs, Replayed, Restore, Restored, WindowOf};
use super::scopes::{ScopeTable, share_of};
use super::types::*;
use super::window::{
    BUCKET_MS, Counts, Slot, WINDOW_BUCKETS, Window, bucket_of, expiry_of, millis,
};
use super::{Ledger, LedgerError, LedgerFuture, RedisStore};
use crate::IdMap;
use crate::clock::Clock;
use crate::config::{DeploymentId, Lease, LedgerSettings, OnError, Registry};

/// How many of its recorded readings an instance keeps (see [`Reads`]): the oldest live
/// instance's last reading is among them unless that instance has recorded none for this many
/// of this instance's beats (it is local, or waits to rejoin, while this one is not). Then the
/// oldest kept stands in, and local mode may start a little short of what was used.
const READS_KEPT: usize = 8;
/// How long a tenant stays on the heartbeat's list after its last request.
const TENANT_MEMORY_MS: u64 = 120_000;
/// At most this many tenants are read per heartbeat (the most recently served).
const TENANTS_PER_BEAT: usize = 1_000;

/// Which ledger an instance admits against now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The shared store (Redis).
    Shared,
    /// Its own share of every limit, in process, while the shared store does not answer.
    Local,
    /// Nothing counted (`on_error: open`) while the shared store does not answer.
    Open,
}

impl Mode {
    /// `shared`, `local` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Local => "local",
            Mode::Open => "open",
        }
    }
}

/// How the ledger is doing, for `llmroute quota`, `/v1/quota` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// Where admissions go now.
    pub mode: Mode,
    /// How long it has been in that mode (shared: since the last change, or start).
    pub since: Duration,
    /// Instances sharing the limits at the last heartbeat (0: none seen yet).
    pub instances: u64,
    /// Mode changes since start.
    pub changes: u64,
    /// Admissions made in local or open mode since start.
    pub local_admissions: u64,
    /// Requests admitted through the shared store (not from a leased block) and not finished.
    pub in_flight: u64,
}

/// What a restore round leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Everything is written back: admit through the shared store.
    Done,
    /// Local admissions arrived meanwhile: another round.
    Again,
    /// Written back, but other instances have not yet: stay local until a later heartbeat.
    Wait,
}

/// One instance's own ledger while the shared one is away.
#[derive(Debug)]
struct Local {
    /// Every limit ÷ `instances`.
    table: ScopeTable,
    cells: LocalCells,
    instances: u64,
    /// What it admitted, by reservation id, until written into the shared windows.
    log: IdMap<u64, Entry>,
    /// Writing its log back, or written and waiting for the other instances to (see
    /// [`Inner::restore`]): it admits nothing, until the time given (ms) at the latest.
    closing: Option<u64>,
}

/// Scope and tenant state of the local ledger.
#[derive(Debug, Default)]
struct LocalCells(Vec<ScopeState>, HashMap<String, TenantState>);

impl Cells for LocalCells {
    fn scope(&mut self, s: usize) -> &mut ScopeState {
        &mut self.0[s]
    }

    fn tenant(&mut self, name: &str) -> &mut TenantState {
        self.1.entry(name.to_owned()).or_default()
    }
}

/// A local admission.
#[derive(Debug, Clone)]
struct Entry {
    reservation: Reservation,
    /// `None` while in flight; what it used once settled.
    actual: Option<ActualUsage>,
    released: bool,
    /// Slot expiry, ms.
    expiry: u64,
    /// Bumped by every change, so a restore knows whether what it wrote is still current.
    version: u64,
}

/// What this instance admitted through the shared store since it started: per scope, and per
/// tenant with its cost (micro-USD).
#[derive(Debug, Clone, Default)]
struct Own {
    scopes: Vec<Counts>,
    tenants: HashMap<String, (Counts, u64)>,
}

impl Own {
    fn add(&mut self, table: &ScopeTable, admitted: &Admitted<'_>) {
        let counts = table.kept(admitted.deployment, admitted.counts);
        let plus = |to: &mut Counts| {
            for (t, c) in to.iter_mut().zip(counts) {
                *t += c;
            }
        };
        for &s in table.of(admitted.deployment).unwrap_or_default() {
            if let Some(to) = self.scopes.get_mut(s) {
                plus(to);
            }
        }
        if let Some(t) = admitted.tenant {
            let (to, cost) = self.tenants.entry(t.name.clone()).or_default();
            plus(to);
            *cost += t.cost_micros;
        }
    }

    /// What was added since `base`, as heartbeat totals (spends in the periods of `now`).
    fn since(&self, base: &Own, now: u64) -> Beat {
        let minus = |a: &Counts, b: Option<&Counts>| {
            let mut out = *a;
            if let Some(b) = b {
                for (o, v) in out.iter_mut().zip(b) {
                    *o = o.saturating_sub(*v);
                }
            }
            out
        };
        let p = super::period::periods(now);
        Beat {
            day: p.day,
            month: p.month,
            scopes: self
                .scopes
                .iter()
                .enumerate()
                .map(|(s, c)| minus(c, base.scopes.get(s)))
                .collect(),
            tenants: self
                .tenants
                .iter()
                .map(|(name, (c, cost))| {
                    let before = base.tenants.get(name);
                    let spent = cost.saturating_sub(before.map_or(0, |b| b.1));
                    (name.clone(), minus(c, before.map(|b| &b.0)), spent, spent)
                })
                .collect(),
            ..Beat::default()
        }
    }
}

/// This instance's recorded readings (see lua/heartbeat.lua), oldest first, each with what it
/// had admitted through the shared store when it sent that beat.
///
/// Local mode starts from the instance's share of its last reading, plus all it admitted since
/// a reading of its own numbered no later than every live instance's last one. An admission
/// counted before that reading is in every instance's reading, so the shares add up to it; one
/// counted after it reached Redis after the beat, so after the snapshot sent with it, and is
/// counted in full. (Counting only what it admitted since its own last reading would miss, but
/// for one share, what it admitted between another instance's last reading and its own.)
#[derive(Debug, Clone, Default)]
struct Reads(VecDeque<(u64, Own)>);

impl Reads {
    /// Reading number `read` was recorded with `base` sent; `oldest` is the oldest live one.
    fn record(&mut self, read: u64, oldest: u64, base: Own) {
        // The numbers restart when the store loses its keys.
        if self.0.back().is_some_and(|(n, _)| *n >= read) {
            self.0.clear();
        }
        self.0.push_back((read, base));
        while self.0.len() > READS_KEPT || self.0.get(1).is_some_and(|(n, _)| *n <= oldest) {
            self.0.pop_front();
        }
    }

    /// What this instance had admitted when it sent the beat it counts its own from (none
    /// before its first reading: it counts all).
    fn base(&self) -> Option<&Own> {
        self.0.front().map(|(_, own)| own)
    }
}

/// What one admission through the shared store counted: a request, or a leased block.
#[derive(Debug, Clone, Copy)]
struct Admitted<'a> {
    deployment: DeploymentId,
    bucket: u64,
    counts: Counts,
    tenant: Option<&'a TenantHold>,
}

impl<'a> Admitted<'a> {
    fn request(r: &'a Reservation) -> Self {
        Self {
            deployment: r.deployment,
            bucket: r.bucket,
            counts: [1, r.tokens, r.input_tokens, r.tokens - r.input_tokens],
            tenant: r.tenant.as_ref(),
        }
    }
}

/// A shared reservation in flight, with its slot expiry (ms).
#[derive(Debug, Clone)]
struct Held {
    reservation: Reservation,
    expiry: u64,
}

/// A call to the shared store that may admit (a request, or a leased block), from when it is
/// sent until its reply is handled. Should the instance go local meanwhile, its local ledger
/// counts the call as admitted on every deployment it may be admitted on: its reply may come
/// after the reading local mode starts from, and no other count of this instance has it yet.
#[derive(Debug, Clone)]
struct Calling {
    /// The request's reservation id (0 for a block: it holds no slot).
    id: u64,
    /// What it may count, on each deployment it may be admitted on.
    on: Vec<(DeploymentId, Counts)>,
    /// Its tenant, and the most it may count and cost there (micro-USD).
    tenant: Option<(String, Counts, u64)>,
    /// Its slot's expiry, ms.
    expiry: u64,
}

impl Calling {
    /// A request's admission on `candidates`, sent at `now`.
    fn request(need: &Need, candidates: &[DeploymentId], now: u64) -> Self {
        let counts = |rank: usize| {
            [
                1,
                need.tokens_on(rank),
                need.input_on(rank),
                need.output_on(rank),
            ]
        };
        let on = candidates
            .iter()
            .enumerate()
            .map(|(rank, &d)| (d, counts(rank)))
            .collect();
        let tenant = need.tenant.as_ref().map(|t| {
            let mut most = [1, 0, 0, 0];
            let mut cost = 0;
            for rank in 0..candidates.len() {
                for (m, c) in most.iter_mut().zip(counts(rank)) {
                    *m = (*m).max(c);
                }
                cost = cost.max(need.cost(rank));
            }
            (t.spec.name.clone(), most, cost)
        });
        Self {
            id: need.id,
            on,
            tenant,
            expiry: now + need.slot_ttl_ms(),
        }
    }

    /// A block of `requests` and `tokens` of `d`.
    fn block(d: DeploymentId, (requests, tokens): (u64, u64)) -> Self {
        Self {
            id: 0,
            on: vec![(d, [requests, tokens, tokens, tokens])],
            tenant: None,
            expiry: 0,
        }
    }

    /// Counts it in `cells` (of a local ledger over `table`, at `now`) as admitted everywhere
    /// it may be.
    fn charge(&self, table: &ScopeTable, cells: &mut LocalCells, now: u64) {
        let nb = bucket_of(now);
        let slot = Slot {
            id: self.id,
            expiry: self.expiry,
            bucket: nb,
        };
        let add = |st: &mut ScopeState, counts: Counts| {
            let k = st.window.expire(nb);
            st.window.add(k, counts);
        };
        for &(d, counts) in &self.on {
            for &s in table.of(d).unwrap_or_default() {
                add(cells.scope(s), table.kept(d, counts));
            }
        }
        if let Some((name, counts, cost)) = &self.tenant {
            let t = cells.tenant(name);
            add(&mut t.scope, *counts);
            t.spend.add(&super::period::periods(now), *cost);
        }
        if self.id != 0 {
            let tenant = self.tenant.as_ref().map(|(name, _, _)| name.as_str());
            hold(table, cells, self.on.iter().map(|&(d, _)| d), tenant, slot);
        }
    }

    /// Its reply came while the instance was local: the slots it holds there on the
    /// deployments it was not admitted on (`granted`) are freed. (What it counted stays: the
    /// local ledger errs on the used side.)
    fn unhold(&self, table: &ScopeTable, cells: &mut LocalCells, granted: Option<DeploymentId>) {
        if self.id == 0 {
            return;
        }
        for &(d, _) in self.on.iter().filter(|(d, _)| Some(*d) != granted) {
            for &s in table.of(d).unwrap_or_default() {
                cells.scope(s).slots.free(self.id);
            }
        }
        if granted.is_none()
            && let Some((name, _, _)) = &self.tenant
        {
            cells.tenant(name).scope.slots.free(self.id);
        }
    }
}

/// Holds `slot` in a local ledger (`cells` over `table`) on every scope of each of
/// `deployments`, and on `tenant`'s.
fn hold(
    table: &ScopeTable,
    cells: &mut LocalCells,
    deployments: impl IntoIterator<Item = DeploymentId>,
    tenant: Option<&str>,
    slot: Slot,
) {
    for d in deployments {
        for &s in table.of(d).unwrap_or_default() {
            cells.scope(s).slots.take(slot);
        }
    }
    if let Some(name) = tenant {
        cells.tenant(name).scope.slots.take(slot);
    }
}

/// Holds, in a local ledger about to start, slots that stand in for the other instances'
/// requests in flight at the last heartbeat (`beat`): in each scope, and each tenant, this
/// instance counts at least its share (of `n` instances, rounded up) of every instance's live
/// slots then, its own then included (those of its own that ended since freed their room; those
/// still in flight are held already). Without them an instance holding few requests would admit
/// up to its share of a concurrency limit while one holding many went on holding them: together
/// over the limit. They last as long as the longest slot, as nothing says when the requests they
/// stand for end.
fn stand_in_for_others(beat: &Beat, n: u64, cells: &mut LocalCells, now: u64) {
    let nb = bucket_of(now);
    let expiry = now.saturating_add(millis(MAX_SLOT_TTL));
    let mut next_id = u64::MAX;
    let mut stand_in = |slots: &mut super::window::Slots, total: u64, own: u64| {
        for _ in 0..share_up(total, n).saturating_sub(own) {
            slots.take(Slot {
                id: next_id,
                expiry,
                bucket: nb,
            });
            next_id -= 1;
        }
    };
    let own = |list: &[u64], i: usize| list.get(i).copied().unwrap_or(0);
    for (s, &total) in beat.in_flight.iter().enumerate() {
        stand_in(
            &mut cells.scope(s).slots,
            total,
            own(&beat.own_in_flight, s),
        );
    }
    for (t, ((name, ..), &total)) in beat.tenants.iter().zip(&beat.tenant_in_flight).enumerate() {
        let own = own(&beat.own_tenant_in_flight, t);
        stand_in(&mut cells.tenant(name).scope.slots, total, own);
    }
}

/// A registered [`Calling`]. Once its answer is handled (or the call abandoned: dropped), a
/// local ledger started later no longer counts it.
struct Called<'a> {
    inner: &'a Inner,
    key: u64,
    /// Still registered (dropping it then takes the state lock).
    open: bool,
}

impl Called<'_> {
    /// Its answer is handled, in `st` (what it admitted, if anything, counted as this
    /// instance's own); `granted`: the deployment it admitted on.
    fn done(mut self, st: &mut State, granted: Option<DeploymentId>) {
        self.open = false;
        if let Some(c) = st.calling.remove(&self.key)
            && let Admitting::Local(l) = &mut st.admitting
        {
            c.unhold(&l.table, &mut l.cells, granted);
        }
    }
}

impl Drop for Called<'_> {
    fn drop(&mut self) {
        if self.open {
            self.inner.lock().calling.remove(&self.key);
        }
    }
}

/// A block call and the corrections it carries (see [`Leases`]), from when they are taken from
/// the leases until the call's answer says what became of them. Without an answer (the call
/// failed in a way that may have left it run, or its caller went away), it is sent again under
/// the same id by a later heartbeat: see [`Unanswered`].
struct Carried<'a> {
    inner: &'a Inner,
    d: DeploymentId,
    /// The call's id (its record in the store, see lua/common.lua).
    call: u64,
    owed: Vec<(u64, [i64; 4])>,
    /// Its answer (or failure) was taken in.
    done: bool,
}

impl Carried<'_> {
    /// The call answered (`None`) or failed with `error`: if the store surely did not run it,
    /// its corrections are owed again whole; if it may have, it is kept to send again.
    fn answered(mut self, error: Option<&LedgerError>) {
        self.done = true;
        let owed = std::mem::take(&mut self.owed);
        let Some(e) = error else {
            return;
        };
        if e.not_applied() {
            let mut st = self.inner.lock();
            for (bucket, deltas) in owed {
                st.leases.owe_again(Owed {
                    deployment: self.d,
                    bucket,
                    deltas,
                    observed: None,
                });
            }
        } else {
            self.unanswered(owed);
        }
    }

    fn unanswered(&self, carried: Vec<(u64, [i64; 4])>) {
        let sent = self.inner.now();
        let mut st = self.inner.lock();
        st.leases.unanswered(Unanswered {
            deployment: self.d,
            call: self.call,
            carried,
            sent,
        });
        self.inner.wake_for_moves(&st);
    }
}

/// A beat's corrections and their number while the beat is out: if its caller goes away
/// before the answer, they are kept to go again under that number (see [`State::carrying`]),
/// as after a beat that got no answer.
struct Beating<'a> {
    inner: &'a Inner,
    carried: Option<(u64, Vec<Owed>)>,
}

impl Drop for Beating<'_> {
    fn drop(&mut self) {
        if let Some(carried) = self.carried.take() {
            self.inner.lock().carrying = Some(carried);
        }
    }
}

/// Corrections sent one call each (at close): if their caller goes away before every answer
/// came, the one out may have been applied (see [`Leases::owe_unsure`]) and the rest are owed
/// as they were.
struct Unleasing<'a> {
    inner: &'a Inner,
    out: Option<Owed>,
    rest: std::vec::IntoIter<Owed>,
}

impl Drop for Unleasing<'_> {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        if let Some(o) = self.out.take() {
            st.leases.owe_unsure(o);
        }
        for o in self.rest.by_ref() {
            st.leases.owe_again(o);
        }
    }
}

/// Block calls being asked again: kept for the next heartbeat if dropped before their answers.
struct Asking<'a> {
    inner: &'a Inner,
    calls: Vec<Unanswered>,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        for u in self.calls.drain(..) {
            st.leases.still_unanswered(u);
        }
    }
}

impl Drop for Carried<'_> {
    fn drop(&mut self) {
        if !self.done {
            // The caller went away before the answer.
            let owed = std::mem::take(&mut self.owed);
            self.unanswered(owed);
        }
    }
}

/// A block asked for ahead, from its spawning until its task ends, however it ends (done,
/// panicked, aborted, or dropped unpolled with its runtime): then another may be asked for on
/// its deployment, and [`ResilientStore::refills_done`] counts it no longer.
struct Refilling {
    inner: Arc<Inner>,
    d: DeploymentId,
}

impl Drop for Refilling {
    fn drop(&mut self) {
        self.inner.refilling[self.d.0].store(false, Ordering::Release);
        if self.inner.refills.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.refilled.notify_waiters();
        }
    }
}

/// Who a block is asked for ([`Inner::ask_block`]).
#[derive(Clone, Copy)]
enum BlockFor<'a> {
    /// A request (its need, the candidate's rank, all its candidates), admitted from the block
    /// the store grants.
    For(&'a Need, usize, &'a [DeploymentId]),
    /// The requests to come ([`Inner::refill`]).
    Ahead,
}

/// What became of a block asked for.
enum Asked {
    /// Granted, and the request it was asked for admitted from it.
    Taken(Reservation),
    /// Granted (the request it was asked for, if any, did not fit it).
    Granted,
    /// Not granted: no room, a cooldown, or (asked ahead) the store is not admitting.
    Refused,
    /// The instance no longer admits through the store, and decided the request there.
    Decided(Result<Admission, LedgerError>),
}

/// How close to running out (ms before it stops admitting) a `lease: auto` block has its
/// successor asked for ahead ([`Inner::refill`]).
const REFILL_AHEAD_MS: u64 = 2_000;

#[derive(Debug)]
enum Admitting {
    Shared,
    Local(Box<Local>),
    Open(HashSet<u64>),
}

#[derive(Debug)]
struct State {
    admitting: Admitting,
    /// When the mode last changed, ms.
    since: u64,
    seen: Option<Beat>,
    /// All this instance admitted through the shared store, and as it stood when it sent the
    /// beats whose readings it recorded.
    own: Own,
    reads: Reads,
    /// What it admitted through the shared store in the last minute, per scope and tenant: if
    /// the store loses its keys, every instance writes its own back.
    own_windows: Vec<Window>,
    own_tenant_windows: HashMap<String, Window>,
    /// The store's epoch as last seen (0: none).
    epoch: u64,
    in_flight: IdMap<u64, Held>,
    /// Calls to the shared store that may admit, sent and not answered yet, by call number.
    calling: IdMap<u64, Calling>,
    /// Tenants served lately, and when last (ms).
    tenants: HashMap<String, u64>,
    /// Admissions that got no answer ([`LedgerError::maybe_applied`]), or a denial only on
    /// being sent again: Redis may have counted them after all. Each is kept until the next
    /// restore voids it, or until Redis can no longer hold anything of it (see
    /// [`State::unsure`]).
    uncertain: Vec<Uncertain>,
    /// A restore whose reply never came, with the local admissions it wrote: Redis may apply
    /// it late, so it is sent again under the same number (applied at most once).
    pending: Option<(u64, Vec<Entry>)>,
    /// The blocks of limits this instance leases.
    leases: Leases,
    /// Lease corrections sent with a beat that got no answer, and their sequence number: sent
    /// again as they are with the next beat.
    carrying: Option<(u64, Vec<Owed>)>,
    /// After the store lost its keys: until this many instances have written their own back
    /// (those seen before), or this time (ms) has passed, admissions stay local.
    awaiting: Option<(u64, u64)>,
    changes: u64,
    local_admissions: u64,
}

struct Inner {
    shared: RedisStore,
    settings: LedgerSettings,
    /// Each deployment's `lease:`, by deployment index.
    lease: Vec<Option<Lease>>,
    /// One lease request at a time per deployment.
    leasing: Vec<tokio::sync::Mutex<()>>,
    /// A block asked for ahead ([`Inner::refill`]) is on its way, per deployment; how many
    /// are, and what wakes [`ResilientStore::refills_done`].
    refilling: Vec<AtomicBool>,
    refills: AtomicU64,
    refilled: tokio::sync::Notify,
    /// How many times the leases were settled ([`Inner::settle_leases`]): a block asked for
    /// ahead before one began is not asked for once it has.
    closes: AtomicU64,
    clock: Arc<dyn Clock>,
    instance: String,
    state: Mutex<State>,
    seq: AtomicU64,
    /// Numbers the calls in [`State::calling`].
    calls: AtomicU64,
    /// One restore at a time.
    restoring: tokio::sync::Mutex<()>,
    /// When the heartbeat task wakes next (ms), and what wakes it sooner: a move owed (see
    /// `Granted::send_by`) that must reach the store before then.
    beat_due: AtomicU64,
    moved: tokio::sync::Notify,
    /// One heartbeat at a time (the task's, `heartbeat_now`'s, the one at close): two at once
    /// could reach the store out of their order, and the later number would have the store
    /// skip the earlier one's corrections.
    beating: tokio::sync::Mutex<()>,
}

/// The shared Redis ledger, with timeouts and a failure mode (see the module documentation).
pub struct ResilientStore {
    inner: Arc<Inner>,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for ResilientStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResilientStore")
            .field("shared", &self.inner.shared)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Drop for ResilientStore {
    fn drop(&mut self) {
        if let Some(task) = &self.heartbeat {
            task.abort();
        }
    }
}

fn unavailable(e: &LedgerError) -> bool {
    matches!(e, LedgerError::Redis { .. } | LedgerError::Timeout { .. })
}

/// Whether `e` says the store did not answer in time (slow, or away without refusing).
fn slow(e: &LedgerError) -> bool {
    match e {
        LedgerError::Timeout { .. } => true,
        LedgerError::Redis { source, .. } => source.is_timeout(),
        _ => false,
    }
}

impl ResilientStore {
    /// Wraps `shared` (connect it with [`RedisStoreOptions::lazy`](super::RedisStoreOptions) so
    /// that an instance can start while Redis is away). Sends a first heartbeat and loads the
    /// ledger's scripts ([`RedisStore::load_scripts`], within `ledger.timeout_ms`), then sends a
    /// heartbeat every `settings.heartbeat` on a task of the current Tokio runtime (none outside
    /// a runtime).
    pub async fn new(shared: RedisStore, registry: &Registry, clock: Arc<dyn Clock>) -> Self {
        let settings = registry.ledger;
        let lease: Vec<Option<Lease>> = registry.deployments.iter().map(|d| d.lease).collect();
        let leasing = lease.iter().map(|_| tokio::sync::Mutex::new(())).collect();
        let refilling = lease.iter().map(|_| AtomicBool::new(false)).collect();
        let now = clock.now_ms();
        let own_scopes = shared.scope_count();
        let inner = Arc::new(Inner {
            shared,
            settings,
            lease,
            leasing,
            refilling,
            refills: AtomicU64::new(0),
            refilled: tokio::sync::Notify::new(),
            closes: AtomicU64::new(0),
            clock,
            instance: format!("{:016x}", fastrand::u64(..)),
            state: Mutex::new(State {
                admitting: Admitting::Shared,
                since: now,
                seen: None,
                own: Own {
                    scopes: vec![[0; 4]; own_scopes],
                    tenants: HashMap::new(),
                },
                reads: Reads::default(),
                own_windows: vec![Window::default(); own_scopes],
                own_tenant_windows: HashMap::new(),
                epoch: 0,
                in_flight: IdMap::default(),
                calling: IdMap::default(),
                tenants: HashMap::new(),
                uncertain: Vec::new(),
                pending: None,
                leases: Leases::default(),
                carrying: None,
                awaiting: None,
                changes: 0,
                local_admissions: 0,
            }),
            seq: AtomicU64::new(now),
            calls: AtomicU64::new(0),
            restoring: tokio::sync::Mutex::new(()),
            beat_due: AtomicU64::new(u64::MAX),
            moved: tokio::sync::Notify::new(),
            beating: tokio::sync::Mutex::new(()),
        });
        inner.tick().await;
        // After the first heartbeat, so that it does not wait behind every script's compiling;
        // bounded as any call is, so that an instance still starts at once while Redis is away.
        let _ = tokio::time::timeout(inner.settings.timeout, inner.shared.load_scripts()).await;
        let heartbeat = tokio::runtime::Handle::try_current().ok().map(|rt| {
            let weak = Arc::downgrade(&inner);
            rt.spawn(beat_forever(weak))
        });
        Self { inner, heartbeat }
    }

    /// Runs one heartbeat now (the task runs them every `ledger.heartbeat_ms`): registers this
    /// instance, and restores or leaves local mode when the store answers.
    pub async fn heartbeat_now(&self) {
        self.inner.tick().await;
    }

    /// The mode now, and how long it has lasted.
    pub fn status(&self) -> Health {
        self.inner.health()
    }

    /// After `r` was admitted from a `lease: auto` block: if that block is about to run out
    /// (see [`Leases::runs_out`]), asks for the next one on a task of the current runtime
    /// ([`Inner::refill`]), one at a time per deployment. `closes`: [`Inner::closes`] as the
    /// admission began.
    fn refill_soon(&self, r: &Reservation, closes: u64) {
        let d = r.deployment;
        if self.inner.lease.get(d.0).copied().flatten() != Some(Lease::Auto) {
            return;
        }
        {
            let mut st = self.inner.lock();
            let now = self.inner.now();
            let tokens = st.leases.rate(now).1.max(1);
            if !st.leases.holds(r.id) || !st.leases.runs_out(d, tokens, now, REFILL_AHEAD_MS) {
                return;
            }
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.inner.refilling[d.0].swap(true, Ordering::AcqRel) {
            return;
        }
        self.inner.refills.fetch_add(1, Ordering::AcqRel);
        let refilling = Refilling {
            inner: self.inner.clone(),
            d,
        };
        runtime.spawn(async move {
            refilling.inner.refill(d, closes).await;
            drop(refilling);
        });
    }

    /// Waits until no block asked for ahead (`lease: auto`, see [`Lease::Auto`]) is on its way:
    /// for a caller that wants this instance quiet before it reads the shared windows.
    pub async fn refills_done(&self) {
        loop {
            let refilled = self.inner.refilled.notified();
            if self.inner.refills.load(Ordering::Acquire) == 0 {
                return;
            }
            refilled.await;
        }
    }
}

/// Heartbeats on the clock's multiples of `ledger.heartbeat_ms`, so that every instance reads
/// the windows at about the same moment: what one instance admitted after its last heartbeat is
/// then in no other's reading either, and each adds its own (see [`Own`]).
async fn beat_forever(inner: Weak<Inner>) {
    // When this task last beat (ms).
    let mut last = 0;
    loop {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let now = inner.now();
        let (rejoining, send_by) = {
            let st = inner.lock();
            (st.rejoining(), st.leases.send_by())
        };
        let wait = next_wake_in(inner.settings.heartbeat, rejoining, now, send_by, last);
        inner.beat_due.store(now + wait, Ordering::Relaxed);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(wait)) => {
                last = inner.now();
                inner.tick().await;
            }
            // A move owed before then: wait again, for it.
            () = inner.moved.notified() => {}
        }
    }
}

/// How long until the heartbeat task sends a beat, ms, at `now` (ms): at the next beat, or by
/// `send_by` (ms) if moves are owed by then. A deadline already past waits for a tenth of a
/// heartbeat (at most a second) after the `last` beat (ms): while the store does not answer, or
/// the instance waits to rejoin, beats do not carry the moves, and would go back to back.
fn next_wake_in(
    heartbeat: Duration,
    rejoining: bool,
    now: u64,
    send_by: Option<u64>,
    last: u64,
) -> u64 {
    let beat = next_beat_in(heartbeat, rejoining, now);
    let spaced = last + (heartbeat.as_millis() as u64 / 10).clamp(1, 1_000);
    let due = |t: u64| if t > now { t } else { t.max(spaced) };
    send_by.map_or(beat, |t| beat.min(due(t).saturating_sub(now)))
}

/// How long until the next beat, ms, at `now` (ms): the next multiple of the heartbeat, or of a
/// tenth of it while the instance waits for the others to rejoin (it admits nothing until they
/// are back).
fn next_beat_in(heartbeat: Duration, rejoining: bool, now: u64) -> u64 {
    let beat = heartbeat.as_millis().max(1) as u64;
    let every = if rejoining { beat / 10 } else { beat }.max(1);
    every - now % every
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain bookkeeping: after a panic elsewhere, carry on with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Wakes the heartbeat task if a move owed must reach the store before it would wake.
    fn wake_for_moves(&self, st: &State) {
        let due = self.beat_due.load(Ordering::Relaxed);
        if st.leases.send_by().is_some_and(|t| t < due) {
            self.moved.notify_one();
        }
    }

    /// How long before a grant's second leaves the shared windows the moves out of it are sent
    /// (ms): a call's time twice, and a second to spare.
    fn move_margin(&self) -> u64 {
        1_000 + 2 * self.settings.timeout.as_millis() as u64
    }

    /// How long an instance back from local mode waits for the others to write back what they
    /// admitted on their own, ms: five heartbeats. Those that cannot (stopped, or cut off from
    /// the store) leave the instances zset within three.
    fn rejoin_grace(&self) -> u64 {
        5 * self.settings.heartbeat.as_millis() as u64
    }

    /// `fut` bounded by `ledger.timeout_ms`.
    async fn timed<T>(&self, fut: LedgerFuture<'_, T>) -> Result<T, LedgerError> {
        let after = self.settings.timeout;
        match tokio::time::timeout(after, fut).await {
            Ok(result) => result,
            Err(_) => Err(LedgerError::Timeout {
                url: self.shared.url().to_owned(),
                after,
            }),
        }
    }

    fn health(&self) -> Health {
        let st = self.lock();
        Health {
            mode: st.mode(),
            since: Duration::from_millis(self.now().saturating_sub(st.since)),
            instances: st.seen.as_ref().map_or(0, |b| b.instances),
            changes: st.changes,
            local_admissions: st.local_admissions,
            in_flight: st.in_flight.len() as u64,
        }
    }

    /// One heartbeat: register, learn the instance count and epoch. When the store answers
    /// after an outage, or is not in the epoch this instance knows (it lost its keys, or another
    /// instance restored them), restore first, from what was seen before, and read again: a
    /// reading of emptied windows must not replace the last good one.
    async fn tick(&self) {
        let _one = self.beating.lock().await;
        for _ in 0..2 {
            let (tenants, base, me) = {
                let mut st = self.lock();
                let tenants = st.recent_tenants(self.now());
                let keep: HashSet<&String> = tenants.iter().collect();
                st.own.tenants.retain(|name, _| keep.contains(name));
                let me = BeatAs {
                    away: matches!(&st.admitting, Admitting::Local(l) if l.closing.is_none()),
                    // Totals read while local, or while the windows are being rebuilt, miss
                    // what is not written back yet.
                    reading: st.mode() != Mode::Local && st.awaiting.is_none(),
                };
                (tenants, st.own.clone(), me)
            };
            let ttl = 3 * self.settings.heartbeat.as_millis() as u64;
            // What the leased blocks owe goes with the beat while the store is shared: no call
            // of its own. A beat that got no answer is sent again with the same corrections
            // under the same number (applied once); one the store was in another epoch for
            // gives them back to the leases.
            let carried = {
                let mut st = self.lock();
                let shared = st.mode() == Mode::Shared && st.awaiting.is_none() && st.epoch != 0;
                match st.carrying.take() {
                    Some(carried) => Some(carried),
                    None if shared => {
                        let owed = st.leases.drain(self.now());
                        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
                        (!owed.is_empty()).then_some((seq, owed))
                    }
                    None => None,
                }
            };
            let mut beating = Beating {
                inner: self,
                carried,
            };
            let corrections = beating
                .carried
                .as_ref()
                .map(|(seq, owed)| (*seq, owed.as_slice()));
            let sent = self.now();
            let beat = || {
                let beat = self
                    .shared
                    .heartbeat(&self.instance, ttl, &tenants, corrections, me);
                self.timed(beat.boxed())
            };
            // This instance's own requests in flight as the beat goes: those that end later are
            // still in the store's count (their settlement is sent after they leave this count),
            // and so are those admitted whose answer is not in yet.
            let mine = || {
                self.lock()
                    .in_flight_by_scope(self.shared.table(), &tenants)
            };
            let mut own = mine();
            let mut answer = beat().await;
            // As for an admission: one slow answer is not an outage. The beat goes once more
            // with the same corrections under the same number (applied once).
            if self.settings.on_error == OnError::Local && answer.as_ref().is_err_and(slow) {
                own = mine();
                answer = beat().await;
            }
            let (own_in_flight, own_tenant_in_flight) = own;
            let carried = beating.carried.take();
            let (beat, applied) = match answer {
                Ok(answer) => answer,
                Err(e) => {
                    tracing::debug!(error = %e, "ledger heartbeat failed");
                    let mut st = self.lock();
                    st.carrying = carried;
                    // Other instances may be admitting on their own now: this one does too,
                    // so that it waits for them to write it back before it admits through
                    // the store again.
                    let local = self.settings.on_error == OnError::Local;
                    if st.mode() == Mode::Local {
                        st.away_again();
                    } else if local && st.mode() == Mode::Shared && st.seen.is_some() {
                        let n = st.enter_local(self, None);
                        tracing::warn!(
                            error = %e,
                            instances = n,
                            "ledger mode: local (the heartbeat got no answer)"
                        );
                    }
                    return;
                }
            };
            if !applied && let Some((_, owed)) = carried {
                self.owe_again(owed);
            }
            let current = {
                let mut st = self.lock();
                let current = st.mode() != Mode::Local
                    && st.awaiting.is_none()
                    && beat.epoch != 0
                    && beat.epoch == st.epoch;
                if current {
                    self.beat_saw_rooms(&mut st, &beat, sent);
                }
                // Recorded as its last reading in the store: what local mode starts from.
                if beat.read != 0 {
                    st.reads.record(beat.read, beat.oldest, base);
                    st.seen = Some(Beat {
                        own_in_flight,
                        own_tenant_in_flight,
                        ..beat
                    });
                }
                current
            };
            if current {
                self.set_mode_shared("the shared ledger answers again");
                self.ask_unanswered_again().await;
                return;
            }
            if let Err(e) = self.restore().await {
                tracing::debug!(error = %e, "ledger restore failed");
                return;
            }
        }
    }

    /// What a heartbeat sent at `sent` read of every leased deployment's room: a request that
    /// does not fit a full deployment skips it without a call, and one that fits asks as soon
    /// as room comes back, without waiting for an earlier refusal's reading to expire. A
    /// deployment another instance put a cooldown on ends this instance's block there: its
    /// requests go to the store, which refuses them until the cooldown is over.
    fn beat_saw_rooms(&self, st: &mut State, beat: &Beat, sent: u64) {
        let table = self.shared.table();
        for (i, _) in self.lease.iter().enumerate().filter(|(_, l)| l.is_some()) {
            let d = DeploymentId(i);
            let Some(scopes) = table.of(d) else {
                continue;
            };
            let cooling = beat.cooling.get(scopes[0]).copied().unwrap_or(0);
            if cooling > 0 {
                st.leases.end(d);
                st.leases.saw_cooldown(d, cooling, sent);
                continue;
            }
            let totals = |s: usize| beat.scopes.get(s).copied().unwrap_or_default();
            let room = Room::left(scopes.iter().map(|&s| (table.limits(s), totals(s))));
            st.leases.beat_saw_room(d, room, sent);
        }
    }

    fn set_mode_shared(&self, why: &str) {
        let mut st = self.lock();
        if st.mode() != Mode::Shared {
            let since = Duration::from_millis(self.now().saturating_sub(st.since));
            tracing::warn!(
                from = st.mode().as_str(),
                after = ?since,
                "ledger mode: shared ({why})"
            );
            st.admitting = Admitting::Shared;
            st.since = self.now();
            st.changes += 1;
        }
    }

    /// Writes what the shared windows miss into them (see lua/restore.lua), then admits through
    /// them again. Rounds repeat while local admissions keep arriving; each is one call.
    async fn restore(&self) -> Result<(), LedgerError> {
        let _one = self.restoring.lock().await;
        let uncertain = {
            let mut st = self.lock();
            st.forget_settled_uncertain(self.now());
            std::mem::take(&mut st.uncertain)
        };
        for (i, u) in uncertain.iter().enumerate() {
            if let Err(e) = self
                .timed(self.shared.void(&u.need, &u.candidates).boxed())
                .await
            {
                let mut st = self.lock();
                for u in &uncertain[i..] {
                    st.keep_uncertain(u.clone());
                }
                return Err(e);
            }
        }
        loop {
            let (seq, seen, own, own_windows, known, slots, snapshot, complete) = {
                let mut st = self.lock();
                let own = st.own_since_read(self.now());
                let own_windows = st.own_rows(self.now());
                let pending = st.pending.take();
                let slots: Vec<(Reservation, u64)> = st
                    .in_flight
                    .values()
                    .map(|h| (h.reservation.clone(), h.expiry))
                    .collect();
                // It stops admitting on its own before the snapshot, so that the snapshot is
                // all it admitted: from then on it holds nothing the store has not been sent.
                let grace = self.now() + self.rejoin_grace();
                if let Admitting::Local(l) = &mut st.admitting {
                    l.closing.get_or_insert(grace);
                }
                // A fresh snapshot is the whole log; one sent again may miss what was admitted
                // after it, while the store was away again.
                let (seq, snapshot, complete) = match pending {
                    Some((seq, snapshot)) => {
                        let sent: HashSet<u64> =
                            snapshot.iter().map(|e| e.reservation.id).collect();
                        let complete = match &st.admitting {
                            Admitting::Local(l) => l.log.keys().all(|id| sent.contains(id)),
                            _ => true,
                        };
                        (seq, snapshot, complete)
                    }
                    None => {
                        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
                        let snapshot = match &st.admitting {
                            Admitting::Local(l) => l.log.values().cloned().collect(),
                            _ => Vec::new(),
                        };
                        (seq, snapshot, true)
                    }
                };
                (
                    seq,
                    st.seen.clone(),
                    own,
                    own_windows,
                    st.epoch,
                    slots,
                    snapshot,
                    complete,
                )
            };
            let request = Restore {
                instance: &self.instance,
                seq,
                known_epoch: known,
                proposed_epoch: fastrand::u64(1..1 << 52),
                carry: seen.as_ref(),
                own_windows,
                own_spend: Some(&own),
                slots,
                entries: snapshot.iter().filter_map(replayed).collect(),
                complete,
            };
            let restored = match self.timed(self.shared.restore(&request).boxed()).await {
                Ok(restored) => restored,
                Err(e) => {
                    let mut st = self.lock();
                    if e.maybe_applied() {
                        st.pending = Some((seq, snapshot));
                    }
                    st.away_again();
                    return Err(e);
                }
            };
            self.shared.set_epoch(restored.epoch);
            log_restored(known, restored.lost);
            self.await_others(&restored);
            let (owed, done) = self.after_restore(&restored, &snapshot);
            for (reservation, actual) in owed {
                // In flight when written, settled since: the shared slot holds the estimate.
                let settle = match actual {
                    Some(actual) => self.shared.settle(&reservation, actual),
                    None => self.shared.release(&reservation),
                };
                if let Err(e) = self.timed(settle).await {
                    tracing::warn!(error = %e, "ledger: a settlement after restore failed");
                }
            }
            match done {
                Next::Done | Next::Wait => return Ok(()),
                Next::Again => {}
            }
        }
    }

    /// After a restore: whether admissions must stay local until the other instances have
    /// written back what the store lost (at most five heartbeats).
    fn await_others(&self, restored: &Restored) {
        let mut st = self.lock();
        let now = self.now();
        // `open` admits uncounted anyway: nothing to wait for.
        if restored.stale && self.settings.on_error != OnError::Open {
            let expected = st.seen.as_ref().map_or(1, |b| b.instances);
            if restored.restored < expected {
                st.awaiting = Some((expected, now + self.rejoin_grace()));
                if st.mode() == Mode::Shared && self.settings.on_error == OnError::Local {
                    // Admitting nothing on its own while it waits: what it admitted would
                    // be missing from the windows when the others go back to them.
                    let n = st.enter_local(self, Some(now + self.rejoin_grace()));
                    tracing::warn!(
                        instances = n,
                        "ledger mode: local (the shared ledger lost its windows; waiting for \
                         the other instances to write theirs back)"
                    );
                }
            } else {
                st.awaiting = None;
            }
        } else if let Some((expected, until)) = st.awaiting
            && (restored.restored >= expected || now >= until)
        {
            st.awaiting = None;
        }
    }

    /// Drops what a restore wrote from the local log; settlements owed to the shared store for
    /// entries settled while it was written. Leaves local mode when nothing is left and no other
    /// instance still has to write back what it admitted on its own, or when it has waited for
    /// them for [`Self::rejoin_grace`].
    #[allow(clippy::type_complexity)]
    fn after_restore(
        &self,
        restored: &Restored,
        written: &[Entry],
    ) -> (Vec<(Reservation, Option<ActualUsage>)>, Next) {
        let mut st = self.lock();
        st.epoch = restored.epoch;
        let now = self.now();
        let mut owed = Vec::new();
        let mut moved = Vec::new();
        let mut counted = Vec::new();
        let (written_back, others_back) = match &mut st.admitting {
            Admitting::Local(l) => {
                for e in written {
                    let Some(current) = l.log.remove(&e.reservation.id) else {
                        continue;
                    };
                    counted.extend(replayed(e));
                    let was_in_flight = e.actual.is_none() && !e.released;
                    let is_done = current.actual.is_some() || current.released;
                    if was_in_flight && current.version != e.version && is_done {
                        owed.push((current.reservation.clone(), current.actual));
                    } else if was_in_flight && !is_done {
                        moved.push(Held {
                            reservation: current.reservation.clone(),
                            expiry: current.expiry,
                        });
                    }
                }
                let given_up = l.closing.is_some_and(|until| now >= until);
                if restored.waiting > 0 && given_up {
                    tracing::warn!(
                        instances = restored.waiting,
                        "ledger: stopped waiting for other instances to write back what they \
                         admitted on their own"
                    );
                }
                (l.log.is_empty(), restored.waiting == 0 || given_up)
            }
            _ => (true, true),
        };
        let next = match (written_back, others_back && st.awaiting.is_none()) {
            (false, _) => Next::Again,
            (true, false) => Next::Wait,
            (true, true) => Next::Done,
        };
        // What it wrote is in the shared windows now, as if admitted through them: it counts
        // in full should this instance go local again before a heartbeat reads it (see
        // `Reads`), and it is written back again should the store lose its keys.
        for w in &counted {
            let tenant = w.reservation.tenant.as_ref().map(|t| TenantHold {
                cost_micros: w.cost,
                ..t.clone()
            });
            let admitted = Admitted {
                deployment: w.reservation.deployment,
                bucket: w.reservation.bucket,
                counts: w.counts,
                tenant: tenant.as_ref(),
            };
            st.remember(self.shared.table(), &admitted, now);
        }
        for h in moved {
            st.in_flight.insert(h.reservation.id, h);
        }
        drop(st);
        if next == Next::Done {
            self.set_mode_shared("the shared ledger answers again; local admissions written back");
        }
        (owed, next)
    }

    /// Admission when the shared store failed with `e`: per `ledger.on_error`.
    fn fall_back(
        &self,
        e: LedgerError,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        let mut st = self.lock();
        match self.settings.on_error {
            OnError::Closed => Err(e),
            OnError::Open => {
                if st.mode() == Mode::Shared {
                    tracing::warn!(error = %e, "ledger mode: open (admitting without counting)");
                    st.admitting = Admitting::Open(HashSet::new());
                    st.since = self.now();
                    st.changes += 1;
                }
                st.admit_elsewhere(self, need, candidates)
            }
            // Never seen by a heartbeat: how many instances share the limits is unknown, so no
            // share is safe. Fail as `closed` would until Redis has answered once.
            OnError::Local if st.seen.is_none() => Err(e),
            OnError::Local => {
                if st.mode() == Mode::Shared {
                    let local = st.enter_local(self, None);
                    tracing::warn!(
                        error = %e,
                        instances = local,
                        "ledger mode: local (admitting within this instance's share of each limit)"
                    );
                }
                st.admit_elsewhere(self, need, candidates)
            }
        }
    }

    async fn admit(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        {
            let mut st = self.lock();
            if let Some(t) = &need.tenant {
                let now = self.now();
                match st.tenants.get_mut(&t.spec.name) {
                    Some(at) => *at = now,
                    None => {
                        st.tenants.insert(t.spec.name.clone(), now);
                    }
                }
            }
            if let Some(decided) = st.elsewhere(self, need, candidates) {
                return decided;
            }
        }
        let (mut result, mut call) = match self.admit_leased(need, candidates).await {
            // Admitted from a block (the block's grant counted it), or decided elsewhere
            // meanwhile: nothing of it is held through the shared store.
            Some(Ok(admission)) => return Ok(admission),
            Some(Err(e)) => (Err(e), None),
            None => match self.admit_shared(need, candidates).await {
                Ok((answer, call)) => (answer, Some(call)),
                Err(decided) => return decided,
            },
        };
        // One slow answer is not an outage: the same admission goes once more (Redis answers a
        // repeat with the first one's grant if it ran it) before the instance goes local. One
        // that went local on every slow call would admit on its own while the others, answered,
        // fill the shared windows without counting what it admitted.
        let mut superseded = None;
        let retry = call.is_some() && self.settings.on_error == OnError::Local;
        if retry && result.as_ref().is_err_and(slow) {
            match self.admit_shared(need, candidates).await {
                Ok((answer, again)) => {
                    superseded = call.replace(again);
                    result = answer;
                }
                Err(decided) => {
                    // Decided in the local ledger, which counts the first call: the slot it
                    // holds on the deployment admitted on is that admission's now.
                    let granted = match &decided {
                        Ok(Admission::Granted(r)) => Some(r.deployment),
                        _ => None,
                    };
                    let mut st = self.lock();
                    if let Some(first) = call.take() {
                        first.done(&mut st, granted);
                    }
                    st.unsure(need, candidates, self.now());
                    return decided;
                }
            }
        }
        // The first call may still be run late (on a connection Redis has not read yet).
        let retried = superseded.is_some();
        if let Err(LedgerError::Lost { .. }) = result {
            drop(call.take());
            result = match self.restore().await {
                Ok(()) => match self.admit_shared(need, candidates).await {
                    Ok((answer, again)) => {
                        call = Some(again);
                        answer
                    }
                    Err(decided) => return decided,
                },
                Err(e) => Err(e),
            };
        }
        if !matches!(result, Ok(Admission::Granted(_))) {
            // Not admitted through the store: a local ledger started from now on does not
            // count it (one started from a timeout admits it there instead).
            let mut st = self.lock();
            for call in [call.take(), superseded.take()].into_iter().flatten() {
                call.done(&mut st, None);
            }
        }
        match result {
            Ok(Admission::Granted(r)) => {
                let expiry = self.now() + need.slot_ttl_ms();
                let held = Held {
                    reservation: r.clone(),
                    expiry,
                };
                let mut st = self.lock();
                st.remember(self.shared.table(), &Admitted::request(&r), self.now());
                st.in_flight.insert(r.id, held);
                for call in [call, superseded].into_iter().flatten() {
                    call.done(&mut st, Some(r.deployment));
                }
                // The router asks again under the same id after a denial: an earlier admission
                // of this request kept as uncertain is this grant (Redis answers a repeat with
                // the first grant), in use, not to be handed back.
                if !st.uncertain.is_empty() {
                    st.uncertain.retain(|u| u.need.id != r.id);
                }
                Ok(Admission::Granted(r))
            }
            Ok(denied) => {
                if retried {
                    self.lock().unsure(need, candidates, self.now());
                }
                Ok(denied)
            }
            Err(e) if unavailable(&e) || matches!(e, LedgerError::Lost { .. }) => {
                if e.maybe_applied() || retried {
                    self.lock().unsure(need, candidates, self.now());
                }
                self.fall_back(e, need, candidates)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends `need`'s admission to the shared store, registered in [`State::calling`] until
    /// answered. `Err`: the instance no longer admits through the store, and decided there.
    async fn admit_shared(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<(Result<Admission, LedgerError>, Called<'_>), Result<Admission, LedgerError>> {
        let call = {
            let mut st = self.lock();
            if let Some(decided) = st.elsewhere(self, need, candidates) {
                return Err(decided);
            }
            self.register(&mut st, Calling::request(need, candidates, self.now()))
        };
        // Dropped while the store has it (its caller went away), the admission is voided; one
        // that times out is this instance's to settle (see `State::uncertain`).
        let abandoned = self.shared.abandoned(need, candidates);
        let answer = self
            .timed(self.shared.admit_inner(need, candidates).boxed())
            .await;
        abandoned.disarm();
        Ok((answer, call))
    }

    /// Registers `calling` in `st` (which admits through the shared store).
    fn register(&self, st: &mut State, calling: Calling) -> Called<'_> {
        let key = self.calls.fetch_add(1, Ordering::Relaxed);
        st.calling.insert(key, calling);
        Called {
            inner: self,
            key,
            open: true,
        }
    }

    /// Takes `need` on candidate `rank` (`d`) from its open block.
    fn take_leased(&self, d: DeploymentId, need: &Need, rank: usize) -> Option<Reservation> {
        let mut st = self.lock();
        let now = self.now();
        let r = st.leases.take(d, need, rank, now);
        if let Some(r) = &r
            && st.leases.granted_in(d) != Some(r.bucket)
        {
            // Moved to its own second: should the store lose its keys, it is written back
            // there, its grant's second keeping it too (an over-count, for a minute at most).
            st.keep_own(self.shared.table(), &Admitted::request(r), now);
        }
        self.wake_for_moves(&st);
        r
    }

    /// Admits `need` from a leased block, walking the candidates in order while each leases:
    /// from its open block, or from a new one (one call). At most one block is asked for per
    /// admission: after that call, later candidates are tried from their open blocks only, so
    /// a request waits for two round trips at most before its provider call (the refused block
    /// and the shared admission), however many candidates are full. `None`: a candidate that
    /// does not lease was reached, or none had room: the shared store decides.
    async fn admit_leased(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Option<Result<Admission, LedgerError>> {
        // A tenant's limits and budgets are checked in the shared store, request by request;
        // so is a batch request's share of the limits (a block is sized from the whole limits,
        // and would let batch requests take the room kept for interactive ones).
        if need.tenant.is_some() || need.share_percent < 100 {
            return None;
        }
        let mut asked_once = false;
        for (rank, &d) in candidates.iter().enumerate() {
            let spec = self.lease.get(d.0).copied().flatten()?;
            if let Some(r) = self.take_leased(d, need, rank) {
                return Some(Ok(Admission::Granted(r)));
            }
            let lacks_room = |this: &Self| {
                let tokens = need.tokens_on(rank);
                this.lock().leases.lacks_room(d, tokens, this.now())
            };
            if asked_once || lacks_room(self) {
                continue;
            }
            let _one = self.leasing[d.0].lock().await;
            if let Some(r) = self.take_leased(d, need, rank) {
                return Some(Ok(Admission::Granted(r)));
            }
            // A call made while this request waited (a block asked for ahead) may have read the
            // room since.
            if lacks_room(self) {
                continue;
            }
            asked_once = true;
            let asking = BlockFor::For(need, rank, candidates);
            match self.ask_block(d, spec, need.tokens_on(rank), asking).await {
                Ok(Asked::Taken(r)) => return Some(Ok(Admission::Granted(r))),
                Ok(Asked::Decided(decided)) => return Some(decided),
                Ok(Asked::Granted | Asked::Refused) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// Asks the store for a new block of `d` (one call; the caller holds `d`'s `leasing` lock),
    /// sized for requests of `tokens`, carrying what `d` owes. With [`BlockFor::For`], `d`'s
    /// open block ends first, so that the call also hands back what it did not use, and the
    /// request is admitted from the new block as the store granted it. With
    /// [`BlockFor::Ahead`] (see [`Inner::refill`]) the open block ends first only if it has no
    /// request left; else it admits on until the grant replaces it, and the new block waits
    /// for the requests to come.
    async fn ask_block(
        &self,
        d: DeploymentId,
        spec: Lease,
        tokens: u64,
        asking: BlockFor<'_>,
    ) -> Result<Asked, LedgerError> {
        let (size, secs) = self.lease_size(d, spec, tokens);
        let (carried, call) = {
            let mut st = self.lock();
            match asking {
                BlockFor::For(need, _, candidates) => {
                    if let Some(decided) = st.elsewhere(self, need, candidates) {
                        return Ok(Asked::Decided(decided));
                    }
                }
                BlockFor::Ahead => {
                    if st.mode() != Mode::Shared || st.awaiting.is_some() {
                        return Ok(Asked::Refused);
                    }
                }
            }
            // A block asked for ahead leaves the open one admitting (smaller requests, or
            // until it ends) while the call is out, unless no request is left in it: the grant
            // ends it (`Leases::open`), and its next call or heartbeat hands back the rest.
            if matches!(asking, BlockFor::For(..)) || st.leases.used_up(d) {
                st.leases.end(d);
            }
            let owed = st.leases.take_owed(d);
            let carried = Carried {
                inner: self,
                d,
                call: fastrand::u64(..),
                owed,
                done: false,
            };
            (
                carried,
                self.register(&mut st, Calling::block(d, size.want)),
            )
        };
        let sent = self.now();
        let asked = self
            .timed(
                self.shared
                    .lease(d, size, &carried.owed, carried.call)
                    .boxed(),
            )
            .await;
        carried.answered(asked.as_ref().err());
        let now = self.now();
        match asked? {
            Leased::Granted(grant, room) => {
                let mut st = self.lock();
                // What the block admits after the grant's second must reach the store before
                // that second leaves the windows (see `Granted::send_by`): on this instance's
                // clock, less a call's time; the block stops admitting by then.
                let leaves = expiry_of(grant.bucket).saturating_sub(grant.now);
                let send_by = now + leaves.saturating_sub(self.move_margin());
                let granted = Granted {
                    requests: grant.requests,
                    tokens: (size.want.1 != 0).then_some(grant.tokens),
                    bucket: grant.bucket,
                    store_now: grant.now,
                    sent,
                    now,
                    send_by,
                };
                st.leases
                    .open(d, granted, (now + secs * 1000).min(send_by).max(now + 1));
                st.leases.saw_room(d, room, now);
                let admitted = Admitted {
                    deployment: d,
                    bucket: grant.bucket,
                    counts: [grant.requests, grant.tokens, grant.tokens, grant.tokens],
                    tenant: None,
                };
                st.remember(self.shared.table(), &admitted, now);
                call.done(&mut st, Some(d));
                let taken = match asking {
                    BlockFor::For(need, rank, _) => st.leases.take_asked(d, need, rank, now),
                    BlockFor::Ahead => None,
                };
                self.wake_for_moves(&st);
                Ok(taken.map_or(Asked::Granted, Asked::Taken))
            }
            Leased::Refused(room, 0) => {
                // Not even one request fits: for a while, only a request that fits what was
                // left (with what this instance owes back since) asks again.
                self.lock().leases.saw_room(d, room, now);
                Ok(Asked::Refused)
            }
            Leased::Refused(_, cools) => {
                self.lock().leases.saw_cooldown(d, cools, now);
                Ok(Asked::Refused)
            }
        }
    }

    /// Asks for `d`'s next block ahead, as a request just took from its open block one that is
    /// about to run out (`lease: auto` only: see [`ResilientStore::refill_soon`]), so that the
    /// next request finds a block here rather than waiting for the call. Nothing when `d` was last
    /// seen without room for a request of the recent mean size, when a request asked
    /// meanwhile, or when the leases were settled since the admission that asked for it
    /// (`closes` then).
    async fn refill(&self, d: DeploymentId, closes: u64) {
        let _one = self.leasing[d.0].lock().await;
        if self.closes.load(Ordering::Acquire) != closes {
            return;
        }
        let tokens = {
            let mut st = self.lock();
            let now = self.now();
            let tokens = st.leases.rate(now).1.max(1);
            if !st.leases.runs_out(d, tokens, now, REFILL_AHEAD_MS)
                || st.leases.lacks_room(d, tokens, now)
            {
                return;
            }
            tokens
        };
        if let Err(e) = self
            .ask_block(d, Lease::Auto, tokens, BlockFor::Ahead)
            .await
        {
            tracing::debug!(error = %e, "ledger: a block asked for ahead was not granted");
        }
    }

    /// How much of `d` to lease for a request of `tokens` on it (the [`Ask`]), and for how long
    /// (s). Tokens are leased only where a token limit applies.
    /// `auto` asks for [`Lease::AUTO_SECS`] of this instance's leased rate over the last ten
    /// seconds (plus this request), and at most half of its share of what is left of each limit
    /// (`parts`: twice the live instances), so that blocks shrink as the deployment fills and
    /// its last room goes where the requests need it, a request at a time. A fixed block takes
    /// what is left, up to its size.
    fn lease_size(&self, d: DeploymentId, spec: Lease, tokens: u64) -> (Ask, u64) {
        let table = self.shared.table();
        let tokens_limited = table.of(d).unwrap_or_default().iter().any(|&s| {
            let l = table.limits(s);
            l.tpm.or(l.itpm).or(l.otpm).is_some()
        });
        let mut st = self.lock();
        let instances = st.seen.as_ref().map_or(1, |b| b.instances).max(1);
        let (want, parts, secs) = match spec {
            Lease::Block {
                requests,
                tokens: block_tokens,
                secs,
            } => {
                let block_tokens = if block_tokens == u64::MAX {
                    requests.saturating_mul(tokens)
                } else {
                    block_tokens
                };
                ((requests, block_tokens), 1, secs)
            }
            Lease::Auto => {
                // The instance's whole leased rate, not `d`'s alone: when a cheaper deployment
                // fills up, its traffic moves to `d` at once.
                let (recent, mean) = st.leases.rate(self.now());
                let requests = (recent * Lease::AUTO_SECS).div_ceil(10) + 1;
                let block_tokens = requests.saturating_mul(mean.max(tokens));
                ((requests, block_tokens), 2 * instances, Lease::AUTO_SECS)
            }
        };
        drop(st);
        // Where tokens are limited a block holds at least one (none: tokens are not leased).
        let leased_tokens = if tokens_limited {
            (want.1.max(1), tokens)
        } else {
            (0, 0)
        };
        let ask = Ask {
            want: (want.0, leased_tokens.0),
            least: (1, leased_tokens.1),
            parts,
        };
        (ask, secs)
    }

    /// Keeps corrections that could not be sent (or may not have been applied) for later.
    fn owe_again(&self, owed: Vec<Owed>) {
        let mut st = self.lock();
        for o in owed {
            st.leases.owe_again(o);
        }
    }

    /// Sends again, under the same ids, the block calls that got no answer (see
    /// [`Unanswered`]), asking for no block: each answers as its first run did, or runs now.
    /// What they granted goes back with the next heartbeat. Called when a heartbeat found the
    /// store answering, in the epoch this instance knows. The calls go together, so the next
    /// beat waits for one call's time at most; those that fail, or that are dropped unanswered
    /// with this future, are kept for the next.
    async fn ask_unanswered_again(&self) {
        let calls = self.lock().leases.take_unanswered(self.now());
        if calls.is_empty() {
            return;
        }
        let mut asking = Asking { inner: self, calls };
        let asks = asking.calls.iter().map(|u| {
            self.timed(
                self.shared
                    .lease(u.deployment, Ask::NOTHING, &u.carried, u.call)
                    .boxed(),
            )
        });
        let answers = futures_util::future::join_all(asks).await;
        let calls = std::mem::take(&mut asking.calls);
        let mut st = self.lock();
        for (u, asked) in calls.into_iter().zip(answers) {
            match asked {
                Ok(Leased::Granted(grant, _)) => st
                    .leases
                    .answered_late(u, Some((grant.bucket, grant.requests, grant.tokens))),
                Ok(Leased::Refused(..)) => st.leases.answered_late(u, None),
                // Not run in this epoch, nor will it be: what it carried stays owed as it is.
                Err(LedgerError::Lost { .. }) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "ledger: a block call asked again got no answer");
                    st.leases.still_unanswered(u);
                }
            }
        }
    }

    /// Sends again, under its number, a beat whose corrections got no answer (see
    /// [`State::carrying`]): applied once, whether or not the first was.
    async fn beat_again_if_unanswered(&self) {
        if self.lock().carrying.is_some() {
            self.tick().await;
        }
    }

    /// Ends every leased block and sends what they owe the shared windows (at close), once the
    /// blocks asked for ahead and on their way have landed (those not yet asked for are not):
    /// with a heartbeat, which applies them all together and once; what it cannot carry (the
    /// store is away, or in another epoch) with one call per deployment and bucket. Corrections whose
    /// beat got no answer twice are not sent on their own: that beat may have been applied.
    async fn settle_leases(&self) {
        // No block asked for ahead so far is asked for from now on; one on its way lands first.
        self.closes.fetch_add(1, Ordering::AcqRel);
        for one in &self.leasing {
            drop(one.lock().await);
        }
        // Corrections a beat carried without an answer go again under their number first.
        self.beat_again_if_unanswered().await;
        self.lock().leases.end_all();
        self.tick().await;
        // The beat that carried the ended blocks got no answer: once more. (A call of their own
        // could apply them a second time, should that beat have been run.)
        self.beat_again_if_unanswered().await;
        let owed = {
            let mut st = self.lock();
            let now = self.now();
            st.leases.drain(now)
        };
        // In `drain`'s order (a move's addition before its subtraction, a report last on its
        // deployment); after a failure, the rest is kept rather than sent without it.
        let mut sending = Unleasing {
            inner: self,
            out: None,
            rest: owed.into_iter(),
        };
        for o in sending.rest.by_ref() {
            let o = sending.out.insert(o);
            let sent = self
                .timed(
                    self.shared
                        .unlease(o.deployment, o.bucket, o.deltas, o.observed.as_ref())
                        .boxed(),
                )
                .await;
            let Some(o) = sending.out.take() else {
                continue;
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, "ledger: a lease correction failed; kept for later");
                self.lock().leases.owe_failed(o, &e);
                // The rest is owed again as the guard drops.
                return;
            }
        }
    }

    /// Settles (`actual`) or releases (`None`) `r` where it was admitted. `Ok(None)`: it was
    /// admitted by the shared store, which must settle it.
    fn finish_here(
        &self,
        r: &Reservation,
        actual: Option<ActualUsage>,
    ) -> Result<Option<bool>, LedgerError> {
        let mut st = self.lock();
        if st.leases.finish(r.id, actual) {
            return Ok(Some(true));
        }
        st.in_flight.remove(&r.id);
        let now = self.now();
        match &mut st.admitting {
            Admitting::Local(l) => {
                let Some(entry) = l.log.get_mut(&r.id) else {
                    // A shared reservation: free the slot it holds here too.
                    free_slot(&l.table, &mut l.cells, r);
                    return Ok(None);
                };
                let engine = Engine {
                    table: &l.table,
                    now,
                };
                let done = engine.finish(
                    &mut l.cells,
                    r,
                    actual.unwrap_or_default(),
                    actual.is_none(),
                )?;
                if done {
                    entry.actual = actual;
                    entry.released = actual.is_none();
                    entry.version += 1;
                }
                Ok(Some(done))
            }
            Admitting::Open(ids) => Ok(ids.remove(&r.id).then_some(true)),
            Admitting::Shared => Ok(None),
        }
    }

    async fn finish(
        &self,
        r: &Reservation,
        actual: Option<ActualUsage>,
    ) -> Result<bool, LedgerError> {
        if let Some(done) = self.finish_here(r, actual)? {
            return Ok(done);
        }
        let fut = match actual {
            Some(actual) => self.shared.settle(r, actual),
            None => self.shared.release(r),
        };
        self.timed(fut).await
    }
}

/// Frees the slot a shared reservation holds in the local ledger (no counts change).
fn free_slot(table: &ScopeTable, cells: &mut LocalCells, r: &Reservation) {
    if let Some(scopes) = table.of(r.deployment) {
        for &s in scopes {
            cells.scope(s).slots.free(r.id);
        }
    }
    if let Some(t) = &r.tenant {
        cells.tenant(&t.name).scope.slots.free(r.id);
    }
}

/// A local entry as the restore writes it (nothing for a released one).
fn replayed(e: &Entry) -> Option<Replayed> {
    if e.released {
        return None;
    }
    let r = &e.reservation;
    let hold_cost = r.tenant.as_ref().map_or(0, |t| t.cost_micros);
    Some(match e.actual {
        Some(a) => Replayed {
            reservation: r.clone(),
            counts: [1, a.tokens, a.input_tokens, a.output_tokens()],
            expiry: 0,
            cost: a.cost_micros,
        },
        None => Replayed {
            reservation: r.clone(),
            counts: [1, r.tokens, r.input_tokens, r.tokens - r.input_tokens],
            expiry: e.expiry,
            cost: hold_cost,
        },
    })
}

/// `v` ÷ `n`, rounded up (a share of what was used errs on the used side).
fn share_up(v: u64, n: u64) -> u64 {
    v.div_ceil(n.max(1))
}

/// An admission Redis may have counted though this instance got no grant from it (see
/// [`State::uncertain`]).
#[derive(Debug, Clone)]
struct Uncertain {
    need: Need,
    candidates: Vec<DeploymentId>,
    /// When Redis can hold nothing of it any more (ms, this instance's clock): its reservation
    /// key, which a void reads, lives `SLOTS_TTL_MS` (the longest slot and the hour in which
    /// its settlement, tenant spend included, still counts) from when the admission ran, and a
    /// first sending Redis had not read yet (a frozen Redis) is given a window's length more.
    /// One Redis runs later still is not voided: its slot is held until it expires and its
    /// request counted in its window (the safe side), and its estimated cost stays in its
    /// tenant's spend.
    until: u64,
}

impl State {
    /// Keeps `need` over `candidates` as uncertain, once however often it is denied after a
    /// slow first sending: the next restore voids it. Those Redis can hold nothing of any more
    /// go first, so that an instance that stays shared through many slow answers keeps only
    /// the last hours' (each void is a call of the restore that follows).
    fn unsure(&mut self, need: &Need, candidates: &[DeploymentId], now: u64) {
        self.forget_settled_uncertain(now);
        let until = now
            .saturating_add(SLOTS_TTL_MS)
            .saturating_add(WINDOW_BUCKETS * BUCKET_MS);
        self.keep_uncertain(Uncertain {
            need: need.clone(),
            candidates: candidates.to_vec(),
            until,
        });
    }

    /// Adds `u` to the uncertain admissions, or extends the one of the same request over the
    /// same candidates.
    fn keep_uncertain(&mut self, u: Uncertain) {
        let same = |k: &&mut Uncertain| k.need.id == u.need.id && k.candidates == u.candidates;
        match self.uncertain.iter_mut().find(same) {
            Some(k) => k.until = k.until.max(u.until),
            None => self.uncertain.push(u),
        }
    }

    /// Drops the uncertain admissions Redis can hold nothing of any more.
    fn forget_settled_uncertain(&mut self, now: u64) {
        self.uncertain.retain(|u| u.until > now);
    }

    /// Adds `admitted` to what this instance admitted through the store, and to its own windows.
    fn remember(&mut self, table: &ScopeTable, admitted: &Admitted<'_>, now: u64) {
        self.own.add(table, admitted);
        self.keep_own(table, admitted, now);
    }

    /// Adds `admitted` to this instance's own windows (in its bucket, if still in the window):
    /// what it writes back should the store lose its keys.
    fn keep_own(&mut self, table: &ScopeTable, admitted: &Admitted<'_>, now: u64) {
        let bucket = admitted.bucket;
        let counts = table.kept(admitted.deployment, admitted.counts);
        let nb = bucket_of(now).max(bucket);
        let add = |w: &mut Window| {
            w.expire(nb);
            if w.is_live(bucket) {
                w.add(bucket, counts);
            }
        };
        for &s in table.of(admitted.deployment).unwrap_or_default() {
            if let Some(w) = self.own_windows.get_mut(s) {
                add(w);
            }
        }
        if let Some(t) = admitted.tenant {
            add(self.own_tenant_windows.entry(t.name.clone()).or_default());
        }
    }

    /// This instance's own windows as restore rows; tenants' windows that emptied are dropped.
    fn own_rows(&mut self, now: u64) -> Vec<(WindowOf, u64, Counts)> {
        let nb = bucket_of(now);
        let mut rows = Vec::new();
        for (s, w) in self.own_windows.iter_mut().enumerate() {
            w.expire(nb);
            rows.extend(w.buckets().map(|(k, c)| (WindowOf::Scope(s), k, c)));
        }
        self.own_tenant_windows.retain(|name, w| {
            w.expire(nb);
            let before = rows.len();
            rows.extend(
                w.buckets()
                    .map(|(k, c)| (WindowOf::Tenant(name.clone()), k, c)),
            );
            rows.len() > before
        });
        rows
    }

    /// What this instance admitted through the shared store since the reading it counts its own
    /// from (see [`Reads`]).
    fn own_since_read(&self, now: u64) -> Beat {
        self.own
            .since(self.reads.base().unwrap_or(&Own::default()), now)
    }

    /// The store failed again while this instance wrote back or waited for the others: back to
    /// admitting on its own share (its next heartbeat puts it back in the rejoin set).
    fn away_again(&mut self) {
        if let Admitting::Local(l) = &mut self.admitting {
            l.closing = None;
        }
    }

    /// Back from local mode and waiting for the other instances: it admits nothing.
    fn rejoining(&self) -> bool {
        matches!(&self.admitting, Admitting::Local(l) if l.closing.is_some())
    }

    fn mode(&self) -> Mode {
        match self.admitting {
            Admitting::Shared => Mode::Shared,
            Admitting::Local(_) => Mode::Local,
            Admitting::Open(_) => Mode::Open,
        }
    }

    /// The tenants served in the last two minutes, most recent first, at most
    /// [`TENANTS_PER_BEAT`]; older ones are forgotten.
    fn recent_tenants(&mut self, now: u64) -> Vec<String> {
        self.tenants
            .retain(|_, at| now.saturating_sub(*at) <= TENANT_MEMORY_MS);
        let mut names: Vec<(&String, u64)> = self.tenants.iter().map(|(n, at)| (n, *at)).collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.1));
        names
            .into_iter()
            .take(TENANTS_PER_BEAT)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// This instance's requests in flight through the shared store, per scope (by index) and
    /// per tenant of `tenants` (in that order).
    fn in_flight_by_scope(&self, table: &ScopeTable, tenants: &[String]) -> (Vec<u64>, Vec<u64>) {
        let mut scopes = vec![0u64; table.len()];
        let mut by_tenant: HashMap<&str, u64> = HashMap::new();
        for h in self.in_flight.values() {
            for &s in table.of(h.reservation.deployment).unwrap_or_default() {
                if let Some(n) = scopes.get_mut(s) {
                    *n += 1;
                }
            }
            if let Some(t) = &h.reservation.tenant {
                *by_tenant.entry(t.name.as_str()).or_default() += 1;
            }
        }
        let tenants = tenants
            .iter()
            .map(|name| by_tenant.get(name.as_str()).copied().unwrap_or(0))
            .collect();
        (scopes, tenants)
    }

    /// Switches to local mode: a ledger of this instance's share of every limit, seeded with its
    /// share of what the shared windows and spends held at the last heartbeat and with its own
    /// requests in flight. `closing`: it admits nothing on its own either, until then (ms; see
    /// [`Local::closing`]). Returns the instance count it divides by.
    fn enter_local(&mut self, inner: &Inner, closing: Option<u64>) -> u64 {
        let now = inner.now();
        let n = self.seen.as_ref().map_or(1, |b| b.instances).max(1);
        let (table, zero) = inner.shared.table().share(n);
        let mut cells = LocalCells(
            (0..inner.shared.scope_count())
                .map(|_| ScopeState::default())
                .collect(),
            HashMap::new(),
        );
        let nb = bucket_of(now);
        // Its share of what the windows held at the last heartbeat, plus all it admitted since
        // (no heartbeat saw that): together the instances start from at least what was used.
        let mut seed = |beat: &Beat, divide: u64| {
            for (s, counts) in beat.scopes.iter().enumerate() {
                let st = cells.scope(s);
                let k = st.window.expire(nb);
                st.window.add(k, counts.map(|v| share_up(v, divide)));
            }
            for (name, counts, day, month) in &beat.tenants {
                let st = cells.tenant(name);
                let k = st.scope.window.expire(nb);
                st.scope.window.add(k, counts.map(|v| share_up(v, divide)));
                let (d, m) = st.spend.current(&super::period::periods(now));
                st.spend = super::engine::Spend {
                    day: beat.day,
                    day_micros: d + share_up(*day, divide),
                    month: beat.month,
                    month_micros: m + share_up(*month, divide),
                };
            }
        };
        if let Some(beat) = &self.seen {
            seed(beat, n);
        }
        seed(&self.own_since_read(now), 1);
        for h in self.in_flight.values() {
            let slot = Slot {
                id: h.reservation.id,
                expiry: h.expiry,
                bucket: nb,
            };
            let tenant = h.reservation.tenant.as_ref().map(|t| t.name.as_str());
            hold(&table, &mut cells, [h.reservation.deployment], tenant, slot);
        }
        for c in self.calling.values() {
            c.charge(&table, &mut cells, now);
        }
        if let Some(beat) = &self.seen {
            stand_in_for_others(beat, n, &mut cells, now);
        }
        // A scope where this instance's share of some limit is zero admits nothing: its
        // deployments are put in cooldown for the whole outage.
        let far = super::window::TIME_CAP_MS;
        for d in 0..inner.shared.deployment_count() {
            let blocked = table
                .of(DeploymentId(d))
                .is_some_and(|scopes| scopes.iter().any(|&s| zero[s]));
            if blocked {
                cells.scope(d).cooldown = far;
            }
        }
        self.admitting = Admitting::Local(Box::new(Local {
            table,
            cells,
            instances: n,
            log: IdMap::default(),
            closing,
        }));
        self.since = now;
        self.changes += 1;
        n
    }

    /// The admission of `need`, when this instance does not admit through the shared store
    /// now: in local or open mode, or (`closed`) while the other instances write back what a
    /// restarted Redis lost. `None`: the shared store decides.
    fn elsewhere(
        &mut self,
        inner: &Inner,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Option<Result<Admission, LedgerError>> {
        if self.mode() != Mode::Shared {
            return Some(self.admit_elsewhere(inner, need, candidates));
        }
        self.awaiting.is_some().then(|| {
            Err(LedgerError::Lost {
                url: inner.shared.url().to_owned(),
            })
        })
    }

    /// Admission in local or open mode.
    fn admit_elsewhere(
        &mut self,
        inner: &Inner,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        let now = inner.now();
        let admission = match &mut self.admitting {
            Admitting::Shared => unreachable!("admit_elsewhere runs in local or open mode"),
            Admitting::Open(ids) => {
                let Some(&deployment) = candidates.first() else {
                    return Ok(Admission::Denied(Denial {
                        refusals: Vec::new(),
                    }));
                };
                ids.insert(need.id);
                let p = super::period::periods(now);
                Admission::Granted(Reservation {
                    id: need.id,
                    deployment,
                    bucket: bucket_of(now),
                    tokens: need.tokens_on(0),
                    input_tokens: need.input_on(0),
                    rank: 0,
                    tenant: need.tenant.as_ref().map(|t| TenantHold {
                        name: t.spec.name.clone(),
                        cost_micros: need.cost(0),
                        day: p.day,
                        month: p.month,
                        window: None,
                    }),
                })
            }
            Admitting::Local(l) if l.closing.is_some() => {
                let poll = inner.settings.heartbeat / 10;
                return Ok(not_now(candidates, Scope::Deployment, poll));
            }
            Admitting::Local(l) => {
                let scaled;
                let need = match &need.tenant {
                    Some(t) => match tenant_share(&t.spec, l.instances) {
                        Some(spec) => {
                            scaled = Need {
                                tenant: Some(TenantNeed {
                                    spec,
                                    costs: t.costs.clone(),
                                }),
                                ..need.clone()
                            };
                            &scaled
                        }
                        None => {
                            let beat = inner.settings.heartbeat;
                            return Ok(not_now(candidates, Scope::Tenant, beat));
                        }
                    },
                    None => need,
                };
                let engine = Engine {
                    table: &l.table,
                    now,
                };
                let mut admission = engine.admit(&mut l.cells, need, candidates)?;
                match &mut admission {
                    Admission::Granted(r) => {
                        let entry = Entry {
                            reservation: r.clone(),
                            actual: None,
                            released: false,
                            expiry: now + need.slot_ttl_ms(),
                            version: 0,
                        };
                        l.log.insert(r.id, entry);
                    }
                    // A share is a stand-in until the next heartbeat, which may find the shared
                    // store back: a request does not wait longer than that to ask again.
                    Admission::Denied(denial) => {
                        for refusal in &mut denial.refusals {
                            if let Verdict::NotNow(d) = &mut refusal.verdict {
                                *d = (*d).min(inner.settings.heartbeat);
                            }
                        }
                    }
                }
                admission
            }
        };
        if let Admission::Granted(_) = admission {
            self.local_admissions += 1;
        }
        Ok(admission)
    }
}

/// A tenant's share of its limits and budgets on one of `n` instances; `None` when its share of
/// some limit is zero.
fn tenant_share(spec: &TenantSpec, n: u64) -> Option<TenantSpec> {
    let (limits, zero) = share_of(spec.limits, n);
    let n = n.max(1);
    let budget = BudgetMicros {
        daily: spec.budget.daily.map(|b| (b / n).max(1)),
        monthly: spec.budget.monthly.map(|b| (b / n).max(1)),
    };
    (!zero).then(|| TenantSpec {
        name: spec.name.clone(),
        limits,
        budget,
    })
}

/// The refusal in local mode when this instance cannot admit on its own now: a tenant's share
/// of some limit on it is zero (`Scope::Tenant`), or it is back from local mode and waits for
/// the other instances (`Scope::Deployment`). Try again `after` (the next look at the store).
fn not_now(candidates: &[DeploymentId], scope: Scope, after: Duration) -> Admission {
    Admission::Denied(Denial {
        refusals: candidates
            .iter()
            .map(|&deployment| Refusal {
                deployment,
                limit: LimitKind::Requests,
                scope,
                verdict: Verdict::NotNow(after),
            })
            .collect(),
    })
}

impl Ledger for ResilientStore {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        async move {
            // Read first: should the leases be settled while this admission is out, the block
            // it would ask for ahead is not asked for (see `Inner::refill`).
            let closes = self.inner.closes.load(Ordering::Acquire);
            let admission = self.inner.admit(need, candidates).await;
            if let Ok(Admission::Granted(r)) = &admission {
                self.refill_soon(r, closes);
            }
            admission
        }
        .boxed()
    }

    fn settle<'a>(&'a self, r: &'a Reservation, actual: ActualUsage) -> LedgerFuture<'a, bool> {
        self.inner.finish(r, Some(actual)).boxed()
    }

    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        self.inner.finish(r, None).boxed()
    }

    fn renew<'a>(&'a self, r: &'a Reservation, ttl: Duration) -> LedgerFuture<'a, bool> {
        async move {
            let local = {
                let mut st = self.inner.lock();
                let now = self.inner.now();
                if st.leases.holds(r.id) {
                    return Ok(true);
                }
                match &mut st.admitting {
                    Admitting::Local(l) if l.log.contains_key(&r.id) => {
                        let engine = Engine {
                            table: &l.table,
                            now,
                        };
                        let renewed = engine.renew(&mut l.cells, r, ttl)?;
                        if let Some(e) = l.log.get_mut(&r.id) {
                            e.expiry = now + slot_ttl_ms(ttl);
                            e.version += 1;
                        }
                        Some(renewed)
                    }
                    Admitting::Open(ids) if ids.contains(&r.id) => Some(true),
                    _ => None,
                }
            };
            match local {
                Some(renewed) => Ok(renewed),
                None => {
                    let renewed = self.inner.timed(self.inner.shared.renew(r, ttl)).await?;
                    if let Some(h) = self.inner.lock().in_flight.get_mut(&r.id) {
                        h.expiry = self.inner.now() + slot_ttl_ms(ttl);
                    }
                    Ok(renewed)
                }
            }
        }
        .boxed()
    }

    fn cooldown(&self, d: DeploymentId, dur: Duration) -> LedgerFuture<'_, Duration> {
        async move {
            {
                let mut st = self.inner.lock();
                let now = self.inner.now();
                // The provider is full: this instance's block there ends too.
                st.leases.end(d);
                if let Admitting::Local(l) = &mut st.admitting {
                    let engine = Engine {
                        table: &l.table,
                        now,
                    };
                    return engine.cooldown(&mut l.cells, d, dur);
                }
            }
            self.inner.timed(self.inner.shared.cooldown(d, dur)).await
        }
        .boxed()
    }

    fn observe(&self, d: DeploymentId, obs: Observation) -> LedgerFuture<'_, ()> {
        async move {
            {
                let mut st = self.inner.lock();
                let now = self.inner.now();
                if let Admitting::Local(l) = &mut st.admitting {
                    let engine = Engine {
                        table: &l.table,
                        now,
                    };
                    return engine.observe(&mut l.cells, d, obs);
                }
            }
            self.inner.timed(self.inner.shared.observe(d, obs)).await
        }
        .boxed()
    }

    fn snapshot<'a>(&'a self, ds: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        async move {
            let shared = self.inner.timed(self.inner.shared.snapshot(ds)).await;
            match shared {
                Err(e) if unavailable(&e) => {
                    let mut st = self.inner.lock();
                    let now = self.inner.now();
                    match &mut st.admitting {
                        Admitting::Local(l) => Engine {
                            table: &l.table,
                            now,
                        }
                        .snapshot(&mut l.cells, ds),
                        _ => Err(e),
                    }
                }
                other => other,
            }
        }
        .boxed()
    }

    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot> {
        async move {
            let shared = self
                .inner
                .timed(self.inner.shared.tenant_snapshot(tenant))
                .await;
            match shared {
                Err(e) if unavailable(&e) => {
                    let mut st = self.inner.lock();
                    let now = self.inner.now();
                    match &mut st.admitting {
                        Admitting::Local(l) => {
                            let spec = tenant_share(tenant, l.instances);
                            let spec = spec.as_ref().unwrap_or(tenant);
                            Ok(Engine {
                                table: &l.table,
                                now,
                            }
                            .tenant_snapshot(&mut l.cells, spec))
                        }
                        _ => Err(e),
                    }
                }
                other => other,
            }
        }
        .boxed()
    }

    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        async move {
            let mut out: Vec<Option<Result<bool, LedgerError>>> = Vec::with_capacity(batch.len());
            let mut shared = Vec::new();
            for s in batch {
                if let Some(done) = self.settle_here(s) {
                    out.push(Some(done));
                    continue;
                }
                match self.inner.finish_here(&s.reservation, s.actual) {
                    Ok(Some(done)) => {
                        if let Some(obs) = s.observed {
                            let observed = self.observe(s.reservation.deployment, obs).await;
                            out.push(Some(observed.map(|()| done)));
                        } else {
                            out.push(Some(Ok(done)));
                        }
                    }
                    Ok(None) => {
                        shared.push(s.clone());
                        out.push(None);
                    }
                    Err(e) => out.push(Some(Err(e))),
                }
            }
            if !shared.is_empty() {
                let after = self.inner.settings.timeout;
                let answers = match tokio::time::timeout(
                    after,
                    self.inner.shared.settle_batch(&shared),
                )
                .await
                {
                    Ok(answers) => answers,
                    Err(_) => shared
                        .iter()
                        .map(|_| {
                            Err(LedgerError::Timeout {
                                url: self.inner.shared.url().to_owned(),
                                after,
                            })
                        })
                        .collect(),
                };
                let mut answers = answers.into_iter();
                for slot in out.iter_mut().filter(|o| o.is_none()) {
                    *slot = answers.next();
                }
            }
            out.into_iter()
                .map(|o| {
                    o.unwrap_or_else(|| {
                        Err(LedgerError::Timeout {
                            url: self.inner.shared.url().to_owned(),
                            after: self.inner.settings.timeout,
                        })
                    })
                })
                .collect()
        }
        .boxed()
    }

    fn remote(&self) -> bool {
        true
    }

    /// A reservation admitted from a leased block settles in this process (its block's
    /// accounting, the provider's report kept for the next correction): no call.
    fn settle_here(&self, s: &Settlement) -> Option<Result<bool, LedgerError>> {
        {
            let mut st = self.inner.lock();
            if !st.leases.holds(s.reservation.id) {
                return None;
            }
            if let Some(obs) = s.observed {
                st.leases.report(s.reservation.deployment, obs);
            }
        }
        Some(
            self.inner
                .finish_here(&s.reservation, s.actual)
                .map(|d| d.unwrap_or(false)),
        )
    }

    fn health(&self) -> Option<Health> {
        Some(self.inner.health())
    }

    fn close(&self) -> LedgerFuture<'_, ()> {
        async move {
            self.inner.settle_leases().await;
            self.inner.shared.close().await
        }
        .boxed()
    }
}

/// Says what a restore found: a store that had lost the windows this instance knew (their epoch,
/// `known`) is a loss; one holding no windows for a namespace this instance never saw (`known`
/// 0) is new, or was emptied before this instance first looked, which it cannot tell apart.
fn log_restored(known: u64, lost: bool) {
    match (lost, known) {
        (false, _) => {}
        (true, 0) => tracing::info!(
            "the shared ledger holds no windows yet in this namespace (new, or emptied before \
             this instance started): started them"
        ),
        (true, _) => {
            tracing::warn!("the shared ledger had lost its windows; wrote back the last seen");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::ledger::RedisStoreOptions;

    /// One instance over a deployment of 10 RPM, on a Redis address nothing answers at: every
    /// call to it is refused at once, so it admits only on its own share.
    async fn cut_off() -> ResilientStore {
        let yaml = "providers:\n  - { name: p, api: openai, base_url: 'http://127.0.0.1:1/v1', \
            api_key_env: P_KEY, models: [{ name: m, price: { input: 1, output: 2 }, \
            limits: { rpm: 10 } }] }\n";
        let registry = Registry::from_yaml_str(yaml, "resilient.yaml").unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = RedisStoreOptions {
            lazy: true,
            ..RedisStoreOptions::default()
        };
        let url = format!("redis://127.0.0.1:{port}/0");
        let shared = RedisStore::connect(&url, &registry, options).await.unwrap();
        ResilientStore::new(shared, &registry, Arc::new(SystemClock)).await
    }

    /// An admission denied after a slow first sending is kept once, and only while Redis could
    /// still hold something of it: an instance that stays shared through many slow answers
    /// does not pile them up for its next restore to void one by one.
    #[tokio::test]
    async fn uncertain_admissions_are_kept_once_and_only_while_redis_can_hold_them() {
        let a = cut_off().await;
        let (d, e) = (DeploymentId(0), DeploymentId(1));
        let need = Need::new(10, Duration::from_secs(60));
        let lives = SLOTS_TTL_MS + WINDOW_BUCKETS * BUCKET_MS;
        let mut st = a.inner.lock();
        st.uncertain.clear();
        st.unsure(&need, &[d], 1_000);
        st.unsure(&need, &[d], 2_000);
        let kept = |st: &State| -> Vec<(u64, Vec<DeploymentId>, u64)> {
            st.uncertain
                .iter()
                .map(|u| (u.need.id, u.candidates.clone(), u.until))
                .collect()
        };
        assert_eq!(kept(&st), [(need.id, vec![d], 2_000 + lives)], "once");
        // Asked again over other candidates, it may hold a slot on either.
        st.unsure(&need, &[e, d], 2_000);
        assert_eq!(st.uncertain.len(), 2);
        // Once Redis can hold nothing of it, it goes with the next one kept.
        let other = Need::new(10, Duration::from_secs(60));
        st.unsure(&other, &[d], 2_000 + lives);
        assert_eq!(kept(&st), [(other.id, vec![d], 2_000 + 2 * lives)]);
        st.forget_settled_uncertain(2_000 + 2 * lives);
        assert!(st.uncertain.is_empty());
    }

    /// Admits one-token requests until refused; settles each.
    async fn fill(ledger: &ResilientStore) -> usize {
        let mut n = 0;
        loop {
            let need = Need::new(1, Duration::from_secs(60));
            match ledger.admit(&need, &[DeploymentId(0)]).await.unwrap() {
                Admission::Granted(r) => {
                    let used = ActualUsage::tokens(1);
                    assert!(ledger.settle(&r, used).await.unwrap());
                    n += 1;
                    assert!(n <= 10, "admitted over the limit");
                }
                Admission::Denied(_) => return n,
            }
        }
    }

    /// As if `ledger`'s last heartbeat had read 2 requests in the window, two instances alive:
    /// in local mode, its share is 5, less half of the 2.
    fn read_two_of_two(ledger: &ResilientStore) {
        let mut st = ledger.inner.lock();
        let base = st.own.clone();
        st.reads.record(1, 1, base);
        st.seen = Some(Beat {
            instances: 2,
            read: 1,
            oldest: 1,
            scopes: vec![[2, 2, 0, 2]],
            ..Beat::default()
        });
    }

    /// What an instance wrote back after an outage is in the shared windows, but in no reading
    /// it took: should the store stop answering it again before its next heartbeat reads the
    /// windows, its local mode counts all of it (it counted none, and admitted it a second time).
    #[tokio::test]
    async fn what_it_wrote_back_counts_whole_when_it_goes_local_before_its_next_reading() {
        let ledger = cut_off().await;
        let inner = &ledger.inner;
        read_two_of_two(&ledger);
        assert_eq!(fill(&ledger).await, 4);
        assert_eq!(ledger.status().mode, Mode::Local);

        // The store answers: the 4 are written into the shared windows (no other instance
        // waits), and it admits through them again.
        let written: Vec<Entry> = match &inner.lock().admitting {
            Admitting::Local(l) => l.log.values().cloned().collect(),
            _ => unreachable!("local above"),
        };
        let restored = Restored {
            epoch: 7,
            lost: false,
            restored: 1,
            stale: false,
            waiting: 0,
        };
        assert_eq!(inner.after_restore(&restored, &written).1, Next::Done);
        assert_eq!(ledger.status().mode, Mode::Shared);

        // Cut off again before any heartbeat: the same reading, and the 4 on top of its share
        // of it. Full.
        assert_eq!(fill(&ledger).await, 0);
        assert_eq!(ledger.status().mode, Mode::Local);
    }

    /// An admission sent to the shared store and not answered when the instance goes local may
    /// be counted there after the reading local mode starts from: the local ledger counts it as
    /// admitted, and keeps counting it if the answer says so.
    #[tokio::test]
    async fn an_admission_unanswered_when_it_goes_local_counts_there() {
        let ledger = cut_off().await;
        let inner = &ledger.inner;
        read_two_of_two(&ledger);
        let need = Need::new(1, Duration::from_secs(60));
        let call = {
            let mut st = inner.lock();
            let calling = Calling::request(&need, &[DeploymentId(0)], inner.now());
            inner.register(&mut st, calling)
        };
        assert_eq!(fill(&ledger).await, 3, "4, less the one unanswered");
        call.done(&mut inner.lock(), Some(DeploymentId(0)));
        assert_eq!(fill(&ledger).await, 0);

        // One whose answer was handled before the instance went local is not counted again.
        let ledger = cut_off().await;
        let inner = &ledger.inner;
        read_two_of_two(&ledger);
        let call = {
            let mut st = inner.lock();
            let calling = Calling::request(&need, &[DeploymentId(0)], inner.now());
            inner.register(&mut st, calling)
        };
        drop(call);
        assert_eq!(fill(&ledger).await, 4);
    }

    /// A snapshot that had admitted `n` requests on scope 0.
    fn own(n: u64) -> Own {
        Own {
            scopes: vec![[n, 0, 0, 0]],
            tenants: HashMap::new(),
        }
    }

    fn base(reads: &Reads) -> Option<u64> {
        reads.base().map(|o| o.scopes[0][0])
    }

    #[test]
    fn the_base_is_the_latest_reading_no_later_than_the_oldest_live_one() {
        let mut reads = Reads::default();
        assert_eq!(base(&reads), None, "before any reading: count everything");
        reads.record(3, 1, own(10));
        assert_eq!(
            base(&reads),
            Some(10),
            "the only one, though later than the oldest"
        );
        reads.record(5, 4, own(20));
        assert_eq!(base(&reads), Some(10), "3 is the latest no later than 4");
        reads.record(7, 5, own(30));
        assert_eq!(base(&reads), Some(20), "5 is");
        reads.record(9, 9, own(40));
        assert_eq!(base(&reads), Some(40), "it is the oldest itself");
    }

    #[test]
    fn readings_renumbered_by_an_emptied_store_start_over_and_few_are_kept() {
        let mut reads = Reads::default();
        for n in 1..=20 {
            // Another instance's reading stays at 1: the oldest kept stands in for it.
            reads.record(n, 1, own(n));
        }
        assert_eq!(reads.0.len(), READS_KEPT);
        assert_eq!(base(&reads), Some(20 - READS_KEPT as u64 + 1));
        // The store lost its keys: numbers restart.
        reads.record(1, 1, own(100));
        assert_eq!(reads.0.len(), 1);
        assert_eq!(base(&reads), Some(100));
    }

    #[test]
    fn a_move_owed_before_the_next_beat_brings_the_beat_forward() {
        let hour = Duration::from_secs(3600);
        assert_eq!(next_wake_in(hour, false, 1_000, None, 0), 3_599_000);
        assert_eq!(next_wake_in(hour, false, 1_000, Some(50_000), 0), 49_000);
        assert_eq!(
            next_wake_in(hour, false, 1_000, Some(500), 0),
            0,
            "late: at once"
        );
        let two = Duration::from_secs(2);
        assert_eq!(next_wake_in(two, false, 1_000, Some(50_000), 0), 1_000);
        // Late, but a beat went 50 ms ago (it did not carry the moves: the store did not
        // answer): the next a tenth of a heartbeat after it, not back to back.
        assert_eq!(next_wake_in(two, false, 10_050, Some(9_000), 10_000), 150);
        assert_eq!(next_wake_in(two, false, 10_300, Some(9_000), 10_000), 0);
    }

    #[test]
    fn beats_fall_on_the_heartbeats_multiples_and_ten_times_as_often_while_rejoining() {
        let beat = Duration::from_millis(2_000);
        // The next multiple of 2 s, whenever the last beat was: every instance beats together.
        assert_eq!(next_beat_in(beat, false, 10_000), 2_000);
        assert_eq!(next_beat_in(beat, false, 10_300), 1_700);
        // Back from an outage and waiting for the others: every 200 ms, on the same grid.
        assert_eq!(next_beat_in(beat, true, 10_300), 100);
        assert_eq!(next_beat_in(beat, true, 10_400), 200);
        // Never a zero wait, however short the heartbeat.
        assert_eq!(next_beat_in(Duration::from_millis(3), true, 7), 1);
        assert_eq!(next_beat_in(Duration::ZERO, false, 7), 1);
    }
}
