//! The event loop: arrivals, admissions, calls, answers, waits, on a manual clock.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::agenda::Agenda;
use super::profile::Traffic;
use super::provider::{Providers, REFUSAL_MS};
use super::request::{Outcome, Request};
use super::tally::Tally;
use super::{Profile, SimError, SimReport};
use crate::clock::{Clock, ManualClock};
use crate::config::{DeploymentId, Registry};
use crate::estimate::{self, OutputEstimator};
use crate::ledger::{
    ActualUsage, Admission, Denial, Ledger, LedgerFuture, MemoryStore, Reservation, Verdict,
};
use crate::retry::{FailureKind, OnDenied, OnFailure, RetryPolicy};
use crate::select;

/// Where the virtual clock starts: a whole second, so the ledger's buckets line up with it.
const START_MS: u64 = 1_700_000_000_000;

/// Simulates `profile`'s traffic through the routing core against simulated providers enforcing
/// `registry`'s limits. Deterministic: the same registry, profile and seed give the same report.
pub fn run(registry: &Registry, profile: &Profile) -> Result<SimReport, SimError> {
    profile.validate()?;
    let model = profile
        .model
        .clone()
        .or_else(|| registry.defaults.model.clone())
        .ok_or(SimError::NoModel)?;
    let candidates = registry.resolve(&model);
    if candidates.is_empty() {
        let known = registry.known_models().into_iter().map(String::from);
        return Err(SimError::UnknownModel {
            model,
            known: known.collect(),
        });
    }
    let mut sim = Sim::new(registry, profile, candidates);
    sim.run()?;
    let end = sim.clock.now_ms().saturating_sub(START_MS);
    // Listed cheapest first for a request of the mean size.
    let (prompt, output) = (profile.prompt.mean, profile.output.mean);
    let listed: Vec<DeploymentId> = select::rank(registry, &sim.candidates, prompt, output)
        .into_iter()
        .map(|r| r.deployment)
        .collect();
    let head = (model, profile.clone(), end);
    Ok(sim.tally.report(registry, &listed, &sim.providers, head))
}

#[derive(Debug)]
enum Event {
    Arrival,
    /// A wait for capacity ended.
    Retry(Box<Request>),
    /// A provider call ended.
    Answer(Box<Request>, Reservation, Outcome),
}

/// The whole simulated world.
#[derive(Debug)]
struct Sim<'r> {
    registry: &'r Registry,
    profile: &'r Profile,
    candidates: Vec<DeploymentId>,
    clock: ManualClock,
    ledger: MemoryStore,
    policy: RetryPolicy,
    outputs: OutputEstimator,
    providers: Providers,
    traffic: Traffic,
    /// The router's jitter, apart from the traffic's draws.
    jitter: fastrand::Rng,
    agenda: Agenda<Event>,
    arrivals_end: u64,
    tally: Tally,
}

/// The answer of an in-memory ledger call, which is ready at once.
fn ready<T>(future: LedgerFuture<'_, T>) -> Result<T, SimError> {
    future
        .now_or_never()
        .ok_or(SimError::Pending)?
        .map_err(Into::into)
}

impl<'r> Sim<'r> {
    fn new(registry: &'r Registry, profile: &'r Profile, candidates: Vec<DeploymentId>) -> Self {
        let clock = ManualClock::new(START_MS);
        let factor = profile.provider_headroom * (1.0 - profile.foreign_load);
        let deployments = registry.deployments.len();
        Self {
            registry,
            profile,
            candidates,
            ledger: MemoryStore::with_clock(registry, Arc::new(clock.clone())),
            clock,
            policy: RetryPolicy::new(registry.retry),
            outputs: OutputEstimator::new(deployments, registry.defaults.output_tokens),
            providers: Providers::new(registry, factor),
            traffic: Traffic::new(profile, START_MS),
            jitter: fastrand::Rng::with_seed(profile.seed ^ 0x9E37_79B9_7F4A_7C15),
            agenda: Agenda::new(),
            arrivals_end: START_MS + profile.duration_secs * 1000,
            tally: Tally::new(registry),
        }
    }

    fn run(&mut self) -> Result<(), SimError> {
        self.next_arrival();
        while let Some((at, event)) = self.agenda.pop() {
            self.clock.set_ms(at);
            match event {
                Event::Arrival => self.arrive()?,
                Event::Retry(req) => self.acquire(req)?,
                Event::Answer(req, r, outcome) => self.answer(req, r, outcome)?,
            }
        }
        Ok(())
    }

    fn next_arrival(&mut self) {
        let at = self.traffic.next_arrival();
        if at < self.arrivals_end {
            self.agenda.push(at, Event::Arrival);
        }
    }

    /// A new request: plan it as `Router::plan` does and try to admit it.
    fn arrive(&mut self) -> Result<(), SimError> {
        self.next_arrival();
        let (o200k, output) = self.traffic.request();
        self.tally.requests += 1;
        let arrival = (self.clock.now_ms(), o200k, output);
        let req = Request::plan(
            self.registry,
            &self.candidates,
            &self.outputs,
            self.profile.max_tokens,
            arrival,
        );
        self.acquire(Box::new(req))
    }

    /// `Router::acquire`: admit on the cheapest candidate with room, else wait or give up.
    fn acquire(&mut self, mut req: Box<Request>) -> Result<(), SimError> {
        let now = self.clock.now_ms();
        if now >= req.deadline {
            // No time is left for a call: the SDK's would time out at once.
            self.tally.failed_timeout += 1;
            return Ok(());
        }
        let denial = match ready(self.ledger.admit(&req.need, &req.ranked))? {
            Admission::Granted(r) => return self.call(req, r),
            Admission::Denied(denial) => denial,
        };
        let remaining = Duration::from_millis(req.deadline - now);
        let unit = self.jitter.f64();
        match self.policy.on_denied(denial.retry_after(), remaining, unit) {
            OnDenied::Wait(wait) => {
                let wait = wait.max(Duration::from_millis(1)).as_millis() as u64;
                self.tally
                    .waited(soonest(&denial).unwrap_or(req.ranked[0]), wait);
                if !req.waited {
                    req.waited = true;
                    self.tally.requests_that_waited += 1;
                }
                self.agenda.push(now + wait, Event::Retry(req));
            }
            OnDenied::GiveUp => self.tally.failed_no_capacity += 1,
        }
        Ok(())
    }

    /// Sends the admitted request to the simulated provider; its answer comes back later.
    fn call(&mut self, mut req: Box<Request>, r: Reservation) -> Result<(), SimError> {
        let now = self.clock.now_ms();
        let d = r.deployment;
        req.calls += 1;
        let prompt = estimate::scale(self.registry.provider_of(d).api, req.o200k);
        let end = now + self.profile.latency.of(req.output);
        let (at, outcome) = match self.providers.offer(d, now, prompt + req.output, end) {
            Ok(()) if end > req.deadline => (req.deadline, Outcome::TimedOut),
            Ok(()) => (end, Outcome::Served { prompt }),
            Err(retry_after) => (now + REFUSAL_MS, Outcome::RateLimited(retry_after)),
        };
        self.agenda.push(at, Event::Answer(req, r, outcome));
        Ok(())
    }

    /// A call ended: settle, follow the headers, and on failure cool down and fail over.
    fn answer(&mut self, req: Box<Request>, r: Reservation, out: Outcome) -> Result<(), SimError> {
        let d = r.deployment;
        match out {
            Outcome::Served { prompt } => {
                let actual = ActualUsage::tokens(prompt + req.output);
                ready(self.ledger.settle(&r, actual))?;
                self.outputs.record(d, req.output);
                self.observe(d)?;
                let latency = self.clock.now_ms() - req.arrived;
                let tokens = (req.o200k, prompt, req.output);
                let (registry, candidates) = (self.registry, &self.candidates);
                self.tally.served(registry, candidates, d, tokens, latency);
                Ok(())
            }
            Outcome::RateLimited(stated) => {
                // The provider saw the request and refused it: no tokens.
                ready(self.ledger.settle(&r, ActualUsage::tokens(0)))?;
                self.observe(d)?;
                self.tally.rate_limited(d);
                self.fail(req, d, FailureKind::RateLimited, Some(stated))
            }
            Outcome::TimedOut => {
                // Tokens were probably spent: count what was reserved.
                ready(self.ledger.settle(&r, ActualUsage::tokens(r.tokens)))?;
                self.tally.timed_out(d);
                self.fail(req, d, FailureKind::Transport, None)
            }
        }
    }

    /// `Router::fail` after settlement: shared cooldown, then fail over or give up.
    fn fail(
        &mut self,
        req: Box<Request>,
        d: DeploymentId,
        kind: FailureKind,
        stated: Option<Duration>,
    ) -> Result<(), SimError> {
        let unit = self.jitter.f64();
        if let Some(cooldown) = self.policy.cooldown(req.calls, kind, stated, unit) {
            ready(self.ledger.cooldown(d, cooldown))?;
        }
        match self.policy.on_failure(req.calls, kind, stated, unit) {
            OnFailure::FailOver { .. } => return self.acquire(req),
            OnFailure::Return if kind == FailureKind::Transport => self.tally.failed_timeout += 1,
            OnFailure::Return => self.tally.failed_retries += 1,
        }
        Ok(())
    }

    /// `Router::observe`: follow the provider's rate-limit headers where they say less remains
    /// than the configured limit.
    fn observe(&mut self, d: DeploymentId) -> Result<(), SimError> {
        let Some(observation) = self.providers.headers(d, self.clock.now_ms()) else {
            return Ok(());
        };
        let limits = self.registry.deployment(d).limits;
        let matters = |reported: Option<(u64, Duration)>, limit: Option<std::num::NonZeroU64>| {
            reported.is_some_and(|(left, _)| left == 0 || limit.is_some_and(|l| left < l.get()))
        };
        if matters(observation.requests, limits.rpm) || matters(observation.tokens, limits.tpm) {
            ready(self.ledger.observe(d, observation))?;
        }
        Ok(())
    }
}

/// The candidate a wait is for: the one whose refusal ends first (the cheapest among equals).
fn soonest(denial: &Denial) -> Option<DeploymentId> {
    denial
        .refusals
        .iter()
        .filter_map(|r| match r.verdict {
            Verdict::NotNow(after) => Some((after, r.deployment)),
            _ => None,
        })
        .min_by_key(|&(after, _)| after)
        .map(|(_, d)| d)
}
