//! `providers:` checked: each provider, and each of its models as a deployment with its
//! kind, limits, price, capabilities, aliases and lease.

use std::collections::HashMap;

use super::checks::{Ctx, line};
use super::kind::{Kind, kind};
use crate::config::deployments::{Deployment, Provider};
use crate::config::error::ConfigError;
use crate::config::raw::{At, RawConfig, RawLease, RawModel, RawProvider};
use crate::config::values::{Api, Lease, Limits, ProviderId};
use crate::ledger::DayResets;

/// `providers:`: at least one, unique names. The providers and their deployments, in
/// configuration order (provider by provider, model by model).
pub(crate) fn providers(
    ctx: &Ctx<'_>,
    raw: &RawConfig,
) -> Result<(Vec<Provider>, Vec<Deployment>), ConfigError> {
    let list = raw.providers.as_ref();
    if list.is_none_or(|l| l.value.is_empty()) {
        let msg = "no providers; add at least one provider under `providers:` (name, api, base_url, \
                   api_key_env, models)";
        return Err(ctx.invalid("providers", list.and_then(line), msg.to_owned()));
    }
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    let (mut providers, mut deployments) = (Vec::new(), Vec::new());
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
        let id = ProviderId(providers.len());
        let (provider, models) = provider(ctx, &name, id, &entry.value)?;
        providers.push(provider);
        deployments.extend(models);
    }
    Ok((providers, deployments))
}

/// One provider, `id`, and its models.
fn provider(
    ctx: &Ctx<'_>,
    name: &str,
    id: ProviderId,
    raw: &RawProvider,
) -> Result<(Provider, Vec<Deployment>), ConfigError> {
    let base = format!("providers[{name}]");
    let api = ctx.api(&format!("{base}.api"), &raw.api)?;
    let provider = Provider {
        name: name.to_owned(),
        api,
        base_url: ctx.base_url(&format!("{base}.base_url"), &raw.base_url)?,
        api_key_env: ctx.api_key_env(&format!("{base}.api_key_env"), &raw.api_key_env)?,
        limits: ctx.limits(&base, raw.limits.as_ref())?,
        day_resets: ctx.day_resets(&base, raw.limits.as_ref(), &DayResets::Utc)?,
    };
    let models = raw.models.as_ref().filter(|m| !m.value.is_empty());
    let Some(models) = models else {
        let at = raw.models.as_ref().map_or(line(&raw.name), line);
        let msg =
            "a provider needs at least one model; add one under `models:` or remove the provider";
        return Err(ctx.invalid(&format!("{base}.models"), at, msg.to_owned()));
    };
    let mut seen: HashMap<String, Option<u64>> = HashMap::new();
    let mut deployments = Vec::with_capacity(models.value.len());
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
        let owner = (api, id, &provider);
        deployments.push(deployment(ctx, &path, owner, model, &entry.value)?);
    }
    Ok((provider, deployments))
}

/// One model of a provider.
fn deployment(
    ctx: &Ctx<'_>,
    path: &str,
    (api, provider, owner): (Api, ProviderId, &Provider),
    model: String,
    raw: &RawModel,
) -> Result<Deployment, ConfigError> {
    let capabilities = ctx.capabilities(path, api, raw.capabilities.as_ref())?;
    let Kind {
        kind,
        capabilities,
        dimensions,
    } = kind(ctx, path, api, raw, capabilities)?;
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
    let day_resets = ctx.day_resets(path, raw.limits.as_ref(), &owner.day_resets)?;
    let lease = raw
        .lease
        .as_ref()
        .map(|l| lease(ctx, path, l, limits, owner.limits))
        .transpose()?;
    Ok(Deployment {
        provider,
        aliases,
        price: super::price::price(ctx, path, &raw.price, kind, api)?,
        limits,
        day_resets,
        max_output_tokens,
        capabilities,
        lease,
        model,
        kind,
        dimensions,
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
    if limits.per_day() || provider_limits.per_day() {
        let msg = "a lease counts no day's totals, and this deployment (or its provider) has \
                   `rpd` or `tpd`; remove `lease`, or the per-day limit"
            .to_owned();
        return Err(ctx.invalid(&field, at, msg));
    }
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
