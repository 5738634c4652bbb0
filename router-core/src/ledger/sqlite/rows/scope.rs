//! The rows of one scope, by scope name: its head row, its bucket rows and its slot rows.

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::{from_db, to_db};
use crate::ledger::engine::{Report, ScopeState};
use crate::ledger::window::{Counts, Slot, Slots, Window};

/// A scope's head row: oldest bucket, cooldown end, the provider's last report.
type Head = (Option<u64>, u64, Option<Report>);

/// What was stored of one scope, to diff the state against.
#[derive(Debug, Default)]
pub(super) struct Stored {
    /// The scope row `(oldest, cooldown, report)`, if there was one.
    head: Option<Head>,
    /// Stored bucket rows: bucket -> (requests, tokens, input, output).
    buckets: BTreeMap<u64, Counts>,
    /// Stored slots: id -> expiry.
    slots: HashMap<u64, u64>,
}

/// Loads scope `scope`: its state (empty when nothing is stored) and what was stored.
pub(super) fn load(
    conn: &Connection,
    ns: &str,
    scope: &str,
) -> rusqlite::Result<(ScopeState, Stored)> {
    let head = conn
        .prepare_cached(
            "SELECT oldest, cooldown, rep_requests, rep_tokens, rep_input, rep_output, rep_at \
             FROM llmroute_v4_scopes WHERE ns = ?1 AND scope = ?2",
        )?
        .query_row(params![ns, scope], |r| {
            let report = r
                .get::<_, Option<i64>>(6)?
                .map(|at| -> rusqlite::Result<Report> {
                    Ok(Report {
                        requests: r.get::<_, Option<i64>>(2)?.map(from_db),
                        tokens: r.get::<_, Option<i64>>(3)?.map(from_db),
                        input: r.get::<_, Option<i64>>(4)?.map(from_db),
                        output: r.get::<_, Option<i64>>(5)?.map(from_db),
                        at: from_db(at),
                    })
                });
            Ok((
                r.get::<_, Option<i64>>(0)?.map(from_db),
                from_db(r.get(1)?),
                report.transpose()?,
            ))
        })
        .optional()?;
    let buckets = conn
        .prepare_cached(
            "SELECT bucket, requests, tokens, input, output FROM llmroute_v4_buckets \
             WHERE ns = ?1 AND scope = ?2",
        )?
        .query_map(params![ns, scope], |r| {
            let k = from_db(r.get(0)?);
            let mut counts = [0; 4];
            for (i, c) in counts.iter_mut().enumerate() {
                *c = from_db(r.get(i + 1)?);
            }
            Ok((k, Counts::from(counts)))
        })?
        .collect::<rusqlite::Result<BTreeMap<_, _>>>()?;
    let held = conn
        .prepare_cached(
            "SELECT id, expiry, bucket FROM llmroute_v4_slots WHERE ns = ?1 AND scope = ?2",
        )?
        .query_map(params![ns, scope], |r| {
            Ok(Slot {
                id: from_db(r.get(0)?),
                expiry: from_db(r.get(1)?),
                bucket: from_db(r.get(2)?),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let (oldest, cooldown, report) = head.unwrap_or((None, 0, None));
    let rows = buckets.iter().map(|(&k, &c)| (k, c));
    let state = ScopeState {
        window: Window::from_parts(oldest, rows),
        slots: Slots::from_held(held.clone()),
        cooldown,
        report,
        day: Default::default(),
        line: Default::default(),
    };
    let slots = held.iter().map(|s| (s.id, s.expiry)).collect();
    Ok((
        state,
        Stored {
            head,
            buckets,
            slots,
        },
    ))
}

/// Writes the difference between what was `stored` of scope `scope` and its `state` now.
pub(super) fn write(
    conn: &Connection,
    ns: &str,
    scope: &str,
    state: &ScopeState,
    stored: &Stored,
) -> rusqlite::Result<()> {
    let head = (state.window.oldest(), state.cooldown, state.report);
    if stored.head.unwrap_or((None, 0, None)) != head {
        let rep = head.2;
        conn.prepare_cached(
            "INSERT OR REPLACE INTO llmroute_v4_scopes \
             (ns, scope, oldest, cooldown, rep_requests, rep_tokens, rep_input, rep_output, \
             rep_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            ns,
            scope,
            head.0.map(to_db),
            to_db(head.1),
            rep.and_then(|r| r.requests).map(to_db),
            rep.and_then(|r| r.tokens).map(to_db),
            rep.and_then(|r| r.input).map(to_db),
            rep.and_then(|r| r.output).map(to_db),
            rep.map(|r| to_db(r.at)),
        ])?;
    }
    let buckets: BTreeMap<u64, Counts> = state.window.buckets().collect();
    for k in stored.buckets.keys().filter(|k| !buckets.contains_key(k)) {
        conn.prepare_cached(
            "DELETE FROM llmroute_v4_buckets WHERE ns = ?1 AND scope = ?2 AND bucket = ?3",
        )?
        .execute(params![ns, scope, to_db(*k)])?;
    }
    for (
        &k,
        &Counts {
            requests: r,
            tokens: t,
            input: i,
            output: o,
        },
    ) in buckets
        .iter()
        .filter(|(k, v)| stored.buckets.get(k) != Some(v))
    {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO llmroute_v4_buckets \
             (ns, scope, bucket, requests, tokens, input, output) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            ns,
            scope,
            to_db(k),
            to_db(r),
            to_db(t),
            to_db(i),
            to_db(o)
        ])?;
    }
    let held = state.slots.held();
    let now_held: HashSet<u64> = held.iter().map(|s| s.id).collect();
    for id in stored.slots.keys().filter(|id| !now_held.contains(id)) {
        conn.prepare_cached(
            "DELETE FROM llmroute_v4_slots WHERE ns = ?1 AND scope = ?2 AND id = ?3",
        )?
        .execute(params![ns, scope, to_db(*id)])?;
    }
    // New slots, retaken ones (same id, new bucket) and renewed ones.
    for s in held
        .iter()
        .filter(|s| stored.slots.get(&s.id) != Some(&s.expiry))
    {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO llmroute_v4_slots (ns, scope, id, expiry, bucket) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            ns,
            scope,
            to_db(s.id),
            to_db(s.expiry),
            to_db(s.bucket)
        ])?;
    }
    Ok(())
}
