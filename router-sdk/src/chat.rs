//! `Router::chat`: one whole answer, the request flow driven over a whole-answer call.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use router_core::IdMap;
use router_core::config::{Api, ProviderId};
use tracing::Instrument;

use crate::drive::{Call, Request};
use crate::error::Error;
use crate::request;
use crate::router::Router;
use crate::secret::ApiKey;
use crate::transport::{self, CallFailure};
use crate::types::{ChatRequest, ChatResponse, Completion};
use crate::wire::{self, WireRequest};

/// What every provider call of one request needs: the request (a chat's, or an embedding
/// request's), its keys, its deadline.
#[derive(Debug)]
pub(crate) struct CallInput<'a, R = ChatRequest> {
    pub(crate) req: &'a R,
    pub(crate) keys: Arc<IdMap<ProviderId, ApiKey>>,
    pub(crate) headers: HeaderMap,
    pub(crate) deadline_ms: u64,
}

impl<'a, R> CallInput<'a, R> {
    /// What the calls of `request` (planned from `req`) need. The extra headers move here, the
    /// only place that reads them; the keys are shared, as a failure's message is redacted with
    /// them.
    pub(crate) fn of(request: &mut Request, req: &'a R) -> Self {
        CallInput {
            req,
            keys: request.planned.keys.clone(),
            headers: std::mem::take(&mut request.planned.headers),
            deadline_ms: request.planned.plan.deadline_ms,
        }
    }
}

impl Router {
    /// Sends `req` to the cheapest deployment that has room, failing over and waiting as the
    /// request flow says, and returns the whole answer.
    ///
    /// Every path settles the reservation: success with the provider's usage, failures as what
    /// the provider saw, and a dropped future through a drop guard.
    pub async fn chat(&self, req: ChatRequest) -> Result<ChatResponse, Error> {
        let mut request = self.begin(&request::asked(&req)?, false)?;
        let span = request.span.clone();
        let input = CallInput::of(&mut request, &req);
        async {
            let (guard, (completion, headers)) = self
                .until_answer(&mut request, |call| self.call_whole(&input, call))
                .await?;
            let mut receipt = self
                .finish(
                    &mut request,
                    guard,
                    completion.usage,
                    completion.finish_reason,
                    completion.id,
                    Some(&headers),
                )
                .await;
            receipt.refusal = completion.refusal;
            Ok(ChatResponse {
                content: completion.content,
                tool_calls: completion.tool_calls,
                thinking: completion.thinking,
                receipt,
            })
        }
        .instrument(span)
        .await
    }

    /// One whole-answer call to `d`.
    async fn call_whole(
        &self,
        input: &CallInput<'_>,
        call: Call,
    ) -> Result<(Completion, HeaderMap), CallFailure> {
        let (api, request) = self.wire(input, &call, false);
        // As in `transport`: a failed call's size is dwarfed by the round trip that made it.
        #[allow(clippy::result_large_err)]
        let decode =
            |headers, body: &[u8], now| transport::decode(api, input.req, headers, body, now);
        self.exchange(api, request, input.deadline_ms, decode).await
    }

    /// Sends `request` over `api` and reads the whole answer with `decode`, within the attempt's
    /// time and the request's deadline (`deadline_ms`): this one timer bounds the whole exchange.
    pub(crate) async fn exchange<T>(
        &self,
        api: Api,
        request: WireRequest,
        deadline_ms: u64,
        decode: impl FnOnce(HeaderMap, &[u8], SystemTime) -> Result<(T, HeaderMap), CallFailure>,
    ) -> Result<(T, HeaderMap), CallFailure> {
        let limits = self.call_limits(deadline_ms);
        let now = || self.system_now();
        let call = async {
            let response = transport::send(&self.inner.http, api, request, None, now).await?;
            let (headers, body) = transport::read(response).await?;
            decode(headers, &body, now())
        };
        // Without streaming, the whole answer must come within the attempt's time (no later than
        // the deadline).
        match tokio::time::timeout(limits.0, call).await {
            Ok(answer) => answer,
            Err(_) => Err(transport::no_answer_within(limits.0)),
        }
    }

    /// How long a call may wait for the provider to start answering, and how long it may take
    /// in all: the attempt timeout and the request's deadline, whichever ends first.
    pub(crate) fn call_limits(&self, deadline_ms: u64) -> (Duration, Duration) {
        let remaining = Duration::from_millis(deadline_ms.saturating_sub(self.now_ms()));
        (
            self.inner.policy.settings().attempt_timeout.min(remaining),
            remaining,
        )
    }

    /// The provider request for deployment `d`.
    pub(crate) fn wire(
        &self,
        input: &CallInput<'_>,
        call: &Call,
        stream: bool,
    ) -> (Api, WireRequest) {
        let d = call.deployment;
        let registry = &self.inner.registry;
        let deployment = registry.deployment(d);
        let provider = registry.provider(deployment.provider);
        let key = input.keys.get(&deployment.provider);
        let target = wire::Target {
            api: provider.api,
            endpoints: self.inner.endpoints.of(d),
            model: &deployment.model,
            output_cap: registry.output_cap(d),
        };
        let mut request = wire::build(
            &target,
            key.unwrap_or(&ApiKey::new(String::new())),
            input.req,
            &input.headers,
            stream,
        );
        call.stamp(&mut request.headers);
        (provider.api, request)
    }
}
