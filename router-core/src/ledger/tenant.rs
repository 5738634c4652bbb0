//! Accounts: the tenant's and the API key's limits and USD budgets, which admission checks in the
//! same atomic step as the deployments'.
//!
//! A request has up to two accounts: its tenant's (the tier's limits and budgets) and its key's
//! own (a runtime key's limits and budgets). Both are kept alike, by name: a window of requests
//! and tokens, slots for requests in flight, and what was spent this UTC day and month. A key's
//! account is named [`KEY_ACCOUNT_PREFIX`] and its id; no tenant name can start so, as tenant
//! names hold no `{` or `}`.

use crate::config::{Limits, Tier};

use super::types::{Scope, WindowUse};

/// The start of a key account's name. Braces are refused in tenant names, so no tenant's account
/// shares a name with a key's; in Redis the name follows the namespace's hash tag, so the braces
/// here change no key's slot.
pub const KEY_ACCOUNT_PREFIX: &str = "{k}";

/// At most this many accounts per request: the tenant's and the key's.
pub const MAX_ACCOUNTS: usize = 2;

/// A tenant's budget in micro-USD per UTC calendar period; `None`: unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetMicros {
    /// Per UTC day.
    pub daily: Option<u64>,
    /// Per UTC calendar month.
    pub monthly: Option<u64>,
}

impl BudgetMicros {
    /// Whether neither period has a budget.
    pub fn is_unlimited(&self) -> bool {
        self.daily.is_none() && self.monthly.is_none()
    }
}

/// `usd` in micro-USD, rounded up (budgets err on the safe side); a float's noise around a whole
/// micro-dollar (`0.01905` is 19050.000000000004 micro-USD in binary) is not rounded up.
pub fn usd_to_micros(usd: f64) -> u64 {
    let micros = usd * 1_000_000.0;
    let whole = micros.round();
    let exact = (micros - whole).abs() <= 1e-9 + whole.abs() * 1e-12;
    (if exact { whole } else { micros.ceil() }).max(0.0) as u64
}

/// An account as the ledger knows it: a name (used in store keys), its limits and budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    /// The tenant's name, or [`KEY_ACCOUNT_PREFIX`] and a key's id. No `{` or `}` in a
    /// tenant's name (config validation ensures it for configured tenants).
    pub name: String,
    /// RPM, TPM and concurrency.
    pub limits: Limits,
    /// Budgets.
    pub budget: BudgetMicros,
}

impl TenantSpec {
    /// Tenant `name` of `tier`.
    pub fn of_tier(name: &str, tier: &Tier) -> Self {
        TenantSpec {
            name: name.to_owned(),
            limits: tier.limits,
            budget: BudgetMicros {
                daily: tier.budget.daily_usd.map(usd_to_micros),
                monthly: tier.budget.monthly_usd.map(usd_to_micros),
            },
        }
    }

    /// The account of API key `id`, with its own limits and budget.
    pub fn of_key(id: &str, limits: Limits, budget: BudgetMicros) -> Self {
        TenantSpec {
            name: format!("{KEY_ACCOUNT_PREFIX}{id}"),
            limits,
            budget,
        }
    }

    /// Whether it limits nothing: no limit and no budget.
    pub fn is_unlimited(&self) -> bool {
        self.limits.is_unlimited() && self.budget.is_unlimited()
    }

    /// Whose limits these are: [`Scope::Tenant`] or [`Scope::Key`].
    pub fn scope(&self) -> Scope {
        scope_of(&self.name)
    }
}

/// Whose account `name` is: [`Scope::Key`] when it starts with [`KEY_ACCOUNT_PREFIX`], else
/// [`Scope::Tenant`].
pub fn scope_of(name: &str) -> Scope {
    if name.starts_with(KEY_ACCOUNT_PREFIX) {
        Scope::Key
    } else {
        Scope::Tenant
    }
}

/// What a request asks of its accounts: the accounts, and the request's estimated cost on each
/// candidate (micro-USD, in the candidates' order), which admission reserves against every
/// account's budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantNeed {
    /// The accounts, the tenant's first; one or [`MAX_ACCOUNTS`].
    pub specs: Vec<TenantSpec>,
    /// Estimated cost per candidate, micro-USD.
    pub costs: Vec<u64>,
}

impl TenantNeed {
    /// A need of tenant `spec` alone.
    pub fn of(spec: TenantSpec, costs: Vec<u64>) -> Self {
        TenantNeed {
            specs: vec![spec],
            costs,
        }
    }
}

/// The accounts' part of a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantHold {
    /// The accounts' names, in the need's order.
    pub names: Vec<String>,
    /// Estimated cost reserved against each account's budget, micro-USD.
    pub cost_micros: u64,
    /// The UTC day (days since the epoch) the cost was reserved in.
    pub day: u64,
    /// The UTC month (`year * 12 + month - 1`) the cost was reserved in.
    pub month: u64,
    /// Each account's window once this admission was counted in it, in the order of `names`;
    /// empty when the admission counted nothing there (a repeated admission answered again, or
    /// `open` mode).
    pub windows: Vec<WindowUse>,
}

impl TenantHold {
    /// The tenant's window once this admission was counted in it, if it was and the request
    /// had a tenant's account.
    pub fn tenant_window(&self) -> Option<WindowUse> {
        let at = self
            .names
            .iter()
            .position(|n| scope_of(n) == Scope::Tenant)?;
        self.windows.get(at).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_micro_dollars_stay_whole_and_fractions_round_up() {
        assert_eq!(usd_to_micros(0.01905), 19_050);
        assert_eq!(usd_to_micros(19_050.0 / 1e6), 19_050);
        assert_eq!(usd_to_micros(0.1 + 0.2), 300_000);
        assert_eq!(usd_to_micros(0.000_000_5), 1);
        assert_eq!(usd_to_micros(1.000_000_4), 1_000_001);
        assert_eq!(usd_to_micros(-1.0), 0);
    }
}
