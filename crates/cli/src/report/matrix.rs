//! Per matrix: its sparsity pattern binned to a fixed grid, its row-length histogram, and the
//! plan the generator makes for it with the model (on the model's GPU), with the predicted
//! times of every step's choice and runners-up.
use std::fmt::Write;

use anyhow::{Context, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use autopcg::generator::{plan, ModelRef, PlanRequest, SolvePlan, Target};
use autopcg::sparse::features::row_length_histogram;
use autopcg::{CsrMatrix, PrecondKind, SsorForm};

use super::data::{Inputs, LoadedMatrix};
use super::html::esc;
use super::plot::{color, err, font, si, svg, us};

/// Bins per side of the sparsity pattern: a larger matrix is drawn at this many cells a side,
/// so the plot's size does not grow with the matrix.
pub(crate) const SPY_BINS: usize = 128;
/// Pixels per side of the pattern.
const SPY_PX: i32 = 320;
/// Shades of a pattern cell (by the log of the entries it holds).
const SPY_SHADES: usize = 4;
/// Bars of the row-length histogram at most (wider lengths are binned).
const HIST_BARS: usize = 60;

/// Entries per cell of a `bins` x `bins` grid over the matrix (row-major).
pub(crate) fn spy_counts(a: &CsrMatrix, bins: usize) -> Vec<u64> {
    let n = a.nrows().max(a.ncols()).max(1);
    let bins = bins.max(1);
    let mut counts = vec![0u64; bins * bins];
    let (ptr, idx) = (a.indptr(), a.indices());
    for r in 0..a.nrows() {
        let br = r * bins / n;
        for &c in &idx[ptr[r] as usize..ptr[r + 1] as usize] {
            counts[br * bins + c as usize * bins / n] += 1;
        }
    }
    counts
}

/// The HTML of the section.
pub(crate) fn section(inputs: &Inputs) -> Result<String> {
    let mut h = String::new();
    h.push_str("<section id=\"matrices\">\n<h2>Matrices</h2>\n");
    if inputs.matrices.is_empty() {
        h.push_str("<p class=\"note\">No matrix given (<code>--matrix A.mtx</code>).</p>\n");
    }
    let label = inputs.model_path.display().to_string();
    for (i, m) in inputs.matrices.iter().enumerate() {
        h.push_str(&one(i, m, inputs, &label)?);
    }
    h.push_str("</section>\n");
    Ok(h)
}

fn one(i: usize, m: &LoadedMatrix, inputs: &Inputs, label: &str) -> Result<String> {
    let a = &m.matrix;
    let name = m.path.file_name().map_or_else(
        || m.path.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    let mut h = String::new();
    let _ = write!(
        h,
        "<h3 id=\"matrix-{i}\">{}</h3>\n<p>{} rows, {} nonzeros ({:.1} per row)</p>\n\
         <div class=\"grid\">\n",
        esc(&name),
        a.nrows(),
        a.nnz(),
        a.nnz() as f64 / a.nrows().max(1) as f64
    );
    let _ = writeln!(
        h,
        "<figure>{}<figcaption>Sparsity pattern{}</figcaption></figure>",
        spy_plot(&format!("spy-{i}"), a)?,
        if a.nrows() > SPY_BINS {
            format!(
                ", {SPY_BINS} x {SPY_BINS} cells of about {} rows; darker: more entries",
                a.nrows().div_ceil(SPY_BINS)
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        h,
        "<figure>{}<figcaption>Rows by number of stored entries</figcaption></figure>",
        hist_plot(&format!("rowlen-{i}"), a)?
    );
    let mut req = PlanRequest::new(
        a,
        PrecondKind::SsorAi {
            order: 1,
            omega: None,
            form: SsorForm::Factored,
        },
        Target::Gpu(inputs.model.device.clone()),
    );
    req.ssor_form_auto = true;
    req.model = Some(ModelRef {
        file: &inputs.model,
        label,
    });
    let p = plan(&req).with_context(|| format!("planning a solve of {}", m.path.display()))?;
    let _ = write!(
        h,
        "<figure>{}<figcaption>Predicted time of each step's choice (dark) and runners-up</figcaption></figure>\n</div>\n",
        plan_plot(&format!("plan-{i}"), &p)?
    );
    h.push_str(&plan_table(&p));
    Ok(h)
}

fn spy_plot(id: &str, a: &CsrMatrix) -> Result<String> {
    let n = a.nrows().max(a.ncols()).max(1);
    let bins = n.min(SPY_BINS);
    let counts = spy_counts(a, bins);
    let max = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let shade = |c: u64| -> usize {
        if c == 0 {
            return 0;
        }
        // 1 ..= SPY_SHADES by the log of the count against the fullest cell.
        let s = if max > 1.0 {
            (c as f64).ln() / max.ln()
        } else {
            1.0
        };
        1 + ((s * SPY_SHADES as f64) as usize).min(SPY_SHADES - 1)
    };
    let (x0, y0) = (46, 14);
    let edge = |i: usize| (i as i64 * SPY_PX as i64 / bins as i64) as i32;
    svg(
        id,
        (x0 + SPY_PX + 14) as u32,
        (y0 + SPY_PX + 30) as u32,
        |root| {
            root.draw(&Rectangle::new(
                [(x0, y0), (x0 + SPY_PX, y0 + SPY_PX)],
                BLACK.mix(0.4),
            ))
            .map_err(err)?;
            for r in 0..bins {
                // Runs of one shade along a row are one rectangle.
                let mut c = 0;
                while c < bins {
                    let s = shade(counts[r * bins + c]);
                    let start = c;
                    while c < bins && shade(counts[r * bins + c]) == s {
                        c += 1;
                    }
                    if s > 0 {
                        let alpha = 0.25 + 0.75 * s as f64 / SPY_SHADES as f64;
                        root.draw(&Rectangle::new(
                            [
                                (x0 + edge(start), y0 + edge(r)),
                                (
                                    x0 + edge(c).max(edge(start) + 1),
                                    y0 + edge(r + 1).max(edge(r) + 1),
                                ),
                            ],
                            color(0).mix(alpha).filled(),
                        ))
                        .map_err(err)?;
                    }
                }
            }
            for (t, pos, anchor) in [
                ("1".to_string(), (x0 - 4, y0), (HPos::Right, VPos::Top)),
                (
                    si(n as f64),
                    (x0 - 4, y0 + SPY_PX),
                    (HPos::Right, VPos::Bottom),
                ),
                (
                    si(n as f64),
                    (x0 + SPY_PX, y0 + SPY_PX + 4),
                    (HPos::Right, VPos::Top),
                ),
                (
                    "row".to_string(),
                    (x0 - 4, y0 + SPY_PX / 2),
                    (HPos::Right, VPos::Center),
                ),
                (
                    "column".to_string(),
                    (x0 + SPY_PX / 2, y0 + SPY_PX + 4),
                    (HPos::Center, VPos::Top),
                ),
            ] {
                root.draw(&Text::new(t, pos, font(12, anchor.0, anchor.1)))
                    .map_err(err)?;
            }
            Ok(())
        },
    )
}

fn hist_plot(id: &str, a: &CsrMatrix) -> Result<String> {
    let hist = row_length_histogram(a);
    let width = hist.len().div_ceil(HIST_BARS).max(1);
    let bars: Vec<(usize, u64)> = hist
        .chunks(width)
        .enumerate()
        .map(|(i, c)| (i * width, c.iter().sum()))
        .collect();
    let xmax = (bars.len() * width).max(1) as f64;
    let ymax = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1) as f64 * 1.08;
    svg(id, 380, SPY_PX as u32 + 44, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(52)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(if width > 1 {
                format!("entries per row (bins of {width})")
            } else {
                "entries per row".to_string()
            })
            .y_desc("rows")
            .x_label_formatter(&|v| si(*v))
            .y_label_formatter(&|v| si(*v))
            .label_style(("sans-serif", 12))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(bars.iter().filter(|b| b.1 > 0).map(|&(lo, c)| {
                Rectangle::new(
                    [(lo as f64, 0.0), ((lo + width) as f64, c as f64)],
                    color(0).mix(0.8).filled(),
                )
            }))
            .map_err(err)?;
        Ok(())
    })
}

/// Each explained step: its options as bars of predicted time (score, conversion amortised
/// included), scaled within the step.
fn plan_plot(id: &str, p: &SolvePlan) -> Result<String> {
    let (row, head) = (19i32, 24i32);
    let rows: i32 = p.explain.iter().map(|s| s.options.len() as i32).sum();
    let h = (10 + head * p.explain.len() as i32 + row * rows + 10).max(60) as u32;
    let (bar_x, bar_w) = (300i32, 300i32);
    svg(id, 700, h, |root| {
        if p.explain.is_empty() {
            root.draw(&Text::new(
                "the model chose no step (see the notes)",
                (10, 20),
                font(13, HPos::Left, VPos::Top),
            ))
            .map_err(err)?;
            return Ok(());
        }
        let mut y = 10;
        for (si_, s) in p.explain.iter().enumerate() {
            root.draw(&Text::new(
                s.step.clone(),
                (8, y + 4),
                font(14, HPos::Left, VPos::Top).color(&BLACK),
            ))
            .map_err(err)?;
            y += head;
            let max = s
                .options
                .iter()
                .map(|o| o.score_ms)
                .fold(0.0f64, f64::max)
                .max(f64::MIN_POSITIVE);
            for (oi, o) in s.options.iter().enumerate() {
                let c = if oi == 0 { color(si_ % 10) } else { color(7) };
                root.draw(&Text::new(
                    o.name.clone(),
                    (bar_x - 8, y + row / 2),
                    font(12, HPos::Right, VPos::Center),
                ))
                .map_err(err)?;
                let w = ((o.score_ms / max) * bar_w as f64).round().max(1.0) as i32;
                root.draw(&Rectangle::new(
                    [(bar_x, y + 3), (bar_x + w, y + row - 3)],
                    c.mix(if oi == 0 { 0.9 } else { 0.45 }).filled(),
                ))
                .map_err(err)?;
                let conv = match o.conversion_ms {
                    Some(c) if c > 0.0 => format!(" (+{} µs conversion)", us(c * 1e3)),
                    _ => String::new(),
                };
                root.draw(&Text::new(
                    format!("{} µs{conv}", us(o.predicted_ms * 1e3)),
                    (bar_x + w + 6, y + row / 2),
                    font(12, HPos::Left, VPos::Center),
                ))
                .map_err(err)?;
                y += row;
            }
        }
        Ok(())
    })
}

fn plan_table(p: &SolvePlan) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<p>Plan ({}, preconditioner {}){}:</p>\n<table class=\"num\"><tr><th>step</th>\
         <th>format</th><th>kernel</th><th>launch</th><th>predicted µs</th></tr>\n",
        esc(&p.steps.source),
        esc(p.precond_applied()),
        p.predicted_iteration_ms
            .map_or_else(String::new, |t| format!(
                ", predicted {} µs per iteration",
                us(t * 1e3)
            ))
    );
    for s in &p.steps.steps {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.step),
            esc(&s.format),
            esc(&s.kernel),
            esc(&s.config),
            s.predicted_ms
                .map_or_else(|| "-".to_string(), |t| us(t * 1e3))
        );
    }
    h.push_str("</table>\n");
    if !p.explain.is_empty() {
        h.push_str("<ul class=\"why\">");
        for s in &p.explain {
            let _ = write!(
                h,
                "<li><b>{}</b>: {}{}</li>",
                esc(&s.step),
                esc(&s.why),
                s.classifier
                    .as_ref()
                    .map_or_else(String::new, |c| format!(" (classifier: {})", esc(c)))
            );
        }
        h.push_str("</ul>\n");
    }
    for n in &p.notes {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(n));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spy_cells_count_every_entry_once() {
        // Tridiagonal 10 x 10 binned to 2 x 2: rows 0-4 and 5-9.
        let n: usize = 10;
        let mut ptr = vec![0u32];
        let mut idx = Vec::new();
        for r in 0..n {
            for c in r.saturating_sub(1)..(r + 2).min(n) {
                idx.push(c as u32);
            }
            ptr.push(idx.len() as u32);
        }
        let vals = vec![1.0; idx.len()];
        let a = CsrMatrix::try_from_parts(n, n, ptr, idx, vals).unwrap();
        let c = spy_counts(&a, 2);
        assert_eq!(c.iter().sum::<u64>(), a.nnz() as u64);
        // Only (4,5) and (5,4) cross the cut.
        assert_eq!(c, vec![13, 1, 1, 13]);
    }
}
