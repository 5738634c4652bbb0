//! Embeddings on the wire: OpenAI-compatible `POST {base_url}/embeddings`, and Gemini's
//! `POST {base_url}/models/{model}:batchEmbedContents`. Pure translators, as the chat formats
//! are: each [`EmbedFormat`] writes an [`EmbedRequest`]'s body and reads the vectors (and the
//! usage, where the provider reports it) of an answer. The key, the headers and the error
//! shapes are the provider's chat format's own ([`for_api`](super::for_api)): one provider, one
//! way to authenticate and to fail. Anthropic has no embeddings API: no format.

mod gemini;
mod openai;

use reqwest::Url;
use reqwest::header::HeaderMap;
use router_core::config::Api;
use serde_json::Value;

use super::{DecodeError, WireRequest, excerpt, headers, plausible};
use crate::embedding::EmbedRequest;
use crate::secret::ApiKey;
use crate::types::Usage;

/// One provider's embeddings wire format.
pub(crate) trait EmbedFormat: Send + Sync {
    /// The endpoint of `model` at `base` (no trailing `/`).
    fn url(&self, base: &str, model: &str) -> String;
    /// Whether it takes token ids as inputs (else texts only).
    fn takes_token_ids(&self) -> bool;
    /// The JSON body of `req` for `model`.
    fn body(&self, model: &str, req: &EmbedRequest) -> Value;
    /// Reads a 2xx body answering `inputs` inputs; `Err` says what was wrong with it.
    fn parse(&self, body: &[u8], inputs: usize) -> Result<Embedded, String>;
}

/// The embeddings format of `api`, if it has one.
pub(crate) fn format(api: Api) -> Option<&'static dyn EmbedFormat> {
    match api {
        Api::OpenAi => Some(&openai::OpenAi),
        Api::Gemini => Some(&gemini::Gemini),
        Api::Anthropic => None,
    }
}

/// What an answer holds: one vector per input, in input order, and the usage when reported.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Embedded {
    pub(crate) vectors: Vec<Vec<f32>>,
    /// Prompt tokens alone (embeddings have no completion); `None`: not reported (Gemini).
    pub(crate) usage: Option<Usage>,
}

/// The embeddings endpoint of `model` at `base` (a trailing `/` is ignored) over `api`.
pub(crate) fn endpoint(api: Api, base: &str, model: &str) -> Result<Url, String> {
    let format =
        format(api).ok_or_else(|| format!("the {} API has no embeddings", api.as_str()))?;
    let url = format.url(base.trim_end_matches('/'), model);
    Url::parse(&url).map_err(|e| e.to_string())
}

/// Where an embeddings request goes: the deployment's wire format, endpoint and model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) api: Api,
    pub(crate) endpoint: &'a Url,
    pub(crate) model: &'a str,
}

/// Builds the provider request for `req` to `target`, with the headers a chat call to it has.
pub(crate) fn build(
    target: &Target<'_>,
    key: &ApiKey,
    req: &EmbedRequest,
    extra: &HeaderMap,
) -> WireRequest {
    let body = format(target.api).map_or(Value::Null, |f| f.body(target.model, req));
    WireRequest {
        url: target.endpoint.clone(),
        headers: headers(target.api, key, extra),
        body,
    }
}

/// Reads a 2xx answer of `api` to `inputs` inputs: one vector per input, none empty, and
/// plausible usage; anything else is as malformed as a body that is not JSON.
pub(crate) fn parse_response(
    api: Api,
    body: &[u8],
    inputs: usize,
) -> Result<Embedded, DecodeError> {
    let parsed = format(api)
        .ok_or_else(|| "no embeddings format".to_owned())
        .and_then(|f| f.parse(body, inputs))
        .and_then(|mut embedded| {
            if embedded.vectors.len() != inputs {
                return Err(format!(
                    "{} embeddings for {inputs} inputs",
                    embedded.vectors.len()
                ));
            }
            if let Some(i) = embedded.vectors.iter().position(Vec::is_empty) {
                return Err(format!("embedding {i} is empty"));
            }
            embedded.usage = embedded.usage.map(plausible).transpose()?;
            Ok(embedded)
        });
    parsed.map_err(|reason| DecodeError {
        api: api.as_str(),
        reason,
        excerpt: excerpt(body),
    })
}

#[cfg(test)]
mod tests;
