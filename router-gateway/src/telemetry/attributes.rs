//! Span attributes as OTLP writes them: a key and a typed value.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue};

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// A text attribute.
pub(crate) fn text(key: &str, value: &str) -> KeyValue {
    kv(key, Value::StringValue(value.to_owned()))
}

/// A text attribute that takes its value (a long one is not copied).
pub(crate) fn owned_text(key: &str, value: String) -> KeyValue {
    kv(key, Value::StringValue(value))
}

/// A whole-number attribute.
pub(crate) fn int(key: &str, value: u64) -> KeyValue {
    kv(
        key,
        Value::IntValue(i64::try_from(value).unwrap_or(i64::MAX)),
    )
}

/// A number attribute.
pub(crate) fn float(key: &str, value: f64) -> KeyValue {
    kv(key, Value::DoubleValue(value))
}

/// A yes-or-no attribute.
pub(crate) fn flag(key: &str, value: bool) -> KeyValue {
    kv(key, Value::BoolValue(value))
}

/// A list-of-texts attribute.
pub(crate) fn texts(key: &str, values: &[&str]) -> KeyValue {
    let values = values
        .iter()
        .map(|v| AnyValue {
            value: Some(Value::StringValue((*v).to_owned())),
        })
        .collect();
    kv(key, Value::ArrayValue(ArrayValue { values }))
}
