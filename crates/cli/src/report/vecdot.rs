//! Vector updates and reductions: per operation (or reduction family) and test domain, the
//! measured time of every launch configuration against n, the lines of the decision tree's
//! winners and the intervals they won; and the eq. 3-2 block counts of the profile.
use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use autopcg::catalog::KernelId;
use autopcg::model::domains::{domains, Domain};
use autopcg::model::profile::Profile;
use autopcg::model::vecdot::{BlockPolicy, Candidate, HeldOutModels, Measurement};
use autopcg::model::{DotModels, Leaf, TreeModel, VectorModels};

use super::data::Inputs;
use super::html::esc;
use super::plot::{color, err, font, geom_space, hex, si, svg, us};

/// Width and height of one domain's plot.
const W: u32 = 440;
const H: u32 = 290;
/// The y axis ends at this factor above the slowest best time of the domain: slower
/// configurations are counted, not drawn, so the ones that matter stay apart.
const Y_HEADROOM: f64 = 1.6;

/// One operation or family: its name, what it is, its tree, its measurements.
pub(crate) struct Group<'a> {
    pub(crate) name: &'a str,
    pub(crate) what: &'static str,
    pub(crate) tree: &'a TreeModel,
    pub(crate) points: Vec<Measurement>,
}

/// The groups of the model, vector updates first, with the profile's measurements of each.
pub(crate) fn groups<'a>(inputs: &'a Inputs) -> Vec<Group<'a>> {
    let profile = inputs.profile.as_ref().map(|p| &p.profile);
    let vec_ms = profile.map(VectorModels::measurements).unwrap_or_default();
    let dot_ms = profile.map(DotModels::measurements).unwrap_or_default();
    let kinds = [
        ("vector update", &inputs.model.vector.ops, vec_ms),
        ("reduction", &inputs.model.dot.families, dot_ms),
    ];
    let mut out = Vec::new();
    for (what, trees, measured) in kinds {
        for (name, tree) in trees {
            out.push(Group {
                name,
                what,
                tree,
                points: measured
                    .iter()
                    .filter(|m| m.group == *name)
                    .cloned()
                    .collect(),
            });
        }
    }
    out
}

/// True when measurement `m` is of the launch configuration `c`.
fn is_of(m: &Measurement, c: &Candidate) -> bool {
    m.kernel == c.kernel
        && m.threads == c.threads
        && match c.policy {
            BlockPolicy::Cover { .. } => m.nb_multiple.is_none(),
            BlockPolicy::Grid { blocks, .. } => m.nb_multiple.is_some() && m.blocks == blocks,
        }
}

/// The HTML of the section.
pub(crate) fn section(inputs: &Inputs) -> Result<String> {
    let mut h = String::new();
    h.push_str("<section id=\"vecdot\">\n<h2>Vector updates and reductions</h2>\n");
    h.push_str(
        "<p>One plot per operation and test domain. Dots: the median time of every launch \
         configuration measured at each n (hollow: sizes held out of the fit), coloured by \
         kernel. Thick lines: the fitted line of the configuration the decision tree picks, \
         over the interval it won; shaded bands: those intervals, numbered as listed under the \
         plot. Configurations slower than the y axis shows are counted under the plot.</p>\n",
    );
    if inputs.profile.is_none() {
        h.push_str("<p class=\"note\">No profile: only the model's lines are shown.</p>\n");
    }
    for (gi, g) in groups(inputs).iter().enumerate() {
        let kernels = kernel_colors(g);
        let _ = write!(
            h,
            "<h3 id=\"group-{}\">{} <small>({}; {} configurations, {} leaves)</small></h3>\n\
             <p class=\"legend\">",
            esc(g.name),
            esc(g.name),
            g.what,
            g.tree.candidates,
            g.tree.tree.leaves().len()
        );
        for (k, c) in &kernels {
            let _ = write!(
                h,
                "<span><i style=\"background:{}\"></i>{}</span> ",
                hex(*c),
                esc(&k.to_string())
            );
        }
        h.push_str("</p>\n<div class=\"grid\">\n");
        for (di, d) in domains(g.tree.max_n).iter().enumerate() {
            let id = format!("vecdot-{gi}-{di}");
            let (plot, caption) = domain_plot(&id, g, d, &kernels)?;
            let _ = writeln!(
                h,
                "<figure>{plot}<figcaption>{caption}</figcaption></figure>"
            );
        }
        h.push_str("</div>\n");
    }
    if let Some(p) = &inputs.profile {
        h.push_str(
            "<h3 id=\"occupancy-heading\">Eq. 3-2 block counts</h3>\n<p>Resident blocks per SM \
             (min of the register, shared-memory, thread and block limits) and NB<sub>nt</sub> \
             = SMs × blocks per SM, per grid-stride kernel and block size, as the profile \
             recorded them; the darker, the more blocks.</p>\n",
        );
        h.push_str(&occupancy_plot(&p.profile)?);
        h.push('\n');
    }
    h.push_str("</section>\n");
    Ok(h)
}

/// The kernels of a group, each with its colour (in kernel order).
fn kernel_colors(g: &Group) -> BTreeMap<KernelId, RGBColor> {
    let mut ks: Vec<KernelId> = g.points.iter().map(|m| m.kernel).collect();
    ks.extend(g.tree.tree.leaves().iter().map(|l| l.label.kernel));
    ks.sort();
    ks.dedup();
    ks.into_iter()
        .enumerate()
        .map(|(i, k)| (k, color(i)))
        .collect()
}

/// The plot of one domain and its caption (HTML).
fn domain_plot(
    id: &str,
    g: &Group,
    d: &Domain,
    kernels: &BTreeMap<KernelId, RGBColor>,
) -> Result<(String, String)> {
    let leaves: Vec<&Leaf<Candidate>> = g
        .tree
        .tree
        .leaves()
        .iter()
        .filter(|l| d.lo <= l.lo && l.hi <= d.hi)
        .collect();
    let pts: Vec<(&Measurement, f64)> = g
        .points
        .iter()
        .filter(|m| d.contains(m.n))
        .filter_map(|m| m.ms.map(|t| (m, t * 1e3)))
        .collect();
    // The fastest time at each size, and the lines at their ends, set the y range.
    let mut best: BTreeMap<u64, f64> = BTreeMap::new();
    for (m, t) in &pts {
        let b = best.entry(m.n).or_insert(f64::INFINITY);
        *b = b.min(*t);
    }
    let line_ends: Vec<f64> = leaves
        .iter()
        .flat_map(|l| [l.predict(l.lo.max(d.lo + 1)), l.predict(l.hi)])
        .map(|t| t * 1e3)
        .collect();
    let lows = best.values().chain(&line_ends).copied();
    let ymin = lows.clone().fold(f64::INFINITY, f64::min);
    let ytop = lows.fold(0.0, f64::max);
    let (ymin, ymax) = if ymin.is_finite() && ytop > 0.0 {
        (0.9 * ymin.max(0.0), ytop * Y_HEADROOM)
    } else {
        (0.0, 1.0)
    };
    let (xlo, xhi) = (d.lo as f64, d.hi as f64);
    let clipped = pts.iter().filter(|(_, t)| *t > ymax).count();
    let winner = |m: &Measurement| leaves.iter().any(|l| is_of(m, &l.label));
    let kc = |k: &KernelId| kernels.get(k).copied().unwrap_or(BLACK);
    let title = format!("{}  ({}, {}]", g.name, si(xlo), si(xhi));
    let plot = svg(id, W, H, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(52)
            .build_cartesian_2d((xlo..xhi).log_scale(), ymin..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("n (elements)")
            .y_desc("time (µs)")
            // A log axis over a factor of 4 holds no power of ten to label: the ticks are
            // drawn below, spread over the domain.
            .x_labels(0)
            .x_label_formatter(&|_| String::new())
            .y_labels(6)
            .y_label_formatter(&|v| us(*v))
            .label_style(("sans-serif", 12))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        // The intervals, shaded in the winner's colour.
        for l in &leaves {
            let c = kc(&l.label.kernel);
            let lo = (l.lo as f64).max(xlo);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(lo, ymin), (l.hi as f64, ymax)],
                    c.mix(0.12).filled(),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(l.hi as f64, ymin), (l.hi as f64, ymax)],
                    BLACK.mix(0.25),
                )))
                .map_err(err)?;
        }
        // Every configuration's points: the winners' on top.
        for on_top in [false, true] {
            for (m, t) in pts
                .iter()
                .filter(|(m, t)| winner(m) == on_top && *t <= ymax)
            {
                let c = kc(&m.kernel).mix(if on_top { 0.95 } else { 0.4 });
                let r = if on_top { 3 } else { 2 };
                let style = if m.held_out {
                    c.stroke_width(1)
                } else {
                    c.filled()
                };
                chart
                    .draw_series(std::iter::once(Circle::new((m.n as f64, *t), r, style)))
                    .map_err(err)?;
            }
        }
        // The winners' lines over their intervals.
        for l in &leaves {
            let c = kc(&l.label.kernel);
            let xs = geom_space((l.lo as f64).max(xlo + 1.0), l.hi as f64, 24);
            let path: Vec<(f64, f64)> = xs
                .iter()
                .map(|&x| (x, l.line.eval(x) * 1e3))
                .filter(|&(_, y)| y >= ymin && y <= ymax)
                .collect();
            chart
                .draw_series(std::iter::once(PathElement::new(
                    path,
                    ShapeStyle::from(c).stroke_width(3),
                )))
                .map_err(err)?;
        }
        for v in ticks(xlo, xhi) {
            let (x, y) = chart.backend_coord(&(v, ymin));
            root.draw(&PathElement::new(vec![(x, y), (x, y + 4)], BLACK))
                .map_err(err)?;
            root.draw(&Text::new(
                si(v),
                (x, y + 6),
                font(12, HPos::Center, VPos::Top),
            ))
            .map_err(err)?;
        }
        // Interval numbers where the band is wide enough to hold one.
        for (i, l) in leaves.iter().enumerate() {
            let (x0, _) = chart.backend_coord(&((l.lo as f64).max(xlo), ymax));
            let (x1, y) = chart.backend_coord(&(l.hi as f64, ymax));
            if x1 - x0 >= 14 {
                root.draw(&Text::new(
                    format!("{}", i + 1),
                    ((x0 + x1) / 2, y + 3),
                    font(12, HPos::Center, VPos::Top),
                ))
                .map_err(err)?;
            }
        }
        Ok(())
    })?;
    let mut cap = String::new();
    let held = pts.iter().filter(|(m, _)| m.held_out).count();
    let _ = write!(
        cap,
        "{} points ({} held out){}",
        pts.len(),
        held,
        if clipped > 0 {
            format!("; {clipped} slower than the y axis shows")
        } else {
            String::new()
        }
    );
    if let Some(q) = g.tree.quality.iter().find(|q| q.domain == *d) {
        // r² says little where the time is flat (a launch-bound domain); the residual says
        // how far the points lie from the lines.
        let _ = write!(
            cap,
            "; {} lines fitted, min r² {:.3}, median residual {:.1}%",
            q.fitted,
            q.min_r2,
            100.0 * q.median_rel_residual
        );
    }
    cap.push_str("<ol>");
    for l in &leaves {
        let _ = write!(
            cap,
            "<li><i style=\"background:{}\"></i>({}, {}] <b>{}</b>: {:.3e}·n + {} µs</li>",
            hex(kc(&l.label.kernel)),
            si(l.lo as f64),
            si(l.hi as f64),
            esc(&l.label.to_string()),
            l.line.a * 1e3,
            us(l.line.b * 1e3)
        );
    }
    cap.push_str("</ol>");
    Ok((plot, cap))
}

/// Ticks spread geometrically over `[lo, hi]` (six points, ends included), rounded to two
/// significant digits; those that round outside the range are left out.
pub(crate) fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out: Vec<f64> = geom_space(lo, hi, 6)
        .into_iter()
        .map(|v| {
            let p = 10f64.powi(v.log10().floor() as i32 - 1);
            (v / p).round() * p
        })
        .filter(|v| (lo..=hi).contains(v))
        .collect();
    out.dedup();
    out
}

/// Eq. 3-2 per kernel (rows) and block size (columns), as a shaded table.
fn occupancy_plot(p: &Profile) -> Result<String> {
    let mut kernels: Vec<KernelId> = Vec::new();
    let mut threads: Vec<u32> = Vec::new();
    for o in &p.occupancy {
        if !kernels.contains(&o.kernel) {
            kernels.push(o.kernel);
        }
        if !threads.contains(&o.threads) {
            threads.push(o.threads);
        }
    }
    threads.sort_unstable();
    let max_bps = p
        .occupancy
        .iter()
        .map(|o| o.blocks_per_sm)
        .max()
        .unwrap_or(1)
        .max(1);
    let (left, top, cw, ch) = (170i32, 46i32, 104i32, 46i32);
    let w = (left + cw * threads.len() as i32 + 10).max(300) as u32;
    let h = (top + ch * kernels.len() as i32 + 10) as u32;
    svg("occupancy", w, h, |root| {
        root.draw(&Text::new(
            "threads per block →",
            (left, 6),
            font(13, HPos::Left, VPos::Top),
        ))
        .map_err(err)?;
        for (j, t) in threads.iter().enumerate() {
            let x = left + cw * j as i32 + cw / 2;
            root.draw(&Text::new(
                t.to_string(),
                (x, top - 6),
                font(13, HPos::Center, VPos::Bottom),
            ))
            .map_err(err)?;
        }
        for (i, k) in kernels.iter().enumerate() {
            let y = top + ch * i as i32;
            root.draw(&Text::new(
                k.to_string(),
                (left - 8, y + ch / 2),
                font(13, HPos::Right, VPos::Center),
            ))
            .map_err(err)?;
            for (j, t) in threads.iter().enumerate() {
                let Some(o) = p
                    .occupancy
                    .iter()
                    .find(|o| o.kernel == *k && o.threads == *t)
                else {
                    continue;
                };
                let x = left + cw * j as i32;
                let share = f64::from(o.blocks_per_sm) / f64::from(max_bps);
                let fill = RGBColor(31, 119, 180).mix(0.1 + 0.6 * share);
                root.draw(&Rectangle::new(
                    [(x + 1, y + 1), (x + cw - 1, y + ch - 1)],
                    fill.filled(),
                ))
                .map_err(err)?;
                let ink = if share > 0.6 { WHITE } else { BLACK };
                root.draw(&Text::new(
                    format!("{}/SM  NB {}", o.blocks_per_sm, o.nb_nt),
                    (x + cw / 2, y + ch / 2 - 8),
                    font(12, HPos::Center, VPos::Center).color(&ink),
                ))
                .map_err(err)?;
                root.draw(&Text::new(
                    format!("{} regs", o.regs_per_thread),
                    (x + cw / 2, y + ch / 2 + 9),
                    font(11, HPos::Center, VPos::Center).color(&ink),
                ))
                .map_err(err)?;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_stay_inside_the_domain_and_read_round() {
        assert_eq!(
            ticks(102_400.0, 409_600.0),
            vec![140_000.0, 180_000.0, 240_000.0, 310_000.0]
        );
        assert_eq!(
            ticks(1024.0, 102_400.0),
            vec![2600.0, 6500.0, 16_000.0, 41_000.0, 100_000.0]
        );
    }
}
