//! SpMV: predicted against measured time per kernel family (the fit profile's matrices and the
//! held-out ones), and the selection on every held-out matrix against the measured best, the
//! shipped fallback rule and cuSPARSE (the figures of `eval-model`, drawn).
use std::fmt::Write;

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use autopcg::model::profile::MatrixSet;
use autopcg::model::spmv::KernelKind;
use autopcg::model::spmv_eval::{PredictionEval, NEAR_BEST};
use autopcg::model::{evaluate_spmv, ModelFile, SpmvEvalReport};

use super::data::Inputs;
use super::html::esc;
use super::plot::{color, err, font, hex, si, svg, us};

/// Half width of the band around the diagonal (5 %).
pub(crate) const BAND: f64 = 0.05;

/// The family of a kernel kind (CSR vector kernels of every lane count together).
pub(crate) fn family(k: KernelKind) -> &'static str {
    match k {
        KernelKind::CsrScalar => "csr_scalar",
        KernelKind::CsrVector { .. } => "csr_vector",
        KernelKind::Ell => "ell",
        KernelKind::Dia => "dia",
        KernelKind::CooAtomic => "coo_atomic",
        KernelKind::CooSegment => "coo_segment",
        KernelKind::Hyb => "hyb",
        KernelKind::Generic => "generic",
    }
}

/// The families of the model's candidates, in the order of their first candidate.
pub(crate) fn families(m: &ModelFile) -> Vec<&'static str> {
    let mut out = Vec::new();
    for c in &m.spmv.candidates {
        let f = family(c.kind);
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// The family of a prediction's candidate, by the model's candidate of that name.
fn family_of(m: &ModelFile, p: &PredictionEval) -> Option<&'static str> {
    m.spmv
        .candidates
        .iter()
        .find(|c| c.candidate.name() == p.candidate)
        .map(|c| family(c.kind))
}

/// The model's predictions on the fit profile's own matrices (in sample) and the evaluation of
/// the held-out profile, when there are profiles.
pub(crate) struct SpmvFigures {
    pub(crate) fit: Option<SpmvEvalReport>,
    pub(crate) eval: Option<SpmvEvalReport>,
}

impl SpmvFigures {
    pub(crate) fn of(inputs: &Inputs) -> Result<SpmvFigures> {
        let m = &inputs.model;
        // A profile without fit matrices has nothing to compare: no points, not an error.
        let fit = inputs
            .profile
            .as_ref()
            .and_then(|p| evaluate_spmv(&m.spmv, None, &p.profile, Some(MatrixSet::Fit)).ok());
        let eval = inputs
            .eval
            .as_ref()
            .map(|e| crate::evalmodel::judge(m, &inputs.model_path, &e.profile, &e.path))
            .transpose()?;
        Ok(SpmvFigures { fit, eval })
    }
}

/// The predictions of a report whose candidate is of family `fam`.
fn preds<'a>(m: &ModelFile, r: &'a Option<SpmvEvalReport>, fam: &str) -> Vec<&'a PredictionEval> {
    r.iter()
        .flat_map(|r| &r.per_prediction)
        .filter(|p| family_of(m, p) == Some(fam))
        .collect()
}

/// Share of predictions within the band.
fn within(ps: &[&PredictionEval]) -> f64 {
    ps.iter().filter(|p| p.rel_err <= BAND).count() as f64 / ps.len().max(1) as f64
}

fn median_err(ps: &[&PredictionEval]) -> f64 {
    let mut v: Vec<f64> = ps.iter().map(|p| p.rel_err).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The HTML of the section.
pub(crate) fn section(inputs: &Inputs, f: &SpmvFigures) -> Result<String> {
    let m = &inputs.model;
    let mut h = String::new();
    h.push_str("<section id=\"spmv\">\n<h2>SpMV</h2>\n");
    let fit_c = color(0);
    let eval_c = color(1);
    let _ = write!(
        h,
        "<h3 id=\"spmv-accuracy\">Predicted against measured time, per kernel family</h3>\n\
         <p>Every candidate of the family on every matrix, log-log; the band is ±{:.0}%. \
         <span class=\"legend\"><span><i style=\"background:{}\"></i>fit matrices (in \
         sample)</span> <span><i style=\"background:{}\"></i>held-out matrices</span></span></p>\n",
        100.0 * BAND,
        hex(fit_c),
        hex(eval_c)
    );
    if f.fit.is_none() && f.eval.is_none() {
        h.push_str("<p class=\"note\">No profile: no measured times to compare with.</p>\n");
    }
    h.push_str("<div class=\"grid\">\n");
    for fam in families(m) {
        let (fit, eval) = (preds(m, &f.fit, fam), preds(m, &f.eval, fam));
        let cands = m
            .spmv
            .candidates
            .iter()
            .filter(|c| family(c.kind) == fam)
            .count();
        let plot = accuracy_plot(&format!("spmv-family-{fam}"), fam, &fit, &eval)?;
        let mut cap = format!("{cands} candidates");
        for (what, ps) in [("fit", &fit), ("held out", &eval)] {
            if !ps.is_empty() {
                let _ = write!(
                    cap,
                    "; {what}: {} predictions, median error {:.1}%, {:.0}% within the band",
                    ps.len(),
                    100.0 * median_err(ps),
                    100.0 * within(ps)
                );
            }
        }
        let _ = writeln!(
            h,
            "<figure>{plot}<figcaption>{}</figcaption></figure>",
            esc(&cap)
        );
    }
    h.push_str("</div>\n");
    if let Some(r) = &f.eval {
        h.push_str(&selection(r)?);
    }
    h.push_str("</section>\n");
    Ok(h)
}

fn accuracy_plot(
    id: &str,
    fam: &str,
    fit: &[&PredictionEval],
    eval: &[&PredictionEval],
) -> Result<String> {
    let all = fit.iter().chain(eval);
    let vals = all
        .flat_map(|p| [p.measured_ms, p.predicted_ms])
        .map(|v| v * 1e3);
    let (lo, hi) = vals
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = if lo < hi {
        (lo / 1.3, hi * 1.3)
    } else if lo.is_finite() {
        (lo / 2.0, lo * 2.0)
    } else {
        (1.0, 1000.0)
    };
    svg(id, 400, 360, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(fam, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("measured (µs)")
            .y_desc("predicted (µs)")
            .x_labels(6)
            .y_labels(6)
            .x_label_formatter(&|v| us(*v))
            .y_label_formatter(&|v| us(*v))
            .label_style(("sans-serif", 12))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Polygon::new(
                vec![
                    (lo, lo * (1.0 - BAND)),
                    (hi, hi * (1.0 - BAND)),
                    (hi, hi * (1.0 + BAND)),
                    (lo, lo * (1.0 + BAND)),
                ],
                BLACK.mix(0.12).filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(lo, lo), (hi, hi)],
                BLACK.mix(0.5),
            )))
            .map_err(err)?;
        for (ps, c) in [(fit, color(0)), (eval, color(1))] {
            chart
                .draw_series(ps.iter().map(|p| {
                    Circle::new(
                        (p.measured_ms * 1e3, p.predicted_ms * 1e3),
                        2,
                        c.mix(0.55).filled(),
                    )
                }))
                .map_err(err)?;
        }
        if fit.is_empty() && eval.is_empty() {
            root.draw(&Text::new(
                "no measured times",
                (140, 170),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(err)?;
        }
        Ok(())
    })
}

/// The selection on every held-out matrix: bars of time / measured best.
fn selection(r: &SpmvEvalReport) -> Result<String> {
    let rows = &r.per_matrix;
    let ratio = |x: Option<f64>, best: f64| x.map(|v| v / best);
    let series: [(&str, RGBColor, Vec<Option<f64>>); 3] = [
        (
            "model's choice",
            color(0),
            rows.iter().map(|m| ratio(m.chosen_ms, m.best_ms)).collect(),
        ),
        (
            "fallback rule",
            color(7),
            rows.iter()
                .map(|m| ratio(m.fallback_rule_ms, m.best_ms))
                .collect(),
        ),
        (
            "cuSPARSE (best algorithm)",
            color(1),
            rows.iter()
                .map(|m| ratio(m.cusparse_ms, m.best_ms))
                .collect(),
        ),
    ];
    // A log axis: ratios far above 1 (a fixed rule's worst cases) and just below it (cuSPARSE
    // faster than every own candidate) both stay readable.
    let vals = || series.iter().flat_map(|s| s.2.iter().flatten().copied());
    let top = vals().fold(1.2f64, f64::max) * 1.15;
    let bottom = vals().fold(0.8f64, f64::min) / 1.15;
    let k = rows.len();
    let w = (110 + 34 * k as u32).max(520);
    let plot = svg("spmv-selection", w, 330, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                "time on each held-out matrix / fastest own candidate measured",
                ("sans-serif", 15),
            )
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(46)
            .build_cartesian_2d(0.0..k as f64, (bottom..top).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_label_formatter(&|_| String::new())
            .y_labels(8)
            .y_label_formatter(&|v| format!("{v:.2}"))
            .x_desc("held-out matrix (numbered as in the table)")
            .y_desc("time / best")
            .label_style(("sans-serif", 12))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let bw = 0.8 / series.len() as f64;
        for (si_, (_, c, vals)) in series.iter().enumerate() {
            chart
                .draw_series(vals.iter().enumerate().filter_map(|(i, v)| {
                    let x0 = i as f64 + 0.1 + bw * si_ as f64;
                    v.map(|v| Rectangle::new([(x0, bottom), (x0 + bw * 0.92, v)], c.filled()))
                }))
                .map_err(err)?;
        }
        for (y, style) in [
            (1.0, BLACK.stroke_width(1)),
            (NEAR_BEST, RED.mix(0.6).stroke_width(1)),
        ] {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(0.0, y), (k as f64, y)],
                    style,
                )))
                .map_err(err)?;
        }
        for i in 0..k {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, bottom));
            root.draw(&Text::new(
                format!("{}", i + 1),
                (x, y + 5),
                font(12, HPos::Center, VPos::Top),
            ))
            .map_err(err)?;
        }
        Ok(())
    })?;
    let mut h = String::new();
    let _ = write!(
        h,
        "<h3 id=\"spmv-selection-heading\">Selection on the held-out matrices</h3>\n\
         <p>Measured time of each choice divided by the fastest own candidate measured on the \
         matrix, on a log scale (1 = the best; red line: {:.0}% slower). {} matrices: the model's choice is within \
         {:.0}% of the best on {:.0}% of them, geometric-mean slowdown {:.3}, worst {:.3}{}. \
         <span class=\"legend\">",
        100.0 * (NEAR_BEST - 1.0),
        r.matrices,
        100.0 * (NEAR_BEST - 1.0),
        100.0 * r.model.near_best_share,
        r.model.geomean_slowdown,
        r.model.max_slowdown,
        match (r.chosen_over_cusparse, r.best_over_cusparse) {
            (Some(c), Some(b)) => format!(
                "; against cuSPARSE's best algorithm on {} matrices the choice takes {c:.3} of \
                 its time (geometric mean), the best own candidate {b:.3}",
                r.cusparse_matrices
            ),
            _ => String::new(),
        }
    );
    for (name, c, _) in &series {
        let _ = write!(
            h,
            "<span><i style=\"background:{}\"></i>{}</span> ",
            hex(*c),
            esc(name)
        );
    }
    h.push_str("</span></p>\n");
    h.push_str(&plot);
    h.push_str(
        "\n<table class=\"num\"><tr><th>#</th><th>matrix</th><th>n</th><th>nnz</th>\
         <th>best measured</th><th>µs</th><th>model's choice</th><th>predicted µs</th>\
         <th>/ best</th><th>cuSPARSE / best</th></tr>\n",
    );
    let fmt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    for (i, m) in rows.iter().enumerate() {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            esc(&m.matrix),
            si(m.n as f64),
            si(m.nnz as f64),
            esc(&m.best),
            us(m.best_ms * 1e3),
            esc(m.chosen.as_deref().unwrap_or("-")),
            m.chosen_predicted_ms
                .map_or_else(|| "-".to_string(), |v| us(v * 1e3)),
            fmt(ratio(m.chosen_ms, m.best_ms)),
            fmt(ratio(m.cusparse_ms, m.best_ms)),
        );
    }
    h.push_str("</table>\n");
    Ok(h)
}
