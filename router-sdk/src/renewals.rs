//! Keeps live requests' slots held: each reservation a guard holds is renewed every third of its
//! TTL, so a long request (a slow stream, a long deadline) never loses its slot while its holder
//! lives, and a crashed holder's slot still expires within the TTL. One task per router renews
//! every due reservation, so a request costs a map entry, not a task and a timer of its own.
//! The task sleeps until the soonest reservation is due and not at all while none is held: an
//! idle router, or one whose requests end before their first renewal, never wakes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use router_core::IdMap;
use router_core::ledger::{Ledger, Reservation};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Renewals never come closer together than this, whatever the TTL.
const MIN_EVERY: Duration = Duration::from_millis(100);

/// One held reservation.
#[derive(Debug)]
struct Held {
    reservation: Reservation,
    ttl: Duration,
    due: Instant,
}

/// The held reservations, and when the task wakes next.
#[derive(Debug, Default)]
struct Live {
    held: IdMap<u64, Held>,
    /// When the task wakes next: `None` while it waits for a reservation to arrive.
    wakes: Option<Instant>,
}

/// The reservations guards hold, and the task that renews them.
#[derive(Debug)]
pub(crate) struct Renewals {
    ledger: Arc<dyn Ledger>,
    live: Mutex<Live>,
    /// Wakes the task when a reservation arrives that is due before the task would wake, and
    /// when the router is gone (the task holds no strong reference while it waits).
    arrived: Arc<Notify>,
    /// Whether the task runs (it starts with the first reservation held in a runtime).
    started: AtomicBool,
}

impl Renewals {
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> Arc<Self> {
        Arc::new(Self {
            ledger,
            live: Mutex::new(Live::default()),
            arrived: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
        })
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Renews `reservation` every third of `ttl` until [`Renewals::drop_held`]. Outside a Tokio
    /// runtime nothing renews it: its slot then lives its TTL.
    pub(crate) fn hold(self: &Arc<Self>, reservation: &Reservation, ttl: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Only a reservation due before the task wakes needs to wake it: while requests keep
        // arriving, that is the first after an idle spell (or one of a shorter TTL).
        let wake = {
            let mut live = self.live();
            let due = Instant::now() + every(ttl);
            let reservation = reservation.clone();
            live.held.insert(
                reservation.id,
                Held {
                    reservation,
                    ttl,
                    due,
                },
            );
            let wake = live.wakes.is_none_or(|wakes| due < wakes);
            if wake {
                live.wakes = Some(due);
            }
            wake
        };
        if !self.started.swap(true, Ordering::AcqRel) {
            runtime.spawn(renew_due(
                Arc::downgrade(self),
                self.arrived.clone(),
                self.ledger.clone(),
            ));
        } else if wake {
            self.arrived.notify_one();
        }
    }

    /// Stops renewing reservation `id` (it is being settled or released).
    pub(crate) fn drop_held(&self, id: u64) {
        self.live().held.remove(&id);
    }
}

impl Drop for Renewals {
    /// Wakes the task so that it ends.
    fn drop(&mut self) {
        self.arrived.notify_one();
    }
}

/// How often a slot of `ttl` is renewed.
fn every(ttl: Duration) -> Duration {
    (ttl / 3).max(MIN_EVERY)
}

/// The task: renews what is due, then sleeps until the next is due, or until a reservation
/// arrives while none is held; ends once the router is gone.
async fn renew_due(renewals: Weak<Renewals>, arrived: Arc<Notify>, ledger: Arc<dyn Ledger>) {
    loop {
        let next = {
            let Some(this) = renewals.upgrade() else {
                return;
            };
            let now = Instant::now();
            let mut due = Vec::new();
            let next = {
                let mut live = this.live();
                let mut next: Option<Instant> = None;
                for held in live.held.values_mut() {
                    if held.due <= now {
                        due.push((held.reservation.clone(), held.ttl));
                        held.due = now + every(held.ttl);
                    }
                    next = Some(next.map_or(held.due, |next| next.min(held.due)));
                }
                live.wakes = next;
                next
            };
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
            next
        };
        // No strong reference across the wait: dropping the router wakes the task to end it.
        match next {
            Some(next) => tokio::select! {
                _ = arrived.notified() => {}
                _ = tokio::time::sleep_until(next) => {}
            },
            None => arrived.notified().await,
        }
    }
}
