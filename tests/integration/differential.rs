//! Differential test of the ledger's stores: random sequences of admit / settle / release /
//! renew / cooldown / observe, with tenants' and keys' accounts (limits, per-day limits, daily
//! and monthly budgets), per-day limits on a deployment (UTC) and a provider (Paris time, whose
//! midnight falls an hour before UTC's), batch share and a clock that crosses bucket, window,
//! Paris-day, UTC-day and UTC-month boundaries, run on the memory, SQLite and Redis stores at once, Redis both as one server and
//! as a Redis Cluster of three primaries. Every reply and, after every operation, every
//! deployment's and account's snapshot must be the same on all four (DESIGN.md I6: the engine in
//! Rust and the scripts in Lua are twins).
//!
//! Each `cargo test` runs at least 10 000 operations; `LLMROUTE_DIFF_OPS=<n>` runs more.
//! Failing cases are kept in `differential.proptest-regressions` beside this file and replayed
//! first on every run.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use llmroute_tests::{TestRedis, redis_cluster_own, redis_server};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use router_core::clock::ManualClock;
use router_core::config::{DeploymentId, Limits, Registry};
use router_core::ledger::{
    ActualUsage, Admission, BudgetMicros, Ledger, LedgerError, MemoryStore, Need, Observation,
    Reservation, Settlement, TICKET_TTL_MS, TenantNeed, TenantSpec, Ticket,
};

use crate::support::{connect_to, open_sqlite, temp_dir, without_window};

/// 2027-02-01T00:00:00Z: cases start in the two hours before it, so months and days roll over.
const MONTH_START: u64 = 1_801_440_000_000;
/// Sequences have 1 ..= 2 x this many operations.
const OPS_PER_CASE: usize = 100;
const DEFAULT_OPS: usize = 10_000;

const YAML: &str = r#"
providers:
  - name: a
    api: openai
    base_url: http://127.0.0.1:1/v1
    api_key_env: A_KEY
    limits: { rpm: 20, tpm: 6000, concurrency: 4 }
    models:
      - { name: a1, price: { input: 1, output: 1 }, limits: { rpm: 8, tpm: 2500, concurrency: 3 } }
      - { name: a2, price: { input: 2, output: 1 }, limits: { tpm: 3000, rpd: 30, tpd: 40000 } }
  - name: b
    api: anthropic
    base_url: http://127.0.0.1:1
    api_key_env: B_KEY
    limits: { itpm: 5000, otpm: 1500, rpd: 40, tpd: 60000, day_resets: Europe/Paris }
    models:
      - { name: b1, price: { input: 3, output: 1 }, limits: { rpm: 10, itpm: 2500, otpm: 900, concurrency: 2 } }
"#;

/// Two tenants: one with every limit and both budgets, one with a monthly budget only.
fn tenants() -> [TenantSpec; 2] {
    let limit = NonZeroU64::new;
    [
        TenantSpec {
            name: "acme".into(),
            limits: Limits {
                rpm: limit(12),
                tpm: limit(4000),
                concurrency: limit(3),
                rpd: limit(35),
                tpd: limit(50_000),
                ..Limits::default()
            },
            budget: BudgetMicros {
                daily: Some(3_000),
                monthly: Some(10_000),
            },
        },
        TenantSpec {
            name: "globex".into(),
            limits: Limits::default(),
            budget: BudgetMicros {
                daily: None,
                monthly: Some(8_000),
            },
        },
    ]
}

/// A runtime key's own account: tighter limits than acme's, and a daily budget.
fn key_account() -> TenantSpec {
    let limit = NonZeroU64::new;
    let limits = Limits {
        rpm: limit(8),
        tpm: limit(3000),
        concurrency: limit(2),
        rpd: limit(25),
        ..Limits::default()
    };
    let budget = BudgetMicros {
        daily: Some(2_500),
        monthly: None,
    };
    TenantSpec::of_key("key_00000000000000aa", limits, budget)
}

/// The accounts a request may be charged to: acme's, globex's, the key's alone (its tenant has
/// no tier), acme's and the key's.
fn accounts(which: usize) -> Vec<TenantSpec> {
    let [acme, globex] = tenants();
    match which {
        0 => vec![acme],
        1 => vec![globex],
        2 => vec![key_account()],
        _ => vec![acme, key_account()],
    }
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        tokens: u64,
        own: Option<Vec<u64>>,
        /// Percent of each candidate's tokens that are input.
        input_pct: u64,
        order: Vec<usize>,
        tenant: Option<usize>,
        costs: Vec<u64>,
        batch: bool,
        ttl_s: u64,
        /// A ticket from a small pool (so that waiters ask again with theirs; 5 and 6 are batch
        /// requests', with a handicap), and whether a refusal puts it in line.
        ticket: Option<(u64, bool)>,
    },
    /// Takes a ticket of the pool out of the lines of these deployments.
    Leave(u64, Vec<usize>),
    /// Admits a held reservation's need again (same id).
    Again(usize),
    /// Held reservation, tokens, input tokens (may exceed tokens), cost.
    Settle(usize, u64, u64, u64),
    Release(usize),
    Renew(usize, u64),
    Cooldown(usize, u64),
    /// Deployment, then (remaining, reset ms) of requests, tokens, input and output tokens.
    Observe(usize, Reports),
    /// Settlements sent as one batch, as drivers send them after the answer: per held
    /// reservation, settle with (tokens, input) or release (`None`), with the provider's report
    /// on its deployment or not.
    Batch(Vec<BatchItem>),
    Advance(u64),
}

fn admit_op() -> impl Strategy<Value = Op> {
    let order = proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3).prop_shuffle();
    (
        1..1500u64,
        proptest::option::weighted(0.3, proptest::collection::vec(1..3000u64, 3)),
        0..=100u64,
        order,
        proptest::option::weighted(0.7, 0..4usize),
        proptest::collection::vec(0..900u64, 3),
        proptest::bool::weighted(0.2),
        1..120u64,
        ticket(),
    )
        .prop_map(
            |(tokens, own, input_pct, order, tenant, costs, batch, ttl_s, ticket)| Op::Admit {
                tokens,
                own,
                input_pct,
                order,
                tenant,
                costs,
                batch,
                ttl_s,
                ticket,
            },
        )
}

/// A ticket of a pool of six, joining on refusal or not.
fn ticket() -> impl Strategy<Value = Option<(u64, bool)>> {
    proptest::option::weighted(0.6, (1..=6u64, proptest::bool::weighted(0.9)))
}

fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..1_500u64,
        3 => 1_500..70_000u64,
        1 => 3_600_000..30_000_000u64,
    ]
}

/// (remaining, reset ms) of requests, tokens, input and output tokens; `None` where not reported.
type Reports = [Option<(u64, u64)>; 4];

/// One settlement of a batch: which held reservation, (tokens, input) used or `None` to release,
/// and the provider's report, if any.
type BatchItem = (usize, Option<(u64, u64)>, Option<Reports>);

fn op() -> impl Strategy<Value = Op> {
    let reset = || (0..40u64, 0..400_000u64);
    let tokens = || proptest::option::of((0..5000u64, 0..400_000u64));
    prop_oneof![
        8 => admit_op(),
        1 => any::<usize>().prop_map(Op::Again),
        4 => (any::<usize>(), 0..3000u64, 0..2000u64, 0..1200u64)
            .prop_map(|(w, t, i, c)| Op::Settle(w, t, i, c)),
        1 => any::<usize>().prop_map(Op::Release),
        1 => (any::<usize>(), 1..200u64).prop_map(|(w, s)| Op::Renew(w, s)),
        1 => (0..3usize, prop_oneof![0..120_000u64, Just(u64::MAX)])
            .prop_map(|(d, ms)| Op::Cooldown(d, ms)),
        1 => (0..3usize, proptest::option::of(reset()), [tokens(), tokens(), tokens()])
            .prop_map(|(d, r, [t, i, o])| Op::Observe(d, [r, t, i, o])),
        2 => proptest::collection::vec(
            (
                any::<usize>(),
                proptest::option::weighted(0.8, (0..3000u64, 0..2000u64)),
                proptest::option::weighted(
                    0.6,
                    (proptest::option::of(reset()), [tokens(), tokens(), tokens()])
                        .prop_map(|(r, [t, i, o])| [r, t, i, o]),
                ),
            ),
            1..4,
        )
        .prop_map(Op::Batch),
        5 => advance().prop_map(Op::Advance),
        1 => (
            1..=6u64,
            proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3),
        )
            .prop_map(|(t, ds)| Op::Leave(t, ds)),
    ]
}

/// Runs one call on every store (`$l` is each ledger) and checks the answers agree; the
/// memory store's answer.
macro_rules! all {
    ($stores:expr, $what:expr, |$l:ident| $call:expr) => {{
        let calls = $stores.ledgers.iter().map(|$l| $call);
        let answers = futures_util::future::join_all(calls).await;
        let answers = answers
            .into_iter()
            .zip($stores.names)
            .map(|(a, name)| a.unwrap_or_else(|e| panic!("{name}: {}: {e}", $what)))
            .collect();
        agree(&$stores.names, &$what, answers)
    }};
}

/// The first answer, once every other is the same.
fn agree<T: std::fmt::Debug>(names: &[&str], what: &str, mut answers: Vec<T>) -> T {
    let shown: Vec<String> = answers.iter().map(|a| format!("{a:?}")).collect();
    for (name, s) in names.iter().zip(&shown).skip(1) {
        assert_eq!(s, &shown[0], "{what}: {name} disagrees with memory");
    }
    answers.swap_remove(0)
}

/// The four stores under test, on one clock, and what they hold.
struct Stores {
    names: [&'static str; 4],
    ledgers: [Arc<dyn Ledger>; 4],
    clock: ManualClock,
    ids: Vec<DeploymentId>,
    held: Vec<(Need, Vec<DeploymentId>, Reservation)>,
    _dir: tempfile::TempDir,
}

impl Stores {
    /// Fresh stores; the Redis ones on `redis` and `cluster`, in a namespace of their own.
    async fn new(redis: &TestRedis, cluster: &TestRedis, start: u64) -> Stores {
        let registry = Registry::from_yaml_str(YAML, "differential.yaml").expect("valid");
        let clock = ManualClock::new(start);
        let dir = temp_dir();
        let namespace = format!("diff-{:016x}", fastrand::u64(..));
        let ledgers: [Arc<dyn Ledger>; 4] = [
            Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone()))),
            Arc::new(open_sqlite(&dir.path().join("l.db"), &registry, &clock)),
            Arc::new(connect_to(&redis.url, &namespace, &registry, Some(clock.clone())).await),
            Arc::new(connect_to(&cluster.url, &namespace, &registry, Some(clock.clone())).await),
        ];
        Stores {
            names: ["memory", "sqlite", "redis", "cluster"],
            ledgers,
            clock,
            ids: registry.deployment_ids().collect(),
            held: Vec::new(),
            _dir: dir,
        }
    }

    fn pick(&self, which: usize) -> Option<&(Need, Vec<DeploymentId>, Reservation)> {
        (!self.held.is_empty()).then(|| &self.held[which % self.held.len()])
    }

    async fn apply(&mut self, op: &Op) {
        match op {
            Op::Admit { .. } => {
                let (need, cands) = self.need(op);
                let what = format!("{op:?}");
                let got = all!(self, &what, |l| l.admit(&need, &cands));
                if let Admission::Granted(r) = got {
                    self.held.push((need, cands, r));
                }
            }
            Op::Again(w) => {
                if let Some((need, cands, r)) = self.pick(*w).cloned() {
                    let got = all!(self, "again", |l| l.admit(&need, &cands));
                    // Admitted anew (its slot had ended), not the same reservation answered
                    // again (which reports no tenant window, as it counted nothing).
                    if let Admission::Granted(again) = got
                        && without_window(&again) != without_window(&r)
                    {
                        self.held.push((need, cands, again));
                    }
                }
            }
            Op::Settle(w, tokens, input, cost) => {
                if let Some((_, _, r)) = self.pick(*w).cloned() {
                    let actual = ActualUsage {
                        tokens: *tokens,
                        cost_micros: *cost,
                        input_tokens: *input,
                    };
                    all!(self, "settle", |l| l.settle(&r, actual));
                }
            }
            Op::Release(w) => {
                if let Some((_, _, r)) = self.pick(*w).cloned() {
                    all!(self, "release", |l| l.release(&r));
                }
            }
            Op::Renew(w, s) => {
                if let Some((_, _, r)) = self.pick(*w).cloned() {
                    let ttl = Duration::from_secs(*s);
                    all!(self, "renew", |l| l.renew(&r, ttl));
                }
            }
            Op::Cooldown(d, ms) => {
                let (d, dur) = (self.ids[*d], Duration::from_millis(*ms));
                all!(self, "cooldown", |l| l.cooldown(d, dur));
            }
            Op::Observe(d, reports) => {
                let obs = observation(*reports);
                let d = self.ids[*d];
                all!(self, "observe", |l| l.observe(d, obs));
            }
            Op::Batch(items) => {
                let batch: Vec<Settlement> = items
                    .iter()
                    .filter_map(|(w, used, report)| {
                        let (_, _, r) = self.pick(*w)?;
                        Some(Settlement {
                            reservation: r.clone(),
                            actual: used.map(|(tokens, input)| ActualUsage {
                                tokens,
                                input_tokens: input,
                                cost_micros: tokens / 3,
                            }),
                            observed: report.map(observation),
                        })
                    })
                    .collect();
                all!(self, "batch", |l| async {
                    let results = l.settle_batch(&batch).await;
                    Ok::<_, LedgerError>(
                        results
                            .into_iter()
                            .map(|r| r.map_err(|e| e.to_string()))
                            .collect::<Vec<_>>(),
                    )
                });
            }
            Op::Advance(ms) => self.clock.advance_ms(*ms),
            Op::Leave(t, ds) => {
                let ds: Vec<DeploymentId> = ds.iter().map(|&i| self.ids[i]).collect();
                all!(self, "leave", |l| l.leave(*t, &ds));
            }
        }
        // Forget what the stores no longer remember, so picks mostly hit live reservations.
        if self.held.len() > 40 {
            self.held.drain(..20);
        }
    }

    fn need(&self, op: &Op) -> (Need, Vec<DeploymentId>) {
        let Op::Admit {
            tokens,
            own,
            input_pct,
            order,
            tenant,
            costs,
            batch,
            ttl_s,
            ticket,
        } = op
        else {
            unreachable!("only called for admissions")
        };
        let cands: Vec<DeploymentId> = order.iter().map(|&i| self.ids[i]).collect();
        let mut need = Need::new(*tokens, Duration::from_secs(*ttl_s));
        need = need.with_input_tokens(tokens * input_pct / 100);
        if let Some(own) = own {
            let own = own[..cands.len()].to_vec();
            let input = own.iter().map(|t| t * input_pct / 100).collect();
            need = need
                .with_candidate_tokens(own)
                .with_candidate_input_tokens(input);
        }
        need.tenant = tenant.map(|t| TenantNeed {
            specs: accounts(t),
            costs: costs[..cands.len()].to_vec(),
        });
        if *batch {
            need.share_percent = 50;
        }
        need.line = ticket.map(|(id, join)| Ticket {
            id,
            handicap_ms: if id > 4 { 2_000 } else { 0 },
            ttl_ms: TICKET_TTL_MS,
            join,
            batch: id > 4,
            queued: false,
        });
        (need, cands)
    }

    async fn compare_snapshots(&self, after: &Op) {
        let ids = self.ids.clone();
        all!(self, &format!("snapshot after {after:?}"), |l| l
            .snapshot(&ids));
        for spec in tenants().into_iter().chain([key_account()]) {
            let what = format!("account {} after {after:?}", spec.name);
            all!(self, &what, |l| l.tenant_snapshot(&spec));
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// Operations to run: `LLMROUTE_DIFF_OPS`, at least [`DEFAULT_OPS`].
fn ops_wanted() -> usize {
    std::env::var("LLMROUTE_DIFF_OPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(DEFAULT_OPS)
        .max(DEFAULT_OPS)
}

fn config() -> Config {
    Config {
        cases: 50,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        max_shrink_iters: 500,
        ..Config::default()
    }
}

/// Runs one sequence on fresh stores; panics on the first disagreement.
fn run_case(redis: &TestRedis, cluster: &TestRedis, start: u64, ops: &[Op]) {
    runtime().block_on(async {
        let mut stores = Stores::new(redis, cluster, start).await;
        for op in ops {
            stores.apply(op).await;
            stores.compare_snapshots(op).await;
        }
    });
}

#[test]
fn every_store_answers_alike() {
    let strategy = (
        (MONTH_START - 7_200_000)..MONTH_START,
        proptest::collection::vec(op(), 1..=2 * OPS_PER_CASE),
    );
    let wanted = ops_wanted();
    // One redis-server and one cluster for the whole test, stopped when it ends; each case has
    // its own namespace.
    let redis = redis_server();
    let cluster = redis_cluster_own();
    let done = AtomicUsize::new(0);
    let mut runner = TestRunner::new(config());
    // Rounds of 50 sequences (about 5 000 operations) until enough have run; failing seeds
    // saved in the regressions file are replayed first.
    while done.load(Ordering::Relaxed) < wanted {
        let result = runner.run(&strategy, |(start, ops)| {
            run_case(&redis, &cluster, start, &ops);
            done.fetch_add(ops.len(), Ordering::Relaxed);
            Ok(())
        });
        if let Err(e) = result {
            panic!("the stores disagree: {e}");
        }
    }
}

/// (remaining, reset ms) of requests, tokens, input and output tokens, as an observation.
fn observation(reports: Reports) -> Observation {
    let [requests, tokens, input_tokens, output_tokens] =
        reports.map(|r| r.map(|(n, ms)| (n, Duration::from_millis(ms))));
    Observation {
        requests,
        tokens,
        input_tokens,
        output_tokens,
    }
}
