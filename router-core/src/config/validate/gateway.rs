//! `gateway:` checked: addresses, sizes and times, forwarded headers, and the keys with the
//! models each may use.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::checks::{Ctx, line};
use crate::config::deployments::Models;
use crate::config::error::ConfigError;
use crate::config::gateway::{Gateway, GatewayKey, RESERVED_HEADERS};
use crate::config::raw::{At, RawGateway, RawKey};
use crate::config::routes::Routes;

/// `gateway:`, its keys' `models` checked against the deployments' models and the routes.
pub(crate) fn gateway(
    ctx: &Ctx<'_>,
    raw: Option<&RawGateway>,
    models: Models<'_>,
    routes: &Routes,
) -> Result<Gateway, ConfigError> {
    let mut out = Gateway::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    let address = |field: &str, value: &At<String>| {
        value.value.parse::<SocketAddr>().map_err(|_| {
            let msg = format!(
                "`{}` is not an address to listen on; write IP:PORT, e.g. {}",
                value.value,
                Gateway::LISTEN
            );
            ctx.invalid(field, line(value), msg)
        })
    };
    if let Some(listen) = &raw.listen {
        out.listen = address("gateway.listen", listen)?;
    }
    if let Some(listen) = &raw.metrics_listen {
        out.metrics_listen = Some(address("gateway.metrics_listen", listen)?);
    }
    if let Some(limit) = &raw.body_limit_bytes {
        let hint = "write a size in bytes, e.g. 10485760 for 10 MiB";
        out.body_limit_bytes = ctx.positive("gateway.body_limit_bytes", limit, hint)?.get();
    }
    if let Some(timeout) = &raw.body_timeout_secs {
        let hint = "write whole seconds, e.g. 30";
        let secs = ctx.positive("gateway.body_timeout_secs", timeout, hint)?;
        out.body_timeout = std::time::Duration::from_secs(secs.get());
    }
    for (i, name) in raw.forward_headers.iter().flatten().enumerate() {
        let field = format!("gateway.forward_headers[{i}]");
        let lower = name.value.trim().to_ascii_lowercase();
        let token = !lower.is_empty()
            && lower
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b));
        let problem = if !token {
            format!("`{}` is not an HTTP header name", name.value)
        } else if RESERVED_HEADERS.contains(&lower.as_str()) {
            format!(
                "`{lower}` carries a key or frames the body: the gateway never passes it on; \
                 remove it"
            )
        } else {
            out.forward_headers.push(lower);
            continue;
        };
        return Err(ctx.invalid(&field, line(name), problem));
    }
    if let Some(grace) = &raw.grace_secs {
        let hint = "write whole seconds, e.g. 30";
        out.grace =
            std::time::Duration::from_secs(ctx.positive("gateway.grace_secs", grace, hint)?.get());
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, entry) in raw.keys.iter().flatten().enumerate() {
        let key = key(
            ctx,
            &format!("gateway.keys[{i}]"),
            &entry.value,
            models,
            routes,
        )?;
        if let Some(first) = seen.insert(key.sha256.clone(), i) {
            let msg = format!("the same key hash as gateway.keys[{first}]; list each key once");
            let at = line(&entry.value.sha256);
            return Err(ctx.invalid(&format!("gateway.keys[{i}].sha256"), at, msg));
        }
        out.keys.push(key);
    }
    for (i, value) in raw.admin_keys.iter().flatten().enumerate() {
        let field = format!("gateway.admin_keys[{i}]");
        let hash = sha256(ctx, &field, value, "llmroute keys admin")?;
        if out.keys.iter().any(|k| k.sha256 == hash) {
            let msg = "is also one of `gateway.keys`: an admin key is for `/admin/v1` and `/ui` \
                       only; make a key of its own for each";
            return Err(ctx.invalid(&field, line(value), msg.to_owned()));
        }
        out.admin_keys.push(hash);
    }
    Ok(out)
}

/// A key's SHA-256 at `field`, lowercase; `command` prints a key and its hash.
fn sha256(
    ctx: &Ctx<'_>,
    field: &str,
    value: &At<String>,
    command: &str,
) -> Result<String, ConfigError> {
    let hash = value.value.trim().to_ascii_lowercase();
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        // Never echo the value: it may be a key pasted where its hash belongs.
        let msg = format!(
            "must be the SHA-256 of the key, 64 hex digits (never the key itself); `{command}` \
             prints a key and its hash"
        );
        return Err(ctx.invalid(field, line(value), msg));
    }
    Ok(hash)
}

fn key(
    ctx: &Ctx<'_>,
    field: &str,
    raw: &RawKey,
    models: Models<'_>,
    routes: &Routes,
) -> Result<GatewayKey, ConfigError> {
    let command = "llmroute keys new --tenant NAME";
    let hash = sha256(ctx, &format!("{field}.sha256"), &raw.sha256, command)?;
    let tenant = ctx.tenant(&format!("{field}.tenant"), &raw.tenant)?;
    let priority = raw
        .priority
        .as_ref()
        .map(|p| ctx.priority(&format!("{field}.priority"), p))
        .transpose()?;
    let mut may_use = Vec::new();
    for (i, m) in raw.models.iter().flatten().enumerate() {
        let model_field = format!("{field}.models[{i}]");
        may_use.push(ctx.model_or_route(&model_field, m, models, routes)?);
    }
    Ok(GatewayKey {
        sha256: hash,
        tenant,
        priority,
        models: may_use,
    })
}
