//! The simulation page: its sections in order, from the title to the full table.
//!
//! The page says SIMULATION in its title and at its top, lists the flags of the run, then
//! shows the cost against the baselines, the requests of every deployment stacked by the
//! minute, each deployment's use of its limits, and the text report's numbers.

use std::fmt::Write as _;

use router_sim::{DeploymentMinutes, DeploymentReport, Minute, SimReport};

use super::charts::{self, Layer, UseChart};
use super::fills::{self, Fill};
use super::html::escape;
use super::{FOOTER, cost, tables, write_profile, write_totals};

/// The page's style sheet.
const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;color:#111;background:#fff;max-width:1120px;\
margin:24px auto;padding:0 16px}\
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 6px}\
h3{font-size:15px;margin:20px 0 4px}\
.banner{border:2px solid #111;padding:8px 12px;font-weight:600;background:#f2f2f2}\
code{background:#f2f2f2;padding:2px 4px;overflow-wrap:anywhere}\
.charts{display:flex;flex-wrap:wrap;gap:8px 16px}\
svg{max-width:100%;height:auto}svg text{font:12px system-ui,sans-serif;fill:#111}\
svg .grid{stroke:#ddd}svg .limit{stroke:#111;stroke-width:1.5;stroke-dasharray:7 4}\
svg .refused{fill:none;stroke:#D55E00;stroke-width:2;stroke-dasharray:2 3}\
table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #bbb;padding:3px 8px}\
th:not(:first-child),td:not(:first-child){text-align:right}td:first-child{white-space:nowrap}\
caption{text-align:left;font-weight:600;padding:4px 0}\
.swatch{vertical-align:-2px;margin-right:6px}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}dt{font-weight:600}dd{margin:0}";

/// The whole page of `report`.
pub(super) fn build(report: &SimReport) -> String {
    let mut page = String::with_capacity(64 * 1024);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>SIMULATION: llmroute simulate, model {} (no requests were sent)</title>\
         <style>{STYLE}</style></head><body>\n",
        escape(&report.model)
    );
    page.push_str(&fills::definitions());
    intro(&mut page, report);
    page.push_str("<h2>Cost against the baselines</h2>\n");
    page.push_str(&cost::cost_chart(report));
    page.push_str(&tables::cost_table(report));
    overflow(&mut page, report);
    page.push_str("<h2>Each deployment's use of its limits</h2>\n");
    let listed = report.deployments.iter().zip(&report.per_minute);
    for (i, (d, minutes)) in listed.enumerate() {
        deployment(&mut page, i, d, minutes);
    }
    page.push_str("<h2>All the numbers</h2>\n");
    page.push_str(&tables::report_table(report));
    page.push_str(&tables::lines(write_totals, report));
    let _ = write!(
        page,
        "<p class=\"banner\">{}</p>\n</body></html>\n",
        escape(FOOTER)
    );
    page
}

/// The title, the SIMULATION banner, the flags of the run and its profile.
fn intro(page: &mut String, report: &SimReport) {
    let _ = write!(
        page,
        "<h1>SIMULATION: llmroute simulate</h1>\n\
         <p class=\"banner\">SIMULATION: no requests were sent. A virtual clock and simulated \
         providers enforcing the configured limits; no network, no keys.</p>\n\
         <p>Flags: <code>{}</code></p>\n",
        escape(&command(report))
    );
    page.push_str(&tables::lines(write_profile, report));
}

/// The command line that repeats this simulation (the configuration aside).
fn command(r: &SimReport) -> String {
    let p = &r.profile;
    let max_tokens = p.max_tokens.map_or("none".to_owned(), |n| n.to_string());
    format!(
        "llmroute simulate -m {} --rps {} --duration {}s --prompt-tokens {} --prompt-spread {} \
         --output-tokens {} --output-spread {} --max-tokens {max_tokens} --burstiness {} \
         --foreign-load {} --provider-headroom {} --latency-ms {} --ms-per-token {} --batch {} \
         --seed {}",
        r.model,
        p.rps,
        p.duration_secs,
        p.prompt.mean,
        p.prompt.spread,
        p.output.mean,
        p.output.spread,
        p.burstiness,
        p.foreign_load,
        p.provider_headroom,
        p.latency.base_ms,
        p.latency.per_token_ms,
        p.batch_share,
        p.seed
    )
}

/// The stacked chart of requests per minute and its table.
fn overflow(page: &mut String, report: &SimReport) {
    page.push_str(
        "<h2>Overflow to the next-cheapest</h2>\n<p>Requests served per simulated minute, one \
         layer per deployment from the cheapest (bottom) up: the cheapest fills to its limits \
         and the rest overflows to the next.</p>\n",
    );
    let layers: Vec<Layer> = report
        .per_minute
        .iter()
        .enumerate()
        .map(|(i, m)| Layer {
            name: m.name.clone(),
            minutes: m.minutes.iter().map(|m| m.requests).collect(),
            fill: Fill::of(i),
        })
        .collect();
    page.push_str(&charts::stacked_chart(&layers));
    page.push_str(&tables::share_table(report));
}

/// One deployment: its name and limits, a chart per limited dimension, its row of the table.
fn deployment(page: &mut String, i: usize, d: &DeploymentReport, minutes: &DeploymentMinutes) {
    let fill = Fill::of(i);
    let _ = write!(
        page,
        "<h3>{}{}</h3>\n<p>${} in / ${} out per million tokens. Columns: the busiest \
         minute; dashed line: the configured limit.</p>\n<div class=\"charts\">",
        fill.swatch(),
        escape(&d.name),
        d.input_per_mtok,
        d.output_per_mtok
    );
    for chart in use_charts(i, d, minutes) {
        page.push_str(&charts::use_chart(&chart));
    }
    page.push_str("</div>\n");
    let row = super::deployment_row(d);
    let caption = format!("{}: the text report's row", d.name);
    page.push_str(&tables::table(&caption, &super::header(), &[row], &[fill]));
}

/// The charts of deployment `d`: requests per minute (and 429s), tokens per minute, and input
/// and output tokens apart when it limits them apart.
fn use_charts<'a>(i: usize, d: &DeploymentReport, m: &DeploymentMinutes) -> Vec<UseChart<'a>> {
    let series = |f: fn(&Minute) -> u64| m.minutes.iter().map(f).collect::<Vec<u64>>();
    let chart = |dimension: &str, unit: &'a str, minutes, limit| UseChart {
        id: format!("d{i}-{dimension}"),
        title: format!("{}: {unit} per minute", d.name),
        unit,
        minutes,
        limit,
        fill: Fill::of(i),
        refused: None,
    };
    let mut requests = chart(
        "rpm",
        "requests served",
        series(|m| m.requests),
        d.limits.rpm,
    );
    requests.refused = Some(series(|m| m.rate_limited));
    let mut out = vec![requests];
    let apart = m.itpm.is_some() || m.otpm.is_some();
    if d.limits.tpm.is_some() || !apart {
        let counted = series(|m| m.counted_tokens);
        out.push(chart(
            "tpm",
            "tokens counted by the provider",
            counted,
            d.limits.tpm,
        ));
    }
    if apart {
        let input = series(|m| m.prompt_tokens);
        out.push(chart("itpm", "input tokens", input, m.itpm));
        let output = series(|m| m.completion_tokens);
        out.push(chart("otpm", "output tokens", output, m.otpm));
    }
    out
}
