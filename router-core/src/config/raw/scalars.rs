//! The raw scalars and mappings: numbers as written, and named entries in the order written.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::At;

/// A mapping from names to values, in the order written, each name with its line. The parser
/// rejects a key written twice; keys written differently with the same text (`1`, `"1"`) get
/// here, and validation rejects them.
#[derive(Debug)]
pub(crate) struct Named<V>(pub(crate) Vec<(At<String>, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Named<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(NamedVisitor(PhantomData))
    }
}

/// Collects the entries of a mapping in order.
struct NamedVisitor<V>(PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for NamedVisitor<V> {
    type Value = Named<V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping of names to values")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Named<V>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Named(entries))
    }
}

/// A number as written, before checking: validation decides what is acceptable where, so that
/// `0`, `-1`, `1.5`, `.nan` and `lots` all get a message naming the field and what to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Number {
    /// A whole number.
    Int(i128),
    /// A number with a fraction or exponent, or `.nan` / `.inf`.
    Float(f64),
    /// Anything else that is a scalar (text, a boolean).
    Text(String),
}

impl Number {
    /// The value as a float, if it is a number at all (NaN and infinities included).
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            // Config amounts are far below 2^53, where every whole number is exact as f64.
            #[allow(clippy::cast_precision_loss)]
            Number::Int(n) => Some(n as f64),
            Number::Float(x) => Some(x),
            Number::Text(_) => None,
        }
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Int(n) => write!(f, "{n}"),
            // As written: `500.0` stays `500.0` (`{x}` would show `500`), `1e300` stays short.
            Number::Float(x) => write!(f, "{x:?}"),
            Number::Text(t) => write!(f, "`{t}`"),
        }
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NumberVisitor)
    }
}

/// Accepts every scalar; maps and sequences are type errors.
struct NumberVisitor;

impl Visitor<'_> for NumberVisitor {
    type Value = Number;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
        Ok(Number::Int(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
        Ok(Number::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Number, E> {
        Ok(Number::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Number, E> {
        Ok(i128::try_from(v).map_or(Number::Text(v.to_string()), Number::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
        Ok(Number::Float(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Number, E> {
        Ok(Number::Text(v.to_string()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Number, E> {
        Ok(Number::Text(v.to_owned()))
    }
}
