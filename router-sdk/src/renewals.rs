//! Keeps live requests' slots held: each reservation a guard holds is renewed every third of its
//! TTL, so a long request (a slow stream, a long deadline) never loses its slot while its holder
//! lives, and a crashed holder's slot still expires within the TTL. One task per router renews
//! every due reservation, so a request costs a map entry, not a task and a timer of its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use router_core::ledger::{Ledger, Reservation};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest the renewing task sleeps, so that it notices soon when its router is gone.
const IDLE: Duration = Duration::from_secs(1);
/// Renewals never come closer together than this, whatever the TTL.
const MIN_EVERY: Duration = Duration::from_millis(100);

/// One held reservation.
#[derive(Debug)]
struct Held {
    reservation: Reservation,
    ttl: Duration,
    due: Instant,
}

/// The reservations guards hold, and the task that renews them.
#[derive(Debug)]
pub(crate) struct Renewals {
    ledger: Arc<dyn Ledger>,
    live: Mutex<HashMap<u64, Held>>,
    /// Wakes the task when a reservation arrives that may be due before the task wakes.
    arrived: Notify,
    /// Whether the task runs (it starts with the first reservation held in a runtime).
    started: AtomicBool,
}

impl Renewals {
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Arc<Self> {
        Arc::new(Self {
            ledger,
            live: Mutex::new(HashMap::new()),
            arrived: Notify::new(),
            started: AtomicBool::new(false),
        })
    }

    fn live(&self) -> MutexGuard<'_, HashMap<u64, Held>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Renews `reservation` every third of `ttl` until [`Renewals::drop_held`]. Outside a Tokio
    /// runtime nothing renews it: its slot then lives its TTL.
    pub(crate) fn hold(self: &Arc<Self>, reservation: &Reservation, ttl: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The task sleeps at most IDLE, or until the soonest due: only a reservation due sooner
        // than that needs to wake it (a request of the default TTL wakes nothing).
        let wake = {
            let mut live = self.live();
            let wake = every(ttl) < IDLE;
            let due = Instant::now() + every(ttl);
            let reservation = reservation.clone();
            live.insert(
                reservation.id,
                Held {
                    reservation,
                    ttl,
                    due,
                },
            );
            wake
        };
        if !self.started.swap(true, Ordering::AcqRel) {
            runtime.spawn(renew_due(Arc::downgrade(self), self.ledger.clone()));
        } else if wake {
            self.arrived.notify_one();
        }
    }

    /// Stops renewing reservation `id` (it is being settled or released).
    pub(crate) fn drop_held(&self, id: u64) {
        self.live().remove(&id);
    }
}

/// How often a slot of `ttl` is renewed.
fn every(ttl: Duration) -> Duration {
    (ttl / 3).max(MIN_EVERY)
}

/// The task: renews what is due, then sleeps until the next is due (at most [`IDLE`]); ends once
/// the router is gone.
async fn renew_due(renewals: Weak<Renewals>, ledger: Arc<dyn Ledger>) {
    loop {
        let Some(this) = renewals.upgrade() else {
            return;
        };
        let now = Instant::now();
        let mut due = Vec::new();
        let mut next = now + IDLE;
        for held in this.live().values_mut() {
            if held.due <= now {
                due.push((held.reservation.clone(), held.ttl));
                held.due = now + every(held.ttl);
            }
            next = next.min(held.due);
        }
        for (r, ttl) in due {
            match ledger.renew(&r, ttl).await {
                Ok(true) => {}
                // Settled, released, or expired: nothing left to keep.
                Ok(false) => this.drop_held(r.id),
                Err(e) => tracing::warn!(
                    reservation = r.id,
                    error = %e,
                    "could not renew a slot; trying again at the next beat"
                ),
            }
        }
        tokio::select! {
            _ = this.arrived.notified() => {}
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}
