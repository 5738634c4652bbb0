//! The blocks of limits one instance holds (see `lease:` and lua/lease.lua): admitting from them
//! and settling what they admitted is local. What the blocks counted in the shared windows is
//! corrected (lua/unlease.lua, or the next block's call, or the heartbeat): by the part a block
//! did not hand out as soon as it ends, and by what each request really used against what it
//! reserved as it settles. Corrections owed on one deployment and bucket add up into one. A
//! request admitted in a later second than its block's grant is moved to its own second (see
//! [`Granted::send_by`]).

use std::collections::VecDeque;

use super::LedgerError;
use super::redis::lease::Room;
use super::types::{ActualUsage, Need, Observation, Reservation};
use super::window::{Counts, bucket_of, expiry_of};
use crate::IdMap;
use crate::config::DeploymentId;

/// The span over which `auto` measures this instance's rate, ms.
const RATE_SPAN_MS: u64 = 10_000;
/// How long what a lease call or a heartbeat said of a deployment's room is trusted, ms: a
/// request that needs more does not ask that deployment for a block meanwhile. Its capacity
/// comes back a little at a time, as the window slides or others give back, and asking for
/// every trickle costs a call each; heartbeats (one a second by default) read it again at no
/// call of their own. Without them, 4 s rather than 2 s halved the calls spent on deployments
/// at their limit (`bench/run.sh --leases`) at the same cost.
const ROOM_TRUSTED_MS: u64 = 4_000;

/// One block: what it was granted, what its requests count now.
#[derive(Debug, Clone)]
struct Block {
    /// Unique among this instance's blocks (two may share a deployment and a bucket).
    id: u64,
    bucket: u64,
    requests: u64,
    /// `None` when the deployment has no token limit (tokens are not leased then).
    tokens: Option<u64>,
    /// Requests, tokens, input and output tokens its requests count now.
    used: Counts,
    /// When it stops admitting (ms).
    ends: u64,
    /// The store's clock less this instance's (ms), at least and at most: the store read its
    /// clock between the call's sending and its answer, and each clock counts whole ms. A
    /// request's bucket is read on the store's clock, as the grant's was (see [`Leases::take`]).
    skew: (i64, i64),
    /// When what it admits after its grant's second must have reached the store (ms): see
    /// [`Granted::send_by`].
    send_by: u64,
}

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

impl Block {
    /// The second a request admitted at `now` (ms, this instance's clock) counts in: the
    /// latest the store's clock may read now (see [`Leases::take`]). `None` if the store's
    /// clock may be more than a second's turn away from that (the clock stepped while the
    /// block's call was out): the block cannot tell.
    fn second_at(&self, now: u64) -> Option<u64> {
        let second = |skew: i64| bucket_of(now.saturating_add_signed(skew)).max(self.bucket);
        let (earliest, latest) = (second(self.skew.0), second(self.skew.1));
        (latest <= earliest + 1).then_some(latest)
    }

    /// What to add to the shared windows when this block ends: used less granted (the grant
    /// counted its tokens against tokens, input and output alike). Requests still in flight are
    /// counted as reserved; their settlements correct the rest.
    fn correction(&self) -> [i64; 4] {
        let d = |used: u64, granted: u64| used as i64 - granted as i64;
        let tokens = self.tokens.unwrap_or(0);
        [
            d(self.used[0], self.requests),
            d(self.used[1], tokens),
            d(self.used[2], tokens),
            d(self.used[3], tokens),
        ]
    }
}

/// A correction owed to the shared windows of a deployment, in a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owed {
    pub(crate) deployment: DeploymentId,
    pub(crate) bucket: u64,
    pub(crate) deltas: [i64; 4],
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
    owed: IdMap<(DeploymentId, u64), [i64; 4]>,
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
    pub(crate) carried: Vec<(u64, [i64; 4])>,
    /// When it was sent (ms).
    pub(crate) sent: u64,
}

/// A deployment's room as last read.
#[derive(Debug, Clone, Copy)]
struct Seen {
    room: Room,
    /// When it was read (ms): when a lease call's answer came, or when a heartbeat was sent
    /// (its reading is no older than that).
    read: u64,
    /// Trusted until then (ms).
    until: u64,
    /// The deployment cools down until `until`: heartbeats, which do not say so, do not
    /// replace this reading before then.
    cooling: bool,
}

fn counts(r: &Reservation) -> Counts {
    [1, r.tokens, r.input_tokens, r.tokens - r.input_tokens]
}

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

    fn admit(
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
        let fits = block.used[0] < block.requests
            && block
                .tokens
                .is_none_or(|t| block.used[1].saturating_add(tokens) <= t);
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
        for (u, v) in block.used.iter_mut().zip(c) {
            *u = u.saturating_add(v);
        }
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
    fn shift(&mut self, d: DeploymentId, from: u64, to: u64, counts: [i64; 4]) {
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
            used: [0; 4],
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

    fn owe(&mut self, d: DeploymentId, bucket: u64, deltas: [i64; 4]) {
        let owed = self.owed.entry((d, bucket)).or_insert([0; 4]);
        for (o, v) in owed.iter_mut().zip(deltas) {
            *o += v;
        }
    }

    /// The corrections owed on `d`, for its next block's call to carry.
    pub(crate) fn take_owed(&mut self, d: DeploymentId) -> Vec<(u64, [i64; 4])> {
        let keys: Vec<(DeploymentId, u64)> =
            self.owed.keys().filter(|(o, _)| *o == d).copied().collect();
        keys.into_iter()
            .filter_map(|k| self.owed.remove(&k).map(|deltas| (k.1, deltas)))
            .filter(|(_, deltas)| deltas.iter().any(|&v| v != 0))
            .collect()
    }

    fn end_expired(&mut self, now: u64) {
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
            Some(a) => [1, a.tokens, a.input_tokens, a.output_tokens()],
            None => [0; 4],
        };
        let delta = [0, 1, 2, 3].map(|i| after[i] as i64 - before[i] as i64);
        match self.open.get_mut(&d) {
            // Still admitting: the block's own count changes (what it hands out depends on it),
            // and goes with the block's correction to its bucket; a request moved to a later
            // bucket has it moved there too.
            Some(block) if block.id == block_id => {
                for (u, v) in block.used.iter_mut().zip(delta) {
                    *u = u.saturating_add_signed(v);
                }
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

    /// Whether `id` was admitted from a block and is still in flight.
    pub(crate) fn holds(&self, id: u64) -> bool {
        self.admitted.contains_key(&id)
    }

    /// Keeps the provider's latest report on a leased deployment for the next correction.
    pub(crate) fn report(&mut self, d: DeploymentId, observed: Observation) {
        self.reports.insert(d, observed);
    }

    /// The corrections to send now (blocks expired by `now` included), later buckets first.
    /// Each deployment's latest report goes with its last correction (a report alone goes with
    /// bucket 0, which no window holds).
    pub(crate) fn drain(&mut self, now: u64) -> Vec<Owed> {
        self.end_expired(now);
        self.send_by = None;
        let due: Vec<(DeploymentId, u64)> = self.owed.keys().copied().collect();
        let mut out: Vec<Owed> = due
            .into_iter()
            .filter_map(|k| self.owed.remove(&k).map(|deltas| (k, deltas)))
            .filter(|(_, deltas)| deltas.iter().any(|&v| v != 0))
            .map(|((deployment, bucket), deltas)| Owed {
                deployment,
                bucket,
                deltas,
                observed: None,
            })
            .collect();
        // Later buckets first, so that a move's addition lands before its subtraction when they
        // go in calls of their own; each report with its deployment's last correction, so that
        // it is compared with windows that hold every other (a report read between the two
        // halves of a move would find them short by it, and count the difference again).
        out.sort_by_key(|o| (std::cmp::Reverse(o.bucket), o.deployment.0));
        for (d, obs) in self.reports.drain() {
            match out.iter_mut().rev().find(|o| o.deployment == d) {
                Some(o) => o.observed = Some(obs),
                None => out.push(Owed {
                    deployment: d,
                    bucket: 0,
                    deltas: [0; 4],
                    observed: Some(obs),
                }),
            }
        }
        out
    }

    /// Puts back a correction that could not be sent.
    pub(crate) fn owe_again(&mut self, o: Owed) {
        self.owe(o.deployment, o.bucket, o.deltas);
        if let Some(obs) = o.observed {
            self.reports.entry(o.deployment).or_insert(obs);
        }
    }

    /// Keeps a correction whose call may or may not have applied it (no answer came, or its
    /// caller went away): what it adds, and not what it takes away. Applied twice, an addition
    /// over-counts, as the shared windows may; a subtraction would leave them short of what is
    /// in use, so it is given up, and the windows count it until its bucket slides out.
    pub(crate) fn owe_unsure(&mut self, o: Owed) {
        let adds = o.deltas.map(|v| v.max(0));
        self.owe_again(Owed { deltas: adds, ..o });
    }

    /// Keeps a correction whose call failed with `error`: whole if the store surely did not
    /// apply it, else as [`Leases::owe_unsure`] does.
    pub(crate) fn owe_failed(&mut self, o: Owed, error: &LedgerError) {
        if error.not_applied() {
            self.owe_again(o);
        } else {
            self.owe_unsure(o);
        }
    }

    /// Keeps block call `u`, which got no answer, to send again (see [`Unanswered`]); what its
    /// corrections add is owed again meanwhile, by the next heartbeat at once: an addition may
    /// be a move (see [`Granted::send_by`]) due soon, and its deadline went with the call.
    pub(crate) fn unanswered(&mut self, u: Unanswered) {
        for &(bucket, deltas) in &u.carried {
            self.owe_unsure(Owed {
                deployment: u.deployment,
                bucket,
                deltas,
                observed: None,
            });
        }
        if u.carried.iter().any(|(_, d)| d.iter().any(|&v| v > 0)) {
            self.send_by = Some(self.send_by.map_or(u.sent, |t| t.min(u.sent)));
        }
        self.unanswered.push(u);
    }

    /// The block calls to send again at `now`; those sent too long ago to be answered as they
    /// were are given up (what they may have counted stays counted until it slides out).
    pub(crate) fn take_unanswered(&mut self, now: u64) -> Vec<Unanswered> {
        let mut calls = std::mem::take(&mut self.unanswered);
        calls.retain(|u| now.saturating_sub(u.sent) < ASK_AGAIN_FOR_MS);
        calls
    }

    /// Block call `u`, sent again, got its answer: it granted `granted` (requests and tokens,
    /// in that bucket) and applied its corrections, once. The grant goes back whole, and so
    /// does what its corrections add, owed again when it got no answer.
    pub(crate) fn answered_late(&mut self, u: Unanswered, granted: Option<(u64, u64, u64)>) {
        for (bucket, deltas) in u.carried {
            self.owe(u.deployment, bucket, deltas.map(|v| -v.max(0)));
        }
        if let Some((bucket, requests, tokens)) = granted {
            let (r, t) = (requests as i64, tokens as i64);
            self.owe(u.deployment, bucket, [-r, -t, -t, -t]);
        }
    }

    /// Keeps block call `u` to send again: it got no answer again.
    pub(crate) fn still_unanswered(&mut self, u: Unanswered) {
        self.unanswered.push(u);
    }

    /// Ends every block (shutdown): what they did not hand out is owed at once (what is in
    /// flight is corrected as it settles).
    pub(crate) fn end_all(&mut self) {
        let open: Vec<DeploymentId> = self.open.keys().copied().collect();
        for d in open {
            self.end(d);
        }
    }

    /// A call for a block of `d` answered at `now` that `room` was left.
    pub(crate) fn saw_room(&mut self, d: DeploymentId, room: Room, now: u64) {
        let seen = Seen {
            room,
            read: now,
            until: now + ROOM_TRUSTED_MS,
            cooling: false,
        };
        self.room.insert(d, seen);
    }

    /// A call for a block of `d` answered at `now` that `d` cools down for `ms`: no room until
    /// then, or for [`ROOM_TRUSTED_MS`] if that is longer.
    pub(crate) fn saw_cooldown(&mut self, d: DeploymentId, ms: u64, now: u64) {
        let seen = Seen {
            room: Room {
                requests: 0,
                tokens: 0,
            },
            read: now,
            until: now + ms.max(ROOM_TRUSTED_MS),
            cooling: true,
        };
        self.room.insert(d, seen);
    }

    /// A heartbeat sent at `sent` read `room` on `d`: it replaces a reading that came before
    /// it was sent, unless that one said `d` cools down for longer.
    pub(crate) fn beat_saw_room(&mut self, d: DeploymentId, room: Room, sent: u64) {
        if self
            .room
            .get(&d)
            .is_some_and(|s| s.read > sent || (s.cooling && s.until > sent))
        {
            return;
        }
        self.saw_room(d, room, sent);
    }

    /// Whether `d` was lately read to have too little room for a request of `tokens`. The
    /// reading counts this instance's open block on `d` as used in full, and misses the
    /// corrections owed on `d` since; the call for a new block hands both back (or adds them)
    /// before it asks, so they count here, and a request the call would find room for is not
    /// sent to a dearer deployment. A correction to a second that has left the windows changes
    /// nothing there (the store drops it): left out if that second had left before the reading,
    /// which did not count it; if it left since, what it frees is at least what this instance
    /// gives back in it, so a give-back still counts and an addition does not. This only
    /// decides whether to ask: the store admits. Where it errs high (a reading floored at 0
    /// over a limit; a heartbeat's reading is dated when the beat was sent, so a second that
    /// left before Redis read it still counts as live), the cost is one refused call.
    pub(crate) fn lacks_room(&self, d: DeploymentId, tokens: u64, now: u64) -> bool {
        let Some(seen) = self.room.get(&d).filter(|s| s.until > now) else {
            return false;
        };
        if seen.cooling {
            return true;
        }
        let mut requests = i128::from(seen.room.requests);
        let mut room_tokens = i128::from(seen.room.tokens);
        // The open block counts as the correction its end owes (granted less used).
        let open = self.open.get(&d).map(|b| (b.bucket, b.correction()));
        let owed = self
            .owed
            .iter()
            .filter(|((o, _), _)| *o == d)
            .map(|((_, bucket), deltas)| (*bucket, *deltas));
        let on_store = |t: u64| t.saturating_add_signed(self.skew);
        let (read, now) = (on_store(seen.read), on_store(now));
        for (bucket, deltas) in owed.chain(open) {
            let deltas = match expiry_of(bucket) {
                gone if gone <= read => continue,
                gone if gone <= now => deltas.map(|v| v.min(0)),
                _ => deltas,
            };
            requests -= i128::from(deltas[0]);
            // The room read is the tightest of the token, input and output limits: the largest
            // change takes the least off (or adds the least to) any of them.
            room_tokens -= i128::from(deltas[1].max(deltas[2]).max(deltas[3]));
        }
        requests <= 0 || i128::from(tokens) > room_tokens
    }

    /// Whether `d`'s open block has handed out every request it holds (`false` without one).
    pub(crate) fn used_up(&self, d: DeploymentId) -> bool {
        self.open.get(&d).is_some_and(|b| b.used[0] >= b.requests)
    }

    /// Whether `d`'s open block is about to run out, at `now` (ms): it cannot take another
    /// request of `tokens`, or it stops admitting within `ahead` ms. `false` without an open
    /// block.
    pub(crate) fn runs_out(&self, d: DeploymentId, tokens: u64, now: u64, ahead: u64) -> bool {
        self.open.get(&d).is_some_and(|b| {
            b.used[0] >= b.requests
                || b.tokens.is_some_and(|t| b.used[1] + tokens > t)
                || b.ends <= now.saturating_add(ahead)
        })
    }

    /// Admissions from blocks (any deployment) in the last ten seconds, and their mean tokens
    /// (`auto` sizing).
    pub(crate) fn rate(&mut self, now: u64) -> (u64, u64) {
        while let Some(&(t, tokens)) = self.recent.front()
            && t + RATE_SPAN_MS <= now
        {
            self.recent.pop_front();
            self.recent_tokens -= tokens;
        }
        let n = self.recent.len() as u64;
        (n, self.recent_tokens.checked_div(n).unwrap_or(0))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    const D: DeploymentId = DeploymentId(0);

    /// A block granted in `bucket` by a store whose clock read the bucket's start when this
    /// instance's read 0.
    fn grant(requests: u64, tokens: Option<u64>, bucket: u64) -> Granted {
        Granted {
            requests,
            tokens,
            bucket,
            store_now: bucket * 1_000,
            sent: 0,
            now: 0,
            send_by: 50_000,
        }
    }

    /// A block of 10 requests and 1,000 tokens granted in bucket 7, the store's clock reading
    /// `store_now` between this instance's `sent` and `now`.
    fn granted_in_7(store_now: u64, sent: u64, now: u64) -> Granted {
        Granted {
            requests: 10,
            tokens: Some(1_000),
            bucket: 7,
            store_now,
            sent,
            now,
            send_by: 60_000,
        }
    }

    fn need(tokens: u64) -> Need {
        Need::new(tokens, Duration::from_secs(60)).with_input_tokens(tokens / 2)
    }

    #[test]
    fn a_block_admits_up_to_its_size_then_owes_what_was_unused() {
        let mut l = Leases::default();
        l.open(D, grant(3, Some(100), 7), 5_000);
        let a = l.take(D, &need(40), 0, 1).unwrap();
        let b = l.take(D, &need(40), 0, 1).unwrap();
        assert_eq!(a.bucket, 7);
        assert!(
            l.take(D, &need(40), 0, 1).is_none(),
            "tokens: 80 + 40 > 100"
        );
        assert!(l.take(D, &need(20), 0, 1).is_some());
        assert!(l.take(D, &need(1), 0, 1).is_none(), "requests: 3 taken");
        // Nothing owed while the block is open.
        assert_eq!(l.drain(2), vec![]);
        assert!(l.finish(a.id, Some(ActualUsage::split(10, 5))));
        assert!(l.finish(b.id, None));
        assert!(!l.finish(b.id, None), "finished once");
        l.end(D);
        // The third is in flight, counted as reserved (20 tokens, 10 in, 10 out). Used: 2
        // requests, 15 + 20 tokens, 10 + 10 input, 5 + 10 output; granted 3 and 100. What the
        // block did not hand out is owed at once.
        let owe = |deltas| {
            vec![Owed {
                deployment: D,
                bucket: 7,
                deltas,
                observed: None,
            }]
        };
        assert_eq!(l.drain(3), owe([-1, -65, -80, -85]));
        // The third settles for 10 in and 25 out: 15 more than it reserved, owed on its own.
        let third = *l.admitted.keys().next().unwrap();
        l.finish(third, Some(ActualUsage::split(10, 25)));
        assert_eq!(l.drain(4), owe([0, 15, 0, 15]));
    }

    #[test]
    fn a_request_of_u64_max_tokens_does_not_fit_a_block_in_use() {
        let mut l = Leases::default();
        l.open(D, grant(3, Some(100), 7), 5_000);
        assert!(l.take(D, &need(40), 0, 1).is_some());
        assert!(l.take(D, &need(u64::MAX), 0, 1).is_none());
        assert!(
            l.take(D, &need(60), 0, 1).is_some(),
            "the block's room is intact"
        );
    }

    #[test]
    fn a_request_whose_second_the_store_could_read_either_way_counts_in_the_later() {
        let mut l = Leases::default();
        // Sent at 1,000 here, answered at 1,010; the store's clock read 7,995 in between, so it
        // is 6,985 to 6,995 ms ahead, and a ms more either way as both count whole ms.
        l.open(D, granted_in_7(7_995, 1_000, 1_010), 20_000);
        // The request it was asked for: admitted with the grant, in its second.
        let asked = l.take_asked(D, &need(40), 0, 1_010).unwrap();
        assert_eq!(asked.bucket, 7);
        let at = |l: &mut Leases, now| l.take(D, &need(40), 0, now).unwrap().bucket;
        assert_eq!(at(&mut l, 1_003), 7, "the store's clock at 7,987 to 7,999");
        assert_eq!(at(&mut l, 1_010), 8, "7,994 to 8,006");
        assert_eq!(at(&mut l, 1_015), 8, "7,999 to 8,011");
        assert_eq!(at(&mut l, 1_016), 8, "8,000 to 8,012");
        l.end(D);
        let mut owed = l.drain(1_100);
        owed.sort_by_key(|o| o.bucket);
        let deltas: Vec<(u64, [i64; 4])> = owed.iter().map(|o| (o.bucket, o.deltas)).collect();
        assert_eq!(
            deltas,
            vec![(7, [-8, -920, -960, -960]), (8, [3, 120, 60, 60])]
        );
    }

    #[test]
    fn a_block_whose_call_saw_the_clock_step_admits_nothing_but_its_grants_request() {
        let mut l = Leases::default();
        // The clock here was set an hour forward while the call was out.
        l.open(D, granted_in_7(7_995, 1_000, 3_601_000), 3_620_000);
        assert!(l.take_asked(D, &need(40), 0, 3_601_000).is_some());
        assert!(l.take(D, &need(40), 0, 3_601_000).is_none());
    }

    #[test]
    fn a_request_admitted_in_a_later_second_than_the_grant_is_moved_to_its_own() {
        let mut l = Leases::default();
        // Granted in bucket 7, the store's clock reading 7,400 ms when this instance's read 1,000.
        l.open(D, granted_in_7(7_400, 1_000, 1_000), 20_000);
        let a = l.take(D, &need(40), 0, 1_500).unwrap();
        assert_eq!(
            a.bucket, 7,
            "the store's clock at 7,900: the grant's second"
        );
        assert_eq!(l.send_by(), None);
        let b = l.take(D, &need(40), 0, 3_700).unwrap();
        assert_eq!(b.bucket, 10, "the store's clock at 10,100");
        assert_eq!(l.send_by(), Some(60_000), "a move to send in time");
        // It settles for 10 in and 5 out (it reserved 20 and 20): its settlement goes with it.
        assert!(l.finish(b.id, Some(ActualUsage::split(10, 5))));
        let mut owed = l.drain(3_800);
        owed.sort_by_key(|o| o.bucket);
        let at = |bucket, deltas| Owed {
            deployment: D,
            bucket,
            deltas,
            observed: None,
        };
        assert_eq!(
            owed,
            vec![at(7, [-1, -15, -10, -5]), at(10, [1, 15, 10, 5])]
        );
        assert_eq!(l.send_by(), None, "sent");
    }

    #[test]
    fn a_block_granted_no_tokens_admits_nothing_that_needs_some() {
        let mut l = Leases::default();
        l.open(D, grant(5, Some(0), 7), 5_000);
        assert!(l.take(D, &need(10), 0, 1).is_none());
        // Tokens not leased (no token limit): only requests count.
        l.open(D, grant(5, None, 7), 5_000);
        assert!(l.take(D, &need(10), 0, 1).is_some());
    }

    #[test]
    fn a_block_that_ends_with_requests_in_flight_hands_back_its_unused_part_to_the_next_call() {
        let mut l = Leases::default();
        l.open(D, grant(4, Some(1_000), 7), 5_000);
        let a = l.take(D, &need(600), 0, 1).unwrap();
        assert!(l.take(D, &need(600), 0, 2).is_none(), "600 + 600 > 1000");
        // Asking for the next block ends this one: its 400 unused tokens and 3 requests go with
        // that call, while the first request is still in flight.
        l.end(D);
        assert_eq!(l.take_owed(D), vec![(7, [-3, -400, -700, -700])]);
        l.finish(a.id, Some(ActualUsage::split(300, 300)));
        assert_eq!(l.take_owed(D), vec![], "it used what it reserved");
    }

    #[test]
    fn a_report_goes_with_its_deployments_last_correction_after_a_moves_addition() {
        let mut l = Leases::default();
        let other = DeploymentId(1);
        l.open(D, grant(2, Some(200), 7), 50_000);
        l.open(other, grant(2, Some(200), 7), 50_000);
        assert!(l.take(D, &need(100), 0, 1).is_some());
        // In the next second: moved to bucket 8, a correction there and one back in 7.
        assert!(l.take(D, &need(100), 0, 1_500).is_some());
        assert!(l.take(other, &need(100), 0, 1).is_some());
        l.end_all();
        l.report(D, Observation::default());
        l.report(other, Observation::default());
        let drained: Vec<(usize, u64, bool)> = l
            .drain(1_501)
            .iter()
            .map(|o| (o.deployment.0, o.bucket, o.observed.is_some()))
            .collect();
        assert_eq!(drained, vec![(0, 8, false), (0, 7, true), (1, 7, true)]);
    }

    #[test]
    fn a_block_ends_when_it_expires_and_late_settlements_are_owed_alone() {
        let mut l = Leases::default();
        l.open(D, grant(10, None, 7), 5_000);
        let a = l.take(D, &need(40), 0, 1).unwrap();
        assert!(l.take(D, &need(40), 0, 5_000).is_none(), "expired");
        l.end_all();
        // No token limit: tokens were not leased, so all the request's count is added.
        assert_eq!(l.drain(5_001)[0].deltas, [-9, 40, 20, 20]);
        l.finish(a.id, Some(ActualUsage::split(30, 30)));
        assert_eq!(l.drain(5_002)[0].deltas, [0, 20, 10, 10]);
    }

    #[test]
    fn a_deployment_short_of_room_is_asked_again_by_requests_that_fit_it_or_once_the_time_is_up() {
        let mut l = Leases::default();
        let room = |requests, tokens| Room { requests, tokens };
        assert!(!l.lacks_room(D, 500, 0), "nothing seen yet");
        l.saw_room(D, room(3, 400), 0);
        assert!(l.lacks_room(D, 500, 1_000));
        assert!(!l.lacks_room(D, 400, 1_000), "it fits what was left");
        assert!(!l.lacks_room(D, 500, ROOM_TRUSTED_MS), "time is up");
        l.saw_room(D, room(0, 10_000), 0);
        assert!(l.lacks_room(D, 1, 1_000), "no request left");
        l.saw_room(D, room(5, u64::MAX), 0);
        assert!(!l.lacks_room(D, 1_000_000, 1_000), "no token limit");
    }

    #[test]
    fn the_room_a_new_block_would_find_counts_what_this_instance_holds_and_owes_on_it() {
        let mut l = Leases::default();
        let room = |requests, tokens| Room { requests, tokens };
        // A block of 4 requests and 1,000 tokens, granted with 300 tokens left after it.
        l.open(D, grant(4, Some(1_000), 7), 5_000);
        l.saw_room(D, room(10, 300), 0);
        assert!(l.take(D, &need(600), 0, 1).is_some());
        // 800 > 300 read, but the block's unused 400 goes back with the call for the next one.
        assert!(l.take(D, &need(800), 0, 2).is_none());
        assert!(!l.lacks_room(D, 700, 2), "300 + 400 left");
        assert!(l.lacks_room(D, 701, 2));
        // Ended (its unused part is owed back), the same holds until the next call carries it.
        l.end(D);
        assert!(!l.lacks_room(D, 700, 3));
        assert!(l.lacks_room(D, 701, 3));
        // The next call carries that, and reads the room after its grant; what a request the
        // new block admitted uses beyond its reservation counts against it too.
        assert!(!l.take_owed(D).is_empty());
        l.saw_room(D, room(1, 300), 4);
        l.open(D, grant(2, Some(300), 8), 5_000);
        let a = l.take(D, &need(100), 0, 5).unwrap();
        l.finish(a.id, Some(ActualUsage::split(100, 50)));
        assert!(
            !l.lacks_room(D, 450, 6),
            "300 read and 150 of the block: it used 50 beyond the request's reservation"
        );
        assert!(l.lacks_room(D, 451, 6));
        let b = l.take(D, &need(100), 0, 6).unwrap();
        l.end(D);
        assert!(!l.lacks_room(D, 350, 7), "300 read, 50 owed back");
        // Settled 30 beyond its reservation once its block ended: owed apart, it counts too.
        l.finish(b.id, Some(ActualUsage::split(50, 80)));
        assert!(l.lacks_room(D, 321, 7));
        assert!(!l.lacks_room(D, 320, 7));
        // A cooldown leaves no room, whatever is held.
        l.open(D, grant(5, Some(1_000), 9), 5_000);
        l.saw_cooldown(D, 1_000, 7);
        assert!(l.lacks_room(D, 1, 8));
    }

    #[test]
    fn corrections_to_a_second_that_left_the_windows_count_as_the_store_counts_them() {
        let room = |requests, tokens| Room { requests, tokens };
        // Granted in second 7 when this instance's clock read 0: second 7 leaves the windows at
        // 61 s here. The block's unused 400 tokens are owed back there.
        let mut l = Leases::default();
        l.open(D, grant(4, Some(1_000), 7), 5_000);
        assert!(l.take(D, &need(600), 0, 1).is_some());
        l.end(D);
        l.saw_room(D, room(10, 300), 60_000);
        assert!(!l.lacks_room(D, 700, 60_500), "300 read, 400 owed back");
        assert!(l.lacks_room(D, 701, 60_500));
        // Read before the second left: its leaving frees at least what is given back in it.
        assert!(!l.lacks_room(D, 700, 61_000));
        assert!(l.lacks_room(D, 701, 61_000));
        // Read after: the reading did not count it, and the store drops the give-back.
        l.saw_room(D, room(10, 300), 61_000);
        assert!(!l.lacks_room(D, 300, 61_500));
        assert!(l.lacks_room(D, 301, 61_500));

        // A full block whose request settled 30 tokens beyond its reservation after it ended.
        let mut l = Leases::default();
        l.open(D, grant(1, Some(100), 7), 5_000);
        let a = l.take(D, &need(100), 0, 1).unwrap();
        l.end(D);
        l.finish(a.id, Some(ActualUsage::split(50, 80)));
        l.saw_room(D, room(10, 300), 60_000);
        assert!(!l.lacks_room(D, 270, 60_500), "300 read, 30 owed on top");
        assert!(l.lacks_room(D, 271, 60_500));
        // The second left since: the store drops what is added there.
        assert!(!l.lacks_room(D, 300, 61_000));
        assert!(l.lacks_room(D, 301, 61_000));
    }

    #[test]
    fn a_heartbeat_reading_replaces_an_older_one_and_not_a_newer_one_or_a_cooldown() {
        let mut l = Leases::default();
        let room = |tokens| Room {
            requests: 10,
            tokens,
        };
        l.saw_room(D, room(100), 1_000);
        // A beat sent after that answer came: its reading is newer, and keeps being trusted.
        l.beat_saw_room(D, room(900), 2_000);
        assert!(
            !l.lacks_room(D, 500, 2_100),
            "room came back: a request that fits asks"
        );
        l.beat_saw_room(D, room(100), 3_000);
        assert!(
            l.lacks_room(D, 500, 6_500),
            "still short, read again at 3 s"
        );
        // A beat sent before a lease call's answer came reads no later than that call did.
        l.saw_room(D, room(100), 7_000);
        l.beat_saw_room(D, room(900), 6_900);
        assert!(l.lacks_room(D, 500, 7_100));
        // Heartbeats do not say a deployment cools down: until it ends, they replace nothing.
        l.saw_cooldown(D, 20_000, 8_000);
        l.beat_saw_room(D, room(900), 9_000);
        assert!(l.lacks_room(D, 1, 27_900), "cooling down");
        l.beat_saw_room(D, room(900), 28_000);
        assert!(
            !l.lacks_room(D, 500, 28_100),
            "the cooldown is over and there is room"
        );
    }

    #[test]
    fn a_block_call_asked_again_counts_what_it_carried_once_and_gives_its_grant_back() {
        let mut l = Leases::default();
        let call = |sent| Unanswered {
            deployment: D,
            call: 1,
            carried: vec![(7, [0, 20, 20, 0]), (8, [0, -980, 0, -980])],
            sent,
        };
        let drained = |l: &mut Leases| {
            let mut owed: Vec<(u64, [i64; 4])> = l
                .drain(0)
                .into_iter()
                .map(|o| (o.bucket, o.deltas))
                .collect();
            owed.sort();
            owed
        };
        l.unanswered(call(1_000));
        // Until it is answered, what it adds is owed again (a heartbeat carries it).
        assert_eq!(drained(&mut l), vec![(7, [0, 20, 20, 0])]);
        let again = l.take_unanswered(2_000);
        assert_eq!(again, vec![call(1_000)]);
        assert!(l.take_unanswered(2_000).is_empty(), "taken");
        // Answered: it granted 2 requests and 1,000 tokens in bucket 9, and applied what it
        // carried, so what the heartbeat added again is taken off.
        for u in again {
            l.answered_late(u, Some((9, 2, 1_000)));
        }
        assert_eq!(
            drained(&mut l),
            vec![(7, [0, -20, -20, 0]), (9, [-2, -1_000, -1_000, -1_000])]
        );
        // Not answered again: kept; sent too long ago to be answered as it was: given up.
        l.unanswered(call(1_000));
        l.drain(0);
        for u in l.take_unanswered(30_999) {
            l.still_unanswered(u);
        }
        assert_eq!(l.take_unanswered(30_999).len(), 1);
        l.unanswered(call(1_000));
        assert!(l.take_unanswered(31_000).is_empty());
    }

    #[test]
    fn a_correction_that_may_have_been_applied_keeps_what_it_adds_and_not_what_it_takes_away() {
        let mut l = Leases::default();
        let report = Observation::default();
        l.owe_unsure(Owed {
            deployment: D,
            bucket: 7,
            deltas: [0, -980, 20, -1000],
            observed: Some(report),
        });
        assert_eq!(
            l.drain(0),
            vec![Owed {
                deployment: D,
                bucket: 7,
                deltas: [0, 0, 20, 0],
                observed: Some(report),
            }]
        );
        // Nothing that adds: nothing owed.
        l.owe_unsure(Owed {
            deployment: D,
            bucket: 7,
            deltas: [-1, -980, 0, 0],
            observed: None,
        });
        assert!(l.drain(0).is_empty());
    }

    #[test]
    fn the_rate_counts_the_last_ten_seconds() {
        let mut l = Leases::default();
        l.open(D, grant(100, None, 1), 60_000);
        for t in [0, 1_500, 9_500, 12_500] {
            assert!(l.take(D, &need(30), 0, t).is_some());
        }
        assert_eq!(l.rate(12_500), (2, 30));
    }
}
