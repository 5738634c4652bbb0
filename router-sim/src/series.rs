//! Per-minute counts of each deployment during a simulation: the time series behind
//! `llmroute simulate --html`.
//!
//! Minute 0 starts when the simulation starts. A served request counts in the minute its
//! provider accepted the call, so each deployment's minutes add up to its figures in the report.

use serde::Serialize;

use router_core::config::{DeploymentId, Registry};

/// Milliseconds in a simulated minute.
const MINUTE_MS: u64 = 60_000;

/// What one deployment did in one simulated minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Minute {
    /// Requests served whose call the provider accepted in this minute.
    pub requests: u64,
    /// Prompt tokens of those requests (the deployment's tokenizer's count).
    pub prompt_tokens: u64,
    /// Completion tokens of those requests.
    pub completion_tokens: u64,
    /// Tokens the provider counted against its TPM for the calls it accepted in this minute,
    /// as it counts them on arrival (timed-out calls included).
    pub counted_tokens: u64,
    /// Calls it refused with a 429 in this minute.
    pub rate_limited: u64,
}

/// One deployment's minutes, from the start of the simulation to its end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeploymentMinutes {
    /// `provider/model`.
    pub name: String,
    /// Its configured input tokens per 60 s (`itpm`), counted apart from `tpm`.
    pub itpm: Option<u64>,
    /// Its configured output tokens per 60 s (`otpm`), counted apart from `tpm`.
    pub otpm: Option<u64>,
    /// One entry per simulated minute; every deployment has as many.
    pub minutes: Vec<Minute>,
}

/// The minutes of every deployment while the simulation runs, indexed by deployment id.
#[derive(Debug)]
pub(crate) struct Recorder {
    start_ms: u64,
    per_deployment: Vec<Vec<Minute>>,
}

impl Recorder {
    /// A recorder for `registry`'s deployments, minute 0 starting at `start_ms`.
    pub(crate) fn new(registry: &Registry, start_ms: u64) -> Self {
        Self {
            start_ms,
            per_deployment: vec![Vec::new(); registry.deployments.len()],
        }
    }

    /// The minute of deployment `d` that holds the time `at_ms`.
    pub(crate) fn at(&mut self, d: DeploymentId, at_ms: u64) -> &mut Minute {
        let index = (at_ms.saturating_sub(self.start_ms) / MINUTE_MS) as usize;
        let minutes = &mut self.per_deployment[d.0];
        if minutes.len() <= index {
            minutes.resize(index + 1, Minute::default());
        }
        &mut minutes[index]
    }

    /// The minutes of `listed`, in that order, each padded to the whole simulation of
    /// `simulated_ms`.
    pub(crate) fn finish(
        mut self,
        registry: &Registry,
        listed: &[DeploymentId],
        simulated_ms: u64,
    ) -> Vec<DeploymentMinutes> {
        let longest = self.per_deployment.iter().map(Vec::len).max().unwrap_or(0);
        let count = longest
            .max(simulated_ms.div_ceil(MINUTE_MS) as usize)
            .max(1);
        listed
            .iter()
            .map(|&d| {
                let mut minutes = std::mem::take(&mut self.per_deployment[d.0]);
                minutes.resize(count, Minute::default());
                let limits = registry.deployment(d).limits;
                DeploymentMinutes {
                    name: registry.deployment_name(d),
                    itpm: limits.itpm.map(|v| v.get()),
                    otpm: limits.otpm.map(|v| v.get()),
                    minutes,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        let yaml = r#"
providers:
  - name: p
    api: anthropic
    base_url: http://localhost
    api_key_env: P_KEY
    models:
      - { name: a, price: { input: 1, output: 2 }, limits: { itpm: 100, otpm: 50 } }
      - { name: b, price: { input: 1, output: 2 } }
"#;
        Registry::from_yaml_str(yaml, "series.yaml").expect("valid test config")
    }

    #[test]
    fn counts_land_in_their_minute_and_every_deployment_spans_the_run() {
        let registry = registry();
        let mut recorder = Recorder::new(&registry, 1_000);
        recorder.at(DeploymentId(0), 1_000).requests += 1;
        recorder.at(DeploymentId(0), 60_999).requests += 1;
        recorder.at(DeploymentId(0), 61_000).rate_limited += 1;
        let listed = [DeploymentId(1), DeploymentId(0)];
        let series = recorder.finish(&registry, &listed, 150_000);
        assert_eq!(series[0].name, "p/b");
        assert_eq!(series[0].minutes, vec![Minute::default(); 3]);
        assert_eq!((series[1].itpm, series[1].otpm), (Some(100), Some(50)));
        let a = &series[1].minutes;
        assert_eq!(a.len(), 3);
        assert_eq!((a[0].requests, a[0].rate_limited), (2, 0));
        assert_eq!((a[1].requests, a[1].rate_limited), (0, 1));
    }
}
