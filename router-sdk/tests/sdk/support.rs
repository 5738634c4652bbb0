//! A world per test: mock upstreams, a router on a manual clock, and a sleeper that records.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use router_core::clock::ManualClock;
use router_core::config::{DeploymentId, Registry};
use router_core::ledger::{DeploymentSnapshot, Ledger, MemoryStore};
use router_sdk::time::Sleeper;
use router_sdk::{Router, StaticKeys};
use wiremock::MockServer;

pub const T0: u64 = 1_800_000_000_000;

/// Sleeps by moving the manual clock, and remembers every wait.
#[derive(Debug, Clone)]
pub struct ManualSleeper {
    clock: ManualClock,
    slept: Arc<Mutex<Vec<Duration>>>,
}

impl ManualSleeper {
    pub fn slept(&self) -> Vec<Duration> {
        self.slept.lock().unwrap().clone()
    }
}

impl Sleeper for ManualSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.clock.advance_ms(duration.as_millis() as u64);
        self.slept.lock().unwrap().push(duration);
        Box::pin(async {})
    }
}

/// One provider with one model, all serving alias `chat`.
pub struct Upstream {
    pub name: &'static str,
    pub api: &'static str,
    pub model: &'static str,
    pub price: (f64, f64),
    /// The price of cached prompt tokens, when the model has one.
    pub cached_input: Option<f64>,
    pub limits: &'static str,
}

impl Upstream {
    pub fn openai(name: &'static str, price: (f64, f64)) -> Self {
        Self {
            name,
            api: "openai",
            model: "gpt-test",
            price,
            cached_input: None,
            limits: "rpm: 1000",
        }
    }
    pub fn anthropic(name: &'static str, price: (f64, f64)) -> Self {
        Self {
            name,
            api: "anthropic",
            model: "claude-test",
            price,
            cached_input: None,
            limits: "rpm: 1000",
        }
    }
    pub fn gemini(name: &'static str, price: (f64, f64)) -> Self {
        Self {
            name,
            api: "gemini",
            model: "gemini-test",
            price,
            cached_input: None,
            limits: "rpm: 1000",
        }
    }
}

/// The key planted for provider `name`: tests assert it never shows anywhere.
pub fn planted_key(name: &str) -> String {
    format!("sk-planted-{name}-S3CRET-0123456789")
}

pub fn key_var(name: &str) -> String {
    format!("{}_API_KEY", name.to_uppercase())
}

/// `providers.yaml` for `upstreams`, each at `base_url` (e.g. a mock server's URI).
pub fn config(upstreams: &[(&Upstream, String)]) -> String {
    let mut yaml = String::from("defaults:\n  model: chat\n  output_tokens: 100\nproviders:\n");
    for (u, base) in upstreams {
        let base = match u.api {
            "openai" => format!("{base}/v1"),
            "gemini" => format!("{base}/v1beta"),
            _ => base.clone(),
        };
        let cached = u
            .cached_input
            .map(|p| format!(", cached_input: {p}"))
            .unwrap_or_default();
        yaml.push_str(&format!(
            "  - name: {}\n    api: {}\n    base_url: {base}\n    api_key_env: {}\n    models:\n      - name: {}\n        aliases: [chat]\n        price: {{ input: {}, output: {}{cached} }}\n        limits: {{ {} }}\n",
            u.name, u.api, key_var(u.name), u.model, u.price.0, u.price.1, u.limits
        ));
    }
    yaml
}

pub struct World {
    pub router: Router,
    pub clock: ManualClock,
    pub sleeper: ManualSleeper,
    pub ledger: Arc<dyn Ledger>,
    pub servers: Vec<MockServer>,
}

impl World {
    /// One mock server per upstream, a memory ledger, all on one manual clock.
    pub async fn new(upstreams: &[Upstream]) -> World {
        Self::with_extra(upstreams, "").await
    }

    /// Like [`World::new`], with `extra` YAML (say, `tenants:`) appended to the configuration.
    pub async fn with_extra(upstreams: &[Upstream], extra: &str) -> World {
        Self::started(upstreams, extra, |l| l).await
    }

    pub async fn with_bases(
        upstreams: &[Upstream],
        bases: &[(&Upstream, String)],
        servers: Vec<MockServer>,
    ) -> World {
        Self::build(upstreams, bases, servers, "").await
    }

    /// Like [`World::new`], with the memory ledger wrapped by `wrap` (a ledger that fails).
    pub async fn with_ledger(
        upstreams: &[Upstream],
        wrap: impl FnOnce(Arc<dyn Ledger>) -> Arc<dyn Ledger>,
    ) -> World {
        Self::started(upstreams, "", wrap).await
    }

    /// One mock server started per upstream.
    async fn started(
        upstreams: &[Upstream],
        extra: &str,
        wrap: impl FnOnce(Arc<dyn Ledger>) -> Arc<dyn Ledger>,
    ) -> World {
        Self::started_recorded(upstreams, extra, wrap, None).await
    }

    async fn started_recorded(
        upstreams: &[Upstream],
        extra: &str,
        wrap: impl FnOnce(Arc<dyn Ledger>) -> Arc<dyn Ledger>,
        recorder: Option<router_usage::Recorder>,
    ) -> World {
        let mut servers = Vec::new();
        for _ in upstreams {
            servers.push(MockServer::start().await);
        }
        let bases: Vec<_> = upstreams
            .iter()
            .zip(&servers)
            .map(|(u, s)| (u, s.uri()))
            .collect();
        Self::build_with(upstreams, &bases, servers, extra, wrap, recorder).await
    }

    async fn build(
        upstreams: &[Upstream],
        bases: &[(&Upstream, String)],
        servers: Vec<MockServer>,
        extra: &str,
    ) -> World {
        Self::build_with(upstreams, bases, servers, extra, |l| l, None).await
    }

    async fn build_with(
        upstreams: &[Upstream],
        bases: &[(&Upstream, String)],
        servers: Vec<MockServer>,
        extra: &str,
        wrap: impl FnOnce(Arc<dyn Ledger>) -> Arc<dyn Ledger>,
        recorder: Option<router_usage::Recorder>,
    ) -> World {
        let yaml = format!("{}{extra}", config(bases));
        let names: Vec<&str> = upstreams.iter().map(|u| u.name).collect();
        Self::from_yaml_recorded(&yaml, &names, servers, wrap, recorder).await
    }

    /// A world over a whole configuration `yaml`, with the planted keys of providers `names`.
    pub async fn from_yaml(
        yaml: &str,
        names: &[&str],
        servers: Vec<MockServer>,
        wrap: impl FnOnce(Arc<dyn Ledger>) -> Arc<dyn Ledger>,
    ) -> World {
        Self::from_yaml_recorded(yaml, names, servers, wrap, None).await
    }

    /// Like [`World::with_extra`], its usage records going to `recorder`.
    pub async fn recorded(
        upstreams: &[Upstream],
        extra: &str,
        recorder: router_usage::Recorder,
    ) -> World {
        Self::started_recorded(upstreams, extra, |l| l, Some(recorder)).await
    }

    pub async fn from_yaml_recorded(
        yaml: &str,
        names: &[&str],
        servers: Vec<MockServer>,
        wrap: impl FnOnce(Arc<dyn Ledger>) -> Arc<dyn Ledger>,
        recorder: Option<router_usage::Recorder>,
    ) -> World {
        let registry = Registry::from_yaml_str(yaml, "test.yaml").unwrap();
        let clock = ManualClock::new(T0);
        let sleeper = ManualSleeper {
            clock: clock.clone(),
            slept: Arc::default(),
        };
        let ledger: Arc<dyn Ledger> =
            Arc::new(MemoryStore::with_clock(&registry, Arc::new(clock.clone())));
        let keys = names.iter().fold(StaticKeys::new(), |k, name| {
            k.with(key_var(name), planted_key(name))
        });
        let builder = Router::builder(registry)
            .ledger(wrap(ledger.clone()))
            .clock(Arc::new(clock.clone()))
            .sleeper(Arc::new(sleeper.clone()))
            .keys(Arc::new(keys))
            .seed(7);
        let builder = match recorder {
            Some(recorder) => builder.usage(recorder),
            None => builder,
        };
        let router = builder.build().await.unwrap();
        World {
            router,
            clock,
            sleeper,
            ledger,
            servers,
        }
    }

    pub fn d(&self, model: &str) -> DeploymentId {
        self.router.registry().resolve(model)[0]
    }

    pub async fn snapshot(&self, model: &str) -> DeploymentSnapshot {
        self.ledger.snapshot(&[self.d(model)]).await.unwrap()[0]
    }

    /// Requests in flight over every deployment.
    pub async fn in_flight(&self) -> u64 {
        let all: Vec<_> = self.router.registry().deployment_ids().collect();
        self.ledger
            .snapshot(&all)
            .await
            .unwrap()
            .iter()
            .map(|s| s.usage.in_flight)
            .sum()
    }
}

pub fn fixture(path: &str) -> Vec<u8> {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// A 200 JSON answer from a fixture.
pub fn ok_json(path: &str) -> wiremock::ResponseTemplate {
    wiremock::ResponseTemplate::new(200).set_body_raw(fixture(path), "application/json")
}

/// A 200 SSE answer from a fixture.
pub fn ok_sse(path: &str) -> wiremock::ResponseTemplate {
    wiremock::ResponseTemplate::new(200).set_body_raw(fixture(path), "text/event-stream")
}

/// An error answer from a fixture.
pub fn error_json(status: u16, path: &str) -> wiremock::ResponseTemplate {
    wiremock::ResponseTemplate::new(status).set_body_raw(fixture(path), "application/json")
}

pub const OPENAI_PATH: &str = "/v1/chat/completions";
pub const ANTHROPIC_PATH: &str = "/v1/messages";

/// A sleeping task: wake-up time (ms), arrival order, and how to wake it.
type Sleeping = (u64, u64, tokio::sync::oneshot::Sender<()>);

/// Virtual time for concurrent tasks: every `sleep` waits in a queue until the test's driver
/// wakes it, earliest first, moving the manual clock to its wake-up time.
#[derive(Debug, Clone)]
pub struct VirtualSleeper {
    clock: ManualClock,
    queue: Arc<Mutex<Vec<Sleeping>>>,
    seq: Arc<std::sync::atomic::AtomicU64>,
}

impl VirtualSleeper {
    pub fn new(clock: ManualClock) -> Self {
        Self {
            clock,
            queue: Arc::default(),
            seq: Arc::default(),
        }
    }

    /// Tasks asleep now.
    pub fn asleep(&self) -> usize {
        self.queue.lock().unwrap().len()
    }

    /// Wakes the earliest sleeper (ties: the first to fall asleep); false if none sleeps.
    pub fn wake_next(&self) -> bool {
        let mut queue = self.queue.lock().unwrap();
        let Some(i) = (0..queue.len()).min_by_key(|&i| (queue[i].0, queue[i].1)) else {
            return false;
        };
        let (at, _, tx) = queue.swap_remove(i);
        drop(queue);
        use router_core::clock::Clock;
        self.clock.set_ms(at.max(self.clock.now_ms()));
        let _ = tx.send(());
        true
    }
}

impl Sleeper for VirtualSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        use router_core::clock::Clock;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let at = self.clock.now_ms() + duration.as_millis() as u64;
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.queue.lock().unwrap().push((at, seq, tx));
        // A sleep given up (a line's wake-up came first) leaves the queue: `asleep` counts the
        // tasks that do sleep, which the test's driver compares with the tasks unfinished.
        let left = Leaves {
            queue: self.queue.clone(),
            seq,
        };
        Box::pin(async move {
            let _left = left;
            let _ = rx.await;
        })
    }
}

/// Takes a sleep out of the queue when its future is dropped, woken or not.
struct Leaves {
    queue: Arc<Mutex<Vec<Sleeping>>>,
    seq: u64,
}

impl Drop for Leaves {
    fn drop(&mut self) {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        queue.retain(|(_, seq, _)| *seq != self.seq);
    }
}

/// A tenant `acme` with limits and a budget large enough for any test's requests: its spend
/// shows what each request was charged.
pub const SPENDER: &str = "tenants:
  default_tier: metered
  tiers:
    metered: { rpm: 1000, budget: { daily_usd: 1000 } }
  members:
    acme: metered
";

/// What [`SPENDER`]'s tenant `acme` has spent today, micro-USD.
pub async fn spender_spent(w: &World) -> u64 {
    let spec = router_core::ledger::TenantSpec {
        name: "acme".into(),
        limits: router_core::config::Limits {
            rpm: std::num::NonZeroU64::new(1000),
            ..Default::default()
        },
        budget: router_core::ledger::BudgetMicros {
            daily: Some(1_000_000_000),
            monthly: None,
        },
    };
    let snapshot = w.router.ledger().tenant_snapshot(&spec).await.unwrap();
    snapshot.spent_today_micros
}

/// `secs` since the epoch as RFC 3339 (UTC), for Anthropic's reset headers.
pub fn rfc3339(secs: u64) -> String {
    let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(secs));
    // "Sun, 06 Nov 1994 08:49:37 GMT" -> "1994-11-06T08:49:37Z"
    let parts: Vec<&str> = date.split(' ').collect();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[2])
    .map_or(0, |i| i + 1);
    format!("{}-{month:02}-{}T{}Z", parts[3], parts[1], parts[4])
}
