//! The fills of the simulation page: a colour and a pattern per deployment, so that two
//! deployments differ by more than their colour.
//!
//! The colours are Okabe and Ito's, told apart with the common forms of colour blindness. The
//! patterns are defined once, in a hidden SVG at the top of the page, and every chart refers to
//! them by id.

use std::fmt::Write as _;

/// Colours readable with the common forms of colour blindness.
const COLOURS: [&str; 6] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
];

/// Pattern kinds, combined with the colours: solid, stripes, dots, cross-hatch.
const PATTERNS: usize = 4;

/// How many fills differ in colour or pattern before they repeat.
const FILLS: usize = 12;

/// The fill of the deployment listed `index`-th (cheapest first).
#[derive(Debug, Clone, Copy)]
pub(super) struct Fill(usize);

impl Fill {
    /// The fill of the `index`-th deployment.
    pub(super) fn of(index: usize) -> Self {
        Fill(index % FILLS)
    }

    /// Its colour.
    pub(super) fn colour(self) -> &'static str {
        COLOURS[self.0 % COLOURS.len()]
    }

    /// The value of a `fill` attribute painting it.
    pub(super) fn paint(self) -> String {
        if self.0.is_multiple_of(PATTERNS) {
            self.colour().to_owned()
        } else {
            format!("url(#fill-{})", self.0)
        }
    }

    /// A 14 x 14 swatch of it, for tables and labels.
    pub(super) fn swatch(self) -> String {
        format!(
            "<svg class=\"swatch\" width=\"14\" height=\"14\" aria-hidden=\"true\">\
             <rect width=\"14\" height=\"14\" fill=\"{}\" stroke=\"{}\"/></svg>",
            self.paint(),
            self.colour()
        )
    }

    /// The `<pattern>` of this fill, or nothing for a solid one.
    fn pattern(self) -> String {
        let c = self.colour();
        let marks = match self.0 % PATTERNS {
            1 => format!(
                "<path d=\"M0 6 L6 0 M-1 1 L1 -1 M5 7 L7 5\" stroke=\"{c}\" stroke-width=\"2\"/>"
            ),
            2 => format!("<circle cx=\"3\" cy=\"3\" r=\"1.8\" fill=\"{c}\"/>"),
            3 => format!("<path d=\"M0 3 H6 M3 0 V6\" stroke=\"{c}\" stroke-width=\"1.5\"/>"),
            _ => return String::new(),
        };
        format!(
            "<pattern id=\"fill-{}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">\
             <rect width=\"6\" height=\"6\" fill=\"{c}\" fill-opacity=\"0.25\"/>{marks}</pattern>",
            self.0
        )
    }
}

/// The hidden SVG holding every pattern, to put once at the top of the page.
pub(super) fn definitions() -> String {
    let mut out = String::from(
        "<svg width=\"0\" height=\"0\" style=\"position:absolute\" aria-hidden=\"true\"><defs>",
    );
    for i in 0..FILLS {
        let _ = write!(out, "{}", Fill(i).pattern());
    }
    out.push_str("</defs></svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_differ_in_colour_and_patterns_are_all_defined() {
        for i in 0..FILLS {
            let (a, b) = (Fill::of(i), Fill::of(i + 1));
            assert_ne!(a.colour(), b.colour());
            assert_ne!(a.paint(), b.paint());
        }
        let defs = definitions();
        for i in (0..FILLS).filter(|i| i % PATTERNS != 0) {
            assert!(defs.contains(&format!("id=\"fill-{i}\"")), "{defs}");
        }
    }
}
