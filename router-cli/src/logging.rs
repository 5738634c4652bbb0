//! Log lines on stderr: the `tracing` events of the llmroute crates, and `chat -v`'s routing
//! report, as text or one JSON object per line.
//!
//! Levels: warn by default, `-v` info, `-vv` debug, `-vvv` trace, for the llmroute crates only;
//! `RUST_LOG`, when set, replaces that choice (any crate, any level). The routing report is
//! emitted only under `-v`, and always passes the filter then.

use std::fmt;
use std::io::IsTerminal;

use anyhow::anyhow;
use tracing::{Event, Subscriber, field::Field};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::failure::Failure;

/// The target of the routing report's events.
const REPORT: &str = "llmroute::report";

/// The crates whose events are shown without `RUST_LOG` (`llmroute` is this binary).
const CRATES: [&str; 5] = [
    "router_core",
    "router_sdk",
    "router_sim",
    "router_gateway",
    "llmroute",
];

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines; the routing report as `llmroute: ...`.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// One line of the routing report (`chat -v`).
pub(crate) fn report(line: fmt::Arguments<'_>) {
    tracing::info!(target: REPORT, "{line}");
}

/// Installs the subscriber writing to stderr. Fails (exit status 2) on an unusable `RUST_LOG`.
pub(crate) fn init(verbose: u8, format: LogFormat) -> Result<(), Failure> {
    let rust_log = match std::env::var("RUST_LOG") {
        Ok(value) => Some(value),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Failure::usage(anyhow!(
                "RUST_LOG: is not valid UTF-8; fix it or unset it"
            )));
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(verbose, rust_log.as_deref())?)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .event_format(Text::default())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| Failure::usage(anyhow!("cannot set up logging: {e}")))
}

/// The filter: `rust_log` when set and not empty, else the llmroute crates at the level
/// `verbose` gives; the routing report passes either way.
fn filter(verbose: u8, rust_log: Option<&str>) -> Result<EnvFilter, Failure> {
    let directives = match rust_log.filter(|v| !v.trim().is_empty()) {
        Some(value) => value.to_owned(),
        None => {
            let level = match verbose {
                0 => "warn",
                1 => "info",
                2 => "debug",
                _ => "trace",
            };
            CRATES.map(|c| format!("{c}={level}")).join(",")
        }
    };
    let report = format!("{REPORT}=info")
        .parse()
        .map_err(|e| Failure::usage(anyhow!("the routing report's log filter: {e}")))?;
    let filter = EnvFilter::builder().parse(&directives).map_err(|e| {
        Failure::usage(anyhow!(
            "RUST_LOG: {e}; write directives such as `info` or `router_sdk=debug`, or unset it"
        ))
    })?;
    Ok(filter.add_directive(report))
}

/// The text format: the routing report as `llmroute: <line>`, everything else in
/// tracing-subscriber's full format (time, level, spans, target, fields).
#[derive(Default)]
struct Text {
    full: Format<Full>,
}

impl<S, N> FormatEvent<S, N> for Text
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if event.metadata().target() != REPORT {
            return self.full.format_event(ctx, writer, event);
        }
        let mut message = Message::default();
        event.record(&mut message);
        writeln!(writer, "llmroute: {}", message.0)
    }
}

/// The `message` field of an event.
#[derive(Default)]
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_sets_the_llmroute_crates_level_and_rust_log_replaces_it() {
        let shown = |verbose, rust_log| match filter(verbose, rust_log) {
            Ok(f) => f.to_string(),
            Err(e) => panic!("{e:?}"),
        };
        assert!(shown(0, None).contains("router_sdk=warn"));
        assert!(shown(1, None).contains("router_core=info"));
        assert!(shown(2, None).contains("llmroute=debug"));
        assert!(shown(3, None).contains("router_sdk=trace"));
        assert!(!shown(0, Some("hyper=trace")).contains("router_sdk"));
        assert!(shown(0, Some("hyper=trace")).contains("hyper=trace"));
        assert!(
            shown(0, Some(" ")).contains("router_sdk=warn"),
            "blank is unset"
        );
        for verbose in [0, 3] {
            assert!(shown(verbose, Some("off")).contains("llmroute::report=info"));
        }
    }

    #[test]
    fn an_unusable_rust_log_is_an_error_naming_it() {
        let Err(failure) = filter(0, Some("router_sdk=loud")) else {
            panic!("accepted");
        };
        assert!(format!("{failure:?}").contains("RUST_LOG"), "{failure:?}");
    }
}
