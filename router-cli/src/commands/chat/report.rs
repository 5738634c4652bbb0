//! The routing report of `chat -v`: candidates cheapest first, then each attempt and any wait.

use std::time::Duration;

use router_sdk::{AttemptOutcome, ChatRequest, Router};

use crate::failure::Failure;
use crate::logging::report;

/// `e` as a failure, after reporting its attempts when `verbose`.
pub(super) fn routing_failed(verbose: bool, e: router_sdk::Error) -> Failure {
    if verbose {
        report_attempts(e.attempts(), Duration::ZERO);
    }
    Failure::router(e)
}

/// The estimate and the candidates, cheapest first.
pub(super) fn report_candidates(router: &Router, req: &ChatRequest) -> Result<(), Failure> {
    let preview = router.preview(req).map_err(Failure::router)?;
    if let Some(rule) = &preview.route {
        report(format_args!("route {rule}"));
    }
    report(format_args!(
        "estimate {} prompt ({} exact o200k tokens) + {} completion tokens; candidates, \
         cheapest first:",
        preview.prompt_tokens, preview.o200k_tokens, preview.completion_tokens
    ));
    for (provider, model, cost) in &preview.candidates {
        report(format_args!("  {provider}/{model}  ~${cost:.6}"));
    }
    Ok(())
}

/// Each attempt and its outcome, then the time waited for capacity.
pub(super) fn report_attempts(attempts: &[router_sdk::Attempt], waited: Duration) {
    for (i, a) in attempts.iter().enumerate() {
        match &a.outcome {
            AttemptOutcome::Ok => report(format_args!(
                "attempt {}: {}/{} answered",
                i + 1,
                a.provider,
                a.model
            )),
            AttemptOutcome::Failed {
                kind,
                status,
                message,
                cooldown,
                clamped_from,
            } => {
                let status = status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
                let clamped = clamped_from
                    .map(|s| {
                        let why = "clamped at retry.max_cooldown_secs";
                        format!(" (it asked for {:.0}s, {why})", s.as_secs_f64())
                    })
                    .unwrap_or_default();
                let cooldown = cooldown
                    .map(|c| format!("; cooling it down {:.1}s{clamped}", c.as_secs_f64()))
                    .unwrap_or_default();
                report(format_args!(
                    "attempt {}: {}/{} {kind}{status}: {message}{cooldown}",
                    i + 1,
                    a.provider,
                    a.model
                ));
            }
        }
    }
    if !waited.is_zero() {
        report(format_args!(
            "waited {:.1}s for capacity",
            waited.as_secs_f64()
        ));
    }
}
