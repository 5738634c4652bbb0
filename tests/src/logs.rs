//! Log lines a test can read: [`Logs::capture`] records every event logged on this thread (and
//! so by every task of a current-thread runtime) while its guard lives, at every level.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::subscriber::DefaultGuard;

/// The text of the events logged while a capture's guard lived.
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Starts recording; it stops when the guard drops.
    pub fn capture() -> (Logs, DefaultGuard) {
        let logs = Logs::default();
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Every line so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
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
