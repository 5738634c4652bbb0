use super::*;

pub(super) struct Inner {
    pub(super) shared: RedisStore,
    pub(super) settings: LedgerSettings,
    /// Each deployment's `lease:`, by deployment index.
    pub(super) lease: Vec<Option<Lease>>,
    /// One lease request at a time per deployment.
    pub(super) leasing: Vec<tokio::sync::Mutex<()>>,
    /// A block asked for ahead ([`Inner::refill`]) is on its way, per deployment; how many
    /// are, and what wakes [`ResilientStore::refills_done`].
    pub(super) refilling: Vec<AtomicBool>,
    pub(super) refills: AtomicU64,
    pub(super) refilled: tokio::sync::Notify,
    /// How many times the leases were settled ([`Inner::settle_leases`]): a block asked for
    /// ahead before one began is not asked for once it has.
    pub(super) closes: AtomicU64,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) instance: String,
    pub(super) state: Mutex<Machine>,
    /// One restore at a time.
    pub(super) restoring: tokio::sync::Mutex<()>,
    /// When the heartbeat task wakes next (ms), and what wakes it sooner: a move owed (see
    /// `Granted::send_by`) that must reach the store before then.
    pub(super) beat_due: AtomicU64,
    pub(super) moved: tokio::sync::Notify,
    /// One heartbeat at a time (the task's, `heartbeat_now`'s, the one at close): two at once
    /// could reach the store out of their order, and the later number would have the store
    /// skip the earlier one's corrections.
    pub(super) beating: tokio::sync::Mutex<()>,
}

/// The shared Redis ledger, with timeouts and a failure mode (see the module documentation).
pub struct ResilientStore {
    pub(super) inner: Arc<Inner>,
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

pub(super) fn unavailable(e: &LedgerError) -> bool {
    matches!(e, LedgerError::Redis { .. } | LedgerError::Timeout { .. })
}

/// Whether `e` says the store did not answer in time (slow, or away without refusing).
pub(super) fn slow(e: &LedgerError) -> bool {
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
        let leased = (0..lease.len())
            .filter(|&d| lease[d].is_some())
            .map(DeploymentId)
            .collect();
        let machine = Machine::new(shared.table().clone(), leased, settings, now);
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
            state: Mutex::new(machine),
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
    pub(super) fn refill_soon(&self, r: &Reservation, closes: u64) {
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

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, Machine> {
        // The state is plain bookkeeping: after a panic elsewhere, carry on with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Wakes the heartbeat task if a move owed must reach the store before it would wake.
    pub(super) fn wake_for_moves(&self, st: &Machine) {
        let due = self.beat_due.load(Ordering::Relaxed);
        if st.leases.send_by().is_some_and(|t| t < due) {
            self.moved.notify_one();
        }
    }

    /// How long before a grant's second leaves the shared windows the moves out of it are sent
    /// (ms): a call's time twice, and a second to spare.
    pub(super) fn move_margin(&self) -> u64 {
        1_000 + 2 * self.settings.timeout.as_millis() as u64
    }

    /// `fut` bounded by `ledger.timeout_ms`.
    pub(super) async fn timed<T>(&self, fut: LedgerFuture<'_, T>) -> Result<T, LedgerError> {
        let after = self.settings.timeout;
        match tokio::time::timeout(after, fut).await {
            Ok(result) => result,
            Err(_) => Err(LedgerError::Timeout {
                url: self.shared.url().to_owned(),
                after,
            }),
        }
    }

    pub(super) fn health(&self) -> Health {
        self.lock().health(self.now())
    }
}
