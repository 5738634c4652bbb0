//! Which usage sink a driver writes to, decided in one place, and opening it.
//!
//! From, highest precedence first: `$LLMROUTE_USAGE` (a sink as `usage:` writes it: `none`,
//! `sqlite`, `sqlite:PATH`, `postgres://...`; the file's other `usage` settings still apply);
//! `usage:` in the configuration file; else the driver's default ([`UsageDefault`]): the
//! embedded SQLite file `usage.sqlite` in the state directory for the CLI and the gateway,
//! none for the library. The spill file is `usage.spill` in the state directory unless
//! `usage.spill` names one.

use router_core::config::{Registry, UsageSettings, UsageSink};
use router_usage::{Batching, Recorder, SPILL_FILE, Sink, USAGE_ENV, UsageError};

use crate::Error;
use crate::store::{Environment, state_dir};

/// What a driver writes to when neither `$LLMROUTE_USAGE` nor the file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageDefault {
    /// The embedded SQLite file (the CLI and the gateway).
    Sqlite,
    /// Nothing (the library).
    None,
}

/// The usage settings a driver uses (see the [module docs](self)).
pub fn settings(
    registry: &Registry,
    default: UsageDefault,
    env: &Environment,
) -> Result<UsageSettings, Error> {
    let mut settings = registry.usage.clone().unwrap_or_else(|| {
        UsageSettings::with_sink(match default {
            UsageDefault::Sqlite => UsageSink::Sqlite(None),
            UsageDefault::None => UsageSink::None,
        })
    });
    if let Some(value) = env.var(USAGE_ENV) {
        let text = value.into_string().map_err(|_| {
            Error::InvalidRequest(format!(
                "{USAGE_ENV}: is not valid UTF-8; fix it or unset it"
            ))
        })?;
        settings.sink = UsageSink::parse(&text)
            .map_err(|msg| Error::InvalidRequest(format!("{USAGE_ENV}: {msg}")))?;
    }
    Ok(settings)
}

/// Opens the sink of `settings` and starts its recorder (on the current Tokio runtime); `None`
/// for `none`. An SQLite file that cannot be opened is an error; a PostgreSQL server that is
/// down is not (records spill until it answers).
pub fn open(settings: &UsageSettings, env: &Environment) -> Result<Option<Recorder>, Error> {
    if settings.sink == UsageSink::None {
        return Ok(None);
    }
    let needs_dir = settings.spill.is_none() || settings.sink == UsageSink::Sqlite(None);
    let dir = if needs_dir {
        state_dir(env)?.0
    } else {
        std::path::PathBuf::new()
    };
    let Some(sink) = Sink::open(settings, &dir)? else {
        return Ok(None);
    };
    let spill = settings
        .spill
        .clone()
        .unwrap_or_else(|| dir.join(SPILL_FILE));
    let recorder = Recorder::start(sink, &spill, Batching::of(settings));
    if let Some(days) = settings.retain_days {
        recorder.retain_days(days);
    }
    Ok(Some(recorder))
}

/// Opens the sink of `settings` for reports only (`llmroute usage`): no recorder, nothing
/// written. `Ok(None)` for `none`.
pub fn reader(settings: &UsageSettings, env: &Environment) -> Result<Option<Sink>, Error> {
    if settings.sink == UsageSink::None {
        return Ok(None);
    }
    let dir = match settings.sink {
        UsageSink::Sqlite(None) => state_dir(env)?.0,
        _ => std::path::PathBuf::new(),
    };
    Sink::open(settings, &dir).map_err(|e: UsageError| e.into())
}
