//! Judging the trees on the held-out records: the measured time of each pick against the
//! fastest configuration measured at that size.
use std::collections::BTreeMap;
use std::fmt::Write as _;

use autopcg_catalog::KernelId;
use serde::{Deserialize, Serialize};

use super::{HeldOutModels, Measurement, TARGET_SHARE, WITHIN_TOLERANCE};
use crate::linear::median;
use crate::profile::Profile;

/// One held-out size of one operation or family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// Operation or family.
    pub group: String,
    /// Size.
    pub n: u64,
    /// The configuration the tree picked (`kernel tT bB`), `None` when the group has no tree.
    pub picked: Option<String>,
    /// Its measured time at n, when it was measured there.
    pub picked_ms: Option<f64>,
    /// The time the tree predicted for it.
    pub predicted_ms: Option<f64>,
    /// The fastest configuration measured at n.
    pub best: String,
    /// Its time.
    pub best_ms: f64,
    /// `picked_ms / best_ms`.
    pub ratio: Option<f64>,
    /// `(predicted_ms - picked_ms) / picked_ms`.
    pub prediction_error: Option<f64>,
}

/// How well the trees choose on sizes they were not fitted on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeEvalReport {
    /// One row per held-out (group, size).
    pub rows: Vec<EvalRow>,
    /// Held-out (group, size) pairs.
    pub count: usize,
    /// Rows whose pick was measured at that size.
    pub measured: usize,
    /// Rows whose pick was not measured there (or had no tree): they cannot be judged and
    /// count as misses in [`TreeEvalReport::share_within`].
    pub not_measured: usize,
    /// Rows whose pick is within [`WITHIN_TOLERANCE`] of the fastest.
    pub within: usize,
    /// `within / count` (0 for no rows).
    pub share_within: f64,
    /// Largest `picked / best` over the measured rows (1 for none).
    pub worst_ratio: f64,
    /// Where the largest ratio was: (group, n).
    pub worst_at: Option<(String, u64)>,
    /// Median `|prediction error|` over the measured rows.
    pub median_abs_prediction_error: f64,
    /// Largest `|prediction error|` over the measured rows.
    pub max_abs_prediction_error: f64,
    /// The rows as an aligned text table.
    pub table: String,
}

impl TreeEvalReport {
    /// True when at least [`TARGET_SHARE`] of the held-out sizes got a pick within
    /// [`WITHIN_TOLERANCE`] of the fastest (and there was something to judge).
    pub fn meets_target(&self) -> bool {
        self.count > 0 && self.share_within >= TARGET_SHARE
    }
}

/// `kernel tT bB` (vector kernel names already end in their variant).
fn describe(kernel: KernelId, threads: u32, blocks: u32) -> String {
    format!("{kernel} t{threads} b{blocks}")
}

/// Judges `models` on the held-out records of `profile` (never on the fitted ones): at each
/// held-out (group, n), the measured time of the picked configuration against the fastest
/// configuration measured there. A pick that was not measured at n is counted and shown as
/// "not measured".
pub fn evaluate<M: HeldOutModels>(models: &M, profile: &Profile) -> TreeEvalReport {
    let mut sizes: BTreeMap<(String, u64), Vec<Measurement>> = BTreeMap::new();
    for m in M::measurements(profile) {
        if m.held_out && m.ms.is_some() {
            sizes.entry((m.group.clone(), m.n)).or_default().push(m);
        }
    }
    let mut rows = Vec::with_capacity(sizes.len());
    for ((group, n), ms) in sizes {
        // `ms` holds only measurements with a time.
        let time = |m: &Measurement| m.ms.unwrap_or(f64::INFINITY);
        let Some(best) = ms.iter().min_by(|a, b| time(a).total_cmp(&time(b))) else {
            continue;
        };
        let pick = models.pick(&group, n);
        let picked_ms = pick.as_ref().and_then(|p| {
            ms.iter()
                .filter(|m| {
                    m.kernel == p.kernel
                        && m.variant == p.variant
                        && m.threads == p.threads
                        && m.blocks == p.blocks
                })
                .map(time)
                .min_by(f64::total_cmp)
        });
        let best_ms = time(best);
        rows.push(EvalRow {
            picked: pick
                .as_ref()
                .map(|p| describe(p.kernel, p.threads, p.blocks)),
            predicted_ms: pick.as_ref().map(|p| p.predicted_ms),
            ratio: picked_ms.map(|t| t / best_ms),
            prediction_error: picked_ms
                .zip(pick.as_ref())
                .map(|(t, p)| (p.predicted_ms - t) / t),
            picked_ms,
            best: describe(best.kernel, best.threads, best.blocks),
            best_ms,
            group,
            n,
        });
    }
    let count = rows.len();
    let measured = rows.iter().filter(|r| r.ratio.is_some()).count();
    let within = rows
        .iter()
        .filter(|r| r.ratio.is_some_and(|x| x <= WITHIN_TOLERANCE))
        .count();
    let worst = rows
        .iter()
        .filter_map(|r| r.ratio.map(|x| (x, r)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let mut errs: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.prediction_error.map(f64::abs))
        .collect();
    let max_err = errs.iter().copied().fold(0.0, f64::max);
    let table = table(&rows);
    TreeEvalReport {
        count,
        measured,
        not_measured: count - measured,
        within,
        share_within: if count > 0 {
            within as f64 / count as f64
        } else {
            0.0
        },
        worst_ratio: worst.map_or(1.0, |w| w.0),
        worst_at: worst.map(|w| (w.1.group.clone(), w.1.n)),
        median_abs_prediction_error: median(&mut errs),
        max_abs_prediction_error: max_err,
        table,
        rows,
    }
}

fn table(rows: &[EvalRow]) -> String {
    let head = [
        "group",
        "n",
        "picked",
        "picked ms",
        "best",
        "best ms",
        "ratio",
        "pred err",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.group.clone(),
                r.n.to_string(),
                r.picked.clone().unwrap_or_else(|| "(no tree)".into()),
                r.picked_ms
                    .map_or_else(|| "not measured".into(), |t| format!("{t:.5}")),
                r.best.clone(),
                format!("{:.5}", r.best_ms),
                r.ratio.map_or_else(|| "-".into(), |x| format!("{x:.3}")),
                r.prediction_error
                    .map_or_else(|| "-".into(), |e| format!("{:+.1}%", 100.0 * e)),
            ]
        })
        .collect();
    let mut width = head.map(str::len);
    for c in &cells {
        for (w, s) in width.iter_mut().zip(c) {
            *w = (*w).max(s.len());
        }
    }
    let mut out = String::new();
    let mut line = |c: &[&str]| {
        let mut l = String::new();
        for (i, (s, w)) in c.iter().zip(width).enumerate() {
            // Text columns left-aligned, numbers right-aligned.
            if matches!(i, 0 | 2 | 4) {
                let _ = write!(l, "{s:<w$}  ");
            } else {
                let _ = write!(l, "{s:>w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&head);
    for c in &cells {
        line(&c.each_ref().map(String::as_str));
    }
    out
}
