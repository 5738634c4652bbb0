//! Tenant leases against real Redis (lua/tenant_lease.lua): many instances taking blocks of one
//! tenant's limits never admit over them, on one server and on a Redis Cluster, and once the
//! requests settle and the instances close, the tenant's window, day and spend hold exactly
//! what the requests used.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use llmroute_tests::{TestRedis, redis_cluster, redis_server};
use router_core::clock::ManualClock;
use router_core::config::{DeploymentId, Registry};
use router_core::ledger::{
    ActualUsage, Admission, LeasedTenants, Ledger, Need, Reservation, TenantNeed, TenantSpec,
    Unconcerned,
};

use crate::support::{T0, connect, one_model, script_calls};

const INSTANCES: usize = 8;
const TASKS_PER_INSTANCE: usize = 25;
const ATTEMPTS_PER_TASK: usize = 8;

/// One roomy deployment; tier `leasing` (the given limits, `lease: auto`) holds tenant acme.
fn yaml(tier: &str) -> String {
    with_tier(&one_model("rpm: 1000000"), tier)
}

/// `providers` and tier `leasing` (`tier`'s limits, `lease: auto`) holding tenant acme.
fn with_tier(providers: &str, tier: &str) -> String {
    format!(
        "{providers}tenants:\n  tiers:\n    leasing: {{ {tier}, lease: auto }}\n  members:\n    acme: leasing\n"
    )
}

struct Fleet {
    instances: Vec<Arc<dyn Ledger>>,
    registry: Registry,
    clock: ManualClock,
    d: DeploymentId,
    _server: TestRedis,
}

/// Eight instances, each its own connection, each leasing acme's blocks.
async fn fleet(server: TestRedis, tier: &str) -> Fleet {
    let registry = Registry::from_yaml_str(&yaml(tier), "test.yaml").expect("valid");
    let clock = ManualClock::new(T0 + 200);
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        let store: Arc<dyn Ledger> =
            Arc::new(connect(&server, &registry, Some(clock.clone())).await);
        instances.push(LeasedTenants::wrap(
            store,
            &registry,
            Arc::new(clock.clone()),
        ));
    }
    let d = registry.resolve("m")[0];
    Fleet {
        instances,
        registry,
        clock,
        d,
        _server: server,
    }
}

impl Fleet {
    fn spec(&self) -> TenantSpec {
        let tier = self.registry.tenants.tier_of("acme").expect("acme's tier");
        TenantSpec::of_tier("acme", tier)
    }

    /// A request of acme of `tokens`, costing `micros`.
    fn need(&self, tokens: u64, micros: u64) -> Need {
        let mut need = Need::new(tokens, Duration::from_secs(600));
        need.tenant = Some(TenantNeed::of(self.spec(), vec![micros]));
        need
    }

    /// Every task of every instance tries `ATTEMPTS_PER_TASK` admissions of `need`: the grants,
    /// each with the instance that admitted it.
    async fn hammer(&self, need: &Need) -> Vec<(usize, Reservation)> {
        let mut tasks = Vec::new();
        for (i, ledger) in self.instances.iter().enumerate() {
            for _ in 0..TASKS_PER_INSTANCE {
                let (ledger, need, d) = (ledger.clone(), need.clone(), self.d);
                tasks.push(tokio::spawn(async move {
                    let mut granted = Vec::new();
                    for _ in 0..ATTEMPTS_PER_TASK {
                        let need = need.clone().with_new_id();
                        match ledger.admit(&need, &[d]).await.expect("store answers") {
                            Admission::Granted(r) => granted.push((i, r)),
                            Admission::Denied(_) => {}
                        }
                    }
                    granted
                }));
            }
        }
        let mut all = Vec::new();
        for t in join_all(tasks).await {
            all.extend(t.expect("task ran"));
        }
        all
    }

    /// What acme's window and spend hold, read through the first instance.
    async fn counted(&self) -> (u64, u64, u64) {
        let s = self.instances[0]
            .tenant_snapshot(&self.spec())
            .await
            .expect("snapshot");
        (s.usage.requests, s.usage.tokens, s.spent_today_micros)
    }

    /// Settles every grant with `actual` and closes every instance (blocks end, what they owe
    /// is sent).
    async fn settle_and_close(&self, granted: &[(usize, Reservation)], actual: ActualUsage) {
        for (i, r) in granted {
            let settled = self.instances[*i].settle(r, actual).await;
            assert!(settled.expect("settles"), "settled once");
        }
        for ledger in &self.instances {
            ledger.close().await.expect("closes");
        }
    }
}

async fn limits_hold(server: TestRedis) {
    let f = fleet(server, "rpm: 237, tpm: 100000, budget: { daily_usd: 1 }").await;
    let granted = f.hammer(&f.need(100, 1_000)).await;
    let n = granted.len() as u64;
    assert!(n <= 237, "{n} admitted over an rpm of 237");
    assert!(n >= 100, "only {n} of 237 admitted: blocks parked too much");
    // While blocks are open the windows hold what they granted: the limit at most.
    let (requests, _, _) = f.counted().await;
    assert!(
        requests <= 237 && requests >= n,
        "{requests} counted for {n} admitted"
    );
    f.clock.advance_ms(1_000);
    f.settle_and_close(&granted, usage(60, 700)).await;
    assert_eq!(f.counted().await, (n, 60 * n, 700 * n), "counted as used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_tenant_blocks_never_admit_over_the_limit_and_end_counted_as_used() {
    limits_hold(redis_server()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_tenant_blocks_never_admit_over_the_limit_and_end_counted_as_used() {
    limits_hold(redis_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_tenant_blocks_never_spend_over_the_budget() {
    // 0.1 USD a day, 1,000 micro-USD a request: 100 requests at most.
    let f = fleet(redis_server(), "rpm: 100000, budget: { daily_usd: 0.1 }").await;
    let granted = f.hammer(&f.need(10, 1_000)).await;
    let n = granted.len() as u64;
    assert!((50..=100).contains(&n), "{n} admitted for a budget of 100");
    let (_, _, spent) = f.counted().await;
    assert!(spent <= 100_000, "{spent} micro-USD reserved over 100,000");
    f.clock.advance_ms(1_000);
    f.settle_and_close(&granted, usage(10, 1_000)).await;
    assert_eq!(f.counted().await, (n, 10 * n, 1_000 * n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_tenant_blocks_honour_a_per_day_limit() {
    let f = fleet(redis_server(), "rpd: 61").await;
    let granted = f.hammer(&f.need(5, 0)).await;
    let n = granted.len() as u64;
    assert!((30..=61).contains(&n), "{n} admitted for an rpd of 61");
    f.clock.advance_ms(1_000);
    f.settle_and_close(&granted, usage(5, 0)).await;
    assert_eq!(f.counted().await, (n, 5 * n, 0));
}

fn usage(tokens: u64, micros: u64) -> ActualUsage {
    ActualUsage {
        tokens,
        input_tokens: tokens / 2,
        cost_micros: micros,
    }
}

/// A tenant's requests on a deployment no limit concerns cost a block call now and then, not
/// a script call each: 200 requests in one second make a handful of block calls (each sized
/// from the second's rate so far), where exact admissions make 200.
#[tokio::test]
async fn a_leasing_tenant_on_a_free_deployment_costs_a_few_calls_a_second() {
    let yaml = with_tier(&one_model(""), "rpm: 100000");
    let registry = Registry::from_yaml_str(&yaml, "test.yaml").expect("valid");
    let server = redis_server();
    let clock = ManualClock::new(T0 + 200);
    let store: Arc<dyn Ledger> = Arc::new(connect(&server, &registry, Some(clock.clone())).await);
    let free = Unconcerned::wrap(store, &registry, Arc::new(clock.clone()));
    let ledger = LeasedTenants::wrap(free, &registry, Arc::new(clock.clone()));
    let tier = registry.tenants.tier_of("acme").expect("acme's tier");
    let mut need = Need::new(10, Duration::from_secs(600));
    need.tenant = Some(TenantNeed::of(TenantSpec::of_tier("acme", tier), vec![5]));
    let d = registry.resolve("m")[0];
    let before = script_calls(&server).await;
    let mut held = Vec::new();
    for _ in 0..200 {
        match ledger
            .admit(&need.clone().with_new_id(), &[d])
            .await
            .unwrap()
        {
            Admission::Granted(r) => held.push(r),
            Admission::Denied(d) => panic!("denied: {d:?}"),
        }
    }
    let calls = script_calls(&server).await - before;
    assert!(calls <= 10, "{calls} script calls for 200 requests");
    // Each carries the tenant's window as its block's grant left it, for rate-limit headers.
    let last = held.last().and_then(|r| r.tenant.as_ref()?.tenant_window());
    assert!(
        last.is_some_and(|w| w.requests >= 200 && w.tokens >= 2_000),
        "{last:?}"
    );
    for r in &held {
        assert!(ledger.settle(r, usage(8, 4)).await.unwrap());
    }
    ledger.close().await.unwrap();
    let spec = TenantSpec::of_tier("acme", tier);
    let s = ledger.tenant_snapshot(&spec).await.unwrap();
    assert_eq!(
        (s.usage.requests, s.usage.tokens, s.spent_today_micros),
        (200, 1_600, 800)
    );
}
