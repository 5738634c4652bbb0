//! Sending finished spans to the collector: a bounded queue a request only ever `try_send`s
//! to, and one task that batches it and posts each batch over OTLP/HTTP (protobuf). A
//! collector that is slow, down or refusing costs requests nothing: spans wait in the queue,
//! and past its size they are dropped and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use router_core::config::Telemetry;
use tokio::sync::{mpsc, oneshot};

use super::attributes::text;

/// Spans waiting to be sent, at most.
const QUEUE: usize = 4096;
/// Spans in one export, at most.
const BATCH: usize = 512;
/// How often a failing collector is logged about, at most.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What became of the spans, since start.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Accepted by the collector.
    pub(crate) exported: AtomicU64,
    /// Refused by it, or lost with an export that failed.
    pub(crate) failed: AtomicU64,
    /// Dropped because the queue was full.
    pub(crate) dropped: AtomicU64,
}

/// The request side of the exporter: where spans are handed in.
#[derive(Debug, Clone)]
pub(crate) struct Exporter {
    spans: mpsc::Sender<Span>,
    flushes: mpsc::Sender<oneshot::Sender<()>>,
    pub(crate) counts: Arc<Counts>,
}

impl Exporter {
    /// Starts the export task for `settings.endpoint` (`None` without one, or outside a
    /// runtime).
    pub(crate) fn start(settings: &Telemetry) -> Option<Self> {
        let endpoint = settings.endpoint.clone()?;
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (spans, queue) = mpsc::channel(QUEUE);
        let (flushes, flush_asks) = mpsc::channel(4);
        let counts = Arc::new(Counts::default());
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()
            .ok()?;
        let task = Task {
            client,
            endpoint,
            headers: settings.headers.clone(),
            resource: resource(settings),
            counts: counts.clone(),
            warned: None,
        };
        runtime.spawn(task.run(queue, flush_asks, settings.batch_delay));
        Some(Exporter {
            spans,
            flushes,
            counts,
        })
    }

    /// Hands `span` in, or drops it when the queue is full: never waits.
    pub(crate) fn send(&self, span: Span) {
        if self.spans.try_send(span).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends what is queued now, and waits at most `within` for it to be sent.
    pub(crate) async fn flush(&self, within: Duration) {
        let (done, sent) = oneshot::channel();
        let asked = async {
            if self.flushes.send(done).await.is_ok() {
                let _ = sent.await;
            }
        };
        let _ = tokio::time::timeout(within, asked).await;
    }
}

/// The export task's state.
struct Task {
    client: reqwest::Client,
    endpoint: String,
    headers: Vec<(String, String)>,
    resource: Resource,
    counts: Arc<Counts>,
    /// When a failure was last logged.
    warned: Option<tokio::time::Instant>,
}

impl Task {
    /// Collects spans and sends them every `delay`, whenever a batch is full, on a flush, and
    /// once more when the last handle is gone.
    async fn run(
        mut self,
        mut queue: mpsc::Receiver<Span>,
        mut flush_asks: mpsc::Receiver<oneshot::Sender<()>>,
        delay: Duration,
    ) {
        let mut batch = Vec::new();
        let mut tick = tokio::time::interval(delay);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                span = queue.recv() => match span {
                    Some(span) => {
                        batch.push(span);
                        if batch.len() >= BATCH {
                            self.export(&mut batch).await;
                        }
                    }
                    None => break,
                },
                _ = tick.tick() => self.export(&mut batch).await,
                Some(done) = flush_asks.recv() => {
                    while let Ok(span) = queue.try_recv() {
                        batch.push(span);
                    }
                    self.export(&mut batch).await;
                    let _ = done.send(());
                }
            }
        }
        self.export(&mut batch).await;
    }

    /// Posts `batch` (emptying it), and counts how that went.
    async fn export(&mut self, batch: &mut Vec<Span>) {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let n = spans.len() as u64;
        let body = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "llmroute".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..Default::default()
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
        .encode_to_vec();
        let mut request = self
            .client
            .post(&self.endpoint)
            .header("content-type", "application/x-protobuf");
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let problem = match request.body(body).send().await {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("answered {}", r.status())),
            // Without the URL: the error's text is the transport's.
            Err(e) => Some(e.without_url().to_string()),
        };
        match problem {
            None => self.counts.exported.fetch_add(n, Ordering::Relaxed),
            Some(problem) => {
                self.warn(n, &problem);
                self.counts.failed.fetch_add(n, Ordering::Relaxed)
            }
        };
    }

    /// Logs a failed export, at most once per [`WARN_EVERY`].
    fn warn(&mut self, n: u64, problem: &str) {
        let now = tokio::time::Instant::now();
        if self.warned.is_some_and(|at| now < at + WARN_EVERY) {
            return;
        }
        self.warned = Some(now);
        let endpoint = &self.endpoint;
        tracing::warn!(
            spans = n,
            "telemetry: the collector at {endpoint} {problem}; spans lost (logged once a minute at most)"
        );
    }
}

/// The resource every span is of: the service, its version, and `settings.resource`.
fn resource(settings: &Telemetry) -> Resource {
    let mut attributes: Vec<KeyValue> = vec![
        text("service.name", &settings.service_name),
        text("service.version", env!("CARGO_PKG_VERSION")),
        text("telemetry.sdk.name", "llmroute"),
        text("telemetry.sdk.language", "rust"),
    ];
    for (key, value) in &settings.resource {
        attributes.retain(|a| &a.key != key);
        attributes.push(text(key, value));
    }
    Resource {
        attributes,
        ..Default::default()
    }
}
