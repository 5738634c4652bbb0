//! Plain-text tables: columns padded to a common width.

use std::io::{self, Write};

/// Writes `rows` with each column padded to its widest cell, two spaces between columns, each
/// line prefixed by `indent`. The first `left` columns are left-aligned, the rest right-aligned
/// (numbers).
pub(crate) fn write(
    out: &mut dyn Write,
    rows: &[Vec<String>],
    indent: &str,
    left: usize,
) -> io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                if i < left {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        writeln!(out, "{indent}{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}
