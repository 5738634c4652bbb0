//! The crate's one error type.

use router_core::config::ConfigError;
use router_core::ledger::LedgerError;
use router_usage::UsageError;

/// Why a ledger or a usage sink could not be chosen or opened.
///
/// Each variant reads as the SDK's variant of the same name does (`router_sdk::Error` converts
/// them one for one), so a message is the same whichever of the two a driver reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A Redis URL is unusable (given as an override, in `REDIS_URL` or as `state`); the message
    /// names where it came from and hides its password.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An environment variable holds a value that cannot be used (not UTF-8, not a sink); the
    /// message names the variable.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The ledger could not be opened: Redis unreachable, the embedded file or its directory
    /// not writable, no state directory.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The usage sink could not be opened.
    #[error(transparent)]
    Usage(#[from] UsageError),
}
