//! Taking requests from blocks, opening and ending blocks, settling what they admitted.

use super::*;

impl Leases {
    /// Admits `need` on candidate `rank` (`d`) from its open block, if it has room. A request
    /// admitted in a later second than the grant's is moved to its own (see [`Granted::send_by`]).
    /// Within a call's time (and a ms either way) after a second's turn, the store's clock may
    /// read either second: the request counts in the later one, since counted in the earlier
    /// it would leave the windows before a minute had passed since it was admitted (it counts
    /// at most a second longer; a store that has not reached that second yet when the move
    /// lands counts it in its current one, no earlier than it was admitted). A block whose
    /// call saw the clock step (see [`Block::second_at`]) admits nothing but its grant's.
    pub(crate) fn take(
        &mut self,
        d: DeploymentId,
        need: &Need,
        rank: usize,
        now: u64,
    ) -> Option<Reservation> {
        self.admit(d, need, rank, now, false)
    }

    /// The second (bucket) `d`'s open block was granted in, if it has one.
    pub(crate) fn granted_in(&self, d: DeploymentId) -> Option<u64> {
        self.open.get(&d).map(|b| b.bucket)
    }

    /// Admits `need` from the block just granted for it: the store admitted it with the grant,
    /// as it admits a request in the shared windows, so it counts in the grant's second.
    pub(crate) fn take_asked(
        &mut self,
        d: DeploymentId,
        need: &Need,
        rank: usize,
        now: u64,
    ) -> Option<Reservation> {
        self.admit(d, need, rank, now, true)
    }

    pub(super) fn admit(
        &mut self,
        d: DeploymentId,
        need: &Need,
        rank: usize,
        now: u64,
        asked: bool,
    ) -> Option<Reservation> {
        self.end_expired(now);
        let block = self.open.get_mut(&d)?;
        let tokens = need.tokens_on(rank);
        let fits = block.used.requests < block.requests
            && block
                .tokens
                .is_none_or(|t| block.used.tokens.saturating_add(tokens) <= t);
        if !fits {
            return None;
        }
        let home = block.bucket;
        let bucket = if asked { home } else { block.second_at(now)? };
        let r = Reservation {
            id: need.id,
            deployment: d,
            bucket,
            tokens,
            input_tokens: need.input_on(rank),
            rank,
            tenant: None,
        };
        let c = counts(&r);
        block.used = block.used.plus(c);
        let (block_id, send_by) = (block.id, block.send_by);
        if bucket != home {
            self.shift(d, home, bucket, c.map(|v| v as i64));
            self.send_by = Some(self.send_by.map_or(send_by, |t| t.min(send_by)));
        }
        self.admitted.insert(r.id, (d, block_id, bucket, c));
        self.recent.push_back((now, tokens));
        self.recent_tokens += tokens;
        Some(r)
    }

    /// Moves `counts` of `d` from bucket `from` to `to`: owed together, so applied together.
    pub(super) fn shift(&mut self, d: DeploymentId, from: u64, to: u64, counts: Deltas) {
        self.owe(d, to, counts);
        self.owe(d, from, counts.map(|v| -v));
    }

    /// When the moves owed must have reached the store (ms), if any are.
    pub(crate) fn send_by(&self) -> Option<u64> {
        self.send_by
    }

    /// Opens the block `grant` of `d`, admitting until `ends`; the deployment's previous block
    /// ends.
    pub(crate) fn open(&mut self, d: DeploymentId, grant: Granted, ends: u64) {
        self.end(d);
        self.blocks += 1;
        self.skew = grant.store_now as i64 - grant.now as i64;
        let earliest = self.skew - 1;
        let latest = grant.store_now as i64 - grant.sent.min(grant.now) as i64 + 1;
        let block = Block {
            id: self.blocks,
            bucket: grant.bucket,
            requests: grant.requests,
            tokens: grant.tokens,
            used: Counts::ZERO,
            ends,
            skew: (earliest, latest),
            send_by: grant.send_by,
        };
        self.open.insert(d, block);
    }

    /// Ends `d`'s open block (it is full, `d` cooled down, or a new one replaces it): what it did
    /// not hand out is owed back at once, so the next call on `d` returns it to the others.
    pub(crate) fn end(&mut self, d: DeploymentId) {
        if let Some(block) = self.open.remove(&d) {
            self.owe(d, block.bucket, block.correction());
        }
    }

    pub(super) fn end_expired(&mut self, now: u64) {
        let expired: Vec<DeploymentId> = self
            .open
            .iter()
            .filter(|(_, b)| b.ends <= now)
            .map(|(d, _)| *d)
            .collect();
        for d in expired {
            self.end(d);
        }
    }

    /// Settles (`Some`) or releases (`None`) a reservation admitted from a block: `false` if it
    /// was not (or is already finished). A settled request counts its actual tokens; a released
    /// one counts nothing.
    pub(crate) fn finish(&mut self, id: u64, actual: Option<ActualUsage>) -> bool {
        let Some((d, block_id, bucket, before)) = self.admitted.remove(&id) else {
            return false;
        };
        let after = match actual {
            Some(a) => Counts::new(1, a.tokens, a.input_tokens, a.output_tokens()),
            None => Counts::ZERO,
        };
        let delta = after.zip(before, |a, b| a as i64 - b as i64);
        match self.open.get_mut(&d) {
            // Still admitting: the block's own count changes (what it hands out depends on it),
            // and goes with the block's correction to its bucket; a request moved to a later
            // bucket has it moved there too.
            Some(block) if block.id == block_id => {
                block.used = block.used.zip(delta, u64::saturating_add_signed);
                let home = block.bucket;
                if bucket != home {
                    self.shift(d, home, bucket, delta);
                }
            }
            // Its block ended and was corrected with this request as reserved.
            _ => self.owe(d, bucket, delta),
        }
        true
    }

    /// How many requests admitted from blocks are in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.admitted.len()
    }

    /// Whether `id` was admitted from a block and is still in flight.
    pub(crate) fn holds(&self, id: u64) -> bool {
        self.admitted.contains_key(&id)
    }

    /// Ends every block (shutdown): what they did not hand out is owed at once (what is in
    /// flight is corrected as it settles).
    pub(crate) fn end_all(&mut self) {
        let open: Vec<DeploymentId> = self.open.keys().copied().collect();
        for d in open {
            self.end(d);
        }
    }
}
