//! `usage:` as written: the sink alone (`usage: postgres://...`) or a map with `sink`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::Number;

/// `usage:` as written: the sink alone, or the map.
#[derive(Debug)]
pub(crate) enum RawUsage {
    Sink(String),
    Map(RawUsageMap),
}

/// `usage:` written as a map.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUsageMap {
    #[serde(default)]
    pub(crate) sink: Option<String>,
    #[serde(default)]
    pub(crate) schema: Option<String>,
    #[serde(default)]
    pub(crate) spill: Option<String>,
    #[serde(default)]
    pub(crate) batch: Option<Number>,
    #[serde(default)]
    pub(crate) flush_ms: Option<Number>,
    #[serde(default)]
    pub(crate) timeout_ms: Option<Number>,
    #[serde(default)]
    pub(crate) retain_days: Option<Number>,
}

impl<'de> Deserialize<'de> for RawUsage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UsageVisitor;
        impl<'de> Visitor<'de> for UsageVisitor {
            type Value = RawUsage;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a sink (none, sqlite, sqlite:PATH, postgres://...) or a map with `sink`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawUsage, E> {
                Ok(RawUsage::Sink(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawUsage, A::Error> {
                RawUsageMap::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawUsage::Map)
            }
        }
        deserializer.deserialize_any(UsageVisitor)
    }
}
