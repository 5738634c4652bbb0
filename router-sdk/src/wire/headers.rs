//! Rate-limit and retry headers, parsed with `now` passed in.
//!
//! Every parser returns `None` for a value it does not understand: a provider's garbage header is
//! ignored, never a panic. Waits in the past are [`Duration::ZERO`]; absurdly long ones (numbers
//! past `u64`, dates thousands of years away) saturate at [`WAIT_CEILING`]. Decimal numbers are parsed
//! exactly (no floating point), so `2m59.56s` is 179 560 ms.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
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
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
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
    // Only ASCII digits are left: parsing fails on overflow alone.
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().unwrap_or(u128::MAX)
    };
    let frac9 = format!("{:0<9}", frac.get(..frac.len().min(9))?);
    let frac: u128 = frac9.parse().ok()?;
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

/// One dimension's `(remaining, reset)` from its header pair; both must be present and readable.
pub(crate) fn dimension(
    headers: &HeaderMap,
    (remaining, reset): (&str, &str),
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
    pairs: &[(&str, &str)],
    parse_reset: ResetParser,
    now: SystemTime,
) -> Option<Duration> {
    pairs
        .iter()
        .filter_map(|&pair| dimension(headers, pair, parse_reset, now))
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
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn now() -> SystemTime {
        // 2024-09-27T17:28:00Z
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_727_458_080)
    }

    pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            let value = HeaderValue::from_bytes(value.as_bytes()).unwrap();
            map.insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), value);
        }
        map
    }

    #[test]
    fn openai_durations() {
        let table = [
            ("1s", Some(MS(1_000))),
            ("6m0s", Some(MS(360_000))),
            ("17ms", Some(MS(17))),
            ("1.5s", Some(MS(1_500))),
            ("2m59.56s", Some(MS(179_560))),
            ("23h47m36.648s", Some(MS(85_656_648))),
            ("0s", Some(Duration::ZERO)),
            (" 7.66s ", Some(MS(7_660))),
            ("250us", Some(Duration::from_micros(250))),
            ("1µs", Some(Duration::from_micros(1))),
            ("3ns", Some(Duration::from_nanos(3))),
            ("0.0000000001s", Some(Duration::ZERO)),
            ("", None),
            ("12", None),
            ("s", None),
            ("1.2.3s", None),
            ("-1s", None),
            ("1e3s", None),
            ("1d", None),
            ("1s garbage", None),
            ("NaNs", None),
        ];
        for (input, want) in table {
            assert_eq!(parse_duration_openai(input), want, "input {input:?}");
        }
    }

    #[test]
    fn retry_after_seconds_dates_and_garbage() {
        let table = [
            ("20", Some(MS(20_000))),
            ("0", Some(Duration::ZERO)),
            ("1.5", Some(MS(1_500))),
            (" 3 ", Some(MS(3_000))),
            ("Fri, 27 Sep 2024 17:28:30 GMT", Some(MS(30_000))),
            ("Fri, 27 Sep 2024 17:00:00 GMT", Some(Duration::ZERO)),
            ("-5", None),
            ("soon", None),
            ("", None),
            ("1.5.5", None),
            ("Fri, 99 Sep 2024 17:28:30 GMT", None),
        ];
        for (input, want) in table {
            assert_eq!(parse_retry_after(input, now()), want, "input {input:?}");
        }
        assert_eq!(parse_retry_after_ms("1500"), Some(MS(1_500)));
        assert_eq!(
            parse_retry_after_ms("0.5"),
            Some(Duration::from_micros(500))
        );
        assert_eq!(parse_retry_after_ms("x"), None);
    }

    #[test]
    fn absurd_waits_saturate_at_the_ceiling() {
        let far = [
            parse_retry_after("18446744073709551615", now()),
            parse_retry_after("18446744073709551616", now()),
            parse_retry_after("999999999999999999999999999999999999999999.5", now()),
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now()),
            parse_retry_after_ms("18446744073709551615"),
            parse_retry_after_ms("99999999999999999999999999999999999999999999"),
            parse_rfc3339_reset("9999-12-31T23:59:59Z", now()),
            parse_duration_openai("99999999999999999999999h"),
            parse_duration_openai("18446744073709551615h18446744073709551615h"),
            parse_duration_openai("8760000000h"),
        ];
        for (i, wait) in far.into_iter().enumerate() {
            assert_eq!(wait, Some(WAIT_CEILING), "case {i}");
        }
        let ceiling_ms = u64::try_from(WAIT_CEILING.as_millis()).unwrap();
        assert!(
            ceiling_ms.checked_add(u64::MAX / 2).is_some(),
            "now + wait fits in ms"
        );
        assert!(ceiling_ms < (1 << 53), "exact as a Lua number");
        assert_eq!(
            parse_retry_after("8760h", now()),
            None,
            "not a number of seconds"
        );
        assert_eq!(
            parse_duration_openai("8760h"),
            Some(Duration::from_secs(31_536_000))
        );
    }

    #[test]
    fn rfc3339_resets() {
        let table = [
            ("2024-09-27T17:29:00Z", Some(MS(60_000))),
            ("2024-09-27T17:28:00.250Z", Some(MS(250))),
            ("2024-09-27T19:29:00+02:00", Some(MS(60_000))),
            ("2024-09-27T12:29:00-05:00", Some(MS(60_000))),
            ("2024-09-27T17:00:00Z", Some(Duration::ZERO)),
            ("2024-09-27T17:29:00", None),
            ("2024-09-27T17:29:00+25:00", None),
            ("2024-13-27T17:29:00Z", None),
            ("tomorrow", None),
            ("", None),
            ("é€😀😀", None),
        ];
        for (input, want) in table {
            assert_eq!(parse_rfc3339_reset(input, now()), want, "input {input:?}");
        }
    }

    #[test]
    fn openai_observation() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let obs = observation(Api::OpenAi, &h, now());
        assert_eq!(obs.requests, Some((59, MS(1_000))));
        assert_eq!(obs.tokens, Some((149_984, MS(360_000))));
        assert_eq!(for_api(Api::OpenAi).exhausted_reset(&h, now()), None);
    }

    #[test]
    fn anthropic_observation_and_exhausted_reset() {
        let h = headers(&[
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2024-09-27T17:28:12Z"),
            ("anthropic-ratelimit-input-tokens-remaining", "0"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2024-09-27T17:28:40Z",
            ),
            ("anthropic-ratelimit-output-tokens-remaining", "8000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2024-09-27T17:28:01Z",
            ),
        ]);
        let obs = observation(Api::Anthropic, &h, now());
        assert_eq!(obs.requests, Some((0, MS(12_000))));
        assert_eq!(
            obs.tokens,
            Some((0, MS(40_000))),
            "input tokens: less remaining"
        );
        assert_eq!(
            for_api(Api::Anthropic).exhausted_reset(&h, now()),
            Some(MS(40_000))
        );
        let h = headers(&[
            ("anthropic-ratelimit-tokens-remaining", "79000"),
            ("anthropic-ratelimit-tokens-reset", "2024-09-27T17:28:06Z"),
        ]);
        assert_eq!(
            observation(Api::Anthropic, &h, now()).tokens,
            Some((79_000, MS(6_000)))
        );
    }

    #[test]
    fn garbage_headers_are_ignored() {
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "lots"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "10"),
            ("x-ratelimit-reset-tokens", "1700000000"),
            ("anthropic-ratelimit-requests-remaining", "-1"),
            ("anthropic-ratelimit-requests-reset", "2024-09-27T17:29:00Z"),
            ("anthropic-ratelimit-tokens-remaining", "0"),
            ("anthropic-ratelimit-tokens-reset", "in a minute"),
        ]);
        for api in Api::ALL {
            assert_eq!(
                observation(api, &h, now()),
                Observation::default(),
                "{api:?}"
            );
            assert_eq!(for_api(api).exhausted_reset(&h, now()), None, "{api:?}");
        }
        let mut bytes = HeaderMap::new();
        bytes.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_bytes(b"\xff1").unwrap(),
        );
        bytes.insert("x-ratelimit-reset-requests", HeaderValue::from_static("1s"));
        assert_eq!(observation(Api::OpenAi, &bytes, now()).requests, None);
    }
}
