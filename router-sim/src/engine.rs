//! The event loop: arrivals, calls, answers, waits, on a manual clock, each request run by the
//! SDK's own request flow.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::FutureExt;
use router_core::clock::{Clock, ManualClock};
use router_core::config::{DeploymentId, Features, Registry, Subject};
use router_core::estimate::{Accounting, Estimator};
use router_core::flow::{self, GiveUp, Next, Priority, Reached, Reports, Settle};
use router_core::ledger::{
    ActualUsage, Admission, Denial, Ledger, LedgerFuture, MemoryStore, Reservation, Verdict,
};
use router_core::retry::FailureKind;
use router_core::select;
use tokio::sync::broadcast;

use super::agenda::Agenda;
use super::profile::Traffic;
use super::provider::{Providers, REFUSAL_MS};
use super::request::{Outcome, Request};
use super::tally::Tally;
use super::{Profile, SimError, SimReport};

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
    let candidates = reachable(registry, &model);
    if candidates.is_empty() {
        let known = registry.known_models().into_iter().map(String::from);
        return Err(SimError::UnknownModel {
            model,
            known: known.collect(),
        });
    }
    let mut sim = Sim::new(registry, profile, (model.clone(), candidates));
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

/// Every deployment a request for `model` may reach: the model's, or for a routed alias those
/// of every rule's model, in configuration order.
fn reachable(registry: &Registry, model: &str) -> Vec<DeploymentId> {
    let Some(route) = registry.routes.get(model) else {
        return registry.resolve(model);
    };
    let mut all: Vec<DeploymentId> = route
        .rules
        .iter()
        .flat_map(|rule| registry.resolve(&rule.model))
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

#[derive(Debug)]
enum Event {
    Arrival,
    /// A wait for capacity ended: the waiting request of this ticket asks again, if the wait is
    /// still its latest (this generation); a wake-up may have ended it earlier.
    Retry(u64, u64),
    /// A provider call ended.
    Answer(Box<Request>, Outcome),
}

/// The whole simulated world.
#[derive(Debug)]
struct Sim<'r> {
    registry: &'r Registry,
    profile: &'r Profile,
    /// The model or routed alias every request asks for.
    model: String,
    /// Every deployment a request may reach.
    candidates: Vec<DeploymentId>,
    clock: ManualClock,
    ledger: MemoryStore,
    estimator: Estimator,
    reports: Reports,
    providers: Providers,
    traffic: Traffic,
    /// The router's jitter, apart from the traffic's draws.
    jitter: fastrand::Rng,
    agenda: Agenda<Event>,
    /// Requests waiting for capacity, by ticket: the request, its wait's generation, when it
    /// began and the deployment it waits for.
    parked: HashMap<u64, Parked>,
    /// The ledger's wake-ups for waiting tickets, delivered as the router delivers them.
    wakes: broadcast::Receiver<u64>,
    generation: u64,
    arrivals_end: u64,
    tally: Tally,
}

/// A request waiting for capacity.
#[derive(Debug)]
struct Parked {
    req: Box<Request>,
    generation: u64,
    since: u64,
    /// The deployment its wait is tallied against.
    on: Option<DeploymentId>,
}

/// The answer of an in-memory ledger call, which is ready at once.
fn ready<T>(future: LedgerFuture<'_, T>) -> Result<T, SimError> {
    future
        .now_or_never()
        .ok_or(SimError::Pending)?
        .map_err(Into::into)
}

impl<'r> Sim<'r> {
    fn new(
        registry: &'r Registry,
        profile: &'r Profile,
        (model, candidates): (String, Vec<DeploymentId>),
    ) -> Self {
        let clock = ManualClock::new(START_MS);
        let factor = profile.provider_headroom * (1.0 - profile.foreign_load);
        let deployments = registry.deployments.len();
        let ledger = MemoryStore::with_clock(registry, Arc::new(clock.clone()));
        let wakes = ledger.wakes().expect("the memory store sends wake-ups");
        Self {
            registry,
            profile,
            model,
            candidates,
            ledger,
            parked: HashMap::new(),
            wakes,
            generation: 0,
            clock,
            estimator: Estimator::new(registry),
            reports: Reports::new(deployments, registry.retry.max_cooldown),
            providers: Providers::new(registry, factor),
            traffic: Traffic::new(profile, START_MS),
            jitter: fastrand::Rng::with_seed(profile.seed ^ 0x9E37_79B9_7F4A_7C15),
            agenda: Agenda::new(),
            arrivals_end: START_MS + profile.duration_secs * 1000,
            tally: Tally::new(registry, START_MS),
        }
    }

    fn run(&mut self) -> Result<(), SimError> {
        self.next_arrival();
        while let Some((at, event)) = self.agenda.pop() {
            self.clock.set_ms(at);
            match event {
                Event::Arrival => self.arrive()?,
                Event::Retry(ticket, generation) => {
                    let current = self.parked.get(&ticket);
                    if current.is_some_and(|p| p.generation == generation)
                        && let Some(mut p) = self.parked.remove(&ticket)
                    {
                        let now = self.clock.now_ms();
                        if let Some(d) = p.on {
                            self.tally.waited(d, now.saturating_sub(p.since).max(1));
                        }
                        let next = p.req.flow.woke(now);
                        self.step(p.req, next)?;
                    }
                }
                Event::Answer(req, outcome) => self.answer(req, outcome)?,
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

    /// A new request: plan it as `Router::chat` does and start its flow.
    fn arrive(&mut self) -> Result<(), SimError> {
        self.next_arrival();
        let (o200k, output) = self.traffic.request();
        let priority = if self.traffic.batch() {
            Priority::Batch
        } else {
            Priority::Interactive
        };
        self.tally.requests += 1;
        let arrival = (self.clock.now_ms(), o200k, output);
        let candidates = self.route(o200k, priority)?;
        let mut req = Request::plan(
            self.registry,
            candidates,
            &self.estimator,
            (self.profile.max_tokens, priority),
            arrival,
        );
        // Tickets from the run's seed: the order of equal ranks never depends on the process.
        if let Some(t) = req.plan.need.line.as_mut() {
            t.id = self.jitter.u64(1..);
        }
        let next = req.flow.start();
        self.step(Box::new(req), next)
    }

    /// The candidates of a request of `o200k` prompt tokens and `priority`, routed as
    /// `Router::chat` routes (simulated requests have no tools, images or tenant).
    fn route(&self, o200k: u64, priority: Priority) -> Result<Vec<DeploymentId>, SimError> {
        let prompt_tokens = Request::prompt_size(o200k).base_tokens();
        let subject = Subject {
            prompt_tokens,
            features: Features::default(),
            tier: None,
            priority,
        };
        let (model, _) = self
            .registry
            .routes
            .resolve(&self.model, &subject)
            .map_err(|no| SimError::NoRoute {
                alias: no.alias,
                prompt_tokens,
            })?;
        Ok(self.registry.resolve(&model))
    }

    /// Performs the flow's steps until the request waits, calls, or ends.
    fn step(&mut self, mut req: Box<Request>, mut next: Next) -> Result<(), SimError> {
        loop {
            next = match next {
                Next::Admit(candidates) => self.admit(&mut req, &candidates)?,
                Next::Wait(wait) => {
                    let now = self.clock.now_ms();
                    let at = now + (wait.as_millis() as u64).max(1);
                    let ticket = req.ticket();
                    self.generation += 1;
                    self.agenda.push(at, Event::Retry(ticket, self.generation));
                    let on = req.waits_on.take();
                    let parked = Parked {
                        req,
                        generation: self.generation,
                        since: now,
                        on,
                    };
                    self.parked.insert(ticket, parked);
                    self.deliver_wakes();
                    return Ok(());
                }
                Next::Call(d) => return self.call(req, d),
                Next::Finish => return Ok(()),
                Next::GiveUp(why) => {
                    self.give_up(why, &req);
                    return Ok(());
                }
            };
        }
    }

    /// Admits on `candidates`, or reports the denial to the flow (tallying the wait it decides).
    fn admit(&mut self, req: &mut Request, candidates: &[DeploymentId]) -> Result<Next, SimError> {
        let need = req.plan.need_for(candidates);
        let denial = match ready(self.ledger.admit(&need, candidates))? {
            Admission::Granted(r) => {
                // Taken from a line, it woke the next in it.
                self.deliver_wakes();
                req.plan.next_reservation();
                let d = r.deployment;
                req.held = Some(r);
                return Ok(req.flow.admitted(d));
            }
            Admission::Denied(denial) => denial,
        };
        let next = req
            .flow
            .denied(&denial, self.clock.now_ms(), self.jitter.f64());
        if let Next::Wait(_) = next {
            let first = candidates.first().copied();
            req.waits_on = soonest(&denial).or(first);
            if !req.waited {
                req.waited = true;
                self.tally.requests_that_waited += 1;
            }
        }
        Ok(next)
    }

    /// Sends the admitted request to the simulated provider; its answer comes back later.
    fn call(&mut self, req: Box<Request>, d: DeploymentId) -> Result<(), SimError> {
        let now = self.clock.now_ms();
        let api = self.registry.provider_of(d).api;
        let prompt = crate::tokenized(api, req.o200k);
        // The provider's limiter counts as its real counterpart does: at arrival, a quarter of
        // the characters plus max_tokens (or the model's cap); or, corrected, what was used.
        let counted = match Accounting::of(api) {
            Accounting::AtArrival => {
                let cap = self.profile.max_tokens;
                req.o200k + cap.unwrap_or_else(|| self.registry.output_cap(d))
            }
            Accounting::Corrected => prompt + req.output,
        };
        let end = now + self.profile.latency.of(req.output);
        let deadline = req.plan.deadline_ms;
        let offered = self.providers.offer(d, now, counted, end);
        if offered.is_ok() {
            self.tally.accepted(d, now, counted);
        }
        let (at, outcome) = match offered {
            Ok(()) if end > deadline => (deadline.max(now), Outcome::TimedOut),
            Ok(()) => (
                end,
                Outcome::Served {
                    prompt,
                    accepted: now,
                },
            ),
            Err(retry_after) => (now + REFUSAL_MS, Outcome::RateLimited(retry_after)),
        };
        self.agenda.push(at, Event::Answer(req, outcome));
        Ok(())
    }

    /// A call ended: the flow says how to settle, what cooldown to put and what next.
    fn answer(&mut self, mut req: Box<Request>, outcome: Outcome) -> Result<(), SimError> {
        let Some(r) = req.held.take() else {
            return Ok(());
        };
        let d = r.deployment;
        let (kind, stated, reached) = match outcome {
            Outcome::Served { prompt, accepted } => {
                let _ = req.flow.answered();
                let api = self.registry.provider_of(d).api;
                let actual = Accounting::of(api).settlement(&r, prompt, req.output, 0);
                ready(self.ledger.settle(&r, actual))?;
                self.deliver_wakes();
                self.estimator
                    .record(d, req.plan.prompt, prompt, req.output);
                self.observe(d)?;
                let latency = self.clock.now_ms() - req.arrived;
                self.tally.ended(req.plan.priority, req.flow.waited());
                let tokens = (req.o200k, prompt, req.output);
                let (registry, candidates) = (self.registry, &req.candidates);
                let times = (accepted, latency);
                self.tally.served(registry, candidates, d, tokens, times);
                return Ok(());
            }
            Outcome::RateLimited(stated) => {
                self.tally.rate_limited(d, self.clock.now_ms());
                (FailureKind::RateLimited, Some(stated), Reached::Refusal)
            }
            Outcome::TimedOut => {
                self.tally.timed_out(d);
                (FailureKind::Transport, None, Reached::Unknown)
            }
        };
        let failure = flow::Failure {
            kind,
            stated,
            reached,
            output_sent: false,
        };
        let after = req
            .flow
            .failed(failure, self.clock.now_ms(), self.jitter.f64());
        self.settle(&r, after.settle)?;
        if reached == Reached::Refusal {
            self.observe(d)?;
        }
        if let Some(c) = after.cooldown {
            ready(self.ledger.cooldown(c.deployment, c.duration))?;
        }
        req.last_kind = Some(kind);
        self.step(req, after.next)
    }

    fn settle(&mut self, r: &Reservation, how: Settle) -> Result<(), SimError> {
        let settled = self.settle_only(r, how);
        self.deliver_wakes();
        settled
    }

    /// Ends the wait of each waiting request the ledger woke: it asks again now, as the
    /// router's requests do when their store wakes them.
    fn deliver_wakes(&mut self) {
        let now = self.clock.now_ms();
        while let Ok(ticket) = self.wakes.try_recv() {
            if let Some(p) = self.parked.get_mut(&ticket) {
                self.generation += 1;
                p.generation = self.generation;
                self.agenda.push(now, Event::Retry(ticket, self.generation));
            }
        }
    }

    fn settle_only(&mut self, r: &Reservation, how: Settle) -> Result<(), SimError> {
        let actual = match how {
            Settle::Release => return ready(self.ledger.release(r)).map(drop),
            Settle::Refused => ActualUsage::tokens(0),
            Settle::Estimate | Settle::Reported => ActualUsage {
                tokens: r.tokens,
                input_tokens: r.input_tokens,
                cost_micros: 0,
            },
        };
        ready(self.ledger.settle(r, actual)).map(drop)
    }

    fn give_up(&mut self, why: GiveUp, req: &Request) {
        self.tally.ended(req.plan.priority, req.flow.waited());
        match why {
            GiveUp::LastFailure if req.last_kind == Some(FailureKind::Transport) => {
                self.tally.failed_timeout += 1;
            }
            GiveUp::LastFailure => self.tally.failed_retries += 1,
            GiveUp::NoCapacity { .. } | GiveUp::Budget { .. } => {
                self.tally.failed_no_capacity += 1;
            }
        }
    }

    /// Sends the simulated provider's rate-limit headers to the ledger when [`Reports`] says
    /// they are worth a call, as the SDK does.
    fn observe(&mut self, d: DeploymentId) -> Result<(), SimError> {
        let now = self.clock.now_ms();
        let Some(observation) = self.providers.headers(d, now) else {
            return Ok(());
        };
        let limits = self.registry.deployment(d).limits;
        match self.reports.to_send(d, observation, limits, now) {
            Some(sent) => ready(self.ledger.observe(d, sent)),
            None => Ok(()),
        }
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
