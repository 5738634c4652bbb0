//! `gateway:`: where `llmroute serve` listens, how large a request body may be, and the API keys
//! it accepts, each mapped to a tenant. Keys are stored as SHA-256 hashes, never in clear.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::checks::{Ctx, line};
use super::error::ConfigError;
use super::raw::{At, RawGateway, RawKey};
use super::registry::Registry;
use crate::flow::Priority;

/// Headers llmroute sets itself on a provider request, which neither a request's extra headers
/// nor the gateway's `forward_headers` may carry: they carry a provider key or frame the body.
pub const RESERVED_HEADERS: [&str; 7] = [
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
];

/// The gateway's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gateway {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Where `/metrics` is served apart from the API; `None`: on the API's address.
    pub metrics_listen: Option<SocketAddr>,
    /// The largest request body it reads, in bytes.
    pub body_limit_bytes: u64,
    /// How long it waits for a request's body once its headers are in: a body that takes longer
    /// gets 408 and its connection is closed.
    pub body_timeout: std::time::Duration,
    /// The API keys it accepts.
    pub keys: Vec<GatewayKey>,
    /// Request headers passed on to the provider as the caller sent them (lowercase names),
    /// e.g. `traceparent`.
    pub forward_headers: Vec<String>,
    /// How long a stopping gateway lets requests and streams in flight finish before it drops
    /// them (their reservations are then settled as dropped requests are).
    pub grace: std::time::Duration,
}

impl Gateway {
    /// `127.0.0.1:8080`: only this machine, until configured otherwise.
    pub const LISTEN: &'static str = "127.0.0.1:8080";
    /// 10 MiB: room for a few inline images.
    pub const BODY_LIMIT_BYTES: u64 = 10 * 1024 * 1024;
    /// 30 s to finish what is in flight when stopping.
    pub const GRACE_SECS: u64 = 30;
    /// 30 s to send a request's body: ample for 10 MiB on a slow link, short enough that a
    /// client trickling its body cannot hold connections for long.
    pub const BODY_TIMEOUT_SECS: u64 = 30;
}

impl Default for Gateway {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            metrics_listen: None,
            body_limit_bytes: Self::BODY_LIMIT_BYTES,
            body_timeout: std::time::Duration::from_secs(Self::BODY_TIMEOUT_SECS),
            keys: Vec::new(),
            forward_headers: Vec::new(),
            grace: std::time::Duration::from_secs(Self::GRACE_SECS),
        }
    }
}

/// One API key the gateway accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayKey {
    /// The SHA-256 of the key, 64 lowercase hex digits.
    pub sha256: String,
    /// The tenant its requests are accounted to.
    pub tenant: String,
    /// The priority of every request made with it; `None`: the request's own (interactive
    /// unless it says batch).
    pub priority: Option<Priority>,
    /// The models and aliases it may use; empty: all.
    pub models: Vec<String>,
}

/// `gateway:` checked against the registry's models.
pub(crate) fn gateway(
    ctx: &Ctx<'_>,
    raw: Option<&RawGateway>,
    registry: &Registry,
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
        let key = key(ctx, &format!("gateway.keys[{i}]"), &entry.value, registry)?;
        if let Some(first) = seen.insert(key.sha256.clone(), i) {
            let msg = format!("the same key hash as gateway.keys[{first}]; list each key once");
            let at = line(&entry.value.sha256);
            return Err(ctx.invalid(&format!("gateway.keys[{i}].sha256"), at, msg));
        }
        out.keys.push(key);
    }
    Ok(out)
}

fn key(
    ctx: &Ctx<'_>,
    field: &str,
    raw: &RawKey,
    registry: &Registry,
) -> Result<GatewayKey, ConfigError> {
    let hash = raw.sha256.value.trim().to_ascii_lowercase();
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        // Never echo the value: it may be a key pasted where its hash belongs.
        let msg = "must be the SHA-256 of the key, 64 hex digits (never the key itself); \
                   `llmroute keys new --tenant NAME` prints a key and its line"
            .to_owned();
        return Err(ctx.invalid(&format!("{field}.sha256"), line(&raw.sha256), msg));
    }
    let tenant = ctx.tenant(&format!("{field}.tenant"), &raw.tenant)?;
    let priority = raw
        .priority
        .as_ref()
        .map(|p| ctx.priority(&format!("{field}.priority"), p))
        .transpose()?;
    let mut models = Vec::new();
    for (i, m) in raw.models.iter().flatten().enumerate() {
        let model_field = format!("{field}.models[{i}]");
        let name = ctx.name(&model_field, m)?;
        if registry.resolve(&name).is_empty() && registry.routes.get(&name).is_none() {
            let msg = format!(
                "`{name}` names no model, alias or route; use one of: {}",
                registry.known_models().join(", ")
            );
            return Err(ctx.invalid(&model_field, line(m), msg));
        }
        models.push(name);
    }
    Ok(GatewayKey {
        sha256: hash,
        tenant,
        priority,
        models,
    })
}
