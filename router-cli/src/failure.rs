//! How a command fails: one message on stderr and an exit status.

use std::process::ExitCode;

/// A failed command: the message for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    /// Exit status for usage and configuration errors, as clap uses for its own.
    const USAGE: u8 = 2;
    /// Exit status for anything else.
    const RUNTIME: u8 = 1;

    /// A usage or configuration error: exit status 2.
    pub(crate) fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: Self::USAGE,
            error: error.into(),
        }
    }

    /// Any other failure: exit status 1.
    pub(crate) fn runtime(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: Self::RUNTIME,
            error: error.into(),
        }
    }

    /// A write to stdout failed. A closed pipe (`llmroute providers | head`) is not an error.
    pub(crate) fn output(error: std::io::Error) -> Failure {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            Failure {
                code: 0,
                error: error.into(),
            }
        } else {
            Failure::runtime(anyhow::Error::new(error).context("cannot write output"))
        }
    }

    /// Print `llmroute: <message>` on stderr (unless the failure is a closed pipe) and return the
    /// exit status.
    pub(crate) fn report(self) -> ExitCode {
        if self.code != 0 {
            eprintln!("llmroute: {:#}", self.error);
        }
        ExitCode::from(self.code)
    }
}
