//! SIGINT and SIGTERM while a command holds reservations: stop the work cleanly instead of dying.
//!
//! Dying skips the drop guards, so a request's concurrency slot and token estimate would stay
//! held for the slot TTL. [`until_signal`] drops the work instead (its guards settle the
//! estimates and free the slots), and the caller then exits with 128 + the signal number.

use std::future::Future;

use anyhow::anyhow;

use crate::failure::Failure;

/// A signal that stops a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// SIGINT (Ctrl-C): exit status 130.
    Interrupt,
    /// SIGTERM: exit status 143.
    Terminate,
}

impl Signal {
    /// The conventional exit status: 128 + the signal number.
    pub(crate) fn exit_status(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }

    /// The signal's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }
}

/// Handlers for SIGINT and SIGTERM. From [`Signals::install`] on, these signals no longer end the
/// process: they are delivered to [`until_signal`].
#[derive(Debug)]
pub(crate) struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers (inside the async runtime).
    #[cfg(unix)]
    pub(crate) fn install() -> Result<Signals, Failure> {
        use tokio::signal::unix::{SignalKind, signal};
        let handler = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| Failure::usage(anyhow!("cannot handle {name}: {e}")))
        };
        Ok(Signals {
            interrupt: handler(SignalKind::interrupt(), "SIGINT")?,
            terminate: handler(SignalKind::terminate(), "SIGTERM")?,
        })
    }

    /// Installs the handler of Ctrl-C (the only signal there is here).
    #[cfg(not(unix))]
    pub(crate) fn install() -> Result<Signals, Failure> {
        Ok(Signals {})
    }

    /// The next signal.
    #[cfg(unix)]
    pub(crate) async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::Interrupt,
            _ = self.terminate.recv() => Signal::Terminate,
        }
    }

    /// The next Ctrl-C.
    #[cfg(not(unix))]
    pub(crate) async fn next(&mut self) -> Signal {
        match tokio::signal::ctrl_c().await {
            Ok(()) => Signal::Interrupt,
            // No handler: never interrupted.
            Err(_) => std::future::pending().await,
        }
    }
}

/// Runs `work` to its end, unless a signal comes first: then `work` is dropped (its guards run)
/// before this returns the signal.
pub(crate) async fn until_signal<F: Future>(
    work: F,
    signals: &mut Signals,
) -> Result<F::Output, Signal> {
    tokio::select! {
        output = work => Ok(output),
        signal = signals.next() => Err(signal),
    }
}

/// The failure a command ends with after `signal`: one line, and 128 + the signal number.
pub(crate) fn stopped_by(signal: Signal, what: &str) -> Failure {
    Failure::signalled(
        signal.exit_status(),
        anyhow!("{what} stopped by {}", signal.name()),
    )
}
