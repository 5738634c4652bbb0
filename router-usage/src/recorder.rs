//! The recorder: takes a record on the request's path (one channel send) and writes records in
//! batches from a task of its own. While the sink fails or is slow, batches go to the spill file;
//! the file is replayed into the sink once it answers again (tried after 1 s, backing off to
//! 30 s). A record the file cannot take either stays in memory and is tried again: none is
//! dropped while the process lives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::inbox::{self, Inbox, Msg, Next, Turn, gather};
use crate::record::Record;
use crate::sink::Sink;
use crate::spill::{Spill, Taken};

/// How a recorder batches.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    /// Most records a batch holds.
    pub batch: usize,
    /// How long the first record of a batch waits for more.
    pub flush: Duration,
    /// How long one write to the sink may take.
    pub timeout: Duration,
}

impl Batching {
    /// From `usage:`.
    pub fn of(settings: &router_core::config::UsageSettings) -> Self {
        Self {
            batch: settings.batch.max(1),
            flush: settings.flush,
            timeout: settings.timeout,
        }
    }
}

/// The first wait before trying a failed sink again.
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What a recorder has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Records handed to it.
    pub recorded: u64,
    /// Records written to the sink as they came.
    pub written: u64,
    /// Records written to the spill file.
    pub spilled: u64,
    /// Records replayed from the spill file into the sink (this process's and earlier ones').
    pub replayed: u64,
    /// Lines of the spill file that were not records (cut short by a crash) and were skipped.
    pub skipped: u64,
    /// Whether the sink is failing now.
    pub sink_down: bool,
}

#[derive(Debug, Default)]
struct Counters {
    recorded: AtomicU64,
    written: AtomicU64,
    spilled: AtomicU64,
    replayed: AtomicU64,
    skipped: AtomicU64,
    down: AtomicU64,
}

/// Hands records to the writer task. Cheap to clone; the task ends once every clone is dropped
/// and what was handed to it is written.
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: inbox::Sender,
    counters: Arc<Counters>,
    sink: Arc<Sink>,
}

impl Recorder {
    /// Starts the writer task (on the current Tokio runtime) over `sink`, spilling to `spill`.
    /// Records left in the spill file by an earlier run are replayed first.
    pub fn start(sink: Sink, spill: &std::path::Path, batching: Batching) -> Recorder {
        let (tx, rx) = inbox::queue(batching.batch);
        let counters = Arc::new(Counters::default());
        let sink = Arc::new(sink);
        let spill = Spill::new(spill);
        let writer = Writer {
            pending_spill: spill.has_records(),
            sink: sink.clone(),
            spill,
            batching,
            counters: counters.clone(),
            retry_at: Instant::now(),
            backoff: RETRY_FIRST,
            down: false,
            held: Vec::new(),
            fresh: Fresh::default(),
        };
        tokio::spawn(writer.run(rx));
        Recorder { tx, counters, sink }
    }

    /// Takes `record`: never waits, never fails. Records handed over after the writer task
    /// ended (the runtime shut down) are logged and lost with the process.
    pub fn record(&self, record: Record) {
        self.counters.recorded.fetch_add(1, Ordering::Relaxed);
        if !self.tx.send(Msg::Record(Box::new(record))) {
            tracing::error!("usage: the writer has stopped; a record was not kept");
        }
    }

    /// Waits until every record handed over before this call is in the sink or the spill file.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Flush(done)) {
            let _ = wait.await;
        }
    }

    /// Writes what is queued, then tries the sink now (not at the next retry time): what is
    /// held in memory and the spill file go to the sink if it answers. `true` when nothing is
    /// left outside the sink.
    pub async fn retry(&self) -> bool {
        self.flush().await;
        let (done, wait) = oneshot::channel();
        if !self.tx.send(Msg::Retry(done)) {
            return false;
        }
        wait.await.unwrap_or(false)
    }

    /// What it has done so far.
    pub fn stats(&self) -> RecorderStats {
        let c = &self.counters;
        RecorderStats {
            recorded: c.recorded.load(Ordering::Relaxed),
            written: c.written.load(Ordering::Relaxed),
            spilled: c.spilled.load(Ordering::Relaxed),
            replayed: c.replayed.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            sink_down: c.down.load(Ordering::Relaxed) == 1,
        }
    }

    /// The sink, for reports.
    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    /// Keeps the sink to the last `days` days (see [`keep_days`](crate::keep_days)).
    pub fn retain_days(&self, days: u64) {
        crate::retention::keep_days(self.sink.clone(), days);
    }
}

struct Writer {
    sink: Arc<Sink>,
    spill: Spill,
    batching: Batching,
    counters: Arc<Counters>,
    /// The spill file may hold records.
    pending_spill: bool,
    /// When to try the sink again (while `down` or `pending_spill`).
    retry_at: Instant,
    backoff: Duration,
    /// The sink failed its last write.
    down: bool,
    /// Records neither the sink nor the spill file took.
    held: Vec<Record>,
    /// What came in while a replay was under way and is not settled yet.
    fresh: Fresh,
}

/// Messages taken between two chunks of a replay.
#[derive(Default)]
struct Fresh {
    /// Records the sink failed to take; they go to the spill file once the replay lets go of it.
    records: Vec<Record>,
    /// Flushes waiting for those records.
    acks: Vec<oneshot::Sender<()>>,
    /// `retry` calls, answered once the replay is over.
    retries: Vec<oneshot::Sender<bool>>,
}

impl Writer {
    async fn run(mut self, mut rx: Inbox) {
        if self.pending_spill {
            // An earlier run's records first; new ones are taken between its chunks.
            self.recover(&mut rx).await;
        }
        loop {
            let retry = self.pending_spill || !self.held.is_empty();
            let msg = tokio::select! {
                // A recovery that is due goes first: it takes new records between its chunks,
                // so it holds no one up, and a steady stream of records cannot put it off.
                biased;
                () = tokio::time::sleep_until(self.retry_at), if retry => {
                    self.recover(&mut rx).await;
                    continue;
                }
                msg = rx.recv() => msg,
            };
            let Some(msg) = msg else {
                break;
            };
            let mut turn = Turn::default();
            turn.add(msg);
            if turn.asked() {
                // A flush takes whatever is already queued with it.
                while let Next::Msg(msg) = rx.take() {
                    turn.add(msg);
                }
            } else {
                gather(&mut rx, &mut turn, self.batching).await;
            }
            self.write(turn.batch).await;
            for ack in turn.acks {
                let _ = ack.send(());
            }
            if !turn.retries.is_empty() {
                if self.pending_spill || !self.held.is_empty() {
                    self.recover(&mut rx).await;
                }
                let clear = self.clear();
                for answer in turn.retries {
                    let _ = answer.send(clear);
                }
            }
            if turn.closed {
                break;
            }
        }
        // Every sender is gone: what is held goes to the file if it can.
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            self.spill_batch(held).await;
        }
    }

    /// Writes `batch` to the sink, else to the spill file.
    async fn write(&mut self, batch: Vec<Record>) {
        if batch.is_empty() {
            return;
        }
        if !self.down && !self.pending_spill {
            match self.sink_write(&batch).await {
                Ok(()) => {
                    self.counters
                        .written
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    return;
                }
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        spill = %self.spill.path().display(),
                        "usage: the sink failed; records go to the spill file until it is back"
                    );
                    self.failed();
                }
            }
        }
        self.spill_batch(batch).await;
    }

    async fn sink_write(&self, batch: &[Record]) -> Result<(), String> {
        match tokio::time::timeout(self.batching.timeout, self.sink.write(batch)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {} ms (usage.timeout_ms)",
                self.batching.timeout.as_millis()
            )),
        }
    }

    /// The sink failed: try again after the backoff, doubled each time.
    fn failed(&mut self) {
        if !self.down {
            self.backoff = RETRY_FIRST;
        }
        self.down = true;
        self.counters.down.store(1, Ordering::Relaxed);
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(RETRY_MAX);
    }

    async fn spill_batch(&mut self, batch: Vec<Record>) {
        let spill = self.spill.clone();
        let n = batch.len() as u64;
        let result =
            tokio::task::spawn_blocking(move || spill.append(&batch).map_err(|e| (e, batch))).await;
        match result {
            Ok(Ok(())) => {
                self.pending_spill = true;
                self.counters.spilled.fetch_add(n, Ordering::Relaxed);
            }
            Ok(Err((e, batch))) => {
                tracing::error!(error = %e, records = n, "usage: cannot spill; keeping the records in memory");
                self.held.extend(batch);
                if !self.down {
                    self.failed();
                }
            }
            Err(e) => tracing::error!(error = %e, records = n, "usage: the spilling thread failed"),
        }
    }

    /// Nothing is outside the sink.
    fn clear(&self) -> bool {
        !self.pending_spill && self.held.is_empty()
    }

    /// Time to try again: what is held in memory, then the spill file, into the sink. Records
    /// handed over meanwhile are taken between the file's chunks.
    async fn recover(&mut self, rx: &mut Inbox) {
        if !self.try_recover(rx).await {
            self.failed();
        }
        // What came in during the replay and the sink did not take goes to the file, which the
        // replay has let go of; then whoever waits for it is answered.
        let fresh = std::mem::take(&mut self.fresh);
        if !fresh.records.is_empty() {
            self.spill_batch(fresh.records).await;
        }
        for ack in fresh.acks {
            let _ = ack.send(());
        }
        let clear = self.clear();
        for answer in fresh.retries {
            let _ = answer.send(clear);
        }
    }

    /// [`Writer::recover`] up to its bookkeeping; `false` when the sink failed on the way.
    async fn try_recover(&mut self, rx: &mut Inbox) -> bool {
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            match self.sink_write(&held).await {
                Ok(()) => {
                    self.counters
                        .written
                        .fetch_add(held.len() as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    self.held = held;
                    return false;
                }
            }
        }
        if self.pending_spill && !self.replay(rx).await {
            return false;
        }
        if self.down {
            tracing::info!("usage: the sink is back");
        }
        self.down = false;
        self.counters.down.store(0, Ordering::Relaxed);
        true
    }

    /// Between two chunks of a replay: records handed over since it began go to the sink, and
    /// flushes waiting for them are answered, so that a long replay (a large file left by an
    /// earlier run) holds up no caller, a one-shot `llmroute chat` above all. `false` when the
    /// sink failed: the records stay in `fresh`, for the file once the replay lets go of it.
    async fn take_fresh(&mut self, rx: &mut Inbox) -> bool {
        let mut records = Vec::new();
        let mut acks = Vec::new();
        while let Next::Msg(msg) = rx.take() {
            match msg {
                Msg::Record(r) => records.push(*r),
                Msg::Flush(ack) => acks.push(ack),
                Msg::Retry(answer) => self.fresh.retries.push(answer),
            }
        }
        if !records.is_empty() {
            if let Err(e) = self.sink_write(&records).await {
                tracing::warn!(error = %e, "usage: the sink failed during a replay; replay later");
                self.fresh.records.extend(records);
                self.fresh.acks.extend(acks);
                return false;
            }
            self.counters
                .written
                .fetch_add(records.len() as u64, Ordering::Relaxed);
        }
        for ack in acks {
            let _ = ack.send(());
        }
        true
    }

    /// Replays the spill file into the sink; `false` when the sink failed on the way (the file
    /// stays as it is: replaying it again writes each record once, by its id).
    async fn replay(&mut self, rx: &mut Inbox) -> bool {
        let spill = self.spill.clone();
        let taken = match tokio::task::spawn_blocking(move || spill.take()).await {
            Ok(Ok(Some(taken))) => taken,
            Ok(Ok(None)) => {
                self.pending_spill = false;
                return true;
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "usage: cannot read the spill file");
                return false;
            }
            Err(_) => return false,
        };
        let mut taken: Taken = taken;
        let mut replayed = 0u64;
        loop {
            let n = self.batching.batch;
            let read = tokio::task::spawn_blocking(move || {
                let chunk = taken.next(n);
                (taken, chunk)
            })
            .await;
            let (back, chunk) = match read {
                Ok((back, Ok(chunk))) => (back, chunk),
                Ok((_, Err(e))) => {
                    tracing::error!(error = %e, "usage: cannot read the spill file");
                    return false;
                }
                Err(_) => return false,
            };
            taken = back;
            if chunk.is_empty() {
                break;
            }
            if let Err(e) = self.sink_write(&chunk).await {
                tracing::warn!(error = %e, "usage: the sink is still failing; replay later");
                return false;
            }
            replayed += chunk.len() as u64;
            if !self.take_fresh(rx).await {
                return false;
            }
        }
        let skipped = taken.skipped;
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || taken.clear()).await {
            // Everything reached the sink; the next replay writes it again, once by id.
            tracing::warn!(error = %e, "usage: cannot empty the spill file");
        }
        self.counters
            .replayed
            .fetch_add(replayed, Ordering::Relaxed);
        self.counters.skipped.fetch_add(skipped, Ordering::Relaxed);
        if skipped > 0 {
            tracing::warn!(
                lines = skipped,
                "usage: skipped spill lines that were not records"
            );
        }
        tracing::info!(
            records = replayed,
            "usage: replayed the spill file into the sink"
        );
        self.pending_spill = false;
        true
    }
}
