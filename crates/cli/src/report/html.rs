//! The page: a header naming the device, the model file, the date and the fit statistics,
//! then the sections. One file, its style inline; nothing is loaded from anywhere.
use std::fmt::Write;

use anyhow::Result;

use autopcg::model::vecdot::TreeEvalReport;
use autopcg::model::ModelFile;

use super::data::Inputs;
use super::spmv::{families, family, SpmvFigures};
use super::{matrix, spmv, vecdot};

/// Text for HTML and XML: `&`, `<`, `>`, `"` and `'` escaped.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// `YYYY-MM-DD` of a time in seconds since the Unix epoch (UTC; proleptic Gregorian).
pub(crate) fn date(unix_s: u64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = (unix_s / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.2em 2em;color:#222;max-width:1500px}\
h1{margin-bottom:.2em}h2{border-bottom:2px solid #1f77b4;padding-bottom:.2em;margin-top:1.6em}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;\
text-align:left;font-size:13px}table.num td{font-variant-numeric:tabular-nums;white-space:nowrap}\
.grid{display:flex;flex-wrap:wrap;gap:10px}figure{margin:0;max-width:720px}\
figcaption{font-size:12px;color:#444;max-width:440px}figcaption ol{margin:.3em 0;padding-left:1.6em}\
.legend span{margin-right:1em;white-space:nowrap;font-size:13px}\
i{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}\
.note{color:#a33}nav a{margin-right:1em}svg.plot{display:block}";

/// The whole page.
pub(crate) fn page(inputs: &Inputs) -> Result<String> {
    let m = &inputs.model;
    let figures = SpmvFigures::of(inputs)?;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <title>autopcg report: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&m.device.name)
    );
    h.push_str(&header(inputs, &figures));
    h.push_str(&vecdot::section(inputs)?);
    h.push_str(&spmv::section(inputs, &figures)?);
    h.push_str(&matrix::section(inputs)?);
    h.push_str("</body></html>\n");
    Ok(h)
}

fn header(inputs: &Inputs, f: &SpmvFigures) -> String {
    let m = &inputs.model;
    let d = &m.device;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs());
    let mut h = String::new();
    let _ = write!(
        h,
        "<header id=\"header\"><h1>autopcg report: {}</h1>\n<table>\
         <tr><th>device</th><td>{} (compute capability {}.{}, {} SMs, {} MiB L2, {:.0} GiB)</td></tr>\
         <tr><th>model file</th><td>{} (fitted by {})</td></tr>\
         <tr><th>fitted from</th><td>{} ({}profile started {}; {})</td></tr>\
         <tr><th>profile shown</th><td>{}</td></tr>\
         <tr><th>held-out profile</th><td>{}</td></tr>\
         <tr><th>report written</th><td>{}</td></tr></table>\n",
        esc(&d.name),
        esc(&d.name),
        d.compute_capability.0,
        d.compute_capability.1,
        d.sm_count,
        d.l2_bytes >> 20,
        d.total_mem as f64 / f64::from(1u32 << 30),
        esc(&inputs.model_path.display().to_string()),
        esc(&m.fitted_by),
        esc(&m.profile.file),
        if m.profile.quick { "quick sweep, " } else { "" },
        date(m.profile.started_unix_s),
        esc(&m
            .profile
            .records
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ")),
        inputs.profile.as_ref().map_or_else(
            || "none".to_string(),
            |p| esc(&p.path.display().to_string())
        ),
        inputs.eval.as_ref().map_or_else(
            || "none".to_string(),
            |p| esc(&p.path.display().to_string())
        ),
        date(now),
    );
    h.push_str(
        "<nav><a href=\"#vecdot\">vector updates and reductions</a><a href=\"#spmv\">SpMV</a>\
         <a href=\"#matrices\">matrices</a></nav>\n<h2 id=\"fit\">Fit statistics</h2>\n",
    );
    h.push_str(&tree_table(m));
    h.push_str(&spmv_table(m, f));
    if !m.notes.is_empty() {
        h.push_str("<p>Notes of the fit:</p><ul>");
        for n in &m.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</header>\n");
    h
}

fn held_out(t: &TreeEvalReport) -> String {
    format!(
        "{:.0}% of {} held-out sizes within 3% of the best, worst {:.3}",
        100.0 * t.share_within,
        t.count,
        t.worst_ratio
    )
}

/// Per operation and family: the lines' fit and the trees' held-out figures.
fn tree_table(m: &ModelFile) -> String {
    let mut h = String::from(
        "<table class=\"num\" id=\"fit-trees\"><tr><th>operation</th><th>domains</th>\
         <th>leaves</th><th>lines</th><th>min r²</th><th>median of the domains' min r²</th><th>median residual</th>\
         <th>worst residual of a winner</th></tr>\n",
    );
    let groups = m
        .vector
        .ops
        .iter()
        .chain(m.dot.families.iter())
        .collect::<Vec<_>>();
    for (name, t) in groups {
        let q = &t.quality;
        let mut med: Vec<f64> = q.iter().map(|q| q.median_rel_residual).collect();
        med.sort_by(f64::total_cmp);
        let mut r2: Vec<f64> = q.iter().map(|q| q.min_r2).collect();
        r2.sort_by(f64::total_cmp);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.1}% \
             (median of the domains)</td><td>{:.1}%</td></tr>",
            esc(name),
            q.len(),
            t.tree.leaves().len(),
            q.iter().map(|q| q.fitted).sum::<usize>(),
            q.iter().map(|q| q.min_r2).fold(1.0, f64::min),
            r2.get(r2.len() / 2).copied().unwrap_or(1.0),
            100.0 * med.get(med.len() / 2).copied().unwrap_or(0.0),
            100.0
                * q.iter()
                    .map(|q| q.leaf_worst_rel_residual)
                    .fold(0.0, f64::max)
        );
    }
    let _ = write!(
        h,
        "</table>\n<p>Decision trees on held-out sizes: vector updates {}; reductions {}.</p>\n",
        held_out(&m.quality.vector_held_out),
        held_out(&m.quality.dot_held_out)
    );
    h
}

/// Per SpMV family: the candidates' in-sample and cross-validated errors, and the held-out
/// figures when there is an evaluation profile.
fn spmv_table(m: &ModelFile, f: &SpmvFigures) -> String {
    let med = |mut v: Vec<f64>| -> String {
        v.retain(|x| x.is_finite());
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2)
            .map_or_else(|| "-".to_string(), |x| format!("{:.1}%", 100.0 * x))
    };
    let mut h = String::from(
        "<table class=\"num\" id=\"fit-spmv\"><tr><th>SpMV family</th><th>candidates</th>\
         <th>median error (in sample)</th><th>p90 (in sample)</th><th>median error \
         (cross-validated)</th><th>median error (held out)</th></tr>\n",
    );
    for fam in families(m) {
        let cs: Vec<_> = m
            .spmv
            .candidates
            .iter()
            .filter(|c| family(c.kind) == fam)
            .collect();
        let names: Vec<String> = cs.iter().map(|c| c.candidate.name()).collect();
        let held = f.eval.as_ref().map(|r| {
            r.per_prediction
                .iter()
                .filter(|p| names.contains(&p.candidate))
                .map(|p| p.rel_err)
                .collect::<Vec<_>>()
        });
        let _ = writeln!(
            h,
            "<tr><td>{fam}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            cs.len(),
            med(cs.iter().map(|c| c.stats.median_rel_err).collect()),
            med(cs.iter().map(|c| c.stats.p90_rel_err).collect()),
            med(cs
                .iter()
                .filter_map(|c| c.stats.cv_median_rel_err)
                .collect()),
            held.map_or_else(|| "-".to_string(), med),
        );
    }
    h.push_str("</table>\n");
    let pct = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{:.1}%", 100.0 * v));
    let _ = write!(
        h,
        "<p>SpMV candidates in sample (median over candidates): median error {}, p90 {}.",
        pct(m.quality.spmv_in_sample_median),
        pct(m.quality.spmv_in_sample_p90)
    );
    if let Some(r) = &f.eval {
        let _ = write!(
            h,
            " Held out ({} matrices, {} predictions): median error {:.1}%, p90 {:.1}%; the \
             choice is within 5% of the best on {:.0}% of the matrices, geometric-mean slowdown \
             {:.3}.",
            r.matrices,
            r.predictions,
            100.0 * r.median_rel_err,
            100.0 * r.p90_rel_err,
            100.0 * r.model.near_best_share,
            r.model.geomean_slowdown
        );
    }
    h.push_str("</p>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_escapes() {
        assert_eq!(date(0), "1970-01-01");
        // 2000-02-29 12:00 UTC.
        assert_eq!(date(951_825_600), "2000-02-29");
        assert_eq!(date(1_735_689_600), "2025-01-01");
        assert_eq!(esc("a<b & \"c\"'"), "a&lt;b &amp; &quot;c&quot;&#39;");
    }
}
