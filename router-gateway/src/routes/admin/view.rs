//! What the admin API reads and writes about keys: a key as shown (never its secret, except the
//! once it is made), and the bodies of create, update and rotate, checked against the
//! configuration.

use router_core::config::{GatewayKey, Registry, tenant_name_problem};
use router_core::flow::Priority;
use router_core::keys::KeyRecord;
use serde::{Deserialize, Deserializer, Serialize};

use crate::errors::ApiError;

/// A key as the admin API shows it.
#[derive(Debug, Serialize)]
pub(super) struct KeyView {
    pub(super) id: String,
    name: String,
    tenant: String,
    models: Vec<String>,
    priority: Option<Priority>,
    /// `active`, `expired` or `revoked`.
    state: &'static str,
    /// `runtime` (the key store: changeable) or `config` (`gateway.keys`: read-only).
    source: &'static str,
    created_at: Option<u64>,
    expires_at: Option<u64>,
    revoked_at: Option<u64>,
    /// Until when the secret before the last rotation is still accepted.
    grace_until: Option<u64>,
    /// The secret: only in the answer that made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

impl KeyView {
    /// A runtime key at `now`.
    pub(super) fn runtime(record: &KeyRecord, now: u64) -> Self {
        KeyView {
            id: record.id.clone(),
            name: record.name.clone(),
            tenant: record.tenant.clone(),
            models: record.models.clone(),
            priority: record.priority,
            state: record.state(now).as_str(),
            source: "runtime",
            created_at: Some(record.created_at),
            expires_at: record.expires_at,
            revoked_at: record.revoked_at,
            grace_until: record.grace_until(now),
            key: None,
        }
    }

    /// A key of `gateway.keys`: its id is the first 12 hex digits of its hash.
    pub(super) fn config(key: &GatewayKey) -> Self {
        KeyView {
            id: config_id(key),
            name: String::new(),
            tenant: key.tenant.clone(),
            models: key.models.clone(),
            priority: key.priority,
            state: "active",
            source: "config",
            created_at: None,
            expires_at: None,
            revoked_at: None,
            grace_until: None,
            key: None,
        }
    }

    /// Its tenant.
    pub(super) fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The same, with the secret shown this once.
    pub(super) fn with_secret(mut self, secret: String) -> Self {
        self.key = Some(secret);
        self
    }
}

/// The id a key of `gateway.keys` is listed by.
pub(super) fn config_id(key: &GatewayKey) -> String {
    key.sha256.chars().take(12).collect()
}

/// `POST /admin/v1/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Create {
    pub(super) tenant: String,
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) models: Vec<String>,
    #[serde(default)]
    pub(super) priority: Option<Priority>,
    /// Unix seconds.
    #[serde(default)]
    pub(super) expires_at: Option<u64>,
    #[serde(default)]
    pub(super) expires_in_days: Option<u64>,
}

/// `PATCH /admin/v1/keys/{id}`: each field given replaces the key's; `null` clears `priority`
/// and `expires_at`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Update {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) models: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    pub(super) priority: Option<Option<Priority>>,
    #[serde(default, deserialize_with = "present")]
    pub(super) expires_at: Option<Option<u64>>,
}

/// `POST /admin/v1/keys/{id}/rotate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Rotate {
    /// How long the secret before stays accepted, seconds.
    #[serde(default = "default_grace")]
    pub(super) grace_secs: u64,
}

/// An hour: time to roll the new secret out.
pub(super) const DEFAULT_GRACE_SECS: u64 = 3600;

fn default_grace() -> u64 {
    DEFAULT_GRACE_SECS
}

/// A field that is present, `null` included.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The body `bytes` as `T`; an empty body is `{}`. The error names the field.
pub(super) fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    crate::body::parse(bytes, "a JSON object").map_err(ApiError::bad_request)
}

/// Checks that `tenant` can be served: a valid name with a tier.
pub(super) fn check_tenant(registry: &Registry, tenant: &str) -> Result<(), ApiError> {
    if let Some(problem) = tenant_name_problem(tenant) {
        return Err(ApiError::bad_request(format!("`tenant`: {problem}")));
    }
    if registry.tier_of(tenant).is_none() {
        return Err(ApiError::bad_request(format!(
            "`tenant`: `{tenant}` has no tier, so its key could not be served; add it to \
             `tenants.members` or set `tenants.default_tier`"
        )));
    }
    Ok(())
}

/// Checks that every one of `models` is a configured model or alias.
pub(super) fn check_models(registry: &Registry, models: &[String]) -> Result<(), ApiError> {
    for (i, model) in models.iter().enumerate() {
        let known = registry.known_models().contains(&model.as_str())
            || registry.routes.get(model).is_some();
        if !known {
            return Err(ApiError::bad_request(format!(
                "`models[{i}]`: `{model}` is no configured model or alias"
            )));
        }
    }
    Ok(())
}

/// The expiry asked for at `now`: a time, or a number of days, not both; never in the past.
pub(super) fn expiry(
    at: Option<u64>,
    in_days: Option<u64>,
    now: u64,
) -> Result<Option<u64>, ApiError> {
    let at = match (at, in_days) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give `expires_at` or `expires_in_days`, not both",
            ));
        }
        (Some(at), None) => Some(at),
        (None, Some(days)) => Some(now.saturating_add(days.saturating_mul(86_400))),
        (None, None) => None,
    };
    if at.is_some_and(|at| at <= now) {
        return Err(ApiError::bad_request(format!(
            "`expires_at`: it is in the past (now is {now}, Unix seconds)"
        )));
    }
    Ok(at)
}
