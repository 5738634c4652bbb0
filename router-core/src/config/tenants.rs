//! Tenants and priorities: tiers with their limits and budgets, who is in which tier, the rule
//! for a tenant's name, and the share of capacity batch requests may use.

use super::values::Limits;

/// Characters a value placed inside a Redis hash tag (`{...}`) must not contain: the namespace
/// and tenant names.
pub(crate) const NOT_IN_HASH_TAG: [char; 2] = ['{', '}'];

/// How usage reports and traces name the tenant of a request that names none; no tenant may be
/// called so.
pub const NO_TENANT: &str = "-";

/// What is wrong with `name` as a tenant's name, if anything: it must not be blank, have
/// leading or trailing spaces, hold a control character, hold `{` or `}` (it is used inside
/// the Redis hash tag of the namespace), or be [`NO_TENANT`]. For the configuration, requests
/// and whatever writes a line of it (`llmroute keys new --tenant`).
pub fn tenant_name_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        Some("a tenant name must not be empty; write a name".to_owned())
    } else if name == NO_TENANT {
        Some(format!(
            "`{NO_TENANT}` stands for requests without a tenant in usage reports; choose another \
             name"
        ))
    } else if name.trim() != name {
        Some(format!(
            "tenant name `{name}` has leading or trailing spaces; remove them"
        ))
    } else if name.chars().any(char::is_control) {
        Some(format!(
            "tenant name {name:?} holds a control character; remove it"
        ))
    } else if name.contains(NOT_IN_HASH_TAG) {
        Some(format!(
            "tenant name `{name}` must not contain `{{` or `}}`: tenant names are used inside \
             the Redis hash tag of the namespace; use letters, digits, `-` and `_`"
        ))
    } else {
        None
    }
}

/// USD budgets per UTC calendar period; `None` = unlimited. Amounts are positive and finite.
/// A daily budget larger than the monthly one is allowed: both apply.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Budget {
    /// Spend allowed per UTC calendar day.
    pub daily_usd: Option<f64>,
    /// Spend allowed per UTC calendar month.
    pub monthly_usd: Option<f64>,
}

/// A tenant tier (`tenants.tiers` in `providers.yaml`): the limits and budget each of its
/// tenants gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Tier {
    /// Unique name, e.g. `free`.
    pub name: String,
    /// Limits of each tenant of this tier; `None` dimensions are unlimited.
    pub limits: Limits,
    /// Spend budget of each tenant of this tier.
    pub budget: Budget,
    /// `lease: auto`: an instance on a shared store takes each tenant's limits and budgets in
    /// blocks, admitting from them without a call (see docs/leases.md); false: every
    /// admission of its tenants is exact.
    pub lease: bool,
}

/// Tenant tiers and membership (`tenants:`). The default, with no tiers and no members, is what
/// a file without a `tenants` section gives: every tenant unlimited and untracked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tenants {
    /// Tier of tenants not listed in `members`; it names one of `tiers`.
    pub default_tier: Option<String>,
    /// Tiers in configuration order, names unique.
    pub tiers: Vec<Tier>,
    /// Tenant name -> tier name, in configuration order. Tenant names are unique, non-empty and
    /// free of `{` and `}`; every tier name is one of `tiers`.
    pub members: Vec<(String, String)>,
}

impl Tenants {
    /// The tier named `name`, if any.
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.name == name)
    }

    /// The tier of `tenant`: its `members` entry, else `default_tier`, else `None` (unlimited,
    /// untracked).
    pub fn tier_of(&self, tenant: &str) -> Option<&Tier> {
        let name = self
            .members
            .iter()
            .find(|(member, _)| member == tenant)
            .map(|(_, tier)| tier)
            .or(self.default_tier.as_ref())?;
        self.tier(name)
    }
}

/// How batch requests share capacity with interactive ones (`priorities:`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Priorities {
    /// Share of each deployment's (and provider's) capacity that batch requests may use, in
    /// (0, 1]. The rest is kept for interactive requests.
    pub batch_share: f64,
    /// How far behind its arrival a waiting batch request stands in a deployment's line: only
    /// interactive requests that arrive within this of it pass it (the bound on how long
    /// interactive traffic can hold it back).
    pub batch_aging: std::time::Duration,
}

impl Priorities {
    /// `batch_share` when `providers.yaml` does not set it.
    pub const BATCH_SHARE: f64 = 0.8;
    /// `batch_aging_secs` when `providers.yaml` does not set it.
    pub const BATCH_AGING_SECS: u64 = 30;
    /// The largest `batch_aging_secs`.
    pub const MAX_BATCH_AGING_SECS: u64 = 3600;
}

impl Default for Priorities {
    fn default() -> Self {
        Priorities {
            batch_share: Self::BATCH_SHARE,
            batch_aging: std::time::Duration::from_secs(Self::BATCH_AGING_SECS),
        }
    }
}
