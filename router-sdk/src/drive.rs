//! The request flow driven over real I/O, shared by `chat`, `chat_stream` and `embed`: admit through the
//! ledger, sleep, call, settle, cool down, give up, exactly as [`Flow`] decides. Nothing here
//! decides what a request does next; it only performs it and says so in traces.

use std::future::Future;

use futures_util::FutureExt;
use reqwest::header::{HeaderMap, HeaderValue};
use router_core::config::DeploymentId;
use router_core::estimate::Accounting;
use router_core::flow::{self, Flow, GiveUp, Next, Reached, Settle};
use router_core::ledger::{Admission, Denial, Observation};
use tracing::{Instrument, Span};

use crate::account::{Account, Opening};
use crate::asked::Asked;
use crate::error::Error;
use crate::guard::Guard;
use crate::line::InLine;
use crate::router::{Planned, Router};
use crate::trace::{SpanId, TraceParent};
use crate::transport::CallFailure;
use crate::types::{Attempt, AttemptOutcome, FinishReason, Receipt, Usage};
use crate::wire::classify::FailureClass;
use crate::wire::headers;

/// One request on its way: its plan, its flow, and what happened so far.
#[derive(Debug)]
pub(crate) struct Request {
    /// The caller's id for the request, or one drawn at random.
    pub(crate) id: String,
    /// Time spent in provider calls so far (a stream's: until it opened).
    pub(crate) upstream: std::time::Duration,
    pub(crate) planned: Planned,
    pub(crate) flow: Flow,
    attempts: Vec<Attempt>,
    last_failure: Option<(DeploymentId, CallFailure)>,
    last_denial: Option<Denial>,
    /// The request's span: request id, tenant, model, priority, routing rule, metadata.
    pub(crate) span: Span,
    /// Its usage record, written when it ends.
    pub(crate) account: Account,
    /// Its ticket in the deployments' lines.
    line: InLine,
    /// Its place in the caller's trace.
    trace: Option<TraceParent>,
    /// The provider call under way: when it started, and its span id when traced.
    calling: Option<(std::time::SystemTime, std::time::Instant, Option<SpanId>)>,
}

/// One provider call the flow makes: to which deployment, and the `traceparent` it sends when
/// its request is traced.
pub(crate) struct Call {
    pub(crate) deployment: DeploymentId,
    traceparent: Option<HeaderValue>,
}

impl Call {
    /// Puts the call's `traceparent` in `headers`, over any the caller set.
    pub(crate) fn stamp(&self, headers: &mut HeaderMap) {
        if let Some(value) = &self.traceparent {
            headers.insert("traceparent", value.clone());
        }
    }
}

impl Request {
    /// How many stood before it when it first joined a line, for receipts and headers.
    pub(crate) fn queue_position(&self) -> Option<u32> {
        let entered = self.line.entered_at();
        entered.map(|p| u32::try_from(p).unwrap_or(u32::MAX))
    }
}

impl Router {
    /// Plans `asked` (`stream`: for `chat_stream`) and starts its flow, its span and its account.
    pub(crate) fn begin(&self, asked: &Asked<'_>, stream: bool) -> Result<Request, Error> {
        let planned = self.plan(asked)?;
        let id = match asked.request_id {
            Some(id) => id.to_owned(),
            None => format!("{:016x}", self.draw_u64()),
        };
        let span = tracing::info_span!(
            "request",
            request_id = %id,
            tenant = planned.plan.tenant().unwrap_or(router_core::config::NO_TENANT),
            model = %planned.model,
            priority = planned.plan.priority.as_str(),
            // Formatted only when the span is recorded; absent for a request that was not routed.
            route = planned.route.as_ref().map(tracing::field::display),
            metadata = ?asked.metadata,
        );
        // Without a recorder nothing of the record is gathered: no work on the request's path.
        let account = Account::open(self.inner.recorder.clone(), || Opening {
            id: format!("{:016x}{:016x}", self.draw_u64(), self.draw_u64()),
            request_id: id.clone(),
            // The tenant named, whether or not a tier tracks it.
            tenant: asked.tenant.map(str::to_owned),
            key_id: asked.key_id.map(str::to_owned),
            // What was asked for: a routed alias (the default one too), not its choice.
            model_asked: asked.model.map_or_else(
                || {
                    planned
                        .route
                        .as_ref()
                        .map_or_else(|| planned.model.clone(), |m| m.alias.clone())
                },
                str::to_owned,
            ),
            route: planned
                .route
                .as_ref()
                .map(|m| format!("routes.{}[{}]", m.alias, m.index)),
            priority: planned.plan.priority.as_str(),
            stream,
            start_ms: self.now_ms(),
        });
        let need = &planned.plan.need;
        let line = InLine::new(need.line.map_or(need.id, |t| t.id));
        Ok(Request {
            account,
            id,
            line,
            flow: Flow::new(self.inner.policy, &planned.plan),
            planned,
            attempts: Vec::new(),
            upstream: std::time::Duration::ZERO,
            last_failure: None,
            last_denial: None,
            span,
            trace: asked.trace,
            calling: None,
        })
    }

    /// Runs the flow until a call answers: admits, waits, calls through `call`, and on each
    /// failure settles, cools down and fails over as the flow says. Returns the answering call's
    /// guard and output, or the error the request ends with.
    pub(crate) async fn until_answer<T, F, Fut>(
        &self,
        request: &mut Request,
        mut call: F,
    ) -> Result<(Guard, T), Error>
    where
        F: FnMut(Call) -> Fut,
        Fut: Future<Output = Result<T, CallFailure>>,
    {
        let mut guard: Option<Guard> = None;
        let mut next = request.flow.start();
        loop {
            next = match next {
                Next::Admit(candidates) => self.admit(request, &candidates, &mut guard).await?,
                Next::Wait(wait) => {
                    tracing::info!(
                        wait_ms = wait.as_millis() as u64,
                        in_line = request.line.joined(),
                        "waiting for capacity"
                    );
                    let sleep = self.inner.sleeper.sleep(wait);
                    if request.line.joined() {
                        // The store's wake-up, or the wait's end, whichever comes first.
                        let woken = std::pin::pin!(request.line.woken());
                        futures_util::future::select(sleep, woken).await;
                    } else {
                        sleep.await;
                    }
                    let next = request.flow.woke(self.now_ms());
                    request.account.waited(request.flow.waited());
                    next
                }
                Next::Call(d) => match guard.take() {
                    Some(held) => {
                        let registry = &self.inner.registry;
                        request.account.calling(
                            &registry.provider_of(d).name,
                            &registry.deployment(d).model,
                            held.estimate_micros(),
                            held.estimate_usage(),
                        );
                        let span = self.attempt_span(request, d);
                        let called = std::time::Instant::now();
                        let this_call = self.calling(request, d, called);
                        let result = call(this_call).instrument(span.clone()).await;
                        request.upstream += called.elapsed();
                        match result {
                            Ok(output) => return Ok((held, output)),
                            // Boxed behind `dyn`: the failure path's state and code stay out of
                            // every request's future and out of the code a request runs through.
                            Err(failure) => {
                                let failed = self.failed(request, held, failure, None);
                                failed.instrument(span).boxed().await
                            }
                        }
                    }
                    // The flow calls only what was just admitted.
                    None => request.flow.start(),
                },
                Next::Finish => request.flow.start(),
                Next::GiveUp(why) => return Err(self.give_up(request, why)),
            };
        }
    }

    async fn admit(
        &self,
        request: &mut Request,
        candidates: &[DeploymentId],
        guard: &mut Option<Guard>,
    ) -> Result<Next, Error> {
        let mut need = request.planned.plan.need_for(candidates);
        if let Some(ticket) = need.line.as_mut() {
            ticket.queued = request.line.joined();
        }
        let admission = match self.inner.ledger.admit(&need, candidates).await {
            Ok(admission) => admission,
            Err(e) => {
                let e = Error::from(e);
                request.account.close(Some(e.class()));
                return Err(e);
            }
        };
        match admission {
            Admission::Granted(r) => {
                request.line.admitted();
                request.planned.plan.next_reservation();
                let registry = &self.inner.registry;
                let price = registry.deployment(r.deployment).price.clone();
                let accounting = Accounting::of(registry.provider_of(r.deployment).api);
                let d = r.deployment;
                let settler = self.inner.settler.clone();
                let held = Guard::new(settler, r, price, accounting, need.slot_ttl);
                *guard = Some(held);
                Ok(request.flow.admitted(d))
            }
            Admission::Denied(denial) => {
                tracing::debug!(refusals = %self.describe(&denial), place = denial.place, "admission denied");
                let ranked = &request.planned.plan.ranked;
                request
                    .line
                    .denied(denial.place, &self.inner.ledger, ranked);
                if let Some(position) = request.line.entered_at() {
                    request.account.queued(position);
                }
                let next = request.flow.denied(&denial, self.now_ms(), self.unit());
                request.last_denial = Some(denial);
                Ok(next)
            }
        }
    }

    /// Starts the record of a call to `d`, and draws its span id when the request is traced.
    fn calling(&self, request: &mut Request, d: DeploymentId, at: std::time::Instant) -> Call {
        let span_id = request.trace.map(|_| self.draw_u64().max(1).to_be_bytes());
        request.calling = Some((self.system_now(), at, span_id));
        let traceparent = request
            .trace
            .zip(span_id)
            .and_then(|(trace, span)| HeaderValue::from_str(&trace.header_for(span)).ok());
        Call {
            deployment: d,
            traceparent,
        }
    }

    fn attempt_span(&self, request: &Request, d: DeploymentId) -> Span {
        tracing::info_span!(
            parent: &request.span,
            "attempt",
            attempt = request.flow.calls(),
            deployment = %self.inner.registry.deployment_name(d),
            outcome = tracing::field::Empty,
            class = tracing::field::Empty,
            cooldown_ms = tracing::field::Empty,
        )
    }

    /// A call failed: settle it as the flow says (`reported`: the usage a broken stream reported),
    /// follow the provider's headers, put the cooldown (a ledger error there is logged and the
    /// failover goes on), and record the attempt. Returns what the flow does next.
    pub(crate) async fn failed(
        &self,
        request: &mut Request,
        guard: Guard,
        mut failure: CallFailure,
        reported: Option<Option<Usage>>,
    ) -> Next {
        let d = guard.deployment();
        // Before anything reads it: the log, the attempts, the error, the caller.
        failure.mask(&self.masker());
        let in_stream = reported.is_some();
        let event = flow_failure(&failure, in_stream);
        let after = request.flow.failed(event, self.now_ms(), self.unit());
        let observed = match &failure {
            CallFailure::Provider { headers, .. } | CallFailure::Decode { headers, .. } => {
                self.report(d, headers)
            }
            CallFailure::Timeout(_) | CallFailure::Connect(_) | CallFailure::Broken(..) => None,
        };
        let guard = guard.reporting(observed);
        // The record first: a caller dropping the request while the settlement is awaited
        // leaves it agreeing with what the guard's drop settles.
        let reported = reported.flatten();
        let (charged, usage) = match (after.settle, reported) {
            (Settle::Release | Settle::Refused, _) => (0, None),
            (Settle::Reported, Some(usage)) => (guard.cost_of(&usage), Some(usage)),
            (Settle::Estimate, _) | (Settle::Reported, None) => {
                (guard.estimate_micros(), Some(guard.estimate_usage()))
            }
        };
        request
            .account
            .call_failed(failure.kind_name(), usage.as_ref(), charged);
        match (after.settle, reported) {
            (Settle::Release, _) => guard.release().await,
            (Settle::Refused, _) => guard.refused().await,
            (Settle::Reported, Some(usage)) => guard.settle(usage).await,
            (Settle::Estimate, _) | (Settle::Reported, None) => guard.settle_estimate().await,
        }
        if let Some(c) = after.cooldown {
            if let Err(e) = self.inner.ledger.cooldown(c.deployment, c.duration).await {
                tracing::warn!(error = %e, "could not put the cooldown; failing over anyway");
            }
            if let Some(stated) = c.clamped_from {
                tracing::info!(
                    stated_ms = stated.as_millis() as u64,
                    cooldown_ms = c.duration.as_millis() as u64,
                    "provider's stated wait clamped at retry.max_cooldown_secs"
                );
            }
        }
        let span = Span::current();
        span.record("outcome", "failed");
        span.record("class", failure.kind_name());
        if let Some(c) = after.cooldown {
            span.record("cooldown_ms", c.duration.as_millis() as u64);
        }
        tracing::info!(
            class = failure.kind_name(),
            status = failure.status(),
            message = failure.message(),
            "call failed"
        );
        request.attempts.push(self.attempt(
            request,
            d,
            AttemptOutcome::Failed {
                kind: failure.kind_name().to_owned(),
                status: failure.status(),
                message: failure.message().to_owned(),
                cooldown: after.cooldown.map(|c| c.duration),
                clamped_from: after.cooldown.and_then(|c| c.clamped_from),
            },
        ));
        request.last_failure = Some((d, failure));
        after.next
    }

    /// The provider answered in full: settle with its usage (else the estimate), learn the
    /// completion size, follow its headers, and write the receipt.
    pub(crate) async fn finish(
        &self,
        request: &mut Request,
        guard: Guard,
        usage: Option<Usage>,
        finish_reason: Option<FinishReason>,
        response_id: Option<String>,
        headers: Option<&HeaderMap>,
    ) -> Receipt {
        let d = guard.deployment();
        let _ = request.flow.answered();
        let estimate = request.planned.plan.estimate_of(d);
        let usage = match usage {
            Some(usage) => {
                let prompt = request.planned.plan.prompt;
                let (input, output) = (usage.prompt_tokens, usage.completion_tokens);
                self.inner.estimator.record(d, prompt, input, output);
                self.remember_cached(d, request, usage.cached_prompt_tokens);
                usage
            }
            None => Usage::new(estimate.prompt_tokens, estimate.completion_tokens),
        };
        let observed = headers.and_then(|h| self.report(d, h));
        let guard = guard.reporting(observed);
        let tenant_window = guard.tenant_window();
        // The record first, as for a failed call.
        request.account.answered(&usage, guard.cost_of(&usage));
        guard.settle(usage).await;
        request.account.waited(request.flow.waited());
        request.account.close(None);
        tracing::info!(
            deployment = %self.inner.registry.deployment_name(d),
            prompt_tokens = usage.prompt_tokens,
            completion_tokens = usage.completion_tokens,
            "answered"
        );
        request
            .attempts
            .push(self.attempt(request, d, AttemptOutcome::Ok));
        let registry = &self.inner.registry;
        Receipt {
            request_id: request.id.clone(),
            response_id,
            finish_reason,
            refusal: None,
            provider: registry.provider_of(d).name.clone(),
            model: registry.deployment(d).model.clone(),
            usage,
            cost_usd: usage.cost(&registry.deployment(d).price),
            attempts: std::mem::take(&mut request.attempts),
            waited: request.flow.waited(),
            queue_position: request.queue_position(),
            upstream: request.upstream,
            tenant_window,
        }
    }

    /// Records that `d`'s provider read `cached` prompt tokens from its cache for the request's
    /// prompt, for the next request that starts with it.
    fn remember_cached(&self, d: DeploymentId, request: &Request, cached: u64) {
        if let Some(prefixes) = &request.planned.prefixes {
            let now = self.now_ms();
            let mut cache = self
                .inner
                .prompt_cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cache.record(d, prefixes, cached, now);
        }
    }

    /// The error a request gives up with.
    pub(crate) fn give_up(&self, request: &mut Request, why: GiveUp) -> Error {
        let attempts = std::mem::take(&mut request.attempts);
        let detail = request
            .last_denial
            .as_ref()
            .map_or_else(String::new, |d| self.describe(d));
        tracing::info!(why = ?why, "request gave up");
        let error = match (why, request.last_failure.take()) {
            (GiveUp::Budget { resets_in }, _) => Error::BudgetExhausted {
                tenant: request.planned.plan.tenant().unwrap_or_default().to_owned(),
                detail,
                resets_in,
                attempts,
            },
            (GiveUp::LastFailure, Some((d, failure))) => self.error(d, failure, attempts),
            (GiveUp::LastFailure, None) => Error::NoCapacity {
                never: false,
                retry_after: None,
                detail,
                attempts,
            },
            (GiveUp::NoCapacity { never, retry_after }, _) => Error::NoCapacity {
                never,
                retry_after,
                detail,
                attempts,
            },
        };
        request.account.waited(request.flow.waited());
        request.account.close(Some(error.class()));
        error
    }

    fn error(&self, d: DeploymentId, failure: CallFailure, attempts: Vec<Attempt>) -> Error {
        let registry = &self.inner.registry;
        let provider = registry.provider_of(d);
        let (provider_name, model) = (provider.name.clone(), registry.deployment(d).model.clone());
        match failure {
            CallFailure::Provider { failure, .. } | CallFailure::Decode { failure, .. } => {
                let message = if failure.class == FailureClass::Auth {
                    format!(
                        "check the key in {}: {}",
                        provider.api_key_env, failure.message
                    )
                } else {
                    failure.message
                };
                Error::Provider {
                    provider: provider_name,
                    model,
                    class: failure.class,
                    status: failure.status,
                    code: failure.code,
                    message,
                    retry_after: failure.retry_after,
                    attempts,
                }
            }
            CallFailure::Timeout(message) => Error::Transport {
                provider: provider_name,
                model,
                timeout: true,
                message,
                attempts,
            },
            CallFailure::Connect(message) => Error::Transport {
                provider: provider_name,
                model,
                timeout: false,
                message,
                attempts,
            },
            CallFailure::Broken(how, message) => Error::StreamBroken {
                provider: provider_name,
                model,
                how,
                message,
                attempts,
            },
        }
    }

    /// The record of the call to `d` under way, ended with `outcome` now.
    fn attempt(&self, request: &Request, d: DeploymentId, outcome: AttemptOutcome) -> Attempt {
        let now = self.system_now();
        let (started, took, span_id) = match request.calling {
            Some((started, at, span_id)) => (started, at.elapsed(), span_id),
            None => (now, std::time::Duration::ZERO, None),
        };
        Attempt {
            provider: self.inner.registry.provider_of(d).name.clone(),
            model: self.inner.registry.deployment(d).model.clone(),
            outcome,
            started,
            took,
            span_id,
        }
    }

    /// The provider's rate-limit headers on `d` as a report for the ledger, when
    /// [`flow::Reports`] says they are worth sending (they go with the settlement).
    pub(crate) fn report(&self, d: DeploymentId, headers: &HeaderMap) -> Option<Observation> {
        let api = self.inner.registry.provider_of(d).api;
        let observation = headers::observation(api, headers, self.system_now());
        let limits = self.inner.registry.deployment(d).limits;
        self.inner
            .reports
            .to_send(d, observation, limits, self.now_ms())
    }
}

/// What the flow needs to know of a failed call. `in_stream`: the stream had started.
fn flow_failure(failure: &CallFailure, in_stream: bool) -> flow::Failure {
    let (kind, stated, reached) = match failure {
        CallFailure::Provider { failure, .. } => {
            (failure.class.kind(), failure.retry_after, Reached::Refusal)
        }
        CallFailure::Decode { failure, .. } => {
            (failure.class.kind(), failure.retry_after, Reached::Unknown)
        }
        CallFailure::Timeout(_) | CallFailure::Broken(..) => (
            router_core::retry::FailureKind::Transport,
            None,
            Reached::Unknown,
        ),
        CallFailure::Connect(_) => (
            router_core::retry::FailureKind::Transport,
            None,
            Reached::Nothing,
        ),
    };
    flow::Failure {
        kind,
        stated,
        reached: if in_stream { Reached::Partial } else { reached },
        output_sent: in_stream,
    }
}

/// `chat`, `chat_stream` and `embed` futures can be spawned: this fails to compile if they stop
/// being `Send`.
#[cfg(test)]
#[allow(dead_code)]
fn chat_futures_are_send(router: &Router) {
    use crate::types::ChatRequest;
    fn send<T: Send>(_: T) {}
    send(router.chat(ChatRequest::new("hi")));
    send(router.chat_stream(ChatRequest::new("hi")));
    send(router.embed(crate::EmbedRequest::new(["hi"])));
}
