//! The in-process store: one mutex over plain arrays. For a single process; several processes or
//! machines share limits through [`RedisStore`](super::RedisStore).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;

use super::scopes::{SCOPE_ORDER, ScopeTable};
use super::types::*;
use super::window::{Dim, Slots, Window, bucket_of, phantom_bucket};
use super::{Ledger, LedgerError, LedgerFuture};
use crate::clock::{Clock, SystemClock};
use crate::config::{DeploymentId, Limits, Registry};

#[derive(Debug, Default)]
struct ScopeState {
    window: Window,
    slots: Slots,
}

#[derive(Debug)]
struct State {
    scopes: Vec<ScopeState>,
    /// Cooldown end per deployment, ms (0: none).
    cooldowns: Vec<u64>,
}

/// The in-memory ledger. Cheap to share behind an `Arc`; every operation takes one short lock.
#[derive(Debug)]
pub struct MemoryStore {
    table: ScopeTable,
    clock: Arc<dyn Clock>,
    next_id: AtomicU64,
    state: Mutex<State>,
}

impl MemoryStore {
    /// A store for `registry`'s deployments on the system clock.
    pub fn new(registry: &Registry) -> Self {
        Self::with_clock(registry, Arc::new(SystemClock))
    }

    /// A store reading time from `clock` (tests pass a [`ManualClock`](crate::clock::ManualClock)).
    pub fn with_clock(registry: &Registry, clock: Arc<dyn Clock>) -> Self {
        let table = ScopeTable::new(registry);
        let state = State {
            scopes: (0..table.len()).map(|_| ScopeState::default()).collect(),
            cooldowns: vec![0; table.deployments()],
        };
        Self {
            table,
            clock,
            next_id: AtomicU64::new(1),
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the counters half-written in a way that
        // matters more than losing the whole ledger would, so keep going with the data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn scopes(&self, d: DeploymentId) -> Result<&[usize], LedgerError> {
        self.table.of(d).ok_or(LedgerError::UnknownDeployment(d.0))
    }

    fn admit_now(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        let now = self.clock.now_ms();
        let nb = bucket_of(now);
        let mut state = self.lock();
        for (rank, &d) in candidates.iter().enumerate() {
            let scopes = self.scopes(d)?;
            match self.check(&mut state, now, nb, need, d, scopes, false) {
                Some(_) => continue,
                None => {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let expiry = now + need.slot_ttl_ms();
                    let bucket = state.scopes[scopes[0]].window.expire(nb);
                    for &s in scopes {
                        let st = &mut state.scopes[s];
                        let b = st.window.expire(nb);
                        st.window.add(b, 1, need.tokens);
                        st.slots.take(id, expiry);
                    }
                    return Ok(Admission::Granted(Reservation {
                        id,
                        deployment: d,
                        bucket,
                        tokens: need.tokens,
                        rank,
                    }));
                }
            }
        }
        // Every candidate refused: now work out when each could take it (the costly part).
        let refusals = candidates
            .iter()
            .map(|&d| {
                let scopes = self.scopes(d)?;
                let refusal = self.check(&mut state, now, nb, need, d, scopes, true);
                Ok(refusal.expect("a candidate that refused a moment ago under the same lock"))
            })
            .collect::<Result<_, LedgerError>>()?;
        Ok(Admission::Denied(Denial { refusals }))
    }

    /// `None` when every limit of `d` fits; otherwise why not. Without `detail`, the first
    /// refusal found is returned with a placeholder verdict; with it, the limit that frees last
    /// and when.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        state: &mut State,
        now: u64,
        nb: u64,
        need: &Need,
        d: DeploymentId,
        scopes: &[usize],
        detail: bool,
    ) -> Option<Refusal> {
        let refusal = |limit, scope, verdict| Refusal {
            deployment: d,
            limit,
            scope,
            verdict,
        };
        for (&s, scope) in scopes.iter().zip(SCOPE_ORDER) {
            if let Some(tpm) = self.table.def(s).limits.tpm
                && need.tokens > tpm.get()
            {
                return Some(refusal(LimitKind::Tokens, scope, Verdict::Never));
            }
        }
        let mut worst: Option<(u64, LimitKind, Scope)> = None;
        let mut raise = |at: u64, kind, scope| {
            if worst.is_none_or(|(w, _, _)| at > w) {
                worst = Some((at, kind, scope));
            }
        };
        let cooldown = state.cooldowns[d.0];
        if cooldown > now {
            raise(cooldown, LimitKind::Cooldown, Scope::Deployment);
        }
        for (&s, scope) in scopes.iter().zip(SCOPE_ORDER) {
            let limits = self.table.def(s).limits;
            let st = &mut state.scopes[s];
            st.window.expire(nb);
            st.slots.reap(now);
            for kind in blocked(&st.window, &st.slots, limits, need.tokens) {
                if !detail {
                    return Some(refusal(kind, scope, Verdict::Never));
                }
                raise(
                    free_at(kind, &st.window, &st.slots, limits, need.tokens),
                    kind,
                    scope,
                );
            }
        }
        worst.map(|(at, kind, scope)| {
            refusal(
                kind,
                scope,
                Verdict::NotNow(Duration::from_millis(at - now)),
            )
        })
    }

    fn finish(
        &self,
        r: &Reservation,
        actual_tokens: u64,
        refund_request: bool,
    ) -> Result<bool, LedgerError> {
        let now = self.clock.now_ms();
        let nb = bucket_of(now);
        let scopes = self.scopes(r.deployment)?;
        let mut state = self.lock();
        if !state.scopes[scopes[0]].slots.free(r.id) {
            return Ok(false);
        }
        let delta = actual_tokens as i64 - r.tokens as i64;
        for &s in scopes {
            let st = &mut state.scopes[s];
            st.slots.free(r.id);
            st.window.expire(nb);
            st.window.adjust(r.bucket, Dim::Tokens, delta);
            if refund_request {
                st.window.adjust(r.bucket, Dim::Requests, -1);
            }
        }
        Ok(true)
    }

    fn cooldown_now(&self, d: DeploymentId, dur: Duration) -> Result<Duration, LedgerError> {
        self.scopes(d)?;
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let until = &mut state.cooldowns[d.0];
        *until = (*until).max(now + dur.as_millis() as u64);
        Ok(Duration::from_millis(*until - now))
    }

    fn observe_now(&self, d: DeploymentId, obs: Observation) -> Result<(), LedgerError> {
        let s = self.scopes(d)?[0];
        let limits = self.table.def(s).limits;
        let now = self.clock.now_ms();
        let nb = bucket_of(now);
        let mut state = self.lock();
        let dims = [
            (obs.requests, limits.rpm, Dim::Requests),
            (obs.tokens, limits.tpm, Dim::Tokens),
        ];
        for (reported, limit, dim) in dims {
            let Some((remaining, reset)) = reported else {
                continue;
            };
            let reset_at = now + reset.as_millis() as u64;
            if remaining == 0 {
                let until = &mut state.cooldowns[d.0];
                *until = (*until).max(reset_at);
                continue;
            }
            let Some(limit) = limit else { continue };
            let window = &mut state.scopes[s].window;
            let current = window.expire(nb);
            let k = phantom_bucket(reset_at, nb);
            let k = if window.is_live(k) { k } else { current };
            let (req, tok) = window.totals();
            let used = if dim == Dim::Requests { req } else { tok };
            let believed = limit.get().saturating_sub(used);
            if remaining < believed {
                let (r, t) = match dim {
                    Dim::Requests => (believed - remaining, 0),
                    Dim::Tokens => (0, believed - remaining),
                };
                window.add(k, r, t);
            }
        }
        Ok(())
    }

    fn snapshot_now(&self, ds: &[DeploymentId]) -> Result<Vec<DeploymentSnapshot>, LedgerError> {
        let now = self.clock.now_ms();
        let nb = bucket_of(now);
        let mut state = self.lock();
        ds.iter()
            .map(|&d| {
                let scopes = self.scopes(d)?;
                let mut usage = |s: usize| {
                    let st = &mut state.scopes[s];
                    st.window.expire(nb);
                    st.slots.reap(now);
                    let (requests, tokens) = st.window.totals();
                    scope_usage(self.table.def(s).limits, requests, tokens, st.slots.len())
                };
                let own = usage(scopes[0]);
                let provider = scopes.get(1).map(|&s| usage(s));
                let until = state.cooldowns[d.0];
                Ok(DeploymentSnapshot {
                    deployment: d,
                    usage: own,
                    provider,
                    cooldown: (until > now).then(|| Duration::from_millis(until - now)),
                })
            })
            .collect()
    }
}

/// The limits of one scope that `tokens` more would break.
fn blocked(
    w: &Window,
    slots: &Slots,
    limits: Limits,
    tokens: u64,
) -> impl Iterator<Item = LimitKind> {
    let (req, tok) = w.totals();
    [
        (
            LimitKind::Requests,
            limits.rpm.is_some_and(|l| req + 1 > l.get()),
        ),
        (
            LimitKind::Tokens,
            limits.tpm.is_some_and(|l| tok + tokens > l.get()),
        ),
        (
            LimitKind::Concurrency,
            limits.concurrency.is_some_and(|l| slots.len() >= l.get()),
        ),
    ]
    .into_iter()
    .filter_map(|(kind, full)| full.then_some(kind))
}

/// When a full limit of one scope would take `tokens` more (ms).
fn free_at(kind: LimitKind, w: &Window, slots: &Slots, limits: Limits, tokens: u64) -> u64 {
    match kind {
        LimitKind::Requests => w.fits_at(Dim::Requests, 1, limits.rpm.map_or(0, |l| l.get())),
        LimitKind::Tokens => w.fits_at(Dim::Tokens, tokens, limits.tpm.map_or(0, |l| l.get())),
        LimitKind::Concurrency | LimitKind::Cooldown => slots.earliest_expiry().unwrap_or(0),
    }
}

pub(crate) fn scope_usage(
    limits: Limits,
    requests: u64,
    tokens: u64,
    in_flight: u64,
) -> ScopeUsage {
    ScopeUsage {
        requests,
        tokens,
        in_flight,
        rpm_limit: limits.rpm.map(|v| v.get()),
        tpm_limit: limits.tpm.map(|v| v.get()),
        concurrency_limit: limits.concurrency.map(|v| v.get()),
    }
}

impl Ledger for MemoryStore {
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission> {
        std::future::ready(self.admit_now(need, candidates)).boxed()
    }

    fn settle<'a>(&'a self, r: &'a Reservation, actual: ActualUsage) -> LedgerFuture<'a, bool> {
        std::future::ready(self.finish(r, actual.tokens, false)).boxed()
    }

    fn release<'a>(&'a self, r: &'a Reservation) -> LedgerFuture<'a, bool> {
        std::future::ready(self.finish(r, 0, true)).boxed()
    }

    fn cooldown(&self, d: DeploymentId, dur: Duration) -> LedgerFuture<'_, Duration> {
        std::future::ready(self.cooldown_now(d, dur)).boxed()
    }

    fn observe(&self, d: DeploymentId, obs: Observation) -> LedgerFuture<'_, ()> {
        std::future::ready(self.observe_now(d, obs)).boxed()
    }

    fn snapshot<'a>(&'a self, ds: &'a [DeploymentId]) -> LedgerFuture<'a, Vec<DeploymentSnapshot>> {
        std::future::ready(self.snapshot_now(ds)).boxed()
    }
}
