//! `usage:`: where the usage records go (one per finished request), and how they are batched.
//!
//! Written either as the sink alone (`usage: postgres://llmroute@db/llm`) or as a map
//! (`usage: { sink: sqlite, spill: /var/lib/llmroute/usage.spill }`). Absent, each driver picks
//! its default: the embedded SQLite file for the CLI and the gateway, none for the library.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Records older than this many days are deleted (in batches, hourly); `None`: kept.
    pub retain_days: Option<u64>,
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
            retain_days: None,
        }
    }
}
