//! Providers and their deployments (one model at one provider), and the names requests use for
//! them.

use super::capabilities::Capabilities;
use super::kind::ModelKind;
use super::price::Price;
use super::values::{Api, DeploymentId, Lease, Limits, ProviderId};
use crate::ledger::DayResets;

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
    /// Where the day of its `rpd` and `tpd` ends (`limits.day_resets`); its models' default.
    pub day_resets: DayResets,
}

/// A deployment: one model at one provider, with its own limits and price.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    /// The provider serving this model.
    pub provider: ProviderId,
    /// Model name as the provider's API expects it, e.g. `deepseek-chat`.
    pub model: String,
    /// A chat model or an embedding model (`kind:`, else `embedding` among `capabilities`).
    pub kind: ModelKind,
    /// An embedding model's vector size when a request asks for none (`dimensions`); a
    /// request asking for more is not sent to it.
    pub dimensions: Option<u32>,
    /// Other names requests may use for this model, e.g. `chat`.
    pub aliases: Vec<String>,
    /// Price in USD per million tokens.
    pub price: Price,
    /// Limits of this deployment.
    pub limits: Limits,
    /// Where the day of its `rpd` and `tpd` ends: its own `limits.day_resets`, else its
    /// provider's.
    pub day_resets: DayResets,
    /// The model's cap on completion tokens when a request sets no `max_tokens`
    /// (`max_output_tokens`); `None`: `defaults.max_output_tokens`.
    pub max_output_tokens: Option<u64>,
    /// What the model can do beyond text (`capabilities`, else its wire format's defaults).
    pub capabilities: Capabilities,
    /// Whether instances lease blocks of its limits (`lease:`), admitting from them without a
    /// Redis call per request.
    pub lease: Option<Lease>,
}

/// The model names and aliases of a list of deployments: what a request, a route, a key or
/// `defaults.model` may name. The configuration's checks use it before a [`Registry`] exists;
/// the registry answers through it afterwards.
///
/// [`Registry`]: super::Registry
#[derive(Debug, Clone, Copy)]
pub(crate) struct Models<'a>(pub(crate) &'a [Deployment]);

impl<'a> Models<'a> {
    /// The deployment with this id.
    pub(crate) fn get(self, id: DeploymentId) -> &'a Deployment {
        &self.0[id.0]
    }

    /// Deployments whose model name or one of whose aliases is `model`, in configuration order.
    /// Empty when nothing matches.
    pub(crate) fn resolve(self, model: &str) -> Vec<DeploymentId> {
        (0..self.0.len())
            .map(DeploymentId)
            .filter(|&id| {
                let d = self.get(id);
                d.model == model || d.aliases.iter().any(|a| a == model)
            })
            .collect()
    }

    /// Every model name and alias, sorted and without repeats.
    pub(crate) fn known(self) -> Vec<&'a str> {
        let mut names: Vec<&str> = self
            .0
            .iter()
            .flat_map(|d| {
                std::iter::once(d.model.as_str()).chain(d.aliases.iter().map(String::as_str))
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}
