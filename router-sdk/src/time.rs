//! Waiting, injected: the router sleeps only through a [`Sleeper`], so tests can see every wait
//! and move a manual clock instead of sleeping.

use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

/// Something that waits.
pub trait Sleeper: Send + Sync + std::fmt::Debug {
    /// Waits `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// Waits with `tokio::time::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        tokio::time::sleep(duration).boxed()
    }
}
