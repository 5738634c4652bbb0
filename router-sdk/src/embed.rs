//! `Router::embed`: embeddings through the one request flow chat uses (plan, admit, call, fail
//! over, settle, record), with an embedding model's own checks, candidates and wire call.
//!
//! An embedding request reserves its estimated input tokens and no output; it is settled with
//! the prompt tokens the provider reports (OpenAI's `usage.prompt_tokens`), or with the
//! estimate when it reports none (Gemini's `batchEmbedContents`).

use router_core::config::{DeploymentId, Registry};
use router_core::estimate::PromptSize;
use tracing::Instrument;

use crate::asked::{Asked, Wants};
use crate::chat::CallInput;
use crate::drive::Call;
use crate::embedding::{EmbedInput, EmbedRequest, EmbedResponse, NO_METADATA};
use crate::error::Error;
use crate::router::Router;
use crate::secret::ApiKey;
use crate::transport::{self, CallFailure};
use crate::wire::embed::{self, Embedded};

impl Router {
    /// Embeds every input of `req` with the cheapest embedding deployment that has room,
    /// failing over and waiting as the request flow says, as [`Router::chat`] does: the same
    /// limits, tenant budgets, settlement and usage record (its completion tokens 0).
    pub async fn embed(&self, req: EmbedRequest) -> Result<EmbedResponse, Error> {
        let mut request = self.begin(&asked(&req)?, false)?;
        let span = request.span.clone();
        let input = CallInput::of(&mut request, &req);
        async {
            let (guard, (embedded, headers)) = self
                .until_answer(&mut request, |call| self.call_embed(&input, call))
                .await?;
            let receipt = self
                .finish(
                    &mut request,
                    guard,
                    embedded.usage,
                    None,
                    None,
                    Some(&headers),
                )
                .await;
            Ok(EmbedResponse {
                embeddings: embedded.vectors,
                receipt,
            })
        }
        .instrument(span)
        .await
    }

    /// One embeddings call to `d`.
    async fn call_embed(
        &self,
        input: &CallInput<'_, EmbedRequest>,
        call: Call,
    ) -> Result<(Embedded, reqwest::header::HeaderMap), CallFailure> {
        let d = call.deployment;
        let registry = &self.inner.registry;
        let deployment = registry.deployment(d);
        let api = registry.provider(deployment.provider).api;
        let target = embed::Target {
            api,
            endpoint: &self.inner.endpoints.of(d)[0],
            model: &deployment.model,
        };
        let key = input.keys.get(&deployment.provider);
        let empty = ApiKey::new(String::new());
        let mut request = embed::build(&target, key.unwrap_or(&empty), input.req, &input.headers);
        call.stamp(&mut request.headers);
        let inputs = input.req.input.len();
        // As in `transport`: a failed call's size is dwarfed by the round trip that made it.
        #[allow(clippy::result_large_err)]
        let decode = |headers, body: &[u8], now| {
            let parse = |body: &[u8]| embed::parse_response(api, body, inputs);
            transport::decode_with(api, headers, body, now, parse)
        };
        self.exchange(api, request, input.deadline_ms, decode).await
    }
}

/// An embedding request, checked, as the flow sees it.
fn asked(req: &EmbedRequest) -> Result<Asked<'_>, Error> {
    check(req)?;
    let mut prompt = PromptSize::default();
    for input in &req.input {
        prompt = match input {
            EmbedInput::Text(text) => PromptSize {
                chars: prompt.chars + text.chars().count() as u64,
                ..prompt
            },
            EmbedInput::Tokens(ids) => prompt.with_tokens(ids.len() as u64),
        };
    }
    let token_ids = matches!(req.input.first(), Some(EmbedInput::Tokens(_)));
    Ok(Asked {
        model: req.model.as_deref(),
        wants: Wants::Embeddings {
            token_ids,
            dimensions: req.dimensions,
        },
        prompt,
        providers: &req.providers,
        tenant: req.tenant.as_deref(),
        key_id: req.key_id.as_deref(),
        key_account: req.key_account.as_ref(),
        request_id: req.request_id.as_deref(),
        priority: req.priority,
        deadline: req.deadline,
        headers: &req.headers,
        trace: req.trace,
        metadata: &NO_METADATA,
        prefixes: None,
    })
}

/// Checks what no provider would accept: no input, an empty one, texts mixed with token ids,
/// zero dimensions.
fn check(req: &EmbedRequest) -> Result<(), Error> {
    let invalid = |msg: String| Err(Error::InvalidRequest(msg));
    if req.input.is_empty() {
        return invalid("input: nothing to embed; give at least one text".into());
    }
    let empty = req.input.iter().position(|i| match i {
        EmbedInput::Text(text) => text.is_empty(),
        EmbedInput::Tokens(ids) => ids.is_empty(),
    });
    if let Some(i) = empty {
        return invalid(format!("input[{i}] is empty; remove it or give it text"));
    }
    let tokens = |i: &EmbedInput| matches!(i, EmbedInput::Tokens(_));
    if req.input.iter().any(tokens) && !req.input.iter().all(tokens) {
        return invalid(
            "input mixes texts and token ids; send all texts, or all token ids, in one request"
                .into(),
        );
    }
    if req.dimensions == Some(0) {
        return invalid("dimensions: 0 is no size; ask for at least 1, or leave it out".into());
    }
    Ok(())
}

/// `allowed` embedding deployments left after what the request needs of them: a wire format
/// that takes token ids (when it sends them), vectors at least `dimensions` long (when the model
/// says how long its are). An error names what none of them can do.
pub(crate) fn servable(
    registry: &Registry,
    token_ids: bool,
    dimensions: Option<u32>,
    allowed: Vec<DeploymentId>,
) -> Result<Vec<DeploymentId>, Error> {
    let takes_ids = |d: DeploymentId| {
        let api = registry.provider_of(d).api;
        embed::format(api).is_some_and(|f| f.takes_token_ids())
    };
    let long_enough = |d: DeploymentId| match (dimensions, registry.deployment(d).dimensions) {
        (Some(asked), Some(has)) => asked <= has,
        _ => true,
    };
    let names = |ds: &[DeploymentId]| {
        let names: Vec<String> = ds.iter().map(|&d| registry.deployment_name(d)).collect();
        names.join(", ")
    };
    let (able, unable): (Vec<_>, Vec<_>) = allowed
        .into_iter()
        .partition(|&d| !token_ids || takes_ids(d));
    if able.is_empty() {
        return Err(Error::InvalidRequest(format!(
            "input: token ids go only to OpenAI-compatible embedding models, and {} takes text \
             alone; send the text instead",
            names(&unable)
        )));
    }
    let (able, short): (Vec<_>, Vec<_>) = able.into_iter().partition(|&d| long_enough(d));
    if able.is_empty() {
        let asked = dimensions.unwrap_or_default();
        return Err(Error::InvalidRequest(format!(
            "dimensions: {asked} is more than {} makes (`dimensions` in the configuration); ask \
             for fewer",
            names(&short)
        )));
    }
    Ok(able)
}
