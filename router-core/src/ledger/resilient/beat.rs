use super::*;

/// Heartbeats on the clock's multiples of `ledger.heartbeat_ms`, so that every instance reads
/// the windows at about the same moment: what one instance admitted after its last heartbeat is
/// then in no other's reading either, and each adds its own (see [`Own`]).
pub(super) async fn beat_forever(inner: Weak<Inner>) {
    // When this task last beat (ms).
    let mut last = 0;
    loop {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let now = inner.now();
        let (rejoining, send_by) = {
            let st = inner.lock();
            (st.rejoining(), st.leases.send_by())
        };
        let wait = next_wake_in(inner.settings.heartbeat, rejoining, now, send_by, last);
        inner.beat_due.store(now + wait, Ordering::Relaxed);
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(wait)) => {
                last = inner.now();
                inner.tick().await;
            }
            // A move owed before then: wait again, for it.
            () = inner.moved.notified() => {}
        }
    }
}

/// How long until the heartbeat task sends a beat, ms, at `now` (ms): at the next beat, or by
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

impl Inner {
    /// One heartbeat: register, learn the instance count and epoch. When the store answers
    /// after an outage, or is not in the epoch this instance knows (it lost its keys, or another
    /// instance restored them), restore first, from what was seen before, and read again: a
    /// reading of emptied windows must not replace the last good one.
    pub(super) async fn tick(&self) {
        let _one = self.beating.lock().await;
        for _ in 0..2 {
            let (tenants, base, me) = {
                let mut st = self.lock();
                let tenants = st.recent_tenants(self.now());
                let keep: HashSet<&String> = tenants.iter().collect();
                st.own.tenants.retain(|name, _| keep.contains(name));
                let me = BeatAs {
                    away: matches!(&st.admitting, Admitting::Local(l) if l.closing.is_none()),
                    // Totals read while local, or while the windows are being rebuilt, miss
                    // what is not written back yet.
                    reading: st.mode() != Mode::Local && st.awaiting.is_none(),
                };
                (tenants, st.own.clone(), me)
            };
            let ttl = 3 * self.settings.heartbeat.as_millis() as u64;
            // What the leased blocks owe goes with the beat while the store is shared: no call
            // of its own. A beat that got no answer is sent again with the same corrections
            // under the same number (applied once); one the store was in another epoch for
            // gives them back to the leases.
            let carried = {
                let mut st = self.lock();
                let shared = st.mode() == Mode::Shared && st.awaiting.is_none() && st.epoch != 0;
                match st.carrying.take() {
                    Some(carried) => Some(carried),
                    None if shared => {
                        let owed = st.leases.drain(self.now());
                        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
                        (!owed.is_empty()).then_some((seq, owed))
                    }
                    None => None,
                }
            };
            let mut beating = Beating {
                inner: self,
                carried,
            };
            let corrections = beating
                .carried
                .as_ref()
                .map(|(seq, owed)| (*seq, owed.as_slice()));
            let sent = self.now();
            let beat = || {
                let beat = self
                    .shared
                    .heartbeat(&self.instance, ttl, &tenants, corrections, me);
                self.timed(beat.boxed())
            };
            // This instance's own requests in flight as the beat goes: those that end later are
            // still in the store's count (their settlement is sent after they leave this count),
            // and so are those admitted whose answer is not in yet.
            let mine = || {
                self.lock()
                    .in_flight_by_scope(self.shared.table(), &tenants)
            };
            let mut own = mine();
            let mut answer = beat().await;
            // As for an admission: one slow answer is not an outage. The beat goes once more
            // with the same corrections under the same number (applied once).
            if self.settings.on_error == OnError::Local && answer.as_ref().is_err_and(slow) {
                own = mine();
                answer = beat().await;
            }
            let (own_in_flight, own_tenant_in_flight) = own;
            let carried = beating.carried.take();
            let (beat, applied) = match answer {
                Ok(answer) => answer,
                Err(e) => {
                    tracing::debug!(error = %e, "ledger heartbeat failed");
                    let mut st = self.lock();
                    st.carrying = carried;
                    // Other instances may be admitting on their own now: this one does too,
                    // so that it waits for them to write it back before it admits through
                    // the store again.
                    let local = self.settings.on_error == OnError::Local;
                    if st.mode() == Mode::Local {
                        st.away_again();
                    } else if local && st.mode() == Mode::Shared && st.seen.is_some() {
                        let n = st.enter_local(self, None);
                        tracing::warn!(
                            error = %e,
                            instances = n,
                            "ledger mode: local (the heartbeat got no answer)"
                        );
                    }
                    return;
                }
            };
            if !applied && let Some((_, owed)) = carried {
                self.owe_again(owed);
            }
            let current = {
                let mut st = self.lock();
                let current = st.mode() != Mode::Local
                    && st.awaiting.is_none()
                    && beat.epoch != 0
                    && beat.epoch == st.epoch;
                if current {
                    self.beat_saw_rooms(&mut st, &beat, sent);
                }
                // Recorded as its last reading in the store: what local mode starts from.
                if beat.read != 0 {
                    st.reads.record(beat.read, beat.oldest, base);
                    st.seen = Some(Beat {
                        own_in_flight,
                        own_tenant_in_flight,
                        ..beat
                    });
                }
                current
            };
            if current {
                self.set_mode_shared("the shared ledger answers again");
                self.ask_unanswered_again().await;
                return;
            }
            if let Err(e) = self.restore().await {
                tracing::debug!(error = %e, "ledger restore failed");
                return;
            }
        }
    }

    /// What a heartbeat sent at `sent` read of every leased deployment's room: a request that
    /// does not fit a full deployment skips it without a call, and one that fits asks as soon
    /// as room comes back, without waiting for an earlier refusal's reading to expire. A
    /// deployment another instance put a cooldown on ends this instance's block there: its
    /// requests go to the store, which refuses them until the cooldown is over.
    pub(super) fn beat_saw_rooms(&self, st: &mut State, beat: &Beat, sent: u64) {
        let table = self.shared.table();
        for (i, _) in self.lease.iter().enumerate().filter(|(_, l)| l.is_some()) {
            let d = DeploymentId(i);
            let Some(scopes) = table.of(d) else {
                continue;
            };
            let cooling = beat.cooling.get(scopes[0]).copied().unwrap_or(0);
            if cooling > 0 {
                st.leases.end(d);
                st.leases.saw_cooldown(d, cooling, sent);
                continue;
            }
            let totals = |s: usize| beat.scopes.get(s).copied().unwrap_or_default();
            let room = Room::left(scopes.iter().map(|&s| (table.limits(s), totals(s))));
            st.leases.beat_saw_room(d, room, sent);
        }
    }

    pub(super) fn set_mode_shared(&self, why: &str) {
        let mut st = self.lock();
        if st.mode() != Mode::Shared {
            let since = Duration::from_millis(self.now().saturating_sub(st.since));
            tracing::warn!(
                from = st.mode().as_str(),
                after = ?since,
                "ledger mode: shared ({why})"
            );
            st.admitting = Admitting::Shared;
            st.since = self.now();
            st.changes += 1;
        }
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
