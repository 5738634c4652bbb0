//! One simulated request: how the router plans it, and how a provider call ends.

use std::time::Duration;

use crate::config::{DeploymentId, Registry};
use crate::estimate::{self, OutputEstimator};
use crate::ledger::{MAX_SLOT_TTL, Need};
use crate::select;

/// One request on its way through the router.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) arrived: u64,
    /// Prompt size in o200k tokens.
    pub(crate) o200k: u64,
    /// The completion the provider will produce.
    pub(crate) output: u64,
    /// Candidates, cheapest first for this request.
    pub(crate) ranked: Vec<DeploymentId>,
    pub(crate) need: Need,
    pub(crate) deadline: u64,
    /// Provider calls made so far.
    pub(crate) calls: u32,
    /// Whether it has waited for capacity yet.
    pub(crate) waited: bool,
}

impl Request {
    /// A request arriving `now` with `o200k` prompt tokens that will get `output` completion
    /// tokens, planned as `Router::plan` does: the prompt estimate is the largest of the
    /// candidates' tokenizer counts, the completion estimate the largest of their histories
    /// (capped by `max_tokens`), candidates ranked by the estimated cost.
    pub(crate) fn plan(
        registry: &Registry,
        candidates: &[DeploymentId],
        outputs: &OutputEstimator,
        max_tokens: Option<u64>,
        (now, o200k, output): (u64, u64, u64),
    ) -> Self {
        let prompt = candidates
            .iter()
            .map(|&d| estimate::scale(registry.provider_of(d).api, o200k))
            .max()
            .unwrap_or(o200k);
        let completion = candidates
            .iter()
            .map(|&d| outputs.estimate(d, max_tokens))
            .max()
            .unwrap_or(1);
        let ranked = select::rank(registry, candidates, prompt, completion)
            .into_iter()
            .map(|r| r.deployment)
            .collect();
        let deadline = registry.retry.deadline;
        // A slot must outlive its request: a slot that expired in flight would admit one too many.
        let slot_ttl = Duration::from_millis(registry.defaults.slot_ttl_ms)
            .max(deadline)
            .min(MAX_SLOT_TTL);
        Self {
            arrived: now,
            o200k,
            output,
            ranked,
            need: Need::new(prompt + completion, slot_ttl),
            deadline: now + deadline.as_millis() as u64,
            calls: 0,
            waited: false,
        }
    }
}

/// How a provider call ends.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Answered, with this many prompt tokens (its tokenizer's count).
    Served {
        /// Prompt tokens.
        prompt: u64,
    },
    /// Refused: 429 with this `Retry-After`.
    RateLimited(Duration),
    /// Still running at the deadline.
    TimedOut,
}
