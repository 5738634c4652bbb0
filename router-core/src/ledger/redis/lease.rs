//! Leases (lua/lease.lua, lua/unlease.lua): a block of a deployment's limits granted to one
//! instance in one call, and what its requests did not use given back.

use std::num::NonZeroU64;

use super::{LEASE, RedisStore, UNLEASE};
use crate::config::{DeploymentId, Limits};
use crate::ledger::LedgerError;
use crate::ledger::counts::{Counts, Deltas};
use crate::ledger::types::Observation;

/// A block granted: its requests and tokens, counted in `bucket` of the deployment's (and its
/// provider's) window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) requests: u64,
    pub(crate) tokens: u64,
    pub(crate) bucket: u64,
    /// The store's clock when it granted (ms).
    pub(crate) now: u64,
}

/// A block asked for: `want` (requests, tokens), but at most 1/`parts` of what is left of each
/// limit, and nothing when less than `least` is left. Tokens 0: not leased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) want: (u64, u64),
    pub(crate) least: (u64, u64),
    pub(crate) parts: u64,
}

impl Ask {
    /// No block: a call that only carries corrections, or asks again what a call did.
    pub(crate) const NOTHING: Ask = Ask {
        want: (0, 0),
        least: (0, 0),
        parts: 1,
    };
}

/// The requests and tokens a deployment had left in its windows after a lease call or at a
/// heartbeat (the tightest of its limits and its provider's; `u64::MAX`: not limited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Room {
    pub(crate) requests: u64,
    pub(crate) tokens: u64,
}

impl Room {
    /// What each scope's `limits` leave over its window `totals` (requests, tokens, input and
    /// output tokens), the tightest: as lease.lua reckons it.
    pub(crate) fn left(scopes: impl IntoIterator<Item = (Limits, Counts)>) -> Room {
        let left = |limit: Option<NonZeroU64>, used: u64| {
            limit.map_or(u64::MAX, |v| v.get().saturating_sub(used))
        };
        let mut room = Room {
            requests: u64::MAX,
            tokens: u64::MAX,
        };
        for (l, used) in scopes {
            room.requests = room.requests.min(left(l.rpm, used.requests));
            room.tokens = room
                .tokens
                .min(left(l.tpm, used.tokens))
                .min(left(l.itpm, used.input))
                .min(left(l.otpm, used.output));
        }
        room
    }
}

/// What a lease call did, and the room it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leased {
    Granted(Grant, Room),
    /// Not even the least asked for was left, or the deployment cools down for the ms given
    /// (0: it does not; else no room is said).
    Refused(Room, u64),
}

impl RedisStore {
    /// Asks for a block of `d`'s limits (see [`Ask`]); nothing is granted when `d` is in
    /// cooldown. `corrections` of this instance's earlier blocks on `d` (bucket, deltas) are
    /// applied first, in the same call. `call` is the call's id: sent again with the same, it
    /// answers as it first did and counts nothing again (see lua/common.lua).
    pub(crate) async fn lease(
        &self,
        d: DeploymentId,
        Ask { want, least, parts }: Ask,
        corrections: &[(u64, Deltas)],
        call: u64,
    ) -> Result<Leased, LedgerError> {
        let scopes = self.scopes(d)?;
        let mut inv = LEASE.prepare_invoke();
        for &s in scopes {
            inv.key(&self.scope_keys[s].window);
        }
        inv.arg(self.now_arg())
            .arg(want.0)
            .arg(want.1)
            .arg(least.0)
            .arg(least.1)
            .arg(parts.max(1))
            .arg(scopes.len());
        for &s in scopes {
            let l = self.table.def(s).limits;
            for v in [l.rpm, l.tpm, l.itpm, l.otpm] {
                inv.arg(v.map_or(0, |v| v.get()));
            }
        }
        inv.arg(u8::from(self.table.counts_apart(d)))
            .arg(corrections.len());
        for (bucket, deltas) in corrections {
            inv.arg(*bucket);
            for delta in self.table.kept(d, *deltas) {
                inv.arg(delta);
            }
        }
        inv.key(self.call_key(call));
        self.push_epoch(&mut inv);
        let reply = self.run(&inv).await?;
        if let [2, _] = reply.as_slice() {
            return Err(LedgerError::Lost {
                url: self.url.clone(),
            });
        }
        let count = |v: i64| u64::try_from(v).map_err(|_| self.protocol("lease.lua", &reply));
        let room = |requests: i64, tokens: i64| -> Result<Room, LedgerError> {
            let left = |v: i64| if v == -1 { Ok(u64::MAX) } else { count(v) };
            Ok(Room {
                requests: left(requests)?,
                tokens: left(tokens)?,
            })
        };
        match reply.as_slice() {
            [1, now, requests, tokens, bucket, room_r, room_t] => Ok(Leased::Granted(
                Grant {
                    requests: count(*requests)?,
                    tokens: count(*tokens)?,
                    bucket: count(*bucket)?,
                    now: count(*now)?,
                },
                room(*room_r, *room_t)?,
            )),
            [0, now, cooldown, room_r, room_t] => Ok(Leased::Refused(
                room(*room_r, *room_t)?,
                count(*cooldown)?.saturating_sub(count(*now)?),
            )),
            _ => Err(self.protocol("lease.lua", &reply)),
        }
    }

    /// Corrects what a lease counted in `bucket` of `d`'s windows by `deltas` (requests, tokens,
    /// input, output; negative gives back), then follows the provider's report if one comes.
    /// [`LedgerError::Lost`]: the store is not in the epoch this instance knows; nothing applied.
    pub(crate) async fn unlease(
        &self,
        d: DeploymentId,
        bucket: u64,
        deltas: Deltas,
        observed: Option<&Observation>,
    ) -> Result<(), LedgerError> {
        let scopes = self.scopes(d)?;
        let mut inv = UNLEASE.prepare_invoke();
        for &s in scopes {
            inv.key(&self.scope_keys[s].window);
        }
        inv.arg(self.now_arg()).arg(bucket);
        for delta in self.table.kept(d, deltas) {
            inv.arg(delta);
        }
        self.push_report(&mut inv, scopes[0], observed);
        inv.key(self.call_key(fastrand::u64(..)));
        self.push_epoch(&mut inv);
        let reply = self.run(&inv).await?;
        match reply.as_slice() {
            [1] => Ok(()),
            [2] => Err(LedgerError::Lost {
                url: self.url.clone(),
            }),
            _ => Err(self.protocol("unlease.lua", &reply)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(v: u64) -> Option<NonZeroU64> {
        NonZeroU64::new(v)
    }

    #[test]
    fn the_room_left_is_the_tightest_limit_of_every_scope_and_never_below_zero() {
        let deployment = Limits {
            rpm: limit(10),
            tpm: limit(1_000),
            ..Limits::default()
        };
        let provider = Limits {
            tpm: limit(5_000),
            otpm: limit(600),
            ..Limits::default()
        };
        // The deployment has 4 requests and 700 tokens left; its provider 300 tokens in all
        // (4,700) and 100 output tokens: the output tokens bind.
        let room = Room::left([
            (deployment, Counts::from([6, 300, 0, 0])),
            (provider, Counts::from([9, 4_700, 4_200, 500])),
        ]);
        assert_eq!(
            room,
            Room {
                requests: 4,
                tokens: 100
            }
        );
        // Over a limit (another instance's block counted at once): no room, not a wrap.
        let room = Room::left([(deployment, Counts::from([12, 1_200, 0, 0]))]);
        assert_eq!(
            room,
            Room {
                requests: 0,
                tokens: 0
            }
        );
        // Unlimited: u64::MAX, as a lease call's -1 reads.
        let room = Room::left([(Limits::default(), Counts::from([50, 50_000, 0, 0]))]);
        assert_eq!(
            room,
            Room {
                requests: u64::MAX,
                tokens: u64::MAX
            }
        );
    }
}
