//! Simulated providers: their own books of what they accepted, apart from the ledger.
//!
//! Each limited scope (a deployment, a provider-wide limit) keeps an exact sliding log of the
//! requests it accepted in the last 60 s with their real tokens, and the end times of those in
//! flight. A request is accepted only if every scope it falls under has room for it, else it is
//! refused with the time until they would have: the `Retry-After` of a 429.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use router_core::config::{Api, DeploymentId, Limits, Registry};
use router_core::ledger::Observation;

/// How long a provider takes to refuse a request with a 429, in ms.
pub const REFUSAL_MS: u64 = 100;

/// The providers' window, ms.
const WINDOW_MS: u64 = 60_000;

/// The most a provider's window held of llmroute's traffic at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Peak {
    pub(crate) rpm: u64,
    pub(crate) tpm: u64,
    pub(crate) in_flight: u64,
}

/// One limited scope as the provider enforces it.
#[derive(Debug)]
struct Scope {
    rpm: Option<u64>,
    tpm: Option<u64>,
    concurrency: Option<u64>,
    /// Accepted requests in the window: (time, tokens), oldest first.
    log: VecDeque<(u64, u64)>,
    tokens: u64,
    /// When the requests in flight end.
    ends: BinaryHeap<Reverse<u64>>,
    peak: Peak,
}

impl Scope {
    /// A scope enforcing `limits` scaled by `factor` (rounded down).
    fn new(limits: Limits, factor: f64) -> Self {
        let scale = |l: Option<std::num::NonZeroU64>| l.map(|l| (l.get() as f64 * factor) as u64);
        Self {
            rpm: scale(limits.rpm),
            tpm: scale(limits.tpm),
            concurrency: scale(limits.concurrency),
            log: VecDeque::new(),
            tokens: 0,
            ends: BinaryHeap::new(),
            peak: Peak::default(),
        }
    }

    /// Forgets what left the window or finished by `now`.
    fn reap(&mut self, now: u64) {
        while let Some(&(at, tokens)) = self.log.front() {
            if at + WINDOW_MS > now {
                break;
            }
            self.log.pop_front();
            self.tokens -= tokens;
        }
        while self.ends.peek().is_some_and(|Reverse(end)| *end <= now) {
            self.ends.pop();
        }
    }

    /// Ms until a request of `tokens` would fit (0: it fits now). Call after `reap`.
    fn wait(&self, now: u64, tokens: u64) -> u64 {
        let leaves =
            |entry: Option<&(u64, u64)>| entry.map_or(WINDOW_MS, |(at, _)| at + WINDOW_MS - now);
        let mut wait = 0;
        if let Some(rpm) = self.rpm
            && self.log.len() as u64 >= rpm
        {
            // The oldest requests must leave until one fewer than the limit remain.
            wait = wait.max(leaves(self.log.get(self.log.len() - rpm as usize)));
        }
        if let Some(tpm) = self.tpm
            && self.tokens + tokens > tpm
        {
            let mut left = self.tokens;
            let freeing = self.log.iter().find(|(_, t)| {
                left -= t;
                left + tokens <= tpm
            });
            wait = wait.max(leaves(freeing));
        }
        if let Some(concurrency) = self.concurrency
            && self.ends.len() as u64 >= concurrency
        {
            let first = self.ends.peek().map(|Reverse(end)| end - now);
            wait = wait.max(first.filter(|_| concurrency > 0).unwrap_or(WINDOW_MS));
        }
        wait
    }

    /// Counts an accepted request of `tokens` that ends at `end`.
    fn take(&mut self, now: u64, tokens: u64, end: u64) {
        self.log.push_back((now, tokens));
        self.tokens += tokens;
        self.ends.push(Reverse(end));
        self.peak.rpm = self.peak.rpm.max(self.log.len() as u64);
        self.peak.tpm = self.peak.tpm.max(self.tokens);
        self.peak.in_flight = self.peak.in_flight.max(self.ends.len() as u64);
    }

    /// What remains, and when the window is empty again, as rate-limit headers say it.
    fn remaining(&self, now: u64) -> Observation {
        let reset =
            Duration::from_millis(self.log.back().map_or(0, |(at, _)| at + WINDOW_MS - now));
        let requests = self.log.len() as u64;
        Observation {
            requests: self.rpm.map(|l| (l.saturating_sub(requests), reset)),
            tokens: self.tpm.map(|l| (l.saturating_sub(self.tokens), reset)),
            ..Observation::default()
        }
    }
}

/// Every simulated provider: one scope per deployment, one per provider with provider-wide
/// limits.
#[derive(Debug)]
pub(crate) struct Providers {
    deployments: Vec<Scope>,
    /// Per deployment, the index of its provider-wide scope, if any.
    shared: Vec<Option<usize>>,
    providers: Vec<Scope>,
    /// Per deployment, whether its provider sends rate-limit headers.
    headers: Vec<bool>,
}

impl Providers {
    /// The providers of `registry`, enforcing its limits scaled by `factor`.
    pub(crate) fn new(registry: &Registry, factor: f64) -> Self {
        let mut providers = Vec::new();
        let provider_scope: Vec<Option<usize>> = registry
            .providers
            .iter()
            .map(|p| {
                (!p.limits.is_unlimited()).then(|| {
                    providers.push(Scope::new(p.limits, factor));
                    providers.len() - 1
                })
            })
            .collect();
        let ds = &registry.deployments;
        Self {
            deployments: ds.iter().map(|d| Scope::new(d.limits, factor)).collect(),
            shared: ds.iter().map(|d| provider_scope[d.provider.0]).collect(),
            providers,
            headers: ds
                .iter()
                .map(|d| registry.provider(d.provider).api != Api::Gemini)
                .collect(),
        }
    }

    /// Offers deployment `d` a request of `tokens` that, if accepted, runs until `end`. `Err` is
    /// a 429 with its `Retry-After` (whole seconds, at least one).
    pub(crate) fn offer(
        &mut self,
        d: DeploymentId,
        now: u64,
        tokens: u64,
        end: u64,
    ) -> Result<(), Duration> {
        let shared = self.shared[d.0];
        let mut wait = 0;
        for scope in self.scopes(d, shared) {
            scope.reap(now);
            wait = wait.max(scope.wait(now, tokens));
        }
        if wait > 0 {
            return Err(Duration::from_secs(wait.div_ceil(1000).max(1)));
        }
        for scope in self.scopes(d, shared) {
            scope.take(now, tokens, end);
        }
        Ok(())
    }

    fn scopes(
        &mut self,
        d: DeploymentId,
        shared: Option<usize>,
    ) -> impl Iterator<Item = &mut Scope> {
        let own = self.deployments.get_mut(d.0);
        let provider = shared.and_then(|p| self.providers.get_mut(p));
        own.into_iter().chain(provider)
    }

    /// The rate-limit headers deployment `d`'s provider answers with, if it sends any.
    pub(crate) fn headers(&mut self, d: DeploymentId, now: u64) -> Option<Observation> {
        let scope = self
            .deployments
            .get_mut(d.0)
            .filter(|_| self.headers[d.0])?;
        scope.reap(now);
        Some(scope.remaining(now))
    }

    /// The most deployment `d`'s own window and slots held.
    pub(crate) fn peak(&self, d: DeploymentId) -> Peak {
        self.deployments
            .get(d.0)
            .map_or_else(Peak::default, |s| s.peak)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU64;

    fn limits(rpm: u64, tpm: u64, concurrency: u64) -> Limits {
        Limits {
            rpm: NonZeroU64::new(rpm),
            tpm: NonZeroU64::new(tpm),
            concurrency: NonZeroU64::new(concurrency),
            ..Limits::default()
        }
    }

    #[test]
    fn each_limit_refuses_until_its_window_frees() {
        let mut s = Scope::new(limits(2, 0, 0), 1.0);
        s.take(1_000, 10, 2_000);
        s.take(5_000, 10, 6_000);
        s.reap(10_000);
        assert_eq!(s.wait(10_000, 10), 51_000);
        s.reap(61_000);
        assert_eq!(s.wait(61_000, 10), 0);

        let mut s = Scope::new(limits(0, 100, 0), 1.0);
        s.take(0, 60, 1);
        s.take(30_000, 30, 30_001);
        s.reap(40_000);
        assert_eq!(s.wait(40_000, 10), 0);
        assert_eq!(s.wait(40_000, 20), 20_000);
        assert_eq!(s.wait(40_000, 80), 50_000);
        assert_eq!(s.wait(40_000, 101), WINDOW_MS);

        let mut s = Scope::new(limits(0, 0, 2), 1.0);
        s.take(0, 1, 700);
        s.take(0, 1, 500);
        s.reap(100);
        assert_eq!(s.wait(100, 1), 400);
        s.reap(500);
        assert_eq!(s.wait(500, 1), 0);
    }

    #[test]
    fn a_factor_scales_what_is_enforced() {
        let mut s = Scope::new(limits(10, 0, 0), 0.5);
        for t in 0..5 {
            s.take(t, 1, t + 1);
        }
        assert!(s.wait(10, 1) > 0);
        assert_eq!(s.peak.rpm, 5);
    }
}
