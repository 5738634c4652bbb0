//! A runtime key's own limits and budgets: within its tenant's, and checked with them in the same
//! atomic admission (the ledger keeps the key's account beside the tenant's).

use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};

use crate::config::Limits;
use crate::ledger::{BudgetMicros, TenantSpec};

/// A key's own limits; each `None` leaves only its tenant's. Budgets are micro-USD, so that a
/// stored record compares exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyLimits {
    /// Requests per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<NonZeroU64>,
    /// Tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<NonZeroU64>,
    /// Requests in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<NonZeroU64>,
    /// Spend per UTC day, micro-USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_micros: Option<u64>,
    /// Spend per UTC calendar month, micro-USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_micros: Option<u64>,
}

impl KeyLimits {
    /// Whether it limits nothing.
    pub fn is_unlimited(&self) -> bool {
        *self == KeyLimits::default()
    }

    /// The ledger's account of key `id` with these limits; `None` when they limit nothing.
    pub fn account(&self, id: &str) -> Option<TenantSpec> {
        let limits = Limits {
            rpm: self.rpm,
            tpm: self.tpm,
            concurrency: self.concurrency,
            ..Limits::default()
        };
        let budget = BudgetMicros {
            daily: self.daily_micros,
            monthly: self.monthly_micros,
        };
        (!self.is_unlimited()).then(|| TenantSpec::of_key(id, limits, budget))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Scope;

    #[test]
    fn a_key_without_limits_has_no_account_and_one_with_limits_has_its_own() {
        assert_eq!(KeyLimits::default().account("key_1"), None);
        let limits = KeyLimits {
            rpm: NonZeroU64::new(5),
            daily_micros: Some(2_000_000),
            ..KeyLimits::default()
        };
        let spec = limits.account("key_1").expect("limited");
        assert_eq!(spec.scope(), Scope::Key);
        assert_ne!(spec.name, "key_1", "no tenant's name");
        assert_eq!(spec.limits.rpm, NonZeroU64::new(5));
        assert_eq!(spec.budget.daily, Some(2_000_000));
    }

    #[test]
    fn records_written_before_key_limits_read_as_unlimited() {
        let read: KeyLimits = serde_json::from_str("{}").expect("empty object");
        assert!(read.is_unlimited());
        let json = serde_json::to_string(&KeyLimits::default()).expect("plain data");
        assert_eq!(json, "{}");
    }
}
