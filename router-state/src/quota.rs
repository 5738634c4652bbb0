//! What the ledger holds now, as data: per deployment, use against limits, cooldowns, prices
//! and the provider's last report; for a tenant, its tier, use and spend. `llmroute quota`
//! prints it (as a table, or `--json`), and the gateway's `GET /v1/quota` serves the caller's.

use std::sync::Arc;

use router_core::config::{DeploymentId, Registry};
use router_core::ledger::{DeploymentSnapshot, Ledger, LedgerError, ScopeUsage, TenantSpec};
use serde::Serialize;

/// The whole report: where the ledger lives, the tenant asked about, the deployments asked
/// about.
#[derive(Debug, Serialize)]
pub struct Quota {
    /// Where the ledger lives, as the driver describes it.
    pub state: String,
    /// How the shared ledger is doing (Redis only).
    pub ledger: Option<LedgerStatus>,
    /// The tenant asked about, if any.
    pub tenant: Option<TenantView>,
    /// The deployments asked about.
    pub deployments: Vec<Row>,
}

/// The shared ledger's mode (see `ledger.on_error`).
#[derive(Debug, Serialize)]
pub struct LedgerStatus {
    /// `shared`: admitting through Redis; `local`: within this instance's share of each limit,
    /// Redis being away; `open`: uncounted, Redis being away.
    pub mode: &'static str,
    /// Seconds in this mode.
    pub since_secs: f64,
    /// Instances sharing the limits at the last heartbeat (0: none answered yet).
    pub instances: u64,
    /// Mode changes since this instance started.
    pub mode_changes: u64,
}

/// A tenant's view: its tier, use and spend.
#[derive(Debug, Serialize)]
pub struct TenantView {
    /// The tenant.
    pub name: String,
    /// `None`: no tier applies (no `members` entry, no `default_tier`): unlimited, untracked.
    pub tier: Option<String>,
    /// Requests in the current window against the tier's RPM.
    pub rpm: Option<Used>,
    /// Tokens in the current window against the tier's TPM.
    pub tpm: Option<Used>,
    /// Requests in flight against the tier's concurrency.
    pub concurrency: Option<InFlight>,
    /// Requests this UTC day against the tier's RPD; only where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpd: Option<Used>,
    /// Tokens this UTC day against the tier's TPD; only where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpd: Option<Used>,
    /// Spend against the tier's budgets.
    pub spend: Option<Spend>,
}

/// A tenant's spend, in USD.
#[derive(Debug, Serialize)]
pub struct Spend {
    /// Spent this UTC day (estimates of requests in flight included).
    pub today_usd: f64,
    /// The daily budget.
    pub daily_budget_usd: Option<f64>,
    /// Spent this UTC month.
    pub month_usd: f64,
    /// The monthly budget.
    pub monthly_budget_usd: Option<f64>,
    /// This month's spend extrapolated linearly to the end of the month.
    pub projected_month_usd: f64,
    /// Seconds until the day's budget resets.
    pub day_resets_in_secs: f64,
    /// Seconds until the month's budget resets.
    pub month_resets_in_secs: f64,
}

/// One deployment.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Provider name.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// Use against the deployment's limits.
    #[serde(flatten)]
    pub usage: ScopeView,
    /// Cooldown left, if any.
    pub cooldown_secs: Option<f64>,
    /// Price.
    pub price: Price,
    /// Use against the provider-wide limits, where the provider has any.
    pub provider_wide: Option<ScopeView>,
    /// What the provider last reported in its rate-limit headers, within the last minute.
    pub provider_reported: Option<Reported>,
    /// The requests waiting in the deployment's line.
    pub line: LineView,
}

/// A deployment's line.
#[derive(Debug, Serialize)]
pub struct LineView {
    /// Requests waiting.
    pub waiting: u64,
    /// Of them, batch requests.
    pub batch: u64,
    /// How long ago the first in line's place began (a batch request's begins
    /// `priorities.batch_aging_secs` after it arrived); `None` when nobody waits.
    pub oldest_wait_secs: Option<f64>,
}

/// What a provider last reported remaining.
#[derive(Debug, Serialize)]
pub struct Reported {
    /// Requests remaining.
    pub requests_remaining: Option<u64>,
    /// Tokens remaining.
    pub tokens_remaining: Option<u64>,
    /// Input tokens remaining (Anthropic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens_remaining: Option<u64>,
    /// Output tokens remaining (Anthropic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens_remaining: Option<u64>,
    /// How long ago, in seconds.
    pub age_secs: f64,
}

/// A count against a limit.
#[derive(Debug, Serialize)]
pub struct Used {
    /// Counted in the current window.
    pub used: u64,
    /// The limit; `None`: unlimited.
    pub limit: Option<u64>,
}

/// Requests in flight against a limit.
#[derive(Debug, Serialize)]
pub struct InFlight {
    /// In flight now.
    pub in_flight: u64,
    /// The limit; `None`: unlimited.
    pub limit: Option<u64>,
}

/// A price in USD per million tokens.
#[derive(Debug, Serialize)]
pub struct Price {
    /// Prompt tokens.
    pub input_per_mtok: f64,
    /// Completion tokens.
    pub output_per_mtok: f64,
}

/// Use against limits in one scope (a deployment, or its provider-wide limits).
#[derive(Debug, Serialize)]
pub struct ScopeView {
    /// Requests against RPM.
    pub rpm: Used,
    /// Tokens against TPM.
    pub tpm: Used,
    /// Input tokens against ITPM; only where an itpm limit is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itpm: Option<Used>,
    /// Output tokens against OTPM; only where an otpm limit is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otpm: Option<Used>,
    /// Requests in flight against concurrency.
    pub concurrency: InFlight,
    /// Requests in the scope's current day against RPD; only where an rpd limit is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpd: Option<Used>,
    /// Tokens in the scope's current day against TPD; only where a tpd limit is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpd: Option<Used>,
    /// Seconds until the scope's day ends (its `day_resets` zone, UTC for tenants and keys);
    /// only where a per-day limit is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub day_resets_in_secs: Option<f64>,
}

impl ScopeView {
    /// The view of `u`.
    pub fn of(u: &ScopeUsage) -> Self {
        let split = |used: u64, limit: Option<u64>| {
            limit.map(|l| Used {
                used,
                limit: Some(l),
            })
        };
        ScopeView {
            rpm: Used {
                used: u.requests,
                limit: u.rpm_limit,
            },
            tpm: Used {
                used: u.tokens,
                limit: u.tpm_limit,
            },
            itpm: split(u.input_tokens, u.itpm_limit),
            otpm: split(u.output_tokens, u.otpm_limit),
            concurrency: InFlight {
                in_flight: u.in_flight,
                limit: u.concurrency_limit,
            },
            rpd: split(u.requests_today, u.rpd_limit),
            tpd: split(u.tokens_today, u.tpd_limit),
            day_resets_in_secs: u.day_resets_in.map(|d| d.as_secs_f64()),
        }
    }
}

/// The row of one deployment's snapshot.
pub fn row(registry: &Registry, s: &DeploymentSnapshot) -> Row {
    let d = registry.deployment(s.deployment);
    Row {
        provider: registry.provider_of(s.deployment).name.clone(),
        model: d.model.clone(),
        usage: ScopeView::of(&s.usage),
        cooldown_secs: s.cooldown.map(|c| c.as_secs_f64()),
        price: Price {
            input_per_mtok: d.price.base.input_per_mtok,
            output_per_mtok: d.price.base.output_per_mtok,
        },
        provider_reported: s.reported.map(|r| Reported {
            requests_remaining: r.requests_remaining,
            tokens_remaining: r.tokens_remaining,
            input_tokens_remaining: r.input_tokens_remaining,
            output_tokens_remaining: r.output_tokens_remaining,
            age_secs: r.age.as_secs_f64(),
        }),
        line: LineView {
            waiting: s.line.waiting,
            batch: s.line.batch,
            oldest_wait_secs: s.line.oldest_wait.map(|w| w.as_secs_f64()),
        },
        provider_wide: s.provider.as_ref().map(ScopeView::of),
    }
}

/// What the ledger holds for tenant `name`: its tier, use and spend (nothing beyond the name
/// when no tier applies).
pub async fn tenant_view(
    registry: &Registry,
    ledger: &Arc<dyn Ledger>,
    name: &str,
) -> Result<TenantView, LedgerError> {
    let Some(tier) = registry.tier_of(name) else {
        let none = TenantView {
            name: name.to_owned(),
            tier: None,
            rpm: None,
            tpm: None,
            concurrency: None,
            rpd: None,
            tpd: None,
            spend: None,
        };
        return Ok(none);
    };
    let used = account_use(ledger, &TenantSpec::of_tier(name, tier)).await?;
    Ok(TenantView {
        name: name.to_owned(),
        tier: Some(tier.name.clone()),
        rpm: Some(used.rpm),
        tpm: Some(used.tpm),
        concurrency: Some(used.concurrency),
        rpd: used.rpd,
        tpd: used.tpd,
        spend: Some(used.spend),
    })
}

/// One account's use against its limits and spend against its budgets: a tenant's, or a
/// runtime key's own.
#[derive(Debug, Serialize)]
pub struct AccountUse {
    /// Requests in the current window against its RPM.
    pub rpm: Used,
    /// Tokens in the current window against its TPM.
    pub tpm: Used,
    /// Requests in flight against its concurrency.
    pub concurrency: InFlight,
    /// Requests this UTC day against its RPD; only where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpd: Option<Used>,
    /// Tokens this UTC day against its TPD; only where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpd: Option<Used>,
    /// Spend against its budgets.
    pub spend: Spend,
}

/// What the ledger holds for the account `spec` now.
pub async fn account_use(
    ledger: &Arc<dyn Ledger>,
    spec: &TenantSpec,
) -> Result<AccountUse, LedgerError> {
    let snap = ledger.tenant_snapshot(spec).await?;
    let ScopeView {
        rpm,
        tpm,
        concurrency,
        rpd,
        tpd,
        ..
    } = ScopeView::of(&snap.usage);
    let usd = |micros: u64| micros as f64 / 1e6;
    let month = usd(snap.spent_month_micros);
    let elapsed = snap.month_elapsed.as_secs_f64().max(1.0);
    let projected = month * (elapsed + snap.month_resets_in.as_secs_f64()) / elapsed;
    Ok(AccountUse {
        rpm,
        tpm,
        concurrency,
        rpd,
        tpd,
        spend: Spend {
            today_usd: usd(snap.spent_today_micros),
            daily_budget_usd: spec.budget.daily.map(usd),
            month_usd: month,
            monthly_budget_usd: spec.budget.monthly.map(usd),
            projected_month_usd: projected,
            day_resets_in_secs: snap.day_resets_in.as_secs_f64(),
            month_resets_in_secs: snap.month_resets_in.as_secs_f64(),
        },
    })
}

/// The report of `ledger` now over `deployments` (in the order given), with `tenant`'s view
/// when one is named.
pub async fn quota(
    registry: &Registry,
    ledger: &Arc<dyn Ledger>,
    state: &str,
    tenant: Option<&str>,
    deployments: &[DeploymentId],
) -> Result<Quota, LedgerError> {
    let snaps = ledger.snapshot(deployments).await?;
    let tenant = match tenant {
        Some(name) => Some(tenant_view(registry, ledger, name).await?),
        None => None,
    };
    Ok(Quota {
        state: state.to_owned(),
        ledger: ledger.health().map(|h| LedgerStatus {
            mode: h.mode.as_str(),
            since_secs: h.since.as_secs_f64(),
            instances: h.instances,
            mode_changes: h.changes,
        }),
        tenant,
        deployments: snaps.iter().map(|s| row(registry, s)).collect(),
    })
}
