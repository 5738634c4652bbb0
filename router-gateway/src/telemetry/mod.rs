//! Traces of the gateway's requests (`telemetry:` and the `OTEL_*` variables): which requests
//! are traced, their spans ([`span`]), and the export to the collector ([`export`]). Without a
//! collector configured, nothing here runs on a request's path but one `Option` check; without
//! `capture_content`, no prompt or answer text is copied ([`content`]).

mod attributes;
mod capped;
mod content;
mod export;
mod span;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::HeaderMap;
use router_sdk::trace::{TraceId, TraceParent};

pub(crate) use span::{Asked, ServerSpan};

/// Which requests are traced, and where their spans go.
#[derive(Debug)]
pub(crate) struct Telemetry {
    exporter: Option<export::Exporter>,
    sample_ratio: f64,
    follow_parent: bool,
    /// Record prompts and answers in the server spans.
    capture_content: bool,
}

/// What became of the spans since start: sent, refused or lost, dropped for a full queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SpanCounts {
    pub(crate) exported: u64,
    pub(crate) failed: u64,
    pub(crate) dropped: u64,
}

impl Telemetry {
    /// Traces as `settings` say (their export task started), or none without a collector.
    pub(crate) fn start(settings: &router_core::config::Telemetry) -> Self {
        Telemetry {
            exporter: export::Exporter::start(settings),
            sample_ratio: settings.sample_ratio,
            follow_parent: settings.follow_parent,
            capture_content: settings.capture_content,
        }
    }

    /// The span of a request that arrived with `headers`, when it is traced: it joins the
    /// caller's trace (`traceparent`), else starts one. `operation` is `chat` or `embeddings`;
    /// `path` the route.
    pub(crate) fn begin(
        &self,
        headers: &HeaderMap,
        operation: &'static str,
        path: &'static str,
    ) -> Option<ServerSpan> {
        let exporter = self.exporter.as_ref()?;
        let parent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(TraceParent::parse);
        let trace_id = match parent {
            Some(p) => p.trace_id,
            None => fastrand::u128(1..).to_be_bytes(),
        };
        let sampled = match parent {
            Some(p) if self.follow_parent => p.sampled,
            _ => keeps(&trace_id, self.sample_ratio),
        };
        if !sampled {
            return None;
        }
        let span_id = fastrand::u64(1..).to_be_bytes();
        let ids = (trace_id, span_id, parent.map(|p| p.parent_id));
        // Embeddings' input is never recorded: the conventions have no attribute for it.
        let capture = self.capture_content && operation == "chat";
        Some(ServerSpan::new(
            exporter.clone(),
            ids,
            operation,
            path,
            capture,
        ))
    }

    /// The spans' fate so far; `None` without a collector.
    pub(crate) fn counts(&self) -> Option<SpanCounts> {
        let c = &self.exporter.as_ref()?.counts;
        Some(SpanCounts {
            exported: c.exported.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        })
    }

    /// Sends the spans queued now, waiting at most `within`.
    pub(crate) async fn flush(&self, within: Duration) {
        if let Some(exporter) = &self.exporter {
            exporter.flush(within).await;
        }
    }
}

/// Whether a trace started here is kept at `ratio`: by its id's low 63 bits, as OpenTelemetry's
/// ratio sampler decides, so every service sampling at that ratio keeps the same traces.
fn keeps(trace_id: &TraceId, ratio: f64) -> bool {
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let low = u64::from_be_bytes(low) & (u64::MAX >> 1);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let bound = (ratio * (1u64 << 63) as f64) as u64;
    ratio >= 1.0 || low < bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_keeps_its_share_of_traces() {
        let mut rng = fastrand::Rng::with_seed(7);
        let ids: Vec<TraceId> = (0..10_000).map(|_| rng.u128(1..).to_be_bytes()).collect();
        let kept = |ratio| ids.iter().filter(|id| keeps(id, ratio)).count();
        assert_eq!(kept(0.0), 0);
        assert_eq!(kept(1.0), 10_000);
        let quarter = kept(0.25);
        assert!((2_300..=2_700).contains(&quarter), "{quarter}");
    }
}
