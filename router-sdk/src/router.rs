//! The router: estimate, admit through the ledger, call, settle, and on failure decide what next.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use router_core::IdMap;
use router_core::clock::{Clock, SystemClock};
use router_core::config::{DeploymentId, ProviderId, Registry, RouteMatch};
use router_core::estimate::{self, Estimator};
use router_core::flow::{self, Ask, Reports};
use router_core::ledger::{Denial, LeasedTenants, Ledger, Scope, TenantSpec, Unconcerned, Verdict};
use router_core::prompt_cache::{PrefixHashes, PromptCache};
use router_core::retry::RetryPolicy;
use router_state::store::{self, Environment, LedgerChoice, LocalStore};
use router_state::usage::{self, UsageDefault};

use crate::asked::Asked;
use crate::error::Error;
use crate::request;
use crate::secret::{ApiKey, EnvKeys, KeySource, Masker};
use crate::settler::Settler;
use crate::time::{Sleeper, TokioSleeper};
use crate::types::ChatRequest;
use crate::wire;

/// Routes chat and embedding requests to the cheapest deployment with room, within every shared
/// limit.
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
    pub(crate) estimator: Estimator,
    /// What each deployment's provider recently read from its prompt cache, by prompt prefix.
    pub(crate) prompt_cache: Mutex<PromptCache>,
    pub(crate) keys: Arc<dyn KeySource>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sleeper: Arc<dyn Sleeper>,
    rng: Mutex<fastrand::Rng>,
    /// Which provider rate-limit reports go to the ledger.
    pub(crate) reports: Reports,
    /// Settlements and releases, retried off the caller's path until they land.
    pub(crate) settler: Arc<Settler>,
    /// Where each finished request's usage record goes; `None`: nowhere.
    pub(crate) recorder: Option<router_usage::Recorder>,
    /// Each deployment's endpoints, parsed once.
    pub(crate) endpoints: wire::Endpoints,
}

/// Builds a [`Router`], with any of its parts replaced.
#[derive(Debug)]
pub struct RouterBuilder {
    registry: Registry,
    ledger: Option<Arc<dyn Ledger>>,
    http: Option<reqwest::ClientBuilder>,
    policy: Option<RetryPolicy>,
    keys: Arc<dyn KeySource>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    seed: Option<u64>,
    recorder: Option<router_usage::Recorder>,
}

impl RouterBuilder {
    /// The ledger to use. Default: Redis when the configuration names a `state`, else an
    /// in-process store.
    pub fn ledger(mut self, ledger: Arc<dyn Ledger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// The HTTP client, built from `builder` with redirects turned off whatever it says: a
    /// provider key must not travel to another origin, and reqwest strips only `authorization`
    /// on a redirect, not Anthropic's `x-api-key` or Gemini's `x-goog-api-key` (a 3xx fails
    /// the attempt as a server error). Default: rustls, 10 s connect timeout. A client-level
    /// `timeout` also bounds each whole-answer call (a stream's calls are bounded by the
    /// router's limits alone); the router's attempt timeout and the request's deadline apply
    /// on top of it.
    pub fn http_client(mut self, builder: reqwest::ClientBuilder) -> Self {
        self.http = Some(builder);
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

    /// Where usage records go (one per finished request). Default: nowhere; see
    /// [`router_state::usage::open`] for the configuration's `usage:`.
    pub fn usage(mut self, recorder: router_usage::Recorder) -> Self {
        self.recorder = Some(recorder);
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
        let endpoints = wire::Endpoints::new(&registry).map_err(Error::InvalidRequest)?;
        let ledger: Arc<dyn Ledger> = match self.ledger {
            Some(ledger) => ledger,
            None => {
                // The configuration's `state`, else memory: the environment is the caller's to
                // consult (`Router::from_path` does).
                let quiet = Environment::fixed::<&str>(&[], None);
                let choice = LedgerChoice::resolve(&registry, None, LocalStore::Memory, &quiet)?;
                store::open_with_clock(&choice, &registry, self.clock.clone()).await?
            }
        };
        // Requests no limit concerns are admitted without the store.
        let ledger = Unconcerned::wrap(ledger, &registry, self.clock.clone());
        // Tenants of leasing tiers are admitted from blocks of their limits and budgets.
        let ledger = LeasedTenants::wrap(ledger, &registry, self.clock.clone());
        let http = self
            .http
            .unwrap_or_else(|| reqwest::Client::builder().connect_timeout(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::InvalidRequest(format!("cannot build the HTTP client: {e}")))?;
        let estimator = Estimator::new(&registry);
        let policy = self
            .policy
            .unwrap_or_else(|| RetryPolicy::new(registry.retry));
        let rng = self
            .seed
            .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let inner = Inner {
            registry,
            ledger: ledger.clone(),
            http,
            policy,
            estimator,
            prompt_cache: Mutex::new(PromptCache::default()),
            keys: self.keys,
            clock: self.clock,
            sleeper: self.sleeper,
            rng: Mutex::new(rng),
            reports: Reports::new(deployments, policy.settings().max_cooldown),
            settler: Arc::new(Settler::new(ledger.clone())),
            recorder: self.recorder,
            endpoints,
        };
        Ok(Router {
            inner: Arc::new(inner),
        })
    }
}

/// One request's plan and the keys of its candidates' providers.
#[derive(Debug)]
pub(crate) struct Planned {
    pub(crate) plan: flow::Plan,
    /// Shared with the request's calls ([`CallInput`](crate::chat::CallInput)), not copied.
    pub(crate) keys: Arc<IdMap<ProviderId, ApiKey>>,
    /// The model or alias the request goes to (a routed alias's choice, not the alias).
    pub(crate) model: String,
    /// The routing rule that chose `model`, when the request named a routed alias.
    pub(crate) route: Option<RouteMatch>,
    /// The request's extra headers, validated.
    pub(crate) headers: reqwest::header::HeaderMap,
    /// The hashes of its prompt's prefixes, when it marks cache breakpoints.
    pub(crate) prefixes: Option<PrefixHashes>,
}

/// What a request would be offered to: its estimate and its candidates, cheapest first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Preview {
    /// Estimated prompt tokens (the largest of the candidates' estimates).
    pub prompt_tokens: u64,
    /// The prompt's exact o200k token count (tiktoken; OpenAI's current models count this).
    pub o200k_tokens: u64,
    /// Estimated completion tokens.
    pub completion_tokens: u64,
    /// Of the prompt tokens, those expected to be read from the provider's prompt cache (the
    /// largest of the candidates' expectations): the prompt's prefix up to a cache breakpoint
    /// was read from the cache by an answer that settled in the last few minutes.
    pub cached_tokens: u64,
    /// Candidates with a key set that can serve the request, cheapest first: (provider, model,
    /// estimated cost in USD).
    pub candidates: Vec<(String, String, f64)>,
    /// The routing rule that chose the model, when the request named a routed alias.
    pub route: Option<RouteMatch>,
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
            recorder: None,
        }
    }

    /// A router over a validated configuration, with the default parts.
    pub async fn from_config(registry: Registry) -> Result<Router, Error> {
        Self::builder(registry).build().await
    }

    /// A router over the configuration file at `path`, its ledger chosen as
    /// [`LedgerChoice::resolve`] says: `REDIS_URL` when set, else the file's `state`, else memory;
    /// its usage records as `LLMROUTE_USAGE` or the file's `usage:` says (none when neither
    /// does).
    pub async fn from_path(path: impl AsRef<Path>) -> Result<Router, Error> {
        let registry = Registry::from_path(path.as_ref())?;
        let env = Environment::process();
        let choice = LedgerChoice::resolve(&registry, None, LocalStore::Memory, &env)?;
        let ledger = store::open(&choice, &registry).await?;
        let settings = usage::settings(&registry, UsageDefault::None, &env)?;
        let builder = Self::builder(registry).ledger(ledger);
        match usage::open(&settings, &env)? {
            Some(recorder) => builder.usage(recorder).build().await,
            None => builder.build().await,
        }
    }

    /// Where usage records go, when anywhere.
    pub fn usage(&self) -> Option<&router_usage::Recorder> {
        self.inner.recorder.as_ref()
    }

    /// A masker of every configured provider's key (those set now): for any text that may hold
    /// what a provider sent back. A router's own errors are masked already.
    pub fn masker(&self) -> Masker {
        let keys: Vec<ApiKey> = self
            .inner
            .registry
            .providers
            .iter()
            .filter_map(|p| self.inner.keys.key(&p.api_key_env))
            .collect();
        Masker::new(&keys)
    }

    /// The configuration.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The ledger (for `snapshot`, e.g. `llmroute quota`).
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.inner.ledger
    }

    /// Waits until every settlement handed to the background has landed or been given up. With
    /// Redis every request's settlement (and the provider's rate-limit report with it) is sent
    /// after the caller has its answer, batched from a bounded queue; with any store, one the
    /// ledger failed to take at first is retried with backoff. Then what this instance leased
    /// and did not use goes back (see `lease:`). Call it before the process exits, so nothing
    /// stays held in the shared ledger until its slot expires.
    pub async fn drain(&self) {
        self.inner.settler.drain().await;
        if let Some(recorder) = &self.inner.recorder {
            recorder.flush().await;
        }
        if let Err(e) = self.inner.ledger.close().await {
            tracing::warn!(error = %e, "ledger: could not give back what was leased");
        }
    }

    /// How many settlements were given up since the router was built: the ledger refused them
    /// until their slot would have expired anyway. Each one is also logged with `warn!`.
    pub fn settlements_given_up(&self) -> u64 {
        self.inner.settler.given_up()
    }

    /// Now by the router's clock, ms since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    pub(crate) fn system_now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now_ms())
    }

    /// A random id (request ids).
    pub(crate) fn draw_u64(&self) -> u64 {
        self.inner
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .u64(..)
    }

    /// A random draw in `[0, 1)`, for jitter.
    pub(crate) fn unit(&self) -> f64 {
        self.inner
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .f64()
    }

    /// The estimate and the candidates of `req`, cheapest first, without admitting or calling.
    /// The estimate shown is the largest of the candidates' own.
    pub fn preview(&self, req: &ChatRequest) -> Result<Preview, Error> {
        let Planned { plan, route, .. } = self.plan(&request::asked(req)?)?;
        let registry = &self.inner.registry;
        let candidates = plan
            .ranked
            .iter()
            .zip(&plan.estimates)
            .map(|(&d, e)| {
                let cost = registry.deployment(d).price.bill(&e.billed());
                (
                    registry.provider_of(d).name.clone(),
                    registry.deployment(d).model.clone(),
                    cost,
                )
            })
            .collect();
        let largest = |f: fn(&flow::Estimate) -> u64| plan.estimates.iter().map(f).max();
        Ok(Preview {
            prompt_tokens: largest(|e| e.prompt_tokens).unwrap_or(0),
            o200k_tokens: estimate::count(req.messages.iter().flat_map(|m| m.texts())),
            completion_tokens: largest(|e| e.completion_tokens).unwrap_or(0),
            cached_tokens: largest(|e| e.cached_tokens).unwrap_or(0),
            candidates,
            route,
        })
    }

    /// Plans a request (a chat's or an embedding request's, checked by its kind already): its
    /// route, the candidates that can serve it and have a key, each one's estimate, the
    /// ranking, what to reserve and the deadline ([`flow::Plan::new`]).
    pub(crate) fn plan(&self, asked: &Asked<'_>) -> Result<Planned, Error> {
        let registry = &self.inner.registry;
        request::check_id(asked.request_id)?;
        let named = asked
            .model
            .or(registry.defaults.model.as_deref())
            .ok_or_else(|| {
                Error::InvalidRequest("no model given and no `defaults.model` configured".into())
            })?;
        let headers = wire::extra_headers(asked.headers).map_err(Error::InvalidRequest)?;
        let (model, route) = request::route(registry, asked, named)?;
        let candidates = registry.resolve(&model);
        if candidates.is_empty() {
            let known = registry
                .known_models()
                .into_iter()
                .map(String::from)
                .collect();
            return Err(Error::UnknownModel { model, known });
        }
        let candidates = request::servable(registry, asked, &model, candidates)?;
        let keys = self.keys_for(&model, &candidates)?;
        let usable: Vec<_> = candidates
            .into_iter()
            .filter(|&d| keys.contains_key(&registry.deployment(d).provider))
            .collect();
        let ask = Ask {
            prompt: asked.prompt,
            max_tokens: asked.wants.max_tokens(),
            accounts: self.accounts_of(asked)?,
            priority: asked.priority,
            deadline: asked.deadline.unwrap_or(registry.retry.deadline),
            cache_reads: self.cache_reads(asked.prefixes.as_ref(), &usable),
            writes_cache: asked.prefixes.is_some(),
        };
        let plan = flow::Plan::new(registry, &self.inner.estimator, &usable, ask, self.now_ms());
        Ok(Planned {
            plan,
            keys: Arc::new(keys),
            model,
            route,
            headers,
            prefixes: asked.prefixes.clone(),
        })
    }

    /// The prompt tokens each of `candidates` is expected to read from its provider's cache for
    /// a prompt of `prefixes` (none without breakpoints).
    fn cache_reads(
        &self,
        prefixes: Option<&PrefixHashes>,
        candidates: &[DeploymentId],
    ) -> Vec<(DeploymentId, u64)> {
        let Some(prefixes) = prefixes else {
            return Vec::new();
        };
        let now = self.now_ms();
        let cache = self
            .inner
            .prompt_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        candidates
            .iter()
            .map(|&d| (d, cache.expected(d, prefixes, now)))
            .filter(|&(_, tokens)| tokens > 0)
            .collect()
    }

    /// The accounts the ledger charges the request to: its tenant's (its tier's limits and
    /// budget), then its key's own. A tenant without a tier (no `members` entry and no
    /// `default_tier`) has no account, nor has a key without limits or budgets of its own.
    fn accounts_of(&self, asked: &Asked<'_>) -> Result<Vec<TenantSpec>, Error> {
        let tenant = self.tenant_of(asked.tenant)?;
        let key = asked.key_account.filter(|spec| !spec.is_unlimited());
        Ok(tenant.into_iter().chain(key.cloned()).collect())
    }

    /// The request's tenant as the ledger accounts it: its tier's limits and budget. `None`
    /// without a tenant, or when the tenant has no tier.
    fn tenant_of(&self, tenant: Option<&str>) -> Result<Option<TenantSpec>, Error> {
        let Some(name) = tenant else {
            return Ok(None);
        };
        if let Some(problem) = router_core::config::tenant_name_problem(name) {
            return Err(Error::InvalidRequest(format!("tenant: {problem}")));
        }
        let registry = &self.inner.registry;
        Ok(registry
            .tier_of(name)
            .map(|tier| TenantSpec::of_tier(name, tier)))
    }

    /// The keys of the candidates' providers; an error naming the variables when none is set.
    fn keys_for(
        &self,
        model: &str,
        candidates: &[DeploymentId],
    ) -> Result<IdMap<ProviderId, ApiKey>, Error> {
        let registry = &self.inner.registry;
        let mut keys = IdMap::default();
        let (mut vars, mut unreadable): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        for &d in candidates {
            let id = registry.deployment(d).provider;
            let var = &registry.provider(id).api_key_env;
            match self.inner.keys.key(var) {
                Some(key) => {
                    keys.insert(id, key);
                }
                None if vars.contains(var) || unreadable.contains(var) => {}
                None if self.inner.keys.unreadable(var) => unreadable.push(var.clone()),
                None => vars.push(var.clone()),
            }
        }
        if keys.is_empty() {
            return Err(Error::MissingKey {
                model: model.to_owned(),
                vars,
                unreadable,
            });
        }
        Ok(keys)
    }

    /// `deepseek/deepseek-chat: rpm full for 12.0s; openai/gpt-4o-mini: tpm never fits`.
    pub(crate) fn describe(&self, denial: &Denial) -> String {
        let parts: Vec<String> = denial
            .refusals
            .iter()
            .map(|r| {
                let name = self.inner.registry.deployment_name(r.deployment);
                let scope = match r.scope {
                    Scope::Deployment => "",
                    Scope::Provider => "provider ",
                    Scope::Tenant => "tenant ",
                    Scope::Key => "key's ",
                };
                let limit = r.limit.as_str();
                match r.verdict {
                    Verdict::Never => format!("{name}: {scope}{limit} never fits"),
                    // A per-day limit frees when its day ends, often hours away.
                    Verdict::NotNow(d) if r.limit.per_day() => format!(
                        "{name}: {scope}{limit} full until it resets in {}",
                        crate::error::hms(d)
                    ),
                    Verdict::NotNow(d) => {
                        format!("{name}: {scope}{limit} full for {:.1}s", d.as_secs_f64())
                    }
                    Verdict::Exhausted(_) => format!("{name}: {scope}{limit} cannot cover it"),
                }
            })
            .collect();
        parts.join("; ")
    }
}
