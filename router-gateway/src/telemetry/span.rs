//! A traced request's spans: the gateway's server span, from the request's arrival to its
//! answer's end (a stream's last event), and a client span per provider call, built from the
//! receipt's attempts (their span ids were sent to the provider in `traceparent`). Attribute
//! names follow OpenTelemetry's GenAI semantic conventions where they have one, else
//! `llmroute.*`. The prompt and the answer are recorded only with `telemetry.capture_content`
//! on ([`content`](super::content)); a key or a provider's error message never is.

use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use router_core::config::{Api, Registry};
use router_sdk::trace::{SpanId, TraceId, TraceParent};
use router_sdk::{Attempt, AttemptOutcome, ChatChunk, ChatResponse, Message, Receipt};

use super::attributes::{flag, float, int, text, texts};
use super::content::{self, Streamed};
use super::export::Exporter;

/// The gateway's span of one traced request. Ended by [`ServerSpan::end`], or when dropped
/// first (the client went away): either way it is sent, with its provider calls' spans.
#[derive(Debug)]
pub(crate) struct ServerSpan {
    exporter: Exporter,
    trace_id: TraceId,
    span_id: SpanId,
    /// The caller's span, when it sent a `traceparent`.
    parent_id: Option<SpanId>,
    /// `chat` or `embeddings`.
    operation: &'static str,
    /// The model asked for, once read.
    model: Option<String>,
    started: SystemTime,
    attributes: Vec<KeyValue>,
    /// The provider calls' spans, built as their attempts are known.
    calls: Vec<Span>,
    /// With content captured: a streamed answer as it comes. `None`: no prompt or answer text.
    content: Option<Box<Streamed>>,
    /// Set once sent.
    ended: bool,
}

impl ServerSpan {
    pub(crate) fn new(
        exporter: Exporter,
        (trace_id, span_id, parent_id): (TraceId, SpanId, Option<SpanId>),
        operation: &'static str,
        path: &'static str,
        capture_content: bool,
    ) -> Self {
        let attributes = vec![
            text("gen_ai.operation.name", operation),
            text("http.request.method", "POST"),
            text("url.path", path),
        ];
        ServerSpan {
            exporter,
            trace_id,
            span_id,
            parent_id,
            operation,
            model: None,
            started: SystemTime::now(),
            attributes,
            calls: Vec::new(),
            content: capture_content.then(Box::default),
            ended: false,
        }
    }

    /// The trace the request's provider calls join, as children of this span.
    pub(crate) fn for_calls(&self) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            parent_id: self.span_id,
            sampled: true,
        }
    }

    /// What was asked: by whom, for which model, how many tokens at most.
    pub(crate) fn asked(&mut self, asked: Asked<'_>) {
        self.model = Some(asked.model.to_owned());
        let a = &mut self.attributes;
        a.push(text("gen_ai.request.model", asked.model));
        a.push(text("llmroute.request_id", asked.request_id));
        a.push(flag("llmroute.stream", asked.stream));
        if let Some(n) = asked.max_tokens {
            a.push(int("gen_ai.request.max_tokens", n));
        }
        if let Some(tenant) = asked.tenant {
            a.push(text("llmroute.tenant", tenant));
        }
        if let Some(key_id) = asked.key_id {
            a.push(text("llmroute.key_id", key_id));
        }
    }

    /// The prompt, when content is captured: `messages` as the router got them. With
    /// `system_apart` (the caller's API takes its system prompt apart from the conversation),
    /// the leading system messages are the system instructions.
    pub(crate) fn prompt(&mut self, messages: &[Message], system_apart: bool) {
        if self.content.is_some() {
            let prompt = content::prompt(messages, system_apart);
            self.attributes.extend(prompt);
        }
    }

    /// A whole answer's text and tool calls, when content is captured.
    pub(crate) fn answer(&mut self, answer: &ChatResponse) {
        if self.content.is_some() {
            self.attributes.push(content::answer(answer));
        }
    }

    /// A streamed answer's `chunk`, kept when content is captured.
    pub(crate) fn streamed(&mut self, chunk: &ChatChunk) {
        if let Some(content) = self.content.as_mut() {
            content.chunk(chunk);
        }
    }

    /// The answer: who served it, what it used and cost, how long it waited, and its calls.
    pub(crate) fn answered(&mut self, receipt: &Receipt, registry: &Registry) {
        if let Some(content) = self.content.as_mut() {
            content.receipt(receipt);
        }
        let a = &mut self.attributes;
        a.push(text("gen_ai.response.model", &receipt.model));
        a.push(text("llmroute.provider", &receipt.provider));
        if let Some(api) = api_of(registry, &receipt.provider) {
            a.push(text("gen_ai.provider.name", provider_name(api)));
        }
        let deployment = format!("{}/{}", receipt.provider, receipt.model);
        a.push(text("llmroute.deployment", &deployment));
        a.push(int(
            "gen_ai.usage.input_tokens",
            receipt.usage.prompt_tokens,
        ));
        a.push(int(
            "gen_ai.usage.output_tokens",
            receipt.usage.completion_tokens,
        ));
        if let Some(reason) = &receipt.finish_reason {
            a.push(texts("gen_ai.response.finish_reasons", &[reason.as_str()]));
        }
        if let Some(id) = &receipt.response_id {
            a.push(text("gen_ai.response.id", id));
        }
        a.push(float("llmroute.cost_usd", receipt.cost_usd));
        a.push(int("llmroute.waited_ms", millis(receipt.waited)));
        if let Some(place) = receipt.queue_position {
            a.push(int("llmroute.queue_position", u64::from(place)));
        }
        self.attempts(&receipt.attempts, registry);
    }

    /// The provider calls made, each a client span under this one.
    pub(crate) fn attempts(&mut self, attempts: &[Attempt], registry: &Registry) {
        self.attributes
            .push(int("llmroute.attempts", attempts.len() as u64));
        for (n, attempt) in attempts.iter().enumerate() {
            if let Some(span) = self.call_span(n + 1, attempt, registry) {
                self.calls.push(span);
            }
        }
    }

    /// The span of provider call number `n` (from 1), when it was stamped with a span id.
    fn call_span(&self, n: usize, attempt: &Attempt, registry: &Registry) -> Option<Span> {
        let span_id = attempt.span_id?;
        let mut attributes = vec![
            text("gen_ai.operation.name", self.operation),
            text("gen_ai.request.model", &attempt.model),
            text("llmroute.provider", &attempt.provider),
            text(
                "llmroute.deployment",
                &format!("{}/{}", attempt.provider, attempt.model),
            ),
            int("llmroute.attempt", n as u64),
        ];
        if let Some(api) = api_of(registry, &attempt.provider) {
            attributes.push(text("gen_ai.provider.name", provider_name(api)));
        }
        let status = match &attempt.outcome {
            AttemptOutcome::Ok => {
                attributes.push(text("llmroute.outcome", "ok"));
                None
            }
            AttemptOutcome::Failed {
                kind,
                status,
                cooldown,
                ..
            } => {
                attributes.push(text("llmroute.outcome", kind));
                attributes.push(text("error.type", kind));
                if let Some(status) = status {
                    attributes.push(int("http.response.status_code", u64::from(*status)));
                }
                if let Some(c) = cooldown {
                    attributes.push(int("llmroute.cooldown_ms", millis(*c)));
                }
                Some(kind.as_str())
            }
        };
        let name = format!("{} {}", self.operation, attempt.model);
        // The router's clock counts milliseconds: a call that started in the request's first
        // millisecond is not shown before it.
        let start = attempt.started.max(self.started);
        let end = attempt.started + attempt.took;
        let mut span = self.span(name, SpanKind::Client, (start, end), attributes);
        span.span_id = span_id.to_vec();
        span.parent_span_id = self.span_id.to_vec();
        span.status = status.map(error_status);
        Some(span)
    }

    /// Ends the span with the answer's HTTP `status` and `outcome` (`ok`, or the error's code)
    /// and sends it with its calls' spans.
    pub(crate) fn end(mut self, status: u16, outcome: &str) {
        // A server span is an error for the answers the gateway failed to give (5xx), not for
        // the caller's own mistakes (4xx).
        self.finish(status, outcome, status >= 500);
    }

    /// Ends a streamed answer's span (its status was 200) by how the stream `ended`
    /// (`completed`, `broken`, `client_gone`, `shutdown`, `unread`): an error unless it
    /// completed or its client left.
    pub(crate) fn end_stream(mut self, ended: &str) {
        self.attributes.push(text("llmroute.stream.ended", ended));
        if let Some(content) = self.content.take() {
            let completed = ended == "completed";
            self.attributes.push(content.attribute(completed));
        }
        let outcome = if ended == "completed" { "ok" } else { ended };
        let error = !matches!(ended, "completed" | "client_gone");
        self.finish(200, outcome, error);
    }

    fn finish(&mut self, status: u16, outcome: &str, error: bool) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let mut attributes = std::mem::take(&mut self.attributes);
        attributes.push(int("http.response.status_code", u64::from(status)));
        attributes.push(text("llmroute.outcome", outcome));
        if status >= 400 || error {
            attributes.push(text("error.type", outcome));
        }
        let name = match &self.model {
            Some(model) => format!("{} {model}", self.operation),
            None => self.operation.to_owned(),
        };
        let times = (self.started, SystemTime::now());
        let mut span = self.span(name, SpanKind::Server, times, attributes);
        span.span_id = self.span_id.to_vec();
        span.parent_span_id = self.parent_id.map(|p| p.to_vec()).unwrap_or_default();
        span.status = error.then(|| error_status(outcome));
        self.exporter.send(span);
        for call in self.calls.drain(..) {
            self.exporter.send(call);
        }
    }

    /// A span of this trace named `name`, from `start` to `end`.
    fn span(
        &self,
        name: String,
        kind: SpanKind,
        (start, end): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
    ) -> Span {
        Span {
            trace_id: self.trace_id.to_vec(),
            name,
            kind: kind as i32,
            start_time_unix_nano: unix_nanos(start),
            end_time_unix_nano: unix_nanos(end.max(start)),
            attributes,
            ..Default::default()
        }
    }
}

impl Drop for ServerSpan {
    /// Not ended: the client went away first (its request's drop ended it).
    fn drop(&mut self) {
        self.finish(499, "client_closed", false);
    }
}

/// What a request asked for, as its span records it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked<'a> {
    pub(crate) model: &'a str,
    pub(crate) request_id: &'a str,
    pub(crate) stream: bool,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) key_id: Option<&'a str>,
}

/// An error status saying `what` (an error's code or a failure's kind).
fn error_status(what: &str) -> Status {
    Status {
        message: what.to_owned(),
        code: StatusCode::Error as i32,
    }
}

/// The wire format of the provider named `provider`.
fn api_of(registry: &Registry, provider: &str) -> Option<Api> {
    let ids = registry.provider_ids();
    ids.map(|id| registry.provider(id))
        .find(|p| p.name == provider)
        .map(|p| p.api)
}

/// `gen_ai.provider.name` of a wire format: the conventions' well-known values.
fn provider_name(api: Api) -> &'static str {
    match api {
        Api::OpenAi => "openai",
        Api::Anthropic => "anthropic",
        Api::Gemini => "gcp.gemini",
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
