//! Rate-limit and retry headers, parsed with `now` passed in.
//!
//! Every parser returns `None` for a value it does not understand: a provider's garbage header is
//! ignored, never a panic. Waits in the past are [`Duration::ZERO`]; absurdly long ones (numbers
//! past `u64`, dates thousands of years away) saturate at [`WAIT_CEILING`]. Decimal numbers are parsed
//! exactly (no floating point), so `2m59.56s` is 179 560 ms.

use std::time::{Duration, SystemTime};

use reqwest::header::{AsHeaderName, HeaderMap, HeaderName};
use router_core::config::Api;
use router_core::ledger::Observation;

use super::for_api;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The longest wait a header can state: 2^32 seconds (about 136 years). Anything longer, up to
/// numbers no integer type holds, saturates here, so `now + wait` never overflows (in
/// milliseconds it stays below 2^53, exact even as a Lua number). The request flow clamps
/// stated waits far lower (`retry.max_cooldown_secs`); this only makes the parse safe.
pub(crate) const WAIT_CEILING: Duration = Duration::from_secs(1 << 32);

/// A header's value as trimmed text, if present and visible ASCII.
pub(crate) fn header_str(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// A non-negative decimal (`"12"`, `"1.5"`, `".25"`) times `unit_nanos`, as a [`Duration`].
/// Fraction digits past nanosecond precision are dropped. No sign, no exponent. A number too
/// large for any integer type saturates (callers cap waits at [`WAIT_CEILING`]).
fn decimal(value: &str, unit_nanos: u128) -> Option<Duration> {
    let (int, frac) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    // Only ASCII digits are left; a number too large for a u128 saturates.
    let int = int
        .bytes()
        .try_fold(0u128, |n, b| {
            n.checked_mul(10)?.checked_add(u128::from(b - b'0'))
        })
        .unwrap_or(u128::MAX);
    // The first nine fraction digits, as nanoseconds of one unit (`"25"` is 250 000 000).
    let frac = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0u128, |n, b| n * 10 + u128::from(b - b'0'));
    let nanos = int
        .saturating_mul(unit_nanos)
        .saturating_add(frac * unit_nanos / NANOS_PER_SEC);
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    Some(Duration::new(secs, subsec))
}

/// A wait, capped at [`WAIT_CEILING`].
fn capped(wait: Duration) -> Duration {
    wait.min(WAIT_CEILING)
}

/// An OpenAI (Go-style) duration: `1s`, `6m0s`, `17ms`, `1.5s`, `2m59.56s`, `23h47m36.648s`.
/// Units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`; every number needs a unit.
pub(crate) fn parse_duration_openai(value: &str) -> Option<Duration> {
    let mut rest = value.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = rest.split_at(number_end);
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let unit_nanos: u128 = match unit {
            "h" => 3_600 * NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "s" => NANOS_PER_SEC,
            "ms" => 1_000_000,
            "us" | "µs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        total = total.saturating_add(decimal(number, unit_nanos)?);
        rest = next;
    }
    Some(capped(total))
}

/// `retry-after`: seconds (possibly fractional) or an HTTP-date, relative to `now`.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return decimal(value, NANOS_PER_SEC).map(capped);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(capped(at.duration_since(now).unwrap_or(Duration::ZERO)))
}

/// `retry-after-ms`: milliseconds, possibly fractional.
pub(crate) fn parse_retry_after_ms(value: &str) -> Option<Duration> {
    decimal(value.trim(), 1_000_000).map(capped)
}

/// An RFC 3339 timestamp (`2024-09-27T17:29:00Z`, fractions and `+hh:mm` offsets allowed) as the
/// wait from `now`.
pub(crate) fn parse_rfc3339_reset(value: &str, now: SystemTime) -> Option<Duration> {
    let at = parse_rfc3339(value.trim())?;
    Some(capped(at.duration_since(now).unwrap_or(Duration::ZERO)))
}

fn parse_rfc3339(value: &str) -> Option<SystemTime> {
    if let Some(utc) = value.strip_suffix(['Z', 'z']) {
        return humantime::parse_rfc3339_weak(utc).ok();
    }
    let split = value.len().checked_sub(6)?;
    let (local, offset) = (value.get(..split)?, value.get(split..)?);
    let (sign, hh_mm) = offset.split_at_checked(1)?;
    let (hh, mm) = hh_mm.split_once(':')?;
    if hh.len() != 2 || mm.len() != 2 || !(hh.bytes().chain(mm.bytes())).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let (hh, mm): (u64, u64) = (hh.parse().ok()?, mm.parse().ok()?);
    if hh > 23 || mm > 59 {
        return None;
    }
    let local = humantime::parse_rfc3339_weak(local).ok()?;
    let offset = Duration::from_secs(hh * 3_600 + mm * 60);
    match sign {
        "+" => local.checked_sub(offset),
        "-" => local.checked_add(offset),
        _ => None,
    }
}

/// A remaining count: an integer (a stray fraction is floored).
fn parse_remaining(value: &str) -> Option<u64> {
    decimal(value, NANOS_PER_SEC).map(|d| d.as_secs())
}

/// How a wire format writes a reset header: takes the value and `now`, gives the wait.
pub(crate) type ResetParser = fn(&str, SystemTime) -> Option<Duration>;

/// A limit's `(remaining, reset)` header names, written once as [`HeaderName`]s so that a
/// lookup does not parse the name again.
pub(crate) type Pair = (HeaderName, HeaderName);

/// One dimension's `(remaining, reset)` from its header pair; both must be present and readable.
pub(crate) fn dimension(
    headers: &HeaderMap,
    (remaining, reset): &Pair,
    parse_reset: ResetParser,
    now: SystemTime,
) -> Option<(u64, Duration)> {
    let remaining = parse_remaining(header_str(headers, remaining)?)?;
    let reset = parse_reset(header_str(headers, reset)?, now)?;
    Some((remaining, reset))
}

/// The longest reset among the dimensions of `pairs` the headers report as exhausted (remaining
/// 0): the wait a 429 implies when it states none itself.
pub(crate) fn exhausted_reset(
    headers: &HeaderMap,
    pairs: &[Pair],
    parse_reset: ResetParser,
    now: SystemTime,
) -> Option<Duration> {
    pairs
        .iter()
        .filter_map(|pair| dimension(headers, pair, parse_reset, now))
        .filter(|&(remaining, _)| remaining == 0)
        .map(|(_, reset)| reset)
        .max()
}

/// What the provider's headers say about its limits, read by `api`'s wire format. A dimension
/// needs both its remaining count and its reset; garbage is ignored.
pub(crate) fn observation(api: Api, headers: &HeaderMap, now: SystemTime) -> Observation {
    for_api(api).observation(headers, now)
}

#[cfg(test)]
#[path = "headers_tests.rs"]
pub(crate) mod tests;
