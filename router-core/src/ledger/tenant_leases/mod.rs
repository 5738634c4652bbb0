//! The blocks of tenants' limits and budgets one instance holds (`lease: auto` on a tier, see
//! lua/tenant_lease.lua): taking requests from them, and the corrections owed back.
//!
//! A block is counted in the tenant's window, day and spend when the store grants it, in the
//! second it grants it in, and admits only within that second, on the store's clock as this
//! instance bounds it: so each request it admits counts in its own second, as an exact
//! admission would. When a block ends (its second is over, or a request finds it too small),
//! what it did not hand out is owed back; each request it admitted owes what it used beyond (or
//! short of) what it reserved once it settles. The owed corrections ride the tenant's next
//! block call, or a call of their own within a second.
//!
//! No I/O and no clock here: [`super::tenant_leased`] drives it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::IdMap;
use crate::ledger::WindowUse;
use crate::ledger::window::BUCKET_MS;

/// Requests, tokens and micro-USD: what a block grants, or a request takes from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    /// Requests.
    pub requests: u64,
    /// Tokens, input and output.
    pub tokens: u64,
    /// Estimated cost, micro-USD.
    pub micros: u64,
}

impl Amounts {
    fn plus(self, o: Amounts) -> Amounts {
        Amounts {
            requests: self.requests.saturating_add(o.requests),
            tokens: self.tokens.saturating_add(o.tokens),
            micros: self.micros.saturating_add(o.micros),
        }
    }

    fn fits_in(self, room: Amounts) -> bool {
        self.requests <= room.requests && self.tokens <= room.tokens && self.micros <= room.micros
    }

    /// `self - o`, each part signed.
    fn less(self, o: Amounts) -> [i64; 3] {
        let d = |a: u64, b: u64| a as i64 - b as i64;
        [
            d(self.requests, o.requests),
            d(self.tokens, o.tokens),
            d(self.micros, o.micros),
        ]
    }

    fn shifted(self, delta: [i64; 3]) -> Amounts {
        Amounts {
            requests: self.requests.saturating_add_signed(delta[0]),
            tokens: self.tokens.saturating_add_signed(delta[1]),
            micros: self.micros.saturating_add_signed(delta[2]),
        }
    }
}

/// A block asked of the store: `want`, but at most 1/`parts` of what is left of each limit and
/// budget, and nothing when less than `fewest` is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantAsk {
    /// What the instance would like.
    pub want: Amounts,
    /// The least worth a block: the request at hand.
    pub fewest: Amounts,
    /// The block takes at most this part of the room left.
    pub parts: u64,
}

impl TenantAsk {
    /// No block: a call that only carries corrections.
    pub const NOTHING: TenantAsk = TenantAsk {
        want: Amounts {
            requests: 0,
            tokens: 0,
            micros: 0,
        },
        fewest: Amounts {
            requests: 0,
            tokens: 0,
            micros: 0,
        },
        parts: 1,
    };
}

/// A correction of what a tenant's block counted, in the second (`bucket`) it counted it:
/// requests, tokens and micro-USD (negative gives back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantCorrection {
    /// The second the block counted in (ms / [`BUCKET_MS`]).
    pub bucket: u64,
    /// Requests, tokens, micro-USD.
    pub deltas: [i64; 3],
}

/// What a tenant block call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantLeased {
    /// Granted `amounts`, counted in `bucket`; the store's clock read `store_now` (ms).
    Granted {
        /// What the block holds.
        amounts: Amounts,
        /// The second it is counted in.
        bucket: u64,
        /// The store's clock when it granted, ms.
        store_now: u64,
        /// The tenant's window with the block counted.
        window: WindowUse,
    },
    /// Not even the fewest asked for was left (or no block was asked for).
    Refused,
    /// The store does not admit through the shared windows now (local or open mode): admit
    /// exactly. The corrections were not sent.
    Unavailable,
}

/// How long a tenant whose block call was refused is admitted exactly, ms: its room comes back
/// as its window slides, a little at a time, and the exact path follows it request by request.
pub(crate) const EXACT_AFTER_REFUSAL_MS: u64 = BUCKET_MS;

/// The span over which a tenant's recent rate sizes its next block, ms.
const RATE_SPAN_MS: u64 = BUCKET_MS;

/// How long a block call that got no answer is sent again for, ms (its record in the store
/// lasts a window from its first run).
const ASK_AGAIN_FOR_MS: u64 = 30_000;

/// A block admitting now.
#[derive(Debug, Clone)]
struct Block {
    id: u64,
    bucket: u64,
    granted: Amounts,
    used: Amounts,
    /// When its second is surely over on the store's clock (ms, this instance's clock).
    until: u64,
    /// The tenant's window as the grant left it (the whole block counted).
    window: WindowUse,
}

/// What one request took from a block.
#[derive(Debug, Clone)]
struct Taken {
    tenant: String,
    block: u64,
    bucket: u64,
    amounts: Amounts,
}

/// A block call that got no answer, which the store may or may not have run: sent again under
/// its id, it answers as it ran (its grant is then given back) or runs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unanswered {
    pub(crate) tenant: String,
    pub(crate) call: u64,
    pub(crate) carried: Vec<TenantCorrection>,
    pub(crate) sent: u64,
}

/// Every tenant block this instance holds, and what it owes.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    open: HashMap<String, Block>,
    admitted: IdMap<u64, Taken>,
    owed: HashMap<String, BTreeMap<u64, [i64; 3]>>,
    recent: HashMap<String, VecDeque<(u64, Amounts)>>,
    refused_until: HashMap<String, u64>,
    unanswered: Vec<Unanswered>,
    blocks: u64,
}

impl Blocks {
    /// Takes `amounts` for request `id` of `tenant` from its open block, if it still admits
    /// (its second is not over) and has room: the second it counts in.
    pub(crate) fn take(
        &mut self,
        tenant: &str,
        id: u64,
        amounts: Amounts,
        now: u64,
    ) -> Option<u64> {
        let block = self.open.get(tenant)?;
        if block.until <= now {
            self.end(tenant);
            return None;
        }
        self.take_from(tenant, id, amounts, now)
    }

    /// Takes `amounts` for request `id` from the block just granted for it: the store admitted
    /// the request with the grant, in the grant's second. `None` when it does not fit.
    pub(crate) fn take_asked(
        &mut self,
        tenant: &str,
        id: u64,
        amounts: Amounts,
        now: u64,
    ) -> Option<u64> {
        self.take_from(tenant, id, amounts, now)
    }

    fn take_from(&mut self, tenant: &str, id: u64, amounts: Amounts, now: u64) -> Option<u64> {
        let block = self.open.get_mut(tenant)?;
        let room = Amounts {
            requests: block.granted.requests.saturating_sub(block.used.requests),
            tokens: block.granted.tokens.saturating_sub(block.used.tokens),
            micros: block.granted.micros.saturating_sub(block.used.micros),
        };
        if !amounts.fits_in(room) {
            return None;
        }
        block.used = block.used.plus(amounts);
        let taken = Taken {
            tenant: tenant.to_owned(),
            block: block.id,
            bucket: block.bucket,
            amounts,
        };
        let bucket = block.bucket;
        self.admitted.insert(id, taken);
        let recent = self.recent.entry(tenant.to_owned()).or_default();
        recent.push_back((now, amounts));
        while recent
            .front()
            .is_some_and(|(at, _)| at + RATE_SPAN_MS <= now)
        {
            recent.pop_front();
        }
        Some(bucket)
    }

    /// Opens the block the store granted `tenant` (its previous one ends): `amounts` counted in
    /// `bucket`, the store's clock reading `store_now` between this instance's `sent` and
    /// `now`. The store's clock ran no further than `store_now + (t - sent)` at this instance's
    /// time `t`, so the grant's second is surely not over before `until`.
    pub(crate) fn open(
        &mut self,
        tenant: &str,
        amounts: Amounts,
        bucket: u64,
        window: WindowUse,
        (store_now, sent): (u64, u64),
    ) {
        self.end(tenant);
        self.blocks += 1;
        let left = ((bucket + 1) * BUCKET_MS).saturating_sub(store_now);
        let block = Block {
            id: self.blocks,
            bucket,
            granted: amounts,
            used: Amounts::default(),
            until: sent.saturating_add(left),
            window,
        };
        self.open.insert(tenant.to_owned(), block);
        self.refused_until.remove(tenant);
    }

    /// The tenant's window as its open block's grant left it: what rate-limit headers report
    /// of a request admitted from it, with no call.
    pub(crate) fn window(&self, tenant: &str) -> Option<WindowUse> {
        self.open.get(tenant).map(|b| b.window)
    }

    /// Ends `tenant`'s open block: what it did not hand out (less what its settled requests
    /// used beyond their reservations) is owed back.
    pub(crate) fn end(&mut self, tenant: &str) {
        if let Some(b) = self.open.remove(tenant) {
            self.owe(tenant, b.bucket, b.used.less(b.granted));
        }
    }

    /// Ends every block whose second is over.
    pub(crate) fn end_expired(&mut self, now: u64) {
        let over: Vec<String> = self
            .open
            .iter()
            .filter(|(_, b)| b.until <= now)
            .map(|(t, _)| t.clone())
            .collect();
        for t in over {
            self.end(&t);
        }
    }

    /// Ends every block (the instance stops).
    pub(crate) fn end_all(&mut self) {
        let all: Vec<String> = self.open.keys().cloned().collect();
        for t in all {
            self.end(&t);
        }
    }

    /// Request `id` now holds `amounts` (its deployment is chosen: its own estimate and cost
    /// replace the largest of its candidates'). `false`: not taken from a block.
    pub(crate) fn resize(&mut self, id: u64, amounts: Amounts) -> bool {
        let Some(taken) = self.admitted.get_mut(&id) else {
            return false;
        };
        let delta = amounts.less(taken.amounts);
        taken.amounts = amounts;
        let taken = taken.clone();
        self.correct(&taken, delta);
        true
    }

    /// Settles request `id` with what it `used` (`None`: released, it used nothing). `false`:
    /// not taken from a block, or already finished.
    pub(crate) fn finish(&mut self, id: u64, used: Option<Amounts>) -> bool {
        let Some(taken) = self.admitted.remove(&id) else {
            return false;
        };
        let delta = used.unwrap_or_default().less(taken.amounts);
        self.correct(&taken, delta);
        true
    }

    /// Whether request `id` was taken from a block and is not finished.
    pub(crate) fn holds(&self, id: u64) -> bool {
        self.admitted.contains_key(&id)
    }

    /// Requests taken from blocks and not finished.
    pub(crate) fn in_flight(&self) -> usize {
        self.admitted.len()
    }

    /// Changes what `taken` counts by `delta`: in its block while that admits (what it hands
    /// out depends on it, and its end corrects the rest), else owed to its second.
    fn correct(&mut self, taken: &Taken, delta: [i64; 3]) {
        match self.open.get_mut(&taken.tenant) {
            Some(b) if b.id == taken.block => b.used = b.used.shifted(delta),
            _ => self.owe(&taken.tenant, taken.bucket, delta),
        }
    }

    fn owe(&mut self, tenant: &str, bucket: u64, delta: [i64; 3]) {
        if delta == [0; 3] {
            return;
        }
        let owed = self.owed.entry(tenant.to_owned()).or_default();
        let sum = owed.entry(bucket).or_insert([0; 3]);
        for (s, d) in sum.iter_mut().zip(delta) {
            *s += d;
        }
        if *sum == [0; 3] {
            owed.remove(&bucket);
            if owed.is_empty() {
                self.owed.remove(tenant);
            }
        }
    }

    /// The corrections owed for `tenant`, taken to be sent.
    pub(crate) fn take_owed(&mut self, tenant: &str) -> Vec<TenantCorrection> {
        self.owed
            .remove(tenant)
            .unwrap_or_default()
            .into_iter()
            .map(|(bucket, deltas)| TenantCorrection { bucket, deltas })
            .collect()
    }

    /// Corrections that were not sent (the store was not asked), owed again.
    pub(crate) fn owe_again(&mut self, tenant: &str, carried: &[TenantCorrection]) {
        for c in carried {
            self.owe(tenant, c.bucket, c.deltas);
        }
    }

    /// The tenants that owe corrections.
    pub(crate) fn owing(&self) -> Vec<String> {
        self.owed.keys().cloned().collect()
    }

    /// The block to ask for a request of `need`: the tenant's rate over the last second on
    /// this instance, plus the request; at most 1/(2 × `instances`) of what is left.
    pub(crate) fn ask(&self, tenant: &str, need: Amounts, instances: u64, now: u64) -> TenantAsk {
        let recent = self
            .recent
            .get(tenant)
            .into_iter()
            .flatten()
            .filter(|(at, _)| at + RATE_SPAN_MS > now)
            .fold(Amounts::default(), |sum, (_, a)| sum.plus(*a));
        TenantAsk {
            want: recent.plus(need),
            fewest: need,
            parts: 2 * instances.max(1),
        }
    }

    /// The store refused `tenant` a block: it is admitted exactly for a while.
    pub(crate) fn refused(&mut self, tenant: &str, now: u64) {
        self.refused_until
            .insert(tenant.to_owned(), now + EXACT_AFTER_REFUSAL_MS);
    }

    /// Whether `tenant` is admitted exactly for now, after a refusal.
    pub(crate) fn exact_for_now(&self, tenant: &str, now: u64) -> bool {
        self.refused_until.get(tenant).is_some_and(|&t| t > now)
    }

    /// Keeps a block call that got no answer, to send again.
    pub(crate) fn unanswered(&mut self, u: Unanswered) {
        self.unanswered.push(u);
    }

    /// The calls to send again; those older than [`ASK_AGAIN_FOR_MS`] are given up (what they
    /// may have counted stays counted until it leaves the windows).
    pub(crate) fn take_unanswered(&mut self, now: u64) -> Vec<Unanswered> {
        let mut calls = std::mem::take(&mut self.unanswered);
        calls.retain(|u| now.saturating_sub(u.sent) <= ASK_AGAIN_FOR_MS);
        calls
    }

    /// A call sent again answered: what it granted (if it did) is owed back whole.
    pub(crate) fn answered_late(&mut self, tenant: &str, granted: Option<(Amounts, u64)>) {
        if let Some((amounts, bucket)) = granted {
            self.owe(tenant, bucket, Amounts::default().less(amounts));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
