//! The router: estimate, admit through the ledger, call, settle, and on failure decide what next.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use router_core::clock::{Clock, SystemClock};
use router_core::config::{DeploymentId, ProviderId, Registry};
use router_core::estimate::{self, OutputEstimator};
use router_core::ledger::{
    Admission, Denial, Ledger, MAX_SLOT_TTL, MemoryStore, Need, RedisStore, RedisStoreOptions,
    Scope, TenantNeed, TenantSpec, Verdict,
};
use router_core::retry::{OnDenied, RetryPolicy};
use router_core::select;

use crate::error::Error;
use crate::guard::{Guard, micros};
use crate::secret::{ApiKey, EnvKeys, KeySource};
use crate::time::{Sleeper, TokioSleeper};
use crate::types::{Attempt, ChatRequest, Priority, Usage};

/// Routes chat requests to the cheapest deployment with room, within every shared limit.
///
/// Cheap to clone: clones share the ledger, the HTTP client and the estimates.
#[derive(Debug, Clone)]
pub struct Router {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) registry: Arc<Registry>,
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) http: reqwest::Client,
    pub(crate) policy: RetryPolicy,
    pub(crate) outputs: OutputEstimator,
    pub(crate) keys: Arc<dyn KeySource>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sleeper: Arc<dyn Sleeper>,
    rng: Mutex<fastrand::Rng>,
    /// When each deployment's rate-limit headers were last sent to the ledger (ms).
    pub(crate) reported: Vec<std::sync::atomic::AtomicU64>,
}

/// Builds a [`Router`], with any of its parts replaced.
#[derive(Debug)]
pub struct RouterBuilder {
    registry: Registry,
    ledger: Option<Arc<dyn Ledger>>,
    http: Option<reqwest::Client>,
    policy: Option<RetryPolicy>,
    keys: Arc<dyn KeySource>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    seed: Option<u64>,
}

impl RouterBuilder {
    /// The ledger to use. Default: Redis when the configuration names a `state`, else an
    /// in-process store.
    pub fn ledger(mut self, ledger: Arc<dyn Ledger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// The HTTP client. Default: rustls, 10 s connect timeout.
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
        self
    }

    /// The retry policy. Default: from the configuration's `retry:` section.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Where API keys come from. Default: the environment.
    pub fn keys(mut self, keys: Arc<dyn KeySource>) -> Self {
        self.keys = keys;
        self
    }

    /// The clock for deadlines and provider reset times (and for the in-process store).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How the router waits for capacity. Default: `tokio::time::sleep`.
    pub fn sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// Seeds the jitter, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Builds the router, connecting to Redis if the configuration names a `state`.
    pub async fn build(self) -> Result<Router, Error> {
        let registry = Arc::new(self.registry);
        let deployments = registry.deployments.len();
        let ledger: Arc<dyn Ledger> = match (self.ledger, &registry.state) {
            (Some(ledger), _) => ledger,
            (None, Some(url)) => {
                let options = RedisStoreOptions {
                    namespace: registry.namespace.clone(),
                    ..RedisStoreOptions::default()
                };
                Arc::new(RedisStore::connect(url, &registry, options).await?)
            }
            (None, None) => Arc::new(MemoryStore::with_clock(&registry, self.clock.clone())),
        };
        let http = match self.http {
            Some(http) => http,
            None => reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| Error::InvalidRequest(format!("cannot build the HTTP client: {e}")))?,
        };
        let outputs =
            OutputEstimator::new(registry.deployments.len(), registry.defaults.output_tokens);
        let policy = self
            .policy
            .unwrap_or_else(|| RetryPolicy::new(registry.retry));
        let rng = self
            .seed
            .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let inner = Inner {
            registry,
            ledger,
            http,
            policy,
            outputs,
            keys: self.keys,
            clock: self.clock,
            sleeper: self.sleeper,
            rng: Mutex::new(rng),
            reported: (0..deployments).map(|_| Default::default()).collect(),
        };
        Ok(Router {
            inner: Arc::new(inner),
        })
    }
}

/// One request's plan: candidates cheapest first, what to reserve, when to give up.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) ranked: Vec<DeploymentId>,
    pub(crate) keys: HashMap<ProviderId, ApiKey>,
    pub(crate) need: Need,
    pub(crate) estimate: Usage,
    pub(crate) started_ms: u64,
    pub(crate) deadline_ms: u64,
    pub(crate) priority: Priority,
}

/// What a request would be offered to: its estimate and its candidates, cheapest first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Preview {
    /// Estimated prompt tokens.
    pub prompt_tokens: u64,
    /// Estimated completion tokens.
    pub completion_tokens: u64,
    /// Candidates with a key set, cheapest first: (provider, model, estimated cost in USD).
    pub candidates: Vec<(String, String, f64)>,
}

/// What happened so far to one request.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) attempts: Vec<Attempt>,
    pub(crate) waited: Duration,
    /// The last failed call, when the request went on after it: if the request then runs out
    /// of time, that failure is the honest answer, not "no capacity".
    pub(crate) last_failure: Option<(DeploymentId, crate::transport::CallFailure)>,
}

impl Router {
    /// A builder over a validated configuration.
    pub fn builder(registry: Registry) -> RouterBuilder {
        RouterBuilder {
            registry,
            ledger: None,
            http: None,
            policy: None,
            keys: Arc::new(EnvKeys),
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
            seed: None,
        }
    }

    /// A router over a validated configuration, with the default parts.
    pub async fn from_config(registry: Registry) -> Result<Router, Error> {
        Self::builder(registry).build().await
    }

    /// A router over the configuration file at `path`; `REDIS_URL`, when set, overrides its
    /// `state`.
    pub async fn from_path(path: impl AsRef<Path>) -> Result<Router, Error> {
        let redis_url = std::env::var("REDIS_URL").ok();
        let registry = Registry::load(path.as_ref(), redis_url.as_deref())?;
        Self::from_config(registry).await
    }

    /// The configuration.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The ledger (for `snapshot`, e.g. `llmroute quota`).
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.inner.ledger
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    pub(crate) fn system_now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now_ms())
    }

    pub(crate) fn unit(&self) -> f64 {
        self.inner
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .f64()
    }

    /// The estimate and the candidates of `req`, cheapest first, without admitting or calling.
    pub fn preview(&self, req: &ChatRequest) -> Result<Preview, Error> {
        let plan = self.plan(req)?;
        let registry = &self.inner.registry;
        let candidates = plan
            .ranked
            .iter()
            .map(|&d| {
                let cost = registry
                    .deployment(d)
                    .price
                    .cost(plan.estimate.prompt_tokens, plan.estimate.completion_tokens);
                (
                    registry.provider_of(d).name.clone(),
                    registry.deployment(d).model.clone(),
                    cost,
                )
            })
            .collect();
        Ok(Preview {
            prompt_tokens: plan.estimate.prompt_tokens,
            completion_tokens: plan.estimate.completion_tokens,
            candidates,
        })
    }

    /// Validates the request and works out its candidates, estimate and deadline.
    pub(crate) fn plan(&self, req: &ChatRequest) -> Result<Plan, Error> {
        let registry = &self.inner.registry;
        if req.messages.is_empty() {
            return Err(Error::InvalidRequest(
                "a chat needs at least one message".into(),
            ));
        }
        let model = req
            .model
            .as_deref()
            .or(registry.defaults.model.as_deref())
            .ok_or_else(|| {
                Error::InvalidRequest("no model given and no `defaults.model` configured".into())
            })?;
        let candidates = registry.resolve(model);
        if candidates.is_empty() {
            let known = registry
                .known_models()
                .into_iter()
                .map(String::from)
                .collect();
            return Err(Error::UnknownModel {
                model: model.to_owned(),
                known,
            });
        }
        let keys = self.keys_for(model, &candidates)?;
        let usable: Vec<_> = candidates
            .into_iter()
            .filter(|&d| keys.contains_key(&registry.deployment(d).provider))
            .collect();
        let o200k = estimate::count(req.messages.iter().map(|m| m.content.as_str()));
        let prompt = usable
            .iter()
            .map(|&d| estimate::scale(registry.provider_of(d).api, o200k))
            .max();
        let output = usable
            .iter()
            .map(|&d| self.inner.outputs.estimate(d, req.max_tokens))
            .max();
        let estimate = Usage {
            prompt_tokens: prompt.unwrap_or(0),
            completion_tokens: output.unwrap_or(0),
        };
        let ranked: Vec<DeploymentId> = select::rank(
            registry,
            &usable,
            estimate.prompt_tokens,
            estimate.completion_tokens,
        )
        .into_iter()
        .map(|r| r.deployment)
        .collect();
        let deadline = req.deadline.unwrap_or(registry.retry.deadline);
        // A slot must outlive its request: a slot that expired in flight would admit one too many.
        let slot_ttl = Duration::from_millis(registry.defaults.slot_ttl_ms)
            .max(deadline)
            .min(MAX_SLOT_TTL);
        let mut need = Need::new(estimate.total_tokens(), slot_ttl);
        need.tenant = self.tenant_need(req, &ranked, estimate)?;
        if req.priority == Priority::Batch {
            let share = (registry.priorities.batch_share * 100.0).floor();
            need.share_percent = share.clamp(1.0, 100.0) as u8;
        }
        let now = self.now_ms();
        Ok(Plan {
            ranked,
            keys,
            need,
            estimate,
            started_ms: now,
            deadline_ms: now + deadline.as_millis() as u64,
            priority: req.priority,
        })
    }

    /// The request's tenant as the ledger accounts it: its tier's limits and budget, and the
    /// request's estimated cost on each candidate. `None` without a tenant, or when the tenant
    /// has no tier (no `members` entry and no `default_tier`): it is then not limited.
    fn tenant_need(
        &self,
        req: &ChatRequest,
        ranked: &[DeploymentId],
        estimate: Usage,
    ) -> Result<Option<TenantNeed>, Error> {
        let Some(name) = req.tenant.as_deref() else {
            return Ok(None);
        };
        if name.is_empty() || name.contains(['{', '}']) {
            return Err(Error::InvalidRequest(format!(
                "tenant `{name}`: a tenant name must be non-empty and contain no braces"
            )));
        }
        let registry = &self.inner.registry;
        let Some(tier) = registry.tier_of(name) else {
            return Ok(None);
        };
        let (input, output) = (estimate.prompt_tokens, estimate.completion_tokens);
        let costs = ranked
            .iter()
            .map(|&d| micros(registry.deployment(d).price.cost(input, output)))
            .collect();
        let spec = TenantSpec::of_tier(name, tier);
        Ok(Some(TenantNeed { spec, costs }))
    }

    /// The keys of the candidates' providers; an error naming the variables when none is set.
    fn keys_for(
        &self,
        model: &str,
        candidates: &[DeploymentId],
    ) -> Result<HashMap<ProviderId, ApiKey>, Error> {
        let registry = &self.inner.registry;
        let mut keys = HashMap::new();
        let mut vars: Vec<String> = Vec::new();
        for &d in candidates {
            let id = registry.deployment(d).provider;
            let var = &registry.provider(id).api_key_env;
            match self.inner.keys.key(var) {
                Some(key) => {
                    keys.insert(id, key);
                }
                None if !vars.contains(var) => vars.push(var.clone()),
                None => {}
            }
        }
        if keys.is_empty() {
            return Err(Error::MissingKey {
                model: model.to_owned(),
                vars,
            });
        }
        Ok(keys)
    }

    /// Admits the request on the cheapest candidate with room, waiting for capacity when none
    /// has any, up to the deadline.
    pub(crate) async fn acquire(
        &self,
        plan: &Plan,
        progress: &mut Progress,
    ) -> Result<Guard, Error> {
        loop {
            let denial = match self.inner.ledger.admit(&plan.need, &plan.ranked).await? {
                Admission::Granted(r) => {
                    let price = self.inner.registry.deployment(r.deployment).price;
                    return Ok(Guard::new(self.inner.ledger.clone(), r, price));
                }
                Admission::Denied(denial) => denial,
            };
            if let (Some(resets_in), Some(t)) = (denial.budget_resets_in(), &plan.need.tenant) {
                return Err(Error::BudgetExhausted {
                    tenant: t.spec.name.clone(),
                    detail: self.describe(&denial),
                    resets_in,
                    attempts: std::mem::take(&mut progress.attempts),
                });
            }
            let now = self.now_ms();
            let remaining = Duration::from_millis(plan.deadline_ms.saturating_sub(now));
            let policy = &self.inner.policy;
            match policy.on_denied(denial.retry_after(), remaining, self.unit()) {
                OnDenied::Wait(wait) => {
                    // Interactive requests of this instance retry first when capacity returns.
                    let handicap = match plan.priority {
                        Priority::Batch => {
                            policy.batch_delay(Duration::from_millis(now - plan.started_ms))
                        }
                        Priority::Interactive => Duration::ZERO,
                    };
                    let wait = (wait + handicap)
                        .min(remaining)
                        .max(Duration::from_millis(1));
                    self.inner.sleeper.sleep(wait).await;
                    progress.waited += wait;
                }
                OnDenied::GiveUp => {
                    if let Some((d, failure)) = progress.last_failure.take() {
                        return Err(self.error(d, failure, progress));
                    }
                    return Err(Error::NoCapacity {
                        never: denial.never_fits(),
                        retry_after: denial.retry_after(),
                        detail: self.describe(&denial),
                        attempts: std::mem::take(&mut progress.attempts),
                    });
                }
            }
        }
    }

    /// `deepseek/deepseek-chat: rpm full for 12.0s; openai/gpt-4o-mini: tpm never fits`.
    fn describe(&self, denial: &Denial) -> String {
        let parts: Vec<String> = denial
            .refusals
            .iter()
            .map(|r| {
                let name = self.inner.registry.deployment_name(r.deployment);
                let scope = match r.scope {
                    Scope::Deployment => "",
                    Scope::Provider => "provider ",
                    Scope::Tenant => "tenant ",
                };
                let limit = r.limit.as_str();
                match r.verdict {
                    Verdict::Never => format!("{name}: {scope}{limit} never fits"),
                    Verdict::NotNow(d) => {
                        format!("{name}: {scope}{limit} full for {:.1}s", d.as_secs_f64())
                    }
                    Verdict::Exhausted(_) => format!("{name}: {scope}{limit} cannot cover it"),
                }
            })
            .collect();
        parts.join("; ")
    }

    /// Time left before the deadline.
    pub(crate) fn remaining(&self, plan: &Plan) -> Duration {
        Duration::from_millis(plan.deadline_ms.saturating_sub(self.now_ms()))
    }
}
