//! The validated, runtime form of `providers.yaml`.
//!
//! Everything here has been checked once, at load time: limits are non-zero, prices are positive
//! and finite, names are unique, aliases resolve. Code that holds a [`Registry`] never re-validates.

use std::num::NonZeroU64;
use std::time::Duration;

use super::capabilities::Capabilities;
use super::gateway::Gateway;
use super::ledger::LedgerSettings;
use super::routes::Routes;

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI-compatible `/chat/completions` (OpenAI, DeepSeek, Groq, vLLM, Ollama, ...).
    OpenAi,
    /// Anthropic `/v1/messages`.
    Anthropic,
    /// Google Gemini `generateContent`.
    Gemini,
}

impl Api {
    /// Every API, in the order error messages list them.
    pub const ALL: [Api; 3] = [Api::OpenAi, Api::Anthropic, Api::Gemini];

    /// The API named `name` in `providers.yaml` (`openai`, `anthropic`, `gemini`), if any.
    pub fn from_name(name: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|api| api.as_str() == name)
    }

    /// The name used in `providers.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
        }
    }
}

/// Limits of one limited scope (a deployment or a whole provider). `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Requests per sliding 60 s window.
    pub rpm: Option<NonZeroU64>,
    /// Tokens (prompt + completion) per sliding 60 s window.
    pub tpm: Option<NonZeroU64>,
    /// Input (prompt) tokens per sliding 60 s window (Anthropic's ITPM), counted apart from
    /// `tpm`.
    pub itpm: Option<NonZeroU64>,
    /// Output (completion) tokens per sliding 60 s window (Anthropic's OTPM), counted apart from
    /// `tpm`.
    pub otpm: Option<NonZeroU64>,
    /// Requests in flight at once.
    pub concurrency: Option<NonZeroU64>,
}

impl Limits {
    /// True when no dimension is limited.
    pub fn is_unlimited(&self) -> bool {
        self.rpm.is_none()
            && self.tpm.is_none()
            && self.itpm.is_none()
            && self.otpm.is_none()
            && self.concurrency.is_none()
    }
}

/// Price of a model in USD per million tokens. All are positive and finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// USD per million prompt (input) tokens.
    pub input_per_mtok: f64,
    /// USD per million completion (output) tokens.
    pub output_per_mtok: f64,
    /// USD per million prompt tokens read from the provider's prompt cache; `None`: the input
    /// price.
    pub cached_input_per_mtok: Option<f64>,
}

impl Price {
    /// A price with no cached-input price.
    pub fn new(input_per_mtok: f64, output_per_mtok: f64) -> Self {
        Self {
            input_per_mtok,
            output_per_mtok,
            cached_input_per_mtok: None,
        }
    }

    /// Cost in USD of `input` prompt tokens and `output` completion tokens.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        self.cost_cached(input, 0, output)
    }

    /// Cost in USD of `input` prompt tokens, `cached` of them read from the prompt cache, and
    /// `output` completion tokens.
    pub fn cost_cached(&self, input: u64, cached: u64, output: u64) -> f64 {
        let cached = cached.min(input);
        let cached_price = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        ((input - cached) as f64 * self.input_per_mtok
            + cached as f64 * cached_price
            + output as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// Index of a provider in [`Registry::providers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderId(pub usize);

/// Index of a deployment in [`Registry::deployments`]. Lower ids come first in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeploymentId(pub usize);

/// One provider account: where to reach it, how to authenticate, its provider-wide limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    /// Unique name, e.g. `deepseek`.
    pub name: String,
    /// Wire protocol.
    pub api: Api,
    /// Base URL as the provider's official SDK writes it (the adapter appends the API path).
    pub base_url: String,
    /// Name of the environment variable holding the API key. Never the key itself.
    pub api_key_env: String,
    /// Provider-wide limits shared by all of its models.
    pub limits: Limits,
}

/// A deployment: one model at one provider, with its own limits and price.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    /// The provider serving this model.
    pub provider: ProviderId,
    /// Model name as the provider's API expects it, e.g. `deepseek-chat`.
    pub model: String,
    /// Other names requests may use for this model, e.g. `chat`.
    pub aliases: Vec<String>,
    /// Price in USD per million tokens.
    pub price: Price,
    /// Limits of this deployment.
    pub limits: Limits,
    /// The model's cap on completion tokens when a request sets no `max_tokens`
    /// (`max_output_tokens`); `None`: `defaults.max_output_tokens`.
    pub max_output_tokens: Option<u64>,
    /// What the model can do beyond text (`capabilities`, else its wire format's defaults).
    pub capabilities: Capabilities,
    /// Whether instances lease blocks of its limits (`lease:`), admitting from them without a
    /// Redis call per request.
    pub lease: Option<Lease>,
}

/// Values used when a request leaves them out.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// Model name or alias used when a request names none.
    pub model: Option<String>,
    /// Estimated completion tokens before any history exists.
    pub output_tokens: u64,
    /// A model's cap on completion tokens when neither the request (`max_tokens`) nor the model
    /// sets one: what providers count against TPM for such a request.
    pub max_output_tokens: u64,
    /// How long a concurrency slot lives when its holder never settles (crash), in ms.
    pub slot_ttl_ms: u64,
}

impl Defaults {
    /// `output_tokens` when `providers.yaml` does not set it.
    pub const OUTPUT_TOKENS: u64 = 512;
    /// `max_output_tokens` when `providers.yaml` does not set it.
    pub const MAX_OUTPUT_TOKENS: u64 = 4_096;
    /// `slot_ttl_ms` when `providers.yaml` does not set `slot_ttl_secs` (600 s).
    pub const SLOT_TTL_MS: u64 = 600_000;
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            model: None,
            output_tokens: Self::OUTPUT_TOKENS,
            max_output_tokens: Self::MAX_OUTPUT_TOKENS,
            slot_ttl_ms: Self::SLOT_TTL_MS,
        }
    }
}

/// Retry and failover settings (`retry:` in `providers.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    /// Provider calls per request, the first included, across all deployments.
    pub max_attempts: u32,
    /// Backoff base: the first computed wait is up to this long.
    pub base: Duration,
    /// Backoff cap: no computed wait is longer.
    pub cap: Duration,
    /// How long a request may take in all (waits, retries, calls) unless it sets its own.
    pub deadline: Duration,
    /// How long one call may take before the provider starts answering (the whole answer,
    /// without streaming); then it counts as a timeout and the request fails over.
    pub attempt_timeout: Duration,
    /// The longest cooldown a provider's stated wait (or rate-limit reset) may put on a
    /// deployment; longer ones are clamped to it. Billing failures keep their own, longer one.
    pub max_cooldown: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(30),
            deadline: Duration::from_secs(120),
            attempt_timeout: Duration::from_secs(60),
            max_cooldown: Duration::from_secs(300),
        }
    }
}

/// USD budgets per UTC calendar period; `None` = unlimited. Amounts are positive and finite.
/// A daily budget larger than the monthly one is allowed: both apply.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Budget {
    /// Spend allowed per UTC calendar day.
    pub daily_usd: Option<f64>,
    /// Spend allowed per UTC calendar month.
    pub monthly_usd: Option<f64>,
}

/// A tenant tier (`tenants.tiers` in `providers.yaml`): the limits and budget each of its
/// tenants gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Tier {
    /// Unique name, e.g. `free`.
    pub name: String,
    /// Limits of each tenant of this tier; `None` dimensions are unlimited.
    pub limits: Limits,
    /// Spend budget of each tenant of this tier.
    pub budget: Budget,
}

/// Tenant tiers and membership (`tenants:`). The default, with no tiers and no members, is what
/// a file without a `tenants` section gives: every tenant unlimited and untracked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tenants {
    /// Tier of tenants not listed in `members`; it names one of `tiers`.
    pub default_tier: Option<String>,
    /// Tiers in configuration order, names unique.
    pub tiers: Vec<Tier>,
    /// Tenant name -> tier name, in configuration order. Tenant names are unique, non-empty and
    /// free of `{` and `}`; every tier name is one of `tiers`.
    pub members: Vec<(String, String)>,
}

impl Tenants {
    /// The tier named `name`, if any.
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.name == name)
    }

    /// The tier of `tenant`: its `members` entry, else `default_tier`, else `None` (unlimited,
    /// untracked).
    pub fn tier_of(&self, tenant: &str) -> Option<&Tier> {
        let name = self
            .members
            .iter()
            .find(|(member, _)| member == tenant)
            .map(|(_, tier)| tier)
            .or(self.default_tier.as_ref())?;
        self.tier(name)
    }
}

/// How batch requests share capacity with interactive ones (`priorities:`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Priorities {
    /// Share of each deployment's (and provider's) capacity that batch requests may use, in
    /// (0, 1]. The rest is kept for interactive requests.
    pub batch_share: f64,
}

impl Priorities {
    /// `batch_share` when `providers.yaml` does not set it.
    pub const BATCH_SHARE: f64 = 0.8;
}

impl Default for Priorities {
    fn default() -> Self {
        Priorities {
            batch_share: Self::BATCH_SHARE,
        }
    }
}

/// How an instance leases blocks of a deployment's limits from the shared ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// `lease: { requests, tokens, secs }`: blocks of this size, held at most `secs`.
    Block {
        /// Requests per block.
        requests: u64,
        /// Tokens per block (counted against TPM, ITPM and OTPM alike).
        tokens: u64,
        /// How long a block is held before what is left of it goes back.
        secs: u64,
    },
    /// `lease: auto`: blocks sized from this instance's rate over the last ten seconds (so
    /// that an idle instance holds little), held [`Lease::AUTO_SECS`]; the next block is asked
    /// for in the background as the open one runs out.
    Auto,
}

impl Lease {
    /// How long an `auto` block is held, and what its size covers at the recent rate.
    pub const AUTO_SECS: u64 = 10;
    /// The longest a block may be held: one window.
    pub const MAX_SECS: u64 = 60;
}

/// The validated configuration: providers, deployments, aliases, defaults, state location.
///
/// `Debug` shows `state` with any password replaced by `***`.
#[derive(Clone, PartialEq)]
pub struct Registry {
    /// Where the shared ledger lives: a Redis URL, or `None` for the in-process store.
    pub state: Option<String>,
    /// Redis key namespace (`llmroute:{namespace}:...`).
    pub namespace: String,
    /// Defaults for requests.
    pub defaults: Defaults,
    /// Retry and failover settings.
    pub retry: RetrySettings,
    /// Providers in configuration order.
    pub providers: Vec<Provider>,
    /// Deployments in configuration order (provider by provider, model by model).
    pub deployments: Vec<Deployment>,
    /// Tenant tiers and membership; empty when the file has no `tenants` section.
    pub tenants: Tenants,
    /// Batch versus interactive capacity.
    pub priorities: Priorities,
    /// Routed aliases (`routes:`); empty when the file has none.
    pub routes: Routes,
    /// The gateway's settings (`gateway:`).
    pub gateway: Gateway,
    /// The shared ledger's timeouts and failure mode (`ledger:`).
    pub ledger: LedgerSettings,
    /// Where usage records go (`usage:`); `None`: the driver's default.
    pub usage: Option<super::UsageSettings>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("state", &self.state_redacted())
            .field("namespace", &self.namespace)
            .field("defaults", &self.defaults)
            .field("retry", &self.retry)
            .field("providers", &self.providers)
            .field("deployments", &self.deployments)
            .field("tenants", &self.tenants)
            .field("priorities", &self.priorities)
            .field("routes", &self.routes)
            .field("gateway", &self.gateway)
            .field("ledger", &self.ledger)
            .field("usage", &self.usage)
            .finish()
    }
}

impl Registry {
    /// Redis key namespace when `providers.yaml` does not set one.
    pub const DEFAULT_NAMESPACE: &'static str = "default";

    /// `state` fit for display: any password replaced by `***`. `None` for the in-process store.
    pub fn state_redacted(&self) -> Option<String> {
        self.state.as_deref().map(super::redact_url)
    }

    /// The deployments of one provider, in configuration order.
    pub fn deployments_of(&self, provider: ProviderId) -> impl Iterator<Item = DeploymentId> + '_ {
        self.deployment_ids()
            .filter(move |&id| self.deployment(id).provider == provider)
    }

    /// All provider ids, in configuration order.
    pub fn provider_ids(&self) -> impl Iterator<Item = ProviderId> + '_ {
        (0..self.providers.len()).map(ProviderId)
    }

    /// The deployment with this id.
    pub fn deployment(&self, id: DeploymentId) -> &Deployment {
        &self.deployments[id.0]
    }

    /// The provider with this id.
    pub fn provider(&self, id: ProviderId) -> &Provider {
        &self.providers[id.0]
    }

    /// The provider serving a deployment.
    pub fn provider_of(&self, id: DeploymentId) -> &Provider {
        self.provider(self.deployment(id).provider)
    }

    /// The completion tokens a request that sets no `max_tokens` may get from `id`: its model's
    /// `max_output_tokens`, else `defaults.max_output_tokens`.
    pub fn output_cap(&self, id: DeploymentId) -> u64 {
        self.deployment(id)
            .max_output_tokens
            .unwrap_or(self.defaults.max_output_tokens)
    }

    /// All deployment ids, in configuration order.
    pub fn deployment_ids(&self) -> impl Iterator<Item = DeploymentId> + '_ {
        (0..self.deployments.len()).map(DeploymentId)
    }

    /// Deployments whose model name or one of whose aliases is `model`, in configuration order.
    /// Empty when nothing matches.
    pub fn resolve(&self, model: &str) -> Vec<DeploymentId> {
        self.deployment_ids()
            .filter(|&id| {
                let d = self.deployment(id);
                d.model == model || d.aliases.iter().any(|a| a == model)
            })
            .collect()
    }

    /// The deployments a request for `name` may go to: those of a model or alias, or for a
    /// routed alias those of every model its rules name. In configuration order, each once.
    pub fn serving(&self, name: &str) -> Vec<DeploymentId> {
        let Some(route) = self.routes.get(name) else {
            return self.resolve(name);
        };
        let mut all: Vec<DeploymentId> = route
            .rules
            .iter()
            .flat_map(|rule| self.resolve(&rule.model))
            .collect();
        all.sort_unstable_by_key(|d| d.0);
        all.dedup();
        all
    }

    /// Every model name and alias a request may use, sorted and without repeats.
    pub fn known_models(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .deployments
            .iter()
            .flat_map(|d| {
                std::iter::once(d.model.as_str()).chain(d.aliases.iter().map(String::as_str))
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The tier of `tenant`: its `members` entry, else `default_tier`, else `None` (unlimited,
    /// untracked).
    pub fn tier_of(&self, tenant: &str) -> Option<&Tier> {
        self.tenants.tier_of(tenant)
    }

    /// `provider/model`, the display name of a deployment.
    pub fn deployment_name(&self, id: DeploymentId) -> String {
        format!(
            "{}/{}",
            self.provider_of(id).name,
            self.deployment(id).model
        )
    }
}
