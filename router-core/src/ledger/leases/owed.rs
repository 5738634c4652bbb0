//! The corrections owed to the shared windows, and block calls that got no answer.

use super::*;

impl Leases {
    pub(super) fn owe(&mut self, d: DeploymentId, bucket: u64, deltas: Deltas) {
        let owed = self.owed.entry((d, bucket)).or_default();
        *owed = owed.zip(deltas, |o, v| o + v);
    }

    /// The corrections owed on `d`, for its next block's call to carry.
    pub(crate) fn take_owed(&mut self, d: DeploymentId) -> Vec<(u64, Deltas)> {
        let keys: Vec<(DeploymentId, u64)> =
            self.owed.keys().filter(|(o, _)| *o == d).copied().collect();
        keys.into_iter()
            .filter_map(|k| self.owed.remove(&k).map(|deltas| (k.1, deltas)))
            .filter(|(_, deltas)| *deltas != Deltas::ZERO)
            .collect()
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
            .filter(|(_, deltas)| *deltas != Deltas::ZERO)
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
                    deltas: Deltas::ZERO,
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
        if u.carried.iter().any(|(_, d)| d.into_iter().any(|v| v > 0)) {
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
            self.owe(u.deployment, bucket, Deltas::new(-r, -t, -t, -t));
        }
    }

    /// Keeps block call `u` to send again: it got no answer again.
    pub(crate) fn still_unanswered(&mut self, u: Unanswered) {
        self.unanswered.push(u);
    }
}
