//! The recorder's queue, and how its writer gathers a batch from it: records and requests
//! (flush, retry) in the order they were handed over. A record wakes the writer only when the writer is idle or the record fills a batch; a
//! request always wakes it. So a writer gathering a batch wakes once per batch rather than once
//! per record: on a multi-threaded runtime a wake of a waiting task may cost a sleeping worker
//! thread's wake-up, a system call and a context switch, at every request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::record::Record;
use crate::recorder::Batching;

/// What the recorder's writer is handed.
pub(crate) enum Msg {
    Record(Box<Record>),
    Flush(oneshot::Sender<()>),
    Retry(oneshot::Sender<bool>),
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

/// What both ends share: the records queued and not taken, and the writer's bell.
#[derive(Debug)]
struct Shared {
    queued: AtomicUsize,
    /// Rung by a request, or by a record that fills a batch.
    bell: Notify,
    batch: usize,
}

/// The sending end. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    tx: mpsc::UnboundedSender<Msg>,
    shared: Arc<Shared>,
}

/// The writer's end.
pub(crate) struct Inbox {
    rx: mpsc::UnboundedReceiver<Msg>,
    shared: Arc<Shared>,
}

/// A queue whose writer gathers batches of up to `batch` records.
pub(crate) fn queue(batch: usize) -> (Sender, Inbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        queued: AtomicUsize::new(0),
        bell: Notify::new(),
        batch: batch.max(1),
    });
    let sender = Sender {
        tx,
        shared: shared.clone(),
    };
    (sender, Inbox { rx, shared })
}

impl Sender {
    /// Hands `msg` over; `false` when the writer has stopped.
    pub(crate) fn send(&self, msg: Msg) -> bool {
        let shared = &self.shared;
        // Counted before it is sent, so the writer never takes a record it has not counted.
        let fills = match msg {
            Msg::Record(_) => shared.queued.fetch_add(1, Ordering::AcqRel) + 1 >= shared.batch,
            Msg::Flush(_) | Msg::Retry(_) => true,
        };
        if self.tx.send(msg).is_err() {
            return false;
        }
        if fills {
            shared.bell.notify_one();
        }
        true
    }
}

/// What [`Inbox::take`] found.
pub(crate) enum Next {
    Msg(Msg),
    /// Nothing queued now.
    Empty,
    /// Nothing queued, and every sender is gone.
    Closed,
}

impl Inbox {
    /// The next message, waiting for one; `None` once every sender is gone and all is taken.
    pub(crate) async fn recv(&mut self) -> Option<Msg> {
        let msg = self.rx.recv().await?;
        self.count_out(&msg);
        Some(msg)
    }

    /// The next message if one is queued.
    pub(crate) fn take(&mut self) -> Next {
        match self.rx.try_recv() {
            Ok(msg) => {
                self.count_out(&msg);
                Next::Msg(msg)
            }
            Err(mpsc::error::TryRecvError::Empty) => Next::Empty,
            Err(mpsc::error::TryRecvError::Disconnected) => Next::Closed,
        }
    }

    /// Waits until a batch may be full or a request came (the bell), or until `deadline`:
    /// `true` at the deadline. A bell rung before the wait counts, so no ring is missed.
    pub(crate) async fn gather(&self, deadline: Instant) -> bool {
        tokio::select! {
            () = self.shared.bell.notified() => false,
            () = tokio::time::sleep_until(deadline) => true,
        }
    }

    fn count_out(&self, msg: &Msg) {
        if let Msg::Record(_) = msg {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What one turn of the writer takes: records, and the flushes and retries waiting for them.
#[derive(Default)]
pub(crate) struct Turn {
    pub(crate) batch: Vec<Record>,
    pub(crate) acks: Vec<oneshot::Sender<()>>,
    pub(crate) retries: Vec<oneshot::Sender<bool>>,
    /// Every sender is gone.
    pub(crate) closed: bool,
}

impl Turn {
    pub(crate) fn add(&mut self, msg: Msg) {
        match msg {
            Msg::Record(r) => self.batch.push(*r),
            Msg::Flush(ack) => self.acks.push(ack),
            Msg::Retry(answer) => self.retries.push(answer),
        }
    }

    /// A flush or a retry is waiting: the turn ends with what it holds.
    pub(crate) fn asked(&self) -> bool {
        !self.acks.is_empty() || !self.retries.is_empty()
    }
}

/// Fills `turn` with records until its batch is full, a flush or a retry comes, the queue
/// closes, or `batching.flush` has passed since it began. The writer sleeps meanwhile, woken
/// once a batch rather than at every record.
pub(crate) async fn gather(rx: &mut Inbox, turn: &mut Turn, batching: Batching) {
    let deadline = Instant::now() + batching.flush;
    let mut due = false;
    loop {
        while turn.batch.len() < batching.batch && !turn.asked() {
            match rx.take() {
                Next::Msg(msg) => turn.add(msg),
                Next::Empty => break,
                Next::Closed => {
                    turn.closed = true;
                    break;
                }
            }
        }
        if turn.batch.len() >= batching.batch || turn.asked() || turn.closed || due {
            return;
        }
        due = rx.gather(deadline).await;
    }
}

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod tests;
