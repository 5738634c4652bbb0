#![allow(clippy::unwrap_used)]

//! `telemetry:` in the file, and the `OTEL_*` variables over it.

use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::config::{ConfigError, Registry};

const PROVIDERS: &str = r#"
providers:
  - name: p
    api: openai
    base_url: https://example.test/v1
    api_key_env: P_KEY
    models:
      - { name: small, price: { input: 0.1, output: 0.2 } }
"#;

fn registry(telemetry: &str) -> Result<Registry, ConfigError> {
    Registry::from_yaml_str(&format!("{PROVIDERS}{telemetry}"), "t.yaml")
}

/// `telemetry` with the variables of `vars` set.
fn with(telemetry: Telemetry, vars: &[(&str, &str)]) -> Result<Telemetry, String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    telemetry.with_env(|name| vars.get(name).cloned())
}

#[test]
fn without_a_section_there_are_no_traces() {
    let t = registry("").unwrap().telemetry;
    assert_eq!(t, Telemetry::default());
    assert_eq!(t.endpoint, None);
}

#[test]
fn the_section_sets_the_collector_the_ratio_and_the_name() {
    let yaml = "telemetry:\n  endpoint: http://collector:4318/\n  sample_ratio: 0.25\n  service_name: edge\n";
    let t = registry(yaml).unwrap().telemetry;
    assert_eq!(
        t.endpoint.as_deref(),
        Some("http://collector:4318/v1/traces")
    );
    assert_eq!(t.sample_ratio, 0.25);
    assert_eq!(t.service_name, "edge");
}

#[test]
fn bad_values_name_the_field_and_say_what_to_write() {
    let cases = [
        (
            "  endpoint: collector:4318\n",
            "telemetry.endpoint",
            "http://",
        ),
        (
            "  endpoint: http://u:pw@collector\n",
            "telemetry.endpoint",
            "user name or password",
        ),
        ("  sample_ratio: 1.5\n", "telemetry.sample_ratio", "from 0"),
        ("  sample_ratio: most\n", "telemetry.sample_ratio", "from 0"),
        ("  service_name: ' '\n", "telemetry.service_name", "empty"),
        ("  sampler: always\n", "sampler", "unknown field"),
    ];
    for (body, field, words) in cases {
        let e = registry(&format!("telemetry:\n{body}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field) && e.contains(words), "{body}: {e}");
        assert!(!e.contains("pw@"), "{e}");
    }
}

#[test]
fn the_standard_variables_override_the_file() {
    let file = Telemetry {
        endpoint: Some("http://file:4318/v1/traces".into()),
        ..Telemetry::default()
    };
    let t = with(
        file.clone(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otel.example:4318"),
            ("OTEL_SERVICE_NAME", "gw-eu"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,team=ml%20infra",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-token=s3cret%3D%3D"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
    )
    .unwrap();
    assert_eq!(
        t.endpoint.as_deref(),
        Some("https://otel.example:4318/v1/traces")
    );
    assert_eq!(t.service_name, "gw-eu");
    assert_eq!(
        t.resource,
        vec![
            ("deployment.environment".into(), "prod".into()),
            ("team".into(), "ml infra".into())
        ]
    );
    assert_eq!(t.headers, vec![("x-token".into(), "s3cret==".into())]);
    assert!(t.follow_parent);
    assert_eq!(t.sample_ratio, 0.1);
    assert_eq!(t.timeout, Duration::from_millis(2500));
    assert_eq!(t.batch_delay, Duration::from_millis(200));
    // A header's value never shows in Debug.
    assert!(!format!("{t:?}").contains("s3cret"), "{t:?}");
    // The traces endpoint is taken as written; the SDK switch turns traces off.
    let exact = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom")];
    assert_eq!(
        with(file.clone(), &exact).unwrap().endpoint.as_deref(),
        Some("http://c:4318/custom")
    );
    let off = [("OTEL_SDK_DISABLED", "true")];
    assert_eq!(with(file.clone(), &off).unwrap().endpoint, None);
    let always = with(file, &[("OTEL_TRACES_SAMPLER", "always_off")]).unwrap();
    assert_eq!((always.follow_parent, always.sample_ratio), (false, 0.0));
}

#[test]
fn bad_variables_are_named_and_a_headers_value_is_never_shown() {
    let cases = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel:4318", "http://"),
        ("OTEL_TRACES_SAMPLER", "sometimes", "always_on"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "milliseconds"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-token:s3cret", "no `=`"),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-token=s3cret%G1",
            "`x-token`",
        ),
    ];
    for (name, value, words) in cases {
        let e = with(Telemetry::default(), &[(name, value)]).unwrap_err();
        assert!(e.contains(name) && e.contains(words), "{name}={value}: {e}");
        assert!(!e.contains("s3cret"), "{e}");
    }
    let e = with(
        Telemetry::default(),
        &[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ],
    )
    .unwrap_err();
    assert!(e.contains("OTEL_TRACES_SAMPLER_ARG"), "{e}");
}

#[test]
fn prompts_and_answers_are_recorded_only_when_the_file_says_so() {
    assert!(!registry("").unwrap().telemetry.capture_content);
    let off = registry("telemetry:\n  endpoint: http://c:4318\n").unwrap();
    assert!(!off.telemetry.capture_content);
    let on = registry("telemetry:\n  endpoint: http://c:4318\n  capture_content: true\n");
    assert!(on.unwrap().telemetry.capture_content);
    // As every switch of the file: the parser points at the value (line 10, column 20).
    let e = registry("telemetry:\n  capture_content: sometimes\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.yaml:10:20") && e.contains("boolean"), "{e}");
}

#[test]
fn the_capture_variable_wins_over_the_file_in_any_case() {
    let name = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
    let file_on = Telemetry {
        capture_content: true,
        ..Telemetry::default()
    };
    for (file, value, expected) in [
        (Telemetry::default(), "true", true),
        (Telemetry::default(), " TRUE ", true),
        (Telemetry::default(), "True", true),
        (file_on.clone(), "false", false),
        (file_on.clone(), "FALSE", false),
        // Unset (or empty): the file decides.
        (file_on.clone(), "", true),
        (Telemetry::default(), "", false),
    ] {
        let t = with(file, &[(name, value)]).unwrap();
        assert_eq!(t.capture_content, expected, "{name}={value:?}");
    }
    for value in ["yes", "1", "on", "span_only"] {
        let e = with(file_on.clone(), &[(name, value)]).unwrap_err();
        assert!(
            e.contains(name) && e.contains("true or false") && e.contains(value),
            "{value}: {e}"
        );
    }
}
