//! `usage:`: where the usage records go (one per finished request), and how they are batched.
//!
//! Written either as the sink alone (`usage: postgres://llmroute@db/llm`) or as a map
//! (`usage: { sink: sqlite, spill: /var/lib/llmroute/usage.spill }`). Absent, each driver picks
//! its default: the embedded SQLite file for the CLI and the gateway, none for the library.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::checks::{Ctx, line};
use super::error::ConfigError;
use super::raw::{At, Number, RawUsage};
use super::state::redact_url;

/// Where usage records are written.
#[derive(Clone, PartialEq, Eq)]
pub enum UsageSink {
    /// Nowhere: no records are kept.
    None,
    /// An SQLite file: the given path, else `usage.sqlite` in the state directory.
    Sqlite(Option<PathBuf>),
    /// A PostgreSQL server, by its `postgres://` URL (which may hold a password).
    Postgres(String),
}

/// Shows a PostgreSQL URL without its password.
impl fmt::Debug for UsageSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageSink::None => f.write_str("None"),
            UsageSink::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            UsageSink::Postgres(url) => f.debug_tuple("Postgres").field(&redact_url(url)).finish(),
        }
    }
}

impl UsageSink {
    /// Reads a sink as written in the file or in `LLMROUTE_USAGE`: `none`, `sqlite`,
    /// `sqlite:PATH`, or a `postgres://` / `postgresql://` URL. The error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "none" {
            return Ok(UsageSink::None);
        }
        if text == "sqlite" {
            return Ok(UsageSink::Sqlite(None));
        }
        if let Some(path) = text.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(
                    "`sqlite:` needs a path after it (or write `sqlite` alone for the \
                            default file)"
                        .to_owned(),
                );
            }
            return Ok(UsageSink::Sqlite(Some(PathBuf::from(path))));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(UsageSink::Postgres(text.to_owned()));
        }
        Err(format!(
            "unknown sink `{}`; write none, sqlite, sqlite:PATH, or postgres://USER@HOST/DATABASE",
            redact_url(text)
        ))
    }

    /// For output: `none`, `sqlite PATH`, or the URL with any password replaced by `***`.
    pub fn describe(&self) -> String {
        match self {
            UsageSink::None => "none".to_owned(),
            UsageSink::Sqlite(None) => "sqlite (state directory)".to_owned(),
            UsageSink::Sqlite(Some(path)) => format!("sqlite {}", path.display()),
            UsageSink::Postgres(url) => redact_url(url),
        }
    }
}

/// `usage:` checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageSettings {
    /// Where records go.
    pub sink: UsageSink,
    /// The PostgreSQL schema holding the tables (created when missing).
    pub schema: String,
    /// The append-only file records go to while the sink is down, replayed when it is back;
    /// `None`: `usage.spill` in the state directory.
    pub spill: Option<PathBuf>,
    /// Most records written in one batch.
    pub batch: usize,
    /// How long a record may wait for its batch to fill before the batch is written.
    pub flush: Duration,
    /// How long one write to the sink may take before the batch goes to the spill file.
    pub timeout: Duration,
}

impl UsageSettings {
    /// The default PostgreSQL schema.
    pub const SCHEMA: &'static str = "llmroute";
    /// Records per batch by default.
    pub const BATCH: u64 = 500;
    /// Batch wait by default, ms.
    pub const FLUSH_MS: u64 = 200;
    /// Sink write timeout by default, ms.
    pub const TIMEOUT_MS: u64 = 5_000;

    /// The default settings around `sink`.
    pub fn with_sink(sink: UsageSink) -> Self {
        Self {
            sink,
            schema: Self::SCHEMA.to_owned(),
            spill: None,
            batch: Self::BATCH as usize,
            flush: Duration::from_millis(Self::FLUSH_MS),
            timeout: Duration::from_millis(Self::TIMEOUT_MS),
        }
    }
}

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
    Ok(Some(out))
}
