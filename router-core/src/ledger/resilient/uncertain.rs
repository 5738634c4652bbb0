use super::*;

/// An admission Redis may have counted though this instance got no grant from it (see
/// [`State::uncertain`]).
#[derive(Debug, Clone)]
pub(super) struct Uncertain {
    pub(super) need: Need,
    pub(super) candidates: Vec<DeploymentId>,
    /// When Redis can hold nothing of it any more (ms, this instance's clock): its reservation
    /// key, which a void reads, lives `SLOTS_TTL_MS` (the longest slot and the hour in which
    /// its settlement, tenant spend included, still counts) from when the admission ran, and a
    /// first sending Redis had not read yet (a frozen Redis) is given a window's length more.
    /// One Redis runs later still is not voided: its slot is held until it expires and its
    /// request counted in its window (the safe side), and its estimated cost stays in its
    /// tenant's spend.
    pub(super) until: u64,
}
