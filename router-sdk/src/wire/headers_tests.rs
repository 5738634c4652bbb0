#![allow(clippy::unwrap_used)]

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
        ("1.0000000019s", Some(Duration::new(1, 1))),
        (".25s", Some(MS(250))),
        ("1.5ms", Some(Duration::from_micros(1_500))),
        ("007s", Some(MS(7_000))),
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
    assert_eq!(obs.input_tokens, Some((0, MS(40_000))));
    assert_eq!(obs.output_tokens, Some((8_000, MS(1_000))));
    assert_eq!(
        obs.tokens, None,
        "input and output are not folded into a combined token count"
    );
    assert_eq!(
        for_api(Api::Anthropic).exhausted_reset(&h, now()),
        Some(MS(40_000))
    );
    let h = headers(&[
        ("anthropic-ratelimit-tokens-remaining", "79000"),
        ("anthropic-ratelimit-tokens-reset", "2024-09-27T17:28:06Z"),
    ]);
    let obs = observation(Api::Anthropic, &h, now());
    assert_eq!(obs.tokens, Some((79_000, MS(6_000))));
    assert_eq!((obs.input_tokens, obs.output_tokens), (None, None));
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
