//! A key's own limits as the admin API and the CLI write and show them (budgets in USD), a
//! change to them, and the check that they stay within its tenant's.

use std::num::NonZeroU64;

use router_core::config::{Registry, Tier};
use router_core::keys::KeyLimits;
use router_core::ledger::usd_to_micros;
use serde::{Deserialize, Deserializer, Serialize};

use super::Refused;

/// A key's own limits: each absent one leaves only its tenant's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsView {
    /// Requests per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u64>,
    /// Tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// Requests in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// USD per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_usd: Option<f64>,
    /// USD per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_usd: Option<f64>,
}

impl LimitsView {
    /// How `limits` are shown.
    pub fn of(limits: &KeyLimits) -> Self {
        LimitsView {
            rpm: limits.rpm.map(NonZeroU64::get),
            tpm: limits.tpm.map(NonZeroU64::get),
            concurrency: limits.concurrency.map(NonZeroU64::get),
            daily_usd: limits.daily_micros.map(usd),
            monthly_usd: limits.monthly_micros.map(usd),
        }
    }

    /// The limits it asks for; the error names the field of a value that is no limit.
    pub(super) fn parsed(&self) -> Result<KeyLimits, Refused> {
        LimitsPatch::setting(self).apply(KeyLimits::default())
    }
}

/// `rpm 60, tpm 10000, concurrency 2, $5/day, $100/month`, or `none of its own`.
impl std::fmt::Display for LimitsView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        let counts = [
            ("rpm", self.rpm),
            ("tpm", self.tpm),
            ("concurrency", self.concurrency),
        ];
        for (name, v) in counts {
            if let Some(v) = v {
                parts.push(format!("{name} {v}"));
            }
        }
        for (per, v) in [("day", self.daily_usd), ("month", self.monthly_usd)] {
            if let Some(v) = v {
                parts.push(format!("${v}/{per}"));
            }
        }
        if parts.is_empty() {
            f.write_str("none of its own")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// A change to a key's own limits, as a JSON merge patch: a field given sets that limit, a field
/// given as `null` removes it, a field left out keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPatch {
    /// Requests per minute.
    #[serde(default, deserialize_with = "present")]
    pub rpm: Option<Option<u64>>,
    /// Tokens per minute.
    #[serde(default, deserialize_with = "present")]
    pub tpm: Option<Option<u64>>,
    /// Requests in flight.
    #[serde(default, deserialize_with = "present")]
    pub concurrency: Option<Option<u64>>,
    /// USD per UTC day.
    #[serde(default, deserialize_with = "present")]
    pub daily_usd: Option<Option<f64>>,
    /// USD per UTC calendar month.
    #[serde(default, deserialize_with = "present")]
    pub monthly_usd: Option<Option<f64>>,
}

impl LimitsPatch {
    /// Removes every limit of the key's own.
    pub const CLEAR: LimitsPatch = LimitsPatch {
        rpm: Some(None),
        tpm: Some(None),
        concurrency: Some(None),
        daily_usd: Some(None),
        monthly_usd: Some(None),
    };

    /// Sets the limits `view` gives and leaves the others.
    pub fn setting(view: &LimitsView) -> Self {
        let set = |v: Option<u64>| v.map(Some);
        LimitsPatch {
            rpm: set(view.rpm),
            tpm: set(view.tpm),
            concurrency: set(view.concurrency),
            daily_usd: view.daily_usd.map(Some),
            monthly_usd: view.monthly_usd.map(Some),
        }
    }

    /// `limits` with this change; the error names the field of a value that is no limit.
    pub(super) fn apply(&self, limits: KeyLimits) -> Result<KeyLimits, Refused> {
        Ok(KeyLimits {
            rpm: count("rpm", self.rpm, limits.rpm)?,
            tpm: count("tpm", self.tpm, limits.tpm)?,
            concurrency: count("concurrency", self.concurrency, limits.concurrency)?,
            daily_micros: budget("daily_usd", self.daily_usd, limits.daily_micros)?,
            monthly_micros: budget("monthly_usd", self.monthly_usd, limits.monthly_micros)?,
        })
    }
}

/// A count limit after a change: `old` when none is given.
fn count(
    field: &str,
    new: Option<Option<u64>>,
    old: Option<NonZeroU64>,
) -> Result<Option<NonZeroU64>, Refused> {
    match new {
        None => Ok(old),
        Some(Some(0)) => Err(Refused::Invalid(format!(
            "`limits.{field}`: 0 admits nothing; give a positive number, or null for no limit of \
             the key's own"
        ))),
        Some(v) => Ok(v.and_then(NonZeroU64::new)),
    }
}

/// A budget after a change, micro-USD: `old` when none is given.
fn budget(field: &str, new: Option<Option<f64>>, old: Option<u64>) -> Result<Option<u64>, Refused> {
    match new {
        None => Ok(old),
        Some(Some(usd)) if !usd.is_finite() || usd <= 0.0 => Err(Refused::Invalid(format!(
            "`limits.{field}`: {usd} is no budget; give a positive number of US dollars, or \
             null for no budget of the key's own"
        ))),
        Some(v) => Ok(v.map(usd_to_micros)),
    }
}

/// `micros` in USD.
fn usd(micros: u64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// A field that is present, `null` included.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `limits` if none is above the same limit of `tenant`'s tier: a key's own limits only narrow
/// its tenant's. The error names the field and both values.
pub(super) fn within(
    registry: &Registry,
    tenant: &str,
    limits: KeyLimits,
) -> Result<KeyLimits, Refused> {
    let Some(tier) = registry.tier_of(tenant) else {
        return Ok(limits);
    };
    let counts = [
        ("rpm", limits.rpm, tier.limits.rpm),
        ("tpm", limits.tpm, tier.limits.tpm),
        ("concurrency", limits.concurrency, tier.limits.concurrency),
    ];
    for (field, key, theirs) in counts {
        if let (Some(key), Some(theirs)) = (key, theirs)
            && key > theirs
        {
            return Err(above(
                field,
                tenant,
                tier,
                key.to_string(),
                theirs.to_string(),
            ));
        }
    }
    let budgets = [
        ("daily_usd", limits.daily_micros, tier.budget.daily_usd),
        (
            "monthly_usd",
            limits.monthly_micros,
            tier.budget.monthly_usd,
        ),
    ];
    for (field, key, theirs) in budgets {
        if let (Some(key), Some(theirs)) = (key, theirs)
            && key > usd_to_micros(theirs)
        {
            return Err(above(
                field,
                tenant,
                tier,
                usd(key).to_string(),
                theirs.to_string(),
            ));
        }
    }
    Ok(limits)
}

fn above(field: &str, tenant: &str, tier: &Tier, key: String, theirs: String) -> Refused {
    Refused::Invalid(format!(
        "`limits.{field}`: {key} is above tenant `{tenant}`'s {theirs} (tier `{}`); a key's own \
         limits only narrow its tenant's, so give at most {theirs}",
        tier.name
    ))
}
