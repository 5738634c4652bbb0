//! An OTLP/HTTP trace collector for tests, built on the official protobuf messages: it takes
//! `POST /v1/traces` (protobuf), hands each span to the test in arrival order, and answers as
//! told: accepted, refused with a status, or never (holding the export open).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::mpsc;

/// How the collector answers an export.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// 200: taken.
    Accept,
    /// This status, spans dropped.
    Refuse(u16),
    /// Never: the export waits until the client gives up.
    Hang,
}

/// A running collector.
#[derive(Debug)]
pub struct Collector {
    /// Its base URL (`http://127.0.0.1:PORT`): spans go to `{url}/v1/traces`.
    pub url: String,
    exports: mpsc::UnboundedReceiver<Export>,
    /// Spans received and not yet read.
    pending: std::collections::VecDeque<Span>,
}

/// One export as the collector read it.
#[derive(Debug)]
pub struct Export {
    /// Its resource's attributes.
    pub resource: Vec<KeyValue>,
    /// Its spans, in order.
    pub spans: Vec<Span>,
    /// Its request headers, lowercase names.
    pub headers: Vec<(String, String)>,
}

#[derive(Clone)]
struct Shared {
    exports: mpsc::UnboundedSender<Export>,
    answer: Answer,
}

impl Collector {
    /// A collector on a free loopback port, answering every export with `answer`.
    pub async fn start(answer: Answer) -> Self {
        let (tx, exports) = mpsc::unbounded_channel();
        let shared = Shared {
            exports: tx,
            answer,
        };
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(take))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector {
            url,
            exports,
            pending: Default::default(),
        }
    }

    /// The next export, or a failed test after a minute without one.
    pub async fn next_export(&mut self) -> Export {
        let next = tokio::time::timeout(Duration::from_secs(60), self.exports.recv());
        next.await
            .expect("no export reached the collector within a minute")
            .expect("the collector stopped")
    }

    /// The next span, in arrival order.
    pub async fn next_span(&mut self) -> Span {
        loop {
            if let Some(span) = self.pending.pop_front() {
                return span;
            }
            let export = self.next_export().await;
            self.pending.extend(export.spans);
        }
    }

    /// Spans in arrival order until one `last` says is the last; it is included.
    pub async fn spans_until(&mut self, last: impl Fn(&Span) -> bool) -> Vec<Span> {
        let mut spans = Vec::new();
        loop {
            let span = self.next_span().await;
            let done = last(&span);
            spans.push(span);
            if done {
                return spans;
            }
        }
    }
}

async fn take(
    State(shared): State<Shared>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> StatusCode {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut export = Export {
        resource: Vec::new(),
        spans: Vec::new(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
    };
    for rs in request.resource_spans {
        export
            .resource
            .extend(rs.resource.map(|r| r.attributes).unwrap_or_default());
        for ss in rs.scope_spans {
            export.spans.extend(ss.spans);
        }
    }
    let _ = shared.exports.send(export);
    match shared.answer {
        Answer::Accept => StatusCode::OK,
        Answer::Refuse(status) => StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        Answer::Hang => std::future::pending().await,
    }
}

/// The value of attribute `key` among `attributes`, as text (numbers and flags written out,
/// lists joined with `,`).
pub fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let kv = attributes.iter().find(|a| a.key == key)?;
    kv.value.as_ref().map(shown)
}

/// Attribute `key` of `span`, as [`attribute`] shows it.
pub fn span_attribute(span: &Span, key: &str) -> Option<String> {
    attribute(&span.attributes, key)
}

fn shown(value: &AnyValue) -> String {
    match &value.value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(n)) => n.to_string(),
        Some(Value::DoubleValue(x)) => x.to_string(),
        Some(Value::ArrayValue(list)) => {
            let items: Vec<String> = list.values.iter().map(shown).collect();
            items.join(",")
        }
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
