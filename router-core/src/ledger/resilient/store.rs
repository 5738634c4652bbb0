//! [`ResilientStore`] and the driver's shared half ([`Inner`]): the store, the settings, the
//! machine behind its lock, and what callers and the driver call it with.

use super::*;

pub(super) struct Inner {
    pub(super) shared: RedisStore,
    pub(super) settings: LedgerSettings,
    /// Each deployment's `lease:`, by deployment index.
    pub(super) lease: Vec<Option<Lease>>,
    /// One lease request at a time per deployment.
    pub(super) leasing: Vec<tokio::sync::Mutex<()>>,
    /// What callers ask of the driver (see [`Order`]).
    pub(super) orders: tokio::sync::mpsc::UnboundedSender<Order>,
    /// How many times the leases were settled ([`Inner::settle_leases`]): a block asked for
    /// ahead before one began is not asked for once it has.
    pub(super) closes: AtomicU64,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) instance: String,
    pub(super) state: Mutex<Machine>,
    /// When the driver sends its next beat (ms), and what wakes it sooner: a move owed (see
    /// `Granted::send_by`) that must reach the store before then.
    pub(super) beat_due: AtomicU64,
    pub(super) moved: tokio::sync::Notify,
}

/// The shared Redis ledger, with timeouts and a failure mode (see the module documentation).
pub struct ResilientStore {
    pub(super) inner: Arc<Inner>,
    /// The driver's task (see [`Driver`]).
    driver: tokio::task::JoinHandle<()>,
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
        self.driver.abort();
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
    /// Wraps `shared` (connect it with [`RedisStoreOptions::lazy`](crate::ledger::RedisStoreOptions) so
    /// that an instance can start while Redis is away). Sends a first heartbeat and loads the
    /// ledger's scripts ([`RedisStore::load_scripts`], within `ledger.timeout_ms`), then starts
    /// its driver task on the current Tokio runtime, which sends a heartbeat every
    /// `settings.heartbeat`.
    pub async fn new(shared: RedisStore, registry: &Registry, clock: Arc<dyn Clock>) -> Self {
        let settings = registry.ledger;
        let lease: Vec<Option<Lease>> = registry.deployments.iter().map(|d| d.lease).collect();
        let leasing = lease.iter().map(|_| tokio::sync::Mutex::new(())).collect();
        let (orders, ordered) = tokio::sync::mpsc::unbounded_channel();
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
            orders,
            closes: AtomicU64::new(0),
            clock,
            instance: format!("{:016x}", fastrand::u64(..)),
            state: Mutex::new(machine),
            beat_due: AtomicU64::new(u64::MAX),
            moved: tokio::sync::Notify::new(),
        });
        inner.tick().await;
        // After the first heartbeat, so that it does not wait behind every script's compiling;
        // bounded as any call is, so that an instance still starts at once while Redis is away.
        let _ = tokio::time::timeout(inner.settings.timeout, inner.shared.load_scripts()).await;
        let driver = tokio::spawn(Driver::new(inner.clone(), ordered).run());
        Self { inner, driver }
    }

    /// Runs one heartbeat now (the task runs them every `ledger.heartbeat_ms`): registers this
    /// instance, and restores or leaves local mode when the store answers.
    pub async fn heartbeat_now(&self) {
        self.inner.ordered(Order::Beat).await;
    }

    /// The mode now, and how long it has lasted.
    pub fn status(&self) -> Health {
        self.inner.health()
    }

    /// After `r` was admitted from a `lease: auto` block: if that block is about to run out
    /// (see [`Leases::runs_out`]), has the driver ask for the next one ([`Inner::refill`]),
    /// one at a time per deployment. `closes`: [`Inner::closes`] as the
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
        self.inner.order(Order::Refill(d, closes));
    }

    /// Waits until no block asked for ahead (`lease: auto`, see [`Lease::Auto`]) is on its way:
    /// for a caller that wants this instance quiet before it reads the shared windows.
    pub async fn refills_done(&self) {
        self.inner.ordered(Order::Quiet).await;
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

    /// Wakes the driver if a move owed must reach the store before its next beat.
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
        match tokio::time::timeout(self.settings.timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(self.timeout_error()),
        }
    }

    /// A call that took longer than `ledger.timeout_ms`.
    pub(super) fn timeout_error(&self) -> LedgerError {
        LedgerError::Timeout {
            url: self.shared.url().to_owned(),
            after: self.settings.timeout,
        }
    }

    pub(super) fn health(&self) -> Health {
        self.lock().health(self.now())
    }
}
