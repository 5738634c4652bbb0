//! SVG building blocks of the simulation page's charts: the frame, the axes, labels and
//! numbers. Every chart opens with a `<title>` and a `<desc>` that name what it shows.

use std::fmt::Write as _;

use super::html::escape;

/// A chart's size and the margins around its plot, in SVG units (pixels at 100 %).
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame {
    pub(super) width: f64,
    pub(super) height: f64,
    /// Room left of the plot, for the y axis's numbers.
    pub(super) left: f64,
    /// Room right of the plot, for direct labels.
    pub(super) right: f64,
}

/// Room above the plot.
const TOP: f64 = 14.0;
/// Room below the plot, for the x axis's numbers and name.
const BOTTOM: f64 = 34.0;

impl Frame {
    /// The plot's width.
    pub(super) fn plot_width(&self) -> f64 {
        self.width - self.left - self.right
    }

    /// The plot's bottom edge.
    pub(super) fn base(&self) -> f64 {
        self.height - BOTTOM
    }

    /// The x of the left edge of column `i` of `n`.
    pub(super) fn x(&self, i: usize, n: usize) -> f64 {
        self.left + self.plot_width() * i as f64 / n.max(1) as f64
    }

    /// The y of `value` on a scale from 0 to `max`.
    pub(super) fn y(&self, value: f64, max: f64) -> f64 {
        let plot = self.base() - TOP;
        self.base() - plot * (value / max).clamp(0.0, 1.0)
    }

    /// The plot's right edge.
    pub(super) fn end(&self) -> f64 {
        self.width - self.right
    }
}

/// Opens an `<svg>` of `frame`'s size named by `title` and described by `desc` (plain text,
/// escaped here), with `id` prefixing the ids of its title and description.
pub(super) fn open(out: &mut String, id: &str, frame: &Frame, title: &str, desc: &str) {
    let (w, h) = (frame.width, frame.height);
    let _ = write!(
        out,
        "<svg id=\"{id}\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" \
         aria-label=\"{t}\" aria-describedby=\"{id}-desc\">\
         <title>{t}</title><desc id=\"{id}-desc\">{d}</desc>",
        t = escape(title),
        d = escape(desc),
    );
}

/// Closes the `<svg>`.
pub(super) fn close(out: &mut String) {
    out.push_str("</svg>\n");
}

/// A `<text>` at (`x`, `y`) anchored `anchor` (`start`, `middle`, `end`), its content escaped.
pub(super) fn text(out: &mut String, (x, y): (f64, f64), anchor: &str, content: &str) {
    let _ = write!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{}</text>",
        escape(content)
    );
}

/// The y axis from 0 to `max`, named `unit`, with grid lines at 0, half and `max`; and the x
/// axis of `columns` columns of `per_column` simulated minutes each.
pub(super) fn axes(out: &mut String, frame: &Frame, (max, unit): (f64, &str), columns: Columns) {
    for value in [0.0, max / 2.0, max] {
        let y = frame.y(value, max);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>",
            frame.left,
            frame.end()
        );
        text(out, (frame.left - 5.0, y + 4.0), "end", &compact(value));
    }
    let below = frame.base() + 14.0;
    let Columns { count, per_column } = columns;
    let mid = count / 2;
    text(out, (frame.x(0, count), below), "start", "0");
    let mid_label = span(mid * per_column);
    text(out, (frame.x(mid, count), below), "middle", &mid_label);
    text(out, (frame.end(), below), "end", &span(count * per_column));
    let caption = if per_column == 1 {
        format!("{unit}, per simulated minute")
    } else {
        let each = span(per_column);
        format!("{unit}, per simulated minute (each column: {each})")
    };
    text(out, (frame.left, frame.height - 4.0), "start", &caption);
}

/// How the minutes of a run are drawn: `count` columns of `per_column` minutes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Columns {
    pub(super) count: usize,
    pub(super) per_column: usize,
}

/// The most columns a chart draws; a longer run puts several minutes in each.
const MOST_COLUMNS: usize = 120;

/// The minutes a column may span: round numbers of minutes, hours and days.
const ROUND_SPANS: [usize; 13] = [1, 2, 3, 5, 10, 15, 20, 30, 60, 120, 180, 360, 1440];

impl Columns {
    /// The columns of a run of `minutes` minutes: a round number of minutes each, as few as
    /// keep the columns at most [`MOST_COLUMNS`].
    pub(super) fn of(minutes: usize) -> Self {
        let fewest = minutes.div_ceil(MOST_COLUMNS).max(1);
        let per_column = ROUND_SPANS
            .iter()
            .copied()
            .find(|&span| span >= fewest)
            .unwrap_or(fewest);
        Self {
            count: minutes.div_ceil(per_column).max(1),
            per_column,
        }
    }

    /// The busiest minute of each column of `values` (one per minute).
    pub(super) fn busiest(self, values: &[u64]) -> Vec<f64> {
        self.each(values, |chunk| {
            chunk.iter().copied().max().unwrap_or(0) as f64
        })
    }

    /// The mean minute of each column of `values` (one per minute).
    pub(super) fn mean(self, values: &[u64]) -> Vec<f64> {
        self.each(values, |chunk| {
            chunk.iter().sum::<u64>() as f64 / chunk.len().max(1) as f64
        })
    }

    fn each(self, values: &[u64], f: impl Fn(&[u64]) -> f64) -> Vec<f64> {
        let mut out: Vec<f64> = values.chunks(self.per_column).map(f).collect();
        out.resize(self.count, 0.0);
        out
    }
}

/// `45 min`, `3 h`, `2.5 h`, `2 d`: a simulated time for an axis.
fn span(minutes: usize) -> String {
    let trim = |v: f64, unit: &str| {
        let digits = if v.fract().abs() < 0.05 { 0 } else { 1 };
        format!("{v:.digits$} {unit}")
    };
    match minutes {
        0..180 => format!("{minutes} min"),
        180..4320 => trim(minutes as f64 / 60.0, "h"),
        _ => trim(minutes as f64 / 1440.0, "d"),
    }
}

/// The smallest round number at or above `value`: 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power
/// of ten (1 for 0).
pub(super) fn nice_max(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&v| v >= value)
        .unwrap_or(10.0 * power)
}

/// `950`, `1.5k`, `30k`, `2.5M`: a number short enough for an axis.
pub(super) fn compact(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    let digits = if scaled.fract().abs() < 0.05 { 0 } else { 1 };
    format!("{scaled:.digits$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers_are_round_and_short() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 8.0);
        assert_eq!(nice_max(301.0), 400.0);
        assert_eq!(nice_max(2_950.0), 3_000.0);
        assert_eq!(nice_max(210.0), 250.0);
        assert_eq!(nice_max(1000.0), 1000.0);
        assert_eq!(compact(950.0), "950");
        assert_eq!(compact(1500.0), "1.5k");
        assert_eq!(compact(30_000.0), "30k");
        assert_eq!(compact(2_500_000.0), "2.5M");
        assert_eq!(compact(0.5), "0.5");
    }

    #[test]
    fn a_long_run_puts_a_round_number_of_minutes_in_a_column() {
        let columns = |minutes| {
            let c = Columns::of(minutes);
            (c.count, c.per_column)
        };
        assert_eq!(columns(60), (60, 1));
        assert_eq!(columns(241), (81, 3));
        assert_eq!(columns(1443), (97, 15));
        // Beyond a day a column, the fewest minutes that keep 120 columns.
        assert_eq!(columns(366 * 1440), (120, 4392));
        let day = Columns::of(1440);
        let minutes: Vec<u64> = (0..1440).map(|m| m % 15).collect();
        assert_eq!(day.busiest(&minutes), vec![14.0; 96]);
        assert_eq!(day.mean(&minutes), vec![7.0; 96]);
        assert_eq!(day.busiest(&[1; 1000]).len(), 96, "padded to the run");
    }

    #[test]
    fn times_read_in_minutes_hours_or_days() {
        assert_eq!(span(90), "90 min");
        assert_eq!(span(180), "3 h");
        assert_eq!(span(150), "150 min");
        assert_eq!(span(210), "3.5 h");
        assert_eq!(span(5760), "4 d");
    }
}
