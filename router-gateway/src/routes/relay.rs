//! A streamed answer relayed as SSE: the router's stream as its ingress writes it ([`Events`]),
//! chunk by chunk; or the ingress's error events when it breaks, is cut off, or is left unread
//! past its deadline.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, PoisonError};

use axum::response::sse::{self, Event};
use axum::response::{IntoResponse, Response};
use futures_util::stream::StreamExt;
use router_sdk::{ChatChunk, ChatStream};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{set_headers, set_wait_headers};
use crate::app::Shared;
use crate::cut::{Expiry, Slot, Streams};
use crate::errors::ApiError;
use crate::ingress::{Events, Sse};
use crate::metrics;
use crate::telemetry::ServerSpan;

/// A streamed answer as SSE, written by `events` as chunks arrive. When the client goes away,
/// the stream is dropped, which cancels the upstream call and settles its reservation.
pub(crate) fn streamed(stream: ChatStream, events: Box<dyn Events>, counted: Counted) -> Response {
    let provider = stream.provider().to_owned();
    let model = stream.model().to_owned();
    let request_id = stream.request_id().to_owned();
    let (waited, queue_position) = (stream.waited(), stream.queue_position());
    let slot = counted.shared.streams.hold(stream);
    let state = Relay {
        cut: Box::pin(counted.shared.cut.clone().cancelled_owned()),
        expiry: Streams::expire_unread(&slot),
        stream: slot,
        counted,
        events,
        pending: VecDeque::new(),
        ended: None,
    };
    let events = futures_util::stream::unfold(state, |mut relay| async move {
        let event = relay.next().await?;
        Some((Ok::<Event, Infallible>(event), relay))
    });
    let mut response = sse::Sse::new(events).into_response();
    let pairs = [
        ("x-llmroute-provider", provider.as_str()),
        ("x-llmroute-model", model.as_str()),
        ("x-request-id", request_id.as_str()),
    ];
    set_headers(response.headers_mut(), &pairs);
    set_wait_headers(response.headers_mut(), waited, queue_position);
    response
}

/// Where a stream's answer is counted when it ends.
pub(crate) struct Counted {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tenant: String,
    pub(crate) request_id: String,
    /// The request's span when it is traced, ended with the stream.
    pub(crate) span: Option<ServerSpan>,
}

/// Turns the router's stream into SSE events.
pub(crate) struct Relay {
    /// Resolves when the gateway's grace period is over ([`Cut`]).
    cut: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    /// The router's stream, until a cut or its deadline unread takes it.
    stream: Arc<Slot>,
    /// Its deadline timer, stopped with the relay.
    expiry: Option<Expiry>,
    counted: Counted,
    events: Box<dyn Events>,
    pending: VecDeque<Event>,
    /// How the stream ended, once it has; a relay dropped before is a client gone.
    ended: Option<metrics::StreamEnd>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let end = self.ended.unwrap_or(metrics::StreamEnd::ClientGone);
        self.counted.shared.metrics.stream_ended(end);
        if let Some(span) = self.counted.span.take() {
            span.end_stream(end.as_str());
        }
    }
}

impl Relay {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.ended.is_some() {
                return None;
            }
            // The slot is locked only while the stream is polled: a cut takes it in between.
            let slot = &self.stream;
            let polled = futures_util::future::poll_fn(|cx| {
                let mut stream = slot.lock().unwrap_or_else(PoisonError::into_inner);
                match stream.as_mut() {
                    Some(stream) => stream.poll_next_unpin(cx).map(Some),
                    None => std::task::Poll::Ready(None),
                }
            });
            let taken = self.expiry.as_ref().map(|e| e.taken.clone());
            let taken = async move {
                match taken {
                    Some(taken) => taken.notified().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                biased;
                () = &mut self.cut => None,
                () = taken => None,
                next = polled => next,
            };
            let Some(next) = next else {
                // Cut off, or dropped past its deadline unread: the stream is dropped (by the
                // cut, the timer, or here), which settles it.
                self.stream
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                let (error, end) = if self.counted.shared.cut.is_cancelled() {
                    (ApiError::stopping(), metrics::StreamEnd::Shutdown)
                } else {
                    (ApiError::unread_past_deadline(), metrics::StreamEnd::Unread)
                };
                self.pending
                    .extend(self.events.failed(&error).into_iter().map(Sse::event));
                self.ended = Some(end);
                continue;
            };
            match next {
                Some(Ok(ChatChunk::Done(receipt))) => {
                    let who = metrics::Served {
                        tenant: &self.counted.tenant,
                        provider: &receipt.provider,
                        model: &receipt.model,
                    };
                    self.counted.shared.metrics.answered(&who, &receipt);
                    if let Some(span) = self.counted.span.as_mut() {
                        span.answered(&receipt, self.counted.shared.router.registry());
                    }
                    let end = self.events.chunk(ChatChunk::Done(receipt));
                    self.pending.extend(end.into_iter().map(Sse::event));
                    self.ended = Some(metrics::StreamEnd::Completed);
                }
                Some(Ok(chunk)) => {
                    if let Some(span) = self.counted.span.as_mut() {
                        span.streamed(&chunk);
                    }
                    let events = self.events.chunk(chunk);
                    self.pending.extend(events.into_iter().map(Sse::event));
                }
                Some(Err(e)) => {
                    self.counted.shared.metrics.attempts(e.attempts());
                    let router = &self.counted.shared.router;
                    super::chat::traced_failure(&mut self.counted.span, &e, router);
                    let error = ApiError::logged(e, &self.counted.request_id);
                    self.pending
                        .extend(self.events.failed(&error).into_iter().map(Sse::event));
                    self.ended = Some(metrics::StreamEnd::Broken);
                }
                None => self.ended = Some(metrics::StreamEnd::Completed),
            }
        }
    }
}
