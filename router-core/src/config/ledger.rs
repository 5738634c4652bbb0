//! `ledger:`: how long a call to the shared store may take, and what an instance does while the
//! store does not answer.

use std::time::Duration;

/// What an instance does while the shared store (Redis) does not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Admit against an in-process ledger holding this instance's share of every limit (limit ÷
    /// live instances) until the store answers again, then write what was admitted into the
    /// shared windows before shared admission resumes.
    #[default]
    Local,
    /// Refuse: the request fails with the store's error.
    Closed,
    /// Admit without counting anything until the store answers again.
    Open,
}

impl OnError {
    /// Every mode, as written in the file.
    pub const ALL: [OnError; 3] = [OnError::Local, OnError::Closed, OnError::Open];

    /// The name written in the file: `local`, `closed` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Local => "local",
            OnError::Closed => "closed",
            OnError::Open => "open",
        }
    }
}

/// The shared ledger's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerSettings {
    /// How long one call to the shared store may take before it counts as failed.
    pub timeout: Duration,
    /// What to do while it fails.
    pub on_error: OnError,
    /// How often an instance registers itself (and learns how many instances share the limits
    /// and what is left of the leased ones), and, while the store is away, how often it checks
    /// whether it is back (ten times as often while it then waits for the others).
    pub heartbeat: Duration,
}

impl LedgerSettings {
    /// 50 ms: far above a healthy Redis's answer, far below a provider call.
    pub const TIMEOUT_MS: u64 = 50;
    /// One heartbeat every two seconds. A beat wakes an idle instance twice (its timer, then
    /// the store's answer): a fixed cost per second, which at a few requests a second is a
    /// large share of the router's CPU per request. Two seconds halves it, while an instance
    /// that stops still leaves the count within six.
    pub const HEARTBEAT_MS: u64 = 2_000;
    /// The longest call timeout: a lease's moves leave a second and two calls' time before
    /// the 60 s window turns, which must stay well inside it.
    pub const MAX_TIMEOUT_MS: u64 = 10_000;
    /// The longest heartbeat: a stopped instance leaves the count within three, a minute's
    /// window turns within one.
    pub const MAX_HEARTBEAT_MS: u64 = 60_000;
}

impl Default for LedgerSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(Self::TIMEOUT_MS),
            on_error: OnError::Local,
            heartbeat: Duration::from_millis(Self::HEARTBEAT_MS),
        }
    }
}
