//! The wire layer: pure translators between the neutral types and each provider's JSON.
//!
//! Nothing here does I/O. Each wire format (OpenAI-compatible, Anthropic, Gemini) is one type
//! implementing [`WireFormat`]: its URL and auth header, request body, whole response, stream
//! events, error body and rate-limit headers. [`for_api`] picks it, the one place that asks which
//! API a deployment speaks. Around it, provider-neutral entry points: [`build`] turns a
//! [`ChatRequest`] into a [`WireRequest`]; [`parse_response`] reads a complete response; a
//! [`StreamDecoder`] turns SSE events into [`StreamEvent`](crate::types::StreamEvent)s;
//! [`error`] reads an error and [`classify`](classify::classify) (pure, no provider knowledge)
//! says what it means; [`headers`] parses rate-limit and retry headers. Provider JSON shapes
//! stay private to their module. Embeddings have translators of their own ([`embed`]), which share
//! the chat formats' keys, headers and errors.

mod anthropic;
pub(crate) mod classify;
pub(crate) mod embed;
pub(crate) mod error;
mod gemini;
pub(crate) mod headers;
mod openai;
mod stream;
#[cfg(test)]
pub(crate) mod test_support;

use std::time::{Duration, SystemTime};

use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use router_core::config::{Api, DeploymentId, ModelKind, RESERVED_HEADERS, Registry, redact_url};
use router_core::ledger::Observation;
use serde::{Deserialize, Deserializer};

use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Usage};
use classify::{ErrorBody, Failure};
pub(crate) use stream::{EventDecoder, StreamDecoder};

/// The most tokens a provider may report for one count (prompt or completion) of one request:
/// 100 million. The largest context windows hold a few million tokens; a count above this is a
/// broken or hostile server, and settling it would wipe budgets or wrap counters, so the answer
/// is malformed ([`Decode`](classify::FailureClass::Decode)).
pub(crate) const MAX_PLAUSIBLE_TOKENS: u64 = 100_000_000;

/// Longest body excerpt kept in an error.
const EXCERPT_MAX: usize = 300;

/// One provider wire format: everything that differs between providers, and nothing else.
pub(crate) trait WireFormat: Send + Sync {
    /// The endpoint for `model` at `base` (no trailing `/`).
    fn url(&self, base: &str, model: &str, stream: bool) -> String;
    /// The free endpoint that says whether `model` exists at `base` for a key (no prompt is
    /// sent), and how its answer says so.
    fn model_url(&self, base: &str, model: &str) -> (String, Lookup);
    /// The auth header carrying `key`, marked sensitive; `None` if the key cannot be a header.
    fn auth(&self, key: &ApiKey) -> Option<(HeaderName, HeaderValue)>;
    /// Fixed headers the API requires besides content type and auth.
    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// The JSON body of `req` for `target`.
    fn body(&self, target: &Target<'_>, req: &ChatRequest, stream: bool) -> serde_json::Value;
    /// Reads a complete 2xx body answering `req`; `Err` says what was wrong with it.
    fn parse_response(&self, req: &ChatRequest, body: &[u8]) -> Result<Completion, String>;
    /// A decoder for one streamed response to `req`.
    fn stream_decoder(&self, req: &ChatRequest) -> Box<dyn EventDecoder>;
    /// Reads an error body, if it is one of the API's error shapes.
    fn error_body(&self, body: &[u8]) -> Option<ErrorBody>;
    /// What the rate-limit headers say; nothing by default.
    fn observation(&self, _headers: &HeaderMap, _now: SystemTime) -> Observation {
        Observation::default()
    }
    /// The longest reset among dimensions the headers report exhausted; none by default.
    fn exhausted_reset(&self, _headers: &HeaderMap, _now: SystemTime) -> Option<Duration> {
        None
    }
}

/// How a model endpoint's 200 answer says the model exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The endpoint is the model's own: a 200 is the model.
    Itself,
    /// The endpoint lists models: the model is listed in `data[].id`.
    Listed,
}

/// The wire format of `api`: the one place that asks which provider this is.
pub(crate) fn for_api(api: Api) -> &'static dyn WireFormat {
    match api {
        Api::OpenAi => &openai::OpenAi,
        Api::Anthropic => &anthropic::Anthropic,
        Api::Gemini => &gemini::Gemini,
    }
}

/// An HTTP request ready to send. Its `Debug` never shows the key: the auth header is marked
/// sensitive, and the key is never in the URL or the body.
#[derive(Debug, Clone)]
pub(crate) struct WireRequest {
    /// Full URL.
    pub(crate) url: Url,
    /// Headers, auth included (sensitive).
    pub(crate) headers: HeaderMap,
    /// JSON body.
    pub(crate) body: serde_json::Value,
}

/// Where a request goes: the deployment's wire format, base URL and model, and the most
/// completion tokens its limiter is counted for when the request sets no `max_tokens`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The wire format.
    pub(crate) api: Api,
    /// The deployment's endpoints, `[answer, stream]` (see [`Endpoints`]).
    pub(crate) endpoints: &'a [Url; 2],
    /// The model as the provider names it.
    pub(crate) model: &'a str,
    /// The model's output cap (`max_output_tokens`, else `defaults.max_output_tokens`): what
    /// admission reserved for a request without `max_tokens`. A format that must send a
    /// `max_tokens` (Anthropic) sends this, so the provider never counts more than the ledger
    /// reserved.
    pub(crate) output_cap: u64,
}

/// Builds the provider request for `req` to `target`.
///
/// A key that cannot be a header value (control characters) is left out: the provider then
/// answers 401, which is classified as [`Auth`](classify::FailureClass::Auth).
pub(crate) fn build(
    target: &Target<'_>,
    key: &ApiKey,
    req: &ChatRequest,
    extra: &HeaderMap,
    stream: bool,
) -> WireRequest {
    let format = for_api(target.api);
    let headers = headers(target.api, key, extra);
    let mut body = format.body(target, req, stream);
    // The caller's extra fields go in as given, and win: they are the way to reach a server's
    // own options. Gemini's generation config, where its options live, is merged into the one
    // llmroute wrote, key by key (`topK` keeps the temperature beside it). Fields that decide
    // what admission reserved never get here (`request::check` refuses them).
    if let Some(fields) = body.as_object_mut() {
        for (name, value) in &req.extra_body {
            // Either spelling merges into the one llmroute wrote (two would be one field twice).
            let config = matches!(name.as_str(), "generationConfig" | "generation_config");
            let ours = if config { "generationConfig" } else { name };
            match (fields.get_mut(ours), value) {
                (Some(serde_json::Value::Object(ours)), serde_json::Value::Object(theirs))
                    if config =>
                {
                    for (key, value) in theirs {
                        ours.insert(key.clone(), value.clone());
                    }
                }
                _ => {
                    fields.insert(name.clone(), value.clone());
                }
            }
        }
    }
    WireRequest {
        url: target.endpoints[usize::from(stream)].clone(),
        headers,
        body,
    }
}

/// The request that counts `req`'s prompt tokens on `target`, for a format whose provider has a
/// counting endpoint (Anthropic's `/v1/messages/count_tokens`, which takes the prompt's fields of
/// a Messages body and refuses the others); `None` for the others.
pub(crate) fn count_request(
    target: &Target<'_>,
    key: &ApiKey,
    req: &ChatRequest,
    extra: &HeaderMap,
) -> Option<WireRequest> {
    if target.api != Api::Anthropic {
        return None;
    }
    let mut request = build(target, key, req, extra, false);
    let path = format!("{}/count_tokens", request.url.path());
    request.url.set_path(&path);
    if let Some(fields) = request.body.as_object_mut() {
        let prompt = [
            "model",
            "messages",
            "system",
            "tools",
            "tool_choice",
            "thinking",
        ];
        fields.retain(|name, _| prompt.contains(&name.as_str()));
    }
    Some(request)
}

/// The headers of a call to `api`: the caller's `extra` ones, then the format's own and the
/// key, which win (validation already refuses the names that carry a key or frame the body).
pub(crate) fn headers(api: Api, key: &ApiKey, extra: &HeaderMap) -> HeaderMap {
    let format = for_api(api);
    let mut headers = extra.clone();
    // Anthropic's own headers (`anthropic-beta` from its clients) go to Anthropic alone: what they
    // switch on, no other provider has.
    if api != Api::Anthropic {
        let theirs: Vec<HeaderName> = headers
            .keys()
            .filter(|name| name.as_str().starts_with("anthropic-"))
            .cloned()
            .collect();
        for name in theirs {
            headers.remove(name);
        }
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for &(name, value) in format.fixed_headers() {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    if let Some((name, value)) = format.auth(key) {
        headers.insert(name, value);
    }
    headers
}

/// Each deployment's two endpoints, `[answer, stream]`, parsed once when the router is built: a
/// request clones its URL rather than formatting and parsing it. An embedding model's are its
/// embeddings endpoint, twice (it does not stream).
#[derive(Debug)]
pub(crate) struct Endpoints(Vec<[Url; 2]>);

impl Endpoints {
    /// Every deployment's endpoints, or an error naming the provider whose `base_url` the HTTP
    /// client cannot use.
    pub(crate) fn new(registry: &Registry) -> Result<Self, String> {
        let mut all = Vec::with_capacity(registry.deployments.len());
        for d in registry.deployment_ids() {
            let deployment = registry.deployment(d);
            let provider = registry.provider(deployment.provider);
            let (api, base, model) = (provider.api, &provider.base_url, &deployment.model);
            let pair = match deployment.kind {
                ModelKind::Chat => endpoints(api, base, model),
                ModelKind::Embedding => embed::endpoint(api, base, model).map(|u| [u.clone(), u]),
            };
            let pair = pair.map_err(|e| {
                format!(
                    "provider `{}`: base_url `{}` is not a URL the HTTP client can send to ({e}); \
                     write the full URL as the provider documents it",
                    provider.name,
                    redact_url(&provider.base_url)
                )
            })?;
            all.push(pair);
        }
        Ok(Self(all))
    }

    /// Deployment `d`'s endpoints.
    pub(crate) fn of(&self, d: DeploymentId) -> &[Url; 2] {
        &self.0[d.0]
    }
}

/// The endpoints `[answer, stream]` of `model` at `base` (a trailing `/` is ignored) in `api`'s
/// wire format.
pub(crate) fn endpoints(api: Api, base: &str, model: &str) -> Result<[Url; 2], String> {
    let format = for_api(api);
    let base = base.trim_end_matches('/');
    let parse = |stream| Url::parse(&format.url(base, model, stream)).map_err(|e| e.to_string());
    Ok([parse(false)?, parse(true)?])
}

/// Whether `name` can be an HTTP header's name, as requests' extra headers are sent
/// ([`ChatRequest::headers`](crate::ChatRequest)).
pub fn is_header_name(name: &str) -> bool {
    HeaderName::from_bytes(name.as_bytes()).is_ok()
}

/// A request's extra headers as sent upstream, or an error naming the header that cannot be sent.
pub(crate) fn extra_headers(pairs: &[(String, String)]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name `{name}` is not a valid HTTP header name"))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(format!(
                "header `{name}` is set by llmroute itself (it carries the key or frames the \
                 body); remove it from the request's headers"
            ));
        }
        let mut value = HeaderValue::from_str(value).map_err(|_| {
            format!(
                "header `{name}`: its value is not a valid HTTP header value (control characters?)"
            )
        })?;
        // A header may carry a credential (for a proxy): never shown in `Debug` output.
        value.set_sensitive(true);
        map.append(header, value);
    }
    Ok(map)
}

/// A header carrying `prefix` + the key, marked sensitive; `None` if the key is not a valid
/// header value.
fn secret_header(
    name: &'static str,
    prefix: &str,
    key: &ApiKey,
) -> Option<(HeaderName, HeaderValue)> {
    let mut value = HeaderValue::from_str(&format!("{prefix}{}", key.expose())).ok()?;
    value.set_sensitive(true);
    Some((HeaderName::from_static(name), value))
}

/// A 2xx body that was not the shape we expected. Keeps an excerpt of the body, never a key
/// (keys are only ever in request headers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode the {api} response: {reason}; body starts: {excerpt:?}")]
pub(crate) struct DecodeError {
    /// The API whose response it was.
    pub(crate) api: &'static str,
    /// What was wrong with it.
    pub(crate) reason: String,
    /// The start of the body.
    pub(crate) excerpt: String,
}

impl From<DecodeError> for Failure {
    fn from(err: DecodeError) -> Self {
        Failure::decode(err.to_string())
    }
}

/// Reads a complete (non-streaming) 2xx response to `req`. An answer with no choice, candidate
/// or content, with implausible usage, or that finished to call tools it did not name, is as
/// malformed as one that is not JSON.
pub(crate) fn parse_response(
    api: Api,
    req: &ChatRequest,
    body: &[u8],
) -> Result<Completion, DecodeError> {
    let completion = for_api(api)
        .parse_response(req, body)
        .and_then(|mut completion| {
            completion.usage = completion.usage.map(plausible).transpose()?;
            calls_something(
                completion.finish_reason.as_ref(),
                completion.tool_calls.len(),
            )?;
            Ok(completion)
        });
    completion.map_err(|reason| DecodeError {
        api: api.as_str(),
        reason,
        excerpt: excerpt(body),
    })
}

/// `usage` if no count in it is above [`MAX_PLAUSIBLE_TOKENS`]; else what is wrong with it.
/// Cached tokens are a part of the prompt's, reasoning tokens of the completion's: a report of
/// more is cut down to the whole (the answer stands, and no record or cost counts a part
/// larger than its whole).
pub(crate) fn plausible(mut usage: Usage) -> Result<Usage, String> {
    usage.cached_prompt_tokens = usage.cached_prompt_tokens.min(usage.prompt_tokens);
    usage.reasoning_tokens = usage.reasoning_tokens.min(usage.completion_tokens);
    let most = usage.prompt_tokens.max(usage.completion_tokens);
    if most > MAX_PLAUSIBLE_TOKENS {
        return Err(format!(
            "implausible usage ({} prompt, {} completion tokens): no answer counts more than \
             {MAX_PLAUSIBLE_TOKENS} tokens of either",
            usage.prompt_tokens, usage.completion_tokens
        ));
    }
    Ok(usage)
}

/// Whether an answer that made `calls` tool calls for the caller can finish with `finish`: a
/// [`FinishReason::ToolCalls`] finish with nothing to call is malformed (the caller would run
/// no tool and wait for results that never come). Every format's whole answers and streams
/// go through this one rule. An answer tool's call (Anthropic's JSON answers) is no call for
/// the caller, and its format reports that answer's finish as [`FinishReason::Stop`].
pub(crate) fn calls_something(finish: Option<&FinishReason>, calls: usize) -> Result<(), String> {
    if finish == Some(&FinishReason::ToolCalls) && calls == 0 {
        return Err("it finished to call tools but named no tool call".to_owned());
    }
    Ok(())
}

/// The start of a body, as text, for error messages.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(EXCERPT_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

/// Deserializes `null` as the type's default (some OpenAI-compatible servers send `null` counts).
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// A stream event that is not valid JSON.
fn malformed(api: Api, data: &str, err: &serde_json::Error) -> Failure {
    let what = api.as_str();
    Failure::decode(format!(
        "malformed {what} stream event ({err}): {}",
        excerpt(data.as_bytes())
    ))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
