//! The spend row of one tenant, by tenant name.

use rusqlite::{Connection, OptionalExtension, params};

use super::{from_db, to_db};
use crate::ledger::engine::Spend;

/// Tenant `tenant`'s spend row, if it has one.
pub(super) fn load(conn: &Connection, ns: &str, tenant: &str) -> rusqlite::Result<Option<Spend>> {
    conn.prepare_cached(
        "SELECT day, day_micros, month, month_micros FROM llmroute_v4_spend \
         WHERE ns = ?1 AND tenant = ?2",
    )?
    .query_row(params![ns, tenant], |r| {
        Ok(Spend {
            day: from_db(r.get(0)?),
            day_micros: from_db(r.get(1)?),
            month: from_db(r.get(2)?),
            month_micros: from_db(r.get(3)?),
        })
    })
    .optional()
}

/// Writes tenant `tenant`'s spend if it differs from what was `stored` (no row: nothing spent).
pub(super) fn write(
    conn: &Connection,
    ns: &str,
    tenant: &str,
    spend: &Spend,
    stored: Option<Spend>,
) -> rusqlite::Result<()> {
    if stored.unwrap_or_default() == *spend {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO llmroute_v4_spend (ns, tenant, day, day_micros, month, month_micros) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        ns,
        tenant,
        to_db(spend.day),
        to_db(spend.day_micros),
        to_db(spend.month),
        to_db(spend.month_micros)
    ])?;
    Ok(())
}
