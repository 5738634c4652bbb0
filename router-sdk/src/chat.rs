//! `Router::chat`: one whole answer, with failover and settlement on every path.

use reqwest::header::HeaderMap;
use router_core::config::{Api, DeploymentId};
use router_core::retry::{FailureKind, OnFailure};

use crate::error::Error;
use crate::guard::Guard;
use crate::router::{Plan, Progress, Router};
use crate::transport::{self, CallFailure};
use crate::types::{Attempt, AttemptOutcome, ChatRequest, ChatResponse, Completion, Usage};
use crate::wire::{self, WireRequest, classify::FailureClass, headers};

use std::sync::atomic::Ordering;

/// How often, at most, headers that change nothing are still sent to the ledger, per deployment.
const REPORT_EVERY_MS: u64 = 5_000;

impl Router {
    /// Sends `req` to the cheapest deployment that has room, failing over and waiting as the
    /// retry policy says, and returns the whole answer.
    ///
    /// Every path settles the reservation: success with the provider's usage, failures as what
    /// the provider saw, and a dropped future through a drop guard.
    pub async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, Error> {
        let plan = self.plan(&req)?;
        let mut progress = Progress::default();
        loop {
            let guard = self.acquire(&plan, &mut progress).await?;
            match self.call(&plan, &req, guard.deployment()).await {
                Ok((completion, headers)) => {
                    return Ok(self
                        .succeed(&plan, progress, guard, completion, &headers)
                        .await);
                }
                Err(failure) => self.fail(&plan, &mut progress, guard, failure).await?,
            }
        }
    }

    async fn call(
        &self,
        plan: &Plan,
        req: &ChatRequest,
        d: DeploymentId,
    ) -> Result<(Completion, HeaderMap), CallFailure> {
        let (api, request) = self.wire(plan, req, d, false);
        let limits = self.call_limits(plan);
        let now = self.system_now();
        let call = async {
            let response = transport::send(&self.inner.http, api, request, limits, now).await?;
            let (headers, body) = transport::read(response).await?;
            transport::decode(api, headers, &body, now)
        };
        // Without streaming, the whole answer must come within the attempt's time.
        match tokio::time::timeout(limits.0, call).await {
            Ok(answer) => answer,
            Err(_) => Err(transport::no_answer_within(limits.0)),
        }
    }

    /// How long a call may wait for the provider to start answering, and how long it may take
    /// in all: the attempt timeout and the request's deadline, whichever ends first.
    pub(crate) fn call_limits(&self, plan: &Plan) -> (std::time::Duration, std::time::Duration) {
        let remaining = self.remaining(plan);
        (
            self.inner.policy.settings().attempt_timeout.min(remaining),
            remaining,
        )
    }

    /// The provider request for deployment `d`.
    pub(crate) fn wire(
        &self,
        plan: &Plan,
        req: &ChatRequest,
        d: DeploymentId,
        stream: bool,
    ) -> (Api, WireRequest) {
        let registry = &self.inner.registry;
        let deployment = registry.deployment(d);
        let provider = registry.provider(deployment.provider);
        // Plans only rank deployments whose provider has a key.
        let key = &plan.keys[&deployment.provider];
        let request = wire::build(
            provider.api,
            &provider.base_url,
            &deployment.model,
            key,
            req,
            stream,
        );
        (provider.api, request)
    }

    async fn succeed(
        &self,
        plan: &Plan,
        mut progress: Progress,
        guard: Guard,
        completion: Completion,
        headers: &HeaderMap,
    ) -> ChatResponse {
        let d = guard.deployment();
        let usage = completion.usage.unwrap_or(plan.estimate);
        guard.settle(usage).await;
        self.inner.outputs.record(d, usage.completion_tokens);
        self.observe(d, headers).await;
        progress.attempts.push(self.attempt(d, AttemptOutcome::Ok));
        let deployment = self.inner.registry.deployment(d);
        ChatResponse {
            content: completion.content,
            finish_reason: completion.finish_reason,
            provider: self.inner.registry.provider_of(d).name.clone(),
            model: deployment.model.clone(),
            usage,
            cost_usd: self.cost(d, usage),
            attempts: progress.attempts,
            waited: progress.waited,
        }
    }

    /// Cost in USD of `usage` on `d`.
    pub(crate) fn cost(&self, d: DeploymentId, usage: Usage) -> f64 {
        let price = self.inner.registry.deployment(d).price;
        price.cost(usage.prompt_tokens, usage.completion_tokens)
    }

    pub(crate) fn attempt(&self, d: DeploymentId, outcome: AttemptOutcome) -> Attempt {
        Attempt {
            provider: self.inner.registry.provider_of(d).name.clone(),
            model: self.inner.registry.deployment(d).model.clone(),
            outcome,
        }
    }

    /// Settles a failed call as what the provider saw, follows its headers, cools the deployment
    /// down, and says whether to go on (`Ok`) or what to return.
    pub(crate) async fn fail(
        &self,
        plan: &Plan,
        progress: &mut Progress,
        guard: Guard,
        mut failure: CallFailure,
    ) -> Result<(), Error> {
        let d = guard.deployment();
        let key = &plan.keys[&self.inner.registry.deployment(d).provider];
        match &mut failure {
            // The provider saw the request and refused it: no tokens.
            CallFailure::Provider { failure: f, .. } => {
                f.redact(key);
                guard.refused().await;
            }
            // An answer we cannot read, or none in time: tokens were probably spent.
            CallFailure::Decode { failure: f, .. } => {
                f.redact(key);
                guard.settle_estimate().await;
            }
            CallFailure::Timeout(_) => guard.settle_estimate().await,
            // Never reached the provider: hand everything back.
            CallFailure::Connect(_) => guard.release().await,
        }
        if let CallFailure::Provider { headers, .. } | CallFailure::Decode { headers, .. } =
            &failure
        {
            self.observe(d, headers).await;
        }
        let (kind, stated) = match &failure {
            CallFailure::Provider { failure, .. } => (failure.class.kind(), failure.retry_after),
            CallFailure::Decode { .. } => (FailureKind::Fatal, None),
            CallFailure::Timeout(_) | CallFailure::Connect(_) => (FailureKind::Transport, None),
        };
        let calls = progress.attempts.len() as u32 + 1;
        let policy = &self.inner.policy;
        let unit = self.unit();
        let cooldown = policy.cooldown(calls, kind, stated, unit);
        if let Some(c) = cooldown {
            self.inner.ledger.cooldown(d, c).await?;
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
        match policy.on_failure(calls, kind, stated, unit) {
            OnFailure::FailOver { .. } => {
                progress.last_failure = Some((d, failure));
                Ok(())
            }
            OnFailure::Return => Err(self.error(d, failure, progress)),
        }
    }

    pub(crate) fn error(
        &self,
        d: DeploymentId,
        failure: CallFailure,
        progress: &mut Progress,
    ) -> Error {
        let registry = &self.inner.registry;
        let provider = registry.provider_of(d);
        let (provider_name, model) = (provider.name.clone(), registry.deployment(d).model.clone());
        let attempts = std::mem::take(&mut progress.attempts);
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
        }
    }

    /// Sends the provider's rate-limit headers to the ledger when they may say less remains
    /// than the ledger believes, and otherwise at most every [`REPORT_EVERY_MS`] per deployment
    /// (so `llmroute quota` can show them), sparing a round trip per request.
    pub(crate) async fn observe(&self, d: DeploymentId, headers: &HeaderMap) {
        let api = self.inner.registry.provider_of(d).api;
        let observation = headers::observation(api, headers, self.system_now());
        if observation.requests.is_none() && observation.tokens.is_none() {
            return;
        }
        let limits = self.inner.registry.deployment(d).limits;
        let matters = |reported: Option<(u64, std::time::Duration)>,
                       limit: Option<std::num::NonZeroU64>| {
            reported.is_some_and(|(left, _)| left == 0 || limit.is_some_and(|l| left < l.get()))
        };
        let now = self.now_ms();
        let last = &self.inner.reported[d.0];
        let due = now.saturating_sub(last.load(Ordering::Relaxed)) >= REPORT_EVERY_MS;
        if due
            || matters(observation.requests, limits.rpm)
            || matters(observation.tokens, limits.tpm)
        {
            last.store(now, Ordering::Relaxed);
            let _ = self.inner.ledger.observe(d, observation).await;
        }
    }
}
