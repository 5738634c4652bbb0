//! A request's ticket in the deployments' lines, as its driver holds it: where it entered,
//! the wake-ups meant for it, and its way out. The ledger decides who is first (see
//! `router_core::ledger`'s lines); this only listens and leaves.

use std::sync::Arc;

use router_core::config::DeploymentId;
use router_core::ledger::{EVERYONE, Ledger};
use tokio::sync::broadcast::{self, error::RecvError};

/// One request's place in line.
pub(crate) struct InLine {
    ticket: u64,
    /// The ledger and the deployments whose lines the request may be in (every candidate of
    /// it), kept once it first joins a line: a request served at once costs nothing here.
    ledger: Option<Arc<dyn Ledger>>,
    candidates: Vec<DeploymentId>,
    /// Whether the last admission left it in a line.
    joined: bool,
    /// How many stood before it when it first joined a line.
    entered_at: Option<u64>,
    /// Wake-ups from the store, once the request is in line (when the store sends them).
    wakes: Option<broadcast::Receiver<u64>>,
}

impl std::fmt::Debug for InLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InLine")
            .field("ticket", &self.ticket)
            .field("joined", &self.joined)
            .field("entered_at", &self.entered_at)
            .finish_non_exhaustive()
    }
}

impl InLine {
    /// The ticket `ticket` of a request, in no line yet.
    pub(crate) fn new(ticket: u64) -> Self {
        Self {
            ticket,
            ledger: None,
            candidates: Vec::new(),
            joined: false,
            entered_at: None,
            wakes: None,
        }
    }

    /// How many stood before the request when it first joined a line, if it did.
    pub(crate) fn entered_at(&self) -> Option<u64> {
        self.entered_at
    }

    /// Whether the request is in a line now.
    pub(crate) fn joined(&self) -> bool {
        self.joined
    }

    /// An admission of `ledger` refused the request, leaving it `place` in line (`None`: in
    /// none); `candidates` are all of the request's.
    pub(crate) fn denied(
        &mut self,
        place: Option<u64>,
        ledger: &Arc<dyn Ledger>,
        candidates: &[DeploymentId],
    ) {
        self.joined = place.is_some();
        if let Some(place) = place {
            self.entered_at.get_or_insert(place);
            if self.ledger.is_none() {
                self.wakes = ledger.wakes();
                self.ledger = Some(ledger.clone());
                self.candidates = candidates.to_vec();
            }
        }
    }

    /// An admission took the request: the store took its ticket out of every line.
    pub(crate) fn admitted(&mut self) {
        self.joined = false;
    }

    /// Resolves when the store says the request's turn may have come, or when wake-ups were
    /// missed (the request asks again); never, when the store sends none.
    pub(crate) async fn woken(&mut self) {
        let Some(wakes) = self.wakes.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            match wakes.recv().await {
                Ok(ticket) if ticket == self.ticket || ticket == EVERYONE => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => return std::future::pending().await,
            }
        }
    }
}

impl Drop for InLine {
    /// A request that ends (gives up, or is dropped) while in line leaves it at once, on a
    /// task: the next in line must not wait for its ticket's TTL.
    fn drop(&mut self) {
        let Some(ledger) = self.ledger.take().filter(|_| self.joined) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let ticket = self.ticket;
        let candidates = std::mem::take(&mut self.candidates);
        runtime.spawn(async move {
            if let Err(e) = ledger.leave(ticket, &candidates).await {
                tracing::warn!(error = %e, "could not leave the line; the ticket expires by itself");
            }
        });
    }
}
