//! The charts of the simulation page: a deployment's use of one limit over the run, the
//! requests of every deployment stacked by the minute, and the cost against the baselines.

use std::fmt::Write as _;

use super::fills::Fill;
use super::svg::{self, Columns, Frame, compact, nice_max};

/// The frame of a chart of one deployment's use of one limit.
const USE: Frame = Frame {
    width: 540.0,
    height: 210.0,
    left: 48.0,
    right: 82.0,
};

/// The frame of the stacked chart of every deployment.
const STACKED: Frame = Frame {
    width: 1100.0,
    height: 320.0,
    left: 56.0,
    right: 280.0,
};

/// A deployment's use of one limit dimension, minute by minute.
#[derive(Debug)]
pub(super) struct UseChart<'a> {
    /// Its id on the page.
    pub(super) id: String,
    /// What it shows, e.g. `openai/gpt-4o-mini: requests per minute`.
    pub(super) title: String,
    /// What is counted, e.g. `requests served`.
    pub(super) unit: &'a str,
    /// The count of each minute.
    pub(super) minutes: Vec<u64>,
    /// The configured limit of the dimension; `None`: unlimited.
    pub(super) limit: Option<u64>,
    /// The deployment's fill.
    pub(super) fill: Fill,
    /// 429s of each minute, drawn as a dotted line on the same scale.
    pub(super) refused: Option<Vec<u64>>,
}

/// The chart of `c`: columns for the busiest minute of each column, the limit as a dashed line.
pub(super) fn use_chart(c: &UseChart<'_>) -> String {
    let columns = Columns::of(c.minutes.len());
    let values = columns.busiest(&c.minutes);
    let refused = c.refused.as_ref().map(|r| columns.busiest(r));
    let busiest = values.iter().fold(0.0, |a: f64, &b| a.max(b));
    let top = refused.iter().flatten().fold(busiest, |a, &b| a.max(b));
    let max = nice_max(top.max(c.limit.unwrap_or(0) as f64));
    let mut out = String::new();
    svg::open(&mut out, &c.id, &USE, &c.title, &use_desc(c, busiest));
    svg::axes(&mut out, &USE, (max, c.unit), columns);
    bars(&mut out, &USE, &values, max, c.fill);
    let limit_y = c.limit.map(|l| limit_line(&mut out, l, max));
    if let Some(r) = refused.filter(|r| r.iter().any(|&v| v > 0.0)) {
        refused_line(&mut out, &r, max, limit_y);
    }
    if c.limit.is_none() {
        svg::text(
            &mut out,
            (USE.end() + 4.0, USE.y(max, max) + 10.0),
            "start",
            "no limit",
        );
    }
    svg::close(&mut out);
    out
}

/// The description of a use chart: its busiest minute against the limit.
fn use_desc(c: &UseChart<'_>, busiest: f64) -> String {
    let limit = match c.limit {
        Some(l) => format!("the limit is {l}"),
        None => "no limit is configured".to_owned(),
    };
    format!(
        "{}: the busiest simulated minute had {busiest} {}; {limit}.",
        c.title, c.unit
    )
}

/// Columns of `values` in `fill`.
fn bars(out: &mut String, frame: &Frame, values: &[f64], max: f64, fill: Fill) {
    let n = values.len();
    let paint = fill.paint();
    for (i, &v) in values.iter().enumerate().filter(|(_, v)| **v > 0.0) {
        let (x, y) = (frame.x(i, n), frame.y(v, max));
        let width = column_width(frame, n);
        let _ = write!(
            out,
            "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{width:.2}\" height=\"{:.2}\" \
             fill=\"{paint}\" stroke=\"{}\" stroke-width=\"0.5\"/>",
            frame.base() - y,
            fill.colour()
        );
    }
}

/// The width of one of `n` columns, less a gap when there is room for one.
fn column_width(frame: &Frame, n: usize) -> f64 {
    let width = frame.plot_width() / n.max(1) as f64;
    if width > 4.0 { width - 1.0 } else { width }
}

/// The limit as a dashed line across the plot, labelled at its right; returns its y.
fn limit_line(out: &mut String, limit: u64, max: f64) -> f64 {
    let y = USE.y(limit as f64, max);
    let _ = write!(
        out,
        "<line class=\"limit\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>",
        USE.left,
        USE.end()
    );
    let label = format!("limit {}", compact(limit as f64));
    svg::text(out, (USE.end() + 4.0, y + 4.0), "start", &label);
    y
}

/// 429s as a dotted line through the columns' middles, labelled at its right clear of the
/// limit's label at `limit_y`.
fn refused_line(out: &mut String, values: &[f64], max: f64, limit_y: Option<f64>) {
    let n = values.len();
    let half = USE.plot_width() / n.max(1) as f64 / 2.0;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| format!("{:.1},{:.1}", USE.x(i, n) + half, USE.y(v, max)))
        .collect();
    let _ = write!(
        out,
        "<polyline class=\"refused\" points=\"{}\"/>",
        points.join(" ")
    );
    let mut y = USE.y(values.last().copied().unwrap_or(0.0), max) + 4.0;
    if let Some(limit) = limit_y.filter(|l| (l + 4.0 - y).abs() < 12.0) {
        y = limit + 16.0;
    }
    svg::text(out, (USE.end() + 4.0, y), "start", "429s (dotted)");
}

/// One deployment's layer of the stacked chart.
#[derive(Debug)]
pub(super) struct Layer {
    /// `provider/model`.
    pub(super) name: String,
    /// Requests served in each minute.
    pub(super) minutes: Vec<u64>,
    /// Its fill.
    pub(super) fill: Fill,
}

/// Requests served per minute, one layer per deployment stacked in the order given (cheapest
/// first, at the bottom), each layer named at the right.
pub(super) fn stacked_chart(layers: &[Layer]) -> String {
    let minutes = layers.first().map_or(1, |l| l.minutes.len());
    let columns = Columns::of(minutes);
    let values: Vec<Vec<f64>> = layers.iter().map(|l| columns.mean(&l.minutes)).collect();
    let totals: Vec<f64> = (0..columns.count)
        .map(|i| values.iter().map(|v| v[i]).sum())
        .collect();
    let max = nice_max(totals.iter().fold(0.0, |a: f64, &b| a.max(b)));
    let title = "Requests served per minute by deployment, cheapest at the bottom";
    let mut out = String::new();
    svg::open(&mut out, "overflow", &STACKED, title, &stacked_desc(layers));
    svg::axes(&mut out, &STACKED, (max, "requests served"), columns);
    let mut below = vec![0.0; columns.count];
    for (layer, v) in layers.iter().zip(&values) {
        stack(&mut out, v, &mut below, max, layer.fill);
    }
    layer_labels(&mut out, layers, &values, max);
    svg::close(&mut out);
    out
}

/// The description of the stacked chart: each layer's requests.
fn stacked_desc(layers: &[Layer]) -> String {
    let parts: Vec<String> = layers
        .iter()
        .map(|l| format!("{} {}", l.name, l.minutes.iter().sum::<u64>()))
        .collect();
    format!(
        "Requests served per simulated minute, stacked by deployment from the cheapest (bottom) \
         up; requests served in all: {}.",
        parts.join(", ")
    )
}

/// One layer's columns on top of `below`, which then includes them.
fn stack(out: &mut String, values: &[f64], below: &mut [f64], max: f64, fill: Fill) {
    let n = values.len();
    let width = column_width(&STACKED, n);
    let paint = fill.paint();
    for (i, &v) in values.iter().enumerate().filter(|(_, v)| **v > 0.0) {
        let bottom = STACKED.y(below[i], max);
        below[i] += v;
        let top = STACKED.y(below[i], max);
        let _ = write!(
            out,
            "<rect x=\"{:.2}\" y=\"{top:.2}\" width=\"{width:.2}\" height=\"{:.2}\" \
             fill=\"{paint}\" stroke=\"{}\" stroke-width=\"0.5\"/>",
            STACKED.x(i, n),
            bottom - top,
            fill.colour()
        );
    }
}

/// Each layer's name and swatch at the right, beside the middle of its mean band, kept at
/// least a line apart.
fn layer_labels(out: &mut String, layers: &[Layer], values: &[Vec<f64>], max: f64) {
    let n = values.first().map_or(1, Vec::len).max(1) as f64;
    let mut base = 0.0;
    let mut wanted: Vec<f64> = Vec::new();
    for v in values {
        let mean = v.iter().sum::<f64>() / n;
        wanted.push(STACKED.y(base + mean / 2.0, max));
        base += mean;
    }
    // From the bottom layer up, each label at least 15 units above the one below it.
    let mut floor = STACKED.base() + 8.0;
    let placed: Vec<f64> = wanted
        .iter()
        .map(|&y| {
            floor = y.min(floor - 15.0);
            floor
        })
        .collect();
    for (layer, y) in layers.iter().zip(placed) {
        let x = STACKED.end() + 6.0;
        let _ = write!(
            out,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"{}\"/>",
            y - 6.0,
            layer.fill.paint(),
            layer.fill.colour()
        );
        svg::text(out, (x + 16.0, y + 4.0), "start", &layer.name);
    }
}
