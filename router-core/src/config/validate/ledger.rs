//! `ledger:` checked: the call timeout and the heartbeat within their bounds, a known mode.

use std::time::Duration;

use super::checks::{Ctx, line};
use crate::config::error::ConfigError;
use crate::config::ledger::{LedgerSettings, OnError};
use crate::config::raw::{At, Number, RawLedger};

/// `ledger:` checked.
pub(crate) fn ledger(
    ctx: &Ctx<'_>,
    raw: Option<&RawLedger>,
) -> Result<LedgerSettings, ConfigError> {
    let mut out = LedgerSettings::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    let ms = |key: &str, value: &Option<At<Number>>, default: u64, max: u64| {
        let Some(value) = value else {
            return Ok(Duration::from_millis(default));
        };
        let field = format!("ledger.{key}");
        let hint = format!("remove it to use the default {default}");
        let n = ctx.positive(&field, value, &hint)?.get();
        if n > max {
            let msg = format!("{n} is above the most it may be, {max}; {hint}");
            return Err(ctx.invalid(&field, line(value), msg));
        }
        Ok(Duration::from_millis(n))
    };
    out.timeout = ms(
        "timeout_ms",
        &raw.timeout_ms,
        LedgerSettings::TIMEOUT_MS,
        LedgerSettings::MAX_TIMEOUT_MS,
    )?;
    out.heartbeat = ms(
        "heartbeat_ms",
        &raw.heartbeat_ms,
        LedgerSettings::HEARTBEAT_MS,
        LedgerSettings::MAX_HEARTBEAT_MS,
    )?;
    if let Some(mode) = &raw.on_error {
        out.on_error = OnError::ALL
            .into_iter()
            .find(|m| m.as_str() == mode.value)
            .ok_or_else(|| {
                let msg = format!(
                    "unknown mode `{}`; write local (admit within this instance's share of \
                     each limit), closed (refuse) or open (admit without counting)",
                    mode.value
                );
                ctx.invalid("ledger.on_error", line(mode), msg)
            })?;
    }
    Ok(out)
}
