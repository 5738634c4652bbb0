//! The traffic profile: how many requests, when, how large; and the random draws behind it.

use serde::Serialize;

use super::SimError;

/// The most requests one simulation may generate on average (`rps x duration`).
const MAX_REQUESTS: f64 = 10_000_000.0;

/// Mean length of one burst plus the silence after it, in ms.
const BURST_CYCLE_MS: f64 = 60_000.0;

/// A token-count distribution: log-normal with this mean and spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenSize {
    /// Mean tokens (at least 1).
    pub mean: u64,
    /// Coefficient of variation (standard deviation / mean); 0 means every request has `mean`.
    pub spread: f64,
}

/// How long a provider takes to answer an accepted request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Time to the first token (network, queueing, prompt processing), in ms.
    pub base_ms: u64,
    /// Time per completion token, in ms.
    pub per_token_ms: f64,
}

impl Latency {
    /// Milliseconds to answer with `completion` tokens.
    pub fn of(&self, completion: u64) -> u64 {
        self.base_ms + (self.per_token_ms * completion as f64).round() as u64
    }
}

/// A synthetic traffic profile and the simulated providers' behaviour. See the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// Mean requests per second.
    pub rps: f64,
    /// Seconds of arrivals (the simulation then runs until every request has ended).
    pub duration_secs: u64,
    /// Prompt size, in o200k tokens (each provider's tokenizer ratio applies on top).
    pub prompt: TokenSize,
    /// Completion size, before any `max_tokens` cap.
    pub output: TokenSize,
    /// `max_tokens` sent with every request: caps completions and their estimate, and is what
    /// OpenAI-compatible and Gemini providers count against TPM for the output (`None`: the
    /// model's `max_output_tokens`). Default 1024, as applications usually set one.
    pub max_tokens: Option<u64>,
    /// 0: Poisson arrivals. B > 0: bursts at (1 + B) x `rps`, silent in between, same mean.
    pub burstiness: f64,
    /// Model or alias requested; `None`: the configuration's `defaults.model`.
    pub model: Option<String>,
    /// Seed of every random draw.
    pub seed: u64,
    /// Share of each provider limit used by traffic outside llmroute, in `[0, 1)`.
    pub foreign_load: f64,
    /// Factor on the configured limits giving what providers really enforce (1: the same).
    pub provider_headroom: f64,
    /// Provider answer times.
    pub latency: Latency,
    /// Share of the requests sent as batch ones, in `[0, 1]` (the rest are interactive).
    pub batch_share: f64,
}

impl Default for Profile {
    fn default() -> Self {
        Self {
            rps: 10.0,
            duration_secs: 600,
            prompt: TokenSize {
                mean: 1000,
                spread: 0.5,
            },
            output: TokenSize {
                mean: 300,
                spread: 0.5,
            },
            max_tokens: Some(1024),
            burstiness: 0.0,
            model: None,
            seed: 1,
            foreign_load: 0.0,
            provider_headroom: 1.0,
            latency: Latency {
                base_ms: 500,
                per_token_ms: 10.0,
            },
            batch_share: 0.0,
        }
    }
}

impl Profile {
    /// Checks every value is in range; the message names the field.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |what: String| Err(SimError::Profile(what));
        let finite_non_negative = |x: f64| x.is_finite() && x >= 0.0;
        if !(self.rps.is_finite() && self.rps > 0.0) {
            return bad(format!("rps must be above 0, got {}", self.rps));
        }
        if self.duration_secs == 0 {
            return bad("duration must be at least 1 s".into());
        }
        if self.rps * self.duration_secs as f64 > MAX_REQUESTS {
            return bad(format!(
                "rps x duration is {:.0} requests; at most {MAX_REQUESTS:.0} per simulation",
                self.rps * self.duration_secs as f64
            ));
        }
        for (name, size) in [("prompt", self.prompt), ("output", self.output)] {
            if size.mean == 0 {
                return bad(format!("{name} tokens must be at least 1"));
            }
            if !finite_non_negative(size.spread) {
                return bad(format!(
                    "{name} spread must be 0 or more, got {}",
                    size.spread
                ));
            }
        }
        if self.max_tokens == Some(0) {
            return bad("max_tokens must be at least 1".into());
        }
        if !finite_non_negative(self.burstiness) {
            return bad(format!(
                "burstiness must be 0 or more, got {}",
                self.burstiness
            ));
        }
        if !(finite_non_negative(self.foreign_load) && self.foreign_load < 1.0) {
            return bad(format!(
                "foreign load must be in [0, 1), got {}",
                self.foreign_load
            ));
        }
        if !(self.provider_headroom.is_finite() && self.provider_headroom > 0.0) {
            return bad(format!(
                "provider headroom must be above 0, got {}",
                self.provider_headroom
            ));
        }
        if !(finite_non_negative(self.batch_share) && self.batch_share <= 1.0) {
            return bad(format!(
                "batch share must be in [0, 1], got {}",
                self.batch_share
            ));
        }
        if !finite_non_negative(self.latency.per_token_ms) {
            return bad(format!(
                "latency per token must be 0 or more, got {}",
                self.latency.per_token_ms
            ));
        }
        Ok(())
    }
}

/// The traffic source: arrival times and request sizes, from one seeded generator.
#[derive(Debug)]
pub(crate) struct Traffic {
    rng: fastrand::Rng,
    prompt: TokenSize,
    output: TokenSize,
    max_tokens: Option<u64>,
    batch_share: f64,
    /// Mean gap between arrivals during a burst, ms.
    gap_ms: f64,
    /// Mean burst and silence lengths, ms; `None` for steady Poisson arrivals.
    phases: Option<(f64, f64)>,
    /// The last arrival, ms (kept fractional so rounding never biases the rate).
    t: f64,
    /// When the current burst ends, ms (infinite for steady arrivals).
    burst_end: f64,
}

impl Traffic {
    /// Traffic for `profile` starting at `start_ms`.
    pub(crate) fn new(profile: &Profile, start_ms: u64) -> Self {
        let b = profile.burstiness;
        let mut traffic = Self {
            rng: fastrand::Rng::with_seed(profile.seed),
            prompt: profile.prompt,
            output: profile.output,
            max_tokens: profile.max_tokens,
            batch_share: profile.batch_share,
            gap_ms: 1000.0 / (profile.rps * (1.0 + b)),
            phases: (b > 0.0).then(|| (BURST_CYCLE_MS / (1.0 + b), BURST_CYCLE_MS * b / (1.0 + b))),
            t: start_ms as f64,
            burst_end: f64::INFINITY,
        };
        if let Some((on, _)) = traffic.phases {
            traffic.burst_end = traffic.t + traffic.exp(on);
        }
        traffic
    }

    /// The next arrival time, ms.
    pub(crate) fn next_arrival(&mut self) -> u64 {
        loop {
            let t = self.t + self.exp(self.gap_ms);
            if t < self.burst_end {
                self.t = t;
                return t.round() as u64;
            }
            // The burst ended first: skip the silence; arrivals are memoryless, so draw afresh.
            let (on, off) = self.phases.unwrap_or((f64::INFINITY, 0.0));
            self.t = self.burst_end + self.exp(off);
            self.burst_end = self.t + self.exp(on);
        }
    }

    /// A request's prompt (o200k tokens) and real completion size.
    pub(crate) fn request(&mut self) -> (u64, u64) {
        let prompt = self.size(self.prompt);
        let output = self.size(self.output);
        (
            prompt,
            self.max_tokens.map_or(output, |cap| output.min(cap)),
        )
    }

    /// Whether the next request is a batch one (no draw without batch traffic, so that runs
    /// without it keep their sequence).
    pub(crate) fn batch(&mut self) -> bool {
        self.batch_share > 0.0 && self.rng.f64() < self.batch_share
    }

    /// An exponential draw with this mean.
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.rng.f64()).ln()
    }

    /// A log-normal draw with this mean and coefficient of variation, at least 1.
    fn size(&mut self, size: TokenSize) -> u64 {
        if size.spread == 0.0 {
            return size.mean;
        }
        let s2 = (1.0 + size.spread * size.spread).ln();
        let mu = (size.mean as f64).ln() - s2 / 2.0;
        // Box-Muller: one standard normal from two uniforms.
        let (u1, u2) = (1.0 - self.rng.f64(), self.rng.f64());
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let x = (mu + s2.sqrt() * z).exp().round();
        x.clamp(1.0, u32::MAX as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_average_the_rate_with_or_without_bursts() {
        for burstiness in [0.0, 1.0, 4.0] {
            let profile = Profile {
                rps: 20.0,
                burstiness,
                ..Profile::default()
            };
            let mut traffic = Traffic::new(&profile, 0);
            let n = std::iter::repeat_with(|| traffic.next_arrival())
                .take_while(|&t| t < 36_000_000)
                .count() as f64;
            let want = 20.0 * 36_000.0;
            assert!(
                (n - want).abs() < want * 0.05,
                "{burstiness}: {n} vs {want}"
            );
        }
    }

    #[test]
    fn sizes_have_the_mean_asked_for_and_respect_max_tokens() {
        let profile = Profile {
            max_tokens: Some(400),
            ..Profile::default()
        };
        let mut traffic = Traffic::new(&profile, 0);
        let draws: Vec<_> = (0..100_000).map(|_| traffic.request()).collect();
        let mean = draws.iter().map(|d| d.0 as f64).sum::<f64>() / draws.len() as f64;
        assert!((mean - 1000.0).abs() < 20.0, "prompt mean {mean}");
        assert!(draws.iter().all(|d| d.1 <= 400 && d.1 >= 1));
    }

    #[test]
    fn out_of_range_values_are_named() {
        let bad = Profile {
            foreign_load: 1.0,
            ..Profile::default()
        };
        let err = bad.validate().expect_err("foreign load 1 is invalid");
        assert!(err.to_string().contains("foreign load"), "{err}");
        assert!(Profile::default().validate().is_ok());
    }
}
