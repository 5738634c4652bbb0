//! Simulation: the real request flow against simulated providers, on a virtual clock.
//!
//! [`run`] drives the very request flow `router_sdk::Router` drives
//! ([`router_core::flow::Flow`], planned by [`router_core::flow::Plan`]) over the in-memory
//! [`MemoryStore`](router_core::ledger::MemoryStore) ledger, through a synthetic traffic
//! [`Profile`], and answers with a [`SimReport`]: per deployment, requests, tokens, cost, 429s and
//! waits, and the total cost against sending everything to the cheapest or to the most expensive
//! deployment; and per deployment, the same counts minute by minute ([`DeploymentMinutes`]).
//! Nothing leaves the process: no network, no keys.
//!
//! # The model
//!
//! - **Time** is a [`ManualClock`](router_core::clock::ManualClock) moved from event to event (a
//!   discrete-event simulation: arrivals, answers, the ends of waits), so an hour of traffic takes
//!   well under a second, and the ledger's windows slide exactly as they would in real time.
//! - **Traffic**: requests arrive at `rps` on average, as a Poisson process or, with
//!   `burstiness` B > 0, in bursts at (1 + B) x `rps` separated by silences (a burst and the
//!   silence after it last 60 s together on average). Prompt and completion sizes are log-normal
//!   with a given mean and spread (coefficient of variation). Seeded generators make every run
//!   repeatable: the same configuration, profile and seed give the same report.
//! - **The router** is the SDK's own request flow ([`router_core::flow`]): each candidate
//!   estimated by what its provider reported and ranked by that estimate, admission through
//!   the ledger, waits as the flow says (never past the deadline), settlement as far as each call
//!   got, shared cooldowns (stated waits clamped at `retry.max_cooldown_secs`), failover to a
//!   candidate that has not failed in this request, up to `max_attempts` calls, and rate-limit
//!   headers sent to the ledger when they matter or every few seconds
//!   ([`router_core::flow::Reports`]). Simulated requests are interactive and have no tenant.
//! - **Providers** keep their *own* books, apart from the ledger: an exact sliding 60 s log of
//!   the requests they accepted, counted on arrival as their real counterparts count
//!   ([`Accounting`](router_core::estimate::Accounting)): OpenAI-compatible and Gemini providers
//!   a quarter of the prompt's characters plus `max_tokens` (or the model's
//!   `max_output_tokens`), Anthropic the real prompt and completion; plus the requests in
//!   flight, per deployment and per provider-wide limit. A request that would break a limit is
//!   refused with a 429 whose `Retry-After` (whole seconds) says when their window frees. By
//!   default they enforce exactly the configured limits, so a 429 means the ledger let too much
//!   through (it can: a completion longer than its estimate where the provider counts real use,
//!   or a call the router timed out while the provider kept working on it). Simulated prompts
//!   are text of four characters per o200k token; Anthropic's tokenizer makes 20 % more tokens of
//!   it, the others as many. `provider_headroom` scales the limits the providers really
//!   enforce; `foreign_load` is the share of each limit taken by traffic outside llmroute, a
//!   steady load that leaves that much less for us. OpenAI-compatible and Anthropic providers
//!   report what remains (and when their window is empty again) in rate-limit headers, which the
//!   router follows as the SDK does; Gemini reports nothing.
//! - **Latency** of an accepted call is `base_ms + per_token_ms x completion tokens`; a 429 comes
//!   back after [`REFUSAL_MS`]. A call still running at the request's deadline times out there.
//!
//! A request ends served or failed: no capacity before the deadline (or ever), every attempt
//! refused (`max_attempts` calls), or timed out. After the last arrival the simulation runs on
//! until every request has ended.
//!
//! # Cost
//!
//! Each event costs one ledger call or so: a microsecond in a release build. Under heavy
//! overload every waiting request asks the ledger again each time capacity might have returned,
//! as the SDK does, so thousands of waiters make a run proportionally longer.

#![forbid(unsafe_code)]

mod agenda;
mod engine;
mod profile;
mod provider;
mod report;
mod request;
mod series;
mod tally;

pub use engine::run;
pub use profile::{Latency, Profile, TokenSize};
pub use provider::REFUSAL_MS;
pub use report::{
    Baseline, Baselines, ClassWaits, DeploymentReport, LimitsReport, SimReport, Totals,
};
pub use series::{DeploymentMinutes, Minute};

use router_core::config::Api;
use router_core::ledger::LedgerError;

/// Prompt tokens a provider of `api` makes of a simulated prompt of `o200k` o200k tokens (the
/// simulated tokenizers).
pub(crate) fn tokenized(api: Api, o200k: u64) -> u64 {
    match api {
        Api::Anthropic => o200k.saturating_mul(6) / 5,
        Api::OpenAi | Api::Gemini => o200k,
    }
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A value of the traffic profile is out of range.
    #[error("invalid traffic profile: {0}")]
    Profile(String),
    /// The profile names no model and the configuration has no `defaults.model`.
    #[error("no model given and no `defaults.model` configured")]
    NoModel,
    /// No deployment serves the model.
    #[error("unknown model `{model}`; known models and aliases: {}", known.join(", "))]
    UnknownModel {
        /// The name asked for.
        model: String,
        /// Every model name and alias the configuration knows.
        known: Vec<String>,
    },
    /// A request matched no rule of the routed alias it asked for.
    #[error(
        "no rule of route `{alias}` matches a simulated request of {prompt_tokens} prompt tokens \
         (interactive, no tools, no images, no tenant); add a last rule without `when` to catch \
         the rest"
    )]
    NoRoute {
        /// The routed alias.
        alias: String,
        /// The request's prompt estimate.
        prompt_tokens: u64,
    },
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The ledger did not answer at once (the simulation runs on the in-memory store only).
    #[error("the in-memory ledger did not answer at once")]
    Pending,
}
