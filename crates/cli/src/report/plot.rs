//! What every plot shares: the SVG canvas, the colours, the number formats.
use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The drawing area of one plot (pixel coordinates, origin top left).
pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A drawing error as an error of this command.
pub(crate) fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing a plot: {e:?}")
}

/// Draws one `w` x `h` plot and returns it as an inline `<svg>` element with `id`: without the
/// XML namespace attribute (an `<svg>` inside HTML needs none, and the page names no address).
pub(crate) fn svg(
    id: &str,
    w: u32,
    h: u32,
    draw: impl FnOnce(&Area) -> Result<()>,
) -> Result<String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    let s = s.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
    let body = s
        .strip_prefix("<svg ")
        .ok_or_else(|| anyhow!("the plot {id} does not start with an <svg> element"))?;
    Ok(format!(
        "<svg id=\"{}\" class=\"plot\" role=\"img\" {body}",
        super::html::esc(id)
    ))
}

/// Ten distinct colours (the "category 10" palette), cycled.
pub(crate) fn color(i: usize) -> RGBColor {
    const P: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = P[i % P.len()];
    RGBColor(r, g, b)
}

/// `#rrggbb` of a colour, for HTML legends.
pub(crate) fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A font of `size` pixels, anchored at `h`, `v`.
pub(crate) fn font(size: u32, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", size).into_font()).pos(Pos::new(h, v))
}

/// A count or size with a k/M/G suffix: 1024 -> "1.0k", 409600 -> "410k", 2^28 -> "268M".
pub(crate) fn si(v: f64) -> String {
    let a = v.abs();
    let (x, s) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if x.abs() >= 10.0 || (s.is_empty() && x == x.round()) {
        format!("{x:.0}{s}")
    } else {
        format!("{x:.1}{s}")
    }
}

/// A time in microseconds with three significant digits.
pub(crate) fn us(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `n` values spread geometrically over `[lo, hi]` (both included, `0 < lo < hi`).
pub(crate) fn geom_space(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let n = n.max(2);
    (0..n)
        .map(|i| lo * (hi / lo).powf(i as f64 / (n - 1) as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_and_times_read_as_intended() {
        assert_eq!(si(1024.0), "1.0k");
        assert_eq!(si(409_600.0), "410k");
        assert_eq!(si(268_435_456.0), "268M");
        assert_eq!(si(12.0), "12");
        assert_eq!(us(3.54321), "3.54");
        assert_eq!(us(0.0123), "0.012");
        let g = geom_space(10.0, 1000.0, 3);
        assert!((g[1] - 100.0).abs() < 1e-9 && g[2] == 1000.0);
    }

    #[test]
    fn a_plot_is_an_svg_element_with_its_id_and_no_address() {
        let s = svg("p-1", 100, 50, |a| {
            a.draw(&Text::new("a < b", (5, 5), font(12, HPos::Left, VPos::Top)))
                .map_err(err)
        })
        .unwrap();
        assert!(s.starts_with("<svg id=\"p-1\" class=\"plot\""), "{s}");
        assert!(!s.contains("http"), "{s}");
        assert!(s.contains("a &lt; b"), "{s}");
        assert!(s.trim_end().ends_with("</svg>"), "{s}");
    }
}
