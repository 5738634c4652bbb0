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

use super::capabilities::Features;
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

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
