//! What this instance knows of each deployment's room, and its own leased rate.

use super::*;

/// A deployment's room as last read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
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

impl Leases {
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
            requests -= i128::from(deltas.requests);
            // The room read is the tightest of the token, input and output limits: the largest
            // change takes the least off (or adds the least to) any of them.
            room_tokens -= i128::from(deltas.tokens.max(deltas.input).max(deltas.output));
        }
        requests <= 0 || i128::from(tokens) > room_tokens
    }

    /// Whether `d`'s open block has handed out every request it holds (`false` without one).
    pub(crate) fn used_up(&self, d: DeploymentId) -> bool {
        self.open
            .get(&d)
            .is_some_and(|b| b.used.requests >= b.requests)
    }

    /// Whether `d`'s open block is about to run out, at `now` (ms): it cannot take another
    /// request of `tokens`, or it stops admitting within `ahead` ms. `false` without an open
    /// block.
    pub(crate) fn runs_out(&self, d: DeploymentId, tokens: u64, now: u64, ahead: u64) -> bool {
        self.open.get(&d).is_some_and(|b| {
            b.used.requests >= b.requests
                || b.tokens.is_some_and(|t| b.used.tokens + tokens > t)
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
