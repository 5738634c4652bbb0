//! A model of the resilient ledger: two to four instances, each a [`Machine`] driven as the
//! driver drives it (`model/node.rs`), share one simulated store (`model/store.rs`) through
//! random admissions, answers, settlements, clock moves and store faults.
//!
//! Two promises are checked:
//!
//! - **Within the limits.** Across every instance, the requests and tokens admitted in any
//!   minute (61 one-second buckets, as the ledger counts them) never exceed the deployment's
//!   RPM and TPM: before, during and after outages. A released request does not count; a
//!   settled one counts what it used (at most its estimate).
//! - **Nothing left behind.** Once the store answers again and every request has finished,
//!   every machine admits through the store and holds nothing: no request in flight, no local
//!   log, no call out, no restore to send again.
//!
//! The world: every instance starts (two heartbeats) before the first step, and none leaves.
//! Heartbeats run when their timer says ([`Machine::poll_timeout`]). Admissions out are
//! answered before the clock moves (an answer takes at most `timeout_ms`). An outage lasts at
//! least a heartbeat, so every instance sees a beat fail before the store answers again: one
//! shorter can go unnoticed by an idle instance, a gap docs/resilience.md states. The worlds
//! also stay clear of the [`Gaps`] this model found.

mod gaps;
mod node;
mod store;

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::ledger::window::Dim;
use node::Node;
use store::{Call, Store};

const D: DeploymentId = DeploymentId(0);
const RPM: u64 = 12;
const TPM: u64 = 120;
const HEARTBEAT: u64 = 1_000;
/// The latest an instance's driver wakes after the time it asked for (ms).
const MAX_LAG: u64 = 300;
const T0: u64 = 1_000_000_000;

/// Where the ledger's promise did not hold: each was found by this model, and
/// `model/gaps.rs` keeps one scenario of each. The random worlds stay clear of those still
/// open (see [`Gaps::CLOSED`]).
#[derive(Debug, Clone, Copy, Default)]
struct Gaps {
    /// An admission whose answer is a timeout may wait, unanswered, while another puts its
    /// instance local (else it is answered at once). The local ledger granted it by the slot
    /// it held for the call, beyond the instance's share, until a call sent again answered
    /// the first before it was decided (closed).
    timeouts_wait: bool,
    /// The store may stop answering whatever the instances admitted through it since their
    /// last reading. Else it stops at once only if each would start local mode within its
    /// share ([`World::within_shares`]), and otherwise on the next heartbeat, once every
    /// instance has read the windows (calls out may be answered after). What one instance
    /// admitted beyond its share since its reading is in no other's local ledger.
    down_between_readings: bool,
    /// A restore may be carried out and its answer lost. The restore took the instance out of
    /// the rejoin set, so the others went back to the store, while the instance admitted on
    /// its own again, until it admitted nothing before its restore was answered
    /// (`Machine::restore_failed`, closed).
    lost_restore_replies: bool,
    /// The store may stop again before every instance has beaten since it came back. An
    /// instance that beat in that short spell left the rejoin set, which another instance
    /// still away kept non-empty; in the next outage the first one had admitted on its own
    /// again, unheard. The first instance back found the set non-empty, so it added no one:
    /// it rejoined at once, while the other's admissions were not written back yet. Closed by
    /// the rejoin hash: an instance waits for every other that has not said it holds nothing
    /// since it last said it held something.
    short_ups: bool,
}

impl Gaps {
    /// The gaps found and closed since: the random worlds go through them too.
    const CLOSED: Gaps = Gaps {
        timeouts_wait: true,
        down_between_readings: false,
        lost_restore_replies: true,
        short_ups: true,
    };
}

#[derive(Debug, Clone)]
enum Step {
    /// `times` requests of `tokens` each on instance `node` (modulo their number).
    Admit {
        node: usize,
        tokens: u64,
        times: usize,
    },
    /// Instance `node`'s oldest admission out is answered.
    Answer { node: usize },
    /// The request held at `pick` (modulo their number) finishes: released (`None`), or
    /// settled having used `quarters` of its estimate.
    Finish { pick: usize, quarters: Option<u64> },
    /// The clock moves `ms`; heartbeats due at the same moment run from instance `first` on.
    Advance { ms: u64, first: usize },
    /// The store stops answering (see [`Gaps::down_between_readings`] for when).
    Down,
    /// It answers again, a heartbeat and the longest lag after it stopped at the earliest.
    Up,
    /// The next call of kind `call` times out: carried out and its answer lost (`applied`), or
    /// lost on its way.
    Fault { call: Call, applied: bool },
}

fn step() -> impl Strategy<Value = Step> {
    let admit = (0..4usize, 1..=20u64, 1..=4usize);
    let admit = admit.prop_map(|(node, tokens, times)| Step::Admit {
        node,
        tokens,
        times,
    });
    let finish = (any::<usize>(), proptest::option::of(0..=4u64));
    let kinds = vec![Call::Admit, Call::Beat, Call::Restore, Call::Finish];
    let fault = (proptest::sample::select(kinds), any::<bool>())
        .prop_map(|(call, applied)| Step::Fault { call, applied });
    prop_oneof![
        6 => admit,
        2 => (0..4usize).prop_map(|node| Step::Answer { node }),
        4 => finish.prop_map(|(pick, quarters)| Step::Finish { pick, quarters }),
        2 => (0..MAX_LAG, 0..4usize).prop_map(|(ms, first)| Step::Advance { ms, first }),
        2 => (0..2_500u64, 0..4usize).prop_map(|(ms, first)| Step::Advance { ms, first }),
        1 => (20_000..70_000u64, 0..4usize).prop_map(|(ms, first)| Step::Advance { ms, first }),
        1 => Just(Step::Down),
        1 => Just(Step::Up),
        2 => fault,
    ]
}

/// The instances, the store, and what the callers hold.
struct World {
    gaps: Gaps,
    store: Store,
    nodes: Vec<Node>,
    now: u64,
    /// When the store stopped answering (ms).
    down_at: u64,
    /// When it answered again (ms).
    up_at: u64,
    next_id: u64,
    /// Requests granted and not finished, and the instance that granted each.
    holding: Vec<(usize, Reservation)>,
    /// What every request granted and not released counts, by id: its bucket and tokens.
    counted: BTreeMap<u64, (u64, u64)>,
}

impl World {
    /// An instance per lag in `lags` (see [`Node::new`]) under `ledger.on_error` `on_error`,
    /// each started with two heartbeats.
    fn new(lags: &[u64], on_error: &str, gaps: Gaps) -> Self {
        let yaml = format!(
            "ledger: {{ on_error: {on_error}, heartbeat_ms: {HEARTBEAT} }}\n\
             providers:\n  - {{ name: p, api: openai, base_url: 'http://127.0.0.1:1/v1', \
             api_key_env: P_KEY, models: [{{ name: m, price: {{ input: 1, output: 2 }}, \
             limits: {{ rpm: {RPM}, tpm: {TPM} }} }}] }}\n"
        );
        let registry = Registry::from_yaml_str(&yaml, "model.yaml").unwrap();
        let table = ScopeTable::new(&registry);
        let mut store = Store::new(table.clone());
        let mut nodes: Vec<Node> = lags
            .iter()
            .enumerate()
            .map(|(id, &lag)| Node::new(id, table.clone(), registry.ledger, T0, lag))
            .collect();
        for _ in 0..2 {
            for node in &mut nodes {
                node.wake(&mut store, T0);
            }
        }
        Self {
            gaps,
            store,
            nodes,
            now: T0,
            down_at: 0,
            up_at: 0,
            next_id: 1,
            holding: Vec::new(),
            counted: BTreeMap::new(),
        }
    }

    fn apply(&mut self, step: &Step) {
        let n = self.nodes.len();
        match *step {
            Step::Admit {
                node,
                tokens,
                times,
            } => {
                for _ in 0..times {
                    self.admit(node % n, tokens);
                }
            }
            Step::Answer { node } => self.answer(node % n, 0),
            Step::Finish { pick, quarters } => self.finish(pick, quarters),
            Step::Advance { ms, first } => self.advance_to(self.now + ms, first, true),
            Step::Down if self.store.up => {
                if !self.gaps.short_ups {
                    // Every instance beats (its lag after a heartbeat) before the store stops.
                    let all_beat = self.up_at + HEARTBEAT + MAX_LAG;
                    self.advance_to(self.now.max(all_beat), 0, true);
                }
                if !self.gaps.down_between_readings && !self.within_shares() {
                    let read_by = (self.now / HEARTBEAT + 1) * HEARTBEAT + MAX_LAG;
                    self.advance_to(read_by, 0, false);
                }
                self.store.up = false;
                self.down_at = self.now;
            }
            Step::Up if !self.store.up => {
                let seen = self.down_at + HEARTBEAT + MAX_LAG;
                self.advance_to(self.now.max(seen), 0, true);
                self.store.up = true;
                self.up_at = self.now;
            }
            Step::Down | Step::Up => {}
            Step::Fault {
                call: Call::Restore,
                applied: true,
            } if !self.gaps.lost_restore_replies => {}
            Step::Fault { call, applied } => self.store.fault = Some((call, applied)),
        }
    }

    /// Whether each instance admitting through the store would start local mode now within
    /// its share: its share of its last reading, what it admitted through the store since,
    /// and its calls out fit its share of every limit.
    fn within_shares(&self) -> bool {
        self.nodes.iter().all(|node| {
            let m = &node.m;
            let Some(seen) = m.seen.as_ref().filter(|_| m.admits_shared()) else {
                return true;
            };
            let n = seen.instances.max(1);
            let own = m.own_since_read(self.now).scopes[D.0];
            let calls = m.calling.values().map(|c| c.on[0].1);
            let calls = calls.fold(Counts::ZERO, Counts::plus);
            [(Dim::Requests, RPM), (Dim::Tokens, TPM)]
                .into_iter()
                .all(|(dim, limit)| {
                    seen.scopes[D.0][dim].div_ceil(n) + own[dim] + calls[dim] <= limit / n
                })
        })
    }

    /// A request of `tokens` on instance `node`.
    fn admit(&mut self, node: usize, tokens: u64) {
        let need = Need {
            id: self.next_id,
            ..Need::new(tokens, Duration::from_secs(60))
        };
        self.next_id += 1;
        match self.nodes[node].send(&mut self.store, need, self.now) {
            Some(decided) => self.took(node, decided),
            None if self.nodes[node].timed_out() && !self.gaps.timeouts_wait => {
                self.answer(node, self.nodes[node].out.len() - 1);
            }
            None => {}
        }
    }

    fn took(&mut self, node: usize, decided: Result<Admission, LedgerError>) {
        if let Ok(Admission::Granted(r)) = decided {
            self.counted.insert(r.id, (r.bucket, r.tokens));
            self.holding.push((node, r));
        }
    }

    /// Instance `node`'s admission out at `k` (the oldest is 0), answered.
    fn answer(&mut self, node: usize, k: usize) {
        if k < self.nodes[node].out.len() {
            let decided = self.nodes[node].answer(&mut self.store, k, self.now);
            self.took(node, decided);
        }
    }

    fn finish(&mut self, pick: usize, quarters: Option<u64>) {
        if self.holding.is_empty() {
            return;
        }
        let (node, r) = self.holding.swap_remove(pick % self.holding.len());
        let actual = quarters.map(|q| ActualUsage::tokens(r.tokens * q / 4));
        self.nodes[node].finish(&mut self.store, &r, actual, self.now);
        match actual {
            Some(used) => _ = self.counted.insert(r.id, (r.bucket, used.tokens)),
            None => _ = self.counted.remove(&r.id),
        }
    }

    /// Moves the clock to `target`, waking each instance whose heartbeat is due on the way;
    /// with `answers`, every admission out is answered first.
    fn advance_to(&mut self, target: u64, first: usize, answers: bool) {
        for node in 0..self.nodes.len() {
            while answers && !self.nodes[node].out.is_empty() {
                self.answer(node, 0);
            }
        }
        let n = self.nodes.len();
        loop {
            let due = self.nodes.iter().filter(|node| node.due <= target);
            let order = |node: &&Node| (node.due, (node.id + n - first % n) % n);
            let Some(next) = due.min_by_key(order).map(|node| node.id) else {
                break;
            };
            self.now = self.nodes[next].due;
            self.nodes[next].wake(&mut self.store, self.now);
        }
        self.now = target;
    }

    /// The requests and tokens counted in every minute's window are within the limits.
    fn within_limits(&self) -> Result<(), TestCaseError> {
        let mut buckets: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for &(bucket, tokens) in self.counted.values() {
            let b = buckets.entry(bucket).or_default();
            *b = (b.0 + 1, b.1 + tokens);
        }
        for &last in buckets.keys() {
            let minute = buckets.range(last.saturating_sub(WINDOW_BUCKETS)..=last);
            let (requests, tokens) = minute.fold((0, 0), |a, (_, b)| (a.0 + b.0, a.1 + b.1));
            prop_assert!(
                requests <= RPM,
                "{requests} requests in the minute to {last}"
            );
            prop_assert!(tokens <= TPM, "{tokens} tokens in the minute to {last}");
        }
        Ok(())
    }

    /// The store answers again, every instance has beaten for ten heartbeats, and every request
    /// has finished: each instance admits through the store and holds nothing.
    fn recovered_and_settled(&mut self) -> Result<(), TestCaseError> {
        self.store.fault = None;
        self.apply(&Step::Up);
        self.advance_to(self.now + 10 * HEARTBEAT, 0, true);
        for (node, r) in std::mem::take(&mut self.holding) {
            let used = Some(ActualUsage::tokens(r.tokens));
            self.nodes[node].finish(&mut self.store, &r, used, self.now);
        }
        self.advance_to(self.now + 2 * HEARTBEAT, 0, true);
        for node in &self.nodes {
            let m = &node.m;
            let id = node.id;
            prop_assert_eq!(m.mode(), Mode::Shared, "instance {}", id);
            prop_assert!(m.admits_shared(), "instance {id} still rebuilding");
            prop_assert!(m.in_flight.is_empty(), "instance {id}: {:?}", m.in_flight);
            prop_assert!(m.calling.is_empty() && node.out.is_empty(), "instance {id}");
            prop_assert!(
                m.pending.is_none(),
                "instance {id}: a restore to send again"
            );
        }
        Ok(())
    }
}

/// The worlds `cargo test` runs: always the same 256, so that a gap the search finds stays a
/// scenario of `model/gaps.rs` instead of failing an unrelated change at random. A wider
/// search draws others: `PROPTEST_CASES=4000 PROPTEST_RNG_SEED=$RANDOM cargo test -p
/// router-core --lib model` (it finds the open gaps of `model/gaps.rs`).
const SEED: u64 = 1;

fn seed() -> proptest::test_runner::RngSeed {
    match std::env::var_os("PROPTEST_RNG_SEED") {
        Some(_) => ProptestConfig::default().rng_seed,
        None => proptest::test_runner::RngSeed::Fixed(SEED),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        rng_seed: seed(),
        ..ProptestConfig::default()
    })]

    /// Instances sharing a store that fails and comes back admit, together, no more than the
    /// limits in any minute, and once it is back and every request finished, hold nothing.
    #[test]
    fn instances_stay_within_the_limits_through_outages_and_leave_nothing_behind(
        lags in proptest::collection::vec(0..=MAX_LAG, 2..=4),
        local in proptest::bool::weighted(0.75),
        steps in proptest::collection::vec(step(), 1..150),
    ) {
        let on_error = if local { "local" } else { "closed" };
        let mut world = World::new(&lags, on_error, Gaps::CLOSED);
        for step in &steps {
            world.apply(step);
            world.within_limits()?;
        }
        world.recovered_and_settled()?;
        world.within_limits()?;
    }
}
