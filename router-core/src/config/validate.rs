//! The second stage: a [`RawConfig`] checked and turned into a [`Registry`].
//!
//! Field paths in messages use names where they are known (`providers[deepseek].models[...]`)
//! and positions where the name itself is the problem (`providers[1].name`).

use std::collections::HashMap;
use std::time::Duration;

use super::checks::{Ctx, line};
use super::error::ConfigError;
use super::gateway::{Gateway, gateway};
use super::ledger::ledger;
use super::raw::{At, Number, RawConfig, RawDefaults, RawLease, RawModel, RawProvider, RawRetry};
use super::registry::{
    Api, Defaults, Deployment, Lease, Limits, Provider, ProviderId, Registry, RetrySettings,
};
use super::routes::{Routes, routes};
use super::tenants::{priorities, tenants};

/// Check `raw` (read from `source`) and build the registry. Stops at the first problem.
pub(crate) fn validate(raw: &RawConfig, source: &str) -> Result<Registry, ConfigError> {
    let ctx = Ctx { source };
    let state = raw.state.as_ref().map(|s| ctx.state(s)).transpose()?;
    let namespace = match &raw.namespace {
        Some(ns) => ctx.namespace(ns)?,
        None => Registry::DEFAULT_NAMESPACE.to_owned(),
    };
    let defaults = defaults(&ctx, raw.defaults.as_ref())?;
    let retry = retry(&ctx, raw.retry.as_ref())?;
    let mut registry = Registry {
        state,
        namespace,
        defaults,
        retry,
        providers: Vec::new(),
        deployments: Vec::new(),
        tenants: tenants(&ctx, raw.tenants.as_ref())?,
        priorities: priorities(&ctx, raw.priorities.as_ref())?,
        routes: Routes::default(),
        gateway: Gateway::default(),
        ledger: ledger(&ctx, raw.ledger.as_ref())?,
        usage: super::usage::usage(&ctx, raw.usage.as_ref())?,
    };
    providers(&ctx, raw, &mut registry)?;
    registry.routes = routes(&ctx, raw.routes.as_ref(), &registry)?;
    registry.gateway = gateway(&ctx, raw.gateway.as_ref(), &registry)?;
    if let Some(model) = raw.defaults.as_ref().and_then(|d| d.model.as_ref()) {
        registry.defaults.model = Some(default_model(&ctx, model, &registry)?);
    }
    Ok(registry)
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

/// `defaults.model` must name a model or alias of some deployment.
fn default_model(
    ctx: &Ctx<'_>,
    model: &At<String>,
    registry: &Registry,
) -> Result<String, ConfigError> {
    let name = ctx.name("defaults.model", model)?;
    if registry.resolve(&name).is_empty() && registry.routes.get(&name).is_none() {
        let msg = format!(
            "`{name}` names no model, alias or route; use one of: {}",
            registry.known_models().join(", ")
        );
        return Err(ctx.invalid("defaults.model", line(model), msg));
    }
    Ok(name)
}

/// `providers:`: at least one, unique names; fills `registry.providers` and `.deployments`.
fn providers(ctx: &Ctx<'_>, raw: &RawConfig, registry: &mut Registry) -> Result<(), ConfigError> {
    let list = raw.providers.as_ref();
    if list.is_none_or(|l| l.value.is_empty()) {
        let msg = "no providers; add at least one provider under `providers:` (name, api, base_url, \
                   api_key_env, models)";
        return Err(ctx.invalid("providers", list.and_then(line), msg.to_owned()));
    }
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    for (index, entry) in list.into_iter().flat_map(|l| &l.value).enumerate() {
        let field = format!("providers[{index}].name");
        let name = ctx.name(&field, &entry.value.name)?;
        if name.contains(['/', ',']) {
            // `a/b` with model `c` and `a` with model `b/c` would be one deployment, `a/b/c`,
            // in the ledger's keys and the metrics' labels.
            let msg = format!(
                "provider name `{name}` must not contain `/` (it separates the provider from \
                 the model in deployment names and ledger keys) or `,` (it separates the names \
                 of `x-llmroute-providers`); rename it"
            );
            return Err(ctx.invalid(&field, line(&entry.value.name), msg));
        }
        if let Some(first) = seen.insert(name.clone(), line(&entry.value.name)) {
            let msg = format!(
                "duplicate provider name `{name}`{}; provider names must be unique: rename one",
                first_at(first)
            );
            return Err(ctx.invalid(&field, line(&entry.value.name), msg));
        }
        provider(ctx, &name, &entry.value, registry)?;
    }
    Ok(())
}

/// One provider and its models.
fn provider(
    ctx: &Ctx<'_>,
    name: &str,
    raw: &RawProvider,
    registry: &mut Registry,
) -> Result<(), ConfigError> {
    let base = format!("providers[{name}]");
    let id = ProviderId(registry.providers.len());
    let api = ctx.api(&format!("{base}.api"), &raw.api)?;
    registry.providers.push(Provider {
        name: name.to_owned(),
        api,
        base_url: ctx.base_url(&format!("{base}.base_url"), &raw.base_url)?,
        api_key_env: ctx.api_key_env(&format!("{base}.api_key_env"), &raw.api_key_env)?,
        limits: ctx.limits(&base, raw.limits.as_ref())?,
    });
    let models = raw.models.as_ref().filter(|m| !m.value.is_empty());
    let Some(models) = models else {
        let at = raw.models.as_ref().map_or(line(&raw.name), line);
        let msg =
            "a provider needs at least one model; add one under `models:` or remove the provider";
        return Err(ctx.invalid(&format!("{base}.models"), at, msg.to_owned()));
    };
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    for (index, entry) in models.value.iter().enumerate() {
        let field = format!("{base}.models[{index}].name");
        let model = ctx.name(&field, &entry.value.name)?;
        if let Some(first) = seen.insert(model.clone(), line(&entry.value.name)) {
            let msg = format!(
                "duplicate model `{model}` in provider `{name}`{}; list each model once per provider",
                first_at(first)
            );
            return Err(ctx.invalid(&field, line(&entry.value.name), msg));
        }
        let path = format!("{base}.models[{model}]");
        let provider_limits = registry.providers[id.0].limits;
        registry.deployments.push(deployment(
            ctx,
            &path,
            (api, id, provider_limits),
            model,
            &entry.value,
        )?);
    }
    Ok(())
}

/// One model of a provider.
fn deployment(
    ctx: &Ctx<'_>,
    path: &str,
    (api, provider, provider_limits): (Api, ProviderId, Limits),
    model: String,
    raw: &RawModel,
) -> Result<Deployment, ConfigError> {
    let capabilities = ctx.capabilities(path, api, raw.capabilities.as_ref())?;
    let aliases = aliases(
        ctx,
        path,
        &model,
        raw.aliases.as_deref().unwrap_or_default(),
    )?;
    let max_output_tokens = match &raw.max_output_tokens {
        Some(v) => {
            let field = format!("{path}.max_output_tokens");
            let hint = "remove it to use `defaults.max_output_tokens`";
            Some(ctx.positive(&field, v, hint)?.get())
        }
        None => None,
    };
    let limits = ctx.limits(path, raw.limits.as_ref())?;
    let lease = raw
        .lease
        .as_ref()
        .map(|l| lease(ctx, path, l, limits, provider_limits))
        .transpose()?;
    Ok(Deployment {
        provider,
        aliases,
        price: ctx.price(path, &raw.price)?,
        limits,
        max_output_tokens,
        capabilities,
        lease,
        model,
    })
}

/// A model's `lease:`. A lease holds no concurrency slots, so a deployment limited in
/// concurrency (itself or through its provider) cannot lease.
fn lease(
    ctx: &Ctx<'_>,
    path: &str,
    raw: &At<RawLease>,
    limits: Limits,
    provider_limits: Limits,
) -> Result<Lease, ConfigError> {
    let field = format!("{path}.lease");
    let (out, at) = match &raw.value {
        RawLease::Named(name) if name == "auto" => (Lease::Auto, line(raw)),
        RawLease::Named(name) => {
            let msg = format!(
                "`{name}` is not a lease; write `auto`, or a block `{{ requests: 50, tokens: 50000, secs: 5 }}`"
            );
            return Err(ctx.invalid(&field, line(raw), msg));
        }
        RawLease::Block(b) => {
            let hint = "write a whole number above zero";
            let requests = ctx.positive(&format!("{field}.requests"), &b.requests, hint)?;
            let tokens = match &b.tokens {
                Some(t) => ctx.positive(&format!("{field}.tokens"), t, hint)?.get(),
                None => u64::MAX,
            };
            let secs = match &b.secs {
                Some(s) => {
                    let secs = ctx.positive(&format!("{field}.secs"), s, hint)?.get();
                    if secs > Lease::MAX_SECS {
                        let msg = format!(
                            "{secs} seconds is longer than one window; at most {}",
                            Lease::MAX_SECS
                        );
                        return Err(ctx.invalid(&format!("{field}.secs"), line(s), msg));
                    }
                    secs
                }
                None => Lease::AUTO_SECS,
            };
            let lease = Lease::Block {
                requests: requests.get(),
                tokens,
                secs,
            };
            (lease, line(&b.requests))
        }
    };
    if limits.concurrency.is_some() || provider_limits.concurrency.is_some() {
        let msg = "a lease holds no concurrency slots, and this deployment (or its provider) \
                   limits concurrency; remove `lease`, or the `concurrency` limit"
            .to_owned();
        return Err(ctx.invalid(&field, at, msg));
    }
    Ok(out)
}

/// A model's aliases: names, none repeated, none equal to the model's own name. The same alias
/// on other deployments is fine: that is how one alias spans providers.
fn aliases(
    ctx: &Ctx<'_>,
    path: &str,
    model: &str,
    raw: &[At<String>],
) -> Result<Vec<String>, ConfigError> {
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for (index, entry) in raw.iter().enumerate() {
        let field = format!("{path}.aliases[{index}]");
        let alias = ctx.name(&field, entry)?;
        let problem = if alias == model {
            format!("alias `{alias}` is the model's own name; remove it")
        } else if let Some(first) = seen.insert(alias.clone(), line(entry)) {
            format!(
                "alias `{alias}` is listed twice for this model{}; remove one",
                first_at(first)
            )
        } else {
            out.push(alias);
            continue;
        };
        return Err(ctx.invalid(&field, line(entry), problem));
    }
    Ok(out)
}

/// ` (first at line N)`, or nothing when the line is unknown.
fn first_at(line: Option<u64>) -> String {
    line.map(|l| format!(" (first at line {l})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::super::{ConfigError, Registry};

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
