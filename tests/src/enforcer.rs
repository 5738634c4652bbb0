//! An upstream that enforces a requests-per-minute limit exactly, for the chaos tests: a
//! wiremock responder that admits at most `rpm` requests in any 60 s (by arrival) and answers
//! 429 beyond, counting both.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wiremock::{Request, Respond, ResponseTemplate};

/// What the upstream saw; shared between the test and the mock (see [`Enforcer::responder`]).
#[derive(Debug)]
pub struct Enforcer {
    rpm: usize,
    ok_body: Vec<u8>,
    arrivals: Mutex<VecDeque<Instant>>,
    served: AtomicUsize,
    refused: AtomicUsize,
}

impl Enforcer {
    /// At most `rpm` requests per 60 s, each answered 200 with `ok_body` (JSON).
    pub fn new(rpm: usize, ok_body: Vec<u8>) -> Arc<Self> {
        Arc::new(Self {
            rpm,
            ok_body,
            arrivals: Mutex::new(VecDeque::new()),
            served: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        })
    }

    /// The responder to mount.
    pub fn responder(self: &Arc<Self>) -> impl Respond + use<> {
        Enforcing(self.clone())
    }

    /// Requests answered 200.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    /// Requests refused with 429 (over the limit).
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

struct Enforcing(Arc<Enforcer>);

impl Respond for Enforcing {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let this = &self.0;
        let now = Instant::now();
        let mut arrivals = this.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        while arrivals
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            arrivals.pop_front();
        }
        if arrivals.len() >= this.rpm {
            this.refused.fetch_add(1, Ordering::SeqCst);
            return ResponseTemplate::new(429).insert_header("retry-after", "30");
        }
        arrivals.push_back(now);
        this.served.fetch_add(1, Ordering::SeqCst);
        ResponseTemplate::new(200).set_body_raw(this.ok_body.clone(), "application/json")
    }
}
