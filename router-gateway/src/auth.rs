//! Who is calling: an API key, looked up by its SHA-256 (keys are never kept in clear), names
//! the tenant, and may pin a priority and the models it may use; and what the caller may see:
//! those models, their deployments and providers. Keys come from `gateway.keys` (read-only) and
//! from the runtime key store (see `keys.rs`); admin keys, from `gateway.admin_keys` and
//! `LLMROUTE_ADMIN_KEY`, open `/admin/v1` and `/ui` only.

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use router_core::clock::{Clock, SystemClock};
use router_core::config::{DeploymentId, Gateway, GatewayKey, Registry};
use router_core::keys::{KeyState, KeyStore, KeyStoreError, MemoryKeys};
use router_core::ledger::TenantSpec;
use router_sdk::Priority;
use router_sdk::trace::to_hex;
use sha2::{Digest, Sha256};

use crate::Auth;
use crate::errors::ApiError;
use crate::keys::RuntimeKeys;

/// The keys the gateway accepts, by hash.
#[derive(Debug)]
pub struct Access {
    keys: HashMap<String, GatewayKey>,
    /// The hashes of `gateway.admin_keys`.
    admins: Vec<String>,
    /// The hashes of admin keys given outside the file (`LLMROUTE_ADMIN_KEY`).
    more_admins: Vec<String>,
    runtime: Arc<RuntimeKeys>,
    clock: Arc<dyn Clock>,
    auth: Auth,
}

/// A caller the gateway let in.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    /// The tenant its requests are accounted to (`None` without auth).
    pub(crate) tenant: Option<String>,
    /// The priority its key pins.
    pub(crate) priority: Option<Priority>,
    /// The models and aliases it may use; empty: all.
    models: Vec<String>,
    /// Its key's identifier in usage records, never the key: a runtime key's id, or for a key
    /// of `gateway.keys` the first 12 hex digits of its SHA-256 (what the file stores).
    pub(crate) key_id: Option<String>,
    /// A runtime key's own limits and budgets, as the ledger accounts them.
    pub(crate) account: Option<TenantSpec>,
}

/// An admin the gateway let in: `admin:` and the first 12 hex digits of its key's SHA-256, for
/// the audit log.
#[derive(Debug, Clone)]
pub(crate) struct Admin(pub(crate) String);

/// The SHA-256 of `key`, 64 lowercase hex digits: what `gateway.keys` stores.
pub fn hash_key(key: &str) -> String {
    to_hex(&Sha256::digest(key.as_bytes()))
}

/// A new random API key (`llmr-` and 48 hex digits: 192 bits from the operating system's
/// generator), or an error when that generator cannot be read.
pub fn new_key() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)?;
    Ok(format!("llmr-{}", to_hex(&bytes)))
}

impl Access {
    /// The keys of `gateway`, checked as `auth` says, with runtime keys in memory (see
    /// [`Access::with_store`]).
    pub fn new(gateway: &Gateway, auth: Auth) -> Self {
        let keys = gateway
            .keys
            .iter()
            .map(|k| (k.sha256.clone(), k.clone()))
            .collect();
        Self {
            keys,
            admins: gateway.admin_keys.clone(),
            more_admins: Vec::new(),
            runtime: Arc::new(RuntimeKeys::new(Arc::new(MemoryKeys::default()))),
            clock: Arc::new(SystemClock),
            auth,
        }
    }

    /// The same, with runtime keys kept in `store`.
    pub fn with_store(mut self, store: Arc<dyn KeyStore>) -> Self {
        self.runtime = Arc::new(RuntimeKeys::new(store));
        self
    }

    /// The same, also accepting `key` as an admin key (`LLMROUTE_ADMIN_KEY`'s).
    pub fn with_admin_key(mut self, key: &str) -> Self {
        self.more_admins.push(hash_key(key));
        self
    }

    /// The same callers under the reloaded `gateway`: its keys and admin keys, the same runtime
    /// keys, admin keys from outside the file and clock.
    pub(crate) fn reloaded(&self, gateway: &Gateway) -> Access {
        Access {
            more_admins: self.more_admins.clone(),
            runtime: self.runtime.clone(),
            clock: self.clock.clone(),
            ..Access::new(gateway, self.auth)
        }
    }

    /// The same, telling key expiry and rotation grace by `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Whether any admin key is set.
    pub fn has_admins(&self) -> bool {
        !self.admins.is_empty() || !self.more_admins.is_empty()
    }

    /// Reads the runtime keys now: before serving, so that the first requests find them.
    pub async fn load_keys(&self) -> Result<(), KeyStoreError> {
        self.runtime.refresh().await.map(drop)
    }

    pub(crate) fn runtime(&self) -> &Arc<RuntimeKeys> {
        &self.runtime
    }

    /// Now, Unix seconds.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms() / 1000
    }

    /// The caller of a request with `headers`: a known key whose tenant has a tier, or an error
    /// (401 for a missing, unknown, expired or revoked key, 403 for a tenant the configuration
    /// does not know).
    pub(crate) fn caller(
        &self,
        registry: &Registry,
        headers: &HeaderMap,
    ) -> Result<Caller, ApiError> {
        if self.auth == Auth::None {
            return Ok(Caller::default());
        }
        let hash = hash_key(bearer(headers)?);
        let caller = match self.keys.get(&hash) {
            Some(key) => Caller {
                tenant: Some(key.tenant.clone()),
                priority: key.priority,
                models: key.models.clone(),
                key_id: Some(key.sha256.chars().take(12).collect()),
                account: None,
            },
            None => self.runtime_caller(&hash)?,
        };
        let tenant = caller.tenant.as_deref().unwrap_or_default();
        if registry.tier_of(tenant).is_none() {
            return Err(ApiError::forbidden(format!(
                "this key's tenant `{tenant}` has no tier: add it to `tenants.members` or set \
                 `tenants.default_tier`"
            )));
        }
        Ok(caller)
    }

    /// The caller of a runtime key by its secret's hash, as this instance last read the keys
    /// (a key store away at start is read by the watcher as soon as it answers).
    fn runtime_caller(&self, hash: &str) -> Result<Caller, ApiError> {
        let unknown = || ApiError::unauthorized("unknown API key");
        let key = self.runtime.by_hash(hash).ok_or_else(unknown)?;
        let now = self.now();
        match key.state(now) {
            KeyState::Active if key.holds(hash, now) => {}
            KeyState::Active => {
                return Err(ApiError::unauthorized(
                    "this key was rotated and its grace period is over: use the new key",
                ));
            }
            KeyState::Expired => return Err(ApiError::unauthorized("this key has expired")),
            KeyState::Revoked => return Err(ApiError::unauthorized("this key was revoked")),
        }
        Ok(Caller {
            tenant: Some(key.tenant.clone()),
            priority: key.priority,
            models: key.models.clone(),
            key_id: Some(key.id.clone()),
            account: key.limits.account(&key.id),
        })
    }

    /// The admin calling with `headers`: 401 without a key or with an unknown one, 403 with a
    /// tenant's key. The key comes as a bearer key (see [`bearer`]) or, for a browser, as the
    /// password of `Authorization: Basic` (any user name).
    pub(crate) fn admin(&self, headers: &HeaderMap) -> Result<Admin, ApiError> {
        let key = match basic_password(headers) {
            Some(password) => password?,
            None => bearer(headers)?.to_owned(),
        };
        let hash = hash_key(&key);
        if self.admins.contains(&hash) || self.more_admins.contains(&hash) {
            return Ok(Admin(format!("admin:{}", &hash[..12])));
        }
        if self.keys.contains_key(&hash) || self.runtime.by_hash(&hash).is_some() {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "permission_error",
                "not_admin",
                "this is a tenant's key: the admin API needs a key of `gateway.admin_keys` or \
                 LLMROUTE_ADMIN_KEY"
                    .to_owned(),
            ));
        }
        Err(ApiError::unauthorized(
            "unknown admin key: send a key of `gateway.admin_keys` or LLMROUTE_ADMIN_KEY",
        ))
    }
}

/// The password of an `Authorization: Basic base64(user:password)` header (RFC 7617), `None`
/// for a header of another scheme or none. An error never echoes the header.
fn basic_password(headers: &HeaderMap) -> Option<Result<String, ApiError>> {
    use base64::Engine;
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let bad = || {
        ApiError::unauthorized(
            "the `Authorization: Basic` credentials are not base64 of `user:password`: sign in \
             with any user name and an admin key as the password",
        )
    };
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim());
    let Ok(text) = decoded.map(String::from_utf8) else {
        return Some(Err(bad()));
    };
    let Ok(text) = text else {
        return Some(Err(bad()));
    };
    let Some((_user, password)) = text.split_once(':') else {
        return Some(Err(bad()));
    };
    if password.trim().is_empty() {
        return Some(Err(ApiError::unauthorized(
            "no admin key: sign in with any user name and an admin key as the password",
        )));
    }
    Some(Ok(password.trim().to_owned()))
}

/// The key of the `Authorization` header, `Bearer KEY`: the scheme in any case (RFC 7235), then
/// one or more spaces; without that header, the `x-api-key` header (Anthropic's). A header of
/// another scheme, or none, is an error that does not echo it.
fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let no_key = || {
        ApiError::unauthorized(
            "no API key: send `Authorization: Bearer KEY` (or `x-api-key: KEY`) with a key this \
             gateway gave you",
        )
    };
    let Some(value) = headers.get("authorization") else {
        // Anthropic's clients send their key as `x-api-key`.
        return match headers.get("x-api-key").map(|v| v.to_str().map(str::trim)) {
            Some(Ok(key)) if !key.is_empty() => Ok(key),
            Some(Err(_)) => Err(ApiError::unauthorized(
                "the `x-api-key` header is not text: send a key of `gateway.keys`",
            )),
            _ => Err(no_key()),
        };
    };
    let value = value.to_str().map_err(|_| {
        ApiError::unauthorized(
            "the `Authorization` header is not text: send `Authorization: Bearer KEY` with a key \
             of `gateway.keys`",
        )
    })?;
    let value = value.trim();
    let (scheme, key) = value.split_once(' ').unwrap_or((value, ""));
    if value.is_empty() {
        return Err(no_key());
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::unauthorized(
            "the `Authorization` header is not of the `Bearer` scheme: send \
             `Authorization: Bearer KEY` with a key of `gateway.keys`",
        ));
    }
    let key = key.trim();
    if key.is_empty() {
        return Err(no_key());
    }
    Ok(key)
}

impl Caller {
    /// The models and aliases the caller may ask for, sorted, each once: what `/v1/models`
    /// lists.
    pub(crate) fn models<'r>(&self, registry: &'r Registry) -> Vec<&'r str> {
        let mut names: Vec<&str> = registry.known_models();
        names.extend(registry.routes.0.iter().map(|r| r.alias.as_str()));
        names.sort_unstable();
        names.dedup();
        names.retain(|name| self.may_use(name).is_ok());
        names
    }

    /// The deployments serving the models and aliases the caller may ask for, in configuration
    /// order: what `/v1/quota` shows it, by the rule of `/v1/models`.
    pub(crate) fn deployments(&self, registry: &Registry) -> Vec<DeploymentId> {
        let mut all: Vec<_> = self
            .models(registry)
            .into_iter()
            .flat_map(|name| registry.serving(name))
            .collect();
        all.sort_unstable_by_key(|d| d.0);
        all.dedup();
        all
    }

    /// The providers of `x-llmroute-providers` (`list`, comma-separated), each one that serves
    /// a model the caller may use; an error names one that does not, and lists only those that
    /// do.
    pub(crate) fn providers_asked(
        &self,
        registry: &Registry,
        list: &str,
    ) -> Result<Vec<String>, ApiError> {
        let mut usable: Vec<&str> = self
            .deployments(registry)
            .into_iter()
            .map(|d| registry.provider_of(d).name.as_str())
            .collect();
        usable.sort_unstable();
        usable.dedup();
        let asked = list.split(',').map(str::trim).filter(|p| !p.is_empty());
        asked
            .map(|name| match usable.contains(&name) {
                true => Ok(name.to_owned()),
                false => Err(ApiError::bad_request(format!(
                    "header `x-llmroute-providers`: `{name}` serves no model this key may use; \
                     name any of: {}",
                    usable.join(", ")
                ))),
            })
            .collect()
    }

    /// Whether the caller's key may use `model`; an error names the models it may use.
    pub(crate) fn may_use(&self, model: &str) -> Result<(), ApiError> {
        if self.models.is_empty() || self.models.iter().any(|m| m == model) {
            return Ok(());
        }
        Err(ApiError::model_not_found(format!(
            "this key may not use `{model}`; it may use: {}",
            self.models.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_hash_is_its_sha256_in_lowercase_hex() {
        assert_eq!(
            hash_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_new_key_is_llmr_and_48_hex_digits() {
        let key = new_key().unwrap_or_default();
        let hex = key.strip_prefix("llmr-").unwrap_or_default();
        assert_eq!(hex.len(), 48, "{key}");
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }
}
