//! The line rows of one deployment's scope: the tickets waiting for it.

use rusqlite::{Connection, params};

use super::{from_db, to_db};
use crate::ledger::line::{Entry, Line};

/// Deployment scope `scope`'s line.
pub(super) fn load(conn: &Connection, ns: &str, scope: &str) -> rusqlite::Result<Line> {
    let mut stmt = conn.prepare_cached(
        "SELECT ticket, rank, expiry, batch FROM llmroute_v4_lines WHERE ns = ?1 AND scope = ?2",
    )?;
    let entries = stmt
        .query_map(params![ns, scope], |r| {
            Ok(Entry {
                ticket: from_db(r.get(0)?),
                rank: from_db(r.get(1)?),
                expiry: from_db(r.get(2)?),
                batch: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Line::from_entries(entries))
}

/// Writes scope `scope`'s line when it differs from what was `stored`: its rows are replaced.
pub(super) fn write(
    conn: &Connection,
    ns: &str,
    scope: &str,
    line: &Line,
    stored: &Line,
) -> rusqlite::Result<()> {
    if line == stored {
        return Ok(());
    }
    conn.prepare_cached("DELETE FROM llmroute_v4_lines WHERE ns = ?1 AND scope = ?2")?
        .execute(params![ns, scope])?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO llmroute_v4_lines (ns, scope, ticket, rank, expiry, batch) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for e in line.entries() {
        insert.execute(params![
            ns,
            scope,
            to_db(e.ticket),
            to_db(e.rank),
            to_db(e.expiry),
            e.batch
        ])?;
    }
    Ok(())
}
