//! OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` headers, on every chat
//! answer and every 429.
//!
//! A caller whose tier sets `rpm` or `tpm` gets its tier's limits and what remains of them in
//! its window as the request's own admission left it: the ledger reports the window with the
//! admission that counted it, so concurrent requests each see their own count, never one read
//! after the answer. A 429 reports the window as the refusal found it.
//!
//! A caller with no such tier limits gets the headroom of the model it asked for, over the
//! deployments serving it (for a routed alias, those of every model its rules name): the sum of
//! their limits, and what remains of each, nothing of one cooling down. A dimension one of them
//! does not limit is left out, as is everything when nothing limits the caller. The headroom is
//! read from the ledger beside an admission, at most once a second per model
//! ([`HEADROOM_FRESH`]), and each request answered from a reading counts one request down from
//! it: the request's own admission stays the one ledger call on its path (a leased deployment's
//! none).
//!
//! The reset is `60s`: the window slides over at most 60 s, so everything counted now is
//! released by then. A ledger that does not answer leaves the headers out; the answer stands.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use router_core::config::{DeploymentId, Registry, Tier};
use router_core::ledger::{DeploymentSnapshot, TenantSpec, WindowUse};
use router_sdk::Router;
use tokio::time::Instant;

/// How long a model's headroom read from the ledger is reused.
pub(crate) const HEADROOM_FRESH: Duration = Duration::from_secs(1);

/// A limit and what remains of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dimension {
    limit: u64,
    remaining: u64,
}

/// What the headers report: requests and tokens, each where a limit applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Report {
    requests: Option<Dimension>,
    tokens: Option<Dimension>,
}

impl Report {
    /// `tier`'s limits against a tenant's window.
    fn of_tier(tier: &Tier, window: WindowUse) -> Self {
        let dimension = |limit: Option<std::num::NonZeroU64>, used: u64| {
            limit.map(|l| Dimension {
                limit: l.get(),
                remaining: l.get().saturating_sub(used),
            })
        };
        Report {
            requests: dimension(tier.limits.rpm, window.requests),
            tokens: dimension(tier.limits.tpm, window.tokens),
        }
    }

    /// The headroom of the deployments of `snaps`: in each dimension all of them limit, the sum
    /// of their limits and of what remains of each (nothing of one cooling down).
    fn headroom(snaps: &[DeploymentSnapshot]) -> Self {
        let sum = |of: fn(&DeploymentSnapshot) -> (Option<u64>, u64)| {
            let mut total = Dimension {
                limit: 0,
                remaining: 0,
            };
            for s in snaps {
                let (limit, used) = of(s);
                total.limit = total.limit.saturating_add(limit?);
                if s.cooldown.is_none() {
                    let left = limit?.saturating_sub(used);
                    total.remaining = total.remaining.saturating_add(left);
                }
            }
            (!snaps.is_empty()).then_some(total)
        };
        Report {
            requests: sum(|s| (s.usage.rpm_limit, s.usage.requests)),
            tokens: sum(|s| (s.usage.tpm_limit, s.usage.tokens)),
        }
    }

    /// The same report, one request fewer remaining.
    fn one_request_fewer(mut self) -> Self {
        if let Some(d) = &mut self.requests {
            d.remaining = d.remaining.saturating_sub(1);
        }
        self
    }

    /// Sets the headers of every dimension reported.
    pub(crate) fn set(&self, headers: &mut HeaderMap) {
        let dims = [("requests", self.requests), ("tokens", self.tokens)];
        for (dim, reported) in dims {
            let Some(d) = reported else { continue };
            let values = [
                (format!("x-ratelimit-limit-{dim}"), d.limit.to_string()),
                (
                    format!("x-ratelimit-remaining-{dim}"),
                    d.remaining.to_string(),
                ),
                (format!("x-ratelimit-reset-{dim}"), "60s".to_owned()),
            ];
            for (name, value) in values {
                if let (Ok(name), Ok(value)) =
                    (HeaderName::try_from(name), HeaderValue::try_from(value))
                {
                    headers.insert(name, value);
                }
            }
        }
    }
}

/// What a caller's headers report.
#[derive(Debug)]
pub(crate) enum Basis<'r> {
    /// Its tier sets `rpm` or `tpm`: its tenant's window.
    Tenant { name: &'r str, tier: &'r Tier },
    /// No tier limits: the headroom of `model`'s deployments, some of which set `rpm` or `tpm`.
    Model {
        model: &'r str,
        deployments: Vec<DeploymentId>,
    },
    /// Nothing limits its requests or tokens per minute.
    Unlimited,
}

impl<'r> Basis<'r> {
    /// The basis of a request of `tenant` (`None`: no tenant) for `model`.
    pub(crate) fn of(registry: &'r Registry, tenant: Option<&'r str>, model: &'r str) -> Self {
        let tier = tenant.and_then(|name| Some((name, registry.tier_of(name)?)));
        if let Some((name, tier)) = tier
            && (tier.limits.rpm.is_some() || tier.limits.tpm.is_some())
        {
            return Basis::Tenant { name, tier };
        }
        let deployments = registry.serving(model);
        let limited = deployments.iter().any(|&d| {
            let limits = registry.deployment(d).limits;
            limits.rpm.is_some() || limits.tpm.is_some()
        });
        if limited {
            Basis::Model { model, deployments }
        } else {
            Basis::Unlimited
        }
    }

    /// The model's headroom for one more request, for [`Basis::Model`] (see [`Headrooms`]).
    pub(crate) async fn headroom(&self, router: &Router, seen: &Headrooms) -> Option<Report> {
        let Basis::Model { model, deployments } = self else {
            return None;
        };
        seen.take(router, model, deployments).await
    }

    /// What the headers report: the tenant's `window` as the admission left it (read now when
    /// there is none: a refusal, or an admission that counted nothing there), or the model's
    /// `headroom`.
    pub(crate) async fn report(
        &self,
        router: &Router,
        window: Option<WindowUse>,
        headroom: Option<Report>,
    ) -> Option<Report> {
        match self {
            Basis::Tenant { name, tier } => {
                let window = match window {
                    Some(window) => window,
                    None => tenant_window(router, name, tier).await?,
                };
                Some(Report::of_tier(tier, window))
            }
            Basis::Model { .. } => headroom,
            Basis::Unlimited => None,
        }
    }
}

/// The tenant's window now.
async fn tenant_window(router: &Router, name: &str, tier: &Tier) -> Option<WindowUse> {
    let spec = TenantSpec::of_tier(name, tier);
    match router.ledger().tenant_snapshot(&spec).await {
        Ok(snapshot) => Some(WindowUse {
            requests: snapshot.usage.requests,
            tokens: snapshot.usage.tokens,
        }),
        Err(e) => {
            tracing::warn!(error = %e, "no rate-limit headers: the ledger did not answer");
            None
        }
    }
}

/// The last headroom read of each model, reused while fresh.
#[derive(Debug, Default)]
pub(crate) struct Headrooms(Mutex<HashMap<String, Reading>>);

/// A model's headroom as last read, counted down by the requests answered from it since.
#[derive(Debug, Clone, Copy)]
struct Reading {
    report: Report,
    at: Instant,
    /// A request is reading it again.
    renewing: bool,
}

impl Headrooms {
    /// The headroom of `model` (served by `deployments`) for one more request: a fresh reading
    /// less the requests answered from it before; else a new reading, which one request at a
    /// time takes while the others count down the last one.
    async fn take(
        &self,
        router: &Router,
        model: &str,
        deployments: &[DeploymentId],
    ) -> Option<Report> {
        let now = Instant::now();
        {
            let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(r) = seen.get_mut(model) {
                let fresh = now.saturating_duration_since(r.at) < HEADROOM_FRESH;
                if fresh || r.renewing {
                    r.report = r.report.one_request_fewer();
                    return Some(r.report);
                }
                r.renewing = true;
            }
        }
        let read = match router.ledger().snapshot(deployments).await {
            Ok(snaps) => Some(Report::headroom(&snaps)),
            Err(e) => {
                tracing::warn!(error = %e, "no rate-limit headers: the ledger did not answer");
                None
            }
        };
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match read {
            Some(report) => {
                let at = Instant::now();
                let reading = Reading {
                    report,
                    at,
                    renewing: false,
                };
                seen.insert(model.to_owned(), reading);
            }
            None => {
                if let Some(r) = seen.get_mut(model) {
                    r.renewing = false;
                }
            }
        }
        read
    }
}
