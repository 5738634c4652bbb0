//! The ledger's algorithm, written once over scope state wherever it lives.
//!
//! [`Engine`] runs every operation (admit, settle/release, cooldown, observe, snapshot) against
//! [`Cells`]: the state of each limited scope, by scope index. [`MemoryStore`](super::MemoryStore)
//! keeps all of it in a vector behind a mutex; [`SqliteStore`](super::SqliteStore) loads the rows
//! an operation touches inside one transaction and writes back what changed. One algorithm, two
//! persistence modes: that is how both mean the same thing (DESIGN.md I6). The Redis scripts in
//! `lua/` are its third rendering; the conformance suite checks all three agree.

use std::time::Duration;

use super::LedgerError;
use super::counts::Deltas;
use super::day::{Day, DayCount, DayResets, day_blocked, day_deltas, with_day};
use super::line::Line;
use super::period::{Periods, periods};
use super::scopes::{SCOPE_ORDER, ScopeTable};
use super::types::*;
use super::window::{
    BUCKET_MS, Counts, Dim, Slot, Slots, Window, after, bucket_of, millis, phantom_bucket,
};
use crate::config::{DeploymentId, Limits};

/// Everything the ledger holds for one limited scope.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScopeState {
    pub(crate) window: Window,
    pub(crate) slots: Slots,
    /// End of the deployment's cooldown, ms (0: none). Always 0 for provider scopes.
    pub(crate) cooldown: u64,
    /// What the provider last reported (deployment scopes only).
    pub(crate) report: Option<Report>,
    /// What its current day counted (scopes with a per-day limit only).
    pub(crate) day: DayCount,
    /// The requests waiting for it (deployment scopes only).
    pub(crate) line: Line,
}

/// A provider's report as stored: remaining requests, tokens, input and output tokens, and
/// when (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) requests: Option<u64>,
    pub(crate) tokens: Option<u64>,
    pub(crate) input: Option<u64>,
    pub(crate) output: Option<u64>,
    pub(crate) at: u64,
}

/// What a tenant has spent in its current budget periods, micro-USD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Spend {
    /// The UTC day `day_micros` was spent in.
    pub(crate) day: u64,
    pub(crate) day_micros: u64,
    /// The UTC month `month_micros` was spent in.
    pub(crate) month: u64,
    pub(crate) month_micros: u64,
}

impl Spend {
    /// Spent in the periods of `p`; a stored period that has ended counts as nothing.
    pub(crate) fn current(&self, p: &Periods) -> (u64, u64) {
        let day = if self.day == p.day {
            self.day_micros
        } else {
            0
        };
        let month = if self.month == p.month {
            self.month_micros
        } else {
            0
        };
        (day, month)
    }

    /// Adds `micros` in the periods of `p`.
    pub(crate) fn add(&mut self, p: &Periods, micros: u64) {
        let (day, month) = self.current(p);
        *self = Spend {
            day: p.day,
            day_micros: day.saturating_add(micros),
            month: p.month,
            month_micros: month.saturating_add(micros),
        };
    }

    /// Corrects what was spent in `day` and `month` by `delta`, if those are still the stored
    /// periods (a correction for a period that has ended changes nothing).
    fn adjust(&mut self, day: u64, month: u64, delta: i64) {
        if self.day == day {
            self.day_micros = self.day_micros.saturating_add_signed(delta);
        }
        if self.month == month {
            self.month_micros = self.month_micros.saturating_add_signed(delta);
        }
    }
}

/// Everything the ledger holds for one tenant: its window and slots, and its spend.
#[derive(Debug, Clone, Default)]
pub(crate) struct TenantState {
    pub(crate) scope: ScopeState,
    pub(crate) spend: Spend,
}

/// Where the engine finds scope state. A deployment's own scope has its `DeploymentId`'s index
/// (see [`ScopeTable`]); tenants are found by name.
pub(crate) trait Cells {
    /// The state of scope `s`, which the engine may change.
    fn scope(&mut self, s: usize) -> &mut ScopeState;
    /// The state of tenant `name`, which the engine may change.
    fn tenant(&mut self, name: &str) -> &mut TenantState;
    /// Says to `ticket`'s waiter, once the operation is done, that its turn may have come.
    fn wake(&mut self, ticket: u64);
}

/// One operation's view: the scopes and the time it runs at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Engine<'a> {
    pub(crate) table: &'a ScopeTable,
    /// Now, ms since the Unix epoch.
    pub(crate) now: u64,
}

impl<'a> Engine<'a> {
    fn scopes(&self, d: DeploymentId) -> Result<&'a [usize], LedgerError> {
        self.table.of(d).ok_or(LedgerError::UnknownDeployment(d.0))
    }

    /// The current day of scope `s`, if it has a per-day limit.
    fn day_of(&self, s: usize) -> Option<Day> {
        let def = self.table.def(s);
        def.limits.per_day().then(|| def.resets.day_at(self.now))
    }

    /// The day of scope `s` that held `bucket` (an admission's), if it has a per-day limit.
    fn day_of_bucket(&self, s: usize, bucket: u64) -> Option<u64> {
        let def = self.table.def(s);
        let at = bucket.saturating_mul(BUCKET_MS);
        def.limits.per_day().then(|| def.resets.day_at(at).id)
    }

    /// Reserves on the first candidate that fits, under the need's id; otherwise works out why
    /// each refused. A need whose id already holds a live slot on a candidate gets that
    /// reservation back, and nothing is counted again.
    ///
    /// Twin: `lua/admit.lua` (keep both in step; the differential test compares them).
    pub(crate) fn admit(
        &self,
        cells: &mut impl Cells,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Admission, LedgerError> {
        let place = self.place(cells, need, candidates);
        if let Some(r) = self.admitted_before(cells, need, candidates)? {
            self.admitted_from_line(cells, place, candidates, r.deployment);
            return Ok(Admission::Granted(r));
        }
        let nb = bucket_of(self.now);
        for (rank, &d) in candidates.iter().enumerate() {
            let scopes = self.scopes(d)?;
            if self.line_refusal(cells, place, d).is_some()
                || self.check(cells, need, rank, d, scopes, false).is_some()
            {
                continue;
            }
            let counts = need_counts(self.table, need, rank, d);
            let bucket = cells.scope(scopes[0]).window.expire(nb);
            let slot = Slot {
                id: need.id,
                expiry: after(self.now, need.slot_ttl_ms()),
                bucket,
            };
            for &s in scopes {
                take(cells.scope(s), nb, slot, counts);
                if let Some(day) = self.day_of(s) {
                    cells.scope(s).day.add(day.id, 1, counts.tokens);
                }
            }
            let p = periods(self.now);
            let mut granted = reservation(need, rank, d, bucket, &p);
            if let (Some(t), Some(hold)) = (&need.tenant, &mut granted.tenant) {
                for spec in &t.specs {
                    let st = cells.tenant(&spec.name);
                    take(&mut st.scope, nb, slot, counts);
                    st.spend.add(&p, need.cost(rank));
                    if spec.limits.per_day() {
                        st.scope.day.add(p.day, 1, counts.tokens);
                    }
                    let totals = st.scope.window.totals();
                    hold.windows.push(WindowUse {
                        requests: totals.requests,
                        tokens: totals.tokens,
                    });
                }
            }
            self.admitted_from_line(cells, place, candidates, d);
            return Ok(Admission::Granted(granted));
        }
        // Every candidate refused: now work out when each could take it (the costly part).
        let refusals = candidates
            .iter()
            .enumerate()
            .map(|(rank, &d)| {
                let scopes = self.scopes(d)?;
                let refusal = self
                    .line_refusal(cells, place, d)
                    .or_else(|| self.check(cells, need, rank, d, scopes, true));
                Ok(refusal.expect("a candidate that refused a moment ago in the same operation"))
            })
            .collect::<Result<Vec<_>, LedgerError>>()?;
        let place = self.after_denial(cells, need, place, &refusals);
        Ok(Admission::Denied(Denial { refusals, place }))
    }

    /// Hands back what an admission of `need` counted, if it holds a slot on one of
    /// `candidates` (its caller went away before reading the answer), as a release does.
    /// Returns whether one did.
    ///
    /// Twin: `RedisStore::void` (`lua/peek.lua`, then the release script).
    pub(crate) fn void(
        &self,
        cells: &mut impl Cells,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<bool, LedgerError> {
        match self.admitted_before(cells, need, candidates)? {
            Some(r) => self.finish(cells, &r, ActualUsage::default(), true),
            None => Ok(false),
        }
    }

    /// The reservation `need`'s id holds a live slot for on one of `candidates`, if any. Its
    /// tenant hold's periods are those of its bucket (the admission's, unless the clock went
    /// back; the Lua twin in `admit.lua` does the same).
    fn admitted_before(
        &self,
        cells: &mut impl Cells,
        need: &Need,
        candidates: &[DeploymentId],
    ) -> Result<Option<Reservation>, LedgerError> {
        for (rank, &d) in candidates.iter().enumerate() {
            let scopes = self.scopes(d)?;
            if let Some(slot) = cells.scope(scopes[0]).slots.live(need.id, self.now) {
                let p = periods(slot.bucket.saturating_mul(BUCKET_MS));
                return Ok(Some(reservation(need, rank, d, slot.bucket, &p)));
            }
        }
        Ok(None)
    }

    /// `None` when every limit of `d` fits; otherwise why not. Without `detail`, the first
    /// refusal found is returned with a placeholder verdict; with it, the limit that frees last
    /// and when.
    fn check(
        &self,
        cells: &mut impl Cells,
        need: &Need,
        rank: usize,
        d: DeploymentId,
        scopes: &[usize],
        detail: bool,
    ) -> Option<Refusal> {
        let (now, nb) = (self.now, bucket_of(self.now));
        let refusal = |limit, scope, verdict| Refusal {
            deployment: d,
            limit,
            scope,
            verdict,
        };
        let counts = need_counts(self.table, need, rank, d);
        let own = scopes
            .iter()
            .map(|&s| need.share_of(self.table.def(s).limits));
        for (limits, scope) in own.zip(SCOPE_ORDER).chain(accounts(need)) {
            // Above a token limit: never (requests are one each, never above a limit).
            let daily = (LimitKind::DailyTokens, limits.tpd, Dim::Tokens);
            let over = windowed(limits)
                .into_iter()
                .skip(1)
                .chain([daily])
                .find(|&(_, limit, dim)| limit.is_some_and(|l| counts[dim] > l.get()));
            if let Some((kind, _, _)) = over {
                return Some(refusal(kind, scope, Verdict::Never));
            }
        }
        if let Some((kind, scope, verdict)) = self.over_budget(cells, need, rank) {
            return Some(refusal(kind, scope, verdict));
        }
        let mut worst: Option<(u64, LimitKind, Scope)> = None;
        let mut raise = |at: u64, kind, scope| {
            if worst.is_none_or(|(w, _, _)| at > w) {
                worst = Some((at, kind, scope));
            }
        };
        let cooldown = cells.scope(d.0).cooldown;
        if cooldown > now {
            raise(cooldown, LimitKind::Cooldown, Scope::Deployment);
        }
        let limited = scopes
            .iter()
            .zip(SCOPE_ORDER)
            .map(|(&s, scope)| (Ok(s), scope));
        let specs = need.tenant.iter().flat_map(|t| &t.specs);
        for (at, scope) in limited.chain(specs.map(|spec| (Err(spec), spec.scope()))) {
            let (st, limits, day) = match at {
                Ok(s) => (
                    cells.scope(s),
                    need.share_of(self.table.def(s).limits),
                    self.day_of(s),
                ),
                Err(spec) => (
                    &mut cells.tenant(&spec.name).scope,
                    spec.limits,
                    spec.limits.per_day().then(|| DayResets::Utc.day_at(now)),
                ),
            };
            st.window.expire(nb);
            st.slots.reap(now);
            for kind in blocked(&st.window, &st.slots, limits, counts, now) {
                if !detail {
                    return Some(refusal(kind, scope, Verdict::Never));
                }
                raise(
                    free_at(kind, &st.window, &st.slots, limits, counts, now),
                    kind,
                    scope,
                );
            }
            // A per-day limit frees when its day ends.
            for kind in day
                .iter()
                .flat_map(|d| day_blocked(&st.day, limits, d.id, counts.tokens))
            {
                if !detail {
                    return Some(refusal(kind, scope, Verdict::Never));
                }
                raise(day.map_or(now, |d| d.end), kind, scope);
            }
        }
        worst.map(|(at, kind, scope)| {
            refusal(
                kind,
                scope,
                Verdict::NotNow(Duration::from_millis(at - now)),
            )
        })
    }

    /// Whether an account's budget refuses candidate `rank` (the first account that does, in
    /// the need's order): `Never` when the request alone costs more than a budget, `Exhausted`
    /// (until the period ends) when what is left of it cannot cover the request.
    fn over_budget(
        &self,
        cells: &mut impl Cells,
        need: &Need,
        rank: usize,
    ) -> Option<(LimitKind, Scope, Verdict)> {
        let t = need.tenant.as_ref()?;
        let cost = need.cost(rank);
        let p = periods(self.now);
        t.specs.iter().find_map(|spec| {
            let (day, month) = cells.tenant(&spec.name).spend.current(&p);
            let budgets = [
                (spec.budget.daily, day, p.day_end, LimitKind::DailyBudget),
                (
                    spec.budget.monthly,
                    month,
                    p.month_end,
                    LimitKind::MonthlyBudget,
                ),
            ];
            let (kind, verdict) =
                budgets
                    .into_iter()
                    .find_map(|(budget, spent, end, kind)| match budget {
                        Some(b) if cost > b => Some((kind, Verdict::Never)),
                        Some(b) if spent + cost > b => Some((
                            kind,
                            Verdict::Exhausted(Duration::from_millis(end - self.now)),
                        )),
                        _ => None,
                    })?;
            Some((kind, spec.scope(), verdict))
        })
    }

    /// Settles (`refund_request` false) or releases (true) a reservation: false when its slot is
    /// not remembered (settled or released already, or expired more than
    /// [`SETTLE_GRACE_MS`](super::window::SETTLE_GRACE_MS) ago). A slot that expired within the
    /// grace is still settled: its bucket (if live) and its tenant's spend are corrected, once.
    ///
    /// Twin: `lua/settle.lua` (keep both in step; the differential test compares them).
    pub(crate) fn finish(
        &self,
        cells: &mut impl Cells,
        r: &Reservation,
        actual: ActualUsage,
        refund_request: bool,
    ) -> Result<bool, LedgerError> {
        let nb = bucket_of(self.now);
        let scopes = self.scopes(r.deployment)?;
        let Some(slot) = cells.scope(scopes[0]).slots.free(r.id) else {
            return Ok(false);
        };
        if !slot.is_remembered(self.now) {
            // Forgotten, whether or not it was reaped yet: the same answer either way, and the
            // other scopes are left alone (their slot of this id may be a newer admission's).
            return Ok(false);
        }
        let deltas = settle_deltas(self.table, r, actual);
        let correct = |st: &mut ScopeState| {
            st.slots.free(r.id);
            st.window.expire(nb);
            for (dim, delta) in deltas {
                st.window.adjust(r.bucket, dim, delta);
            }
            if refund_request {
                st.window.adjust(r.bucket, Dim::Requests, -1);
            }
        };
        let (requests, tokens) = day_deltas(r, actual, refund_request);
        for &s in scopes {
            correct(cells.scope(s));
            if let Some(day) = self.day_of_bucket(s, r.bucket) {
                cells.scope(s).day.adjust(day, requests, tokens);
            }
        }
        if let Some(h) = &r.tenant {
            let delta = signed_diff(actual.cost_micros, h.cost_micros);
            for name in &h.names {
                let st = cells.tenant(name);
                correct(&mut st.scope);
                st.spend.adjust(h.day, h.month, delta);
                st.scope.day.adjust(h.day, requests, tokens);
            }
        }
        self.wake_first(cells, r.deployment);
        Ok(true)
    }

    /// Moves a live reservation's slot expiry to `ttl` from now (capped at [`MAX_SLOT_TTL`]) in
    /// every scope holding it; false when the slot is gone (settled, released or expired).
    ///
    /// Twin: `lua/renew.lua` (keep both in step; the differential test compares them).
    pub(crate) fn renew(
        &self,
        cells: &mut impl Cells,
        r: &Reservation,
        ttl: Duration,
    ) -> Result<bool, LedgerError> {
        let scopes = self.scopes(r.deployment)?;
        let expiry = after(self.now, slot_ttl_ms(ttl));
        if !cells.scope(scopes[0]).slots.renew(r.id, self.now, expiry) {
            return Ok(false);
        }
        for &s in &scopes[1..] {
            cells.scope(s).slots.renew(r.id, self.now, expiry);
        }
        for name in r.tenant.iter().flat_map(|h| &h.names) {
            cells.tenant(name).scope.slots.renew(r.id, self.now, expiry);
        }
        Ok(true)
    }

    /// Use, spend and budget of one tenant.
    ///
    /// Twin: `lua/tenant_snapshot.lua` (keep both in step; the differential test compares them).
    pub(crate) fn tenant_snapshot(
        &self,
        cells: &mut impl Cells,
        spec: &TenantSpec,
    ) -> TenantSnapshot {
        let (now, nb) = (self.now, bucket_of(self.now));
        let p = periods(now);
        let st = cells.tenant(&spec.name);
        st.scope.window.expire(nb);
        st.scope.slots.reap(now);
        let counts = st.scope.window.totals();
        let (day, month) = st.spend.current(&p);
        TenantSnapshot {
            usage: with_day(
                scope_usage(spec.limits, counts, st.scope.slots.len(now)),
                spec.limits.per_day().then(|| DayResets::Utc.day_at(now)),
                st.scope.day,
                now,
            ),
            spent_today_micros: day,
            spent_month_micros: month,
            budget: spec.budget,
            day_resets_in: Duration::from_millis(p.day_end - now),
            month_resets_in: Duration::from_millis(p.month_end - now),
            month_elapsed: Duration::from_millis(now - p.month_start),
        }
    }

    /// Extends `d`'s cooldown to at least `dur` from now; returns the cooldown in force.
    ///
    /// Twin: `lua/cooldown.lua` (keep both in step; the differential test compares them).
    pub(crate) fn cooldown(
        &self,
        cells: &mut impl Cells,
        d: DeploymentId,
        dur: Duration,
    ) -> Result<Duration, LedgerError> {
        self.scopes(d)?;
        let until = &mut cells.scope(d.0).cooldown;
        *until = (*until).max(after(self.now, millis(dur)));
        Ok(Duration::from_millis(*until - self.now))
    }

    /// Follows a provider that reports less remaining than the ledger believes.
    ///
    /// Twin: `lua/observe.lua` (keep both in step; the differential test compares them).
    pub(crate) fn observe(
        &self,
        cells: &mut impl Cells,
        d: DeploymentId,
        obs: Observation,
    ) -> Result<(), LedgerError> {
        let s = self.scopes(d)?[0];
        let limits = self.table.def(s).limits;
        let (now, nb) = (self.now, bucket_of(self.now));
        // Requests, tokens, input and output tokens: each followed against its own limit.
        let reports = [
            obs.requests,
            obs.tokens,
            obs.input_tokens,
            obs.output_tokens,
        ];
        if reports.iter().any(Option::is_some) {
            let [requests, tokens, input, output] = reports.map(|r| r.map(|(left, _)| left));
            let report = Report {
                requests,
                tokens,
                input,
                output,
                at: now,
            };
            cells.scope(s).report = Some(report);
        }
        for (reported, (_, limit, dim)) in reports.into_iter().zip(windowed(limits)) {
            let Some((remaining, reset)) = reported else {
                continue;
            };
            let reset_at = after(now, millis(reset));
            let st = cells.scope(s);
            let Some(limit) = limit else {
                // A dimension we do not limit: only "nothing left" is actionable.
                if remaining == 0 {
                    st.cooldown = st.cooldown.max(reset_at);
                }
                continue;
            };
            let window = &mut st.window;
            let current = window.expire(nb);
            let k = phantom_bucket(reset_at, nb);
            let k = if window.is_live(k) { k } else { current };
            let believed = limit.get().saturating_sub(window.total(dim));
            // Less left than we believe (nothing left included): count the difference as used
            // until the provider's reset. A deployment we filled ourselves is left as it is.
            if remaining < believed {
                let mut counts = Counts::ZERO;
                counts[dim] = believed - remaining;
                window.add(k, counts);
            }
        }
        Ok(())
    }

    /// Usage, limits, in-flight and cooldown of each deployment and its provider.
    ///
    /// Twin: `lua/snapshot.lua` (keep both in step; the differential test compares them).
    pub(crate) fn snapshot(
        &self,
        cells: &mut impl Cells,
        ds: &[DeploymentId],
    ) -> Result<Vec<DeploymentSnapshot>, LedgerError> {
        let (now, nb) = (self.now, bucket_of(self.now));
        ds.iter()
            .map(|&d| {
                let scopes = self.scopes(d)?;
                let mut usage = |s: usize| {
                    let day = self.day_of(s);
                    let st = cells.scope(s);
                    st.window.expire(nb);
                    st.slots.reap(now);
                    let counts = st.window.totals();
                    let usage = scope_usage(self.table.def(s).limits, counts, st.slots.len(now));
                    with_day(usage, day, st.day, now)
                };
                let own = usage(scopes[0]);
                let provider = scopes.get(1).map(|&s| usage(s));
                let st = cells.scope(d.0);
                st.line.purge(now);
                let (waiting, batch) = (st.line.entries().len() as u64, st.line.batch_count());
                let line = LineUse::at(waiting, batch, st.line.first_rank(), now);
                let until = st.cooldown;
                let reported = st
                    .report
                    .filter(|r| now.saturating_sub(r.at) <= REPORT_TTL.as_millis() as u64);
                Ok(DeploymentSnapshot {
                    deployment: d,
                    usage: own,
                    provider,
                    cooldown: (until > now).then(|| Duration::from_millis(until - now)),
                    reported: reported.map(|r| ProviderReport {
                        requests_remaining: r.requests,
                        tokens_remaining: r.tokens,
                        input_tokens_remaining: r.input,
                        output_tokens_remaining: r.output,
                        age: Duration::from_millis(now.saturating_sub(r.at)),
                    }),
                    line,
                })
            })
            .collect()
    }
}

/// The reservation of `need` on candidate `rank` (`d`), in `bucket`, in periods `p`.
pub(crate) fn reservation(
    need: &Need,
    rank: usize,
    d: DeploymentId,
    bucket: u64,
    p: &Periods,
) -> Reservation {
    Reservation {
        id: need.id,
        deployment: d,
        bucket,
        tokens: need.tokens_on(rank),
        input_tokens: need.input_on(rank),
        rank,
        tenant: need.tenant.as_ref().map(|t| TenantHold {
            names: t.specs.iter().map(|spec| spec.name.clone()).collect(),
            cost_micros: need.cost(rank),
            day: p.day,
            month: p.month,
            windows: Vec::new(),
        }),
    }
}

/// The limits of `need`'s accounts (the tenant's, the key's), with whose they are.
fn accounts(need: &Need) -> impl Iterator<Item = (Limits, Scope)> + '_ {
    let specs = need.tenant.iter().flat_map(|t| &t.specs);
    specs.map(|spec| (spec.limits, spec.scope()))
}

/// `a - b` as a signed correction, saturating.
pub(crate) fn signed_diff(a: u64, b: u64) -> i64 {
    if a >= b {
        i64::try_from(a - b).unwrap_or(i64::MAX)
    } else {
        i64::try_from(b - a).map_or(i64::MIN, |v| -v)
    }
}

/// What admitting `need` on candidate `rank` (`d`) counts: one request, its tokens, and its input
/// and output tokens where `d` counts them apart ([`ScopeTable::counts_apart`]).
fn need_counts(table: &ScopeTable, need: &Need, rank: usize, d: DeploymentId) -> Counts {
    let counts = Counts::new(
        1,
        need.tokens_on(rank),
        need.input_on(rank),
        need.output_on(rank),
    );
    table.kept(d, counts)
}

/// The corrections settling `r` with `actual` makes to its bucket's token, input and output
/// counters (the last two zero where its deployment does not count them apart). Both stores
/// take them from here.
pub(crate) fn settle_deltas(
    table: &ScopeTable,
    r: &Reservation,
    actual: ActualUsage,
) -> [(Dim, i64); 3] {
    let reserved_output = r.tokens.saturating_sub(r.input_tokens);
    let deltas = Deltas::new(
        0,
        signed_diff(actual.tokens, r.tokens),
        signed_diff(actual.input_tokens, r.input_tokens),
        signed_diff(actual.output_tokens(), reserved_output),
    );
    let kept = table.kept(r.deployment, deltas);
    [
        (Dim::Tokens, kept.tokens),
        (Dim::Input, kept.input),
        (Dim::Output, kept.output),
    ]
}

/// The windowed limits of a scope, with the counter each one limits: rpm, tpm, itpm, otpm (the
/// order the Lua scripts check them in).
fn windowed(limits: Limits) -> [(LimitKind, Option<std::num::NonZeroU64>, Dim); 4] {
    [
        (LimitKind::Requests, limits.rpm, Dim::Requests),
        (LimitKind::Tokens, limits.tpm, Dim::Tokens),
        (LimitKind::InputTokens, limits.itpm, Dim::Input),
        (LimitKind::OutputTokens, limits.otpm, Dim::Output),
    ]
}

/// Counts one admission (`counts`) in a scope and takes its slot.
fn take(st: &mut ScopeState, nb: u64, slot: Slot, counts: Counts) {
    let b = st.window.expire(nb);
    st.window.add(b, counts);
    st.slots.take(slot);
}

/// The limits of one scope that `counts` more would break.
fn blocked(
    w: &Window,
    slots: &Slots,
    limits: Limits,
    counts: Counts,
    now: u64,
) -> impl Iterator<Item = LimitKind> {
    let totals = w.totals();
    let windows = windowed(limits).map(|(kind, limit, dim)| {
        (
            kind,
            limit.is_some_and(|l| totals[dim] + counts[dim] > l.get()),
        )
    });
    let concurrency = (
        LimitKind::Concurrency,
        limits
            .concurrency
            .is_some_and(|l| slots.len(now) >= l.get()),
    );
    windows
        .into_iter()
        .chain([concurrency])
        .filter_map(|(kind, full)| full.then_some(kind))
}

/// How soon to ask again when what frees the limit is a settlement, which no clock predicts:
/// concurrency (slots are freed when requests settle), and input and output tokens while
/// requests are in flight (a limiter that counts them apart, Anthropic's ITPM and OTPM, is
/// corrected at settlement to what was used, often far below the `max_tokens` reserved). Poll;
/// the window's own expiry, or the oldest slot's, bounds the wait. Twin: `CONCURRENCY_POLL_MS`
/// in the Lua prelude, written from this constant.
pub(crate) const CONCURRENCY_POLL_MS: u64 = 1_000;

/// When a full limit of one scope would take `counts` more (ms).
fn free_at(
    kind: LimitKind,
    w: &Window,
    slots: &Slots,
    limits: Limits,
    counts: Counts,
    now: u64,
) -> u64 {
    let window = windowed(limits).into_iter().find(|&(k, _, _)| k == kind);
    match window {
        Some((_, limit, dim)) => {
            let expires = w.fits_at(dim, counts[dim], limit.map_or(0, |l| l.get()));
            let corrected = matches!(dim, Dim::Input | Dim::Output);
            if corrected && slots.len(now) > 0 {
                expires.min(now + CONCURRENCY_POLL_MS)
            } else {
                expires
            }
        }
        None => slots
            .earliest_expiry(now)
            .unwrap_or(now)
            .min(now + CONCURRENCY_POLL_MS),
    }
}

pub(crate) fn scope_usage(limits: Limits, counts: Counts, in_flight: u64) -> ScopeUsage {
    ScopeUsage {
        requests: counts.requests,
        tokens: counts.tokens,
        input_tokens: counts.input,
        output_tokens: counts.output,
        in_flight,
        rpm_limit: limits.rpm.map(|v| v.get()),
        tpm_limit: limits.tpm.map(|v| v.get()),
        itpm_limit: limits.itpm.map(|v| v.get()),
        otpm_limit: limits.otpm.map(|v| v.get()),
        concurrency_limit: limits.concurrency.map(|v| v.get()),
        rpd_limit: limits.rpd.map(|v| v.get()),
        tpd_limit: limits.tpd.map(|v| v.get()),
        ..ScopeUsage::default()
    }
}
