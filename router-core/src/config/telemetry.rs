//! `telemetry:`: traces of the gateway's requests, sent to an OpenTelemetry collector over
//! OTLP/HTTP (protobuf). The standard `OTEL_*` variables set what the file does not, or
//! override it ([`Telemetry::with_env`]); the collector's headers (often a token) come from
//! `OTEL_EXPORTER_OTLP_HEADERS` only, never from the file. Prompts and answers are recorded only
//! when `capture_content` (or `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`) turns them on.

use std::fmt;
use std::time::Duration;

use super::base_url;

/// Where traces go and which are kept.
#[derive(Clone, PartialEq)]
pub struct Telemetry {
    /// The URL spans are posted to (`.../v1/traces`); `None`: no traces.
    pub endpoint: Option<String>,
    /// The share of requests traced when the caller sent no `traceparent` (0 to 1).
    pub sample_ratio: f64,
    /// A caller's `traceparent` decides, by its sampled flag (the default); else the ratio
    /// decides for every request.
    pub follow_parent: bool,
    /// `service.name` of the spans.
    pub service_name: String,
    /// More resource attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    /// Headers sent to the collector (`OTEL_EXPORTER_OTLP_HEADERS`): may hold a token.
    pub headers: Vec<(String, String)>,
    /// How long an export may take before it is dropped.
    pub timeout: Duration,
    /// How long spans wait to be sent in one batch.
    pub batch_delay: Duration,
    /// Record the prompt and the answer's text in the server span (the GenAI conventions'
    /// `gen_ai.input.messages` and `gen_ai.output.messages`). Off by default: prompts may hold
    /// personal data.
    pub capture_content: bool,
}

/// Shows the headers' names only.
impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Telemetry")
            .field("endpoint", &self.endpoint)
            .field("sample_ratio", &self.sample_ratio)
            .field("follow_parent", &self.follow_parent)
            .field("service_name", &self.service_name)
            .field("resource", &self.resource)
            .field("headers (values hidden)", &headers)
            .field("timeout", &self.timeout)
            .field("batch_delay", &self.batch_delay)
            .field("capture_content", &self.capture_content)
            .finish()
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            endpoint: None,
            sample_ratio: 1.0,
            follow_parent: true,
            service_name: "llmroute".to_owned(),
            resource: Vec::new(),
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            batch_delay: Duration::from_secs(1),
            capture_content: false,
        }
    }
}

impl Telemetry {
    /// `base` with `/v1/traces` added, as OTLP/HTTP says of a collector's base URL; the error
    /// says what is wrong with it.
    pub fn traces_url(base: &str) -> Result<String, String> {
        let base = base_url::check(base)?;
        Ok(format!("{base}/v1/traces"))
    }

    /// These settings with the standard variables `var` reads applied over them:
    /// `OTEL_SDK_DISABLED`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is) or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (a base), `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
    /// `OTEL_TRACES_SAMPLER` and `_ARG`, `OTEL_BSP_SCHEDULE_DELAY`,
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`. The error names the variable, and
    /// never shows a header's value.
    pub fn with_env(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            let url = base_url::check(url.trim())
                .map_err(|e| format!("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: {e}"))?;
            self.endpoint = Some(url);
        } else if let Some(base) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            let url = Self::traces_url(base.trim())
                .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
            self.endpoint = Some(url);
        }
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            self.endpoint = None;
        }
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(text) = var(name) {
                let pairs = pairs(&text).map_err(|e| format!("{name}: {e}"))?;
                self.headers.extend(pairs);
            }
        }
        for name in [
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        ] {
            if let Some(ms) = var(name) {
                self.timeout = millis(name, &ms)?;
            }
        }
        if let Some(ms) = var("OTEL_BSP_SCHEDULE_DELAY") {
            self.batch_delay = millis("OTEL_BSP_SCHEDULE_DELAY", &ms)?;
        }
        if let Some(name) = var("OTEL_SERVICE_NAME") {
            self.service_name = name.trim().to_owned();
        }
        if let Some(text) = var("OTEL_RESOURCE_ATTRIBUTES") {
            let pairs = pairs(&text).map_err(|e| format!("OTEL_RESOURCE_ATTRIBUTES: {e}"))?;
            self.resource.extend(pairs);
        }
        if let Some(sampler) = var("OTEL_TRACES_SAMPLER") {
            self.sampler(sampler.trim(), var("OTEL_TRACES_SAMPLER_ARG"))?;
        }
        if let Some(text) = var(CAPTURE_CONTENT) {
            self.capture_content =
                switch(text.trim()).map_err(|e| format!("{CAPTURE_CONTENT}: {e}"))?;
        }
        Ok(self)
    }

    /// `OTEL_TRACES_SAMPLER` and its argument.
    fn sampler(&mut self, name: &str, arg: Option<String>) -> Result<(), String> {
        let (follow, ratio) = match name {
            "always_on" => (false, Some(1.0)),
            "always_off" => (false, Some(0.0)),
            "traceidratio" => (false, None),
            "parentbased_always_on" => (true, Some(1.0)),
            "parentbased_always_off" => (true, Some(0.0)),
            "parentbased_traceidratio" => (true, None),
            other => {
                return Err(format!(
                    "OTEL_TRACES_SAMPLER: `{other}` is not a sampler llmroute knows; write \
                     always_on, always_off, traceidratio, parentbased_always_on, \
                     parentbased_always_off or parentbased_traceidratio"
                ));
            }
        };
        self.follow_parent = follow;
        self.sample_ratio = match (ratio, arg) {
            (Some(r), _) => r,
            // The standard's default ratio.
            (None, None) => 1.0,
            (None, Some(arg)) => {
                ratio_of(arg.trim()).map_err(|e| format!("OTEL_TRACES_SAMPLER_ARG: {e}"))?
            }
        };
        Ok(())
    }
}

/// The GenAI conventions' switch for prompt and answer text in spans.
const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// `true` or `false`, in any case.
fn switch(text: &str) -> Result<bool, String> {
    if text.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if text.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(format!("`{text}` is not a switch; write true or false"))
    }
}

/// A sampling ratio written as text: a number from 0 to 1.
fn ratio_of(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "`{text}` is not a ratio; write a number from 0 (none) to 1 (every request)"
        )),
    }
}

/// Milliseconds written as text, as a duration; at most a minute.
fn millis(name: &str, text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(ms) if (1..=60_000).contains(&ms) => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "{name}: `{}` is not a number of milliseconds from 1 to 60000",
            text.trim()
        )),
    }
}

/// `key=value,key2=value2` with values percent-encoded (W3C Baggage, as OTLP's variables are
/// written). The error names a malformed entry by its key, never by its value.
fn pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for entry in text.split(',').filter(|e| !e.trim().is_empty()) {
        let Some((key, value)) = entry.split_once('=') else {
            return Err(
                "an entry has no `=`; write key=value pairs separated by commas".to_owned(),
            );
        };
        let key = key.trim();
        if key.is_empty() {
            return Err("an entry has no key before `=`; write key=value".to_owned());
        }
        let value = percent_decoded(value.trim())
            .ok_or_else(|| format!("the value of `{key}` has a malformed %-escape"))?;
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

/// `text` with its `%XX` escapes decoded; `None` when one is malformed or the result is not
/// UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[path = "telemetry_tests.rs"]
mod tests;
