//! A streamed answer's body: its events one frame each, with an optional gap between them.
//!
//! hyper writes out what it has when the body has nothing more ready, so with a gap each event
//! goes out (is flushed) on its own; without one they may leave in one write.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::time::Sleep;

/// The events of one stream, sent in order.
pub(crate) struct Events {
    events: Arc<[Bytes]>,
    next: usize,
    gap: Duration,
    waiting: Option<Pin<Box<Sleep>>>,
}

impl Events {
    /// `events`, `gap` apart (none when zero).
    pub(crate) fn new(events: Arc<[Bytes]>, gap: Duration) -> Events {
        Events {
            events,
            next: 0,
            gap,
            waiting: None,
        }
    }

    /// Ready once the gap before the next event has passed.
    fn poll_gap(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.gap.is_zero() || self.next == 0 {
            return Poll::Ready(());
        }
        let gap = self.gap;
        let sleep = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.waiting = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.next >= this.events.len() {
            return Poll::Ready(None);
        }
        if this.poll_gap(cx).is_pending() {
            return Poll::Pending;
        }
        let event = this.events[this.next].clone();
        this.next += 1;
        Poll::Ready(Some(Ok(Frame::data(event))))
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.events.len()
    }
}
