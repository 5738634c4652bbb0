//! A key as the admin API and the CLI show it: never its secret, except in the answer that
//! made it, and never a hash.

use router_core::config::GatewayKey;
use router_core::flow::Priority;
use router_core::keys::KeyRecord;
use router_sdk::ApiKey;
use serde::{Serialize, Serializer};

use super::LimitsView;

/// A key as the admin API and the CLI show it. Times are Unix seconds.
#[derive(Debug, Serialize)]
pub struct KeyView {
    /// Its stable id.
    pub id: String,
    /// Its name for people.
    pub name: String,
    /// The tenant its requests are accounted to.
    pub tenant: String,
    /// The models and aliases it may use; empty: all.
    pub models: Vec<String>,
    /// The priority it pins.
    pub priority: Option<Priority>,
    /// `active`, `expired` or `revoked`.
    pub state: &'static str,
    /// `runtime` (the key store: changeable) or `config` (`gateway.keys`: read-only).
    pub source: &'static str,
    /// When it was created (runtime keys).
    pub created_at: Option<u64>,
    /// When it stops working.
    pub expires_at: Option<u64>,
    /// When it was revoked.
    pub revoked_at: Option<u64>,
    /// Until when the secret before the last rotation is still accepted.
    pub grace_until: Option<u64>,
    /// Its own limits and budgets (runtime keys), within its tenant's.
    pub limits: LimitsView,
    /// The secret: only in the answer that made it. `Debug` never shows it.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "shown")]
    pub key: Option<ApiKey>,
}

impl KeyView {
    /// A runtime key at `now`.
    pub fn runtime(record: &KeyRecord, now: u64) -> Self {
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
            limits: LimitsView::of(&record.limits),
            key: None,
        }
    }

    /// A key of `gateway.keys`: its id is the first 12 hex digits of its hash.
    pub fn config(key: &GatewayKey) -> Self {
        KeyView {
            id: super::config_id(key),
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
            limits: LimitsView::default(),
            key: None,
        }
    }

    /// The same, with the secret shown this once.
    pub fn with_secret(mut self, secret: ApiKey) -> Self {
        self.key = Some(secret);
        self
    }
}

/// The secret, in the one answer that shows it.
fn shown<S: Serializer>(key: &Option<ApiKey>, to: S) -> Result<S::Ok, S::Error> {
    key.as_ref().map(ApiKey::expose).serialize(to)
}

#[cfg(test)]
mod tests {
    use router_core::keys::KeyRecord;

    use super::*;

    #[test]
    fn the_secret_is_in_the_json_that_shows_it_and_never_in_debug_output() {
        let secret = "llmr-0123456789abcdef0123456789abcdef0123456789abcdef";
        let record = KeyRecord::new("key_1".into(), "ci".into(), "acme".into(), "h".into(), 0);
        let view = KeyView::runtime(&record, 0).with_secret(ApiKey::new(secret.to_owned()));
        let json = serde_json::to_value(&view).expect("plain data");
        assert_eq!(json["key"], secret);
        assert!(!format!("{view:?}").contains("0123456789"), "{view:?}");
        let issued = super::super::Issued {
            record,
            secret: ApiKey::new(secret.to_owned()),
        };
        assert!(!format!("{issued:?}").contains("0123456789"), "{issued:?}");
    }
}
