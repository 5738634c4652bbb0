//! The cost chart of the simulation page: what the routed traffic cost against sending it all
//! to the cheapest or to the most expensive deployment, each bar labelled with its amount.

use std::fmt::Write as _;

use router_sim::SimReport;

use super::svg;

/// The chart's width.
const WIDTH: f64 = 1100.0;
/// Where the bars start; their names stand left of it.
const BARS_FROM: f64 = 430.0;
/// The longest bar.
const LONGEST: f64 = 520.0;
/// Height of one bar's row.
const ROW: f64 = 36.0;

/// A bar: its name, its amount in USD, and its colour.
struct Bar {
    name: String,
    usd: f64,
    colour: &'static str,
}

/// The bars of `report`: routed, all on the cheapest, all on the most expensive.
fn bars(report: &SimReport) -> [Bar; 3] {
    let b = &report.baselines;
    [
        Bar {
            name: "routed by llmroute (this simulation)".to_owned(),
            usd: report.totals.cost_usd,
            colour: "#0072B2",
        },
        Bar {
            name: format!("all on {} (cheapest, limits aside)", b.cheapest.deployment),
            usd: b.cheapest.cost_usd,
            colour: "#999999",
        },
        Bar {
            name: format!("all on {} (most expensive)", b.most_expensive.deployment),
            usd: b.most_expensive.cost_usd,
            colour: "#555555",
        },
    ]
}

/// The chart of `report`'s cost against its baselines.
pub(super) fn cost_chart(report: &SimReport) -> String {
    let bars = bars(report);
    let frame = svg::Frame {
        width: WIDTH,
        height: ROW * bars.len() as f64 + 10.0,
        left: BARS_FROM,
        right: WIDTH - BARS_FROM - LONGEST,
    };
    let most = bars.iter().fold(0.0, |a: f64, b| a.max(b.usd));
    let mut out = String::new();
    let title = "Cost of the served traffic, USD: routed against the baselines";
    svg::open(&mut out, "cost", &frame, title, &description(&bars, report));
    for (i, bar) in bars.iter().enumerate() {
        let y = 8.0 + ROW * i as f64;
        let length = if most > 0.0 {
            LONGEST * bar.usd / most
        } else {
            0.0
        };
        let _ = write!(
            out,
            "<rect x=\"{BARS_FROM}\" y=\"{y:.1}\" width=\"{length:.1}\" height=\"22\" \
             fill=\"{}\"/>",
            bar.colour
        );
        svg::text(&mut out, (BARS_FROM - 8.0, y + 15.0), "end", &bar.name);
        let amount = format!("${:.4}", bar.usd);
        svg::text(
            &mut out,
            (BARS_FROM + length + 6.0, y + 15.0),
            "start",
            &amount,
        );
    }
    svg::close(&mut out);
    out
}

/// The chart's description: every amount and the savings.
fn description(bars: &[Bar], report: &SimReport) -> String {
    let amounts: Vec<String> = bars
        .iter()
        .map(|b| format!("{} ${:.4}", b.name, b.usd))
        .collect();
    let b = &report.baselines;
    format!(
        "{}; savings ${:.4} ({:.1}%) against the most expensive.",
        amounts.join("; "),
        b.savings_usd,
        b.savings_pct
    )
}
