//! What requests owe the ledger once their call is over: a settlement (or release) and the
//! provider's rate-limit report, one [`Settlement`] each.
//!
//! For a ledger whose calls wait on I/O (Redis, the embedded file: [`Ledger::settles_apart`])
//! they leave the caller's path: [`Settler::pay`] puts them on a bounded queue and returns; one
//! task per router takes whatever is pending and sends it as one batch ([`Ledger::settle_batch`]: one script call per settlement, one write for the batch).
//! The memory store answers at once and is paid in place. Whatever the ledger fails to take
//! is retried on a task with backoff until it lands or the reservation's slot would have expired
//! anyway. Nothing is dropped: a full queue makes the caller wait, and [`Settler::drain`] waits
//! until the queue and the retries are empty.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use router_core::ledger::{Ledger, LedgerError, Settlement};
use tokio::sync::{Notify, mpsc};

use crate::renewals::Renewals;

/// Settlements waiting for the queue's task, at most (callers wait beyond that).
const QUEUE: usize = 4_096;
/// Settlements sent in one batch, at most.
const BATCH: usize = 256;

/// A settlement with how long its reservation's slot lives (how long retrying it makes sense).
#[derive(Debug, Clone)]
pub(crate) struct Owed {
    pub(crate) settlement: Settlement,
    pub(crate) slot_ttl: Duration,
}

impl Owed {
    async fn pay(&self, ledger: &dyn Ledger) -> Result<bool, LedgerError> {
        let batch = std::slice::from_ref(&self.settlement);
        let mut results = ledger.settle_batch(batch).await;
        results.pop().unwrap_or(Ok(false))
    }
}

/// What the settler, its queue's task and its retries share.
#[derive(Debug, Default)]
struct Books {
    /// Settlements handed over and not yet landed or given up.
    pending: AtomicUsize,
    drained: Notify,
    given_up: AtomicU64,
}

impl Books {
    fn add(&self) {
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    fn done(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.drained.notify_waiters();
        }
    }

    fn give_up(&self, owed: &Owed, why: &str) {
        self.given_up.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            reservation = owed.settlement.reservation.id,
            error = why,
            "gave up a settlement: its slot expires with its TTL"
        );
    }
}

/// Hands settlements to the ledger: queued and batched for a ledger that settles apart, in place
/// for the memory store; retried in the background when the ledger fails.
#[derive(Debug)]
pub(crate) struct Settler {
    pub(crate) ledger: Arc<dyn Ledger>,
    /// The slots held by live guards, renewed while they live.
    pub(crate) renewals: Arc<Renewals>,
    /// The queue's sending end, for a ledger that settles apart (when built inside a Tokio
    /// runtime).
    queue: Option<mpsc::Sender<Owed>>,
    books: Arc<Books>,
}

impl Settler {
    /// A settler for `ledger`; for one that settles apart, starts the queue's task on the
    /// current runtime.
    /// The task ends when the settler is dropped and the queue is empty.
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Self {
        let books = Arc::new(Books::default());
        let runtime = tokio::runtime::Handle::try_current().ok();
        let queue = runtime.filter(|_| ledger.settles_apart()).map(|runtime| {
            let (tx, rx) = mpsc::channel(QUEUE);
            runtime.spawn(send_batches(ledger.clone(), books.clone(), rx));
            tx
        });
        Self {
            renewals: Renewals::new(ledger.clone()),
            ledger,
            queue,
            books,
        }
    }

    /// Waits until every settlement handed over has landed or been given up.
    pub(crate) async fn drain(&self) {
        loop {
            let drained = self.books.drained.notified();
            if self.books.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            drained.await;
        }
    }

    /// Settlements given up since the router was built (the ledger refused them until their slot
    /// would have expired).
    pub(crate) fn given_up(&self) -> u64 {
        self.books.given_up.load(Ordering::Relaxed)
    }

    /// Pays `owed`: queued for a ledger that settles apart (waiting only while the queue is full), else at
    /// once; what the ledger fails to take is retried in the background.
    pub(crate) async fn pay(&self, owed: Owed) {
        if self.paid_here(&owed) {
            return;
        }
        if let Some(queue) = &self.queue {
            // A place in the queue first, then the count: a caller dropped while it waits for
            // room leaves nothing counted that no one will take off (and its guard pays).
            match queue.reserve().await {
                Ok(place) => {
                    self.books.add();
                    place.send(owed);
                    return;
                }
                // The task is gone (its runtime shut down): pay here.
                Err(mpsc::error::SendError(())) => {
                    self.pay_here(owed).await;
                    return;
                }
            }
        }
        self.pay_here(owed).await;
    }

    /// Whether the ledger settled `owed` at once, with no I/O ([`Ledger::settle_here`]: a
    /// reservation from a leased block): no queue, no task woken. What it refuses is retried in
    /// the background, as any refused settlement.
    fn paid_here(&self, owed: &Owed) -> bool {
        match self.ledger.settle_here(&owed.settlement) {
            None => false,
            Some(Ok(_)) => true,
            Some(Err(e)) => {
                tracing::warn!(
                    reservation = owed.settlement.reservation.id,
                    error = %e,
                    "ledger refused a settlement; retrying it in the background"
                );
                self.retry_in_background(owed.clone());
                true
            }
        }
    }

    async fn pay_here(&self, owed: Owed) {
        if let Err(e) = owed.pay(&*self.ledger).await {
            tracing::warn!(
                reservation = owed.settlement.reservation.id,
                error = %e,
                "ledger refused a settlement; retrying it in the background"
            );
            self.retry_in_background(owed);
        }
    }

    /// Pays `owed` without waiting, from code that cannot wait (a `Drop`): queued when there is
    /// room, else paid now if the ledger answers at once, else retried in the background. It is
    /// counted from the start until whoever takes it over counts it: `drain` never sees it
    /// missing on its way from the full queue to a retry.
    pub(crate) fn pay_soon(&self, owed: Owed) {
        use futures_util::FutureExt;
        if self.paid_here(&owed) {
            return;
        }
        self.books.add();
        let owed = match &self.queue {
            Some(queue) => match queue.try_send(owed) {
                // The queue's task takes it off the count.
                Ok(()) => return,
                Err(
                    mpsc::error::TrySendError::Full(owed) | mpsc::error::TrySendError::Closed(owed),
                ) => owed,
            },
            None => owed,
        };
        let now = {
            let (owed, ledger) = (owed.clone(), self.ledger.clone());
            async move { owed.pay(&*ledger).await }
        }
        .now_or_never();
        match now {
            Some(Ok(_)) => {}
            Some(Err(_)) | None => self.retry_in_background(owed),
        }
        self.books.done();
    }

    /// Retries `owed` on a task until it lands or its slot TTL has passed (the slot has expired
    /// by then and the ledger no longer counts it in flight).
    pub(crate) fn retry_in_background(&self, owed: Owed) {
        retry_in_background(self.ledger.clone(), self.books.clone(), owed);
    }
}

fn retry_in_background(ledger: Arc<dyn Ledger>, books: Arc<Books>, owed: Owed) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        books.give_up(&owed, "no async runtime to retry on");
        return;
    };
    books.add();
    runtime.spawn(async move {
        let backoff = ExponentialBuilder::new()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .without_max_times()
            .with_total_delay(Some(owed.slot_ttl));
        let result = (|| owed.pay(&*ledger)).retry(backoff).await;
        if let Err(e) = result {
            books.give_up(&owed, &e.to_string());
        }
        books.done();
    });
}

/// The queue's task: takes whatever is pending (up to [`BATCH`]), sends it as one batch, and
/// hands each settlement the ledger failed to take to a retry.
async fn send_batches(ledger: Arc<dyn Ledger>, books: Arc<Books>, mut rx: mpsc::Receiver<Owed>) {
    let mut batch: Vec<Owed> = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let settlements: Vec<Settlement> = batch.iter().map(|o| o.settlement.clone()).collect();
        let results = ledger.settle_batch(&settlements).await;
        for (i, owed) in batch.drain(..).enumerate() {
            match results.get(i) {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(
                        reservation = owed.settlement.reservation.id,
                        error = %e,
                        "ledger refused a settlement; retrying it in the background"
                    );
                    retry_in_background(ledger.clone(), books.clone(), owed);
                }
                None => retry_in_background(ledger.clone(), books.clone(), owed),
            }
            books.done();
        }
    }
}
