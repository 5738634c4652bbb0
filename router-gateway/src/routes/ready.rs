//! `GET /readyz`: whether the ledger answers (503 when it does not). With `?deployments=1`, a
//! JSON body also says of each deployment whether it is healthy, cooling down (for how long and
//! why) or failing (its last error), as this instance judged from real traffic: never from a
//! paid probe.

use axum::Json;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use router_core::ledger::DeploymentSnapshot;
use serde::Serialize;

use crate::app::Shared;
use crate::calls::Calls;
use crate::errors::ApiError;
use crate::reload::Live;

/// One deployment's health.
#[derive(Debug, Serialize)]
struct DeploymentHealth {
    /// `provider/model`.
    name: String,
    /// `cooling` (the ledger holds a cooldown), `failing` (this instance's last call to it
    /// failed), `healthy` (its last call answered), or `unknown` (no call seen yet).
    state: &'static str,
    /// The cooldown left, seconds.
    cooldown_secs: Option<f64>,
    /// The failed call that put the cooldown, when this instance saw it.
    cooldown_cause: Option<Call>,
    /// This instance's last call to it.
    last_call: Option<Call>,
}

/// A call as shown.
#[derive(Debug, Serialize)]
struct Call {
    /// `ok`, or its failure kind (`rate_limited`, `overloaded`, `server_error`, ...).
    outcome: String,
    /// The provider's HTTP status, when it failed with an answer.
    status: Option<u16>,
    /// How long ago, seconds.
    age_secs: f64,
}

pub(crate) async fn ready(
    Live(shared): Live,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let detail = match asks_deployments(&params) {
        Ok(detail) => detail,
        Err(e) => return e.into_response_with(""),
    };
    let router = &shared.router;
    let all: Vec<_> = router.registry().deployment_ids().collect();
    let asked = if detail { &all[..] } else { &[] };
    match router.ledger().snapshot(asked).await {
        Ok(snaps) if detail => {
            let deployments = health(&shared, &snaps);
            let body = serde_json::json!({ "status": "ready", "deployments": deployments });
            Json(body).into_response()
        }
        Ok(_) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness: the ledger does not answer");
            let message = "the ledger does not answer\n";
            (StatusCode::SERVICE_UNAVAILABLE, message).into_response()
        }
    }
}

/// Whether `params` ask for each deployment's health: `deployments=1` (or `true`); anything
/// else is 400 naming it.
fn asks_deployments(params: &[(String, String)]) -> Result<bool, ApiError> {
    let mut detail = false;
    for (key, value) in params {
        match (key.as_str(), value.as_str()) {
            ("deployments", "1" | "true") => detail = true,
            ("deployments", "0" | "false") => detail = false,
            ("deployments", other) => {
                return Err(ApiError::bad_request(format!(
                    "`deployments` must be 1 or 0, got `{other}`"
                )));
            }
            (other, _) => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter `{other}`; use `deployments=1`"
                )));
            }
        }
    }
    Ok(detail)
}

/// Each deployment's health from its snapshot and this instance's calls.
fn health(shared: &Shared, snaps: &[DeploymentSnapshot]) -> Vec<DeploymentHealth> {
    let registry = shared.router.registry();
    let calls: &Calls = &shared.metrics.calls;
    snaps
        .iter()
        .map(|snap| {
            let name = registry.deployment_name(snap.deployment);
            let last = calls.last(&name);
            let state = match (&snap.cooldown, &last) {
                (Some(_), _) => "cooling",
                (None, Some(call)) if call.kind != "ok" => "failing",
                (None, Some(_)) => "healthy",
                (None, None) => "unknown",
            };
            let cause = snap.cooldown.and_then(|_| calls.cooldown_cause(&name));
            DeploymentHealth {
                state,
                cooldown_secs: snap.cooldown.map(|d| d.as_secs_f64()),
                cooldown_cause: cause.map(|c| Call {
                    outcome: c.kind,
                    status: c.status,
                    age_secs: c.at.elapsed().as_secs_f64(),
                }),
                last_call: last.map(|c| Call {
                    outcome: c.kind,
                    status: c.status,
                    age_secs: c.at.elapsed().as_secs_f64(),
                }),
                name,
            }
        })
        .collect()
}
