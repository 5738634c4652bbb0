//! The Redis store: every operation is one EVALSHA of a script in `lua/`, so any number of
//! instances share one ledger and no instance ever admits over a limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, join_all};
use redis::ScriptInvocation;

use super::engine::{settle_deltas, signed_diff};
use super::scopes::ScopeTable;
use super::types::*;
use super::window::millis;
use super::{Ledger, LedgerError, LedgerFuture, may_have_run};
use crate::clock::Clock;
use crate::config::redact_url;
use crate::config::{DeploymentId, Limits, Registry};

mod scripts;
pub(crate) use scripts::SLOTS_TTL_MS;
pub use scripts::script_text;
use scripts::*;

pub(crate) mod conn;
mod lines;
mod wakes;
pub use wakes::EVERYONE;
mod days;
pub(super) mod lease;
mod ledger;
pub(super) mod recovery;
mod reply;
mod tenant_lease;
#[cfg(test)]
mod twins;

/// How to reach Redis and how to name keys.
#[derive(Debug, Clone)]
pub struct RedisStoreOptions {
    /// Key namespace: every key is `llmroute:{namespace}:v3:...` (one hash tag per namespace).
    pub namespace: String,
    /// `None`: scripts read the Redis server's clock (production). `Some`: time is passed in
    /// (tests move a [`ManualClock`](crate::clock::ManualClock)).
    pub clock: Option<Arc<dyn Clock>>,
    /// How long one command may take before it fails.
    pub response_timeout: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// Connect on the first command rather than in [`RedisStore::connect`], so that an instance
    /// can start while Redis is away (see [`ResilientStore`](super::ResilientStore)).
    pub lazy: bool,
}

impl Default for RedisStoreOptions {
    fn default() -> Self {
        Self {
            namespace: "default".into(),
            clock: None,
            response_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(2),
            lazy: false,
        }
    }
}

/// Key names of one scope.
#[derive(Debug, Clone)]
struct ScopeKeys {
    window: String,
    slots: String,
    /// Its day hash (used only when the scope has a per-day limit).
    day: String,
    /// Its line: tickets by rank, and by expiry (deployment scopes only).
    line: String,
    line_expiry: String,
}

/// The Redis-backed ledger.
#[derive(Clone)]
pub struct RedisStore {
    conn: conn::Conn,
    url: String,
    table: Arc<ScopeTable>,
    scope_keys: Arc<[ScopeKeys]>,
    /// `llmroute:{namespace}:v3`
    prefix: Arc<str>,
    clock: Option<Arc<dyn Clock>>,
    /// The store's epoch as this instance last saw it (0: unknown, admissions do not check it;
    /// see lua/heartbeat.lua).
    epoch: Arc<AtomicU64>,
    /// Voids of abandoned admissions still running.
    voids: Arc<super::Voids>,
    /// Wake-ups for this process's waiting tickets.
    wakes: Arc<wakes::Wakes>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `url` and prepares the keys of `registry`'s deployments.
    pub async fn connect(
        url: &str,
        registry: &Registry,
        options: RedisStoreOptions,
    ) -> Result<Self, LedgerError> {
        let shown = redact_url(url);
        let err = |source| LedgerError::Redis {
            url: shown.clone(),
            source,
        };
        let conn = conn::Conn::open(url, &options).await.map_err(err)?;
        let table = ScopeTable::new(registry);
        let prefix = format!("llmroute:{{{}}}:v3", options.namespace);
        let wake_channel = format!("{prefix}:wake");
        let scope_keys = (0..table.len())
            .map(|s| ScopeKeys {
                window: format!("{prefix}:w:{}", table.def(s).name),
                slots: format!("{prefix}:s:{}", table.def(s).name),
                day: format!("{prefix}:y:{}", table.def(s).name),
                line: format!("{prefix}:q:{}", table.def(s).name),
                line_expiry: format!("{prefix}:qx:{}", table.def(s).name),
            })
            .collect();
        let store = Self {
            conn,
            url: shown,
            table: Arc::new(table),
            scope_keys,
            prefix: prefix.into(),
            clock: options.clock,
            epoch: Arc::new(AtomicU64::new(0)),
            voids: Arc::default(),
            wakes: Arc::new(wakes::Wakes::new(url, wake_channel)),
        };
        if !options.lazy {
            store.load_scripts().await;
        }
        Ok(store)
    }

    /// Loads every ledger script into Redis (on a cluster, into every node, replicas too), all at
    /// once, so that no request's call meets NOSCRIPT: that call would wait for a second round
    /// trip and for Redis to compile the script (up to a millisecond for the largest, during
    /// which Redis answers nobody), and the first calls of every instance started together
    /// would each do so. [`RedisStore::connect`] does it unless the connection is lazy;
    /// [`ResilientStore`](super::ResilientStore) does it after its first heartbeat, within
    /// `ledger.timeout_ms`. A call that meets NOSCRIPT still loads its script (after a restart
    /// or a SCRIPT FLUSH), so a failure here costs only that, and is logged at debug level.
    pub async fn load_scripts(&self) {
        let loads = ALL.iter().map(|script| self.conn.load(script));
        if let Err(e) = futures_util::future::try_join_all(loads).await {
            tracing::debug!(url = %self.url, error = %e, "ledger: scripts not loaded ahead");
        }
    }

    /// The Redis URL, password removed.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The limited scopes of the registry it was built from.
    pub(crate) fn table(&self) -> &ScopeTable {
        &self.table
    }

    fn now_arg(&self) -> String {
        self.clock
            .as_ref()
            .map(|c| c.now_ms().to_string())
            .unwrap_or_default()
    }

    fn scopes(&self, d: DeploymentId) -> Result<&[usize], LedgerError> {
        self.table.of(d).ok_or(LedgerError::UnknownDeployment(d.0))
    }

    /// Runs a prepared script call; retries once when the connection had dropped (the first
    /// command after a drop fails while the manager reconnects). Every script may run twice
    /// with the effect of once, as it must: the first call may have run before its reply was
    /// lost, and a cluster client retries on its own. A call carries an id or a number it was
    /// applied under (a reservation, a heartbeat's sequence, a call record: see
    /// [`RedisStore::call_key`]), or it only sets or reads.
    /// When the retry fails too, the failure reported is the one that says the call may have
    /// run, if either does ([`LedgerError::maybe_applied`]), and else the first unless that
    /// was refused (never sent): a refused reconnection must not hide that the first call may
    /// have run.
    async fn run(&self, inv: &ScriptInvocation<'_>) -> Result<Vec<i64>, LedgerError> {
        let result = match self.conn.invoke(inv).await {
            Err(first) if first.is_connection_dropped() || first.is_io_error() => {
                match self.conn.invoke(inv).await {
                    Err(retry)
                        if first.is_connection_refusal()
                            || (!may_have_run(&first) && may_have_run(&retry)) =>
                    {
                        Err(retry)
                    }
                    Err(retry) => {
                        tracing::debug!(error = %retry, "ledger: a retried script call failed again");
                        Err(first)
                    }
                    retried => retried,
                }
            }
            other => other,
        };
        result.map_err(|source| self.redis_error(source))
    }

    /// The key of call `id`'s record (see lua/common.lua): a script whose second run would
    /// count its changes again (a block's grant and corrections) keeps its reply there, and a
    /// second run of the same call answers with it.
    fn call_key(&self, id: u64) -> String {
        format!("{}:c:{id:016x}", self.prefix)
    }

    fn redis_error(&self, source: ::redis::RedisError) -> LedgerError {
        LedgerError::Redis {
            url: self.url.clone(),
            source,
        }
    }

    fn protocol(&self, script: &'static str, reply: &[i64]) -> LedgerError {
        LedgerError::Protocol {
            url: self.url.clone(),
            script,
            detail: format!("reply {reply:?}"),
        }
    }

    /// An account's window hash, slots zset, spend hash and day hash.
    fn push_tenant_keys(&self, inv: &mut ScriptInvocation<'_>, name: &str) {
        for kind in ["w", "s", "b", "y"] {
            inv.key(format!("{}:{kind}:t:{name}", self.prefix));
        }
    }

    /// The reservation key of reservation `id` (see lua/common.lua).
    fn reservation_key(&self, id: u64) -> String {
        format!("{}:r:{id}", self.prefix)
    }

    /// Window hash and slots zset of each scope.
    /// The epoch key last among the KEYS and the epoch this instance knows last among the ARGV
    /// ('' when it knows none): admit.lua and lease.lua refuse when the store's differs.
    fn push_epoch(&self, inv: &mut ScriptInvocation<'_>) {
        inv.key(self.epoch_key());
        match self.epoch.load(Ordering::Relaxed) {
            0 => inv.arg(""),
            epoch => inv.arg(epoch),
        };
    }

    /// `1` and the provider's report on the deployment whose scope is `scope`, or `0` without
    /// one (the tail of settle.lua's and unlease.lua's ARGV).
    fn push_report(
        &self,
        inv: &mut ScriptInvocation<'_>,
        scope: usize,
        observed: Option<&Observation>,
    ) {
        match observed {
            Some(obs) => {
                inv.arg(1);
                push_observation(inv, self.table.def(scope).limits, obs);
            }
            None => {
                inv.arg(0);
            }
        }
    }

    fn push_window_keys(&self, inv: &mut ScriptInvocation<'_>, scopes: &[usize]) {
        for &s in scopes {
            inv.key(&self.scope_keys[s].window)
                .key(&self.scope_keys[s].slots);
        }
    }

    /// Voids the admission of `need` on `candidates` if the returned guard is dropped before
    /// [`Abandoned::disarm`]: see [`Abandoned`].
    pub(crate) fn abandoned<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> Abandoned<'a> {
        Abandoned {
            store: self,
            need,
            candidates,
            armed: true,
        }
    }

    /// The admission script, with no guard: a caller that may drop it holds an
    /// [`RedisStore::abandoned`] guard of its own.
    pub(crate) async fn admit_inner(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        let mut inv = ADMIT.prepare_invoke();
        inv.key(self.reservation_key(need.id));
        inv.arg(self.now_arg())
            .arg(need.id.to_string())
            .arg(need.slot_ttl_ms())
            .arg(candidates.len());
        let specs = need.tenant.as_ref().map_or(&[][..], |t| &t.specs);
        inv.arg(specs.len());
        for spec in specs {
            self.push_tenant_keys(&mut inv, &spec.name);
            inv.arg(reply::scope_code(spec.scope()));
            let l = spec.limits;
            for v in [l.rpm, l.tpm, l.concurrency] {
                inv.arg(v.map_or(0, |v| v.get()));
            }
            inv.arg(spec.budget.daily.unwrap_or(0))
                .arg(spec.budget.monthly.unwrap_or(0));
            inv.arg(l.rpd.map_or(0, |v| v.get()))
                .arg(l.tpd.map_or(0, |v| v.get()));
        }
        if !specs.is_empty() {
            for rank in 0..candidates.len() {
                inv.arg(need.cost(rank));
            }
        }
        let now = self.local_now();
        for (rank, &d) in candidates.iter().enumerate() {
            let scopes = self.scopes(d)?;
            let days = self.counts_days(scopes);
            self.push_scope_keys(&mut inv, scopes, days);
            inv.arg(need.tokens_on(rank));
            if self.table.counts_apart(d) {
                inv.arg(need.input_on(rank));
            } else {
                inv.arg("-");
            }
            if days {
                inv.arg(format!("{}d", scopes.len()));
            } else {
                inv.arg(scopes.len());
            }
            for &s in scopes {
                let limits = need.share_of(self.table.def(s).limits);
                push_limits(&mut inv, limits);
                if days {
                    days::push_day(&mut inv, limits, self.day_of(s, now));
                }
            }
        }
        self.push_lines(&mut inv, need, candidates);
        self.push_epoch(&mut inv);
        let reply = self.run(&inv).await?;
        if let [2, _] = reply.as_slice() {
            return Err(LedgerError::Lost {
                url: self.url.clone(),
            });
        }
        reply::admit(&reply, need, candidates).ok_or_else(|| self.protocol("admit.lua", &reply))
    }

    async fn finish(
        &self,
        r: &Reservation,
        actual: ActualUsage,
        request_delta: i64,
        observed: Option<&Observation>,
    ) -> Result<bool, LedgerError> {
        let scopes = self.scopes(r.deployment)?;
        let mut inv = SETTLE.prepare_invoke();
        inv.key(self.reservation_key(r.id));
        self.push_window_keys(&mut inv, scopes);
        let [(_, tokens), (_, input), (_, output)] = settle_deltas(&self.table, r, actual);
        inv.arg(self.now_arg())
            .arg(r.id.to_string())
            .arg(r.bucket)
            .arg(tokens)
            .arg(request_delta)
            .arg(input)
            .arg(output)
            .arg(scopes.len());
        match &r.tenant {
            Some(h) => {
                for name in &h.names {
                    self.push_tenant_keys(&mut inv, name);
                }
                inv.arg(h.names.len())
                    .arg(signed_diff(actual.cost_micros, h.cost_micros))
                    .arg(h.day)
                    .arg(h.month);
            }
            None => {
                inv.arg(0);
            }
        }
        let mut day_keys = Vec::new();
        self.push_settle_days(&mut day_keys, &mut inv, scopes, r.bucket);
        for key in day_keys {
            inv.key(key);
        }
        self.push_report(&mut inv, scopes[0], observed);
        let keys = &self.scope_keys[r.deployment.0];
        inv.key(&keys.line).key(&keys.line_expiry);
        inv.arg(self.wake_channel());
        let reply = self.run(&inv).await?;
        match reply.as_slice() {
            [n] => Ok(*n == 1),
            _ => Err(self.protocol("settle.lua", &reply)),
        }
    }

    async fn renew_inner(&self, r: &Reservation, ttl: Duration) -> Result<bool, LedgerError> {
        let scopes = self.scopes(r.deployment)?;
        let mut inv = RENEW.prepare_invoke();
        inv.key(self.reservation_key(r.id));
        for &s in scopes {
            inv.key(&self.scope_keys[s].slots);
        }
        for name in r.tenant.iter().flat_map(|h| &h.names) {
            inv.key(format!("{}:s:t:{name}", self.prefix));
        }
        inv.arg(self.now_arg())
            .arg(r.id.to_string())
            .arg(slot_ttl_ms(ttl));
        let reply = self.run(&inv).await?;
        match reply.as_slice() {
            [n] => Ok(*n == 1),
            _ => Err(self.protocol("renew.lua", &reply)),
        }
    }

    async fn cooldown_inner(
        &self,
        d: DeploymentId,
        dur: Duration,
    ) -> Result<Duration, LedgerError> {
        let s = self.scopes(d)?[0];
        let mut inv = COOLDOWN.prepare_invoke();
        inv.key(&self.scope_keys[s].window)
            .arg(self.now_arg())
            .arg(millis(dur));
        let reply = self.run(&inv).await?;
        match reply.as_slice() {
            &[now, until] => Ok(Duration::from_millis(
                until.saturating_sub(now).max(0) as u64
            )),
            _ => Err(self.protocol("cooldown.lua", &reply)),
        }
    }

    async fn observe_inner(&self, d: DeploymentId, obs: Observation) -> Result<(), LedgerError> {
        let s = self.scopes(d)?[0];
        let limits = self.table.def(s).limits;
        let mut inv = OBSERVE.prepare_invoke();
        inv.key(&self.scope_keys[s].window).arg(self.now_arg());
        push_observation(&mut inv, limits, &obs);
        self.run(&inv).await.map(drop)
    }

    async fn snapshot_inner(
        &self,
        ds: &[DeploymentId],
    ) -> Result<Vec<DeploymentSnapshot>, LedgerError> {
        let mut inv = SNAPSHOT.prepare_invoke();
        inv.arg(self.now_arg()).arg(ds.len());
        let now = self.local_now();
        let mut scopes = Vec::with_capacity(ds.len());
        let mut day_list = Vec::new();
        for &d in ds {
            let sc = self.scopes(d)?;
            inv.arg(sc.len());
            for &s in sc {
                let keys = &self.scope_keys[s];
                inv.key(&keys.window).key(&keys.slots);
                let day = self.day_of(s, now);
                match day {
                    Some(day) => inv.key(&keys.day).arg(day.id),
                    None => inv.arg("-"),
                };
                day_list.push(day);
            }
            scopes.push(sc);
        }
        for &d in ds {
            let keys = &self.scope_keys[d.0];
            inv.key(&keys.line).key(&keys.line_expiry);
        }
        let reply = self.run(&inv).await?;
        reply::snapshot(&self.table, ds, &scopes, &day_list, &reply)
            .ok_or_else(|| self.protocol("snapshot.lua", &reply))
    }
}

/// An admission whose caller may stop waiting for it (a dropped future, a timeout around it):
/// once its script is sent, Redis runs it whether or not anyone reads the answer, and a slot it
/// grants would then stay held, unrenewed, for its whole TTL. Dropped before the answer came,
/// it has the admission voided, on a task: sent after the script on the same connection (one
/// hash tag, so one node), the void finds what the script granted, or nothing if it never ran.
pub(crate) struct Abandoned<'a> {
    store: &'a RedisStore,
    need: &'a Need,
    candidates: &'a [DeploymentId],
    armed: bool,
}

impl Abandoned<'_> {
    /// The answer came (or its caller decided what to make of its absence): nothing to void.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, need, candidates) = (
            self.store.clone(),
            self.need.clone(),
            self.candidates.to_vec(),
        );
        let void = async move { store.void(&need, &candidates).await };
        self.store.voids.abandoned(self.need.id, void);
    }
}

/// A provider's report as script arguments (see `observe_at` in lua/common.lua): the
/// deployment's rpm, tpm, itpm and otpm limits (0 = unlimited), then remaining (-1 = not
/// reported) and reset ms of requests, tokens, input and output tokens.
fn push_observation(inv: &mut ScriptInvocation<'_>, limits: Limits, obs: &Observation) {
    for l in [limits.rpm, limits.tpm, limits.itpm, limits.otpm] {
        inv.arg(l.map_or(0, |v| v.get()));
    }
    let reports = [
        obs.requests,
        obs.tokens,
        obs.input_tokens,
        obs.output_tokens,
    ];
    for reported in reports {
        match reported {
            Some((remaining, reset)) => inv
                .arg(i64::try_from(remaining).unwrap_or(i64::MAX))
                .arg(millis(reset)),
            None => inv.arg(-1i64).arg(0u64),
        };
    }
}

/// A deployment's or provider's limits as script arguments (0 = unlimited): rpm, tpm, itpm,
/// otpm, concurrency.
fn push_limits(inv: &mut ScriptInvocation<'_>, limits: Limits) {
    let Limits {
        rpm,
        tpm,
        itpm,
        otpm,
        concurrency,
        ..
    } = limits;
    for l in [rpm, tpm, itpm, otpm, concurrency] {
        inv.arg(l.map_or(0, |v| v.get()));
    }
}
