//! A runtime API key as the shared state store keeps it: a stable id (never the secret), who it
//! serves, and the SHA-256 of each secret it accepts. The secret itself is never stored.

use serde::{Deserialize, Serialize};

use super::KeyLimits;
use crate::flow::Priority;

/// One runtime API key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// Stable id, `key_` and 16 hex digits: what lists, usage records and the admin API name.
    pub id: String,
    /// A name for people (`ci`, `alice laptop`).
    pub name: String,
    /// The tenant its requests are accounted to.
    pub tenant: String,
    /// The models and aliases it may use; empty: all.
    #[serde(default)]
    pub models: Vec<String>,
    /// The priority it pins, if any.
    #[serde(default)]
    pub priority: Option<Priority>,
    /// When it stops working, Unix seconds; `None`: never.
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// Its own limits and budgets, within its tenant's.
    #[serde(default, skip_serializing_if = "KeyLimits::is_unlimited")]
    pub limits: KeyLimits,
    /// When it was created, Unix seconds.
    pub created_at: u64,
    /// When it was revoked, Unix seconds.
    #[serde(default)]
    pub revoked_at: Option<u64>,
    /// The secrets it accepts: the newest last; older ones only until their grace ends.
    pub secrets: Vec<KeySecret>,
    /// Its revision: each change stores it one higher, and only over the revision it read.
    pub rev: u64,
}

/// One accepted secret, by its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySecret {
    /// The SHA-256 of the secret, 64 lowercase hex digits.
    pub sha256: String,
    /// When it stops being accepted, Unix seconds (a rotated-out secret); `None`: never.
    #[serde(default)]
    pub until: Option<u64>,
}

/// Whether a key works now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyState {
    /// It authenticates.
    Active,
    /// Its `expires_at` has passed.
    Expired,
    /// It was revoked.
    Revoked,
}

impl KeyState {
    /// `active`, `expired` or `revoked`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Active => "active",
            KeyState::Expired => "expired",
            KeyState::Revoked => "revoked",
        }
    }
}

/// A new key id: `key_` and 16 random hex digits. Ids are names, not secrets.
pub fn new_key_id() -> String {
    format!("key_{:016x}", fastrand::u64(..))
}

impl KeyRecord {
    /// A new key `id` for `tenant` named `name`, accepting the secret whose SHA-256 is `sha256`.
    pub fn new(id: String, name: String, tenant: String, sha256: String, now: u64) -> Self {
        KeyRecord {
            id,
            name,
            tenant,
            models: Vec::new(),
            priority: None,
            expires_at: None,
            limits: KeyLimits::default(),
            created_at: now,
            revoked_at: None,
            secrets: vec![KeySecret {
                sha256,
                until: None,
            }],
            rev: 0,
        }
    }

    /// Whether it works at `now` (Unix seconds).
    pub fn state(&self, now: u64) -> KeyState {
        if self.revoked_at.is_some() {
            KeyState::Revoked
        } else if self.expires_at.is_some_and(|at| now >= at) {
            KeyState::Expired
        } else {
            KeyState::Active
        }
    }

    /// Whether `sha256` is one of its secrets still accepted at `now`.
    pub fn holds(&self, sha256: &str, now: u64) -> bool {
        self.secrets
            .iter()
            .any(|s| s.sha256 == sha256 && s.until.is_none_or(|until| now < until))
    }

    /// Makes `sha256` its secret; the ones before stay accepted for `grace_secs` more (their
    /// grace never grows), and those whose grace has ended are dropped.
    pub fn rotate(&mut self, sha256: String, grace_secs: u64, now: u64) {
        let end = now.saturating_add(grace_secs);
        self.secrets.retain(|s| s.until.is_none_or(|u| now < u));
        for s in &mut self.secrets {
            s.until = Some(s.until.map_or(end, |u| u.min(end)));
        }
        self.secrets.retain(|s| s.until.is_none_or(|u| now < u));
        self.secrets.push(KeySecret {
            sha256,
            until: None,
        });
    }

    /// Revokes it at `now`: no secret of it is accepted from then on.
    pub fn revoke(&mut self, now: u64) {
        self.revoked_at.get_or_insert(now);
    }

    /// When its newest secret's predecessors stop being accepted, if any still are.
    pub fn grace_until(&self, now: u64) -> Option<u64> {
        self.secrets
            .iter()
            .filter_map(|s| s.until)
            .filter(|&u| now < u)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> KeyRecord {
        KeyRecord::new("key_1".into(), "ci".into(), "acme".into(), "a".into(), 100)
    }

    #[test]
    fn a_rotated_key_accepts_its_old_secret_only_during_the_grace() {
        let mut k = key();
        k.rotate("b".into(), 60, 1_000);
        assert!(k.holds("a", 1_059) && k.holds("b", 1_059));
        assert!(!k.holds("a", 1_060) && k.holds("b", 1_060));
        assert_eq!(k.grace_until(1_000), Some(1_060));
        assert_eq!(k.grace_until(1_060), None);
    }

    #[test]
    fn a_second_rotation_never_lengthens_an_old_secrets_grace() {
        let mut k = key();
        k.rotate("b".into(), 60, 1_000);
        k.rotate("c".into(), 600, 1_010);
        assert!(!k.holds("a", 1_060), "a's grace ended at 1060");
        assert!(k.holds("b", 1_609) && !k.holds("b", 1_610));
        // A rotation with no grace drops every older secret at once.
        k.rotate("d".into(), 0, 1_020);
        assert_eq!(k.secrets.len(), 1);
        assert!(k.holds("d", 1_020) && !k.holds("c", 1_020));
    }

    #[test]
    fn revoked_beats_expired_and_expiry_is_exact() {
        let mut k = key();
        k.expires_at = Some(500);
        assert_eq!(k.state(499), KeyState::Active);
        assert_eq!(k.state(500), KeyState::Expired);
        k.revoke(400);
        k.revoke(450);
        assert_eq!(k.revoked_at, Some(400), "the first revocation is kept");
        assert_eq!(k.state(499), KeyState::Revoked);
    }

    #[test]
    fn ids_are_key_and_sixteen_hex_digits() {
        let id = new_key_id();
        assert_eq!(id.len(), 20);
        assert!(id.starts_with("key_"));
        assert!(id[4..].bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
