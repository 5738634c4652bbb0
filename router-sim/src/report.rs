//! What a simulation reports. Every figure comes from simulated traffic: nothing was sent.

use serde::Serialize;

use super::Profile;
use super::series::DeploymentMinutes;
use router_core::config::Limits;

/// The outcome of a simulation. Every figure comes from simulated traffic: nothing was sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    /// The model or alias the traffic asked for.
    pub model: String,
    /// The profile simulated.
    pub profile: Profile,
    /// Simulated time from the start until the last request ended, ms.
    pub simulated_ms: u64,
    /// The model's deployments, cheapest first for a request of the profile's mean size.
    pub deployments: Vec<DeploymentReport>,
    /// Sums over every request and deployment.
    pub totals: Totals,
    /// What the served traffic would have cost on one deployment alone.
    pub baselines: Baselines,
    /// Per deployment (in the order of `deployments`), its counts in each simulated minute.
    /// Left out of the JSON form: a long run has many minutes.
    #[serde(skip)]
    pub per_minute: Vec<DeploymentMinutes>,
}

/// One deployment's share of the simulated traffic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeploymentReport {
    /// `provider/model`.
    pub name: String,
    /// USD per million prompt tokens.
    pub input_per_mtok: f64,
    /// USD per million completion tokens.
    pub output_per_mtok: f64,
    /// The configured limits of the deployment itself.
    pub limits: LimitsReport,
    /// Requests it served.
    pub requests: u64,
    /// Prompt tokens it served (its own tokenizer's count).
    pub prompt_tokens: u64,
    /// Completion tokens it served.
    pub completion_tokens: u64,
    /// What those tokens cost, USD.
    pub cost_usd: f64,
    /// Calls it refused with a 429.
    pub rate_limited: u64,
    /// Calls to it that ran past their request's deadline.
    pub timeouts: u64,
    /// Waits for capacity where this deployment was the first to free up.
    pub waits: u64,
    /// Total time of those waits, ms.
    pub wait_ms: u64,
    /// The most of llmroute's traffic the provider saw from this deployment in any 60 s window
    /// (requests, tokens) and in flight at once.
    pub peak: LimitsReport,
}

/// Values per limit dimension; `None` for an unlimited one (in `limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LimitsReport {
    /// Requests per 60 s.
    pub rpm: Option<u64>,
    /// Tokens per 60 s.
    pub tpm: Option<u64>,
    /// Requests in flight.
    pub concurrency: Option<u64>,
}

impl From<Limits> for LimitsReport {
    fn from(l: Limits) -> Self {
        Self {
            rpm: l.rpm.map(|v| v.get()),
            tpm: l.tpm.map(|v| v.get()),
            concurrency: l.concurrency.map(|v| v.get()),
        }
    }
}

/// Sums over the whole simulation. `requests == served + failed`; the token, cost, 429, timeout
/// and wait figures are the sums of the deployments'.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    /// Requests that arrived.
    pub requests: u64,
    /// Requests answered.
    pub served: u64,
    /// Requests that failed, for any of the reasons below.
    pub failed: u64,
    /// Failed: no candidate could take it before its deadline (or ever).
    pub failed_no_capacity: u64,
    /// Failed: `max_attempts` calls, each refused.
    pub failed_retries: u64,
    /// Failed: its deadline passed while a call ran.
    pub failed_timeout: u64,
    /// Prompt tokens served.
    pub prompt_tokens: u64,
    /// Completion tokens served.
    pub completion_tokens: u64,
    /// Cost of the served traffic, USD.
    pub cost_usd: f64,
    /// 429 answers.
    pub rate_limited: u64,
    /// Calls that ran past their deadline.
    pub timeouts: u64,
    /// Waits for capacity.
    pub waits: u64,
    /// Total time waited, ms.
    pub wait_ms: u64,
    /// Requests that waited at least once.
    pub requests_that_waited: u64,
    /// Median time from arrival to answer of served requests, ms.
    pub latency_p50_ms: u64,
    /// 95th percentile of the same, ms.
    pub latency_p95_ms: u64,
    /// The longest, ms.
    pub latency_max_ms: u64,
    /// Time waited for capacity, per class of request (interactive, then batch when any).
    pub waits_by_class: Vec<ClassWaits>,
}

/// How long the requests of one class waited for capacity, from arrival to their last
/// admission (served or not).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassWaits {
    /// `interactive` or `batch`.
    pub class: &'static str,
    /// Requests of the class that ended.
    pub requests: u64,
    /// Of them, those that waited at all.
    pub waited: u64,
    /// Median wait, ms.
    pub p50_ms: u64,
    /// 95th percentile, ms.
    pub p95_ms: u64,
    /// The longest, ms: the starvation bound as the run saw it.
    pub max_ms: u64,
}

/// The served traffic's cost had it all gone to one deployment, limits aside.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baselines {
    /// On the deployment that would have cost least.
    pub cheapest: Baseline,
    /// On the deployment that would have cost most.
    pub most_expensive: Baseline,
    /// `most_expensive.cost_usd - totals.cost_usd`.
    pub savings_usd: f64,
    /// The savings as a percentage of `most_expensive.cost_usd` (0 when that is 0).
    pub savings_pct: f64,
}

/// One deployment's price for all of the served traffic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// `provider/model`.
    pub deployment: String,
    /// USD.
    pub cost_usd: f64,
}
