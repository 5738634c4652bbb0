//! The validated, runtime form of `providers.yaml`: the sections' values, assembled.
//!
//! Everything here has been checked once, at load time: limits are non-zero, prices are positive
//! and finite, names are unique, aliases resolve. Code that holds a [`Registry`] never re-validates.

use super::deployments::{Deployment, Models, Provider};
use super::gateway::Gateway;
use super::ledger::LedgerSettings;
use super::routes::Routes;
use super::state::redact_url;
use super::tenants::{Priorities, Tenants, Tier};
use super::usage::UsageSettings;
use super::values::{Defaults, DeploymentId, ProviderId, RetrySettings};

/// The validated configuration: providers, deployments, aliases, defaults, state location.
///
/// `Debug` shows `state` with any password replaced by `***`.
#[derive(Clone, PartialEq)]
pub struct Registry {
    /// Where the ledger lives: a Redis URL, [`IN_MEMORY`](super::IN_MEMORY) for this process
    /// only, or `None` for the caller's default local store (embedded for the CLI, memory for
    /// the library).
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
    pub usage: Option<UsageSettings>,
    /// Where the gateway's traces go (`telemetry:`), before the `OTEL_*` variables.
    pub telemetry: super::Telemetry,
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
            .field("telemetry", &self.telemetry)
            .finish()
    }
}

impl Registry {
    /// Redis key namespace when `providers.yaml` does not set one.
    pub const DEFAULT_NAMESPACE: &'static str = "default";

    /// `state` fit for display: any password replaced by `***`. `None` for the in-process store.
    pub fn state_redacted(&self) -> Option<String> {
        self.state.as_deref().map(redact_url)
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
        Models(&self.deployments).resolve(model)
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
        Models(&self.deployments).known()
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
