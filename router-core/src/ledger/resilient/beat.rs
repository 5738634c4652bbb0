//! The heartbeat: the driver's timer, one beat's plan, sending and answer.

use super::*;

/// How long until the driver sends a beat, ms, at `now` (ms): at the next beat, or by
/// `send_by` (ms) if moves are owed by then. A deadline already past waits for a tenth of a
/// heartbeat (at most a second) after the `last` beat (ms): while the store does not answer, or
/// the instance waits to rejoin, beats do not carry the moves, and would go back to back.
pub(super) fn next_wake_in(
    heartbeat: Duration,
    rejoining: bool,
    now: u64,
    send_by: Option<u64>,
    last: u64,
) -> u64 {
    let beat = next_beat_in(heartbeat, rejoining, now);
    let spaced = last + (heartbeat.as_millis() as u64 / 10).clamp(1, 1_000);
    let due = |t: u64| if t > now { t } else { t.max(spaced) };
    send_by.map_or(beat, |t| beat.min(due(t).saturating_sub(now)))
}

/// How long until the next beat, ms, at `now` (ms): the next multiple of the heartbeat, or of a
/// tenth of it while the instance waits for the others to rejoin (it admits nothing until they
/// are back).
pub(super) fn next_beat_in(heartbeat: Duration, rejoining: bool, now: u64) -> u64 {
    let beat = heartbeat.as_millis().max(1) as u64;
    let every = if rejoining { beat / 10 } else { beat }.max(1);
    every - now % every
}

/// What one beat sends: the tenants whose windows it reads, what this instance had admitted
/// through the store as it went, how it stands, and the lease corrections it carries with
/// their number.
pub(super) struct BeatPlan {
    tenants: Vec<String>,
    base: Own,
    me: BeatAs,
    carried: Option<Numbered<Vec<Owed>>>,
}

impl Machine {
    /// The next beat, at `now`. What the leased blocks owe goes with it while the store is
    /// shared: no call of its own. A beat that got no answer is sent again with the same
    /// corrections under the same number (applied once); one the store was in another epoch
    /// for gives them back to the leases.
    pub(super) fn plan_beat(&mut self, now: u64) -> BeatPlan {
        let tenants = self.recent_tenants(now);
        let keep: HashSet<&String> = tenants.iter().collect();
        self.own.tenants.retain(|name, _| keep.contains(name));
        let me = BeatAs {
            away: matches!(&self.admitting, Admitting::Local(l) if l.closing.is_none()),
            // Totals read while local, or while the windows are being rebuilt, miss what is
            // not written back yet.
            reading: self.reads_whole(),
        };
        let carried = match self.carrying.take() {
            Some(carried) => Some(carried),
            None if self.admits_shared() && self.epoch != 0 => {
                let owed = self.leases.drain(now);
                let seq = self.next_seq();
                (!owed.is_empty()).then_some(Numbered { seq, sent: owed })
            }
            None => None,
        };
        BeatPlan {
            tenants,
            base: self.own.clone(),
            me,
            carried,
        }
    }

    /// A beat sent at `sent` under `plan` was answered with `beat`; `own`: this instance's
    /// requests in flight as it went, per scope and per tenant. Returns whether the store is
    /// in the epoch this instance knows and holds all it admitted: it admits through it.
    pub(super) fn beat_answered(
        &mut self,
        beat: Beat,
        base: Own,
        own: InFlight,
        sent: u64,
    ) -> bool {
        let current = self.reads_whole() && beat.epoch != 0 && beat.epoch == self.epoch;
        if current {
            self.saw_rooms(&beat, sent);
        }
        // Recorded as its last reading in the store: what local mode starts from.
        if beat.read != 0 {
            self.reads.record(beat.read, beat.oldest, base);
            self.seen = Some(Beat {
                own_in_flight: own.scopes,
                own_tenant_in_flight: own.tenants,
                ..beat
            });
        }
        current
    }

    /// What a heartbeat sent at `sent` read of every leased deployment's room: a request that
    /// does not fit a full deployment skips it without a call, and one that fits asks as soon
    /// as room comes back, without waiting for an earlier refusal's reading to expire. A
    /// deployment another instance put a cooldown on ends this instance's block there: its
    /// requests go to the store, which refuses them until the cooldown is over.
    fn saw_rooms(&mut self, beat: &Beat, sent: u64) {
        for &d in &self.leased {
            let Some(scopes) = self.table.of(d) else {
                continue;
            };
            let cooling = beat.cooling.get(scopes[0]).copied().unwrap_or(0);
            if cooling > 0 {
                self.leases.end(d);
                self.leases.saw_cooldown(d, cooling, sent);
                continue;
            }
            let totals = |s: usize| beat.scopes.get(s).copied().unwrap_or_default();
            let limits = scopes.iter().map(|&s| (self.table.limits(s), totals(s)));
            self.leases.beat_saw_room(d, Room::left(limits), sent);
        }
    }
}

impl Inner {
    /// One heartbeat: register, learn the instance count and epoch. When the store answers
    /// after an outage, or is not in the epoch this instance knows (it lost its keys, or another
    /// instance restored them), restore first, from what was seen before, and read again: a
    /// reading of emptied windows must not replace the last good one.
    pub(super) async fn tick(&self) {
        for _ in 0..2 {
            match self.beat_once().await {
                None => return,
                Some(true) => {
                    self.lock()
                        .go_shared(self.now(), "the shared ledger answers again");
                    self.ask_unanswered_again().await;
                    return;
                }
                Some(false) => {}
            }
            if let Err(e) = self.restore().await {
                tracing::debug!(error = %e, "ledger restore failed");
                return;
            }
        }
    }

    /// Sends one beat and takes in its answer: whether the store is current (see
    /// [`Machine::beat_answered`]); `None` when it got no answer.
    async fn beat_once(&self) -> Option<bool> {
        let plan = self.lock().plan_beat(self.now());
        let carried = plan.carried;
        let sent = self.now();
        let (answer, own) = self
            .send_beat(&plan.tenants, plan.me, carried.as_ref())
            .await;
        let (beat, applied) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                tracing::debug!(error = %e, "ledger heartbeat failed");
                let mut st = self.lock();
                st.carrying = carried;
                st.beat_failed(&e, self.now());
                return None;
            }
        };
        if !applied && let Some(carried) = carried {
            self.owe_again(carried.sent);
        }
        let current = self.lock().beat_answered(beat, plan.base, own, sent);
        Some(current)
    }

    /// Sends a beat, and once more after a slow answer (as for an admission, one slow answer
    /// is not an outage: the same corrections go under the same number, applied once). With
    /// the answer, this instance's own requests in flight as the beat went: those that end
    /// later are still in the store's count (their settlement is sent after they leave this
    /// count), and so are those admitted whose answer is not in yet.
    async fn send_beat(
        &self,
        tenants: &[String],
        me: BeatAs,
        carried: Option<&Numbered<Vec<Owed>>>,
    ) -> (Result<(Beat, bool), LedgerError>, InFlight) {
        let ttl = 3 * self.settings.heartbeat.as_millis() as u64;
        let corrections = carried.map(|c| (c.seq, c.sent.as_slice()));
        let beat = || {
            let beat = self
                .shared
                .heartbeat(&self.instance, ttl, tenants, corrections, me);
            self.timed(beat.boxed())
        };
        let mine = || self.lock().in_flight_by_scope(tenants);
        let mut own = mine();
        let mut answer = beat().await;
        if self.settings.on_error == OnError::Local && answer.as_ref().is_err_and(slow) {
            own = mine();
            answer = beat().await;
        }
        (answer, own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_owed_before_the_next_beat_brings_the_beat_forward() {
        let hour = Duration::from_secs(3600);
        assert_eq!(next_wake_in(hour, false, 1_000, None, 0), 3_599_000);
        assert_eq!(next_wake_in(hour, false, 1_000, Some(50_000), 0), 49_000);
        assert_eq!(
            next_wake_in(hour, false, 1_000, Some(500), 0),
            0,
            "late: at once"
        );
        let two = Duration::from_secs(2);
        assert_eq!(next_wake_in(two, false, 1_000, Some(50_000), 0), 1_000);
        // Late, but a beat went 50 ms ago (it did not carry the moves: the store did not
        // answer): the next a tenth of a heartbeat after it, not back to back.
        assert_eq!(next_wake_in(two, false, 10_050, Some(9_000), 10_000), 150);
        assert_eq!(next_wake_in(two, false, 10_300, Some(9_000), 10_000), 0);
    }

    #[test]
    fn beats_fall_on_the_heartbeats_multiples_and_ten_times_as_often_while_rejoining() {
        let beat = Duration::from_millis(2_000);
        // The next multiple of 2 s, whenever the last beat was: every instance beats together.
        assert_eq!(next_beat_in(beat, false, 10_000), 2_000);
        assert_eq!(next_beat_in(beat, false, 10_300), 1_700);
        // Back from an outage and waiting for the others: every 200 ms, on the same grid.
        assert_eq!(next_beat_in(beat, true, 10_300), 100);
        assert_eq!(next_beat_in(beat, true, 10_400), 200);
        // Never a zero wait, however short the heartbeat.
        assert_eq!(next_beat_in(Duration::from_millis(3), true, 7), 1);
        assert_eq!(next_beat_in(Duration::ZERO, false, 7), 1);
    }
}
