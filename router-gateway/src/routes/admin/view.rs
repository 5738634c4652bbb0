//! The bodies the admin API reads for keys: create, update and rotate (checked in `keyring`).

use router_core::flow::Priority;
use serde::{Deserialize, Deserializer};

use crate::errors::ApiError;
use crate::keyring::{Change, LimitsPatch, LimitsView, NewKey};

/// `POST /admin/v1/keys`: a [`NewKey`].
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
    #[serde(default)]
    pub(super) limits: LimitsView,
}

/// `PATCH /admin/v1/keys/{id}`: a [`Change`]; `null` clears `priority` and `expires_at`.
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
    /// A merge patch of the key's own limits; `null` clears them all.
    #[serde(default, deserialize_with = "present")]
    pub(super) limits: Option<Option<LimitsPatch>>,
}

/// `POST /admin/v1/keys/{id}/rotate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Rotate {
    /// How long the secret before stays accepted, seconds.
    #[serde(default = "default_grace")]
    pub(super) grace_secs: u64,
}

fn default_grace() -> u64 {
    crate::keyring::DEFAULT_GRACE_SECS
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

impl From<Create> for NewKey {
    fn from(c: Create) -> Self {
        NewKey {
            tenant: c.tenant,
            name: c.name,
            models: c.models,
            priority: c.priority,
            expires_at: c.expires_at,
            expires_in_days: c.expires_in_days,
            limits: c.limits,
        }
    }
}

impl From<Update> for Change {
    fn from(u: Update) -> Self {
        Change {
            name: u.name,
            models: u.models,
            priority: u.priority,
            expires_at: u.expires_at,
            limits: u.limits.map(|patch| patch.unwrap_or(LimitsPatch::CLEAR)),
        }
    }
}
