//! The first stage: `providers.yaml` exactly as written, before any checking.
//!
//! Every struct denies unknown fields, so a misspelt key is an error with its line. Numbers are
//! read as any scalar ([`Number`]) and names as plain strings, so that zero, negative, NaN and unknown
//! values reach validation and get its messages (with the field path and what to do) rather
//! than a generic type error. Values are [`Spanned`] so those messages can carry line numbers.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_saphyr::Spanned;

mod scalars;
mod usage;

pub(crate) use scalars::{Named, Number};
pub(crate) use usage::RawUsage;

/// A scalar with where it was written.
pub(crate) type At<T> = Spanned<T>;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// Redis URL of the shared ledger, a list of a cluster's nodes, or `memory`; absent: the
    /// caller's default local store.
    #[serde(default)]
    pub(crate) state: Option<At<super::state::StateValue>>,
    /// Redis key namespace.
    #[serde(default)]
    pub(crate) namespace: Option<At<String>>,
    /// Request defaults.
    #[serde(default)]
    pub(crate) defaults: Option<RawDefaults>,
    /// Retry and failover settings.
    #[serde(default)]
    pub(crate) retry: Option<RawRetry>,
    /// Providers in order; absent is reported as "no providers" by validation.
    #[serde(default)]
    pub(crate) providers: Option<At<Vec<At<RawProvider>>>>,
    /// Tenant tiers and who is in which.
    #[serde(default)]
    pub(crate) tenants: Option<RawTenants>,
    /// How batch requests share capacity with interactive ones.
    #[serde(default)]
    pub(crate) priorities: Option<RawPriorities>,
    /// Routed aliases and their rules.
    #[serde(default)]
    pub(crate) routes: Option<Named<Vec<At<RawRule>>>>,
    /// The OpenAI-compatible gateway (`llmroute serve`).
    #[serde(default)]
    pub(crate) gateway: Option<RawGateway>,
    /// Timeouts and failure mode of the shared ledger.
    #[serde(default)]
    pub(crate) ledger: Option<RawLedger>,
    /// Where usage records go.
    #[serde(default)]
    pub(crate) usage: Option<At<RawUsage>>,
    /// Where traces go.
    #[serde(default)]
    pub(crate) telemetry: Option<RawTelemetry>,
}

/// `telemetry:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTelemetry {
    #[serde(default)]
    pub(crate) endpoint: Option<At<String>>,
    #[serde(default)]
    pub(crate) sample_ratio: Option<At<Number>>,
    #[serde(default)]
    pub(crate) service_name: Option<At<String>>,
    #[serde(default)]
    pub(crate) capture_content: Option<At<bool>>,
}

/// `ledger:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLedger {
    #[serde(default)]
    pub(crate) timeout_ms: Option<At<Number>>,
    #[serde(default)]
    pub(crate) on_error: Option<At<String>>,
    #[serde(default)]
    pub(crate) heartbeat_ms: Option<At<Number>>,
}

/// `gateway:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGateway {
    #[serde(default)]
    pub(crate) listen: Option<At<String>>,
    #[serde(default)]
    pub(crate) metrics_listen: Option<At<String>>,
    #[serde(default)]
    pub(crate) body_limit_bytes: Option<At<Number>>,
    #[serde(default)]
    pub(crate) body_timeout_secs: Option<At<Number>>,
    #[serde(default)]
    pub(crate) keys: Option<Vec<At<RawKey>>>,
    #[serde(default)]
    pub(crate) admin_keys: Option<Vec<At<String>>>,
    #[serde(default)]
    pub(crate) forward_headers: Option<Vec<At<String>>>,
    #[serde(default)]
    pub(crate) grace_secs: Option<At<Number>>,
}

/// One entry of `gateway.keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKey {
    pub(crate) sha256: At<String>,
    pub(crate) tenant: At<String>,
    #[serde(default)]
    pub(crate) priority: Option<At<String>>,
    #[serde(default)]
    pub(crate) models: Option<Vec<At<String>>>,
}

/// One rule of a route.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    #[serde(default)]
    pub(crate) when: Option<RawWhen>,
    pub(crate) model: At<String>,
}

/// `when:` of a rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWhen {
    #[serde(default)]
    pub(crate) prompt_tokens: Option<At<RawRange>>,
    #[serde(default)]
    pub(crate) tools: Option<At<bool>>,
    #[serde(default)]
    pub(crate) images: Option<At<bool>>,
    #[serde(default)]
    pub(crate) tiers: Option<Vec<At<String>>>,
    #[serde(default)]
    pub(crate) priority: Option<At<String>>,
}

/// `prompt_tokens:` of a rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRange {
    #[serde(default)]
    pub(crate) at_least: Option<At<Number>>,
    #[serde(default)]
    pub(crate) below: Option<At<Number>>,
}

/// `defaults:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    #[serde(default)]
    pub(crate) model: Option<At<String>>,
    #[serde(default)]
    pub(crate) output_tokens: Option<At<Number>>,
    #[serde(default)]
    pub(crate) max_output_tokens: Option<At<Number>>,
    #[serde(default)]
    pub(crate) slot_ttl_secs: Option<At<Number>>,
}

/// `retry:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    #[serde(default)]
    pub(crate) max_attempts: Option<At<Number>>,
    #[serde(default)]
    pub(crate) base_ms: Option<At<Number>>,
    #[serde(default)]
    pub(crate) cap_ms: Option<At<Number>>,
    #[serde(default)]
    pub(crate) deadline_secs: Option<At<Number>>,
    #[serde(default)]
    pub(crate) attempt_timeout_secs: Option<At<Number>>,
    #[serde(default)]
    pub(crate) max_cooldown_secs: Option<At<Number>>,
}

/// One entry of `providers:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProvider {
    pub(crate) name: At<String>,
    pub(crate) api: At<String>,
    pub(crate) base_url: At<String>,
    pub(crate) api_key_env: At<String>,
    #[serde(default)]
    pub(crate) limits: Option<RawLimits>,
    /// Absent is reported as "no models" by validation.
    #[serde(default)]
    pub(crate) models: Option<At<Vec<At<RawModel>>>>,
}

/// `limits:` of a provider or a model. Each key is optional: absent means unlimited.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    #[serde(default)]
    pub(crate) rpm: Option<At<Number>>,
    #[serde(default)]
    pub(crate) tpm: Option<At<Number>>,
    #[serde(default)]
    pub(crate) itpm: Option<At<Number>>,
    #[serde(default)]
    pub(crate) otpm: Option<At<Number>>,
    #[serde(default)]
    pub(crate) concurrency: Option<At<Number>>,
    #[serde(default)]
    pub(crate) rpd: Option<At<Number>>,
    #[serde(default)]
    pub(crate) tpd: Option<At<Number>>,
    /// Where the day of `rpd` and `tpd` ends: `utc` or an IANA time zone.
    #[serde(default)]
    pub(crate) day_resets: Option<At<String>>,
}

/// One entry of a provider's `models:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModel {
    pub(crate) name: At<String>,
    /// `chat` or `embedding`; absent: `embedding` if listed in `capabilities`, else `chat`.
    #[serde(default)]
    pub(crate) kind: Option<At<String>>,
    #[serde(default)]
    pub(crate) aliases: Option<Vec<At<String>>>,
    pub(crate) price: At<RawPrice>,
    #[serde(default)]
    pub(crate) limits: Option<RawLimits>,
    #[serde(default)]
    pub(crate) max_output_tokens: Option<At<Number>>,
    #[serde(default)]
    pub(crate) capabilities: Option<At<Vec<At<String>>>>,
    #[serde(default)]
    pub(crate) lease: Option<At<RawLease>>,
    /// An embedding model's default vector size.
    #[serde(default)]
    pub(crate) dimensions: Option<At<Number>>,
}

/// A model's `lease:`, `auto` or a block.
#[derive(Debug)]
pub(crate) enum RawLease {
    Named(String),
    Block(Box<RawLeaseBlock>),
}

/// Read by hand rather than as an untagged enum, which would buffer the value: its lines would
/// be lost, a list would pass for a block, and a misspelt field would get serde's "did not
/// match any variant" instead of its name.
impl<'de> Deserialize<'de> for RawLease {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LeaseVisitor;
        impl<'de> Visitor<'de> for LeaseVisitor {
            type Value = RawLease;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`auto`, or a block `{ requests: 50, tokens: 50000, secs: 5 }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawLease, E> {
                Ok(RawLease::Named(v.to_owned()))
            }
            // Other scalars are names validation refuses, with its message.
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawLease, E> {
                Ok(RawLease::Named(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawLease, E> {
                Ok(RawLease::Named(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawLease, E> {
                Ok(RawLease::Named(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawLease, E> {
                Ok(RawLease::Named(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawLease, A::Error> {
                let block = RawLeaseBlock::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawLease::Block(Box::new(block)))
            }
        }
        deserializer.deserialize_any(LeaseVisitor)
    }
}

/// `lease: { requests, tokens, secs }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLeaseBlock {
    pub(crate) requests: At<Number>,
    #[serde(default)]
    pub(crate) tokens: Option<At<Number>>,
    #[serde(default)]
    pub(crate) secs: Option<At<Number>>,
}

/// `price:` in USD per million tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrice {
    pub(crate) input: At<Number>,
    /// Required of chat models; an embedding model's may be absent or 0.
    #[serde(default)]
    pub(crate) output: Option<At<Number>>,
    #[serde(default)]
    pub(crate) cached_input: Option<At<Number>>,
    #[serde(default)]
    pub(crate) cache_write: Option<At<Number>>,
    #[serde(default)]
    pub(crate) cache_write_1h: Option<At<Number>>,
    /// Higher bands for long prompts.
    #[serde(default)]
    pub(crate) above: Option<At<Vec<At<RawPriceTier>>>>,
}

/// One entry of `price.above`: the prices of prompts longer than `prompt_tokens`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPriceTier {
    pub(crate) prompt_tokens: At<Number>,
    pub(crate) input: At<Number>,
    #[serde(default)]
    pub(crate) output: Option<At<Number>>,
    #[serde(default)]
    pub(crate) cached_input: Option<At<Number>>,
    #[serde(default)]
    pub(crate) cache_write: Option<At<Number>>,
    #[serde(default)]
    pub(crate) cache_write_1h: Option<At<Number>>,
}

/// `tenants:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTenants {
    /// Tier of tenants not listed in `members`; absent: they are unlimited and untracked.
    #[serde(default)]
    pub(crate) default_tier: Option<At<String>>,
    /// Tier name -> its limits and budget; a tier written with nothing after it is unlimited.
    #[serde(default)]
    pub(crate) tiers: Option<Named<Option<RawTier>>>,
    /// Tenant name -> tier name.
    #[serde(default)]
    pub(crate) members: Option<Named<At<String>>>,
}

/// One entry of `tenants.tiers`: limits directly in the map, next to `budget`. Absent: unlimited.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTier {
    #[serde(default)]
    pub(crate) rpm: Option<At<Number>>,
    #[serde(default)]
    pub(crate) tpm: Option<At<Number>>,
    #[serde(default)]
    pub(crate) concurrency: Option<At<Number>>,
    #[serde(default)]
    pub(crate) rpd: Option<At<Number>>,
    #[serde(default)]
    pub(crate) tpd: Option<At<Number>>,
    #[serde(default)]
    pub(crate) budget: Option<RawBudget>,
    /// `lease: auto`: its tenants' limits and budgets may be taken in blocks (Redis only).
    #[serde(default)]
    pub(crate) lease: Option<At<RawLease>>,
}

impl RawTier {
    /// The limit keys, in the shape provider and model `limits:` have.
    pub(crate) fn limits(&self) -> RawLimits {
        RawLimits {
            rpm: self.rpm.clone(),
            tpm: self.tpm.clone(),
            itpm: None,
            otpm: None,
            concurrency: self.concurrency.clone(),
            rpd: self.rpd.clone(),
            tpd: self.tpd.clone(),
            day_resets: None,
        }
    }
}

/// `budget:` of a tier, in USD. Each key is optional: absent means unlimited.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudget {
    #[serde(default)]
    pub(crate) daily_usd: Option<At<Number>>,
    #[serde(default)]
    pub(crate) monthly_usd: Option<At<Number>>,
}

/// `priorities:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPriorities {
    #[serde(default)]
    pub(crate) batch_share: Option<At<Number>>,
    #[serde(default)]
    pub(crate) batch_aging_secs: Option<At<Number>>,
}
/// Parse the text; the error is serde-saphyr's. `.nan` and `.inf` pass through as floats so that
/// validation reports them with the field they belong to.
pub(crate) fn parse(text: &str) -> Result<RawConfig, serde_saphyr::Error> {
    let options = serde_saphyr::options! {
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    };
    serde_saphyr::from_str_with_options(text, options)
}
