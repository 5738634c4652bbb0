//! Checks of numeric flags: each turns a value clap parsed into what the command uses, or a
//! usage error (exit status 2) naming the flag, the value and the accepted range. Commands run
//! them before loading the configuration, so a bad flag is the first thing reported, and a value
//! out of range never reaches a conversion that could panic or a provider that would refuse it.

use std::time::Duration;

use anyhow::anyhow;

use crate::failure::Failure;

/// The longest `chat --timeout`: one day, as the gateway's `x-llmroute-timeout`.
pub(crate) const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// The shortest `quota --watch` interval: refreshing faster only loads the state store.
pub(crate) const MIN_WATCH_SECS: f64 = 0.1;

/// The longest `quota --watch` interval: one day.
pub(crate) const MAX_WATCH_SECS: f64 = 86_400.0;

/// The highest `chat --temperature` a supported API takes (OpenAI's and Gemini's; Anthropic's
/// is 1).
pub(crate) const MAX_TEMPERATURE: f64 = 2.0;

/// The largest `chat --max-tokens`: 2^32 - 1, far above any model's output, and small enough
/// that no token count built from it can overflow.
pub(crate) const MAX_TOKENS: u64 = u32::MAX as u64;

/// `--timeout SECS` of `chat`: above 0, at most [`MAX_TIMEOUT_SECS`].
pub(crate) fn timeout(secs: f64) -> Result<Duration, Failure> {
    seconds(
        "--timeout",
        secs,
        (0.0, MAX_TIMEOUT_SECS),
        "e.g. --timeout 30",
    )
}

/// `--watch SECS` of `quota`: from [`MIN_WATCH_SECS`] to [`MAX_WATCH_SECS`].
pub(crate) fn watch(secs: f64) -> Result<Duration, Failure> {
    seconds(
        "--watch",
        secs,
        (MIN_WATCH_SECS, MAX_WATCH_SECS),
        "e.g. --watch 5",
    )
}

/// `--temperature T` of `chat`: from 0 to [`MAX_TEMPERATURE`]. NaN and infinities, which no
/// JSON body can carry, are refused rather than dropped.
pub(crate) fn temperature(t: f64) -> Result<f64, Failure> {
    number_within(
        "--temperature",
        t,
        (0.0, MAX_TEMPERATURE),
        "e.g. --temperature 0.7 (Anthropic models take at most 1)",
    )
}

/// `--max-tokens N` of `chat`: from 1 to [`MAX_TOKENS`].
pub(crate) fn max_tokens(n: u64) -> Result<u64, Failure> {
    whole_within(
        "--max-tokens",
        n,
        (1, MAX_TOKENS),
        "leave it out for the model's own cap",
    )
}

/// A number given to `flag`: finite, from `min` to `max` (both included); `hint` says what to
/// write.
pub(crate) fn number_within(
    flag: &str,
    x: f64,
    (min, max): (f64, f64),
    hint: &str,
) -> Result<f64, Failure> {
    if (min..=max).contains(&x) {
        return Ok(x);
    }
    Err(Failure::usage(anyhow!(
        "{flag}: must be a number from {} to {}, got {}; {hint}",
        number(min),
        number(max),
        number(x)
    )))
}

/// A whole number given to `flag`, from `min` to `max` (both included); `hint` says what to
/// write.
pub(crate) fn whole_within(
    flag: &str,
    n: u64,
    (min, max): (u64, u64),
    hint: &str,
) -> Result<u64, Failure> {
    if (min..=max).contains(&n) {
        return Ok(n);
    }
    Err(Failure::usage(anyhow!(
        "{flag}: must be a whole number from {min} to {max}, got {n}; {hint}"
    )))
}

/// A number of seconds given to `flag`, at least `min` (above 0 when `min` is 0) and at most
/// `max`, as a [`Duration`] (never zero); `hint` says what to write.
fn seconds(flag: &str, secs: f64, (min, max): (f64, f64), hint: &str) -> Result<Duration, Failure> {
    let in_range = secs >= min && secs > 0.0 && secs <= max;
    let duration = Some(secs)
        .filter(|_| in_range)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero());
    duration.ok_or_else(|| {
        let range = if min > 0.0 {
            format!("from {min} to {max}")
        } else {
            format!("above 0 and at most {max}")
        };
        Failure::usage(anyhow!(
            "{flag}: must be a number of seconds {range}, got {}; {hint}",
            number(secs)
        ))
    })
}

/// `x` as a person would write it: `2.5`, `1e300` (not three hundred digits), `NaN`, `inf`.
fn number(x: f64) -> String {
    let tiny = x != 0.0 && x.abs() < 1e-6;
    if x.is_finite() && (x.abs() >= 1e15 || tiny) {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[track_caller]
    fn refused<T: std::fmt::Debug>(result: Result<T, Failure>, parts: &[&str]) {
        let failure = result.unwrap_err();
        assert_eq!(failure.code(), 2, "{failure:?}");
        let msg = failure.message();
        for part in parts {
            assert!(msg.contains(part), "{part:?} missing from: {msg}");
        }
    }

    #[test]
    fn seconds_out_of_range_are_refused_naming_the_flag_and_the_bound() {
        for secs in [1e300, f64::INFINITY, f64::NAN, 0.0, -1.0, 86_400.5, 1e-300] {
            refused(timeout(secs), &["--timeout", "above 0 and at most 86400"]);
            refused(watch(secs), &["--watch", "from 0.1 to 86400"]);
        }
        refused(timeout(1e300), &["got 1e300"]);
        refused(watch(0.05), &["got 0.05"]);
    }

    #[test]
    fn seconds_in_range_are_kept() {
        assert_eq!(timeout(2.5).unwrap(), Duration::from_millis(2500));
        assert_eq!(timeout(86_400.0).unwrap(), Duration::from_secs(86_400));
        assert_eq!(watch(0.1).unwrap(), Duration::from_millis(100));
        assert_eq!(watch(2.0).unwrap(), Duration::from_secs(2));
    }

    #[test]
    fn a_temperature_must_be_a_number_from_0_to_2() {
        for t in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.1, 2.01] {
            refused(temperature(t), &["--temperature", "from 0 to 2"]);
        }
        refused(temperature(f64::NAN), &["got NaN"]);
        for t in [0.0, 0.7, 1.0, 2.0] {
            assert_eq!(temperature(t).unwrap(), t);
        }
    }

    #[test]
    fn max_tokens_must_be_at_least_1() {
        refused(
            max_tokens(0),
            &["--max-tokens", "from 1 to 4294967295", "got 0"],
        );
        refused(
            max_tokens(u64::MAX),
            &["--max-tokens", "from 1 to 4294967295"],
        );
        assert_eq!(max_tokens(1).unwrap(), 1);
        assert_eq!(max_tokens(4096).unwrap(), 4096);
    }
}
