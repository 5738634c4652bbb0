//! What a request's headers ask of the router (a chat's, an embedding request's): its priority
//! (unless its key pins one), its deadline, the headers passed on to the provider, and the
//! providers it may go to. Pure: the headers, the caller and the configuration in, the
//! request's settings or a 400 naming the header out.

use std::time::Duration;

use axum::http::HeaderMap;
use router_core::config::Registry;
use router_sdk::{ChatRequest, Priority};

use super::header;
use crate::auth::Caller;
use crate::errors::ApiError;

/// The longest `x-llmroute-timeout`: a day.
const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// What a request's headers ask of the router, for any route that routes.
#[derive(Debug)]
pub(crate) struct Options {
    pub(crate) priority: Priority,
    pub(crate) deadline: Option<Duration>,
    /// The headers of `gateway.forward_headers` the request has, each value in order.
    pub(crate) forwarded: Vec<(String, String)>,
    /// `x-llmroute-providers`, when sent.
    pub(crate) providers: Option<Vec<String>>,
}

/// What `headers` ask of the router for `caller`, under `registry`'s configuration.
pub(crate) fn read(
    headers: &HeaderMap,
    caller: &Caller,
    registry: &Registry,
) -> Result<Options, ApiError> {
    let priority = priority(caller.priority, header(headers, "x-llmroute-priority"))?;
    let deadline = header(headers, "x-llmroute-timeout")
        .map(deadline)
        .transpose()?;
    let mut forwarded = Vec::new();
    for name in &registry.gateway.forward_headers {
        for value in headers.get_all(name.as_str()) {
            if let Ok(value) = value.to_str() {
                forwarded.push((name.clone(), value.to_owned()));
            }
        }
    }
    let providers = header(headers, "x-llmroute-providers")
        .map(|list| caller.providers_asked(registry, list))
        .transpose()?;
    Ok(Options {
        priority,
        deadline,
        forwarded,
        providers,
    })
}

/// Sets on `req` what `headers` ask of it for `caller`, under `registry`'s configuration.
pub(crate) fn apply(
    req: &mut ChatRequest,
    headers: &HeaderMap,
    caller: &Caller,
    registry: &Registry,
) -> Result<(), ApiError> {
    let options = read(headers, caller, registry)?;
    req.priority = options.priority;
    if options.deadline.is_some() {
        req.deadline = options.deadline;
    }
    req.headers.extend(options.forwarded);
    if let Some(providers) = options.providers {
        req.providers = providers;
    }
    Ok(())
}

/// The key's pinned priority, else `x-llmroute-priority` (`asked`), else interactive.
fn priority(pinned: Option<Priority>, asked: Option<&str>) -> Result<Priority, ApiError> {
    Ok(match (pinned, asked) {
        (Some(pinned), _) => pinned,
        (None, None | Some("interactive")) => Priority::Interactive,
        (None, Some("batch")) => Priority::Batch,
        (None, Some(other)) => {
            return Err(ApiError::bad_request(format!(
                "header `x-llmroute-priority`: `{other}` is not `interactive` or `batch`"
            )));
        }
    })
}

/// `x-llmroute-timeout`: seconds, above 0 and at most a day.
fn deadline(secs: &str) -> Result<Duration, ApiError> {
    secs.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= MAX_TIMEOUT_SECS)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "header `x-llmroute-timeout`: `{secs}` is not a number of seconds in (0, 86400]"
            ))
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn a_pinned_priority_wins_else_the_header_else_interactive() {
        use Priority::{Batch, Interactive};
        #[rustfmt::skip]
        let table = [
            (Some(Batch), Some("interactive"), Ok(Batch)),
            (Some(Interactive), Some("nonsense"), Ok(Interactive)),
            (None, None, Ok(Interactive)),
            (None, Some("interactive"), Ok(Interactive)),
            (None, Some("batch"), Ok(Batch)),
            (None, Some("Batch"), Err("`Batch` is not `interactive` or `batch`")),
            (None, Some(""), Err("`` is not")),
        ];
        for (pinned, asked, want) in table {
            let got = priority(pinned, asked).map_err(|e| e.body().to_string());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{pinned:?} {asked:?}"),
                (Err(got), Err(words)) => assert!(got.contains(words), "{got}"),
                (got, want) => panic!("{pinned:?} {asked:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_timeout_is_seconds_above_zero_up_to_a_day() {
        #[rustfmt::skip]
        let table = [
            ("1", Some(Duration::from_secs(1))),
            ("0.25", Some(Duration::from_millis(250))),
            ("86400", Some(Duration::from_secs(86_400))),
            ("86400.5", None), ("0", None), ("-1", None), ("NaN", None), ("inf", None),
            ("1e400", None), ("soon", None), ("", None),
        ];
        for (secs, want) in table {
            let got = deadline(secs).ok();
            assert_eq!(got, want, "{secs:?}");
        }
        let refused = deadline("soon").unwrap_err().body().to_string();
        assert!(
            refused.contains("`x-llmroute-timeout`: `soon`"),
            "{refused}"
        );
    }

    #[test]
    fn only_configured_headers_pass_on_every_value_of_them_in_order() {
        let yaml = "providers:\n  - name: oa\n    api: openai\n    base_url: http://x/v1\n    \
                    api_key_env: K\n    models:\n      - { name: m, price: { input: 1, output: 1 } }\n\
                    gateway:\n  forward_headers: [traceparent, x-team]\n";
        let registry = Registry::from_yaml_str(yaml, "t.yaml").unwrap();
        let mut headers = HeaderMap::new();
        headers.append("traceparent", HeaderValue::from_static("00-a-b-01"));
        headers.append("x-team", HeaderValue::from_static("search"));
        headers.append("x-team", HeaderValue::from_static("ads"));
        headers.append("x-secret", HeaderValue::from_static("nope"));
        headers.append("x-team", HeaderValue::from_bytes(b"\xff").unwrap());
        let mut req = ChatRequest::new("hi");
        apply(&mut req, &headers, &Caller::default(), &registry).unwrap();
        let sent: Vec<(&str, &str)> = req
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            sent,
            [
                ("traceparent", "00-a-b-01"),
                ("x-team", "search"),
                ("x-team", "ads")
            ]
        );
        assert_eq!(req.priority, Priority::Interactive);
        assert_eq!(req.deadline, None);
    }
}
