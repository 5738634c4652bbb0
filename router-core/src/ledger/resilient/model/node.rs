//! One instance: a [`Machine`] and what the driver (`Inner`) does with it, one call at a time
//! against the simulated [`Store`]. Each function names the driver's it follows, and must
//! change with it; the driver's own bookkeeping (`Called`) is written out here, as it needs an
//! `Inner`.

use super::super::*;
use super::D;
use super::store::Store;

/// An admission sent to the store, whose answer the instance has not taken in yet.
pub(super) struct Out {
    need: Need,
    call: u64,
    answer: Result<Admission, LedgerError>,
}

pub(super) struct Node {
    pub(super) id: usize,
    pub(super) m: Machine,
    /// Admissions sent and not answered yet.
    pub(super) out: Vec<Out>,
    /// When its driver wakes next to beat (ms).
    pub(super) due: u64,
    /// How late its driver wakes after the time it asked for (ms): instances read the
    /// windows at slightly different moments.
    lag: u64,
}

impl Node {
    /// Instance `id`, started at `now`, its driver waking `lag` ms late.
    pub(super) fn new(
        id: usize,
        table: ScopeTable,
        settings: LedgerSettings,
        now: u64,
        lag: u64,
    ) -> Self {
        let m = Machine::new(table, Vec::new(), settings, now);
        let due = now + m.poll_timeout(now, 0) + lag;
        Self {
            id,
            m,
            out: Vec::new(),
            due,
            lag,
        }
    }

    /// `Inner::admit` up to the store's answer: decided here, or sent (`None`).
    pub(super) fn send(
        &mut self,
        store: &mut Store,
        need: Need,
        now: u64,
    ) -> Option<Result<Admission, LedgerError>> {
        if let Some(decided) = self.routed(&need, now) {
            return Some(decided);
        }
        let call = self.register(&need, now);
        let answer = store.admit(&need, now);
        self.out.push(Out { need, call, answer });
        None
    }

    /// Whether the last admission sent timed out.
    pub(super) fn timed_out(&self) -> bool {
        self.out.last().is_some_and(|o| o.answer.is_err())
    }

    /// `Inner::routed`.
    fn routed(&mut self, need: &Need, now: u64) -> Option<Result<Admission, LedgerError>> {
        match self.m.route(need, &[D], now) {
            Route::Store => None,
            Route::Here(decided) => Some(decided),
            Route::Rebuilding => Some(Err(LedgerError::Lost {
                url: "redis://model".to_owned(),
            })),
        }
    }

    /// `Inner::register`.
    fn register(&mut self, need: &Need, now: u64) -> u64 {
        let call = self.m.next_call;
        self.m.next_call += 1;
        let calling = Calling::request(need, &[D], now);
        self.m.calling.insert(call, calling);
        call
    }

    /// `Called::done`.
    fn done(&mut self, call: u64, granted: Option<DeploymentId>) {
        if let Some(c) = self.m.calling.remove(&call)
            && let Admitting::Local(l) = &mut self.m.admitting
        {
            c.unhold(&l.table, &mut l.cells, granted);
        }
    }

    /// The rest of `Inner::admit` for the call out at `k`: sent again after a slow answer
    /// (`again_if_slow`, under `local`), then taken in (`conclude`).
    pub(super) fn answer(
        &mut self,
        store: &mut Store,
        k: usize,
        now: u64,
    ) -> Result<Admission, LedgerError> {
        let Out { need, call, answer } = self.out.remove(k);
        let mut call = call;
        let mut result = answer;
        let retried =
            self.m.settings.on_error == OnError::Local && result.as_ref().is_err_and(slow);
        if retried {
            // `admit_shared` answers the first call before the second goes anywhere.
            self.done(call, None);
            if let Some(decided) = self.routed(&need, now) {
                self.m.unsure(&need, &[D], now);
                return decided;
            }
            call = self.register(&need, now);
            result = store.admit(&need, now);
        }
        self.conclude(&need, result, &[call], retried, now)
    }

    /// `Inner::conclude`.
    fn conclude(
        &mut self,
        need: &Need,
        result: Result<Admission, LedgerError>,
        calls: &[u64],
        retried: bool,
        now: u64,
    ) -> Result<Admission, LedgerError> {
        let granted = match &result {
            Ok(Admission::Granted(r)) => Some(r.deployment),
            _ => None,
        };
        for &call in calls {
            self.done(call, granted);
        }
        self.m.take_answer(need, &[D], result, retried, now)
    }

    /// `Inner::finish`: settles (`actual`) or releases (`None`) `r` where it was admitted.
    pub(super) fn finish(
        &mut self,
        store: &mut Store,
        r: &Reservation,
        actual: Option<ActualUsage>,
        now: u64,
    ) {
        if let Ok(None) = self.m.finish_here(r, actual, now) {
            // A failure leaves the slot and the estimate in the store: the safe side.
            let _ = store.finish(r, actual, now);
        }
    }

    /// `beat_forever`'s wake at `now`: one `Inner::tick`, then the next wake.
    pub(super) fn wake(&mut self, store: &mut Store, now: u64) {
        self.tick(store, now);
        self.due = now + self.m.poll_timeout(now, now) + self.lag;
    }

    /// `Inner::tick`.
    fn tick(&mut self, store: &mut Store, now: u64) {
        for _ in 0..2 {
            match self.beat_once(store, now) {
                None => return,
                Some(true) => {
                    self.m.go_shared(now, "the shared ledger answers again");
                    return;
                }
                Some(false) => {}
            }
            if self.restore(store, now).is_err() {
                return;
            }
        }
    }

    /// `Inner::beat_once` and `send_beat` (no leased blocks: nothing is carried). What the beat
    /// says of the instance is worked out as `Machine::plan_beat` does (its plan is private).
    fn beat_once(&mut self, store: &mut Store, now: u64) -> Option<bool> {
        let m = &mut self.m;
        let _plan = m.plan_beat(now);
        let me = BeatAs {
            away: matches!(&m.admitting, Admitting::Local(l) if l.closing.is_none()),
            reading: m.reads_whole(),
        };
        let base = m.own.clone();
        let own = m.in_flight_by_scope(&[]);
        let mut answer = store.heartbeat(self.id, me, m.epoch, now);
        if m.settings.on_error == OnError::Local && answer.as_ref().is_err_and(slow) {
            answer = store.heartbeat(self.id, me, m.epoch, now);
        }
        match answer {
            Ok(beat) => Some(m.beat_answered(beat, base, own, now)),
            Err(e) => {
                m.beat_failed(&e, now);
                None
            }
        }
    }

    /// `Inner::restore`, `void_uncertain` and `restore_round`.
    fn restore(&mut self, store: &mut Store, now: u64) -> Result<(), LedgerError> {
        let m = &mut self.m;
        m.forget_settled_uncertain(now);
        let uncertain = std::mem::take(&mut m.uncertain);
        for (i, u) in uncertain.iter().enumerate() {
            if let Err(e) = store.void(u, now) {
                for u in &uncertain[i..] {
                    m.keep_uncertain(u.clone());
                }
                return Err(e);
            }
        }
        loop {
            let round = m.plan_restore(now);
            let restored = match store.restore(self.id, &round, now) {
                Ok(restored) => restored,
                Err(e) => {
                    m.restore_failed(&e, round.seq, round.snapshot);
                    return Err(e);
                }
            };
            let (owed, next) = m.restored(&restored, &round.snapshot, now);
            for (r, actual) in owed {
                let _ = store.finish(&r, actual, now);
            }
            if next != Next::Again {
                return Ok(());
            }
        }
    }
}
