//! The counters a simulation keeps while it runs, and the report built from them.

use super::Profile;
use super::provider::Providers;
use super::report::{
    Baseline, Baselines, ClassWaits, DeploymentReport, LimitsReport, SimReport, Totals,
};
use super::series::Recorder;
use router_core::config::{DeploymentId, Registry};
use router_core::flow::Priority;

/// The `p`th percentile of `sorted` (nearest rank), if it holds anything.
fn percentile(sorted: &[u64], p: usize) -> Option<u64> {
    let n = sorted.len();
    (n > 0).then(|| sorted[(n * p).div_ceil(100).clamp(1, n) - 1])
}

/// Counters of one deployment during the run.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    requests: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    rate_limited: u64,
    timeouts: u64,
    waits: u64,
    wait_ms: u64,
    /// Prompt tokens of all served requests, counted by this deployment's tokenizer.
    baseline_prompt: u64,
}

/// Counters kept while the simulation runs, indexed by deployment id.
#[derive(Debug)]
pub(crate) struct Tally {
    counts: Vec<Counts>,
    pub(crate) requests: u64,
    pub(crate) failed_no_capacity: u64,
    pub(crate) failed_retries: u64,
    pub(crate) failed_timeout: u64,
    pub(crate) requests_that_waited: u64,
    completion_tokens: u64,
    latencies: Vec<u64>,
    /// Each ended request's wait, ms: interactive ones, batch ones.
    class_waits: [Vec<u64>; 2],
    /// The same counts per simulated minute.
    minutes: Recorder,
}

impl Tally {
    /// Counters for `registry`'s deployments; the first simulated minute starts at `start_ms`.
    pub(crate) fn new(registry: &Registry, start_ms: u64) -> Self {
        Self {
            counts: vec![Counts::default(); registry.deployments.len()],
            requests: 0,
            failed_no_capacity: 0,
            failed_retries: 0,
            failed_timeout: 0,
            requests_that_waited: 0,
            completion_tokens: 0,
            latencies: Vec::new(),
            class_waits: [Vec::new(), Vec::new()],
            minutes: Recorder::new(registry, start_ms),
        }
    }

    /// A request served by `d`, whose call `d` accepted at `accepted` ms, `latency` ms after
    /// the request arrived. `tokens` are its prompt in o200k tokens and by `d`'s tokenizer, and
    /// its completion; `candidates` price the baselines.
    pub(crate) fn served(
        &mut self,
        registry: &Registry,
        candidates: &[DeploymentId],
        d: DeploymentId,
        (o200k, prompt, completion): (u64, u64, u64),
        (accepted, latency): (u64, u64),
    ) {
        let minute = self.minutes.at(d, accepted);
        minute.requests += 1;
        minute.prompt_tokens += prompt;
        minute.completion_tokens += completion;
        let c = &mut self.counts[d.0];
        c.requests += 1;
        c.prompt_tokens += prompt;
        c.completion_tokens += completion;
        self.completion_tokens += completion;
        for &other in candidates {
            let api = registry.provider_of(other).api;
            self.counts[other.0].baseline_prompt += crate::tokenized(api, o200k);
        }
        self.latencies.push(latency);
    }

    /// A call `d` refused with a 429 at `now` ms.
    pub(crate) fn rate_limited(&mut self, d: DeploymentId, now: u64) {
        self.counts[d.0].rate_limited += 1;
        self.minutes.at(d, now).rate_limited += 1;
    }

    /// A call `d` accepted at `now` ms, counted as `tokens` against its provider's TPM.
    pub(crate) fn accepted(&mut self, d: DeploymentId, now: u64, tokens: u64) {
        self.minutes.at(d, now).counted_tokens += tokens;
    }

    pub(crate) fn timed_out(&mut self, d: DeploymentId) {
        self.counts[d.0].timeouts += 1;
    }

    /// A request of `priority` ended (served or not) after waiting `waited` in all.
    pub(crate) fn ended(&mut self, priority: Priority, waited: std::time::Duration) {
        let class = usize::from(priority == Priority::Batch);
        let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        self.class_waits[class].push(ms);
    }

    pub(crate) fn waited(&mut self, d: DeploymentId, ms: u64) {
        self.counts[d.0].waits += 1;
        self.counts[d.0].wait_ms += ms;
    }

    /// The report over `candidates` (listed in the order given).
    pub(crate) fn report(
        mut self,
        registry: &Registry,
        candidates: &[DeploymentId],
        providers: &Providers,
        head: (String, Profile, u64),
    ) -> SimReport {
        let deployments: Vec<DeploymentReport> = candidates
            .iter()
            .map(|&d| self.deployment(registry, providers, d))
            .collect();
        let sum = |f: fn(&DeploymentReport) -> u64| deployments.iter().map(f).sum::<u64>();
        let waits_by_class = self.waits_by_class();
        self.latencies.sort_unstable();
        let pct = |p: usize| percentile(&self.latencies, p);
        let served = sum(|d| d.requests);
        let failed = self.failed_no_capacity + self.failed_retries + self.failed_timeout;
        let totals = Totals {
            requests: self.requests,
            served,
            failed,
            failed_no_capacity: self.failed_no_capacity,
            failed_retries: self.failed_retries,
            failed_timeout: self.failed_timeout,
            prompt_tokens: sum(|d| d.prompt_tokens),
            completion_tokens: sum(|d| d.completion_tokens),
            cost_usd: deployments.iter().map(|d| d.cost_usd).sum(),
            rate_limited: sum(|d| d.rate_limited),
            timeouts: sum(|d| d.timeouts),
            waits: sum(|d| d.waits),
            wait_ms: sum(|d| d.wait_ms),
            requests_that_waited: self.requests_that_waited,
            latency_p50_ms: pct(50).unwrap_or(0),
            latency_p95_ms: pct(95).unwrap_or(0),
            latency_max_ms: self.latencies.last().copied().unwrap_or(0),
            waits_by_class,
        };
        let baselines = self.baselines(registry, candidates, totals.cost_usd);
        let (model, profile, simulated_ms) = head;
        let per_minute = self.minutes.finish(registry, candidates, simulated_ms);
        SimReport {
            model,
            profile,
            simulated_ms,
            deployments,
            totals,
            baselines,
            per_minute,
        }
    }

    /// Waits per class: interactive always, batch when any batch request ended.
    fn waits_by_class(&mut self) -> Vec<ClassWaits> {
        for waits in &mut self.class_waits {
            waits.sort_unstable();
        }
        let classes = [("interactive", 0), ("batch", 1)];
        classes
            .into_iter()
            .filter(|&(_, i)| i == 0 || !self.class_waits[i].is_empty())
            .map(|(class, i)| {
                let waits = &self.class_waits[i];
                ClassWaits {
                    class,
                    requests: waits.len() as u64,
                    waited: waits.iter().filter(|&&w| w > 0).count() as u64,
                    p50_ms: percentile(waits, 50).unwrap_or(0),
                    p95_ms: percentile(waits, 95).unwrap_or(0),
                    max_ms: waits.last().copied().unwrap_or(0),
                }
            })
            .collect()
    }

    fn deployment(
        &self,
        registry: &Registry,
        providers: &Providers,
        d: DeploymentId,
    ) -> DeploymentReport {
        let c = self.counts[d.0];
        let deployment = registry.deployment(d);
        let peak = providers.peak(d);
        DeploymentReport {
            name: registry.deployment_name(d),
            input_per_mtok: deployment.price.base.input_per_mtok,
            output_per_mtok: deployment.price.base.output_per_mtok,
            limits: deployment.limits.into(),
            requests: c.requests,
            prompt_tokens: c.prompt_tokens,
            completion_tokens: c.completion_tokens,
            cost_usd: deployment.price.cost(c.prompt_tokens, c.completion_tokens),
            rate_limited: c.rate_limited,
            timeouts: c.timeouts,
            waits: c.waits,
            wait_ms: c.wait_ms,
            peak: LimitsReport {
                rpm: Some(peak.rpm),
                tpm: Some(peak.tpm),
                concurrency: Some(peak.in_flight),
            },
        }
    }

    fn baselines(&self, registry: &Registry, candidates: &[DeploymentId], cost: f64) -> Baselines {
        let priced: Vec<Baseline> = candidates
            .iter()
            .map(|&d| Baseline {
                deployment: registry.deployment_name(d),
                cost_usd: registry
                    .deployment(d)
                    .price
                    .cost(self.counts[d.0].baseline_prompt, self.completion_tokens),
            })
            .collect();
        let pick = |better: fn(f64, f64) -> bool| {
            priced
                .iter()
                .fold(None::<&Baseline>, |best, b| match best {
                    Some(x) if !better(b.cost_usd, x.cost_usd) => Some(x),
                    _ => Some(b),
                })
                .cloned()
                .unwrap_or_else(|| Baseline {
                    deployment: String::new(),
                    cost_usd: 0.0,
                })
        };
        let cheapest = pick(|a, b| a < b);
        let most_expensive = pick(|a, b| a > b);
        let savings_usd = most_expensive.cost_usd - cost;
        let savings_pct = if most_expensive.cost_usd > 0.0 {
            100.0 * savings_usd / most_expensive.cost_usd
        } else {
            0.0
        };
        Baselines {
            cheapest,
            most_expensive,
            savings_usd,
            savings_pct,
        }
    }
}
