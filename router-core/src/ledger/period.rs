//! UTC calendar periods for budgets: days and months since the Unix epoch, and when they end.
//!
//! `lua/common.lua` has the same arithmetic (days to civil date, after Howard Hinnant's
//! `civil_from_days`); the conformance suite checks that both reset at the same boundaries.

/// One UTC day in ms (Lua: `DAY_MS`, written from this one).
pub(crate) const DAY_MS: u64 = 86_400_000;

/// The budget periods `now` falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Periods {
    /// Days since the epoch.
    pub(crate) day: u64,
    /// `year * 12 + month - 1`.
    pub(crate) month: u64,
    /// When the day ends, ms.
    pub(crate) day_end: u64,
    /// When the month ends, ms.
    pub(crate) month_end: u64,
    /// When the month began, ms.
    pub(crate) month_start: u64,
}

/// (year, month 1..=12) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m)
}

/// Days since 1970-01-01 of the first day of (year, month).
fn days_from_civil(y: i64, m: u64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The periods of `now_ms`.
pub(crate) fn periods(now_ms: u64) -> Periods {
    let day = now_ms / DAY_MS;
    let (y, m) = civil_from_days(day as i64);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    Periods {
        day,
        month: (y * 12) as u64 + m - 1,
        day_end: (day + 1) * DAY_MS,
        month_end: days_from_civil(ny, nm) as u64 * DAY_MS,
        month_start: days_from_civil(y, m) as u64 * DAY_MS,
    }
}

/// The calendar of budgets, for reports that line up with them (`llmroute usage`).
pub mod calendar {
    use super::{DAY_MS, civil_from_days, days_from_civil, periods};

    /// One UTC day in ms.
    pub const DAY: u64 = DAY_MS;

    /// (year, month 1..=12, day 1..=31) of the UTC day holding `ms`.
    pub fn date_of(ms: u64) -> (i64, u64, u64) {
        let day = (ms / DAY_MS) as i64;
        let (y, m) = civil_from_days(day);
        (y, m, (day - days_from_civil(y, m)) as u64 + 1)
    }

    /// Midnight UTC starting (year, month, day), in ms since the epoch; `None` for a date that
    /// does not exist, or lies before 1970 or after 9999 (where the day count would overflow).
    pub fn midnight(y: i64, m: u64, d: u64) -> Option<u64> {
        if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || d == 0 {
            return None;
        }
        let first = days_from_civil(y, m);
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        let len = (days_from_civil(ny, nm) - first) as u64;
        let day = first + d as i64 - 1;
        (d <= len && day >= 0).then(|| day as u64 * DAY_MS)
    }

    /// The UTC month holding `ms`: when it starts and when the next one starts.
    pub fn month_of(ms: u64) -> (u64, u64) {
        let p = periods(ms);
        (p.month_start, p.month_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_months_end_at_utc_midnight() {
        // 2026-11-29T08:41:54Z
        let p = periods(1_795_941_714_000);
        assert_eq!(p.day, 20_786);
        assert_eq!(p.month, 2026 * 12 + 10);
        assert_eq!(p.day_end, 1_795_996_800_000); // 2026-11-30T00:00:00Z
        assert_eq!(p.month_end, 1_796_083_200_000); // 2026-12-01T00:00:00Z
        assert_eq!(p.month_start, 1_793_491_200_000); // 2026-11-01T00:00:00Z
    }

    #[test]
    fn leap_years_and_year_ends() {
        // 2028-02-29T12:00:00Z: February of a leap year ends on March 1st.
        let p = periods(1_835_438_400_000);
        assert_eq!(p.month, 2028 * 12 + 1);
        assert_eq!(p.month_end, 1_835_481_600_000);
        // 2026-12-31T23:59:59.999Z: the month and the year end a millisecond later.
        let p = periods(1_798_761_599_999);
        assert_eq!(
            (p.day_end, p.month_end),
            (1_798_761_600_000, 1_798_761_600_000)
        );
        assert_eq!(periods(1_798_761_600_000).month, 2027 * 12);
    }

    #[test]
    fn calendar_dates_round_trip() {
        use super::calendar::{date_of, midnight, month_of};
        // 2026-11-29T08:41:54Z
        assert_eq!(date_of(1_795_941_714_000), (2026, 11, 29));
        assert_eq!(midnight(2026, 11, 29), Some(1_795_910_400_000));
        assert_eq!(midnight(2028, 2, 29), Some(1_835_395_200_000));
        assert_eq!(date_of(1_835_395_200_000), (2028, 2, 29));
        assert_eq!(midnight(2027, 2, 29), None);
        assert_eq!(midnight(2026, 13, 1), None);
        assert_eq!(midnight(1969, 12, 31), None);
        assert_eq!(
            month_of(1_795_941_714_000),
            (1_793_491_200_000, 1_796_083_200_000)
        );
    }
}
