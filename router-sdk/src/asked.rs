//! What the request flow needs to know of a request, whatever it asks for: a chat, or
//! embeddings. [`Router::plan`](crate::Router) and `Router::begin` take an [`Asked`], so one path
//! routes, admits, fails over, settles and records every kind of request; each kind keeps its own
//! checks, body and wire formats in its own files (`request.rs` and `chat.rs`, `embed.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use router_core::config::{Features, ModelKind};
use router_core::estimate::PromptSize;
use router_core::prompt_cache::PrefixHashes;

use crate::types::Priority;

/// A request as the flow sees it: who asks, for what model, how large, how urgent.
#[derive(Debug, Clone)]
pub(crate) struct Asked<'a> {
    /// Model name or alias; `None`: `defaults.model`.
    pub(crate) model: Option<&'a str>,
    /// What it needs of a model.
    pub(crate) wants: Wants,
    /// The prompt's size (a chat's messages, or the inputs to embed).
    pub(crate) prompt: PromptSize,
    /// Only these providers may serve it; empty: any.
    pub(crate) providers: &'a [String],
    /// The tenant it is accounted to.
    pub(crate) tenant: Option<&'a str>,
    /// The API key's identifier, for its usage record.
    pub(crate) key_id: Option<&'a str>,
    /// The API key's own account, when it has limits or budgets.
    pub(crate) key_account: Option<&'a router_core::ledger::TenantSpec>,
    /// The caller's id for it.
    pub(crate) request_id: Option<&'a str>,
    /// Interactive or batch.
    pub(crate) priority: Priority,
    /// How long it may take in all; `None`: `retry.deadline_secs`.
    pub(crate) deadline: Option<Duration>,
    /// Extra headers for the provider.
    pub(crate) headers: &'a [(String, String)],
    /// Its place in a distributed trace.
    pub(crate) trace: Option<crate::trace::TraceParent>,
    /// Tags kept in its trace span.
    pub(crate) metadata: &'a BTreeMap<String, String>,
    /// The hashes of its prompt's prefixes, when it marks cache breakpoints (a chat's).
    pub(crate) prefixes: Option<PrefixHashes>,
}

/// What a request needs of the model that serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wants {
    /// A chat model with the capabilities `features` need; at most `max_tokens` of output.
    Chat {
        features: Features,
        max_tokens: Option<u64>,
    },
    /// An embedding model whose wire format takes token ids (when `token_ids`), and whose
    /// vectors are at least `dimensions` long (when it says how long they are).
    Embeddings {
        token_ids: bool,
        dimensions: Option<u32>,
    },
}

impl Wants {
    /// The kind of model it goes to.
    pub(crate) fn kind(self) -> ModelKind {
        match self {
            Wants::Chat { .. } => ModelKind::Chat,
            Wants::Embeddings { .. } => ModelKind::Embedding,
        }
    }

    /// What it needs beyond text (an embedding request: nothing).
    pub(crate) fn features(self) -> Features {
        match self {
            Wants::Chat { features, .. } => features,
            Wants::Embeddings { .. } => Features::default(),
        }
    }

    /// The cap on output tokens (an embedding request has no output).
    pub(crate) fn max_tokens(self) -> Option<u64> {
        match self {
            Wants::Chat { max_tokens, .. } => max_tokens,
            Wants::Embeddings { .. } => None,
        }
    }
}
