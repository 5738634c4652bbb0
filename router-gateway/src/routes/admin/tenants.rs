//! `GET /admin/v1/tenants`: every tenant the gateway knows (members of the configuration, and
//! tenants of keys) with its tier, use against its limits, spend against its budgets, its
//! number of working keys, and its requests today.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use router_core::keys::KeyState;
use serde::Serialize;

use super::{admin, answered, read_failed, store_failed, today};
use crate::app::Shared;
use crate::errors::ApiError;
use crate::reload::Live;

/// One tenant as listed.
#[derive(Debug, Serialize)]
struct TenantRow {
    #[serde(flatten)]
    view: router_state::quota::TenantView,
    /// Its keys that work now.
    active_keys: usize,
    /// Its requests this UTC day (absent without usage records).
    #[serde(skip_serializing_if = "Option::is_none")]
    today: Option<today::Today>,
}

pub(super) async fn list(Live(shared): Live, headers: HeaderMap) -> Response {
    answered(listed(&shared, &headers).await)
}

async fn listed(shared: &Shared, headers: &HeaderMap) -> Result<Response, ApiError> {
    admin(shared, headers)?;
    let registry = shared.router.registry();
    let listing = shared.access.runtime().store().all().await;
    let listing = listing.map_err(|e| store_failed(&e))?;
    let now = shared.access.now();
    let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
    for (tenant, _) in &registry.tenants.members {
        keys.entry(tenant).or_default();
    }
    for key in &registry.gateway.keys {
        *keys.entry(&key.tenant).or_default() += 1;
    }
    for record in &listing.records {
        let working = usize::from(record.state(now) == KeyState::Active);
        *keys.entry(&record.tenant).or_default() += working;
    }
    let counts = today::counts(shared).await?;
    let mut data = Vec::with_capacity(keys.len());
    for (tenant, active_keys) in keys {
        let today = counts
            .as_deref()
            .map(|c| today::sum(c, |c| c.tenant.as_deref() == Some(tenant)));
        let view = router_state::quota::tenant_view(registry, shared.router.ledger(), tenant)
            .await
            .map_err(read_failed)?;
        data.push(TenantRow {
            view,
            active_keys,
            today,
        });
    }
    Ok(Json(serde_json::json!({ "object": "list", "data": data })).into_response())
}
