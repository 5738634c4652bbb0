//! The request flow: one sans-IO state machine that decides what a request does next.
//!
//! Every driver (`Router::chat`, `Router::chat_stream`, the simulator, the gateway) plans a
//! request with [`Plan::new`] and then runs a [`Flow`]: it reports what happened (admitted,
//! denied, a wait ended, the call answered, the call failed) and performs the [`Next`] step the
//! flow returns (admit on these candidates, wait this long, call this deployment, finish, give
//! up), settling as [`Settle`] says and putting the [`Cooldown`] it names. The flow performs no
//! I/O, reads no clock and never sleeps: the time and the random draw are passed in, so every
//! behaviour is written once and tested here with a virtual clock.
//!
//! The rules it holds:
//!
//! - A failed call settles as far as the call got: handed back when it never reached the
//!   provider, the request counted but no tokens when the provider refused it, the estimate when
//!   the answer never came or could not be read, the reported usage (else the estimate) when a
//!   stream broke.
//! - Rate limits, overloads, server errors, unreadable answers and timeouts cool the deployment
//!   down (the provider's stated wait, clamped at `retry.max_cooldown_secs`, else backoff for
//!   this call's number) and fail over at once to a candidate that has not failed in this
//!   request; a failed deployment is never the next candidate, whatever its cooldown. When every
//!   candidate has failed, the request waits a backoff before trying them again.
//! - When no candidate can take the request, it waits until the soonest can (batch requests a
//!   little longer), never past the deadline; a tenant whose budget cannot cover it gives up at
//!   once. A request the ledger put in a line waits at most `LINE_POLL_MS` before asking again
//!   (which keeps its ticket alive); its driver ends the wait early when the store wakes it.
//! - An answer already partly handed to the caller is never retried.
//!
//! [`Reports`] decides which provider rate-limit reports are worth a ledger call, and clamps
//! their resets.

mod machine;
mod plan;
mod report;

pub use machine::{AfterFailure, Cooldown, Failure, Flow, GiveUp, Next, Reached, Settle};
pub use plan::{Ask, Estimate, Plan, Priority};
pub use report::{REPORT_EVERY_MS, Reports};

#[cfg(test)]
mod tests;
