//! Routing rules: `routes:` maps a routed alias (e.g. `auto`) to a model by the request's
//! features, before ranking. The first rule whose conditions all hold wins; a request that names
//! a model or alias directly is not routed.
//!
//! ```yaml
//! routes:
//!   auto:
//!     - when: { images: true }
//!       model: vision
//!     - when: { prompt_tokens: { below: 2000 }, tools: false }
//!       model: cheap
//!     - model: smart        # no `when`: always matches
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;

use super::capabilities::{Capability, Features};
use super::checks::{Ctx, line};
use super::error::ConfigError;
use super::raw::{At, Named, RawRange, RawRule};
use super::registry::Registry;
use crate::flow::Priority;

/// Every routed alias, in the order written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Routes(pub Vec<Route>);

/// One routed alias and its rules, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The name requests use, e.g. `auto`.
    pub alias: String,
    /// The rules, first match wins.
    pub rules: Vec<Rule>,
}

/// One rule: when its conditions hold, the request goes to `model`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The conditions, all of which must hold.
    pub when: When,
    /// A model name or alias of `providers:`.
    pub model: String,
}

/// Conditions on a request; an absent one always holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct When {
    /// The prompt estimate (characters / 4, tools and images included) is at least this.
    pub prompt_at_least: Option<u64>,
    /// The prompt estimate is below this.
    pub prompt_below: Option<u64>,
    /// Whether the request has tools (definitions, calls or results).
    pub tools: Option<bool>,
    /// Whether the request has images.
    pub images: Option<bool>,
    /// The tenant's tier is one of these.
    pub tiers: Vec<String>,
    /// The request's priority.
    pub priority: Option<Priority>,
}

/// What rules look at in a request.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The prompt estimate in tokens.
    pub prompt_tokens: u64,
    /// Its features.
    pub features: Features,
    /// Its tenant's tier, if any.
    pub tier: Option<&'a str>,
    /// Its priority.
    pub priority: Priority,
}

/// The rule a request matched.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RouteMatch {
    /// The routed alias.
    pub alias: String,
    /// The rule's position in the alias's list (0-based).
    pub index: usize,
    /// The model it routes to.
    pub model: String,
    /// The rule's conditions, as written (`always` for none).
    pub when: String,
}

impl std::fmt::Display for RouteMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "routes.{}[{}] ({}) -> {}",
            self.alias, self.index, self.when, self.model
        )
    }
}

/// No rule of a routed alias matched a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoute {
    /// The routed alias.
    pub alias: String,
}

impl Routes {
    /// The route of `alias`, if it is a routed alias.
    pub fn get(&self, alias: &str) -> Option<&Route> {
        self.0.iter().find(|r| r.alias == alias)
    }

    /// Where a request for `named` goes: `named` itself when it is not a routed alias, else the
    /// model of the first rule `subject` matches, with the match. Every driver routes here.
    pub fn resolve(
        &self,
        named: &str,
        subject: &Subject<'_>,
    ) -> Result<(String, Option<RouteMatch>), NoRoute> {
        let Some(route) = self.get(named) else {
            return Ok((named.to_owned(), None));
        };
        match route.pick(subject) {
            Some(m) => Ok((m.model.clone(), Some(m))),
            None => Err(NoRoute {
                alias: named.to_owned(),
            }),
        }
    }
}

impl Route {
    /// The first rule `subject` matches, if any.
    pub fn pick(&self, subject: &Subject<'_>) -> Option<RouteMatch> {
        let (index, rule) = self
            .rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.when.holds(subject))?;
        Some(RouteMatch {
            alias: self.alias.clone(),
            index,
            model: rule.model.clone(),
            when: rule.when.to_string(),
        })
    }
}

impl When {
    /// Whether every condition holds for `s`.
    pub fn holds(&self, s: &Subject<'_>) -> bool {
        let is = |want: Option<bool>, have: bool| want.is_none_or(|w| w == have);
        self.prompt_at_least.is_none_or(|n| s.prompt_tokens >= n)
            && self.prompt_below.is_none_or(|n| s.prompt_tokens < n)
            && is(self.tools, s.features.tools)
            && is(self.images, s.features.images)
            && (self.tiers.is_empty() || s.tier.is_some_and(|t| self.tiers.iter().any(|x| x == t)))
            && self.priority.is_none_or(|p| p == s.priority)
    }
}

impl std::fmt::Display for When {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(n) = self.prompt_at_least {
            parts.push(format!("prompt_tokens >= {n}"));
        }
        if let Some(n) = self.prompt_below {
            parts.push(format!("prompt_tokens < {n}"));
        }
        if let Some(b) = self.tools {
            parts.push(format!("tools: {b}"));
        }
        if let Some(b) = self.images {
            parts.push(format!("images: {b}"));
        }
        if !self.tiers.is_empty() {
            parts.push(format!("tier in [{}]", self.tiers.join(", ")));
        }
        if let Some(p) = self.priority {
            parts.push(format!("priority: {}", p.as_str()));
        }
        if parts.is_empty() {
            return f.write_str("always");
        }
        f.write_str(&parts.join(", "))
    }
}

/// `routes:` checked against the registry's models and tiers.
pub(crate) fn routes(
    ctx: &Ctx<'_>,
    raw: Option<&Named<Vec<At<RawRule>>>>,
    registry: &Registry,
) -> Result<Routes, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Routes::default());
    };
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    let mut out = Vec::with_capacity(raw.0.len());
    for (index, (name, rules)) in raw.0.iter().enumerate() {
        let alias = ctx.key_name(&format!("routes[{index}]"), "route", name)?;
        let field = format!("routes.{alias}");
        if !registry.resolve(&alias).is_empty() {
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
            .map(|(i, r)| rule(ctx, &format!("{field}[{i}]"), &r.value, registry))
            .collect::<Result<_, _>>()?;
        out.push(Route { alias, rules });
    }
    Ok(Routes(out))
}

fn rule(
    ctx: &Ctx<'_>,
    field: &str,
    raw: &RawRule,
    registry: &Registry,
) -> Result<Rule, ConfigError> {
    let model = ctx.name(&format!("{field}.model"), &raw.model)?;
    if registry.resolve(&model).is_empty() {
        let msg = format!(
            "`{model}` names no model or alias under `providers:`; use one of: {}",
            registry.known_models().join(", ")
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
        if registry.tenants.tier(&tier).is_none() {
            let known: Vec<&str> = registry
                .tenants
                .tiers
                .iter()
                .map(|t| t.name.as_str())
                .collect();
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
        let able = registry
            .resolve(&model)
            .iter()
            .any(|&d| registry.deployment(d).capabilities.has(capability));
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
    let bound = |key: &str, v: &Option<At<super::raw::Number>>| {
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

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
