//! Embeddings, independent of provider: what [`Router::embed`](crate::Router::embed) takes and
//! what it answers. Wire adapters (`wire/embed/`) translate these to and from each provider's
//! JSON.
//!
//! The router always asks the provider for floats, and answers `f32`s (a provider's float is
//! read to the nearest `f32`). [`base64_f32`] writes one vector as OpenAI's
//! `encoding_format: "base64"` does: its `f32`s' little-endian bytes, base64 with the standard
//! alphabet and padding.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use serde::Serialize;

use crate::types::{Priority, Receipt};

/// One input to embed: text, or the token ids of text (OpenAI-compatible models only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbedInput {
    /// Text.
    Text(String),
    /// Token ids of the model's tokenizer.
    Tokens(Vec<u32>),
}

impl From<&str> for EmbedInput {
    fn from(text: &str) -> Self {
        EmbedInput::Text(text.to_owned())
    }
}

impl From<String> for EmbedInput {
    fn from(text: String) -> Self {
        EmbedInput::Text(text)
    }
}

impl From<Vec<u32>> for EmbedInput {
    fn from(tokens: Vec<u32>) -> Self {
        EmbedInput::Tokens(tokens)
    }
}

/// An embeddings request, independent of provider: one vector per input, in input order. Its
/// `Debug` shows the extra headers' names, never their values.
#[derive(Clone, PartialEq, Default)]
pub struct EmbedRequest {
    /// Embedding model name or alias; `None` uses `defaults.model` (which must then be one).
    pub model: Option<String>,
    /// What to embed: all texts, or all token ids, not both.
    pub input: Vec<EmbedInput>,
    /// The vectors' size, for models that can shorten theirs (OpenAI `dimensions`, Gemini
    /// `outputDimensionality`); a model whose configured `dimensions` is smaller is not asked.
    pub dimensions: Option<u32>,
    /// The end user, for the provider's abuse monitoring (OpenAI `user`; Gemini has no place
    /// for it).
    pub user: Option<String>,
    /// The caller's id for this request, in traces and the receipt; one is drawn when `None`.
    pub request_id: Option<String>,
    /// Only these providers (by their `name` in the configuration) may serve the request;
    /// empty: any.
    pub providers: Vec<String>,
    /// The tenant this request is accounted to.
    pub tenant: Option<String>,
    /// An identifier of the API key the request came with, kept in its usage record. Never the
    /// key itself.
    pub key_id: Option<String>,
    /// The API key's own limits and budgets ([`TenantSpec::of_key`]), checked with the
    /// tenant's in the same atomic admission: the gateway sets them for a runtime key that has
    /// limits of its own.
    ///
    /// [`TenantSpec::of_key`]: router_core::ledger::TenantSpec::of_key
    pub key_account: Option<router_core::ledger::TenantSpec>,
    /// How long the whole request (waits, retries, the call) may take.
    pub deadline: Option<Duration>,
    /// How urgent it is.
    pub priority: Priority,
    /// Extra HTTP headers sent to the provider with every attempt, as
    /// [`ChatRequest::headers`](crate::ChatRequest) are.
    pub headers: Vec<(String, String)>,
    /// The request's place in a distributed trace, as
    /// [`ChatRequest::trace`](crate::ChatRequest) is.
    pub trace: Option<crate::trace::TraceParent>,
}

impl EmbedRequest {
    /// A request to embed `inputs` with the default model.
    pub fn new<I: Into<EmbedInput>>(inputs: impl IntoIterator<Item = I>) -> Self {
        Self {
            input: inputs.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }
}

impl std::fmt::Debug for EmbedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("EmbedRequest")
            .field("model", &self.model)
            .field("input", &self.input)
            .field("dimensions", &self.dimensions)
            .field("user", &self.user)
            .field("request_id", &self.request_id)
            .field("providers", &self.providers)
            .field("tenant", &self.tenant)
            .field("key_account", &self.key_account)
            .field("key_id", &self.key_id)
            .field("deadline", &self.deadline)
            .field("priority", &self.priority)
            .field("headers (values hidden)", &headers)
            .field("trace", &self.trace)
            .finish()
    }
}

/// Embeddings answered: one vector per input, in input order, and the receipt (its usage has
/// the prompt tokens alone; embeddings have no completion).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbedResponse {
    /// One vector per input, in input order.
    pub embeddings: Vec<Vec<f32>>,
    /// Who answered, usage, cost, attempts and waits.
    #[serde(flatten)]
    pub receipt: Receipt,
}

/// `vector` as OpenAI's `encoding_format: "base64"` sends it: each `f32`'s four little-endian
/// bytes, in order, base64 with the standard alphabet and `=` padding.
pub fn base64_f32(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The `f32`s of `text` written as [`base64_f32`] writes them; `None` when it is not base64 of
/// a whole number of `f32`s.
pub(crate) fn f32s_of_base64(text: &str) -> Option<Vec<f32>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    let words = bytes.chunks_exact(4);
    Some(
        words
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect(),
    )
}

/// The tags of an embedding request, for its trace span: none (OpenAI's embeddings take no
/// `metadata`).
pub(crate) static NO_METADATA: BTreeMap<String, String> = BTreeMap::new();

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn base64_is_little_endian_f32_bytes_in_the_standard_alphabet() {
        // 1.0 = 00 00 80 3f, -2.0 = 00 00 00 c0, 0.5 = 00 00 00 3f.
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(base64_f32(&[0.5]), "AAAAPw==");
        assert_eq!(base64_f32(&[]), "");
        let v = [0.002_306_425_5_f32, -0.009_327_292, 1.0e-38, f32::MAX];
        assert_eq!(f32s_of_base64(&base64_f32(&v)).unwrap(), v);
        assert_eq!(f32s_of_base64("AACA"), None, "three bytes are no f32");
        assert_eq!(f32s_of_base64("not base64!"), None);
    }
}
