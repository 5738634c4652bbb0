//! A sliding 60 s window of 1 s buckets with running totals, and concurrency slots.
//!
//! This is the in-process twin of the bucket logic in `lua/common.lua` (`expire`, `adjust`,
//! `fits_at`, the slots zset); both must agree: the conformance suite and the differential test
//! check that they do, and the constants below are written into the Lua prelude at load time.
//!
//! Bucket `k` holds what was admitted in `[k * BUCKET_MS, (k + 1) * BUCKET_MS)`. At time `now`, in
//! bucket `nb`, the live buckets are `nb - 60 ..= nb`: the oldest is partly outside the exact
//! window and is counted in full, so the count is never below the exact sliding-window count.
//! Bucket `k` leaves the window at `(k + 61) * BUCKET_MS`.

/// Width of one window bucket, in milliseconds (Lua: `BUCKET_MS`, written from this one).
pub const BUCKET_MS: u64 = 1_000;
/// Number of whole buckets in the 60 s window (one more, partly outside, is kept live). Lua:
/// `SPAN`, written from this one.
pub const WINDOW_BUCKETS: u64 = 60;
const LIVE: usize = WINDOW_BUCKETS as usize + 1;

/// The latest time the ledger stores, ms (2^53 - 1, the last integer Lua's doubles hold
/// exactly; about 285 000 years from the epoch): later deadlines saturate here, never wrap.
/// Twin of `TIME_CAP_MS` in the Lua prelude (generated from this constant, see `redis.rs`).
pub const TIME_CAP_MS: u64 = (1 << 53) - 1;

/// `d` in ms, saturated at [`TIME_CAP_MS`].
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .min(TIME_CAP_MS)
}

/// `ms` after `now`, saturated at [`TIME_CAP_MS`].
pub(crate) fn after(now: u64, ms: u64) -> u64 {
    now.saturating_add(ms).min(TIME_CAP_MS)
}

/// The bucket index of a time in ms.
pub(crate) fn bucket_of(now_ms: u64) -> u64 {
    now_ms / BUCKET_MS
}

/// When bucket `k` leaves the window, in ms.
pub(crate) fn expiry_of(bucket: u64) -> u64 {
    (bucket + LIVE as u64) * BUCKET_MS
}

/// The bucket, among those live at bucket `nb`, that leaves the window first at or after
/// `reset_at`: usage the provider reports is counted there, so it comes back when the provider
/// says it does (at the latest 61 s from now).
pub(crate) fn phantom_bucket(reset_at: u64, nb: u64) -> u64 {
    let k = reset_at.div_ceil(BUCKET_MS).saturating_sub(LIVE as u64);
    k.clamp(nb.saturating_sub(WINDOW_BUCKETS), nb)
}

/// Which counter of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dim {
    /// Requests (RPM).
    Requests = 0,
    /// Tokens, input plus output (TPM).
    Tokens = 1,
    /// Input (prompt) tokens (ITPM).
    Input = 2,
    /// Output (completion) tokens (OTPM).
    Output = 3,
}

pub(crate) use super::counts::Counts;

/// One scope's sliding window: a ring of live buckets and running totals, per counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    cells: [[u64; LIVE]; 4],
    /// Per counter, in [`Dim`] order.
    totals: [u64; 4],
    /// Oldest bucket that may hold anything; every stored bucket is in `oldest ..= oldest + 60`.
    oldest: Option<u64>,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            cells: [[0; LIVE]; 4],
            totals: [0; 4],
            oldest: None,
        }
    }
}

impl Window {
    /// Drops the buckets that have left the window at bucket `nb` and returns the bucket new
    /// admissions go to (`nb`, or the oldest live bucket if the clock went backwards).
    pub(crate) fn expire(&mut self, nb: u64) -> u64 {
        let live = nb.saturating_sub(WINDOW_BUCKETS);
        let Some(oldest) = self.oldest else {
            self.oldest = Some(live);
            return nb;
        };
        if oldest < live {
            if oldest + WINDOW_BUCKETS < live {
                *self = Self::default();
            } else {
                for k in oldest..live {
                    let i = Self::slot(k);
                    for (cells, total) in self.cells.iter_mut().zip(&mut self.totals) {
                        *total -= std::mem::take(&mut cells[i]);
                    }
                }
            }
            self.oldest = Some(live);
            return nb;
        }
        nb.max(oldest)
    }

    fn slot(k: u64) -> usize {
        (k % LIVE as u64) as usize
    }

    /// A window rebuilt from stored parts: its oldest bucket and `(bucket, counts)` rows. Rows
    /// outside `oldest ..= oldest + 60` cannot be live and are ignored.
    pub(crate) fn from_parts(
        oldest: Option<u64>,
        rows: impl IntoIterator<Item = (u64, Counts)>,
    ) -> Self {
        let mut w = Self {
            oldest,
            ..Self::default()
        };
        for (k, counts) in rows {
            if w.is_live(k) {
                w.add(k, counts);
            }
        }
        w
    }

    /// The oldest bucket that may hold anything (`None` before the first use).
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.oldest
    }

    /// The buckets holding anything, as `(bucket, counts)`, oldest first: at most 61.
    pub(crate) fn buckets(&self) -> impl Iterator<Item = (u64, Counts)> + '_ {
        let range = self.oldest.map(|o| o..=o + WINDOW_BUCKETS);
        range.into_iter().flatten().filter_map(|k| {
            let i = Self::slot(k);
            let counts = Counts::from(self.cells.map(|c| c[i]));
            (counts != Counts::ZERO).then_some((k, counts))
        })
    }

    /// What is counted in the window, per counter (after [`Window::expire`]).
    pub(crate) fn totals(&self) -> Counts {
        Counts::from(self.totals)
    }

    /// The total of one counter (after [`Window::expire`]).
    pub(crate) fn total(&self, dim: Dim) -> u64 {
        self.totals[dim as usize]
    }

    /// True if bucket `k` is still in the window (after [`Window::expire`]).
    pub(crate) fn is_live(&self, k: u64) -> bool {
        self.oldest
            .is_some_and(|o| k >= o && k <= o + WINDOW_BUCKETS)
    }

    /// Adds `counts` to bucket `k`, which must be live.
    pub(crate) fn add(&mut self, k: u64, counts: Counts) {
        let i = Self::slot(k);
        for (d, n) in counts.array().into_iter().enumerate() {
            self.cells[d][i] = self.cells[d][i].saturating_add(n);
            self.totals[d] = self.totals[d].saturating_add(n);
        }
    }

    /// Adds `delta` to one counter of bucket `k` if it is live, never going below zero.
    pub(crate) fn adjust(&mut self, k: u64, dim: Dim, delta: i64) {
        if !self.is_live(k) {
            return;
        }
        let (cell, total) = (
            &mut self.cells[dim as usize][Self::slot(k)],
            &mut self.totals[dim as usize],
        );
        let new = cell.saturating_add_signed(delta);
        *total = *total - *cell + new;
        *cell = new;
    }

    /// The earliest time (ms) at which `need` more of `dim` fits under `limit`, assuming nothing
    /// else is admitted meanwhile. `need` must not exceed `limit`.
    pub(crate) fn fits_at(&self, dim: Dim, need: u64, limit: u64) -> u64 {
        let (cells, total) = (&self.cells[dim as usize], self.totals[dim as usize]);
        let oldest = self.oldest.unwrap_or(0);
        let mut left = total;
        for k in oldest..=oldest + WINDOW_BUCKETS {
            left -= cells[Self::slot(k)];
            if left + need <= limit {
                return expiry_of(k);
            }
        }
        expiry_of(oldest + WINDOW_BUCKETS)
    }
}

/// How long a slot is remembered after it expired: a settle (or release) arriving that late
/// still corrects its window bucket (if live) and its tenant's spend, once. Twin of
/// `SETTLE_GRACE_MS` in the Lua prelude (generated from this constant, see `redis.rs`).
pub const SETTLE_GRACE_MS: u64 = 3_600_000;

/// One concurrency slot: its reservation id, expiry (ms) and the bucket its tokens were
/// reserved in (so that an admission repeated with the same id answers the same reservation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) id: u64,
    pub(crate) expiry: u64,
    pub(crate) bucket: u64,
}

impl Slot {
    /// Held: counts against concurrency.
    pub(crate) fn is_live(&self, now: u64) -> bool {
        self.expiry > now
    }

    /// Still remembered (live, or expired less than [`SETTLE_GRACE_MS`] ago).
    pub(crate) fn is_remembered(&self, now: u64) -> bool {
        self.expiry.saturating_add(SETTLE_GRACE_MS) > now
    }
}

/// Concurrency slots of one scope, live ones and those expired within [`SETTLE_GRACE_MS`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Slots {
    held: Vec<Slot>,
    /// The earliest moment a slot may be forgotten (expiry + grace of the oldest).
    next_forget: u64,
}

impl Slots {
    /// Slots rebuilt from stored rows.
    pub(crate) fn from_held(held: Vec<Slot>) -> Self {
        let mut s = Self {
            held,
            next_forget: 0,
        };
        s.next_forget = s.earliest_forget();
        s
    }

    fn earliest_forget(&self) -> u64 {
        self.held
            .iter()
            .map(|s| s.expiry.saturating_add(SETTLE_GRACE_MS))
            .min()
            .unwrap_or(0)
    }

    /// The slots remembered.
    pub(crate) fn held(&self) -> &[Slot] {
        &self.held
    }

    /// Forgets slots that expired [`SETTLE_GRACE_MS`] or more before `now`.
    pub(crate) fn reap(&mut self, now: u64) {
        if self.held.is_empty() || now < self.next_forget {
            return;
        }
        self.held.retain(|s| s.is_remembered(now));
        self.next_forget = self.earliest_forget();
    }

    /// Number of slots held (live) at `now`.
    pub(crate) fn len(&self, now: u64) -> u64 {
        self.held.iter().filter(|s| s.is_live(now)).count() as u64
    }

    /// When the oldest live slot expires, if any is held at `now`.
    pub(crate) fn earliest_expiry(&self, now: u64) -> Option<u64> {
        self.held
            .iter()
            .filter(|s| s.is_live(now))
            .map(|s| s.expiry)
            .min()
    }

    /// The live slot of reservation `id`, if any.
    pub(crate) fn live(&self, id: u64, now: u64) -> Option<Slot> {
        self.held
            .iter()
            .find(|s| s.id == id && s.is_live(now))
            .copied()
    }

    /// Takes a slot (replacing a remembered one of the same id).
    pub(crate) fn take(&mut self, slot: Slot) {
        self.free(slot.id);
        let forget = slot.expiry.saturating_add(SETTLE_GRACE_MS);
        if self.held.is_empty() || forget < self.next_forget {
            self.next_forget = forget;
        }
        self.held.push(slot);
    }

    /// Moves the expiry of reservation `id`'s slot, if it is live at `now`; false otherwise.
    pub(crate) fn renew(&mut self, id: u64, now: u64, expiry: u64) -> bool {
        match self.held.iter_mut().find(|s| s.id == id && s.is_live(now)) {
            Some(s) => {
                s.expiry = expiry;
                self.next_forget = self.earliest_forget();
                true
            }
            None => false,
        }
    }

    /// Forgets reservation `id`'s slot; the slot, if it was remembered.
    pub(crate) fn free(&mut self, id: u64) -> Option<Slot> {
        let i = self.held.iter().position(|s| s.id == id)?;
        Some(self.held.swap_remove(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_leaves_the_window_61_buckets_later() {
        let mut w = Window::default();
        let b = w.expire(1_000);
        w.add(b, Counts::from([1, 10, 4, 6]));
        assert_eq!(w.expire(1_060), 1_060);
        assert_eq!(w.totals(), [1, 10, 4, 6]);
        w.expire(1_061);
        assert_eq!(w.totals(), Counts::ZERO);
        assert_eq!(expiry_of(1_000), 1_061_000);
    }

    #[test]
    fn a_long_idle_gap_clears_everything() {
        let mut w = Window::default();
        let b = w.expire(5);
        w.add(b, Counts::from([3, 30, 10, 20]));
        w.expire(10_000);
        assert_eq!(w.totals(), Counts::ZERO);
        assert!(!w.is_live(5));
    }

    #[test]
    fn fits_at_frees_the_oldest_buckets_first() {
        let mut w = Window::default();
        for (nb, n) in [(100, 2), (110, 3), (120, 1)] {
            let b = w.expire(nb);
            w.add(b, Counts::from([n, 0, 0, 0]));
        }
        // limit 6, full; one more fits when bucket 100 leaves.
        assert_eq!(w.fits_at(Dim::Requests, 1, 6), expiry_of(100));
        // four more need buckets 100 and 110 gone.
        assert_eq!(w.fits_at(Dim::Requests, 4, 6), expiry_of(110));
    }

    #[test]
    fn adjust_never_goes_below_zero_and_ignores_dead_buckets() {
        let mut w = Window::default();
        let b = w.expire(50);
        w.add(b, Counts::from([1, 100, 60, 40]));
        w.adjust(b, Dim::Tokens, -500);
        w.adjust(b, Dim::Output, -10);
        assert_eq!(w.totals(), [1, 0, 60, 30]);
        w.expire(200);
        w.adjust(b, Dim::Tokens, 40);
        assert_eq!(w.totals(), Counts::ZERO);
    }

    #[test]
    fn a_window_rebuilt_from_its_buckets_is_the_same_window() {
        let mut w = Window::default();
        for (nb, n) in [(100, 2), (130, 3), (160, 1)] {
            let b = w.expire(nb);
            w.add(b, Counts::from([n, 10 * n, 7 * n, 3 * n]));
        }
        let rows: Vec<_> = w.buckets().collect();
        let want = [
            (100, Counts::from([2, 20, 14, 6])),
            (130, Counts::from([3, 30, 21, 9])),
            (160, Counts::from([1, 10, 7, 3])),
        ];
        assert_eq!(rows, want);
        // A row outside the live range is dropped.
        let stray = rows.iter().copied().chain([(5, Counts::from([9; 4]))]);
        assert_eq!(Window::from_parts(w.oldest(), stray), w);
        assert_eq!(Window::from_parts(None, []), Window::default());
    }

    fn slot(id: u64, expiry: u64) -> Slot {
        Slot {
            id,
            expiry,
            bucket: 0,
        }
    }

    #[test]
    fn slots_expire_at_their_deadline_and_are_forgotten_after_the_grace() {
        let mut s = Slots::default();
        s.take(slot(1, 100));
        s.take(slot(2, 200));
        s.reap(99);
        assert_eq!(s.len(99), 2);
        s.reap(100);
        assert_eq!(s.len(100), 1);
        assert!(s.live(1, 100).is_none());
        assert_eq!(s.held().len(), 2, "an expired slot is remembered");
        s.reap(100 + SETTLE_GRACE_MS);
        assert_eq!(s.held().len(), 1);
        assert!(s.free(2).is_some());
        assert!(s.free(2).is_none());
    }

    #[test]
    fn only_a_live_slot_is_renewed() {
        let mut s = Slots::default();
        s.take(slot(1, 100));
        assert!(s.renew(1, 50, 500));
        assert_eq!(s.earliest_expiry(50), Some(500));
        assert!(!s.renew(1, 500, 900));
        assert!(!s.renew(2, 50, 900));
    }
}
