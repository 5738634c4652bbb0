//! How a command fails: one message on stderr and a documented exit status.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | `usage --check`: the ledger and the usage records differ |
//! | 2 | usage or configuration (bad flags, bad YAML, unknown model, no key set, no prompt) |
//! | 3 | no capacity (or budget) before the deadline |
//! | 4 | the provider failed (error answer, timeout, connection) |
//! | 5 | the state store (Redis, the embedded store) is unavailable |
//! | 130, 143 | stopped by SIGINT (Ctrl-C), SIGTERM |

use std::process::ExitCode;

use router_sdk::Error;

/// A failed command: the message for stderr and the exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    const DIFFERS: u8 = 1;
    const USAGE: u8 = 2;
    const NO_CAPACITY: u8 = 3;
    const PROVIDER: u8 = 4;
    const STATE: u8 = 5;

    /// A usage or configuration error: exit status 2.
    pub(crate) fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: Self::USAGE,
            error: error.into(),
        }
    }

    /// A check found a difference: exit status 1.
    pub(crate) fn differs(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: Self::DIFFERS,
            error: error.into(),
        }
    }

    /// The provider's answer is not what was asked for: exit status 4.
    pub(crate) fn provider(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: Self::PROVIDER,
            error: error.into(),
        }
    }

    /// The state store is unavailable: exit status 5.
    pub(crate) fn state(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: Self::STATE,
            error: error.into(),
        }
    }

    /// Stopped by a signal: `code` is 128 + the signal number (130 SIGINT, 143 SIGTERM).
    pub(crate) fn signalled(code: u8, error: anyhow::Error) -> Failure {
        Failure { code, error }
    }

    /// A router error, with the status its kind documents.
    pub(crate) fn router(error: Error) -> Failure {
        let code = match &error {
            Error::NoCapacity { .. } | Error::BudgetExhausted { .. } => Self::NO_CAPACITY,
            Error::Provider { .. } | Error::Transport { .. } | Error::StreamBroken { .. } => {
                Self::PROVIDER
            }
            Error::Ledger(_) | Error::Usage(_) => Self::STATE,
            _ => Self::USAGE,
        };
        Failure {
            code,
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
            Failure::usage(anyhow::Error::new(error).context("cannot write output"))
        }
    }

    /// Print `llmroute: <message>` on stderr (unless the failure is a closed pipe) and return the
    /// exit status.
    pub(crate) fn report(self) -> ExitCode {
        if self.code != 0 {
            eprintln!("llmroute: {}", self.message());
        }
        ExitCode::from(self.code)
    }

    /// The message: the error and its causes on one line, each cause once. Some errors (the
    /// ledger's, SQLite's) show their cause in their own message and also return it as their
    /// source; printing the chain as it is would repeat it. A cause the line already holds ends
    /// the chain there: what lies below it is what that error chose to show.
    pub(crate) fn message(&self) -> String {
        let mut line = self.error.to_string();
        for cause in self.error.chain().skip(1) {
            let text = cause.to_string();
            if line.contains(&text) {
                break;
            }
            line.push_str(": ");
            line.push_str(&text);
        }
        line
    }

    /// The exit status.
    #[cfg(test)]
    pub(crate) fn code(&self) -> u8 {
        self.code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that shows its cause in its own message and also returns it as its source, as
    /// the ledger's errors do.
    #[derive(Debug)]
    struct ShowsItsCause(std::io::Error);

    impl std::fmt::Display for ShowsItsCause {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "ledger file /x/ledger.sqlite: cannot create its directory: {}",
                self.0
            )
        }
    }

    impl std::error::Error for ShowsItsCause {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_the_message_already_shows_is_printed_once() {
        let failure = Failure::state(ShowsItsCause(std::io::Error::other("Not a directory")));
        assert_eq!(
            failure.message(),
            "ledger file /x/ledger.sqlite: cannot create its directory: Not a directory"
        );
    }

    #[test]
    fn a_cause_the_message_does_not_show_is_printed_after_it() {
        let error = anyhow::Error::new(std::io::Error::other("disk full"));
        let failure = Failure::usage(error.context("cannot write output"));
        assert_eq!(failure.message(), "cannot write output: disk full");
        assert_eq!(failure.code(), 2);
    }
}
