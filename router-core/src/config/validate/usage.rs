//! `usage:` checked: a known sink, a schema name PostgreSQL accepts, batching within bounds.

use std::path::PathBuf;
use std::time::Duration;

use super::checks::{Ctx, line};
use crate::config::error::ConfigError;
use crate::config::raw::{At, Number, RawUsage};
use crate::config::usage::{UsageSettings, UsageSink};

/// `usage:` checked; `None` when the file has none (the driver's default applies).
pub(crate) fn usage(
    ctx: &Ctx<'_>,
    raw: Option<&At<RawUsage>>,
) -> Result<Option<UsageSettings>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let at = line(raw);
    let sink =
        |field: &str, text: &str| UsageSink::parse(text).map_err(|msg| ctx.invalid(field, at, msg));
    let map = match &raw.value {
        RawUsage::Sink(text) => return Ok(Some(UsageSettings::with_sink(sink("usage", text)?))),
        RawUsage::Map(map) => map,
    };
    let mut out = UsageSettings::with_sink(match &map.sink {
        Some(text) => sink("usage.sink", text)?,
        None => {
            let msg = "missing `sink`; write none, sqlite, sqlite:PATH or postgres://USER@HOST/DB"
                .to_owned();
            return Err(ctx.invalid("usage.sink", at, msg));
        }
    });
    if let Some(schema) = &map.schema {
        let ok = schema
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && schema.len() <= 63
            // PostgreSQL keeps `pg_` names for itself and refuses to create one.
            && !schema.starts_with("pg_");
        if !ok {
            let msg = format!(
                "`{schema}` is not a schema name llmroute uses: write lowercase letters, digits \
                 and `_`, starting with a letter or `_` but not with `pg_` (PostgreSQL keeps \
                 those), at most 63 characters"
            );
            return Err(ctx.invalid("usage.schema", at, msg));
        }
        out.schema = schema.clone();
    }
    if let Some(spill) = &map.spill {
        if spill.trim().is_empty() {
            let msg = "empty path; remove it to use `usage.spill` in the state directory";
            return Err(ctx.invalid("usage.spill", at, msg.to_owned()));
        }
        out.spill = Some(PathBuf::from(spill));
    }
    let whole = |field: &str, value: &Option<Number>, default: u64, max: u64| {
        let Some(value) = value else {
            return Ok(default);
        };
        match value {
            Number::Int(n) if *n > 0 && *n <= i128::from(max) => Ok(*n as u64),
            other => {
                let msg = format!(
                    "must be a whole number from 1 to {max}, got {other}; remove it to use the \
                     default {default}"
                );
                Err(ctx.invalid(field, at, msg))
            }
        }
    };
    out.batch = whole("usage.batch", &map.batch, UsageSettings::BATCH, 10_000)? as usize;
    out.flush = Duration::from_millis(whole(
        "usage.flush_ms",
        &map.flush_ms,
        UsageSettings::FLUSH_MS,
        60_000,
    )?);
    out.timeout = Duration::from_millis(whole(
        "usage.timeout_ms",
        &map.timeout_ms,
        UsageSettings::TIMEOUT_MS,
        600_000,
    )?);
    if let Some(days) = &map.retain_days {
        out.retain_days = Some(match days {
            Number::Int(n) if (1..=3_660).contains(n) => *n as u64,
            other => {
                let msg = format!(
                    "must be a whole number of days from 1 to 3660, got {other}; remove it to \
                     keep every record"
                );
                return Err(ctx.invalid("usage.retain_days", at, msg));
            }
        });
    }
    Ok(Some(out))
}
