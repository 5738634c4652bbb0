//! `gateway:`: where `llmroute serve` listens, how large a request body may be, and the API keys
//! it accepts, each mapped to a tenant. Keys are stored as SHA-256 hashes, never in clear.

use std::net::SocketAddr;

use crate::flow::Priority;

/// Headers llmroute sets itself on a provider request, which neither a request's extra headers
/// nor the gateway's `forward_headers` may carry: they carry a provider key or frame the body.
pub const RESERVED_HEADERS: [&str; 7] = [
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
];

/// The gateway's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gateway {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Where `/metrics` is served apart from the API; `None`: on the API's address.
    pub metrics_listen: Option<SocketAddr>,
    /// The largest request body it reads, in bytes.
    pub body_limit_bytes: u64,
    /// How long it waits for a request's body once its headers are in: a body that takes longer
    /// gets 408 and its connection is closed.
    pub body_timeout: std::time::Duration,
    /// The API keys it accepts.
    pub keys: Vec<GatewayKey>,
    /// The SHA-256 of each admin key (64 lowercase hex digits): keys of `/admin/v1` and `/ui`.
    pub admin_keys: Vec<String>,
    /// Request headers passed on to the provider as the caller sent them (lowercase names),
    /// e.g. `traceparent`.
    pub forward_headers: Vec<String>,
    /// How long a stopping gateway lets requests and streams in flight finish before it drops
    /// them (their reservations are then settled as dropped requests are).
    pub grace: std::time::Duration,
}

impl Gateway {
    /// `127.0.0.1:8080`: only this machine, until configured otherwise.
    pub const LISTEN: &'static str = "127.0.0.1:8080";
    /// 10 MiB: room for a few inline images.
    pub const BODY_LIMIT_BYTES: u64 = 10 * 1024 * 1024;
    /// 30 s to finish what is in flight when stopping.
    pub const GRACE_SECS: u64 = 30;
    /// 30 s to send a request's body: ample for 10 MiB on a slow link, short enough that a
    /// client trickling its body cannot hold connections for long.
    pub const BODY_TIMEOUT_SECS: u64 = 30;
}

impl Default for Gateway {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            metrics_listen: None,
            body_limit_bytes: Self::BODY_LIMIT_BYTES,
            body_timeout: std::time::Duration::from_secs(Self::BODY_TIMEOUT_SECS),
            keys: Vec::new(),
            admin_keys: Vec::new(),
            forward_headers: Vec::new(),
            grace: std::time::Duration::from_secs(Self::GRACE_SECS),
        }
    }
}

/// One API key the gateway accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayKey {
    /// The SHA-256 of the key, 64 lowercase hex digits.
    pub sha256: String,
    /// The tenant its requests are accounted to.
    pub tenant: String,
    /// The priority of every request made with it; `None`: the request's own (interactive
    /// unless it says batch).
    pub priority: Option<Priority>,
    /// The models and aliases it may use; empty: all.
    pub models: Vec<String>,
}
