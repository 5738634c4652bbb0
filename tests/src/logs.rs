//! Log lines a test can read: [`Logs::capture`] records every event logged on this thread (and
//! so by every task of a current-thread runtime) while its guard lives, at every level.
//!
//! One subscriber serves the whole test binary, installed once as the global default; it writes
//! an event to the capture of the thread that logged it, if any. Whether an event is wanted is
//! asked at each event, never cached per log statement: tracing caches that for all threads, and
//! a subscriber per test (a thread's scoped default) let a statement first reached on a thread
//! without a capture be cached as unwanted for every thread.

use std::cell::RefCell;
use std::io::Write;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, Once, PoisonError};

use tracing::subscriber::Interest;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::DynFilterFn;
use tracing_subscriber::layer::SubscriberExt;

thread_local! {
    /// The capture this thread's events go to.
    static SINK: RefCell<Option<Logs>> = const { RefCell::new(None) };
}

/// The text of the events logged while a capture's guard lived.
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

/// A capture in progress; it stops when this drops, on the thread that started it.
#[must_use = "the capture stops when the guard drops"]
pub struct Capture {
    previous: Option<Logs>,
    _on_this_thread: PhantomData<*const ()>,
}

impl Logs {
    /// Starts recording this thread's events; it stops when the guard drops.
    pub fn capture() -> (Logs, Capture) {
        install();
        // Asks again, for every log statement reached so far, whether it is wanted: one first
        // reached on another thread as the subscriber was installed may have been cached as
        // unwanted.
        tracing::callsite::rebuild_interest_cache();
        let logs = Logs::default();
        let previous = SINK.with(|sink| sink.replace(Some(logs.clone())));
        let guard = Capture {
            previous,
            _on_this_thread: PhantomData,
        };
        (logs, guard)
    }

    /// Every line so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SINK.with(|sink| *sink.borrow_mut() = previous);
    }
}

/// Installs the binary's one subscriber: every level, no colour, events of threads capturing.
fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Asked at every event, never cached for a log statement: the statement is wanted on
        // a thread that captures and not on the others.
        let capturing = DynFilterFn::new(|_, _| SINK.with(|sink| sink.borrow().is_some()))
            .with_callsite_filter(|_| Interest::sometimes());
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| SINK.with(|sink| sink.borrow().clone().unwrap_or_default()))
            .with_filter(capturing);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in a test binary using Logs");
    });
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
