//! `GET /admin/v1/deployments`: every deployment's use against its limits (what `llmroute quota`
//! shows), its cooldown and why this instance put it, and the ledger's mode.

use axum::Json;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::{admin, answered, read_failed};
use crate::app::Shared;
use crate::errors::ApiError;
use crate::reload::Live;

/// One deployment as listed.
#[derive(Debug, Serialize)]
struct DeploymentRow {
    /// `provider/model`.
    name: String,
    #[serde(flatten)]
    row: router_state::quota::Row,
    /// While it cools down: the failed call that put the cooldown, when this instance saw it
    /// (another instance sharing the ledger may have put it: then `null`).
    cooldown_cause: Option<Cause>,
}

#[derive(Debug, Serialize)]
struct Cause {
    /// The failure kind: `rate_limited`, `overloaded`, `server_error`, `timeout`, ...
    kind: String,
    /// The provider's HTTP status, when it answered.
    status: Option<u16>,
    /// The cooldown put, seconds.
    cooldown_secs: f64,
    /// How long ago, seconds.
    age_secs: f64,
}

pub(super) async fn list(Live(shared): Live, headers: HeaderMap) -> Response {
    answered(listed(&shared, &headers).await)
}

async fn listed(shared: &Shared, headers: &HeaderMap) -> Result<Response, ApiError> {
    admin(shared, headers)?;
    let router = &shared.router;
    let registry = router.registry();
    let state = crate::routes::state_of(router);
    let all: Vec<_> = registry.deployment_ids().collect();
    let report = router_state::quota::quota(registry, router.ledger(), state, None, &all)
        .await
        .map_err(read_failed)?;
    let data: Vec<DeploymentRow> = all
        .iter()
        .zip(report.deployments)
        .map(|(&id, row)| {
            let name = registry.deployment_name(id);
            let cooldown_cause = row
                .cooldown_secs
                .and_then(|_| shared.metrics.calls.cooldown_cause(&name))
                .map(|c| Cause {
                    kind: c.kind,
                    status: c.status,
                    cooldown_secs: c.cooldown.as_secs_f64(),
                    age_secs: c.at.elapsed().as_secs_f64(),
                });
            DeploymentRow {
                name,
                row,
                cooldown_cause,
            }
        })
        .collect();
    Ok(Json(serde_json::json!({
        "object": "list",
        "state": report.state,
        "ledger": report.ledger,
        "data": data,
    }))
    .into_response())
}
