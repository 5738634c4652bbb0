//! The machine: the mode, every change of it, and where each admission goes. It does no I/O
//! and reads no clock: each call is given the time (ms), and the driver ([`Inner`]) makes the
//! calls to the shared store that its answers lead to.

use super::*;

/// How long a tenant stays on the heartbeat's list after its last request.
pub(super) const TENANT_MEMORY_MS: u64 = 120_000;
/// At most this many tenants are read per heartbeat (the most recently served).
pub(super) const TENANTS_PER_BEAT: usize = 1_000;

/// After the store lost its keys: how many instances write theirs back (those seen before),
/// and until when (ms) the machine waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Awaiting {
    pub(super) instances: u64,
    pub(super) until: u64,
}

/// What a beat or a restore sent under its number: applied at most once by the store, so
/// sent again under it when no answer came.
#[derive(Debug, Clone)]
pub(super) struct Numbered<T> {
    pub(super) seq: u64,
    pub(super) sent: T,
}

/// Where admissions go: the mode, with what each mode holds.
#[derive(Debug)]
pub(super) enum Admitting {
    /// Through the shared store.
    Shared,
    /// `closed` only: the store lost its keys and the other instances write theirs back.
    /// Requests fail until they have, or the wait is over.
    Rebuilding(Awaiting),
    /// On its own share (see [`Local`]), with its way back.
    Local(Box<Local>),
    /// Uncounted: the ids admitted so.
    Open(HashSet<u64>),
}

/// Where one admission goes now.
pub(super) enum Route {
    /// To the shared store.
    Store,
    /// Decided here: local or open mode.
    Here(Result<Admission, LedgerError>),
    /// Nowhere: the shared store is being rebuilt ([`Admitting::Rebuilding`]).
    Rebuilding,
}

#[derive(Debug)]
pub(super) struct Machine {
    /// The scopes of every limit, whole.
    pub(super) table: ScopeTable,
    /// The deployments that lease blocks.
    pub(super) leased: Vec<DeploymentId>,
    pub(super) settings: LedgerSettings,
    pub(super) admitting: Admitting,
    /// When the mode last changed, ms.
    pub(super) since: u64,
    pub(super) seen: Option<Beat>,
    /// All this instance admitted through the shared store, and as it stood when it sent the
    /// beats whose readings it recorded.
    pub(super) own: Own,
    pub(super) reads: Reads,
    /// What it admitted through the shared store in the last minute, per scope and tenant: if
    /// the store loses its keys, every instance writes its own back.
    pub(super) own_windows: Vec<Window>,
    pub(super) own_tenant_windows: HashMap<String, Window>,
    /// The store's epoch as last seen (0: none).
    pub(super) epoch: u64,
    pub(super) in_flight: IdMap<u64, Held>,
    /// Calls to the shared store that may admit, sent and not answered yet, by call number.
    pub(super) calling: IdMap<u64, Calling>,
    /// The next call number.
    pub(super) next_call: u64,
    /// The last number given to a beat's corrections or a restore (each applied once).
    pub(super) seq: u64,
    /// Tenants served lately, and when last (ms).
    pub(super) tenants: HashMap<String, u64>,
    /// Admissions that got no answer ([`LedgerError::maybe_applied`]), or a denial only on
    /// being sent again: Redis may have counted them after all. Each is kept until the next
    /// restore voids it, or until Redis can no longer hold anything of it (see
    /// [`Machine::unsure`]).
    pub(super) uncertain: Vec<Uncertain>,
    /// A restore whose reply never came, with the local admissions it wrote: Redis may apply
    /// it late, so it is sent again under the same number (applied at most once).
    pub(super) pending: Option<Numbered<Vec<Entry>>>,
    /// The blocks of limits this instance leases.
    pub(super) leases: Leases,
    /// Lease corrections sent with a beat that got no answer, and their sequence number: sent
    /// again as they are with the next beat.
    pub(super) carrying: Option<Numbered<Vec<Owed>>>,
    pub(super) changes: u64,
    pub(super) local_admissions: u64,
}

impl Machine {
    /// A machine admitting through the shared store (over `table`), started at `now`.
    pub(super) fn new(
        table: ScopeTable,
        leased: Vec<DeploymentId>,
        settings: LedgerSettings,
        now: u64,
    ) -> Self {
        let scopes = table.len();
        Self {
            table,
            leased,
            settings,
            admitting: Admitting::Shared,
            since: now,
            seen: None,
            own: Own {
                scopes: vec![Counts::ZERO; scopes],
                tenants: HashMap::new(),
            },
            reads: Reads::default(),
            own_windows: vec![Window::default(); scopes],
            own_tenant_windows: HashMap::new(),
            epoch: 0,
            in_flight: IdMap::default(),
            calling: IdMap::default(),
            next_call: 0,
            seq: now,
            tenants: HashMap::new(),
            uncertain: Vec::new(),
            pending: None,
            leases: Leases::default(),
            carrying: None,
            changes: 0,
            local_admissions: 0,
        }
    }

    pub(super) fn mode(&self) -> Mode {
        match self.admitting {
            Admitting::Shared | Admitting::Rebuilding(_) => Mode::Shared,
            Admitting::Local(_) => Mode::Local,
            Admitting::Open(_) => Mode::Open,
        }
    }

    /// Whether admissions go through the shared store, in the epoch this instance knows.
    pub(super) fn admits_shared(&self) -> bool {
        matches!(self.admitting, Admitting::Shared)
    }

    /// Whether what the store reads now holds all this instance admitted: not while it is
    /// local (its log is not written back yet), nor while the windows are being rebuilt.
    pub(super) fn reads_whole(&self) -> bool {
        matches!(self.admitting, Admitting::Shared | Admitting::Open(_))
    }

    /// Back from local mode and waiting for the other instances: it admits nothing.
    pub(super) fn rejoining(&self) -> bool {
        matches!(&self.admitting, Admitting::Local(l) if l.closing.is_some())
    }

    /// What the machine waits for after the store lost its keys.
    pub(super) fn awaiting(&self) -> Option<Awaiting> {
        match &self.admitting {
            Admitting::Rebuilding(a) => Some(*a),
            Admitting::Local(l) => l.awaiting,
            Admitting::Shared | Admitting::Open(_) => None,
        }
    }

    /// The number for the next beat's corrections or restore.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// How long an instance back from local mode waits for the others to write back what they
    /// admitted on their own, ms: five heartbeats. Those that cannot (stopped, or cut off from
    /// the store) leave the instances zset within three.
    pub(super) fn rejoin_grace(&self) -> u64 {
        5 * self.settings.heartbeat.as_millis() as u64
    }

    /// How long until the driver sends a beat, ms, at `now`, its `last` beat sent at `last`:
    /// the machine's one timer (see [`next_wake_in`]).
    pub(super) fn poll_timeout(&self, now: u64, last: u64) -> u64 {
        let heartbeat = self.settings.heartbeat;
        next_wake_in(
            heartbeat,
            self.rejoining(),
            now,
            self.leases.send_by(),
            last,
        )
    }

    pub(super) fn health(&self, now: u64) -> Health {
        Health {
            mode: self.mode(),
            since: Duration::from_millis(now.saturating_sub(self.since)),
            instances: self.seen.as_ref().map_or(0, |b| b.instances),
            changes: self.changes,
            local_admissions: self.local_admissions,
            in_flight: self.in_flight.len() as u64,
            calls_out: self.calling.len() as u64,
            leased_in_flight: self.leases.in_flight() as u64,
            tenant_leased_in_flight: 0,
        }
    }

    /// Where `need`'s admission goes at `now`.
    pub(super) fn route(&mut self, need: &Need, candidates: &[DeploymentId], now: u64) -> Route {
        match &self.admitting {
            Admitting::Shared => Route::Store,
            Admitting::Rebuilding(_) => Route::Rebuilding,
            Admitting::Local(_) | Admitting::Open(_) => {
                Route::Here(self.admit_here(need, candidates, now))
            }
        }
    }

    /// Admission in local or open mode.
    fn admit_here(
        &mut self,
        need: &Need,
        candidates: &[DeploymentId],
        now: u64,
    ) -> Result<Admission, LedgerError> {
        let admission = match &mut self.admitting {
            Admitting::Open(ids) => admit_open(ids, need, candidates, now),
            Admitting::Local(l) => l.admit(need, candidates, now, self.settings.heartbeat)?,
            Admitting::Shared | Admitting::Rebuilding(_) => {
                unreachable!("admit_here runs in local or open mode")
            }
        };
        if let Admission::Granted(_) = admission {
            self.local_admissions += 1;
        }
        Ok(admission)
    }

    /// Admission at `now` when the shared store failed with `e`: per `ledger.on_error`.
    pub(super) fn fall_back(
        &mut self,
        e: LedgerError,
        need: &Need,
        candidates: &[DeploymentId],
        now: u64,
    ) -> Result<Admission, LedgerError> {
        match self.settings.on_error {
            OnError::Closed => return Err(e),
            // Never seen by a heartbeat: how many instances share the limits is unknown, so no
            // share is safe. Fail as `closed` would until Redis has answered once.
            OnError::Local if self.seen.is_none() => return Err(e),
            OnError::Open if self.mode() == Mode::Shared => {
                tracing::warn!(error = %e, "ledger mode: open (admitting without counting)");
                self.enter(Admitting::Open(HashSet::new()), now);
            }
            OnError::Local if self.mode() == Mode::Shared => {
                let local = self.go_local(now, None, None);
                tracing::warn!(
                    error = %e,
                    instances = local,
                    "ledger mode: local (admitting within this instance's share of each limit)"
                );
            }
            OnError::Open | OnError::Local => {}
        }
        self.admit_here(need, candidates, now)
    }

    /// A heartbeat got no answer (`e`). Other instances may be admitting on their own now:
    /// this one does too, so that it waits for them to write it back before it admits through
    /// the store again.
    pub(super) fn beat_failed(&mut self, e: &LedgerError, now: u64) {
        let local = self.settings.on_error == OnError::Local;
        if self.mode() == Mode::Local {
            self.away_again();
        } else if local && self.mode() == Mode::Shared && self.seen.is_some() {
            let n = self.go_local(now, None, None);
            tracing::warn!(
                error = %e,
                instances = n,
                "ledger mode: local (the heartbeat got no answer)"
            );
        }
    }

    /// The store failed again while this instance wrote back or waited for the others: back to
    /// admitting on its own share (its next heartbeat says again that it holds admissions not
    /// written back: the rejoin hash).
    pub(super) fn away_again(&mut self) {
        if let Admitting::Local(l) = &mut self.admitting {
            l.closing = None;
        }
    }

    /// Admits through the shared store again (`why`, for the log).
    pub(super) fn go_shared(&mut self, now: u64, why: &str) {
        if self.mode() != Mode::Shared {
            let since = Duration::from_millis(now.saturating_sub(self.since));
            tracing::warn!(
                from = self.mode().as_str(),
                after = ?since,
                "ledger mode: shared ({why})"
            );
            self.enter(Admitting::Shared, now);
        }
    }

    /// After a restore at `now`: whether admissions wait until the other instances have
    /// written back what the store lost (at most [`Self::rejoin_grace`]).
    pub(super) fn await_others(&mut self, restored: &Restored, now: u64) {
        let until = now + self.rejoin_grace();
        // `open` admits uncounted anyway: nothing to wait for.
        if restored.stale && self.settings.on_error != OnError::Open {
            let instances = self.seen.as_ref().map_or(1, |b| b.instances);
            let awaiting = (restored.restored < instances).then_some(Awaiting { instances, until });
            if awaiting.is_some()
                && self.mode() == Mode::Shared
                && self.settings.on_error == OnError::Local
            {
                // Admitting nothing on its own while it waits: what it admitted would be
                // missing from the windows when the others go back to them.
                let n = self.go_local(now, Some(until), None);
                tracing::warn!(
                    instances = n,
                    "ledger mode: local (the shared ledger lost its windows; waiting for the \
                     other instances to write theirs back)"
                );
            }
            self.set_awaiting(awaiting);
        } else if let Some(a) = self.awaiting()
            && (restored.restored >= a.instances || now >= a.until)
        {
            self.set_awaiting(None);
        }
    }

    fn set_awaiting(&mut self, awaiting: Option<Awaiting>) {
        match (&mut self.admitting, awaiting) {
            (Admitting::Local(l), _) => l.awaiting = awaiting,
            (Admitting::Shared | Admitting::Rebuilding(_), Some(a)) => {
                self.admitting = Admitting::Rebuilding(a);
            }
            (Admitting::Rebuilding(_), None) => self.admitting = Admitting::Shared,
            (Admitting::Shared | Admitting::Open(_), None) | (Admitting::Open(_), Some(_)) => {}
        }
    }

    /// Switches to local mode at `now`: a ledger of this instance's share of every limit,
    /// seeded (see [`Local::seed`]). `closing`: it admits nothing on its own either, until then
    /// (ms; see [`Local::closing`]). Returns the instance count it divides by.
    pub(super) fn go_local(
        &mut self,
        now: u64,
        closing: Option<u64>,
        awaiting: Option<Awaiting>,
    ) -> u64 {
        let n = self.seen.as_ref().map_or(1, |b| b.instances).max(1);
        let mut local = Local::start(&self.table, n, closing);
        local.awaiting = awaiting;
        local.seed(self, now);
        self.enter(Admitting::Local(Box::new(local)), now);
        n
    }

    fn enter(&mut self, admitting: Admitting, now: u64) {
        self.admitting = admitting;
        self.since = now;
        self.changes += 1;
    }
}
