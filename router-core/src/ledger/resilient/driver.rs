//! The driver: one task owns the background work of an instance. It sends the heartbeats on
//! the machine's timer, and runs the restores, the blocks asked for ahead, the block calls
//! asked again and the settling of the leases at close. Callers only admit and settle; what
//! they need of the background (a heartbeat now, a restore, the close) they order here and
//! await.
//!
//! Beats fall on the clock's multiples of `ledger.heartbeat_ms`, so that every instance reads
//! the windows at about the same moment: what one instance admitted after its last heartbeat
//! is then in no other's reading either, and each adds its own (see [`Own`]).
//!
//! Heartbeats, restores and the close run one at a time, in the order asked (the lane): two
//! beats at once could reach the store out of their order, and the later number would have
//! the store skip the earlier one's corrections. Blocks asked for ahead run beside the lane,
//! one at a time per deployment. An order outlives the caller that gave it: a close whose
//! caller went away still ends every block.

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};

use super::*;

/// What a caller asks of the driver.
pub(super) enum Order {
    /// A heartbeat now.
    Beat(oneshot::Sender<()>),
    /// A restore: an admission found the store had lost its keys.
    Restore(oneshot::Sender<Result<(), LedgerError>>),
    /// The next block of a deployment, asked for ahead; the settle count as the admission
    /// that asked began (see [`Inner::refill`]).
    Refill(DeploymentId, u64),
    /// The leases settled (at close).
    Close(oneshot::Sender<()>),
    /// An answer once no block asked for ahead is on its way.
    Quiet(oneshot::Sender<()>),
}

/// Work of the lane, queued.
enum Lane {
    /// A heartbeat: the timer's (no one waits), or a caller's.
    Beat(Option<oneshot::Sender<()>>),
    Restore(oneshot::Sender<Result<(), LedgerError>>),
    Close(oneshot::Sender<()>),
}

type Job<T> = futures_util::future::BoxFuture<'static, T>;

pub(super) struct Driver {
    inner: Arc<Inner>,
    orders: mpsc::UnboundedReceiver<Order>,
    queue: VecDeque<Lane>,
    /// The lane's work in progress: one at most.
    lane: FuturesUnordered<Job<()>>,
    /// Blocks asked for ahead, each yielding its deployment when done.
    refills: FuturesUnordered<Job<DeploymentId>>,
    refilling: HashSet<DeploymentId>,
    /// Callers waiting for the refills to be done.
    quiet: Vec<oneshot::Sender<()>>,
    /// When the timer last sent a beat (ms).
    last: u64,
}

impl Driver {
    pub(super) fn new(inner: Arc<Inner>, orders: mpsc::UnboundedReceiver<Order>) -> Self {
        Self {
            inner,
            orders,
            queue: VecDeque::new(),
            lane: FuturesUnordered::new(),
            refills: FuturesUnordered::new(),
            refilling: HashSet::new(),
            quiet: Vec::new(),
            last: 0,
        }
    }

    /// Runs until every order sender is gone (the store was dropped).
    pub(super) async fn run(mut self) {
        loop {
            self.start_next();
            let now = self.inner.now();
            let wait = self.inner.lock().poll_timeout(now, self.last);
            self.inner.beat_due.store(now + wait, Ordering::Relaxed);
            let idle = self.lane.is_empty() && self.queue.is_empty();
            let timer = tokio::time::sleep(Duration::from_millis(wait));
            tokio::select! {
                () = timer, if idle => {
                    self.last = self.inner.now();
                    self.queue.push_back(Lane::Beat(None));
                }
                // A move owed before then: wait again, for it.
                () = self.inner.moved.notified() => {}
                order = self.orders.recv() => match order {
                    Some(order) => self.take(order),
                    None => return,
                },
                Some(()) = self.lane.next(), if !self.lane.is_empty() => {}
                Some(d) = self.refills.next(), if !self.refills.is_empty() => self.refilled(d),
            }
        }
    }

    fn take(&mut self, order: Order) {
        match order {
            Order::Beat(reply) => self.queue.push_back(Lane::Beat(Some(reply))),
            Order::Restore(reply) => self.queue.push_back(Lane::Restore(reply)),
            Order::Close(reply) => self.queue.push_back(Lane::Close(reply)),
            Order::Refill(d, closes) => {
                if self.refilling.insert(d) {
                    let inner = self.inner.clone();
                    self.refills.push(Box::pin(async move {
                        inner.refill(d, closes).await;
                        d
                    }));
                }
            }
            Order::Quiet(reply) if self.refills.is_empty() => {
                let _ = reply.send(());
            }
            Order::Quiet(reply) => self.quiet.push(reply),
        }
    }

    /// Starts the next work of the lane, if it is free.
    fn start_next(&mut self) {
        if !self.lane.is_empty() {
            return;
        }
        let Some(next) = self.queue.pop_front() else {
            return;
        };
        let inner = self.inner.clone();
        self.lane.push(match next {
            Lane::Beat(reply) => Box::pin(async move {
                inner.tick().await;
                if let Some(reply) = reply {
                    let _ = reply.send(());
                }
            }),
            Lane::Restore(reply) => Box::pin(async move {
                let _ = reply.send(inner.restore().await);
            }),
            Lane::Close(reply) => Box::pin(async move {
                inner.settle_leases().await;
                let _ = reply.send(());
            }),
        });
    }

    fn refilled(&mut self, d: DeploymentId) {
        self.refilling.remove(&d);
        if self.refills.is_empty() {
            for reply in self.quiet.drain(..) {
                let _ = reply.send(());
            }
        }
    }
}

impl Inner {
    /// Gives `order` to the driver. `false`: the driver is gone.
    pub(super) fn order(&self, order: Order) -> bool {
        self.orders.send(order).is_ok()
    }

    /// A restore, run by the driver; awaited.
    pub(super) async fn restore_by_driver(&self) -> Result<(), LedgerError> {
        let (reply, answer) = oneshot::channel();
        let gone = || LedgerError::Lost {
            url: self.shared.url().to_owned(),
        };
        if !self.order(Order::Restore(reply)) {
            return Err(gone());
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Gives the driver an order answered with `()`, and waits for the answer (none if the
    /// driver is gone).
    pub(super) async fn ordered(&self, order: impl FnOnce(oneshot::Sender<()>) -> Order) {
        let (reply, answer) = oneshot::channel();
        if self.order(order(reply)) {
            let _ = answer.await;
        }
    }
}
