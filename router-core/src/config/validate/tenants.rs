//! The second stage for `tenants:` and `priorities:`: tiers with their limits and budgets,
//! tenant membership, and the batch share.
//!
//! Field paths follow the YAML (`tenants.tiers.free.budget.daily_usd`, `tenants.members.acme`);
//! where a name itself is the problem, the path gives the entry's position
//! (`tenants.members[2]`) and the message quotes the name.

use std::collections::HashMap;

use super::checks::{Ctx, line};
use crate::config::error::ConfigError;
use crate::config::raw::{
    At, Named, Number, RawBudget, RawLease, RawPriorities, RawTenants, RawTier,
};
use crate::config::tenants::{Budget, Priorities, Tenants, Tier};
use crate::config::values::Limits;

/// `tenants:`; absent gives [`Tenants::default`].
pub(crate) fn tenants(ctx: &Ctx<'_>, raw: Option<&RawTenants>) -> Result<Tenants, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Tenants::default());
    };
    let mut out = Tenants {
        tiers: tiers(ctx, raw.tiers.as_ref())?,
        ..Tenants::default()
    };
    if let Some(name) = &raw.default_tier {
        let field = "tenants.default_tier";
        ctx.name(field, name)?;
        out.default_tier = Some(tier_name(ctx, field, name, &out)?);
    }
    let entries = raw.members.as_ref().map_or(&[][..], |m| &m.0);
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    for (index, (key, tier)) in entries.iter().enumerate() {
        let position = format!("tenants.members[{index}]");
        let tenant = ctx.tenant(&position, key)?;
        unique(ctx, &position, "tenant", &tenant, key, &mut seen)?;
        let field = format!("tenants.members.{tenant}");
        let tier = tier_name(ctx, &field, tier, &out)?;
        out.members.push((tenant, tier));
    }
    Ok(out)
}

/// `tenants.tiers`, in configuration order.
fn tiers(ctx: &Ctx<'_>, raw: Option<&Named<Option<RawTier>>>) -> Result<Vec<Tier>, ConfigError> {
    let entries = raw.map_or(&[][..], |t| &t.0);
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    let unlimited = RawTier::default();
    for (index, (key, tier)) in entries.iter().enumerate() {
        let field = format!("tenants.tiers[{index}]");
        let name = ctx.key_name(&field, "tier", key)?;
        unique(ctx, &field, "tier", &name, key, &mut seen)?;
        let base = format!("tenants.tiers.{name}");
        let tier = tier.as_ref().unwrap_or(&unlimited);
        let limits = ctx.limit_keys(&base, &tier.limits())?;
        let lease = match &tier.lease {
            Some(raw) => lease(ctx, &base, raw, limits)?,
            None => false,
        };
        out.push(Tier {
            limits,
            budget: budget(ctx, &base, tier.budget.as_ref())?,
            lease,
            name,
        });
    }
    Ok(out)
}

/// A tier's `lease:`: `auto` only (blocks are sized from the instance's own rate), and not
/// with `concurrency` (a block holds no slots).
fn lease(
    ctx: &Ctx<'_>,
    base: &str,
    raw: &At<RawLease>,
    limits: Limits,
) -> Result<bool, ConfigError> {
    let field = format!("{base}.lease");
    match &raw.value {
        RawLease::Named(name) if name == "auto" => {}
        RawLease::Named(name) => {
            let msg = format!(
                "`{name}` is not a tier's lease; write `auto`, or remove it for exact admissions"
            );
            return Err(ctx.invalid(&field, line(raw), msg));
        }
        RawLease::Block(_) => {
            let msg = "a tier's blocks are sized from each instance's own rate of its tenant; \
                       write `lease: auto`"
                .to_owned();
            return Err(ctx.invalid(&field, line(raw), msg));
        }
    }
    if limits.concurrency.is_some() {
        let msg = "a tier limiting `concurrency` cannot lease: a block holds no slots for \
                   requests in flight; remove `lease` or `concurrency`"
            .to_owned();
        return Err(ctx.invalid(&field, line(raw), msg));
    }
    Ok(true)
}

/// A tier's `budget:`; each amount positive and finite. A daily amount above the monthly one is
/// allowed: both apply.
fn budget(ctx: &Ctx<'_>, base: &str, raw: Option<&RawBudget>) -> Result<Budget, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Budget::default());
    };
    let one = |key: &str, period: &str, value: &Option<At<Number>>| {
        let hint = format!("remove `{key}` for no {period} budget");
        value
            .as_ref()
            .map(|v| ctx.usd(&format!("{base}.budget.{key}"), v, &hint))
            .transpose()
    };
    Ok(Budget {
        daily_usd: one("daily_usd", "daily", &raw.daily_usd)?,
        monthly_usd: one("monthly_usd", "monthly", &raw.monthly_usd)?,
    })
}

/// `value` must name one of `tenants.tiers`; the error lists them.
fn tier_name(
    ctx: &Ctx<'_>,
    field: &str,
    value: &At<String>,
    tenants: &Tenants,
) -> Result<String, ConfigError> {
    let name = value.value.as_str();
    if tenants.tier(name).is_some() {
        return Ok(name.to_owned());
    }
    let msg = if tenants.tiers.is_empty() {
        format!("`{name}` names no tier, and none is defined; add it under `tenants.tiers`")
    } else {
        let names: Vec<&str> = tenants.tiers.iter().map(|t| t.name.as_str()).collect();
        format!(
            "`{name}` names no tier; use one of: {}, or add it under `tenants.tiers`",
            names.join(", ")
        )
    };
    Err(ctx.invalid(field, line(value), msg))
}

/// Records `name` in `seen`; an error when it is already there. The parser already rejects keys
/// written twice; this catches keys that differ only in how they are written (`1` and `"1"`).
fn unique(
    ctx: &Ctx<'_>,
    field: &str,
    kind: &str,
    name: &str,
    key: &At<String>,
    seen: &mut HashMap<String, Option<u64>>,
) -> Result<(), ConfigError> {
    match seen.insert(name.to_owned(), line(key)) {
        None => Ok(()),
        Some(first) => {
            let first = first
                .map(|l| format!(" (first at line {l})"))
                .unwrap_or_default();
            let msg = format!("duplicate {kind} `{name}`{first}; list each {kind} once");
            Err(ctx.invalid(field, line(key), msg))
        }
    }
}

/// `priorities:`; absent gives [`Priorities::default`].
pub(crate) fn priorities(
    ctx: &Ctx<'_>,
    raw: Option<&RawPriorities>,
) -> Result<Priorities, ConfigError> {
    let mut out = Priorities::default();
    if let Some(value) = raw.and_then(|r| r.batch_share.as_ref()) {
        // NaN fails both comparisons.
        let share = value.value.as_f64().filter(|x| *x > 0.0 && *x <= 1.0);
        out.batch_share = share.ok_or_else(|| {
            let msg = format!(
                "must be a number above 0 and at most 1 (the share of each deployment's and \
                 provider's capacity that batch requests may use), got {}; e.g. 0.5, or remove \
                 it to use the default {}",
                value.value,
                Priorities::BATCH_SHARE
            );
            ctx.invalid("priorities.batch_share", line(value), msg)
        })?;
    }
    if let Some(value) = raw.and_then(|r| r.batch_aging_secs.as_ref()) {
        let max = Priorities::MAX_BATCH_AGING_SECS as f64;
        let secs = value.value.as_f64().filter(|x| (0.0..=max).contains(x));
        let secs = secs.ok_or_else(|| {
            let msg = format!(
                "must be a number of seconds from 0 to {max} (how far behind its arrival a \
                 waiting batch request stands in line), got {}; e.g. 30, or remove it to use the \
                 default {}",
                value.value,
                Priorities::BATCH_AGING_SECS
            );
            ctx.invalid("priorities.batch_aging_secs", line(value), msg)
        })?;
        out.batch_aging = std::time::Duration::from_secs_f64(secs);
    }
    Ok(out)
}
