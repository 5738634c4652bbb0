//! The tables of the simulation page: the text report's numbers as HTML, so the page reads
//! without its charts or their colours.

use std::fmt::Write as _;

use router_sim::SimReport;

use super::fills::Fill;
use super::html::escape;
use super::{deployment_row, header, total_row};

/// A table named by `caption`: `head` as its header, `body` as its rows. The first cell of body
/// row `i` starts with the swatch of `fills[i]`, when there is one. Every cell is escaped.
pub(super) fn table(
    caption: &str,
    head: &[String],
    body: &[Vec<String>],
    fills: &[Fill],
) -> String {
    let mut out = format!("<table><caption>{}</caption><thead><tr>", escape(caption));
    for cell in head {
        let _ = write!(out, "<th scope=\"col\">{}</th>", escape(cell));
    }
    out.push_str("</tr></thead><tbody>");
    for (i, row) in body.iter().enumerate() {
        out.push_str("<tr>");
        for (j, cell) in row.iter().enumerate() {
            let swatch = match fills.get(i) {
                Some(fill) if j == 0 => fill.swatch(),
                _ => String::new(),
            };
            let _ = write!(out, "<td>{swatch}{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>\n");
    out
}

/// The text report's table: every deployment, then the total.
pub(super) fn report_table(r: &SimReport) -> String {
    let mut body: Vec<Vec<String>> = r.deployments.iter().map(deployment_row).collect();
    let mut total = total_row(r);
    total.resize(header().len(), String::new());
    body.push(total);
    let fills: Vec<Fill> = (0..r.deployments.len()).map(Fill::of).collect();
    let caption = "Per deployment, as the text report prints it (peaks: the most in any 60 s \
                   window against the limit)";
    table(caption, &header(), &body, &fills)
}

/// Each deployment's requests served and share of all served, cheapest first.
pub(super) fn share_table(r: &SimReport) -> String {
    let served = r.totals.served.max(1) as f64;
    let head = [
        "deployment",
        "$/Mtok in/out",
        "requests served",
        "share",
        "429s",
    ];
    let body: Vec<Vec<String>> = r
        .deployments
        .iter()
        .map(|d| {
            vec![
                d.name.clone(),
                format!("{}/{}", d.input_per_mtok, d.output_per_mtok),
                d.requests.to_string(),
                format!("{:.1}%", 100.0 * d.requests as f64 / served),
                d.rate_limited.to_string(),
            ]
        })
        .collect();
    let fills: Vec<Fill> = (0..body.len()).map(Fill::of).collect();
    let head: Vec<String> = head.iter().map(|h| (*h).to_owned()).collect();
    table(
        "Requests by deployment, cheapest first",
        &head,
        &body,
        &fills,
    )
}

/// The cost and its baselines as a table.
pub(super) fn cost_table(r: &SimReport) -> String {
    let b = &r.baselines;
    let usd = |v: f64| format!("${v:.4}");
    let head = vec!["traffic".to_owned(), "cost".to_owned()];
    let body = vec![
        vec!["routed by llmroute".to_owned(), usd(r.totals.cost_usd)],
        vec![
            format!("all on {} (cheapest)", b.cheapest.deployment),
            usd(b.cheapest.cost_usd),
        ],
        vec![
            format!("all on {} (most expensive)", b.most_expensive.deployment),
            usd(b.most_expensive.cost_usd),
        ],
        vec![
            "savings against the most expensive".to_owned(),
            format!("{} ({:.1}%)", usd(b.savings_usd), b.savings_pct),
        ],
    ];
    table("Cost of the served traffic", &head, &body, &[])
}

/// The lines a text writer of the report prints (`label:   text`), as a definition list.
pub(super) fn lines(
    write: fn(&mut dyn std::io::Write, &SimReport) -> std::io::Result<()>,
    r: &SimReport,
) -> String {
    let mut text = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write(&mut text, r);
    let mut out = String::from("<dl>");
    for line in String::from_utf8_lossy(&text).lines() {
        let (label, rest) = line.split_once(':').unwrap_or(("", line));
        let _ = write!(
            out,
            "<dt>{}</dt><dd>{}</dd>",
            escape(label.trim()),
            escape(rest.trim())
        );
    }
    out.push_str("</dl>\n");
    out
}
