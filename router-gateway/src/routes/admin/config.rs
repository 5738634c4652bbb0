//! `GET /admin/v1/config`: the running configuration, as an operator checks it. Nothing
//! secret is in it: providers name the environment variable of their key (and whether it is
//! set), never the key; the state URL has no password; keys show their id, never a hash.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use router_core::config::{Limits, Registry};
use serde_json::{Value, json};

use super::admin;
use crate::keyring::config_id;
use crate::reload::Live;

pub(super) async fn show(Live(shared): Live, headers: HeaderMap) -> Response {
    if let Err(e) = admin(&shared, &headers) {
        return e.into_response_with("");
    }
    Json(running(shared.router.registry())).into_response()
}

/// The configuration `registry` as JSON, secrets left out.
fn running(registry: &Registry) -> Value {
    let providers: Vec<Value> = registry
        .providers
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "api": format!("{:?}", p.api).to_lowercase(),
                "base_url": p.base_url,
                "api_key_env": p.api_key_env,
                "api_key_set": std::env::var_os(&p.api_key_env).is_some_and(|v| !v.is_empty()),
                "limits": limits(&p.limits),
            })
        })
        .collect();
    let deployments: Vec<Value> = registry
        .deployment_ids()
        .map(|id| {
            let d = registry.deployment(id);
            json!({
                "name": registry.deployment_name(id),
                "aliases": d.aliases,
                "price": price(&d.price),
                "limits": limits(&d.limits),
            })
        })
        .collect();
    let tiers: Vec<Value> = registry
        .tenants
        .tiers
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "limits": limits(&t.limits),
                "daily_budget_usd": t.budget.daily_usd,
                "monthly_budget_usd": t.budget.monthly_usd,
            })
        })
        .collect();
    let g = &registry.gateway;
    json!({
        "state": registry.state_redacted(),
        "namespace": registry.namespace,
        "providers": providers,
        "deployments": deployments,
        "routes": registry.routes.0.iter().map(|r| r.alias.as_str()).collect::<Vec<_>>(),
        "tenants": {
            "default_tier": registry.tenants.default_tier,
            "tiers": tiers,
            "members": registry.tenants.members.iter().map(|(t, tier)| json!({"tenant": t, "tier": tier})).collect::<Vec<_>>(),
        },
        "gateway": {
            "listen": g.listen.to_string(),
            "metrics_listen": g.metrics_listen.map(|a| a.to_string()),
            "body_limit_bytes": g.body_limit_bytes,
            "grace_secs": g.grace.as_secs(),
            "forward_headers": g.forward_headers,
            "keys": g.keys.iter().map(|k| json!({"id": config_id(k), "tenant": k.tenant})).collect::<Vec<_>>(),
            "admin_keys": g.admin_keys.len(),
        },
    })
}

/// `limits` with only the limited dimensions.
fn limits(limits: &Limits) -> Value {
    let dims = [
        ("rpm", limits.rpm),
        ("tpm", limits.tpm),
        ("itpm", limits.itpm),
        ("otpm", limits.otpm),
        ("concurrency", limits.concurrency),
    ];
    let set = dims
        .into_iter()
        .filter_map(|(name, v)| v.map(|v| (name.to_owned(), json!(v.get()))));
    Value::Object(set.collect())
}

/// A price: the base rates, and each band of long prompts with its own.
fn price(p: &router_core::config::Price) -> Value {
    let rates = |r: &router_core::config::Rates| {
        json!({
            "input_per_mtok": r.input_per_mtok,
            "output_per_mtok": r.output_per_mtok,
            "cached_input_per_mtok": r.cached_input_per_mtok,
            "cache_write_per_mtok": r.cache_write_per_mtok,
            "cache_write_1h_per_mtok": r.cache_write_1h_per_mtok,
        })
    };
    let mut out = rates(&p.base);
    let above: Vec<Value> = p
        .above
        .iter()
        .map(|t| {
            let mut band = rates(&t.rates);
            band["prompt_tokens"] = json!(t.prompt_tokens);
            band
        })
        .collect();
    out["above"] = json!(above);
    out
}
