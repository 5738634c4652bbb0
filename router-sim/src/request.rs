//! One simulated request: its plan and flow, and how a provider call ends.

use std::time::Duration;

use router_core::config::{DeploymentId, Registry};
use router_core::estimate::{Estimator, PromptSize};
use router_core::flow::{Ask, Flow, Plan, Priority};
use router_core::ledger::Reservation;
use router_core::retry::{FailureKind, RetryPolicy};

/// One request on its way through the router.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) arrived: u64,
    /// The deployments it may go to (its model's, or its routing rule's).
    pub(crate) candidates: Vec<DeploymentId>,
    /// Prompt size in o200k tokens.
    pub(crate) o200k: u64,
    /// The completion the provider will produce.
    pub(crate) output: u64,
    pub(crate) plan: Plan,
    pub(crate) flow: Flow,
    /// The reservation of the call under way.
    pub(crate) held: Option<Reservation>,
    /// Whether it has waited for capacity yet.
    pub(crate) waited: bool,
    /// The kind of the last failed call, if any.
    pub(crate) last_kind: Option<FailureKind>,
    /// The deployment the wait it is about to begin is tallied against.
    pub(crate) waits_on: Option<DeploymentId>,
}

impl Request {
    /// The size of a prompt of `o200k` tokens: four characters per token, the text a simulated
    /// request stands for.
    pub(crate) fn prompt_size(o200k: u64) -> PromptSize {
        PromptSize {
            chars: o200k.saturating_mul(4),
            images: 0,
        }
    }

    /// A request arriving `now` with `o200k` prompt tokens that will get `output` completion
    /// tokens, planned as `Router::chat` plans it ([`Plan::new`]).
    pub(crate) fn plan(
        registry: &Registry,
        candidates: Vec<DeploymentId>,
        estimator: &Estimator,
        (max_tokens, priority): (Option<u64>, Priority),
        (now, o200k, output): (u64, u64, u64),
    ) -> Self {
        let ask = Ask {
            prompt: Self::prompt_size(o200k),
            max_tokens,
            accounts: Vec::new(),
            priority,
            deadline: registry.retry.deadline,
            cache_reads: Vec::new(),
            writes_cache: false,
        };
        let plan = Plan::new(registry, estimator, &candidates, ask, now);
        let flow = Flow::new(RetryPolicy::new(registry.retry), &plan);
        Self {
            arrived: now,
            candidates,
            o200k,
            output,
            plan,
            flow,
            held: None,
            waited: false,
            last_kind: None,
            waits_on: None,
        }
    }

    /// Its ticket in the deployments' lines (its reservation id when it has none).
    pub(crate) fn ticket(&self) -> u64 {
        let need = &self.plan.need;
        need.line.map_or(need.id, |t| t.id)
    }
}

/// How a provider call ends.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Answered, with this many prompt tokens (its tokenizer's count).
    Served {
        /// Prompt tokens.
        prompt: u64,
        /// When the provider accepted the call, ms.
        accepted: u64,
    },
    /// Refused: 429 with this `Retry-After`.
    RateLimited(Duration),
    /// Still running at the deadline.
    TimedOut,
}
