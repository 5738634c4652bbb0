//! `Router::chat_stream`: the answer as it arrives, the last item carrying usage and cost.
//!
//! Failover happens only before the provider starts answering: an error status, a failed
//! connection, or a stream whose first events are an error (Anthropic's `overloaded_error` after
//! a 200) before anything for the caller came. Once the answer has begun nothing is retried
//! silently: a stream that breaks, or that carries an error event, ends with an `Err` item,
//! after settling what the provider reported (else the estimate). Dropping the stream settles
//! through the drop guard.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use eventsource_stream::Eventsource;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use router_core::estimate::Accounting;
use router_core::ledger::WindowUse;
use tracing::Instrument;

use crate::chat::CallInput;
use crate::drive::Request;
use crate::error::{Break, Error};
use crate::guard::Guard;
use crate::router::Router;
use crate::thinking::ThoughtAssembly;
use crate::transport::{self, CallFailure};
use crate::types::{ChatChunk, ChatRequest, FinishReason, StreamEvent, ToolCallAssembly, Usage};
use crate::wire::StreamDecoder;

/// A streamed answer: [`ChatChunk::Delta`] items, then one [`ChatChunk::Done`]; or an `Err`
/// item if the stream breaks.
pub struct ChatStream {
    inner: BoxStream<'static, Result<ChatChunk, Error>>,
    provider: String,
    model: String,
    request_id: String,
    upstream: std::time::Duration,
    waited: std::time::Duration,
    queue_position: Option<u32>,
    deadline: Option<tokio::time::Instant>,
    tenant_window: Option<WindowUse>,
}

impl ChatStream {
    /// The tenant's window (requests and tokens of the last 60 s) as this stream's admission
    /// left it; `None` without a tenant, or when the admission counted nothing there.
    pub fn tenant_window(&self) -> Option<WindowUse> {
        self.tenant_window
    }

    /// The request's deadline (`None`: too far to name): polled past it, the stream ends with
    /// a timeout error. A caller that may stop polling (a client that stopped reading) can
    /// drop the stream then, which settles it; until dropped, its slot is held and renewed.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// Time spent in provider calls until the stream opened, failed attempts included.
    pub fn upstream(&self) -> std::time::Duration {
        self.upstream
    }

    /// Time spent waiting for capacity before the stream opened.
    pub fn waited(&self) -> std::time::Duration {
        self.waited
    }

    /// How many stood before the request when it joined a deployment's line; `None` when it
    /// never stood in one (as [`Receipt::queue_position`](crate::Receipt)).
    pub fn queue_position(&self) -> Option<u32> {
        self.queue_position
    }

    /// The provider answering (known once the stream opened).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The model answering.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The request's id: the caller's, else the one llmroute drew.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }
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
    request: Request,
    guard: Option<Guard>,
    events: Events,
    decoder: StreamDecoder,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    response_id: Option<String>,
    tool_calls: ToolCallAssembly,
    /// The model's thinking, as its pieces came.
    thoughts: ThoughtAssembly,
    /// The model's refusal, as its pieces came.
    refusal: String,
    pending: VecDeque<Result<ChatChunk, Error>>,
    ended: bool,
}

impl Router {
    /// Like [`Router::chat`], but yields the answer as it arrives.
    pub async fn chat_stream(&self, req: ChatRequest) -> Result<ChatStream, Error> {
        let mut request = self.begin(&crate::request::asked(&req)?, true)?;
        let span = request.span.clone();
        let input = CallInput::of(&mut request, &req);
        let (guard, opened) = self
            .until_answer(&mut request, |call| self.open_stream(&input, call))
            .instrument(span.clone())
            .await?;
        let d = guard.deployment();
        let tenant_window = guard.tenant_window();
        let guard = self.opening_report(guard, &opened.headers);
        let registry = &self.inner.registry;
        let provider = registry.provider_of(d).name.clone();
        let model = registry.deployment(d).model.clone();
        let request_id = request.id.clone();
        let upstream = request.upstream;
        let (waited, queue_position) = (request.flow.waited(), request.queue_position());
        let left = (request.planned.plan.deadline_ms).saturating_sub(self.now_ms());
        let deadline =
            tokio::time::Instant::now().checked_add(std::time::Duration::from_millis(left));
        let mut live = Live {
            router: self.clone(),
            request,
            guard: Some(guard),
            events: opened.events,
            decoder: opened.decoder,
            usage: None,
            finish: None,
            response_id: None,
            tool_calls: ToolCallAssembly::default(),
            thoughts: ThoughtAssembly::new(registry.provider_of(d).api),
            refusal: String::new(),
            pending: VecDeque::new(),
            ended: false,
        };
        live.apply(opened.first).instrument(span.clone()).await;
        let inner = futures_util::stream::unfold(live, move |mut live| {
            let span = span.clone();
            async move {
                let item = live.next_item().instrument(span).await?;
                Some((item, live))
            }
        });
        Ok(ChatStream {
            inner: inner.boxed(),
            provider,
            model,
            request_id,
            upstream,
            waited,
            queue_position,
            deadline,
            tenant_window,
        })
    }

    /// Follows the rate-limit report of a stream's opening headers. A limiter counted at arrival
    /// (OpenAI's, Gemini's): with the settlement, whenever the stream ends, in one ledger call.
    /// A limiter corrected at the end (Anthropic's ITPM and OTPM): now, while the ledger counts
    /// what the report counts (this stream's `max_tokens` among them); followed after the
    /// settlement gave the unused part back, the report would count it again as someone
    /// else's use, until its reset.
    fn opening_report(&self, guard: Guard, headers: &reqwest::header::HeaderMap) -> Guard {
        let d = guard.deployment();
        let report = self.report(d, headers);
        let api = self.inner.registry.provider_of(d).api;
        match (Accounting::of(api), report) {
            (Accounting::Corrected, Some(observation)) => {
                let ledger = self.inner.ledger.clone();
                tokio::spawn(async move {
                    if let Err(e) = ledger.observe(d, observation).await {
                        tracing::debug!(error = %e, "a stream's opening report was not followed");
                    }
                });
                guard
            }
            (_, report) => guard.reporting(report),
        }
    }

    /// Opens a stream on `d`: the provider must start answering within the attempt's time.
    /// Then reads its events up to the first that says something to the caller (text, a tool
    /// call, a finish): anything that ends the stream before that is this attempt's failure,
    /// and the request may fail over, since the caller has nothing yet. The provider answered
    /// 200, so it may have counted the request's tokens: an error event or an unreadable event
    /// settles as an unreadable answer does, and a stream that breaks, ends or stalls past the
    /// request's deadline as a timeout; both keep the estimate.
    async fn open_stream(
        &self,
        input: &CallInput<'_>,
        call: crate::drive::Call,
    ) -> Result<Opened, CallFailure> {
        let (api, request) = self.wire(input, &call, true);
        let limits = self.call_limits(input.deadline_ms);
        let now = || self.system_now();
        let response = transport::send(&self.inner.http, api, request, Some(limits), now).await?;
        let headers = response.headers().clone();
        let mut events = response
            .bytes_stream()
            .eventsource()
            .map(|e| e.map_err(|e| e.to_string()))
            .fuse()
            .boxed();
        let mut decoder = StreamDecoder::new(api, input.req);
        let mut first = Vec::new();
        let left = input.deadline_ms.saturating_sub(self.now_ms());
        let until = tokio::time::Instant::now() + std::time::Duration::from_millis(left);
        loop {
            let event = match tokio::time::timeout_at(until, events.next()).await {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(e))) => return Err(CallFailure::Broken(Break::Closed, e)),
                Ok(None) => {
                    let ended = "before the provider said anything".to_owned();
                    return Err(CallFailure::Broken(Break::Unfinished, ended));
                }
                Err(_) => return Err(transport::no_answer_within(limits.1)),
            };
            match decoder.event(&event.event, &event.data) {
                Ok(items) => {
                    let said = items.iter().any(StreamEvent::says_something);
                    first.extend(items);
                    if said {
                        break;
                    }
                }
                Err(failure) => return Err(CallFailure::Decode { failure, headers }),
            }
        }
        Ok(Opened {
            headers,
            events,
            decoder,
            first,
        })
    }
}

/// A stream open on a deployment, read up to the first event for the caller.
struct Opened {
    /// The response's headers (the provider's rate-limit report).
    headers: reqwest::header::HeaderMap,
    /// The events not read yet.
    events: Events,
    decoder: StreamDecoder,
    /// What the events read so far said.
    first: Vec<StreamEvent>,
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
        let left = (self.request.planned.plan.deadline_ms).saturating_sub(self.router.now_ms());
        let next =
            tokio::time::timeout(std::time::Duration::from_millis(left), self.events.next()).await;
        match next {
            Ok(Some(Ok(event))) => match self.decoder.event(&event.event, &event.data) {
                Ok(items) => self.apply(items).await,
                Err(failure) => {
                    let headers = Default::default();
                    self.break_off(CallFailure::Provider { failure, headers })
                        .await;
                }
            },
            Ok(Some(Err(e))) => self.break_off(CallFailure::Broken(Break::Closed, e)).await,
            Ok(None) => {
                let tail = self.decoder.finish();
                self.apply(tail).await;
                if !self.ended {
                    let why = "after some of the answer".to_owned();
                    self.break_off(CallFailure::Broken(Break::Unfinished, why))
                        .await;
                }
            }
            Err(_) => {
                let why = "no answer before the deadline".to_owned();
                self.break_off(CallFailure::Timeout(why)).await;
            }
        }
    }

    async fn apply(&mut self, items: Vec<StreamEvent>) {
        // Text of one event goes out as one delta; a tool-call piece goes out in its place.
        let mut text = String::new();
        let mut done = false;
        for item in items {
            match item {
                StreamEvent::Delta(t) => {
                    self.request.account.first_token();
                    text.push_str(&t);
                }
                StreamEvent::ToolCall(delta) => {
                    self.request.account.first_token();
                    self.flush(&mut text);
                    self.tool_calls.push(&delta);
                    self.pending.push_back(Ok(ChatChunk::ToolCallDelta(delta)));
                }
                StreamEvent::Thinking(delta) => {
                    self.request.account.first_token();
                    self.flush(&mut text);
                    self.thoughts.push(&delta);
                    self.pending.push_back(Ok(ChatChunk::Thinking(delta)));
                }
                StreamEvent::Refusal(t) => {
                    self.request.account.first_token();
                    self.refusal.push_str(&t);
                }
                StreamEvent::Id(id) => self.response_id = Some(id),
                StreamEvent::Finish(f) => self.finish = Some(f),
                StreamEvent::Usage(u) => self.usage = Some(u),
                StreamEvent::Done => done = true,
                StreamEvent::Ignore => {}
            }
        }
        self.flush(&mut text);
        if done {
            self.complete().await;
        }
    }

    fn flush(&mut self, text: &mut String) {
        if !text.is_empty() {
            self.pending
                .push_back(Ok(ChatChunk::Delta(std::mem::take(text))));
        }
    }

    /// The provider finished: settle with its usage and queue the assembled tool calls and the
    /// receipt.
    async fn complete(&mut self) {
        self.ended = true;
        if !self.thoughts.is_empty() {
            let thoughts = self.thoughts.take();
            self.pending.push_back(Ok(ChatChunk::Thoughts(thoughts)));
        }
        if !self.tool_calls.is_empty() {
            let calls = std::mem::take(&mut self.tool_calls).finish();
            self.pending.push_back(Ok(ChatChunk::ToolCalls(calls)));
        }
        if let Some(guard) = self.guard.take() {
            let mut receipt = self
                .router
                .finish(
                    &mut self.request,
                    guard,
                    self.usage,
                    self.finish.take(),
                    self.response_id.take(),
                    None,
                )
                .await;
            receipt.refusal = Some(std::mem::take(&mut self.refusal)).filter(|r| !r.is_empty());
            self.pending.push_back(Ok(ChatChunk::Done(receipt)));
        }
    }

    /// The stream broke (an error event, a connection closed mid-stream, an end without a
    /// finish) or its deadline passed: the flow settles what the provider reported (else the
    /// estimate), cools the deployment down if the provider is in trouble, and ends the request
    /// with an error. Never retried: the caller may already have output.
    async fn break_off(&mut self, failure: CallFailure) {
        self.ended = true;
        let Some(guard) = self.guard.take() else {
            return;
        };
        let router = self.router.clone();
        let next = router
            .failed(&mut self.request, guard, failure, Some(self.usage))
            .await;
        let error = match next {
            router_core::flow::Next::GiveUp(why) => router.give_up(&mut self.request, why),
            // A stream that started is never retried: the flow always gives up here.
            _ => router.give_up(&mut self.request, router_core::flow::GiveUp::LastFailure),
        };
        self.pending.push_back(Err(error));
    }
}
