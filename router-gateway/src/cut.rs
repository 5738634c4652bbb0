//! Ending what the gateway has in flight: [`Cut`] ends every chat request now, and the streams
//! being relayed are held weakly ([`Streams`]) so that a cut, or a deadline passed unread, can
//! drop one no one polls.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use router_sdk::ChatStream;
use tokio_util::sync::CancellationToken;

/// A stream being relayed: `None` once [`Cut::now`], or its deadline unread
/// ([`Streams::expire_unread`]), has taken (and dropped) it.
pub(crate) type Slot = std::sync::Mutex<Option<ChatStream>>;

/// How long past its deadline a stream no one polls is dropped.
pub(crate) const UNREAD_GRACE: Duration = Duration::from_secs(1);

/// A stream's deadline timer ([`Streams::expire_unread`]), stopped when the relay ends, and
/// how it tells a relay that is polled after all (a stream still busy past its deadline) that
/// it took the stream.
#[derive(Debug)]
pub(crate) struct Expiry {
    pub(crate) timer: tokio::task::AbortHandle,
    pub(crate) taken: Arc<tokio::sync::Notify>,
}

impl Drop for Expiry {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

/// The streams the gateway relays, each held weakly, so that [`Cut::now`] can drop them when
/// no one polls them: a client that stopped reading leaves its stream's relay unpolled once
/// the connection's buffers are full, and a cut noticed only at the next poll would come never.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    /// The slots, and the length at which the dead ones are next swept out.
    live: std::sync::Mutex<(Vec<std::sync::Weak<Slot>>, usize)>,
}

impl Streams {
    /// Holds `stream` in a slot [`Streams::end_all`] can empty.
    pub(crate) fn hold(&self, stream: ChatStream) -> Arc<Slot> {
        let slot = Arc::new(std::sync::Mutex::new(Some(stream)));
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let (slots, sweep_at) = &mut *live;
        if slots.len() >= *sweep_at {
            slots.retain(|s| s.strong_count() > 0);
            *sweep_at = (2 * slots.len()).max(64);
        }
        slots.push(Arc::downgrade(&slot));
        slot
    }

    /// Drops the stream in `slot` a little after its request's deadline, should no one have
    /// polled it to its end by then: a polled stream ends at its deadline on its own, but one
    /// whose client stopped reading is not polled once the connection's buffers are full, and
    /// would hold its reservation (renewed) and its concurrency slots for as long as the
    /// client keeps the connection open. The timer goes with the returned handle.
    pub(crate) fn expire_unread(slot: &Arc<Slot>) -> Option<Expiry> {
        let deadline = slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(ChatStream::deadline)?
            .checked_add(UNREAD_GRACE)?;
        let weak = Arc::downgrade(slot);
        let taken = Arc::new(tokio::sync::Notify::new());
        let tell = taken.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            if let Some(slot) = weak.upgrade() {
                let stream = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                drop(stream);
                // A relay parked inside the stream lost its waker with it.
                tell.notify_one();
            }
        });
        Some(Expiry {
            timer: timer.abort_handle(),
            taken,
        })
    }

    /// Drops every stream still held (each settles as a dropped request).
    pub(crate) fn end_all(&self) {
        let slots = std::mem::take(&mut self.live.lock().unwrap_or_else(PoisonError::into_inner).0);
        for slot in slots.iter().filter_map(std::sync::Weak::upgrade) {
            let stream = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            drop(stream);
        }
    }
}

/// Ends every chat request the gateway's services have in flight: a whole answer not yet
/// given is refused with 503 `gateway_stopping`, a stream ends with that error (and no
/// `[DONE]`), and each one's provider call is dropped, which settles its reservation as a
/// dropped request's. Requests that arrive after it are refused the same way. Dropping the
/// server's task instead would leave its connections' tasks running (they are spawned apart),
/// and with them reservations that nothing settles before the process ends.
#[derive(Debug, Clone)]
pub struct Cut {
    /// Cancelled by [`Cut::now`]: what every request in flight waits on beside its answer.
    pub(crate) token: CancellationToken,
    pub(crate) streams: Arc<Streams>,
}

impl Cut {
    /// Ends what is in flight now: streams are dropped here, whether or not their client still
    /// reads; whole answers waiting for their provider end at once.
    pub fn now(&self) {
        self.token.cancel();
        self.streams.end_all();
    }
}
