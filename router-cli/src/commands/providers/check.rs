//! `llmroute providers --check`: each deployment's key and model, asked of its provider's model
//! endpoint (free: no prompt is sent). Exit status 4 when one fails.

use std::io::Write;

use anyhow::anyhow;
use router_core::config::Registry;
use router_sdk::{CheckOutcome, DeploymentCheck, Router};

use crate::failure::Failure;

/// Checks every deployment of `registry` and prints the outcome, as text or JSON.
pub(super) async fn run(
    registry: Registry,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let router = Router::builder(registry)
        .build()
        .await
        .map_err(Failure::router)?;
    let checks = router.check_deployments().await;
    if json {
        let body = serde_json::json!({ "checks": checks });
        writeln!(out, "{body:#}").map_err(Failure::output)?;
    } else {
        write_text(out, &checks).map_err(Failure::output)?;
    }
    let failed = checks.iter().filter(|c| !c.outcome.is_ok()).count();
    if failed == 0 {
        return Ok(());
    }
    Err(Failure::provider(anyhow!(
        "{failed} of {} deployments failed their check",
        checks.len()
    )))
}

fn write_text(out: &mut dyn Write, checks: &[DeploymentCheck]) -> std::io::Result<()> {
    let mut rows = vec![vec!["deployment".to_owned(), "check".to_owned()]];
    for c in checks {
        rows.push(vec![
            format!("{}/{}", c.provider, c.model),
            said(&c.outcome),
        ]);
    }
    crate::table::write(out, &rows, "", usize::MAX)
}

/// What a check found, and what to do about it.
fn said(outcome: &CheckOutcome) -> String {
    match outcome {
        CheckOutcome::Ok => "ok: the key works and the model exists".to_owned(),
        CheckOutcome::NoKey { variable } => format!("no key: set {variable}"),
        CheckOutcome::KeyRefused { http_status } => {
            format!("key refused (HTTP {http_status}): check the key in the provider's variable")
        }
        CheckOutcome::ModelMissing { http_status } => format!(
            "no such model (HTTP {http_status}): check the model's name against the provider's list"
        ),
        CheckOutcome::Failed { error, .. } => format!("failed: {error}"),
    }
}
