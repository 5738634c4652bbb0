//! The gateway's Prometheus metrics (`GET /metrics`, OpenMetrics text). Labels name tenants,
//! providers, models and outcomes, never a key or a prompt.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `llmroute_requests_total` | tenant, provider, model, outcome | requests answered, by how they ended (`ok` or the error code) |
//! | `llmroute_tokens_total` | tenant, provider, model, kind | tokens: `prompt`, `cached` (of the prompt), `completion` |
//! | `llmroute_cost_usd_total` | tenant, provider, model | cost at the configured prices |
//! | `llmroute_upstream_attempts_total` | deployment, outcome | provider calls, by outcome (`ok`, `rate_limited`, ...) |
//! | `llmroute_upstream_429_total` | deployment | provider calls answered 429 |
//! | `llmroute_cooldowns_total` | deployment | cooldowns put on a deployment |
//! | `llmroute_admission_wait_seconds` | | time a request waited for capacity |
//! | `llmroute_request_duration_seconds` | | time from the request's arrival to its answer (or the stream's opening) |
//! | `llmroute_router_added_seconds` | | that time less the time in provider calls: what the gateway and the router added, waits included |
//! | `llmroute_deployment_remaining_requests`, `_remaining_tokens`, `_in_flight` | deployment | what the ledger says is left in the current window, read at scrape time |
//! | `llmroute_ledger_errors_total` | | requests that failed because the ledger did not answer, and scrapes that could not read it |
//! | `llmroute_ledger_mode` | mode | 1 for the shared ledger's mode now (`shared`, `local`, `open`), 0 for the others |
//! | `llmroute_ledger_instances` | | instances sharing the limits at the last heartbeat |
//! | `llmroute_ledger_mode_changes_total`, `llmroute_ledger_local_admissions_total` | | mode changes, and admissions made while Redis was away |
//! | `llmroute_usage_records_total` | to | usage records written to the sink as they came (`sink`), to the spill file (`spill`), replayed from it (`replayed`) |
//! | `llmroute_usage_sink_down` | | 1 while the usage sink fails (records go to the spill file) |
//! | `llmroute_streams_total` | ended | streamed answers by how they ended: `completed`, `broken` (the provider's stream failed), `client_gone`, `shutdown` (cut at the gateway's stop), `unread` (dropped past its deadline unread) |
//! | `llmroute_trace_spans_total` | result | spans sent to the collector (`exported`), refused or lost with a failed export (`failed`), dropped for a full export queue (`dropped`); only with `telemetry` on |
//! | `llmroute_config_reloads_total` | result | configuration reloads (SIGHUP, `POST /admin/v1/reload`): `ok`, or `error` (the old configuration kept) |

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use router_core::ledger::Mode;
use router_sdk::{Attempt, AttemptOutcome, Receipt, Router};

use crate::telemetry::Telemetry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    tenant: String,
    provider: String,
    model: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    tenant: String,
    provider: String,
    model: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CostLabels {
    tenant: String,
    provider: String,
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    deployment: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeploymentLabels {
    deployment: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LineLabels {
    deployment: String,
    class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: &'static str,
}

/// Every metric the gateway keeps.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<CostLabels, Counter<f64, AtomicU64>>,
    attempts: Family<AttemptLabels, Counter>,
    upstream_429: Family<DeploymentLabels, Counter>,
    cooldowns: Family<DeploymentLabels, Counter>,
    wait: Histogram,
    duration: Histogram,
    router_added: Histogram,
    remaining_requests: Family<DeploymentLabels, Gauge>,
    remaining_tokens: Family<DeploymentLabels, Gauge>,
    in_flight: Family<DeploymentLabels, Gauge>,
    line_waiting: Family<LineLabels, Gauge>,
    line_wait: Histogram,
    ledger_errors: Counter,
    ledger_mode: Family<ModeLabels, Gauge>,
    ledger_instances: Gauge,
    ledger_mode_changes: Counter,
    ledger_local_admissions: Counter,
    usage_records: Family<ToLabels, Counter>,
    usage_sink_down: Gauge,
    config_reloads: Family<ResultLabels, Counter>,
    streams: Family<EndLabels, Counter>,
    trace_spans: Family<ResultLabels, Counter>,
    /// Each deployment's last call and cooldown cause, for the dashboard and readiness.
    pub(crate) calls: crate::calls::Calls,
}

/// How a reload ended.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// How a streamed answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// Its last event written.
    Completed,
    /// The provider's stream failed; the client got an error event.
    Broken,
    /// The client went away before the end.
    ClientGone,
    /// Cut at the gateway's stop.
    Shutdown,
    /// Dropped past its deadline, no one reading it.
    Unread,
}

impl StreamEnd {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Broken => "broken",
            Self::ClientGone => "client_gone",
            Self::Shutdown => "shutdown",
            Self::Unread => "unread",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    ended: &'static str,
}

/// Where usage records went.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToLabels {
    to: &'static str,
}

/// Who a request was for and who served it, as metrics label it.
#[derive(Debug, Clone)]
pub(crate) struct Served<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) model: &'a str,
}

impl Metrics {
    /// Counts a reload: `ok`, or not (the old configuration kept).
    pub(crate) fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.config_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts a streamed answer by how it ended.
    pub(crate) fn stream_ended(&self, end: StreamEnd) {
        let ended = end.as_str();
        self.streams.get_or_create(&EndLabels { ended }).inc();
    }

    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            requests: Family::default(),
            tokens: Family::default(),
            cost: Family::default(),
            attempts: Family::default(),
            upstream_429: Family::default(),
            cooldowns: Family::default(),
            // 1 ms to about 65 s.
            wait: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            // 50 µs to about 3 s.
            router_added: Histogram::new(exponential_buckets(0.000_05, 2.0, 17)),
            line_waiting: Family::default(),
            line_wait: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            remaining_requests: Family::default(),
            remaining_tokens: Family::default(),
            in_flight: Family::default(),
            ledger_errors: Counter::default(),
            ledger_mode: Family::default(),
            ledger_instances: Gauge::default(),
            ledger_mode_changes: Counter::default(),
            ledger_local_admissions: Counter::default(),
            usage_records: Family::default(),
            usage_sink_down: Gauge::default(),
            config_reloads: Family::default(),
            streams: Family::default(),
            trace_spans: Family::default(),
            calls: Default::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "llmroute_config_reloads",
            "Configuration reloads, by result (ok, or error: the old configuration kept)",
            m.config_reloads.clone(),
        );
        r.register(
            "llmroute_streams",
            "Streamed answers by how they ended: completed, broken, client_gone, shutdown, unread",
            m.streams.clone(),
        );
        r.register(
            "llmroute_trace_spans",
            "Spans sent to the collector (exported), refused or lost with a failed export \
             (failed), or dropped because the export queue was full (dropped)",
            m.trace_spans.clone(),
        );
        r.register(
            "llmroute_requests",
            "Requests answered, by how they ended",
            m.requests.clone(),
        );
        r.register(
            "llmroute_tokens",
            "Tokens by kind: prompt, cached (of the prompt), completion",
            m.tokens.clone(),
        );
        r.register(
            "llmroute_cost_usd",
            "Cost in USD at the configured prices",
            m.cost.clone(),
        );
        r.register(
            "llmroute_upstream_attempts",
            "Provider calls by outcome",
            m.attempts.clone(),
        );
        r.register(
            "llmroute_upstream_429",
            "Provider calls answered 429",
            m.upstream_429.clone(),
        );
        r.register(
            "llmroute_cooldowns",
            "Cooldowns put on a deployment",
            m.cooldowns.clone(),
        );
        r.register(
            "llmroute_admission_wait_seconds",
            "Time a request waited for capacity",
            m.wait.clone(),
        );
        r.register(
            "llmroute_request_duration_seconds",
            "Time from a request's arrival to its answer or its stream's opening",
            m.duration.clone(),
        );
        r.register(
            "llmroute_router_added_seconds",
            "Time a served request spent outside provider calls (waits included)",
            m.router_added.clone(),
        );
        r.register(
            "llmroute_deployment_remaining_requests",
            "Requests left in the current window (RPM), read at scrape time",
            m.remaining_requests.clone(),
        );
        r.register(
            "llmroute_deployment_remaining_tokens",
            "Tokens left in the current window (TPM), read at scrape time",
            m.remaining_tokens.clone(),
        );
        r.register(
            "llmroute_deployment_in_flight",
            "Requests in flight, read at scrape time",
            m.in_flight.clone(),
        );
        r.register(
            "llmroute_line_waiting",
            "Requests waiting in the deployment's line, over every instance, by class",
            m.line_waiting.clone(),
        );
        r.register(
            "llmroute_line_wait_seconds",
            "Time waited by answered requests that stood in a deployment's line",
            m.line_wait.clone(),
        );
        r.register(
            "llmroute_ledger_errors",
            "Requests and scrapes that failed because the ledger did not answer",
            m.ledger_errors.clone(),
        );
        r.register(
            "llmroute_ledger_mode",
            "1 for the mode the shared ledger is in (shared, local, open; see ledger.on_error), \
             read at scrape time",
            m.ledger_mode.clone(),
        );
        r.register(
            "llmroute_ledger_instances",
            "Instances sharing the limits at the last heartbeat",
            m.ledger_instances.clone(),
        );
        r.register(
            "llmroute_ledger_mode_changes",
            "Changes of the shared ledger's mode",
            m.ledger_mode_changes.clone(),
        );
        r.register(
            "llmroute_ledger_local_admissions",
            "Admissions made in local or open mode, Redis being away",
            m.ledger_local_admissions.clone(),
        );
        r.register(
            "llmroute_usage_records",
            "Usage records written to the sink as they came (to=sink), to the spill file \
             (to=spill), and replayed from it (to=replayed)",
            m.usage_records.clone(),
        );
        r.register(
            "llmroute_usage_sink_down",
            "1 while the usage sink fails and records go to the spill file",
            m.usage_sink_down.clone(),
        );
        Self { registry, ..m }
    }

    /// A request that ended with `outcome` (`ok` or the error code) after `elapsed`.
    pub(crate) fn request(&self, who: &Served<'_>, outcome: &str, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                tenant: who.tenant.to_owned(),
                provider: who.provider.to_owned(),
                model: who.model.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.duration.observe(elapsed.as_secs_f64());
        if outcome == "ledger_unavailable" {
            self.ledger_errors.inc();
        }
    }

    /// A served request spent `elapsed` in all, `upstream` of it in provider calls.
    pub(crate) fn router_added(&self, elapsed: Duration, upstream: Duration) {
        self.router_added
            .observe(elapsed.saturating_sub(upstream).as_secs_f64());
    }

    /// What an answer used and cost, how long it waited, and its provider calls.
    pub(crate) fn answered(&self, who: &Served<'_>, receipt: &Receipt) {
        let u = &receipt.usage;
        for (kind, n) in [
            ("prompt", u.prompt_tokens),
            ("cached", u.cached_prompt_tokens),
            ("completion", u.completion_tokens),
        ] {
            let labels = TokenLabels {
                tenant: who.tenant.to_owned(),
                provider: who.provider.to_owned(),
                model: who.model.to_owned(),
                kind,
            };
            self.tokens.get_or_create(&labels).inc_by(n);
        }
        let labels = CostLabels {
            tenant: who.tenant.to_owned(),
            provider: who.provider.to_owned(),
            model: who.model.to_owned(),
        };
        self.cost.get_or_create(&labels).inc_by(receipt.cost_usd);
        self.wait.observe(receipt.waited.as_secs_f64());
        if receipt.queue_position.is_some() {
            self.line_wait.observe(receipt.waited.as_secs_f64());
        }
        self.attempts(&receipt.attempts);
    }

    /// Each provider call: its outcome, a 429, a cooldown.
    pub(crate) fn attempts(&self, attempts: &[Attempt]) {
        for a in attempts {
            let deployment = format!("{}/{}", a.provider, a.model);
            let (outcome, status, cooled) = match &a.outcome {
                AttemptOutcome::Ok => ("ok", None, None),
                AttemptOutcome::Failed {
                    kind,
                    status,
                    cooldown,
                    ..
                } => (kind.as_str(), *status, *cooldown),
            };
            let labels = AttemptLabels {
                deployment: deployment.clone(),
                outcome: outcome.to_owned(),
            };
            self.attempts.get_or_create(&labels).inc();
            let labels = DeploymentLabels { deployment };
            if status == Some(429) {
                self.upstream_429.get_or_create(&labels).inc();
            }
            if cooled.is_some() {
                self.cooldowns.get_or_create(&labels).inc();
            }
            self.calls.seen(&labels.deployment, outcome, status, cooled);
        }
    }

    /// The metrics as OpenMetrics text, with each deployment's headroom read from the ledger
    /// now (one snapshot of every deployment).
    pub(crate) async fn render(&self, router: &Router, telemetry: &Telemetry) -> String {
        if let Some(counts) = telemetry.counts() {
            let follow = |result: &'static str, total: u64| {
                let c = self.trace_spans.get_or_create(&ResultLabels { result });
                c.inc_by(total.saturating_sub(c.get()));
            };
            follow("exported", counts.exported);
            follow("failed", counts.failed);
            follow("dropped", counts.dropped);
        }
        let registry = router.registry();
        let all: Vec<_> = registry.deployment_ids().collect();
        match router.ledger().snapshot(&all).await {
            Ok(snapshots) => {
                for s in snapshots {
                    let labels = DeploymentLabels {
                        deployment: registry.deployment_name(s.deployment),
                    };
                    let u = &s.usage;
                    let left = |limit: Option<u64>, used: u64| {
                        limit.map(|l| i64::try_from(l.saturating_sub(used)).unwrap_or(i64::MAX))
                    };
                    if let Some(n) = left(u.rpm_limit, u.requests) {
                        self.remaining_requests.get_or_create(&labels).set(n);
                    }
                    if let Some(n) = left(u.tpm_limit, u.tokens) {
                        self.remaining_tokens.get_or_create(&labels).set(n);
                    }
                    let flying = i64::try_from(u.in_flight).unwrap_or(i64::MAX);
                    self.in_flight.get_or_create(&labels).set(flying);
                    let batch = s.line.batch.min(s.line.waiting);
                    for (class, n) in [("interactive", s.line.waiting - batch), ("batch", batch)] {
                        let labels = LineLabels {
                            deployment: labels.deployment.clone(),
                            class,
                        };
                        let n = i64::try_from(n).unwrap_or(i64::MAX);
                        self.line_waiting.get_or_create(&labels).set(n);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics: the ledger did not answer; headroom not updated");
                self.ledger_errors.inc();
            }
        }
        if let Some(h) = router.ledger().health() {
            for mode in [Mode::Shared, Mode::Local, Mode::Open] {
                let on = i64::from(mode == h.mode);
                let labels = ModeLabels {
                    mode: mode.as_str(),
                };
                self.ledger_mode.get_or_create(&labels).set(on);
            }
            self.ledger_instances
                .set(i64::try_from(h.instances).unwrap_or(i64::MAX));
            // The ledger counts since start; these counters follow it.
            let follow = |c: &Counter, total: u64| c.inc_by(total.saturating_sub(c.get()));
            follow(&self.ledger_mode_changes, h.changes);
            follow(&self.ledger_local_admissions, h.local_admissions);
        }
        if let Some(recorder) = router.usage() {
            let stats = recorder.stats();
            let follow = |to: &'static str, total: u64| {
                let c = self.usage_records.get_or_create(&ToLabels { to });
                c.inc_by(total.saturating_sub(c.get()));
            };
            follow("sink", stats.written);
            follow("spill", stats.spilled);
            follow("replayed", stats.replayed);
            self.usage_sink_down.set(i64::from(stats.sink_down));
        }
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            tracing::warn!("metrics: could not encode them");
        }
        text
    }
}
