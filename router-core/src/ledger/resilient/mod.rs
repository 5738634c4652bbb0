//! Staying within the limits when Redis is slow, away, or comes back empty.
//!
//! [`ResilientStore`] wraps the [`RedisStore`] every instance shares. Each call to Redis has
//! `ledger.timeout_ms`. One slow answer is not an outage: under `on_error: local` an admission
//! or a heartbeat that times out is sent once more, and Redis answers a repeated admission with
//! the first one's grant if it ran it. A call that fails again puts the instance in the mode
//! `ledger.on_error` names.
//!
//! # Modes
//!
//! | Mode | Admissions go | It enters when | It leaves when |
//! |---|---|---|---|
//! | shared | to Redis | it starts; a restore is done | a call fails (per `on_error`) |
//! | rebuilding (`closed`) | nowhere: they fail | Redis lost its keys | the others wrote theirs back, or 5 heartbeats |
//! | local | its own share of each limit | a call or a heartbeat fails (`local`) | a restore wrote its log back and the others are back |
//! | local, closing | nowhere: "not now" | a restore begins writing its log back | Redis fails again (back to local), or done |
//! | open | uncounted | a call fails (`open`) | a heartbeat finds Redis answering |
//!
//! ```text
//!             call fails (local)                 restore writes the log back
//!   shared ──────────────────────────▶ local ─────────────────────────────▶ local, closing
//!     ▲  ▲                               ▲                                      │
//!     │  │                               └──────── Redis fails again ───────────┤
//!     │  └────────── log written, the others back (or 5 heartbeats) ────────────┘
//!     │
//!     ├──── Redis answers ──── open ◀── call fails (open)
//!     └──── the others wrote back ──── rebuilding ◀── Redis lost its keys (closed)
//! ```
//!
//! - **local** (the default; an instance that has not had one heartbeat answered yet fails as
//!   `closed` does, since it cannot know its share): the instance admits against an in-process
//!   ledger holding its share of every limit: the limit ÷ the instances alive at the last
//!   heartbeat, rounded down. That ledger starts with the same share of what the shared windows
//!   held at the last heartbeat (and of each recently served tenant's window and spend), with
//!   all this instance put into them since (its admissions, and what it wrote back after an
//!   earlier outage), with its admissions still awaiting an answer as if granted, and with its
//!   requests in flight, at least its share of every instance's requests in flight at the last
//!   heartbeat. So the instances together stay within each limit while Redis is away.
//! - The heartbeat keeps checking. When Redis answers, what was admitted locally is written
//!   into the shared windows (lua/restore.lua) before shared admission resumes, so the minute
//!   after the outage stays within the limits too. Until every other live instance has done the
//!   same (or said with a heartbeat that it admitted nothing on its own), an instance back from
//!   local mode admits nothing: the shared windows would miss what the others admitted
//!   meanwhile. A heartbeat that fails puts an instance in local mode too, so that one idle
//!   through an outage waits for the others as well (see lua/common.lua, the rejoin hash).
//! - **closed**: the request fails with the store's error.
//! - **open**: admit without counting anything until Redis answers again.
//!
//! A Redis that restarted empty has no epoch key (see lua/heartbeat.lua): the first instance to
//! notice writes back the tenants' spends as it last saw them, every live instance writes back
//! what it admitted through the store in the last minute and the slots of its requests in
//! flight, and admissions carry the epoch they expect so that none is made against the emptied
//! windows before that. What an instance that has exited since admitted in that minute is not
//! written back: the windows miss it until it leaves them.
//!
//! An admission whose reply timed out may still have been counted by Redis later: it is
//! remembered and handed back (`RedisStore::void`) before the restore.
//!
//! # Layout
//!
//! The [`Machine`] decides: the mode and every change of it, where each admission goes, what
//! each beat and restore sends and what their answers change. It does no I/O and reads no
//! clock. Its pieces: `own.rs` (what this instance admitted, and its readings), `book.rs`
//! (calls and requests in flight, tenants served, admissions it is unsure of), `local.rs` and
//! `seed.rs` (the local ledger and how it starts), `written.rs` (restore rounds), `calling.rs`
//! (what a call out may count). The [`Driver`] task owns the background work (`driver.rs`,
//! `beat.rs`, `restore.rs`, `leased.rs`); callers admit (`admit.rs`) and settle (`finish.rs`,
//! `ledger.rs`). One guard, [`Out`], tells the machine what became of a call whose caller went
//! away.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::leases::{Granted, Leases, Owed, Unanswered};
use super::redis::SLOTS_TTL_MS;
use super::redis::lease::{Ask, Leased, Room};
use super::redis::recovery::{Beat, BeatAs, Replayed, Restore, Restored, WindowOf};
use super::scopes::{ScopeTable, share_of};
use super::types::*;
use super::{Ledger, LedgerError, LedgerFuture, RedisStore};
use crate::IdMap;
use crate::clock::Clock;
use crate::config::{DeploymentId, Lease, LedgerSettings, OnError, Registry};
use crate::ledger::counts::{Counts, Deltas};
use crate::ledger::engine::{Cells, Engine, ScopeState, TenantState};
use crate::ledger::window::{
    BUCKET_MS, Slot, WINDOW_BUCKETS, Window, bucket_of, expiry_of, millis,
};

/// Which ledger an instance admits against now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The shared store (Redis).
    Shared,
    /// Its own share of every limit, in process, while the shared store does not answer.
    Local,
    /// Nothing counted (`on_error: open`) while the shared store does not answer.
    Open,
}

impl Mode {
    /// `shared`, `local` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Local => "local",
            Mode::Open => "open",
        }
    }
}

/// How the ledger is doing, for `llmroute quota`, `/v1/quota` and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// Where admissions go now.
    pub mode: Mode,
    /// How long it has been in that mode (shared: since the last change, or start).
    pub since: Duration,
    /// Instances sharing the limits at the last heartbeat (0: none seen yet).
    pub instances: u64,
    /// Mode changes since start.
    pub changes: u64,
    /// Admissions made in local or open mode since start.
    pub local_admissions: u64,
    /// Requests admitted through the shared store (not from a leased block) and not finished.
    pub in_flight: u64,
    /// Calls to the shared store that may admit (requests and blocks) and await their answer.
    pub calls_out: u64,
    /// Requests admitted from leased blocks and not finished.
    pub leased_in_flight: u64,
    /// Requests whose tenant's part came from a tenant's leased block, not finished (counted
    /// apart from `leased_in_flight`, which counts deployments' blocks).
    pub tenant_leased_in_flight: u64,
}

mod admit;
mod beat;
mod book;
mod calling;
mod driver;
mod finish;
mod leased;
mod ledger;
mod local;
mod machine;
mod open;
mod out;
mod own;
mod restore;
mod seed;
mod store;
mod tenants;
mod written;

pub use store::ResilientStore;

use beat::*;
use book::*;
use calling::*;
use driver::*;
use leased::*;
use local::*;
use machine::*;
use open::*;
use out::*;
use own::*;
use restore::*;
use seed::*;
use store::*;
use written::*;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod machine_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod model;
