//! Per-day limits as the scripts take them (see the day hash in lua/common.lua): which scopes
//! count days, and each one's day as this instance's clock sees it.

use redis::ScriptInvocation;

use super::RedisStore;
use crate::config::Limits;
use crate::ledger::day::Day;

impl RedisStore {
    /// This instance's clock, ms: the injected one, else the system's. The scripts read the
    /// server's; `server_day` in lua/common.lua moves a day computed here across a boundary
    /// the two clocks straddle.
    pub(super) fn local_now(&self) -> u64 {
        match &self.clock {
            Some(c) => c.now_ms(),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// Whether one of `scopes` has a per-day limit: the candidate then counts days.
    pub(super) fn counts_days(&self, scopes: &[usize]) -> bool {
        scopes.iter().any(|&s| self.table.def(s).limits.per_day())
    }

    /// The current day of scope `s` at `now`, if it has a per-day limit.
    pub(super) fn day_of(&self, s: usize, now: u64) -> Option<Day> {
        let def = self.table.def(s);
        def.limits.per_day().then(|| def.resets.day_at(now))
    }

    /// Window hash and slots zset of each scope, and its day hash when `days`.
    pub(super) fn push_scope_keys(
        &self,
        inv: &mut ScriptInvocation<'_>,
        scopes: &[usize],
        days: bool,
    ) {
        for &s in scopes {
            let keys = &self.scope_keys[s];
            inv.key(&keys.window).key(&keys.slots);
            if days {
                inv.key(&keys.day);
            }
        }
    }

    /// The day hash of each of `scopes` that has a per-day limit, and per scope the day the
    /// admission counted in `bucket` was in ('-' for none): settle.lua's day block.
    pub(super) fn push_settle_days(
        &self,
        keys: &mut Vec<String>,
        inv: &mut ScriptInvocation<'_>,
        scopes: &[usize],
        bucket: u64,
    ) {
        let at = bucket.saturating_mul(crate::ledger::window::BUCKET_MS);
        for &s in scopes {
            match self.day_of(s, at) {
                Some(day) => {
                    keys.push(self.scope_keys[s].day.clone());
                    inv.arg(day.id);
                }
                None => {
                    inv.arg("-");
                }
            }
        }
    }
}

/// A scope's per-day limits and day as admit.lua takes them: rpd, tpd (0 = unlimited), the
/// day's id, start and end.
pub(super) fn push_day(inv: &mut ScriptInvocation<'_>, limits: Limits, day: Option<Day>) {
    for l in [limits.rpd, limits.tpd] {
        inv.arg(l.map_or(0, |v| v.get()));
    }
    let day = day.unwrap_or(Day {
        id: 0,
        start: 0,
        end: 0,
    });
    inv.arg(day.id).arg(day.start).arg(day.end);
}
