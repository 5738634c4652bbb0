//! A display model of the configuration, shared by text and JSON output.
//!
//! Built from a validated registry. Secrets never enter it: the `state` URL and base URLs are
//! redacted, and an API key is represented only by whether its variable is set.

use router_core::config::{Lease, Limits, Price, Rates, Registry, redact_url};
use router_core::ledger::DayResets;
use router_state::store::LedgerChoice;
use serde::Serialize;

use crate::config::{KeyState, Loaded};

/// The whole configuration.
#[derive(Debug, Serialize)]
pub(crate) struct ConfigView {
    /// The file that was read.
    pub(crate) config: String,
    /// Redis URL with any password as `***`; `None`: embedded store.
    pub(crate) state: Option<String>,
    /// Where `state` came from: `config`, `REDIS_URL` or `--state`.
    pub(crate) state_from: Option<String>,
    /// Redis key namespace.
    pub(crate) namespace: String,
    /// Request defaults.
    pub(crate) defaults: DefaultsView,
    /// Providers in configuration order.
    pub(crate) providers: Vec<ProviderView>,
    /// Routed aliases, each with its rules in order: `when` as text, and the model.
    pub(crate) routes: Vec<RouteView>,
}

/// One routed alias.
#[derive(Debug, Serialize)]
pub(crate) struct RouteView {
    pub(crate) alias: String,
    pub(crate) rules: Vec<RuleView>,
}

/// One rule of a route.
#[derive(Debug, Serialize)]
pub(crate) struct RuleView {
    pub(crate) when: String,
    pub(crate) model: String,
}

/// `defaults:`.
#[derive(Debug, Serialize)]
pub(crate) struct DefaultsView {
    pub(crate) model: Option<String>,
    pub(crate) output_tokens: u64,
    pub(crate) slot_ttl_secs: u64,
}

/// One provider.
#[derive(Debug, Serialize)]
pub(crate) struct ProviderView {
    pub(crate) name: String,
    pub(crate) api: &'static str,
    pub(crate) base_url: String,
    pub(crate) api_key_env: String,
    /// `"set"`, `"not set"` or `"set, but not valid UTF-8"`; never the key.
    pub(crate) api_key: &'static str,
    pub(crate) limits: LimitsView,
    pub(crate) models: Vec<ModelView>,
}

/// One model of a provider.
#[derive(Debug, Serialize)]
pub(crate) struct ModelView {
    pub(crate) name: String,
    /// `chat` or `embedding`.
    pub(crate) kind: &'static str,
    /// An embedding model's vector size, when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dimensions: Option<u32>,
    pub(crate) aliases: Vec<String>,
    pub(crate) price: PriceView,
    pub(crate) limits: LimitsView,
    /// What the model can do beyond text (`tools`, `vision`, `json_schema`, `reasoning`).
    pub(crate) capabilities: Vec<&'static str>,
    /// Its `lease:`, if it leases.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<LeaseView>,
}

/// A model's `lease:`: `"auto"`, or a block (`tokens` absent: sized from each request).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum LeaseView {
    Auto(&'static str),
    Block {
        requests: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
        secs: u64,
    },
}

impl From<Lease> for LeaseView {
    fn from(l: Lease) -> Self {
        match l {
            Lease::Auto => LeaseView::Auto("auto"),
            Lease::Block {
                requests,
                tokens,
                secs,
            } => LeaseView::Block {
                requests,
                tokens: (tokens != u64::MAX).then_some(tokens),
                secs,
            },
        }
    }
}

impl std::fmt::Display for LeaseView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseView::Auto(name) => f.write_str(name),
            LeaseView::Block {
                requests,
                tokens,
                secs,
            } => {
                write!(f, "{requests} req")?;
                if let Some(t) = tokens {
                    write!(f, ", {t} tok")?;
                }
                write!(f, ", {secs} s")
            }
        }
    }
}

/// USD per million tokens: the base rates, and the bands of long prompts.
#[derive(Debug, Serialize)]
pub(crate) struct PriceView {
    #[serde(flatten)]
    pub(crate) rates: RatesView,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) above: Vec<TierView>,
}

/// One band's rates, USD per million tokens; absent cache prices are the input price.
#[derive(Debug, Serialize)]
pub(crate) struct RatesView {
    pub(crate) input: f64,
    pub(crate) output: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cached_input: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache_write: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache_write_1h: Option<f64>,
}

/// A band: the rates of prompts above `prompt_tokens`.
#[derive(Debug, Serialize)]
pub(crate) struct TierView {
    pub(crate) prompt_tokens: u64,
    #[serde(flatten)]
    pub(crate) rates: RatesView,
}

/// Limits; `None` is unlimited.
#[derive(Debug, Serialize)]
pub(crate) struct LimitsView {
    pub(crate) rpm: Option<u64>,
    pub(crate) tpm: Option<u64>,
    pub(crate) itpm: Option<u64>,
    pub(crate) otpm: Option<u64>,
    pub(crate) concurrency: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rpd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tpd: Option<u64>,
    /// Where the day of `rpd` and `tpd` ends: shown with a per-day limit, or when not `utc`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) day_resets: Option<String>,
}

impl ConfigView {
    /// The view of `loaded`; `key_state` says what an API key variable holds.
    pub(crate) fn new(loaded: &Loaded, key_state: impl Fn(&str) -> KeyState) -> ConfigView {
        let registry = &loaded.registry;
        ConfigView {
            config: crate::config::shown(&loaded.path),
            state: loaded.ledger.redis_url_redacted(),
            state_from: match &loaded.ledger {
                LedgerChoice::Redis { from, .. } => Some(from.as_str().to_owned()),
                _ => None,
            },
            namespace: registry.namespace.clone(),
            defaults: DefaultsView {
                model: registry.defaults.model.clone(),
                output_tokens: registry.defaults.output_tokens,
                slot_ttl_secs: registry.defaults.slot_ttl_ms / 1000,
            },
            providers: registry
                .provider_ids()
                .map(|id| provider(registry, id, &key_state))
                .collect(),
            routes: registry
                .routes
                .0
                .iter()
                .map(|r| RouteView {
                    alias: r.alias.clone(),
                    rules: r
                        .rules
                        .iter()
                        .map(|rule| RuleView {
                            when: rule.when.to_string(),
                            model: rule.model.clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

fn provider(
    registry: &Registry,
    id: router_core::config::ProviderId,
    key_state: &impl Fn(&str) -> KeyState,
) -> ProviderView {
    let p = registry.provider(id);
    ProviderView {
        name: p.name.clone(),
        api: p.api.as_str(),
        base_url: redact_url(&p.base_url),
        api_key_env: p.api_key_env.clone(),
        api_key: key_state(&p.api_key_env).as_str(),
        limits: LimitsView::of(p.limits, &p.day_resets),
        models: registry
            .deployments_of(id)
            .map(|d| {
                let d = registry.deployment(d);
                ModelView {
                    name: d.model.clone(),
                    kind: d.kind.as_str(),
                    dimensions: d.dimensions,
                    aliases: d.aliases.clone(),
                    price: PriceView::from(&d.price),
                    limits: LimitsView::of(d.limits, &d.day_resets),
                    capabilities: d.capabilities.list().iter().map(|c| c.as_str()).collect(),
                    lease: d.lease.map(LeaseView::from),
                }
            })
            .collect(),
    }
}

impl LimitsView {
    /// The view of `l`, whose day ends where `resets` says.
    fn of(l: Limits, resets: &DayResets) -> Self {
        let shown = l.per_day() || *resets != DayResets::Utc;
        LimitsView {
            rpm: l.rpm.map(|n| n.get()),
            tpm: l.tpm.map(|n| n.get()),
            itpm: l.itpm.map(|n| n.get()),
            otpm: l.otpm.map(|n| n.get()),
            concurrency: l.concurrency.map(|n| n.get()),
            rpd: l.rpd.map(|n| n.get()),
            tpd: l.tpd.map(|n| n.get()),
            day_resets: shown.then(|| resets.name().to_owned()),
        }
    }
}

impl From<&Price> for PriceView {
    fn from(p: &Price) -> Self {
        PriceView {
            rates: RatesView::from(&p.base),
            above: p
                .above
                .iter()
                .map(|t| TierView {
                    prompt_tokens: t.prompt_tokens,
                    rates: RatesView::from(&t.rates),
                })
                .collect(),
        }
    }
}

impl From<&Rates> for RatesView {
    fn from(r: &Rates) -> Self {
        RatesView {
            input: r.input_per_mtok,
            output: r.output_per_mtok,
            cached_input: r.cached_input_per_mtok,
            cache_write: r.cache_write_per_mtok,
            cache_write_1h: r.cache_write_1h_per_mtok,
        }
    }
}
