//! One block: what it was granted and what its requests count now.

use super::*;

/// One block: what it was granted, what its requests count now.
#[derive(Debug, Clone)]
pub(super) struct Block {
    /// Unique among this instance's blocks (two may share a deployment and a bucket).
    pub(super) id: u64,
    pub(super) bucket: u64,
    pub(super) requests: u64,
    /// `None` when the deployment has no token limit (tokens are not leased then).
    pub(super) tokens: Option<u64>,
    /// Requests, tokens, input and output tokens its requests count now.
    pub(super) used: Counts,
    /// When it stops admitting (ms).
    pub(super) ends: u64,
    /// The store's clock less this instance's (ms), at least and at most: the store read its
    /// clock between the call's sending and its answer, and each clock counts whole ms. A
    /// request's bucket is read on the store's clock, as the grant's was (see [`Leases::take`]).
    pub(super) skew: (i64, i64),
    /// When what it admits after its grant's second must have reached the store (ms): see
    /// [`Granted::send_by`].
    pub(super) send_by: u64,
}

impl Block {
    /// The second a request admitted at `now` (ms, this instance's clock) counts in: the
    /// latest the store's clock may read now (see [`Leases::take`]). `None` if the store's
    /// clock may be more than a second's turn away from that (the clock stepped while the
    /// block's call was out): the block cannot tell.
    pub(super) fn second_at(&self, now: u64) -> Option<u64> {
        let second = |skew: i64| bucket_of(now.saturating_add_signed(skew)).max(self.bucket);
        let (earliest, latest) = (second(self.skew.0), second(self.skew.1));
        (latest <= earliest + 1).then_some(latest)
    }

    /// What to add to the shared windows when this block ends: used less granted (the grant
    /// counted its tokens against tokens, input and output alike). Requests still in flight are
    /// counted as reserved; their settlements correct the rest.
    pub(super) fn correction(&self) -> Deltas {
        let d = |used: u64, granted: u64| used as i64 - granted as i64;
        let tokens = self.tokens.unwrap_or(0);
        Deltas::new(
            d(self.used.requests, self.requests),
            d(self.used.tokens, tokens),
            d(self.used.input, tokens),
            d(self.used.output, tokens),
        )
    }
}
