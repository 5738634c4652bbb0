//! The key lifecycle, decided once: what creating, changing, rotating and revoking a runtime
//! key checks and stores. The admin API (`/admin/v1/keys`) and the CLI (`llmroute keys`) both
//! call these; each only shows the outcome its own way.
//!
//! Every change is stored over the revision read (`router_core::keys::update`), so changes made
//! at once on several instances all land. Keys of `gateway.keys` are read-only: they change in
//! the file.

mod limits;
mod view;

pub use limits::{LimitsPatch, LimitsView};
pub use view::KeyView;

use router_core::config::{GatewayKey, Registry, tenant_name_problem};
use router_core::flow::Priority;
use router_core::keys::{self, KeyRecord, KeyState, KeyStore, KeyStoreError, new_key_id};

use router_sdk::ApiKey;

use crate::auth::{hash_key, new_key};

/// How long a rotated-out secret stays accepted unless told otherwise: an hour, time to roll
/// the new one out.
pub const DEFAULT_GRACE_SECS: u64 = 3600;

/// A key to create.
#[derive(Debug, Clone, Default)]
pub struct NewKey {
    /// The tenant its requests are accounted to: it must have a tier.
    pub tenant: String,
    /// A name for people.
    pub name: String,
    /// The models and aliases it may use; empty: all.
    pub models: Vec<String>,
    /// The priority it pins.
    pub priority: Option<Priority>,
    /// When it stops working, Unix seconds.
    pub expires_at: Option<u64>,
    /// Or: in how many days it stops working.
    pub expires_in_days: Option<u64>,
    /// Its own limits and budgets, within its tenant's.
    pub limits: LimitsView,
}

/// A change to a key: each field given replaces the key's (`Some(None)` clears).
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// A new name.
    pub name: Option<String>,
    /// New models.
    pub models: Option<Vec<String>>,
    /// A new priority, or none.
    pub priority: Option<Option<Priority>>,
    /// A new expiry, or none.
    pub expires_at: Option<Option<u64>>,
    /// A change to its own limits.
    pub limits: Option<LimitsPatch>,
}

/// A key and its secret, shown this once.
#[derive(Debug)]
pub struct Issued {
    /// The key as stored.
    pub record: KeyRecord,
    /// The secret: never stored, shown only now; `Debug` never shows it.
    pub secret: ApiKey,
}

/// Why a lifecycle step was refused. Messages name the field or the key, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The request is wrong: the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// No key has the id.
    #[error("no key has the id `{0}`; `llmroute keys list` or `GET /admin/v1/keys` lists them")]
    NoKey(String),
    /// The key is not in a state for this (revoked, or one of the file's).
    #[error("{0}")]
    Conflict(String),
    /// The key store failed: nothing was changed.
    #[error("{0}; nothing was changed, try again")]
    Store(#[from] KeyStoreError),
    /// The system's random generator cannot be read.
    #[error("cannot draw a random key: {0}")]
    NoRandom(String),
}

/// Creates the key `new` at `now` (Unix seconds).
pub async fn create(
    store: &dyn KeyStore,
    registry: &Registry,
    new: NewKey,
    now: u64,
) -> Result<Issued, Refused> {
    check_tenant(registry, &new.tenant)?;
    check_models(registry, &new.models)?;
    let expires_at = expiry(new.expires_at, new.expires_in_days, now)?;
    let limits = limits::within(registry, &new.tenant, new.limits.parsed()?)?;
    let secret = secret()?;
    let mut record = KeyRecord::new(new_key_id(), new.name, new.tenant, hash_key(&secret), now);
    record.models = new.models;
    record.priority = new.priority;
    record.expires_at = expires_at;
    record.limits = limits;
    store.put(&record, None).await?;
    Ok(Issued {
        record,
        secret: ApiKey::new(secret),
    })
}

/// Applies `change` to the key `id`; a revoked key does not change.
pub async fn update(
    store: &dyn KeyStore,
    registry: &Registry,
    id: &str,
    change: Change,
    now: u64,
) -> Result<KeyRecord, Refused> {
    if let Some(models) = &change.models {
        check_models(registry, models)?;
    }
    if let Some(Some(at)) = change.expires_at {
        expiry(Some(at), None, now)?;
    }
    edit(store, registry, id, |k| {
        if k.state(now) == KeyState::Revoked {
            return Err(Refused::Conflict(format!(
                "key `{id}` is revoked: it cannot change"
            )));
        }
        if let Some(name) = &change.name {
            k.name.clone_from(name);
        }
        if let Some(models) = &change.models {
            k.models.clone_from(models);
        }
        if let Some(priority) = change.priority {
            k.priority = priority;
        }
        if let Some(at) = change.expires_at {
            k.expires_at = at;
        }
        if let Some(patch) = &change.limits {
            k.limits = limits::within(registry, &k.tenant, patch.apply(k.limits)?)?;
        }
        Ok(())
    })
    .await
}

/// Gives the key `id` a new secret; the one before stays accepted for `grace_secs`.
pub async fn rotate(
    store: &dyn KeyStore,
    registry: &Registry,
    id: &str,
    grace_secs: u64,
    now: u64,
) -> Result<Issued, Refused> {
    let secret = secret()?;
    let hash = hash_key(&secret);
    let record = edit(store, registry, id, |k| match k.state(now) {
        KeyState::Revoked => Err(Refused::Conflict(format!(
            "key `{id}` is revoked: a revoked key is not rotated; create a new one"
        ))),
        _ => {
            k.rotate(hash.clone(), grace_secs, now);
            Ok(())
        }
    })
    .await?;
    Ok(Issued {
        record,
        secret: ApiKey::new(secret),
    })
}

/// Revokes the key `id` (a revoked key stays revoked as it was).
pub async fn revoke(
    store: &dyn KeyStore,
    registry: &Registry,
    id: &str,
    now: u64,
) -> Result<KeyRecord, Refused> {
    edit(store, registry, id, |k| {
        k.revoke(now);
        Ok(())
    })
    .await
}

/// The runtime key `id`, or the key of `gateway.keys` listed as `id` (`Err`).
pub async fn find(
    store: &dyn KeyStore,
    registry: &Registry,
    id: &str,
) -> Result<Result<KeyRecord, GatewayKey>, Refused> {
    if let Some(key) = config_key(registry, id) {
        return Ok(Err(key.clone()));
    }
    let found = keys::find(store, id).await?;
    found.map(Ok).ok_or_else(|| Refused::NoKey(id.to_owned()))
}

/// The id a key of `gateway.keys` is listed by: the first 12 hex digits of its hash.
pub fn config_id(key: &GatewayKey) -> String {
    key.sha256.chars().take(12).collect()
}

/// The key of `gateway.keys` listed as `id`.
fn config_key<'r>(registry: &'r Registry, id: &str) -> Option<&'r GatewayKey> {
    registry.gateway.keys.iter().find(|k| config_id(k) == id)
}

/// Applies `change` to the runtime key `id` over the revision read.
async fn edit(
    store: &dyn KeyStore,
    registry: &Registry,
    id: &str,
    change: impl FnMut(&mut KeyRecord) -> Result<(), Refused>,
) -> Result<KeyRecord, Refused> {
    if config_key(registry, id).is_some() {
        return Err(Refused::Conflict(format!(
            "key `{id}` is one of `gateway.keys` in the configuration file: change or remove its \
             line there, then reload"
        )));
    }
    let changed = keys::update(store, id, change).await?;
    changed.ok_or_else(|| Refused::NoKey(id.to_owned()))?
}

fn secret() -> Result<String, Refused> {
    new_key().map_err(|e| Refused::NoRandom(e.to_string()))
}

/// Checks that `tenant` can be served: a valid name with a tier.
fn check_tenant(registry: &Registry, tenant: &str) -> Result<(), Refused> {
    if let Some(problem) = tenant_name_problem(tenant) {
        return Err(Refused::Invalid(format!("`tenant`: {problem}")));
    }
    if registry.tier_of(tenant).is_none() {
        return Err(Refused::Invalid(format!(
            "`tenant`: `{tenant}` has no tier, so its key could not be served; add it to \
             `tenants.members` or set `tenants.default_tier`"
        )));
    }
    Ok(())
}

/// Checks that every one of `models` is a configured model or alias.
fn check_models(registry: &Registry, models: &[String]) -> Result<(), Refused> {
    for (i, model) in models.iter().enumerate() {
        let known = registry.known_models().contains(&model.as_str())
            || registry.routes.get(model).is_some();
        if !known {
            return Err(Refused::Invalid(format!(
                "`models[{i}]`: `{model}` is no configured model or alias"
            )));
        }
    }
    Ok(())
}

/// The expiry asked for at `now`: a time, or a number of days, not both; never in the past.
fn expiry(at: Option<u64>, in_days: Option<u64>, now: u64) -> Result<Option<u64>, Refused> {
    let at = match (at, in_days) {
        (Some(_), Some(_)) => {
            return Err(Refused::Invalid(
                "give `expires_at` or `expires_in_days`, not both".to_owned(),
            ));
        }
        (Some(at), None) => Some(at),
        (None, Some(days)) => Some(now.saturating_add(days.saturating_mul(86_400))),
        (None, None) => None,
    };
    if at.is_some_and(|at| at <= now) {
        return Err(Refused::Invalid(format!(
            "`expires_at`: it is in the past (now is {now}, Unix seconds)"
        )));
    }
    Ok(at)
}
