//! The blocks of limits one instance holds (see `lease:` and lua/lease.lua): admitting from them
//! and settling what they admitted is local. What the blocks counted in the shared windows is
//! corrected (lua/unlease.lua, or the next block's call, or the heartbeat): by the part a block
//! did not hand out as soon as it ends, and by what each request really used against what it
//! reserved as it settles. Corrections owed on one deployment and bucket add up into one. A
//! request admitted in a later second than its block's grant is moved to its own second (see
//! [`Granted::send_by`]).

use std::collections::VecDeque;

use super::LedgerError;
use super::counts::{Counts, Deltas};
use super::redis::lease::Room;
use super::types::{ActualUsage, Need, Observation, Reservation};
use super::window::{bucket_of, expiry_of};
use crate::IdMap;
use crate::config::DeploymentId;

mod block;
mod owed;
mod room;
mod sizing;
mod take;

use block::Block;
use room::Seen;

/// The span over which `auto` measures this instance's rate, ms.
const RATE_SPAN_MS: u64 = 10_000;
/// How long what a lease call or a heartbeat said of a deployment's room is trusted, ms: a
/// request that needs more does not ask that deployment for a block meanwhile. Its capacity
/// comes back a little at a time, as the window slides or others give back, and asking for
/// every trickle costs a call each; heartbeats (one a second by default) read it again at no
/// call of their own. Without them, 4 s rather than 2 s halved the calls spent on deployments
/// at their limit (`bench/run.sh --leases`) at the same cost.
const ROOM_TRUSTED_MS: u64 = 4_000;

/// A block the store granted, as [`Leases::open`] takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    pub(crate) requests: u64,
    /// `None` when tokens are not leased (the deployment has no token limit).
    pub(crate) tokens: Option<u64>,
    /// The second (bucket) the grant is counted in.
    pub(crate) bucket: u64,
    /// The store's clock at the grant, and this instance's when the call was sent and when the
    /// answer came (ms).
    pub(crate) store_now: u64,
    pub(crate) sent: u64,
    pub(crate) now: u64,
    /// When the shared windows drop the grant's bucket, less the time a call takes, on this
    /// instance's clock (ms). The grant counts every request the block admits in that bucket;
    /// a request admitted in a later second would leave the windows before the provider forgets
    /// it, so it is moved to its own second (counted there, taken off the grant's) by the next
    /// call or heartbeat, which must come by then.
    pub(crate) send_by: u64,
}

/// A correction owed to the shared windows of a deployment, in a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owed {
    pub(crate) deployment: DeploymentId,
    pub(crate) bucket: u64,
    pub(crate) deltas: Deltas,
    pub(crate) observed: Option<Observation>,
}

/// Every block this instance holds or has not yet corrected.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    /// The block admitting now, per deployment.
    open: IdMap<DeploymentId, Block>,
    /// Each reservation admitted from a block: its deployment, block id, bucket and counts.
    admitted: IdMap<u64, (DeploymentId, u64, u64, Counts)>,
    /// The last block id given.
    blocks: u64,
    /// Corrections to send, by deployment and bucket: the deployment's next block's call, or
    /// the next heartbeat, carries them.
    owed: IdMap<(DeploymentId, u64), Deltas>,
    /// The provider's latest report per leased deployment, sent with the next correction.
    reports: IdMap<DeploymentId, Observation>,
    /// The earliest [`Granted::send_by`] of the moves owed (ms): a heartbeat goes by then.
    send_by: Option<u64>,
    /// Recent admissions from blocks, any deployment: when (ms) and tokens.
    recent: VecDeque<(u64, u64)>,
    /// The tokens of [`Leases::recent`], summed as they come and go.
    recent_tokens: u64,
    /// What this instance last learnt of each deployment's room: a request that needs more
    /// (with what its own block and corrections hand back, see [`Leases::lacks_room`]) does not
    /// ask it for a block while that is trusted.
    room: IdMap<DeploymentId, Seen>,
    /// Block calls that got no answer: sent again until one comes (see [`Unanswered`]).
    unanswered: Vec<Unanswered>,
    /// The store's clock less this instance's, at the latest grant (ms): when a bucket leaves
    /// the shared windows, on this instance's clock.
    skew: i64,
}

/// How long a block call that got no answer is sent again for, ms: well within the minute its
/// call record lasts in the store from its first run (lua/common.lua), which comes after it
/// was sent. After that, what it may have counted stays counted until it slides out.
const ASK_AGAIN_FOR_MS: u64 = 30_000;

/// A block call that got no answer (it timed out, its connection dropped, or its caller went
/// away), which the store may or may not have run. Sent again under the same call id, it
/// answers as its first run did, or runs now if that never came: either way the reply says
/// what it granted, which is given back whole, and the corrections it carried are then
/// applied exactly once. Until then, what they add is owed again ([`Leases::owe_unsure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unanswered {
    pub(crate) deployment: DeploymentId,
    /// The call's id (its record in the store).
    pub(crate) call: u64,
    /// The corrections it carried: bucket and deltas.
    pub(crate) carried: Vec<(u64, Deltas)>,
    /// When it was sent (ms).
    pub(crate) sent: u64,
}

fn counts(r: &Reservation) -> Counts {
    Counts::request(r.tokens, r.input_tokens)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
