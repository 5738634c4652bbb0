//! What `quota` shows, as data: serialized for `--json`, drawn by [`mod@super::table`] otherwise.

use std::sync::Arc;

use router_core::config::Registry;
use router_core::ledger::{DeploymentSnapshot, Ledger, ScopeUsage, TenantSpec};
use serde::Serialize;

use crate::failure::Failure;

/// The whole report: where the ledger lives, the tenant asked about, every deployment.
#[derive(Serialize)]
pub(super) struct Quota<'a> {
    pub(super) state: &'a str,
    pub(super) tenant: Option<TenantView>,
    pub(super) deployments: Vec<Row>,
}

/// A tenant's view: its tier, use and spend.
#[derive(Serialize)]
pub(super) struct TenantView {
    pub(super) name: String,
    /// `None`: no tier applies (no `members` entry, no `default_tier`): unlimited, untracked.
    pub(super) tier: Option<String>,
    pub(super) rpm: Option<Used>,
    pub(super) tpm: Option<Used>,
    pub(super) concurrency: Option<InFlight>,
    pub(super) spend: Option<Spend>,
}

#[derive(Serialize)]
pub(super) struct Spend {
    pub(super) today_usd: f64,
    pub(super) daily_budget_usd: Option<f64>,
    pub(super) month_usd: f64,
    pub(super) monthly_budget_usd: Option<f64>,
    /// This month's spend extrapolated linearly to the end of the month.
    pub(super) projected_month_usd: f64,
    pub(super) day_resets_in_secs: f64,
    pub(super) month_resets_in_secs: f64,
}

#[derive(Serialize)]
pub(super) struct Row {
    pub(super) provider: String,
    pub(super) model: String,
    #[serde(flatten)]
    pub(super) usage: ScopeView,
    pub(super) cooldown_secs: Option<f64>,
    pub(super) price: Price,
    pub(super) provider_wide: Option<ScopeView>,
    /// What the provider last reported in its rate-limit headers, within the last minute.
    pub(super) provider_reported: Option<Reported>,
}

#[derive(Serialize)]
pub(super) struct Reported {
    pub(super) requests_remaining: Option<u64>,
    pub(super) tokens_remaining: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) input_tokens_remaining: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) output_tokens_remaining: Option<u64>,
    pub(super) age_secs: f64,
}

#[derive(Serialize)]
pub(super) struct Used {
    pub(super) used: u64,
    pub(super) limit: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct InFlight {
    pub(super) in_flight: u64,
    pub(super) limit: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct Price {
    pub(super) input_per_mtok: f64,
    pub(super) output_per_mtok: f64,
}

/// Use against limits in one scope (a deployment, or its provider-wide limits).
#[derive(Serialize)]
pub(super) struct ScopeView {
    pub(super) rpm: Used,
    pub(super) tpm: Used,
    /// Input tokens against ITPM; only where an itpm limit is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) itpm: Option<Used>,
    /// Output tokens against OTPM; only where an otpm limit is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) otpm: Option<Used>,
    pub(super) concurrency: InFlight,
}

impl ScopeView {
    fn of(u: &ScopeUsage) -> Self {
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
        }
    }
}

/// The row of one deployment's snapshot.
pub(super) fn row(registry: &Registry, s: &DeploymentSnapshot) -> Row {
    let d = registry.deployment(s.deployment);
    Row {
        provider: registry.provider_of(s.deployment).name.clone(),
        model: d.model.clone(),
        usage: ScopeView::of(&s.usage),
        cooldown_secs: s.cooldown.map(|c| c.as_secs_f64()),
        price: Price {
            input_per_mtok: d.price.input_per_mtok,
            output_per_mtok: d.price.output_per_mtok,
        },
        provider_reported: s.reported.map(|r| Reported {
            requests_remaining: r.requests_remaining,
            tokens_remaining: r.tokens_remaining,
            input_tokens_remaining: r.input_tokens_remaining,
            output_tokens_remaining: r.output_tokens_remaining,
            age_secs: r.age.as_secs_f64(),
        }),
        provider_wide: s.provider.as_ref().map(ScopeView::of),
    }
}

/// A tenant's tier, use and spend, from the ledger.
pub(super) async fn tenant_view(
    registry: &Registry,
    ledger: &Arc<dyn Ledger>,
    name: &str,
) -> Result<TenantView, Failure> {
    let Some(tier) = registry.tier_of(name) else {
        let none = TenantView {
            name: name.to_owned(),
            tier: None,
            rpm: None,
            tpm: None,
            concurrency: None,
            spend: None,
        };
        return Ok(none);
    };
    let snap = ledger
        .tenant_snapshot(&TenantSpec::of_tier(name, tier))
        .await
        .map_err(Failure::state)?;
    let ScopeView {
        rpm,
        tpm,
        concurrency,
        ..
    } = ScopeView::of(&snap.usage);
    let usd = |micros: u64| micros as f64 / 1e6;
    let month = usd(snap.spent_month_micros);
    let elapsed = snap.month_elapsed.as_secs_f64().max(1.0);
    let projected = month * (elapsed + snap.month_resets_in.as_secs_f64()) / elapsed;
    Ok(TenantView {
        name: name.to_owned(),
        tier: Some(tier.name.clone()),
        rpm: Some(rpm),
        tpm: Some(tpm),
        concurrency: Some(concurrency),
        spend: Some(Spend {
            today_usd: usd(snap.spent_today_micros),
            daily_budget_usd: tier.budget.daily_usd,
            month_usd: month,
            monthly_budget_usd: tier.budget.monthly_usd,
            projected_month_usd: projected,
            day_resets_in_secs: snap.day_resets_in.as_secs_f64(),
            month_resets_in_secs: snap.month_resets_in.as_secs_f64(),
        }),
    })
}
