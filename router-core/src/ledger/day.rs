//! Days for per-day limits (`rpd`, `tpd`): where a provider's day starts and ends.
//!
//! A day is named by its civil date's count of days since 1970-01-01, so a UTC day and a
//! Pacific day of the same date share a number. Its start and end are instants (ms since the
//! epoch): 24 hours apart in UTC, 23 or 25 hours apart on the days a time zone changes its
//! offset.

use std::fmt;

use jiff::Timestamp;
use jiff::tz::TimeZone;

use std::time::Duration;

use super::period::DAY_MS;
use super::types::{ActualUsage, LimitKind, Reservation, ScopeUsage};
use crate::config::Limits;

/// Where a scope's day ends: at UTC midnight, or at midnight in an IANA time zone.
#[derive(Clone, Default, PartialEq)]
pub enum DayResets {
    /// Midnight UTC (the default).
    #[default]
    Utc,
    /// Midnight in a time zone (Gemini's quotas: `America/Los_Angeles`), with its name.
    Zone(String, TimeZone),
}

impl fmt::Debug for DayResets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One day of a [`DayResets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Day {
    /// The civil date, as days since 1970-01-01.
    pub id: u64,
    /// Its first instant, ms since the epoch.
    pub start: u64,
    /// The next day's first instant, ms since the epoch.
    pub end: u64,
}

impl DayResets {
    /// `utc` (any case) or an IANA time zone name from the bundled database; `None` for any
    /// other name.
    pub fn parse(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("utc") {
            return Some(DayResets::Utc);
        }
        let tz = jiff::tz::db().get(name).ok()?;
        Some(DayResets::Zone(name.to_owned(), tz))
    }

    /// `utc` or the time zone's name, as configured.
    pub fn name(&self) -> &str {
        match self {
            DayResets::Utc => "utc",
            DayResets::Zone(name, _) => name,
        }
    }

    /// The day holding instant `ms`.
    pub fn day_at(&self, ms: u64) -> Day {
        let utc = Day {
            id: ms / DAY_MS,
            start: ms / DAY_MS * DAY_MS,
            end: (ms / DAY_MS + 1) * DAY_MS,
        };
        match self {
            DayResets::Utc => utc,
            DayResets::Zone(_, tz) => zoned_day(tz, ms).unwrap_or(utc),
        }
    }
}

/// The day of `tz` holding `ms`; `None` only outside the years jiff represents.
fn zoned_day(tz: &TimeZone, ms: u64) -> Option<Day> {
    let at = Timestamp::from_millisecond(i64::try_from(ms).ok()?).ok()?;
    let here = at.to_zoned_datetime(tz.clone());
    let start = here.start_of_day().ok()?.timestamp();
    let next = here.date().tomorrow().ok()?;
    let end = next
        .to_zoned_datetime(tz.clone())
        .ok()?
        .start_of_day()
        .ok()?;
    let same_date_utc = here.date().to_zoned_datetime(TimeZone::UTC).ok()?;
    let id = same_date_utc
        .timestamp()
        .as_millisecond()
        .div_euclid(DAY_MS as i64);
    Some(Day {
        id: u64::try_from(id).ok()?,
        start: u64::try_from(start.as_millisecond()).ok()?,
        end: u64::try_from(end.timestamp().as_millisecond()).ok()?,
    })
}

/// What a scope counted in one of its days: requests and tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DayCount {
    /// The day's id ([`Day::id`]); `None` before anything was counted.
    pub(crate) day: Option<u64>,
    pub(crate) requests: u64,
    pub(crate) tokens: u64,
}

impl DayCount {
    /// Requests and tokens counted in `day`: nothing when the stored day is another.
    pub(crate) fn current(&self, day: u64) -> (u64, u64) {
        if self.day == Some(day) {
            (self.requests, self.tokens)
        } else {
            (0, 0)
        }
    }

    /// Counts `requests` and `tokens` more in `day`.
    pub(crate) fn add(&mut self, day: u64, requests: u64, tokens: u64) {
        let (r, t) = self.current(day);
        *self = DayCount {
            day: Some(day),
            requests: r.saturating_add(requests),
            tokens: t.saturating_add(tokens),
        };
    }

    /// Corrects `day`'s counts, if it is still the stored day (a correction for a day that
    /// has ended changes nothing).
    pub(crate) fn adjust(&mut self, day: u64, requests: i64, tokens: i64) {
        if self.day == Some(day) {
            self.requests = self.requests.saturating_add_signed(requests);
            self.tokens = self.tokens.saturating_add_signed(tokens);
        }
    }
}

/// The per-day limits of one scope that one more request of `tokens` would break in `day`.
pub(crate) fn day_blocked(
    counted: &DayCount,
    limits: Limits,
    day: u64,
    tokens: u64,
) -> impl Iterator<Item = LimitKind> {
    let (requests, used) = counted.current(day);
    let full = [
        (LimitKind::DailyRequests, limits.rpd, requests, 1),
        (LimitKind::DailyTokens, limits.tpd, used, tokens),
    ];
    full.into_iter()
        .filter(|&(_, limit, count, more)| limit.is_some_and(|l| count + more > l.get()))
        .map(|(kind, ..)| kind)
}

/// The corrections settling (or, `refund_request`, releasing) `r` with `actual` makes to the
/// day's requests and tokens.
pub(crate) fn day_deltas(r: &Reservation, actual: ActualUsage, refund_request: bool) -> (i64, i64) {
    let requests = if refund_request { -1 } else { 0 };
    (
        requests,
        super::engine::signed_diff(actual.tokens, r.tokens),
    )
}

/// `usage` with what `counted` holds of `day` (the scope's current day, `None` without a
/// per-day limit) at `now`.
pub(crate) fn with_day(
    usage: ScopeUsage,
    day: Option<Day>,
    counted: DayCount,
    now: u64,
) -> ScopeUsage {
    let Some(day) = day else {
        return usage;
    };
    let (requests, tokens) = counted.current(day.id);
    ScopeUsage {
        requests_today: requests,
        tokens_today: tokens,
        day_resets_in: Some(Duration::from_millis(day.end.saturating_sub(now))),
        ..usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;

    #[test]
    fn a_utc_day_is_the_calendar_day() {
        // 2026-11-29T08:41:54Z
        let d = DayResets::Utc.day_at(1_795_941_714_000);
        assert_eq!(d.id, 20_786);
        assert_eq!(d.start, 1_795_910_400_000);
        assert_eq!(d.end, 1_795_996_800_000);
    }

    #[test]
    fn a_pacific_day_ends_at_pacific_midnight_across_daylight_saving() {
        let pacific = DayResets::parse("America/Los_Angeles").expect("a bundled zone");
        // 2026-03-08 in Los Angeles: clocks go from 02:00 PST to 03:00 PDT, a 23-hour day.
        // It starts at 08:00Z (midnight PST) and ends at 07:00Z on the 9th (midnight PDT).
        let start = 1_772_956_800_000; // 2026-03-08T08:00:00Z
        let d = pacific.day_at(start + 12 * HOUR);
        assert_eq!((d.start, d.end), (start, start + 23 * HOUR));
        assert_eq!(d.id, DayResets::Utc.day_at(start).id);
        // A millisecond before Pacific midnight is still the 8th; at midnight the 9th begins.
        assert_eq!(pacific.day_at(d.end - 1).id, d.id);
        assert_eq!(pacific.day_at(d.end).id, d.id + 1);
        // 2026-11-01: back to PST, a 25-hour day from 07:00Z to 08:00Z on the 2nd.
        let fall = 1_793_516_400_000; // 2026-11-01T07:00:00Z
        let d = pacific.day_at(fall + HOUR);
        assert_eq!((d.start, d.end), (fall, fall + 25 * HOUR));
    }

    #[test]
    fn names_are_utc_or_a_known_zone() {
        assert_eq!(DayResets::parse("UTC"), Some(DayResets::Utc));
        assert_eq!(
            DayResets::parse("Europe/Paris").map(|d| d.name().to_owned()),
            Some("Europe/Paris".to_owned())
        );
        assert_eq!(DayResets::parse("Mars/Olympus_Mons"), None);
        assert_eq!(DayResets::parse("pacific"), None);
    }
}
