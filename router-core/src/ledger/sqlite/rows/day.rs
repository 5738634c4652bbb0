//! The day row of one scope, by scope name: what its current day counted against `rpd` and
//! `tpd`.

use rusqlite::{Connection, OptionalExtension, params};

use super::{from_db, to_db};
use crate::ledger::day::DayCount;

/// Scope `scope`'s day row, if it has one.
pub(super) fn load(conn: &Connection, ns: &str, scope: &str) -> rusqlite::Result<Option<DayCount>> {
    conn.prepare_cached(
        "SELECT day, requests, tokens FROM llmroute_v4_days WHERE ns = ?1 AND scope = ?2",
    )?
    .query_row(params![ns, scope], |r| {
        Ok(DayCount {
            day: Some(from_db(r.get(0)?)),
            requests: from_db(r.get(1)?),
            tokens: from_db(r.get(2)?),
        })
    })
    .optional()
}

/// Writes scope `scope`'s day if it differs from what was `stored` (no row: nothing counted).
pub(super) fn write(
    conn: &Connection,
    ns: &str,
    scope: &str,
    day: &DayCount,
    stored: Option<DayCount>,
) -> rusqlite::Result<()> {
    let Some(id) = day.day.filter(|_| stored.unwrap_or_default() != *day) else {
        return Ok(());
    };
    conn.prepare_cached(
        "INSERT OR REPLACE INTO llmroute_v4_days (ns, scope, day, requests, tokens) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        ns,
        scope,
        to_db(id),
        to_db(day.requests),
        to_db(day.tokens)
    ])?;
    Ok(())
}
