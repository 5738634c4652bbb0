//! `telemetry:` checked: a collector URL that can be sent to, a ratio from 0 to 1, a name, and
//! whether prompts and answers are recorded.

use super::checks::{Ctx, line};
use crate::config::Telemetry;
use crate::config::error::ConfigError;
use crate::config::raw::RawTelemetry;

/// `telemetry:` checked; the defaults (no traces) when the file has none.
pub(crate) fn telemetry(
    ctx: &Ctx<'_>,
    raw: Option<&RawTelemetry>,
) -> Result<Telemetry, ConfigError> {
    let mut out = Telemetry::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    if let Some(endpoint) = &raw.endpoint {
        let url = Telemetry::traces_url(endpoint.value.trim()).map_err(|e| {
            let msg = format!(
                "{e}; write the collector's OTLP/HTTP base URL, e.g. http://localhost:4318"
            );
            ctx.invalid("telemetry.endpoint", line(endpoint), msg)
        })?;
        out.endpoint = Some(url);
    }
    if let Some(ratio) = &raw.sample_ratio {
        out.sample_ratio = match ratio.value.as_f64() {
            Some(r) if (0.0..=1.0).contains(&r) => r,
            _ => {
                let msg = format!(
                    "must be a number from 0 (no request) to 1 (every request), got {}",
                    ratio.value
                );
                return Err(ctx.invalid("telemetry.sample_ratio", line(ratio), msg));
            }
        };
    }
    if let Some(name) = &raw.service_name {
        out.service_name = ctx.name("telemetry.service_name", name)?;
    }
    if let Some(capture) = &raw.capture_content {
        out.capture_content = capture.value;
    }
    Ok(out)
}
