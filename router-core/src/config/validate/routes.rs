//! `routes:` checked: each routed alias a name of its own, each rule naming a model, tiers that
//! exist, and a model able to serve the tools or images the rule is for.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::checks::{Ctx, line};
use crate::config::capabilities::Capability;
use crate::config::deployments::Models;
use crate::config::error::ConfigError;
use crate::config::raw::{At, Named, Number, RawRange, RawRule};
use crate::config::routes::{Route, Routes, Rule, When};
use crate::config::tenants::Tenants;

/// `routes:` checked against the deployments' models and the tenants' tiers.
pub(crate) fn routes(
    ctx: &Ctx<'_>,
    raw: Option<&Named<Vec<At<RawRule>>>>,
    models: Models<'_>,
    tenants: &Tenants,
) -> Result<Routes, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Routes::default());
    };
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    let mut out = Vec::with_capacity(raw.0.len());
    for (index, (name, rules)) in raw.0.iter().enumerate() {
        let alias = ctx.key_name(&format!("routes[{index}]"), "route", name)?;
        let field = format!("routes.{alias}");
        if !models.resolve(&alias).is_empty() {
            let msg = format!(
                "`{alias}` is already a model or alias under `providers:`; a routed alias needs \
                 a name of its own (e.g. `auto`)"
            );
            return Err(ctx.invalid(&field, line(name), msg));
        }
        if let Some(first) = seen.insert(alias.clone(), line(name)) {
            let at = first
                .map(|l| format!(" (first at line {l})"))
                .unwrap_or_default();
            let msg =
                format!("route `{alias}` is written twice{at}; merge the rules into one list");
            return Err(ctx.invalid(&field, line(name), msg));
        }
        if rules.is_empty() {
            let msg = "a route needs at least one rule (`- model: NAME`), or remove it".to_owned();
            return Err(ctx.invalid(&field, line(name), msg));
        }
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, r)| rule(ctx, &format!("{field}[{i}]"), &r.value, models, tenants))
            .collect::<Result<_, _>>()?;
        out.push(Route { alias, rules });
    }
    Ok(Routes(out))
}

fn rule(
    ctx: &Ctx<'_>,
    field: &str,
    raw: &RawRule,
    models: Models<'_>,
    tenants: &Tenants,
) -> Result<Rule, ConfigError> {
    let model = ctx.name(&format!("{field}.model"), &raw.model)?;
    let serving = models.resolve(&model);
    if serving.is_empty() {
        let msg = format!(
            "`{model}` names no model or alias under `providers:`; use one of: {}",
            models.known().join(", ")
        );
        return Err(ctx.invalid(&format!("{field}.model"), line(&raw.model), msg));
    }
    let Some(w) = &raw.when else {
        return Ok(Rule {
            when: When::default(),
            model,
        });
    };
    let (prompt_at_least, prompt_below) = match &w.prompt_tokens {
        Some(range) => prompt_range(ctx, &format!("{field}.when.prompt_tokens"), range)?,
        None => (None, None),
    };
    let mut tiers = Vec::new();
    for (i, t) in w.tiers.iter().flatten().enumerate() {
        let tier_field = format!("{field}.when.tiers[{i}]");
        let tier = ctx.name(&tier_field, t)?;
        if tenants.tier(&tier).is_none() {
            let known: Vec<&str> = tenants.tiers.iter().map(|t| t.name.as_str()).collect();
            let msg = format!(
                "`{tier}` names no tier under `tenants.tiers`; use one of: {}",
                if known.is_empty() {
                    "(none defined)".to_owned()
                } else {
                    known.join(", ")
                }
            );
            return Err(ctx.invalid(&tier_field, line(t), msg));
        }
        tiers.push(tier);
    }
    let priority = w
        .priority
        .as_ref()
        .map(|p| ctx.priority(&format!("{field}.when.priority"), p))
        .transpose()?;
    // A rule for requests with tools or images must send them where they can go: the first
    // rule that matches decides, so one that can serve none of them fails every such request.
    let needs = [
        (w.tools.as_ref(), Capability::Tools),
        (w.images.as_ref(), Capability::Vision),
    ];
    for (when, capability) in needs {
        let Some(when) = when.filter(|b| b.value) else {
            continue;
        };
        let able = serving
            .iter()
            .any(|&d| models.get(d).capabilities.has(capability));
        if !able {
            let msg = format!(
                "this rule is for requests with {}, but no deployment of `{model}` has \
                 `{}` in its capabilities; name a model that has it",
                capability.feature(),
                capability.as_str()
            );
            return Err(ctx.invalid(&format!("{field}.model"), line(when), msg));
        }
    }
    Ok(Rule {
        when: When {
            prompt_at_least,
            prompt_below,
            tools: w.tools.as_ref().map(|b| b.value),
            images: w.images.as_ref().map(|b| b.value),
            tiers,
            priority,
        },
        model,
    })
}

/// `prompt_tokens: { at_least: N, below: M }`: at least one bound, `N < M`.
fn prompt_range(
    ctx: &Ctx<'_>,
    field: &str,
    raw: &At<RawRange>,
) -> Result<(Option<u64>, Option<u64>), ConfigError> {
    let bound = |key: &str, v: &Option<At<Number>>| {
        v.as_ref()
            .map(|v| {
                let hint = "write a token count, e.g. 2000";
                ctx.positive(&format!("{field}.{key}"), v, hint)
                    .map(|n| n.get())
            })
            .transpose()
    };
    let at_least = bound("at_least", &raw.value.at_least)?;
    let below = bound("below", &raw.value.below)?;
    let mut problem = String::new();
    match (at_least, below) {
        (None, None) => {
            problem.push_str("give `at_least`, `below` or both, e.g. `{ below: 2000 }`")
        }
        (Some(a), Some(b)) if a >= b => {
            let _ = write!(
                problem,
                "`at_least` ({a}) must be below `below` ({b}): no prompt fits"
            );
        }
        _ => return Ok((at_least, below)),
    }
    Err(ctx.invalid(field, line(raw), problem))
}
