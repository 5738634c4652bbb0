//! A request's usage record, gathered as the request goes and handed to the recorder once, when
//! it ends: answered, failed, or (from `Drop`) cancelled by the caller dropping it.

use std::time::{Duration, Instant};

use router_usage::{Outcome, Record, Recorder};

use crate::types::Usage;

/// What a request's record needs. Without a recorder it gathers nothing and writes nothing.
#[derive(Debug)]
pub(crate) struct Account {
    recorder: Option<Recorder>,
    record: Record,
    started: Instant,
    start_ms: u64,
    /// The estimate of a reservation held now, and its tokens: charged should the request be
    /// dropped.
    held_micros: u64,
    held_usage: Usage,
    written: bool,
}

/// Who and what a request is, known when it starts.
#[derive(Default)]
pub(crate) struct Opening {
    pub(crate) id: String,
    pub(crate) request_id: String,
    pub(crate) tenant: Option<String>,
    pub(crate) key_id: Option<String>,
    pub(crate) model_asked: String,
    pub(crate) route: Option<String>,
    pub(crate) priority: &'static str,
    pub(crate) stream: bool,
    pub(crate) start_ms: u64,
}

impl Account {
    /// The account of a request opening now, `opening` asked only when there is a recorder;
    /// `None` recorder: a no-op.
    pub(crate) fn open(recorder: Option<Recorder>, opening: impl FnOnce() -> Opening) -> Self {
        let o = match recorder {
            Some(_) => opening(),
            None => Opening::default(),
        };
        Self {
            recorder,
            record: Record {
                id: o.id,
                at_ms: o.start_ms,
                request_id: o.request_id,
                tenant: o.tenant,
                key_id: o.key_id,
                model_asked: o.model_asked,
                route: o.route,
                provider: None,
                model: None,
                prompt_tokens: 0,
                cached_tokens: 0,
                completion_tokens: 0,
                reasoning_tokens: 0,
                cost_micros: 0,
                latency_ms: 0,
                first_token_ms: None,
                attempts: 0,
                failed_attempts: Vec::new(),
                waited_ms: 0,
                queue_position: None,
                outcome: Outcome::Cancelled,
                failure: None,
                priority: o.priority.to_owned(),
                stream: o.stream,
            },
            started: Instant::now(),
            start_ms: o.start_ms,
            held_micros: 0,
            held_usage: Usage::default(),
            written: false,
        }
    }

    /// Whether anything is recorded (callers skip gathering what costs work otherwise).
    pub(crate) fn on(&self) -> bool {
        self.recorder.is_some()
    }

    /// A call to `provider`/`model` starts, holding a reservation whose estimate costs
    /// `estimate_micros` for the tokens of `estimate`.
    pub(crate) fn calling(
        &mut self,
        provider: &str,
        model: &str,
        estimate_micros: u64,
        estimate: Usage,
    ) {
        self.record.attempts += 1;
        self.held_micros = estimate_micros;
        self.held_usage = estimate;
        if self.on() {
            self.record.provider = Some(provider.to_owned());
            self.record.model = Some(model.to_owned());
        }
    }

    /// The call failed with `class`; its reservation is settled at `charged_micros` for the
    /// tokens of `charged` (`None`: handed back, nothing charged). Called before the settlement
    /// is awaited, so that a caller dropping the request meanwhile leaves a record of what the
    /// guard's drop then settles.
    pub(crate) fn call_failed(
        &mut self,
        class: &str,
        charged: Option<&Usage>,
        charged_micros: u64,
    ) {
        self.charge(charged, charged_micros);
        if self.on() {
            self.record.failed_attempts.push(class.to_owned());
        }
    }

    /// The call answered with `usage`, settled at `charged_micros` (called before the
    /// settlement is awaited, as [`Account::call_failed`]).
    pub(crate) fn answered(&mut self, usage: &Usage, charged_micros: u64) {
        self.charge(Some(usage), charged_micros);
    }

    /// A call's charge: tokens and cost add up over the calls a request made, as the ledger
    /// charged them.
    fn charge(&mut self, usage: Option<&Usage>, charged_micros: u64) {
        self.held_micros = 0;
        self.held_usage = Usage::default();
        let r = &mut self.record;
        r.cost_micros = r.cost_micros.saturating_add(charged_micros);
        if let Some(u) = usage {
            r.prompt_tokens = r.prompt_tokens.saturating_add(u.prompt_tokens);
            r.cached_tokens = r.cached_tokens.saturating_add(u.cached_prompt_tokens);
            r.completion_tokens = r.completion_tokens.saturating_add(u.completion_tokens);
            r.reasoning_tokens = r.reasoning_tokens.saturating_add(u.reasoning_tokens);
        }
    }

    /// The first token of a stream arrived.
    pub(crate) fn first_token(&mut self) {
        if self.record.first_token_ms.is_none() {
            self.record.first_token_ms = Some(ms(self.started.elapsed()));
        }
    }

    /// Time waited for capacity so far.
    pub(crate) fn waited(&mut self, waited: Duration) {
        self.record.waited_ms = ms(waited);
    }

    /// The request joined a line with `position` requests before it (the first time counts).
    pub(crate) fn queued(&mut self, position: u64) {
        self.record.queue_position.get_or_insert(position);
    }

    /// The request ended: `failure` is the class it failed with (`None`: answered).
    pub(crate) fn close(&mut self, failure: Option<&str>) {
        let outcome = match failure {
            None => Outcome::Ok,
            Some(_) => Outcome::Failed,
        };
        self.record.failure = failure.map(str::to_owned);
        self.write(outcome);
    }

    fn write(&mut self, outcome: Outcome) {
        if self.written {
            return;
        }
        self.written = true;
        // A reservation still held is charged its estimate (its guard settles that).
        let held = (self.held_micros, self.held_usage);
        if held.0 > 0 || held.1 != Usage::default() {
            self.charge(Some(&held.1), held.0);
        }
        let Some(recorder) = &self.recorder else {
            return;
        };
        let elapsed = self.started.elapsed();
        let mut record = self.record.clone();
        record.outcome = outcome;
        record.latency_ms = ms(elapsed);
        record.at_ms = self.start_ms + ms(elapsed);
        recorder.record(record);
    }
}

impl Drop for Account {
    /// The caller dropped the request before it ended: recorded as cancelled, with the estimate
    /// of a reservation it held (its guard settles that estimate).
    fn drop(&mut self) {
        self.write(Outcome::Cancelled);
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
