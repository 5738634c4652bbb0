//! Leased blocks: admitting from them, asking the store for them (for a request, or ahead),
//! sending back what they owe, and ending them at close.

use super::*;
use crate::ledger::redis::lease::Grant;

/// Who a block is asked for ([`Inner::ask_block`]).
#[derive(Clone, Copy)]
pub(super) enum BlockFor<'a> {
    /// A request (its need, the candidate's rank, all its candidates), admitted from the block
    /// the store grants.
    For(&'a Need, usize, &'a [DeploymentId]),
    /// The requests to come ([`Inner::refill`]).
    Ahead,
}

/// What became of a block asked for.
pub(super) enum Asked {
    /// Granted, and the request it was asked for admitted from it.
    Taken(Reservation),
    /// Granted (the request it was asked for, if any, did not fit it).
    Granted,
    /// Not granted: no room, a cooldown, or (asked ahead) the store is not admitting.
    Refused,
    /// The instance no longer admits through the store, and decided the request there.
    Decided(Result<Admission, LedgerError>),
}

/// How a granted block is held: whether it leases tokens, for how long (s), when its call was
/// sent (ms), and how long before its grant's second leaves the windows its moves go (ms).
pub(super) struct Terms {
    pub(super) tokens: bool,
    pub(super) secs: u64,
    pub(super) sent: u64,
    pub(super) margin: u64,
}

impl Machine {
    /// The store granted `grant` of `d`, answered at `now` with `room` left: the block opens,
    /// and what it counted is this instance's own. What the block admits after the grant's
    /// second must reach the store before that second leaves the windows (see
    /// `Granted::send_by`): on this instance's clock, less a call's time; the block stops
    /// admitting by then.
    pub(super) fn block_granted(
        &mut self,
        d: DeploymentId,
        grant: &Grant,
        room: Room,
        terms: Terms,
        now: u64,
    ) {
        let leaves = expiry_of(grant.bucket).saturating_sub(grant.now);
        let send_by = now + leaves.saturating_sub(terms.margin);
        let granted = Granted {
            requests: grant.requests,
            tokens: terms.tokens.then_some(grant.tokens),
            bucket: grant.bucket,
            store_now: grant.now,
            sent: terms.sent,
            now,
            send_by,
        };
        let ends = (now + terms.secs * 1000).min(send_by).max(now + 1);
        self.leases.open(d, granted, ends);
        self.leases.saw_room(d, room, now);
        let admitted = Admitted {
            deployment: d,
            bucket: grant.bucket,
            counts: Counts::new(grant.requests, grant.tokens, grant.tokens, grant.tokens),
            tenant: None,
        };
        self.remember(&admitted, now);
    }
}

/// How close to running out (ms before it stops admitting) a `lease: auto` block has its
/// successor asked for ahead ([`Inner::refill`]).
pub(super) const REFILL_AHEAD_MS: u64 = 2_000;

impl Inner {
    /// Takes `need` on candidate `rank` (`d`) from its open block.
    pub(super) fn take_leased(
        &self,
        d: DeploymentId,
        need: &Need,
        rank: usize,
    ) -> Option<Reservation> {
        let mut st = self.lock();
        let now = self.now();
        let r = st.leases.take(d, need, rank, now);
        if let Some(r) = &r
            && st.leases.granted_in(d) != Some(r.bucket)
        {
            // Moved to its own second: should the store lose its keys, it is written back
            // there, its grant's second keeping it too (an over-count, for a minute at most).
            st.keep_own(&Admitted::request(r), now);
        }
        self.wake_for_moves(&st);
        r
    }

    /// Admits `need` from a leased block, walking the candidates in order while each leases:
    /// from its open block, or from a new one (one call). At most one block is asked for per
    /// admission: after that call, later candidates are tried from their open blocks only, so
    /// a request waits for two round trips at most before its provider call (the refused block
    /// and the shared admission), however many candidates are full. `None`: a candidate that
    /// does not lease was reached, or none had room: the shared store decides.
    pub(super) async fn admit_leased(
        &self,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Option<Result<Admission, LedgerError>> {
        // A tenant's limits and budgets are checked in the shared store, request by request;
        // so is a batch request's share of the limits (a block is sized from the whole limits,
        // and would let batch requests take the room kept for interactive ones).
        if need.tenant.is_some() || need.share_percent < 100 {
            return None;
        }
        let mut asked_once = false;
        for (rank, &d) in candidates.iter().enumerate() {
            let spec = self.lease.get(d.0).copied().flatten()?;
            if let Some(r) = self.take_leased(d, need, rank) {
                return Some(Ok(Admission::Granted(r)));
            }
            let lacks_room = |this: &Self| {
                let tokens = need.tokens_on(rank);
                this.lock().leases.lacks_room(d, tokens, this.now())
            };
            if asked_once || lacks_room(self) {
                continue;
            }
            let _one = self.leasing[d.0].lock().await;
            if let Some(r) = self.take_leased(d, need, rank) {
                return Some(Ok(Admission::Granted(r)));
            }
            // A call made while this request waited (a block asked for ahead) may have read the
            // room since.
            if lacks_room(self) {
                continue;
            }
            asked_once = true;
            let asking = BlockFor::For(need, rank, candidates);
            match self.ask_block(d, spec, need.tokens_on(rank), asking).await {
                Ok(Asked::Taken(r)) => return Some(Ok(Admission::Granted(r))),
                Ok(Asked::Decided(decided)) => return Some(decided),
                Ok(Asked::Granted | Asked::Refused) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// Asks the store for a new block of `d` (one call; the caller holds `d`'s `leasing` lock),
    /// sized for requests of `tokens`, carrying what `d` owes. With [`BlockFor::For`], `d`'s
    /// open block ends first, so that the call also hands back what it did not use, and the
    /// request is admitted from the new block as the store granted it. With
    /// [`BlockFor::Ahead`] (see [`Inner::refill`]) the open block ends first only if it has no
    /// request left; else it admits on until the grant replaces it, and the new block waits
    /// for the requests to come.
    pub(super) async fn ask_block(
        &self,
        d: DeploymentId,
        spec: Lease,
        tokens: u64,
        asking: BlockFor<'_>,
    ) -> Result<Asked, LedgerError> {
        let (size, secs) = self.lease_size(d, spec, tokens);
        let mut call = match self.block_call(d, size, asking) {
            Ok(call) => call,
            Err(asked) => return Ok(asked),
        };
        let sent = self.now();
        let (owed, id) = call.carried();
        let lease = self.shared.lease(d, size, owed, id);
        let asked = self.timed(lease.boxed()).await;
        call.answered(asked.as_ref().err());
        let asked = asked?;
        let now = self.now();
        let mut st = self.lock();
        match asked {
            Leased::Granted(grant, room) => {
                let terms = Terms {
                    tokens: size.want.1 != 0,
                    secs,
                    sent,
                    margin: self.move_margin(),
                };
                st.block_granted(d, &grant, room, terms, now);
                call.done(&mut st, Some(d));
                let taken = match asking {
                    BlockFor::For(need, rank, _) => st.leases.take_asked(d, need, rank, now),
                    BlockFor::Ahead => None,
                };
                self.wake_for_moves(&st);
                Ok(taken.map_or(Asked::Granted, Asked::Taken))
            }
            Leased::Refused(room, cools) => {
                if cools == 0 {
                    // Not even one request fits: for a while, only a request that fits what
                    // was left (with what this instance owes back since) asks again.
                    st.leases.saw_room(d, room, now);
                } else {
                    st.leases.saw_cooldown(d, cools, now);
                }
                call.done(&mut st, None);
                Ok(Asked::Refused)
            }
        }
    }

    /// Opens the call for a block of `d` of `size`, asked for `asking`: the corrections it
    /// carries, and the call registered (see [`Out`]). `Err`: not asked, and why. A block
    /// asked for ahead leaves the open one admitting (smaller requests, or until it ends) while
    /// the call is out, unless no request is left in it: the grant ends it (`Leases::open`),
    /// and its next call or heartbeat hands back the rest.
    fn block_call(
        &self,
        d: DeploymentId,
        size: Ask,
        asking: BlockFor<'_>,
    ) -> Result<Out<'_>, Asked> {
        let mut st = self.lock();
        match asking {
            BlockFor::For(need, _, candidates) => {
                if let Some(decided) = self.routed(&mut st, need, candidates) {
                    return Err(Asked::Decided(decided));
                }
            }
            BlockFor::Ahead if !st.admits_shared() => return Err(Asked::Refused),
            BlockFor::Ahead => {}
        }
        if matches!(asking, BlockFor::For(..)) || st.leases.used_up(d) {
            st.leases.end(d);
        }
        let owed = st.leases.take_owed(d);
        let carried = Carried {
            d,
            call: fastrand::u64(..),
            owed,
        };
        let calling = Calling::block(d, size.want);
        Ok(Out::register(self, &mut st, calling, Some(carried)))
    }

    /// Asks for `d`'s next block ahead, as a request just took from its open block one that is
    /// about to run out (`lease: auto` only: see [`ResilientStore::refill_soon`]), so that the
    /// next request finds a block here rather than waiting for the call. Nothing when `d` was last
    /// seen without room for a request of the recent mean size, when a request asked
    /// meanwhile, or when the leases were settled since the admission that asked for it
    /// (`closes` then).
    pub(super) async fn refill(&self, d: DeploymentId, closes: u64) {
        let _one = self.leasing[d.0].lock().await;
        if self.closes.load(Ordering::Acquire) != closes {
            return;
        }
        let tokens = {
            let mut st = self.lock();
            let now = self.now();
            let tokens = st.leases.rate(now).1.max(1);
            if !st.leases.runs_out(d, tokens, now, REFILL_AHEAD_MS)
                || st.leases.lacks_room(d, tokens, now)
            {
                return;
            }
            tokens
        };
        if let Err(e) = self
            .ask_block(d, Lease::Auto, tokens, BlockFor::Ahead)
            .await
        {
            tracing::debug!(error = %e, "ledger: a block asked for ahead was not granted");
        }
    }

    /// How much of `d` to lease for a request of `tokens` on it, and for how long (s): see
    /// [`Leases::size`].
    pub(super) fn lease_size(&self, d: DeploymentId, spec: Lease, tokens: u64) -> (Ask, u64) {
        let table = self.shared.table();
        let tokens_limited = table.of(d).unwrap_or_default().iter().any(|&s| {
            let l = table.limits(s);
            l.tpm.or(l.itpm).or(l.otpm).is_some()
        });
        let now = self.now();
        let mut st = self.lock();
        let instances = st.seen.as_ref().map_or(1, |b| b.instances).max(1);
        st.leases.size(spec, tokens, tokens_limited, instances, now)
    }

    /// Keeps corrections that could not be sent (or may not have been applied) for later.
    pub(super) fn owe_again(&self, owed: Vec<Owed>) {
        let mut st = self.lock();
        for o in owed {
            st.leases.owe_again(o);
        }
    }

    /// Sends again, under the same ids, the block calls that got no answer (see
    /// [`Unanswered`]), asking for no block: each answers as its first run did, or runs now.
    /// What they granted goes back with the next heartbeat. Called when a heartbeat found the
    /// store answering, in the epoch this instance knows. The calls go together, so the next
    /// beat waits for one call's time at most; those that fail, or that are dropped unanswered
    /// with this future, are kept for the next.
    pub(super) async fn ask_unanswered_again(&self) {
        let calls = self.lock().leases.take_unanswered(self.now());
        if calls.is_empty() {
            return;
        }
        let asks = calls.iter().map(|u| {
            let ask = self
                .shared
                .lease(u.deployment, Ask::NOTHING, &u.carried, u.call);
            self.timed(ask.boxed())
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut st = self.lock();
        for (u, asked) in calls.into_iter().zip(answers) {
            match asked {
                Ok(Leased::Granted(grant, _)) => st
                    .leases
                    .answered_late(u, Some((grant.bucket, grant.requests, grant.tokens))),
                Ok(Leased::Refused(..)) => st.leases.answered_late(u, None),
                // Not run in this epoch, nor will it be: what it carried stays owed as it is.
                Err(LedgerError::Lost { .. }) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "ledger: a block call asked again got no answer");
                    st.leases.still_unanswered(u);
                }
            }
        }
    }

    /// Sends again, under its number, a beat whose corrections got no answer (see
    /// [`Machine::carrying`]): applied once, whether or not the first was.
    pub(super) async fn beat_again_if_unanswered(&self) {
        if self.lock().carrying.is_some() {
            self.tick().await;
        }
    }

    /// Ends every leased block and sends what they owe the shared windows (at close), once the
    /// blocks asked for ahead and on their way have landed (those not yet asked for are not):
    /// with a heartbeat, which applies them all together and once; what it cannot carry (the
    /// store is away, or in another epoch) with one call per deployment and bucket. Corrections whose
    /// beat got no answer twice are not sent on their own: that beat may have been applied.
    pub(super) async fn settle_leases(&self) {
        // No block asked for ahead so far is asked for from now on; one on its way lands first.
        self.closes.fetch_add(1, Ordering::AcqRel);
        for one in &self.leasing {
            drop(one.lock().await);
        }
        // Corrections a beat carried without an answer go again under their number first.
        self.beat_again_if_unanswered().await;
        self.lock().leases.end_all();
        self.tick().await;
        // The beat that carried the ended blocks got no answer: once more. (A call of their own
        // could apply them a second time, should that beat have been run.)
        self.beat_again_if_unanswered().await;
        let owed = {
            let mut st = self.lock();
            let now = self.now();
            st.leases.drain(now)
        };
        // In `drain`'s order (a move's addition before its subtraction, a report last on its
        // deployment); after a failure, the rest is kept rather than sent without it.
        let mut rest = owed.into_iter();
        while let Some(o) = rest.next() {
            let unlease =
                self.shared
                    .unlease(o.deployment, o.bucket, o.deltas, o.observed.as_ref());
            if let Err(e) = self.timed(unlease.boxed()).await {
                tracing::debug!(error = %e, "ledger: a lease correction failed; kept for later");
                let mut st = self.lock();
                st.leases.owe_failed(o, &e);
                for o in rest {
                    st.leases.owe_again(o);
                }
                return;
            }
        }
    }
}
