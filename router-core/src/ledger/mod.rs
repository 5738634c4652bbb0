//! The shared limits ledger.
//!
//! # The model
//!
//! Every deployment (provider, model) and every provider is a *limited scope* with up to five
//! limits: requests per minute, tokens per minute (input plus output), input tokens per minute
//! and output tokens per minute (for providers such as Anthropic that limit them apart, ITPM and
//! OTPM), requests in flight. The ledger counts, per scope:
//!
//! - **a sliding 60 s window** kept as fixed 1 s buckets plus running totals of requests, tokens,
//!   input and output tokens (a [`Need`] says which part of its tokens is input). Buckets that leave
//!   the window are subtracted as time passes, so each call does amortised O(1) work and the state
//!   is bounded by the number of buckets, never by the number of requests. A bucket partly outside
//!   the window is counted in full: the window errs on the safe side and never admits more than an
//!   exact sliding window would. Capacity used at time `t` returns between 60 and 61 s later.
//! - **concurrency slots**, one per request in flight, each with an expiry so that a crashed
//!   instance's slots come back after the slot TTL.
//! - **a cooldown** per deployment, set when a provider says it is full or failing; it only ever
//!   extends.
//!
//! # Admit, then settle
//!
//! [`Ledger::admit`] takes a request's [`Need`] and its candidates in cost order and, in one atomic
//! step, reserves on the first candidate whose deployment and provider limits all fit (one Redis
//! call whatever the number of candidates). It answers a [`Reservation`] or a [`Denial`] that says,
//! per candidate, which limit refused and whether the request can never fit there or not yet.
//!
//! [`Ledger::settle`] replaces the estimate with what the provider reported, in the bucket where
//! the tokens were reserved (if it is still in the window), and frees the slot. [`Ledger::release`]
//! is for a request that never reached the provider: its request and tokens are handed back.
//! Settling or releasing twice is a no-op. A request that outlives its slot TTL keeps its slot
//! with [`Ledger::renew`] (a heartbeat); a settle that arrives after the slot expired still
//! corrects the counts, once, within [`SETTLE_GRACE_MS`].
//!
//! The caller picks each reservation's id ([`Need::id`]): admitting the same id again while its
//! slot is live answers the same reservation, so a lost reply can be retried safely.
//!
//! # Stores
//!
//! [`MemoryStore`] (one process), [`SqliteStore`] (many processes on one machine, through one
//! file) and [`RedisStore`] (many processes and machines) implement the same trait and pass the
//! same conformance suite. The memory and SQLite stores run the very same algorithm (`engine.rs`)
//! over state kept in memory or loaded from and written back to the file; the Redis scripts in
//! `lua/` are its twin.

mod counts;
mod day;
mod engine;
mod leased_tenants;
mod leases;
mod line;
mod memory;
mod period;
pub(crate) mod redis;
mod resilient;
mod scopes;
mod sqlite;
mod tenant;
pub mod tenant_leases;
mod types;
mod unconcerned;
mod window;

use futures_util::future::BoxFuture;

pub use day::{Day, DayResets};
pub use leased_tenants::{LeasedTenants, SEND_OWED_EVERY};
pub use line::{LINE_POLL_MS, TICKET_TTL_MS};
pub use memory::MemoryStore;
pub use period::calendar;
pub use redis::{EVERYONE, RedisStore, RedisStoreOptions, script_text};
pub use resilient::{Health, Mode, ResilientStore};
pub use scopes::ScopeTable;
pub use sqlite::{BUSY_TIMEOUT, SqliteStore};
pub use tenant::{KEY_ACCOUNT_PREFIX, MAX_ACCOUNTS, scope_of};
pub use tenant_leases::{Amounts, TenantAsk, TenantCorrection, TenantLeased};
pub use types::{
    ActualUsage, Admission, BudgetMicros, Denial, DeploymentSnapshot, LimitKind, LineUse,
    MAX_SLOT_TTL, Need, Observation, ProviderReport, REPORT_TTL, Refusal, Reservation, Scope,
    ScopeUsage, Settlement, TenantHold, TenantNeed, TenantSnapshot, TenantSpec, Ticket, Verdict,
    WindowUse, usd_to_micros,
};
pub use unconcerned::{COOLDOWNS_EVERY, Unconcerned};
pub use window::{BUCKET_MS, SETTLE_GRACE_MS, TIME_CAP_MS, WINDOW_BUCKETS};

use crate::config::DeploymentId;

/// Why a store could not answer. Limits being full is not an error: that is a [`Denial`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The Redis server could not be reached or answered with an error.
    #[error("state store {url}: {source}{hint}", hint = redis_hint(.source))]
    Redis {
        /// The Redis URL, password removed.
        url: String,
        /// What redis-rs reported.
        #[source]
        source: ::redis::RedisError,
    },
    /// A script answered with a shape this version does not understand.
    #[error("state store {url}: unexpected reply from script {script}: {detail}")]
    Protocol {
        /// The Redis URL, password removed.
        url: String,
        /// The script's file name.
        script: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The embedded ledger file could not be opened, read or written.
    #[error("ledger file {path}: {source}; {hint}", hint = sqlite::hint(.source))]
    Sqlite {
        /// The ledger file.
        path: String,
        /// What SQLite reported.
        #[source]
        source: ::rusqlite::Error,
    },
    /// The embedded ledger file's directory could not be created.
    #[error("ledger file {path}: cannot create its directory: {source}")]
    Io {
        /// The ledger file.
        path: String,
        /// What the operating system reported.
        #[source]
        source: std::io::Error,
    },
    /// A call to the shared store took longer than `ledger.timeout_ms`.
    #[error("state store {url}: no answer within {after:?} (ledger.timeout_ms)")]
    Timeout {
        /// The Redis URL, password removed.
        url: String,
        /// How long it waited.
        after: std::time::Duration,
    },
    /// The shared store lost its keys (a restarted Redis) or was restored by another instance
    /// since this one last looked: nothing was admitted; the instance restores, then retries.
    #[error(
        "state store {url}: its windows were lost or restored since this instance last saw them"
    )]
    Lost {
        /// The Redis URL, password removed.
        url: String,
    },
    /// A deployment id not in the registry the store was built from.
    #[error("unknown deployment id {0}")]
    UnknownDeployment(usize),
}

impl LedgerError {
    /// Whether the store may have carried the call out though no answer came: it timed out, or
    /// the connection was lost after it was sent. What the call would have done is undone, or
    /// done again only where doing it twice is safe.
    pub fn maybe_applied(&self) -> bool {
        match self {
            LedgerError::Timeout { .. } => true,
            LedgerError::Redis { source, .. } => may_have_run(source),
            _ => false,
        }
    }

    /// Whether the store surely did not carry the call out: it refused it before doing anything
    /// (its windows were lost or restored), or the connection was refused before it was sent.
    pub fn not_applied(&self) -> bool {
        match self {
            LedgerError::Lost { .. } => true,
            LedgerError::Redis { source, .. } => source.is_connection_refusal(),
            _ => false,
        }
    }
}

/// Whether a call that failed with `e` may have run: it timed out, or its connection was lost
/// after it was sent.
pub(crate) fn may_have_run(e: &::redis::RedisError) -> bool {
    !e.is_connection_refusal() && (e.is_timeout() || e.is_connection_dropped())
}

/// What to do about a Redis error the connection gave (nothing to add for one Redis answered).
fn redis_hint(e: &::redis::RedisError) -> &'static str {
    if e.is_connection_refusal() {
        "; nothing takes connections there: start Redis at that address, or point the state \
         store at one that runs"
    } else if e.is_io_error() || e.is_connection_dropped() {
        "; check that Redis runs at that address and can be reached from here"
    } else {
        ""
    }
}

/// The boxed future every ledger method returns (the trait is used as `dyn Ledger`).
pub type LedgerFuture<'a, T> = BoxFuture<'a, Result<T, LedgerError>>;

/// The ledger's operations. All stores mean exactly the same thing by each of them.
pub trait Ledger: Send + Sync + std::fmt::Debug {
    /// Reserves `need` on the first of `candidates` (in the caller's order, cheapest first) whose
    /// cooldown, deployment limits and provider limits all fit; one atomic step.
    fn admit<'a>(
        &'a self,
        need: &'a Need,
        candidates: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Admission>;

    /// Replaces the reservation's token estimate with `actual` and frees its slot: the
    /// difference goes to the bucket the tokens were reserved in (if it is still in the window)
    /// and the tenant's spend in the day and month of the reservation. A slot that expired less
    /// than [`SETTLE_GRACE_MS`] ago is still settled (a late settle corrects the counts once).
    /// Returns `false`, changing nothing, when it had already been settled or released, or its
    /// slot expired longer ago than that.
    fn settle<'a>(
        &'a self,
        reservation: &'a Reservation,
        actual: ActualUsage,
    ) -> LedgerFuture<'a, bool>;

    /// Gives back a reservation whose request never reached the provider: its request count,
    /// tokens and slot (late, like `settle`). Returns `false` when it had already been settled
    /// or released.
    fn release<'a>(&'a self, reservation: &'a Reservation) -> LedgerFuture<'a, bool>;

    /// Keeps a live reservation's slot held: its expiry becomes `ttl` from now (capped at
    /// [`MAX_SLOT_TTL`]); a heartbeat for requests that outlive their slot TTL. Returns `false`
    /// when the slot is gone (settled, released or expired).
    fn renew<'a>(
        &'a self,
        reservation: &'a Reservation,
        ttl: std::time::Duration,
    ) -> LedgerFuture<'a, bool>;

    /// Puts `deployment` in cooldown until `for_how_long` from now (the store's clock). Only ever
    /// extends an existing cooldown. Returns the cooldown now in force.
    fn cooldown(
        &self,
        deployment: DeploymentId,
        for_how_long: std::time::Duration,
    ) -> LedgerFuture<'_, std::time::Duration>;

    /// Follows the provider where it reports less remaining than the ledger believes: the
    /// difference is counted as used until the provider's reset, and a provider that reports
    /// nothing left puts the deployment in cooldown until its reset.
    fn observe(&self, deployment: DeploymentId, observation: Observation) -> LedgerFuture<'_, ()>;

    /// Usage, limits, in-flight and cooldown of each deployment and its provider.
    fn snapshot<'a>(
        &'a self,
        deployments: &'a [DeploymentId],
    ) -> LedgerFuture<'a, Vec<DeploymentSnapshot>>;

    /// Use against limits, and spend against budget in the current UTC day and month, of one
    /// tenant.
    fn tenant_snapshot<'a>(&'a self, tenant: &'a TenantSpec) -> LedgerFuture<'a, TenantSnapshot>;

    /// Settles or releases each of `batch`, each followed by its provider's report on the
    /// reservation's deployment when it carries one (as [`Ledger::observe`]): what a driver
    /// owes once the caller has the answer. Each settlement stands alone: the answer is its
    /// result (as `settle` / `release` answer), in order. With Redis each settlement and its
    /// report are one script call, and the batch goes out in one write.
    fn settle_batch<'a>(
        &'a self,
        batch: &'a [Settlement],
    ) -> BoxFuture<'a, Vec<Result<bool, LedgerError>>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(batch.len());
            for s in batch {
                let settled = match s.actual {
                    Some(actual) => self.settle(&s.reservation, actual).await,
                    None => self.release(&s.reservation).await,
                };
                let observed = match (settled, s.observed) {
                    (Ok(done), Some(obs)) => self
                        .observe(s.reservation.deployment, obs)
                        .await
                        .map(|()| done),
                    (result, _) => result,
                };
                out.push(observed);
            }
            out
        })
    }

    /// Takes `ticket` out of the lines of `deployments`: its request gave up or was dropped
    /// while it waited. An admission takes its own ticket out; a ticket nobody asks with leaves
    /// by itself when its TTL ends.
    fn leave<'a>(&'a self, ticket: u64, deployments: &'a [DeploymentId]) -> LedgerFuture<'a, ()>;

    /// Wake-ups for waiting requests, when the store sends them: the id of a ticket whose turn
    /// may have come (it became first in a line, or the capacity it waits for was freed while
    /// it was), or [`EVERYONE`] when some may have been missed. `None`: the store sends none and waiters ask again when their wait ends.
    fn wakes(&self) -> Option<tokio::sync::broadcast::Receiver<u64>> {
        None
    }

    /// The shared store's mode (shared, local, open) when it has one: `None` for the stores
    /// that are always local.
    fn health(&self) -> Option<Health> {
        None
    }

    /// Applies `corrections` to tenant `spec`'s counts, then asks for a block of its limits
    /// and budgets (see `tenant_leases`; none when `ask` wants no request), under call id `call`
    /// (sent again with the same id, it answers as it first did and changes nothing).
    /// [`TenantLeased::Unavailable`]: this store leases no tenant blocks (it is in-process), or
    /// not now (it does not admit through the shared store).
    fn lease_tenant<'a>(
        &'a self,
        spec: &'a TenantSpec,
        ask: TenantAsk,
        corrections: &'a [TenantCorrection],
        call: u64,
    ) -> LedgerFuture<'a, TenantLeased> {
        let _ = (spec, ask, corrections, call);
        Box::pin(std::future::ready(Ok(TenantLeased::Unavailable)))
    }

    /// Gives back what this instance holds in the shared store beyond its requests in flight
    /// (the unused part of leased blocks). Call it when the process stops.
    fn close(&self) -> LedgerFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Whether each call is a network round trip (Redis).
    fn remote(&self) -> bool {
        false
    }

    /// Whether drivers settle off the caller's path, queued and in batches: a store whose calls
    /// wait on I/O (Redis's network, the embedded file's disk), so that an answer does not wait
    /// for its settlement. The memory store answers at once and is settled in place.
    fn settles_apart(&self) -> bool {
        self.remote()
    }

    /// Settles `s` at once, as [`Ledger::settle_batch`] would, when that needs no I/O (a
    /// remote ledger's reservation admitted from a block it leased): a driver then pays it in
    /// place rather than handing it to its queue's task. `None`: it needs the store.
    fn settle_here(&self, s: &Settlement) -> Option<Result<bool, LedgerError>> {
        let _ = s;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::LedgerError;

    #[test]
    fn a_failed_call_may_have_been_applied_only_if_it_may_have_been_sent() {
        let io = |kind: std::io::ErrorKind| LedgerError::Redis {
            url: "redis://127.0.0.1:6379".into(),
            source: std::io::Error::from(kind).into(),
        };
        let url = || "redis://127.0.0.1:6379".to_owned();
        let timeout = LedgerError::Timeout {
            url: url(),
            after: std::time::Duration::from_millis(50),
        };
        let protocol = LedgerError::Protocol {
            url: url(),
            script: "admit.lua",
            detail: "a reply of the wrong shape".into(),
        };
        // (maybe applied, surely not applied)
        let cases = [
            (io(std::io::ErrorKind::ConnectionRefused), (false, true)),
            (io(std::io::ErrorKind::TimedOut), (true, false)),
            (io(std::io::ErrorKind::ConnectionReset), (true, false)),
            (timeout, (true, false)),
            (LedgerError::Lost { url: url() }, (false, true)),
            // The script ran and answered: applied, known.
            (protocol, (false, false)),
        ];
        for (e, expected) in cases {
            assert_eq!((e.maybe_applied(), e.not_applied()), expected, "{e}");
        }
    }
}

/// The voids of admissions whose callers went away, still running on tasks of their own:
/// [`Ledger::close`] waits for them, so that a process stopping right after it dropped a request
/// (Ctrl-C in `llmroute chat`) does not cut one short and leave its slot held.
#[derive(Debug, Default)]
pub(crate) struct Voids {
    running: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
}

impl Voids {
    /// Runs `void` on `runtime`, counted until it ends.
    fn spawn(
        self: &std::sync::Arc<Self>,
        runtime: &tokio::runtime::Handle,
        void: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        /// Counts a void as ended when dropped: when it ends, panics, or is dropped unrun
        /// with its runtime.
        struct Running(std::sync::Arc<Voids>);
        impl Drop for Running {
            fn drop(&mut self) {
                if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
                    self.0.done.notify_waiters();
                }
            }
        }
        use std::sync::atomic::Ordering;
        self.running.fetch_add(1, Ordering::SeqCst);
        let running = Running(self.clone());
        runtime.spawn(async move {
            let _running = running;
            void.await;
        });
    }

    /// Runs `void`, which voids reservation `id`'s admission, whose caller stopped waiting for
    /// it, on the current runtime, counted until it ends; a failure, or no runtime to run it
    /// on, is logged: the slot then expires with its TTL.
    pub(crate) fn abandoned(
        self: &std::sync::Arc<Self>,
        id: u64,
        void: impl std::future::Future<Output = Result<bool, LedgerError>> + Send + 'static,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                reservation = id,
                "an admission its caller stopped waiting for cannot be voided outside a Tokio \
                 runtime; its slot expires with its TTL"
            );
            return;
        };
        self.spawn(&runtime, async move {
            if let Err(e) = void.await {
                tracing::warn!(
                    reservation = id,
                    error = %e,
                    "could not void an admission its caller stopped waiting for; \
                     its slot expires with its TTL"
                );
            }
        });
    }

    /// Waits until no void runs.
    pub(crate) async fn wait(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let done = self.done.notified();
            let mut done = std::pin::pin!(done);
            done.as_mut().enable();
            if self.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            done.await;
        }
    }
}
