//! What this instance last saw of each deployment's provider calls: the last call's outcome,
//! and the failed call that last put the deployment in cooldown. Passive: judged from real
//! traffic, never from probes. The dashboard and `/readyz?deployments=1` show it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A deployment's last call, by `provider/model`.
#[derive(Debug, Clone)]
pub(crate) struct LastCall {
    /// `ok`, or its failure kind (`rate_limited`, `overloaded`, `server_error`, ...).
    pub(crate) kind: String,
    /// The provider's HTTP status, when it failed with an answer.
    pub(crate) status: Option<u16>,
    /// When.
    pub(crate) at: Instant,
}

/// The failed call that last put a deployment in cooldown.
#[derive(Debug, Clone)]
pub(crate) struct CooldownCause {
    /// Its failure kind (`rate_limited`, `overloaded`, `server_error`, ...).
    pub(crate) kind: String,
    /// The provider's HTTP status, when it answered.
    pub(crate) status: Option<u16>,
    /// The cooldown put.
    pub(crate) cooldown: Duration,
    /// When.
    pub(crate) at: Instant,
}

/// Each deployment's last call and last cooldown cause, by `provider/model`.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    last: Mutex<HashMap<String, LastCall>>,
    causes: Mutex<HashMap<String, CooldownCause>>,
}

impl Calls {
    /// A call to `deployment` ended `kind` (`ok` or a failure kind) with `status`, putting
    /// `cooldown` if it did.
    pub(crate) fn seen(
        &self,
        deployment: &str,
        kind: &str,
        status: Option<u16>,
        cooldown: Option<Duration>,
    ) {
        let at = Instant::now();
        let call = LastCall {
            kind: kind.to_owned(),
            status,
            at,
        };
        lock(&self.last).insert(deployment.to_owned(), call);
        if let Some(cooldown) = cooldown {
            let cause = CooldownCause {
                kind: kind.to_owned(),
                status,
                cooldown,
                at,
            };
            lock(&self.causes).insert(deployment.to_owned(), cause);
        }
    }

    /// `deployment`'s last call this instance saw.
    pub(crate) fn last(&self, deployment: &str) -> Option<LastCall> {
        lock(&self.last).get(deployment).cloned()
    }

    /// Why this instance last put `deployment` in cooldown, if it did.
    pub(crate) fn cooldown_cause(&self, deployment: &str) -> Option<CooldownCause> {
        lock(&self.causes).get(deployment).cloned()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
