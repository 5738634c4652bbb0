//! `Router::chat_stream`: the answer as it arrives, the last item carrying usage and cost.
//!
//! Failover happens only before the provider starts answering (an error status or a failed
//! connection). Once a stream is open nothing is retried silently: a stream that breaks, or that
//! carries an error event, ends with an `Err` item, after settling what the provider reported
//! (else the estimate). Dropping the stream settles through the drop guard.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use eventsource_stream::Eventsource;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use router_core::config::DeploymentId;

use crate::error::Error;
use crate::guard::Guard;
use crate::router::{Plan, Progress, Router};
use crate::transport::{self, CallFailure};
use crate::types::{
    AttemptOutcome, ChatChunk, ChatRequest, FinishReason, StreamEvent, StreamSummary, Usage,
};
use crate::wire::StreamDecoder;
use crate::wire::classify::Failure;

/// A streamed answer: [`ChatChunk::Delta`] items, then one [`ChatChunk::Done`]; or an `Err`
/// item if the stream breaks.
pub struct ChatStream {
    inner: BoxStream<'static, Result<ChatChunk, Error>>,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").finish_non_exhaustive()
    }
}

impl Stream for ChatStream {
    type Item = Result<ChatChunk, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

type Events = BoxStream<'static, Result<eventsource_stream::Event, String>>;

/// A stream in progress.
struct Live {
    router: Router,
    guard: Option<Guard>,
    deployment: DeploymentId,
    events: Events,
    decoder: StreamDecoder,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    estimate: Usage,
    deadline_ms: u64,
    progress: Progress,
    pending: VecDeque<Result<ChatChunk, Error>>,
    ended: bool,
}

impl Router {
    /// Like [`Router::chat`], but yields the answer as it arrives.
    pub async fn chat_stream(&self, req: ChatRequest) -> Result<ChatStream, Error> {
        let plan = self.plan(&req)?;
        let mut progress = Progress::default();
        loop {
            let guard = self.acquire(&plan, &mut progress).await?;
            let d = guard.deployment();
            let (api, request) = self.wire(&plan, &req, d, true);
            let (limits, now) = (self.call_limits(&plan), self.system_now());
            match transport::send(&self.inner.http, api, request, limits, now).await {
                Ok(response) => {
                    self.observe(d, response.headers()).await;
                    let events = response
                        .bytes_stream()
                        .eventsource()
                        .map(|e| e.map_err(|e| e.to_string()));
                    return Ok(self.live(&plan, progress, guard, events.boxed()));
                }
                Err(failure) => self.fail(&plan, &mut progress, guard, failure).await?,
            }
        }
    }

    fn live(&self, plan: &Plan, progress: Progress, guard: Guard, events: Events) -> ChatStream {
        let deployment = guard.deployment();
        let live = Live {
            router: self.clone(),
            guard: Some(guard),
            deployment,
            events,
            decoder: StreamDecoder::new(self.inner.registry.provider_of(deployment).api),
            usage: None,
            finish: None,
            estimate: plan.estimate,
            deadline_ms: plan.deadline_ms,
            progress,
            pending: VecDeque::new(),
            ended: false,
        };
        let inner = futures_util::stream::unfold(live, |mut live| async move {
            let item = live.next_item().await?;
            Some((item, live))
        });
        ChatStream {
            inner: inner.boxed(),
        }
    }
}

impl Live {
    /// The next item for the caller, or `None` when the stream is over.
    async fn next_item(&mut self) -> Option<Result<ChatChunk, Error>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.ended {
                return None;
            }
            self.pump().await;
        }
    }

    /// Reads one event and queues what it means for the caller.
    async fn pump(&mut self) {
        let left = self.deadline_ms.saturating_sub(self.router.now_ms());
        let next =
            tokio::time::timeout(std::time::Duration::from_millis(left), self.events.next()).await;
        match next {
            Ok(Some(Ok(event))) => match self.decoder.event(&event.event, &event.data) {
                Ok(items) => self.apply(items).await,
                Err(failure) => self.break_off(Some(failure), "").await,
            },
            Ok(Some(Err(e))) => self.break_off(None, &e).await,
            Ok(None) => {
                let tail = self.decoder.finish();
                self.apply(tail).await;
                if !self.ended {
                    self.break_off(None, "the stream ended before the provider finished")
                        .await;
                }
            }
            Err(_) => self.break_off(None, "no answer before the deadline").await,
        }
    }

    async fn apply(&mut self, items: Vec<StreamEvent>) {
        let mut text = String::new();
        let mut done = false;
        for item in items {
            match item {
                StreamEvent::Delta(t) => text.push_str(&t),
                StreamEvent::Finish(f) => self.finish = Some(f),
                StreamEvent::Usage(u) => self.usage = Some(u),
                StreamEvent::Done => done = true,
                StreamEvent::Ignore => {}
            }
        }
        if !text.is_empty() {
            self.pending.push_back(Ok(ChatChunk::Delta(text)));
        }
        if done {
            self.complete().await;
        }
    }

    /// The provider finished: settle with its usage and queue the summary.
    async fn complete(&mut self) {
        self.ended = true;
        let usage = self.usage.unwrap_or(self.estimate);
        if let Some(guard) = self.guard.take() {
            guard.settle(usage).await;
        }
        let router = &self.router;
        router
            .inner
            .outputs
            .record(self.deployment, usage.completion_tokens);
        self.progress
            .attempts
            .push(router.attempt(self.deployment, AttemptOutcome::Ok));
        let registry = &router.inner.registry;
        let summary = StreamSummary {
            finish_reason: self.finish.take(),
            provider: registry.provider_of(self.deployment).name.clone(),
            model: registry.deployment(self.deployment).model.clone(),
            usage,
            cost_usd: router.cost(self.deployment, usage),
            attempts: std::mem::take(&mut self.progress.attempts),
            waited: self.progress.waited,
        };
        self.pending.push_back(Ok(ChatChunk::Done(summary)));
    }

    /// The stream broke (an error event, a transport error, an early end): settle what the
    /// provider reported (else the estimate), cool the deployment down if the provider is in
    /// trouble, and end with an error. Never retried: the caller may already have output.
    async fn break_off(&mut self, failure: Option<Failure>, transport: &str) {
        self.ended = true;
        if let Some(guard) = self.guard.take() {
            match self.usage {
                Some(usage) => guard.settle(usage).await,
                None => guard.settle_estimate().await,
            }
        }
        let router = self.router.clone();
        let failure = match failure {
            Some(failure) => CallFailure::Provider {
                failure,
                headers: Default::default(),
            },
            None => CallFailure::Timeout(transport.to_owned()),
        };
        let error = router
            .fail_stream(self.deployment, failure, &mut self.progress)
            .await;
        self.pending.push_back(Err(error));
    }
}

impl Router {
    /// Records a mid-stream failure, cools the deployment down where the provider is in trouble,
    /// and returns the error to end the stream with.
    async fn fail_stream(
        &self,
        d: DeploymentId,
        failure: CallFailure,
        progress: &mut Progress,
    ) -> Error {
        let (kind, stated) = match &failure {
            CallFailure::Provider { failure, .. } => (failure.class.kind(), failure.retry_after),
            _ => (router_core::retry::FailureKind::Transport, None),
        };
        let cooldown = self.inner.policy.cooldown(1, kind, stated, self.unit());
        if let Some(c) = cooldown {
            let _ = self.inner.ledger.cooldown(d, c).await;
        }
        progress.attempts.push(self.attempt(
            d,
            AttemptOutcome::Failed {
                kind: failure.kind_name().to_owned(),
                status: failure.status(),
                message: failure.message().to_owned(),
                cooldown,
            },
        ));
        self.error(d, failure, progress)
    }
}
