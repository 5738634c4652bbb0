//! The second stage: a [`RawConfig`] checked and turned into a [`Registry`].
//!
//! Each section has its checker, which takes the raw section and the values it is checked
//! against (the deployments' models, the routes, the tiers), never the registry: the registry is
//! assembled here, last, from what they return. Field paths in messages use names where they are
//! known (`providers[deepseek].models[...]`) and positions where the name itself is the problem
//! (`providers[1].name`).

use std::time::Duration;

use checks::{Ctx, line};
use gateway::gateway;
use ledger::ledger;
use providers::providers;
use routes::routes;
use telemetry::telemetry;
use tenants::{priorities, tenants};
use usage::usage;

use super::deployments::Models;
use super::error::ConfigError;
use super::raw::{At, Number, RawConfig, RawDefaults, RawRetry};
use super::registry::Registry;
use super::values::{Defaults, RetrySettings};

mod checks;
mod gateway;
mod kind;
mod ledger;
mod price;
mod providers;
mod routes;
mod telemetry;
mod tenants;
mod usage;

/// Check `raw` (read from `source`) and build the registry. Stops at the first problem, the
/// sections checked in this order: `state`, `namespace`, `defaults`, `retry`, `tenants`,
/// `priorities`, `ledger`, `usage`, `providers`, then what refers to the models: `routes`,
/// `gateway` and `defaults.model`.
pub(crate) fn validate(raw: &RawConfig, source: &str) -> Result<Registry, ConfigError> {
    let ctx = Ctx { source };
    let state = raw.state.as_ref().map(|s| ctx.state(s)).transpose()?;
    let namespace = match &raw.namespace {
        Some(ns) => ctx.namespace(ns)?,
        None => Registry::DEFAULT_NAMESPACE.to_owned(),
    };
    let mut defaults = defaults(&ctx, raw.defaults.as_ref())?;
    let retry = retry(&ctx, raw.retry.as_ref())?;
    let tenants = tenants(&ctx, raw.tenants.as_ref())?;
    let priorities = priorities(&ctx, raw.priorities.as_ref())?;
    let ledger = ledger(&ctx, raw.ledger.as_ref())?;
    let usage = usage(&ctx, raw.usage.as_ref())?;
    let telemetry = telemetry(&ctx, raw.telemetry.as_ref())?;
    let (providers, deployments) = providers(&ctx, raw)?;
    let models = Models(&deployments);
    let routes = routes(&ctx, raw.routes.as_ref(), models, &tenants)?;
    let gateway = gateway(&ctx, raw.gateway.as_ref(), models, &routes)?;
    if let Some(model) = raw.defaults.as_ref().and_then(|d| d.model.as_ref()) {
        let name = ctx.model_or_route("defaults.model", model, models, &routes)?;
        defaults.model = Some(name);
    }
    Ok(Registry {
        state,
        namespace,
        defaults,
        retry,
        providers,
        deployments,
        tenants,
        priorities,
        routes,
        gateway,
        ledger,
        usage,
        telemetry,
    })
}

/// `defaults:` except `model`, which is checked once the deployments are known.
fn defaults(ctx: &Ctx<'_>, raw: Option<&RawDefaults>) -> Result<Defaults, ConfigError> {
    let mut out = Defaults::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    if let Some(v) = &raw.output_tokens {
        let hint = format!("remove it to use the default {}", Defaults::OUTPUT_TOKENS);
        out.output_tokens = ctx.positive("defaults.output_tokens", v, &hint)?.get();
    }
    if let Some(v) = &raw.max_output_tokens {
        let hint = format!(
            "remove it to use the default {}",
            Defaults::MAX_OUTPUT_TOKENS
        );
        out.max_output_tokens = ctx.positive("defaults.max_output_tokens", v, &hint)?.get();
    }
    if let Some(v) = &raw.slot_ttl_secs {
        let field = "defaults.slot_ttl_secs";
        let hint = format!(
            "remove it to use the default {}",
            Defaults::SLOT_TTL_MS / 1000
        );
        let secs = ctx.positive(field, v, &hint)?.get();
        let max = crate::ledger::MAX_SLOT_TTL.as_secs();
        if secs > max {
            let msg = format!("{secs} seconds is more than the maximum {max}; {hint}");
            return Err(ctx.invalid(field, line(v), msg));
        }
        out.slot_ttl_ms = secs * 1000;
    }
    Ok(out)
}

/// `retry:`: each value a whole number above zero, and the base no larger than the cap.
fn retry(ctx: &Ctx<'_>, raw: Option<&RawRetry>) -> Result<RetrySettings, ConfigError> {
    let mut out = RetrySettings::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    let get = |key: &str, value: &Option<At<Number>>, default: u64| {
        let hint = format!("remove it to use the default {default}");
        value
            .as_ref()
            .map(|v| ctx.positive(&format!("retry.{key}"), v, &hint))
            .transpose()
            .map(|v| v.map_or(default, |n| n.get()))
    };
    let attempts = get("max_attempts", &raw.max_attempts, out.max_attempts.into())?;
    out.max_attempts = u32::try_from(attempts).map_err(|_| {
        let msg = format!("{attempts} is too large; a few attempts are plenty");
        ctx.invalid(
            "retry.max_attempts",
            raw.max_attempts.as_ref().and_then(line),
            msg,
        )
    })?;
    out.base = Duration::from_millis(get("base_ms", &raw.base_ms, out.base.as_millis() as u64)?);
    out.cap = Duration::from_millis(get("cap_ms", &raw.cap_ms, out.cap.as_millis() as u64)?);
    let deadline = get("deadline_secs", &raw.deadline_secs, out.deadline.as_secs())?;
    let attempt = get(
        "attempt_timeout_secs",
        &raw.attempt_timeout_secs,
        out.attempt_timeout.as_secs(),
    )?;
    out.attempt_timeout = Duration::from_secs(attempt);
    let max_cooldown = get(
        "max_cooldown_secs",
        &raw.max_cooldown_secs,
        out.max_cooldown.as_secs(),
    )?;
    out.max_cooldown = Duration::from_secs(max_cooldown);
    out.deadline = Duration::from_secs(deadline);
    backoff_within_max_cooldown(ctx, raw, &mut out)?;
    if out.base > out.cap {
        let msg = format!(
            "base_ms {} is larger than cap_ms {}; make the base smaller or the cap larger",
            out.base.as_millis(),
            out.cap.as_millis()
        );
        return Err(ctx.invalid("retry.base_ms", raw.base_ms.as_ref().and_then(line), msg));
    }
    Ok(out)
}

/// A computed backoff becomes a deployment's cooldown in the shared ledger, for every instance,
/// so neither `retry.base_ms` nor `retry.cap_ms` may be longer than `retry.max_cooldown_secs`,
/// the longest cooldown anything else may put on it. A value written in the file above it is
/// refused; the default cap (30 s) is lowered to a smaller `max_cooldown_secs` instead, so that
/// setting `max_cooldown_secs` alone stays valid.
fn backoff_within_max_cooldown(
    ctx: &Ctx<'_>,
    raw: &RawRetry,
    out: &mut RetrySettings,
) -> Result<(), ConfigError> {
    let max = out.max_cooldown;
    let max_ms = max.as_millis();
    for (key, value, given) in [
        ("base_ms", out.base, &raw.base_ms),
        ("cap_ms", out.cap, &raw.cap_ms),
    ] {
        let Some(given) = given.as_ref().filter(|_| value > max) else {
            continue;
        };
        let msg = format!(
            "{} ms is longer than retry.max_cooldown_secs ({} s): a backoff cools the deployment \
             down for every instance, and no cooldown may be longer than that; write at most \
             {max_ms}, or raise max_cooldown_secs",
            value.as_millis(),
            max.as_secs()
        );
        return Err(ctx.invalid(&format!("retry.{key}"), line(given), msg));
    }
    out.cap = out.cap.min(max);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use crate::config::{ConfigError, Registry};

    /// One provider in seven lines: `retry:` follows on line 8, its first key on line 9.
    const PROVIDERS: &str = "providers:
  - name: p
    api: openai
    base_url: https://example.test/v1
    api_key_env: P_KEY
    models:
      - { name: m, price: { input: 1, output: 2 } }
";

    fn load(retry: &str) -> Result<Registry, ConfigError> {
        Registry::from_yaml_str(&format!("{PROVIDERS}retry:\n{retry}"), "retry.yaml")
    }

    #[track_caller]
    fn assert_mentions(err: &ConfigError, parts: &[&str]) {
        let msg = err.to_string();
        for part in parts {
            assert!(msg.contains(part), "{part:?} missing from: {msg}");
        }
    }

    #[test]
    fn a_backoff_cap_longer_than_the_max_cooldown_is_refused_with_its_line() {
        let err = load("  cap_ms: 3600000000\n").unwrap_err();
        assert_mentions(
            &err,
            &[
                "retry.yaml:9:",
                "retry.cap_ms",
                "3600000000 ms",
                "retry.max_cooldown_secs (300 s)",
                "write at most 300000",
            ],
        );
        let err = load("  max_cooldown_secs: 60\n  cap_ms: 60001\n").unwrap_err();
        assert_mentions(
            &err,
            &["retry.yaml:10:", "retry.cap_ms", "60001 ms", "(60 s)"],
        );
    }

    #[test]
    fn a_backoff_base_longer_than_the_max_cooldown_is_refused_with_its_line() {
        let err = load("  max_cooldown_secs: 10\n  base_ms: 20000\n  cap_ms: 5000\n").unwrap_err();
        assert_mentions(
            &err,
            &[
                "retry.yaml:10:",
                "retry.base_ms",
                "20000 ms",
                "write at most 10000",
            ],
        );
    }

    #[test]
    fn a_backoff_within_the_max_cooldown_is_kept() {
        let retry = load("  max_cooldown_secs: 1000\n  base_ms: 1000\n  cap_ms: 1000000\n")
            .unwrap()
            .retry;
        assert_eq!(retry.cap, Duration::from_secs(1000));
        assert_eq!(retry.base, Duration::from_secs(1));
        let retry = load("  cap_ms: 300000\n").unwrap().retry;
        assert_eq!(retry.cap, Duration::from_secs(300));
    }

    #[test]
    fn a_max_cooldown_below_the_default_cap_lowers_the_cap() {
        let retry = load("  max_cooldown_secs: 10\n").unwrap().retry;
        assert_eq!(retry.max_cooldown, Duration::from_secs(10));
        assert_eq!(retry.cap, Duration::from_secs(10));
        assert_eq!(retry.base, Duration::from_millis(250));
    }
}
