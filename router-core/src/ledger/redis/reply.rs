//! Decoding the scripts' replies (the shapes each script's header documents).

use crate::ledger::counts::Counts;
use std::time::Duration;

use crate::config::DeploymentId;
use crate::ledger::day::with_day;
use crate::ledger::day::{Day, DayCount};
use crate::ledger::engine::scope_usage;
use crate::ledger::scopes::SCOPE_ORDER;
use crate::ledger::scopes::ScopeTable;
use crate::ledger::types::*;

fn ms(from: i64, to: i64) -> Duration {
    Duration::from_millis(to.saturating_sub(from).max(0) as u64)
}

/// The reply of `lua/admit.lua`.
pub(super) fn admit(reply: &[i64], need: &Need, candidates: &[DeploymentId]) -> Option<Admission> {
    match reply {
        [1, _now, rank, bucket, day, month, counted @ ..] => {
            let rank = usize::try_from(*rank).ok()?;
            let accounts = need.tenant.as_ref().map_or(0, |t| t.specs.len());
            if !counted.is_empty() && counted.len() != 2 * accounts {
                return None;
            }
            let windows = counted
                .chunks_exact(2)
                .map(|c| {
                    Some(WindowUse {
                        requests: u64::try_from(c[0]).ok()?,
                        tokens: u64::try_from(c[1]).ok()?,
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            let tenant = need.tenant.as_ref().map(|t| TenantHold {
                names: t.specs.iter().map(|spec| spec.name.clone()).collect(),
                cost_micros: need.cost(rank),
                day: *day as u64,
                month: *month as u64,
                windows,
            });
            Some(Admission::Granted(Reservation {
                id: need.id,
                deployment: *candidates.get(rank)?,
                bucket: u64::try_from(*bucket).ok()?,
                tokens: need.tokens_on(rank),
                input_tokens: need.input_on(rank),
                rank,
                tenant,
            }))
        }
        [0, now, place, rest @ ..] if rest.len() == candidates.len() * 4 => {
            let refusals = candidates
                .iter()
                .zip(rest.chunks_exact(4))
                .map(|(&deployment, c)| refusal(deployment, c, *now))
                .collect::<Option<Vec<_>>>()?;
            let place = u64::try_from(*place).ok();
            Some(Admission::Denied(Denial { refusals, place }))
        }
        _ => None,
    }
}

fn refusal(deployment: DeploymentId, c: &[i64], now: i64) -> Option<Refusal> {
    let limit = match c[1] {
        1 => LimitKind::Cooldown,
        2 => LimitKind::Requests,
        3 => LimitKind::Tokens,
        4 => LimitKind::Concurrency,
        5 => LimitKind::DailyBudget,
        6 => LimitKind::MonthlyBudget,
        7 => LimitKind::InputTokens,
        8 => LimitKind::OutputTokens,
        9 => LimitKind::DailyRequests,
        10 => LimitKind::DailyTokens,
        11 => LimitKind::Line,
        _ => return None,
    };
    let scope = match c[2] {
        3 => Scope::Tenant,
        4 => Scope::Key,
        s => *SCOPE_ORDER.get(usize::try_from(s - 1).ok()?)?,
    };
    let verdict = match c[0] {
        1 => Verdict::Never,
        2 => Verdict::NotNow(ms(now, c[3])),
        3 => Verdict::Exhausted(ms(now, c[3])),
        _ => return None,
    };
    Some(Refusal {
        deployment,
        limit,
        scope,
        verdict,
    })
}

/// How the scripts write `scope` (the inverse of what [`admit`] reads).
pub(super) fn scope_code(scope: Scope) -> u8 {
    match scope {
        Scope::Deployment => 1,
        Scope::Provider => 2,
        Scope::Tenant => 3,
        Scope::Key => 4,
    }
}

/// The reply of `lua/tenant_snapshot.lua`.
pub(super) fn tenant_snapshot(reply: &[i64], spec: &TenantSpec) -> Option<TenantSnapshot> {
    let n = |v: i64| v.max(0) as u64;
    match reply {
        &[
            now,
            requests,
            tokens,
            input,
            output,
            in_flight,
            day,
            month,
            day_end,
            month_end,
            month_start,
            day_requests,
            day_tokens,
        ] => Some(TenantSnapshot {
            usage: with_day(
                scope_usage(
                    spec.limits,
                    Counts::from([requests, tokens, input, output].map(n)),
                    n(in_flight),
                ),
                spec.limits.per_day().then(|| Day {
                    id: 0,
                    start: 0,
                    end: n(day_end),
                }),
                DayCount {
                    day: Some(0),
                    requests: n(day_requests),
                    tokens: n(day_tokens),
                },
                n(now),
            ),
            spent_today_micros: n(day),
            spent_month_micros: n(month),
            budget: spec.budget,
            day_resets_in: ms(now, day_end),
            month_resets_in: ms(now, month_end),
            month_elapsed: ms(month_start, now),
        }),
        _ => None,
    }
}

/// The reply of `lua/snapshot.lua` for deployments `ds`, whose scopes are `scopes`.
pub(super) fn snapshot(
    table: &ScopeTable,
    ds: &[DeploymentId],
    scopes: &[&[usize]],
    days: &[Option<Day>],
    reply: &[i64],
) -> Option<Vec<DeploymentSnapshot>> {
    let mut days = days.iter();
    let (&now, rest) = reply.split_first()?;
    let (mut rest, lines) = rest.split_at_checked(rest.len().checked_sub(3 * ds.len())?)?;
    let mut lines = lines.chunks_exact(3);
    let n = |v: i64| v.max(0) as u64;
    let reported = |v: i64| (v >= 0).then_some(n(v));
    let mut out = Vec::with_capacity(ds.len());
    for (&d, sc) in ds.iter().zip(scopes) {
        let (head, tail) = rest.split_at_checked(6)?;
        let &[cooldown_end, requests, tokens, input, output, at] = head else {
            return None;
        };
        let (values, tail) = tail.split_at_checked(7 * sc.len())?;
        rest = tail;
        let mut usages = sc.iter().zip(values.chunks_exact(7)).map(|(&s, v)| {
            let counts = Counts::from([v[0], v[1], v[2], v[3]].map(n));
            let usage = scope_usage(table.def(s).limits, counts, n(v[4]));
            let day = days.next().copied().flatten();
            let counted = DayCount {
                day: day.map(|d| d.id),
                requests: n(v[5]),
                tokens: n(v[6]),
            };
            with_day(usage, day, counted, n(now))
        });
        out.push(DeploymentSnapshot {
            deployment: d,
            usage: usages.next()?,
            provider: usages.next(),
            cooldown: (cooldown_end > now).then(|| Duration::from_millis(n(cooldown_end - now))),
            reported: (at > 0 && now - at <= REPORT_TTL.as_millis() as i64).then(|| {
                ProviderReport {
                    requests_remaining: reported(requests),
                    tokens_remaining: reported(tokens),
                    input_tokens_remaining: reported(input),
                    output_tokens_remaining: reported(output),
                    age: Duration::from_millis(n(now - at)),
                }
            }),
            line: lines
                .next()
                .map(|l| LineUse::at(n(l[0]), n(l[1]), (l[2] >= 0).then(|| n(l[2])), n(now)))?,
        });
    }
    rest.is_empty().then_some(out)
}
