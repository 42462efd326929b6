//! The vector-update and dot-product models (method.md 3.1 and 3.2): per operation (vector
//! updates) or per family (reductions), a time line per launch configuration in every test
//! domain, and the Alg. 3-1 decision tree that maps a size to the fastest configuration.
//!
//! A *candidate* is a kernel entry point, a block size and a block-count policy: cover the
//! work one item per thread (the block count grows with n), or a fixed grid-stride count
//! `NB_nt * i` (eq. 3-2). Candidates are read off the profile records; for each domain of
//! [`crate::domains::domains`] (up to the largest size measured) every candidate with at least
//! two fitted sizes there gets a line ([`crate::linear::fit_line`]), and
//! [`crate::tree::DecisionTree::build`] turns the lines into leaves.
//!
//! [`evaluate`] judges the trees on the held-out records only: at every held-out size, the
//! measured time of the configuration the tree picks against the fastest configuration
//! measured there.
use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::domains::{domains, Domain};
use crate::linear::{fit_line, median, Line};
use crate::profile::Profile;
use crate::tree::DecisionTree;
use crate::ModelError;

/// Family name of the ten single-dot rungs of the reduction ladder.
pub const DOT_FAMILY: &str = "dot";
/// Family name of the fused three-dot reductions.
pub const DOT3_FAMILY: &str = "dot3";
/// A pick within this ratio of the fastest measured time counts as a good pick (3 %).
pub const WITHIN_TOLERANCE: f64 = 1.03;
/// Share of held-out sizes whose pick must be within [`WITHIN_TOLERANCE`] (95 %).
pub const TARGET_SHARE: f64 = 0.95;

/// The reduction family of a dot kernel: [`DOT3_FAMILY`] for the fused `dot3_*` kernels,
/// [`DOT_FAMILY`] for the others.
pub fn dot_family(kernel: &str) -> &'static str {
    if kernel.starts_with("dot3") {
        DOT3_FAMILY
    } else {
        DOT_FAMILY
    }
}

/// How a candidate sets its block count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlockPolicy {
    /// One work item per thread: `blocks = ceil(ceil(n / elems_per_thread) / threads)`.
    Cover {
        /// Elements one thread handles (2 for double2 loads or a first add during the load).
        elems_per_thread: u32,
    },
    /// A fixed grid-stride count, `NB_nt * multiple` blocks whatever n.
    Grid {
        /// `i` in `NB_nt * i`.
        multiple: u32,
        /// The block count measured.
        blocks: u32,
    },
}

/// `ceil(ceil(n / elems) / threads)`, at least 1, at most `u32::MAX` (as the launcher counts).
fn cover_blocks(n: u64, elems: u32, threads: u32) -> u32 {
    let items = n.div_ceil(u64::from(elems.max(1)));
    items
        .div_ceil(u64::from(threads.max(1)))
        .clamp(1, u64::from(u32::MAX)) as u32
}

/// A launch configuration of one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Candidate {
    /// Kernel entry point.
    pub kernel: String,
    /// Thread mapping of a vector update (`elem`, `elem_v2`, `grid`, `grid_v2`); `None` for
    /// reductions.
    pub variant: Option<String>,
    /// Threads per block.
    pub threads: u32,
    /// Block-count policy.
    pub policy: BlockPolicy,
}

impl Candidate {
    /// The block count at size `n`.
    pub fn blocks_for(&self, n: u64) -> u32 {
        match self.policy {
            BlockPolicy::Cover { elems_per_thread } => {
                cover_blocks(n, elems_per_thread, self.threads)
            }
            BlockPolicy::Grid { blocks, .. } => blocks,
        }
    }

    /// `i` in `NB_nt * i` for grid-stride candidates, `None` for covering ones (as in the
    /// profile records).
    pub fn nb_multiple(&self) -> Option<u32> {
        match self.policy {
            BlockPolicy::Cover { .. } => None,
            BlockPolicy::Grid { multiple, .. } => Some(multiple),
        }
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} t{}", self.kernel, self.threads)?;
        match self.policy {
            BlockPolicy::Cover { elems_per_thread } => write!(f, " cover/{elems_per_thread}"),
            BlockPolicy::Grid { multiple, blocks } => write!(f, " nb{blocks}=NBx{multiple}"),
        }
    }
}

/// What a model chooses for one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pick {
    /// Kernel entry point.
    pub kernel: String,
    /// Thread mapping of a vector update; `None` for reductions.
    pub variant: Option<String>,
    /// Threads per block.
    pub threads: u32,
    /// Blocks for this size.
    pub blocks: u32,
    /// `i` in `blocks = NB_nt * i` for grid-stride picks.
    pub nb_multiple: Option<u32>,
    /// The time the leaf's line predicts, milliseconds.
    pub predicted_ms: f64,
}

/// Fit quality in one domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainQuality {
    /// The domain.
    pub domain: Domain,
    /// Candidates with a line here.
    pub fitted: usize,
    /// Candidates with records here but fewer than two distinct sizes (no line).
    pub skipped: usize,
    /// Points fitted, all candidates together.
    pub points: usize,
    /// Median relative residual over every fitted point.
    pub median_rel_residual: f64,
    /// Largest relative residual over every fitted point.
    pub worst_rel_residual: f64,
    /// The candidate with the largest residual.
    pub worst_candidate: Option<String>,
    /// Smallest weighted r² of a line here (1 when no line was fitted).
    pub min_r2: f64,
    /// Leaves of the tree in this domain.
    pub leaves: usize,
    /// Largest relative residual among the candidates that won a leaf (the lines that matter).
    pub leaf_worst_rel_residual: f64,
}

/// The decision tree of one operation or family, and how well its lines fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeModel {
    /// Operation (`axpy`, `xpay`, `cg_update`...) or family ([`DOT_FAMILY`], [`DOT3_FAMILY`]).
    pub name: String,
    /// Largest size measured; the domains are `domains(max_n)`.
    pub max_n: u64,
    /// Candidates found in the records.
    pub candidates: usize,
    /// Records used for fitting.
    pub fit_records: usize,
    /// Records left out because their timing is invalid or not positive.
    pub dropped_records: usize,
    /// The tree.
    pub tree: DecisionTree<Candidate>,
    /// Per-domain fit quality.
    pub quality: Vec<DomainQuality>,
}

impl TreeModel {
    /// The configuration for size `n` and its predicted time; `None` for an empty tree.
    pub fn pick(&self, n: u64) -> Option<Pick> {
        let leaf = self.tree.lookup(n)?;
        let c = &leaf.label;
        Some(Pick {
            kernel: c.kernel.clone(),
            variant: c.variant.clone(),
            threads: c.threads,
            blocks: c.blocks_for(n),
            nb_multiple: c.nb_multiple(),
            predicted_ms: leaf.predict(n),
        })
    }
}

/// One timed configuration at one size, from a vector or dot record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Operation or family.
    pub group: String,
    /// Kernel entry point.
    pub kernel: String,
    /// Vector-update variant; `None` for reductions.
    pub variant: Option<String>,
    /// Threads per block.
    pub threads: u32,
    /// Blocks.
    pub blocks: u32,
    /// `nb_multiple` of the record.
    pub nb_multiple: Option<u32>,
    /// Size.
    pub n: u64,
    /// Held out of the fit.
    pub held_out: bool,
    /// Median time, milliseconds (`None` when the timing is invalid or not positive).
    pub ms: Option<f64>,
}

fn usable_ms(t: &crate::profile::Timing) -> Option<f64> {
    (t.is_valid() && t.median_ms > 0.0).then_some(t.median_ms)
}

/// A set of per-group decision trees that can be judged on held-out records.
pub trait HeldOutModels {
    /// The configuration chosen for `group` at size `n`.
    fn pick(&self, group: &str, n: u64) -> Option<Pick>;
    /// Every record of the profile this kind of model is fitted from, as measurements.
    fn measurements(profile: &Profile) -> Vec<Measurement>;
}

/// Vector-update models: one [`TreeModel`] per operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorModels {
    /// Per operation.
    pub ops: BTreeMap<String, TreeModel>,
}

/// Reduction models: one [`TreeModel`] per family ([`DOT_FAMILY`], [`DOT3_FAMILY`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DotModels {
    /// Per family.
    pub families: BTreeMap<String, TreeModel>,
}

impl VectorModels {
    /// Fits a tree per operation from the profile's vector records. Errors when there are no
    /// vector records or an operation cannot be fitted.
    pub fn fit(profile: &Profile) -> Result<VectorModels, ModelError> {
        let ops = fit_groups("vector-update models", Self::measurements(profile))?;
        Ok(VectorModels { ops })
    }

    /// The configuration for operation `op` at size `n`.
    pub fn pick(&self, op: &str, n: u64) -> Option<Pick> {
        self.ops.get(op)?.pick(n)
    }
}

impl HeldOutModels for VectorModels {
    fn pick(&self, group: &str, n: u64) -> Option<Pick> {
        VectorModels::pick(self, group, n)
    }

    fn measurements(profile: &Profile) -> Vec<Measurement> {
        profile
            .vector
            .iter()
            .map(|r| Measurement {
                group: r.op.clone(),
                kernel: r.kernel.clone(),
                variant: Some(r.variant.clone()),
                threads: r.threads,
                blocks: r.blocks,
                nb_multiple: r.nb_multiple,
                n: r.n,
                held_out: r.held_out,
                ms: usable_ms(&r.timing),
            })
            .collect()
    }
}

impl DotModels {
    /// Fits a tree per family from the profile's dot records. Errors when there are no dot
    /// records or a family cannot be fitted.
    pub fn fit(profile: &Profile) -> Result<DotModels, ModelError> {
        let families = fit_groups("dot-product models", Self::measurements(profile))?;
        Ok(DotModels { families })
    }

    /// The configuration for family `family` ([`DOT_FAMILY`] or [`DOT3_FAMILY`]) at size `n`.
    pub fn pick(&self, family: &str, n: u64) -> Option<Pick> {
        self.families.get(family)?.pick(n)
    }
}

impl HeldOutModels for DotModels {
    fn pick(&self, group: &str, n: u64) -> Option<Pick> {
        DotModels::pick(self, group, n)
    }

    fn measurements(profile: &Profile) -> Vec<Measurement> {
        profile
            .dot
            .iter()
            .map(|r| Measurement {
                group: dot_family(&r.kernel).to_string(),
                kernel: r.kernel.clone(),
                variant: None,
                threads: r.threads,
                blocks: r.blocks,
                nb_multiple: r.nb_multiple,
                n: r.n,
                held_out: r.held_out,
                ms: usable_ms(&r.timing),
            })
            .collect()
    }
}

/// Elements per thread a covering kernel is expected to handle, from its name: 2 for double2
/// vector updates (`*_v2`) and for the dot rungs that add during the load, else 1. Only a
/// first guess: the records decide ([`elems_per_thread`]).
fn elems_hint(kernel: &str, variant: Option<&str>) -> u32 {
    let two = variant.is_some_and(|v| v.ends_with("_v2"))
        || kernel.ends_with("_v2")
        || kernel.contains("vec2")
        || matches!(
            kernel,
            "dot_first_add" | "dot_warp_unroll" | "dot_full_unroll"
        );
    if two {
        2
    } else {
        1
    }
}

/// The elements per thread that reproduce the block count of every record of a covering
/// candidate: the name's guess when it does, else the smallest of 1, 2, 4, 8 that does.
fn elems_per_thread(key: &Key, recs: &[&Measurement]) -> Result<u32, String> {
    let hint = elems_hint(&key.kernel, key.variant.as_deref());
    let fits = |e: u32| {
        recs.iter()
            .all(|m| m.blocks == cover_blocks(m.n, e, m.threads))
    };
    std::iter::once(hint)
        .chain([1, 2, 4, 8])
        .find(|&e| fits(e))
        .ok_or_else(|| {
            let m = recs
                .iter()
                .find(|m| m.blocks != cover_blocks(m.n, hint, m.threads));
            format!(
                "{} at {} threads covers n with {} blocks, which no 1, 2, 4 or 8 elements \
                 per thread explain (n = {})",
                key.kernel,
                key.threads,
                m.map_or(0, |m| m.blocks),
                m.map_or(0, |m| m.n)
            )
        })
}

/// A candidate before its elements per thread are known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kernel: String,
    variant: Option<String>,
    threads: u32,
    /// `(multiple, blocks)` for grid-stride records.
    grid: Option<(u32, u32)>,
}

fn fit_groups(what: &str, ms: Vec<Measurement>) -> Result<BTreeMap<String, TreeModel>, ModelError> {
    if ms.is_empty() {
        return Err(ModelError::Fit {
            what: what.into(),
            reason: "the profile has no records for them".into(),
        });
    }
    let mut groups: BTreeMap<String, Vec<Measurement>> = BTreeMap::new();
    for m in ms {
        groups.entry(m.group.clone()).or_default().push(m);
    }
    let mut out = BTreeMap::new();
    for (name, recs) in groups {
        let model = fit_group(&name, &recs).map_err(|reason| ModelError::Fit {
            what: format!("{what}: {name}"),
            reason,
        })?;
        out.insert(name, model);
    }
    Ok(out)
}

fn fit_group(name: &str, recs: &[Measurement]) -> Result<TreeModel, String> {
    let max_n = recs.iter().map(|m| m.n).max().unwrap_or(0);
    let doms = domains(max_n);
    if doms.is_empty() {
        return Err(format!(
            "the largest size measured, {max_n}, is not above the smallest modelled size {}",
            crate::domains::MIN_SIZE
        ));
    }
    // Every usable record (held out too) decides a candidate's elements per thread; only the
    // fitted ones give points.
    let mut by_key: BTreeMap<Key, Vec<&Measurement>> = BTreeMap::new();
    let mut dropped = 0;
    for m in recs {
        if m.ms.is_none() || m.threads == 0 || m.blocks == 0 {
            dropped += 1;
            continue;
        }
        let key = Key {
            kernel: m.kernel.clone(),
            variant: m.variant.clone(),
            threads: m.threads,
            grid: m.nb_multiple.map(|i| (i, m.blocks)),
        };
        by_key.entry(key).or_default().push(m);
    }
    let mut cands: Vec<(Candidate, Vec<(u64, f64)>)> = Vec::new();
    let mut fit_records = 0;
    for (key, ms) in &by_key {
        let policy = match key.grid {
            Some((multiple, blocks)) => BlockPolicy::Grid { multiple, blocks },
            None => BlockPolicy::Cover {
                elems_per_thread: elems_per_thread(key, ms)?,
            },
        };
        let pts: Vec<(u64, f64)> = ms
            .iter()
            .filter(|m| !m.held_out)
            .filter_map(|m| m.ms.map(|t| (m.n, t)))
            .collect();
        fit_records += pts.len();
        cands.push((
            Candidate {
                kernel: key.kernel.clone(),
                variant: key.variant.clone(),
                threads: key.threads,
                policy,
            },
            pts,
        ));
    }
    cands.sort_by(|a, b| a.0.cmp(&b.0));

    let mut parts = Vec::with_capacity(doms.len());
    let mut quality = Vec::with_capacity(doms.len());
    for d in &doms {
        let mut lines: Vec<(Candidate, Line)> = Vec::new();
        let mut q = DomainQuality {
            domain: *d,
            fitted: 0,
            skipped: 0,
            points: 0,
            median_rel_residual: 0.0,
            worst_rel_residual: 0.0,
            worst_candidate: None,
            min_r2: 1.0,
            leaves: 0,
            leaf_worst_rel_residual: 0.0,
        };
        let mut residuals = Vec::new();
        let mut worst_of: Vec<f64> = Vec::new();
        for (c, pts) in &cands {
            let here: Vec<(f64, f64)> = pts
                .iter()
                .filter(|&&(n, _)| d.contains(n))
                .map(|&(n, t)| (n as f64, t))
                .collect();
            if here.is_empty() {
                continue;
            }
            let mut sizes: Vec<f64> = here.iter().map(|p| p.0).collect();
            sizes.sort_by(f64::total_cmp);
            sizes.dedup();
            if sizes.len() < 2 {
                q.skipped += 1;
                continue;
            }
            let f = fit_line(&here).map_err(|e| format!("{c} in ({}, {}]: {e}", d.lo, d.hi))?;
            q.fitted += 1;
            q.points += here.len();
            q.min_r2 = q.min_r2.min(f.stats.r2);
            residuals.extend(here.iter().map(|&(n, t)| (f.line.eval(n) - t).abs() / t));
            if f.stats.max_rel_residual > q.worst_rel_residual || q.worst_candidate.is_none() {
                q.worst_rel_residual = f.stats.max_rel_residual;
                q.worst_candidate = Some(c.to_string());
            }
            worst_of.push(f.stats.max_rel_residual);
            lines.push((c.clone(), f.line));
        }
        q.median_rel_residual = median(&mut residuals);
        // Leaves of this domain, for the quality of the winning lines.
        let leaves = crate::tree::domain_leaves(d.lo, d.hi, &lines).map_err(|e| e.to_string())?;
        q.leaves = leaves.len();
        q.leaf_worst_rel_residual = leaves
            .iter()
            .filter_map(|l| lines.iter().position(|(c, _)| *c == l.label))
            .map(|i| worst_of[i])
            .fold(0.0, f64::max);
        quality.push(q);
        parts.push((*d, lines));
    }
    let tree = DecisionTree::build(parts).map_err(|e| e.to_string())?;
    if tree.is_empty() {
        return Err(format!(
            "no candidate of {name} has two fitted sizes in any domain ({} candidate(s), {} \
             usable fit record(s))",
            cands.len(),
            fit_records
        ));
    }
    Ok(TreeModel {
        name: name.to_string(),
        max_n,
        candidates: cands.len(),
        fit_records,
        dropped_records: dropped,
        tree,
        quality,
    })
}

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
fn describe(kernel: &str, threads: u32, blocks: u32) -> String {
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
                .map(|p| describe(&p.kernel, p.threads, p.blocks)),
            predicted_ms: pick.as_ref().map(|p| p.predicted_ms),
            ratio: picked_ms.map(|t| t / best_ms),
            prediction_error: picked_ms
                .zip(pick.as_ref())
                .map(|(t, p)| (p.predicted_ms - t) / t),
            picked_ms,
            best: describe(&best.kernel, best.threads, best.blocks),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::{held_out_sizes, sample_sizes};
    use crate::linear::tests::noise;
    use crate::profile::{DotRecord, Timing, VectorRecord};

    const MAX_N: u64 = 50_000_000;

    /// A candidate with its true time line.
    struct Truth {
        kernel: &'static str,
        variant: Option<&'static str>,
        threads: u32,
        /// `None`: cover with `elems` per thread; `Some((i, blocks))`: grid-stride.
        grid: Option<(u32, u32)>,
        elems: u32,
        line: Line,
    }

    impl Truth {
        fn blocks(&self, n: u64) -> u32 {
            match self.grid {
                Some((_, b)) => b,
                None => cover_blocks(n, self.elems, self.threads),
            }
        }
    }

    /// Best A up to 200 000, B up to 800 000, C up to 30 000 000, D above; E never.
    fn lines() -> [Line; 5] {
        [
            Line::new(3.0e-8, 0.004),
            Line::new(2.0e-8, 0.006),
            Line::new(1.5e-8, 0.010),
            Line::new(1.4e-8, 0.040),
            Line::new(4.0e-8, 0.020),
        ]
    }

    fn vector_truths(op: &'static str) -> Vec<Truth> {
        let [a, b, c, d, e] = lines();
        let k = |v: &str| -> &'static str { Box::leak(format!("{op}_{v}").into_boxed_str()) };
        vec![
            Truth {
                kernel: k("elem"),
                variant: Some("elem"),
                threads: 256,
                grid: None,
                elems: 1,
                line: a,
            },
            Truth {
                kernel: k("elem_v2"),
                variant: Some("elem_v2"),
                threads: 128,
                grid: None,
                elems: 2,
                line: b,
            },
            Truth {
                kernel: k("grid_v2"),
                variant: Some("grid_v2"),
                threads: 256,
                grid: Some((2, 528)),
                elems: 0,
                line: c,
            },
            Truth {
                kernel: k("grid"),
                variant: Some("grid"),
                threads: 512,
                grid: Some((1, 264)),
                elems: 0,
                line: d,
            },
            Truth {
                kernel: k("elem"),
                variant: Some("elem"),
                threads: 64,
                grid: None,
                elems: 1,
                line: e,
            },
        ]
    }

    fn dot_truths() -> Vec<Truth> {
        let [a, b, c, d, e] = lines();
        let shift = |l: Line| Line::new(l.a * 1.5, l.b * 2.0);
        vec![
            Truth {
                kernel: "dot_sequential",
                variant: None,
                threads: 256,
                grid: None,
                elems: 1,
                line: e,
            },
            Truth {
                kernel: "dot_first_add",
                variant: None,
                threads: 128,
                grid: None,
                elems: 2,
                line: a,
            },
            Truth {
                kernel: "dot_vec2",
                variant: None,
                threads: 256,
                grid: Some((1, 264)),
                elems: 0,
                line: b,
            },
            Truth {
                kernel: "dot_vec2",
                variant: None,
                threads: 256,
                grid: Some((3, 792)),
                elems: 0,
                line: c,
            },
            Truth {
                kernel: "dot_last_block",
                variant: None,
                threads: 512,
                grid: Some((2, 528)),
                elems: 0,
                line: d,
            },
            Truth {
                kernel: "dot3_two_pass",
                variant: None,
                threads: 256,
                grid: Some((1, 264)),
                elems: 0,
                line: shift(a),
            },
            Truth {
                kernel: "dot3_last_block",
                variant: None,
                threads: 256,
                grid: Some((2, 528)),
                elems: 0,
                line: shift(c),
            },
        ]
    }

    fn timing(ms: f64) -> Timing {
        Timing {
            median_ms: ms,
            min_ms: 0.99 * ms,
            max_ms: 1.01 * ms,
            reps: 10,
        }
    }

    /// Every truth at the sample sizes and held-out sizes of every domain, with 0.5 %
    /// seeded noise.
    fn sizes() -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        for d in domains(MAX_N) {
            out.extend(sample_sizes(&d, 5).into_iter().map(|n| (n, false)));
            out.extend(held_out_sizes(&d, 5).into_iter().map(|n| (n, true)));
        }
        out
    }

    fn vector_profile(seed: u64) -> Profile {
        let mut p = Profile::default();
        let mut s = seed;
        for op in ["axpy", "cg_update"] {
            for t in vector_truths(op) {
                for (n, held_out) in sizes() {
                    let ms = t.line.eval(n as f64) * (1.0 + 0.005 * noise(&mut s));
                    p.vector.push(VectorRecord {
                        kernel: t.kernel.into(),
                        op: op.into(),
                        variant: t.variant.unwrap_or_default().into(),
                        n,
                        threads: t.threads,
                        blocks: t.blocks(n),
                        nb_multiple: t.grid.map(|g| g.0),
                        held_out,
                        timing: timing(ms),
                    });
                }
            }
        }
        p
    }

    fn dot_profile(seed: u64) -> Profile {
        let mut p = Profile::default();
        let mut s = seed;
        for t in dot_truths() {
            for (n, held_out) in sizes() {
                let ms = t.line.eval(n as f64) * (1.0 + 0.005 * noise(&mut s));
                p.dot.push(DotRecord {
                    kernel: t.kernel.into(),
                    n,
                    threads: t.threads,
                    blocks: t.blocks(n),
                    nb_multiple: t.grid.map(|g| g.0),
                    held_out,
                    timing: timing(ms),
                });
            }
        }
        p
    }

    /// Checks the picks at every held-out size against the true lines: never more than 1 %
    /// slower than the true best, and exactly the true best where the runner-up is 3 % slower.
    fn check_picks(truths: &[Truth], pick: impl Fn(u64) -> Option<Pick>) {
        for (n, held_out) in sizes() {
            if !held_out {
                continue;
            }
            let x = n as f64;
            let mut by_time: Vec<&Truth> = truths.iter().collect();
            by_time.sort_by(|a, b| a.line.eval(x).total_cmp(&b.line.eval(x)));
            let best = by_time[0];
            let p = pick(n).unwrap();
            let t = truths
                .iter()
                .find(|t| t.kernel == p.kernel && t.threads == p.threads && t.blocks(n) == p.blocks)
                .unwrap_or_else(|| panic!("n = {n}: pick {p:?} is no candidate"));
            let (tp, tb) = (t.line.eval(x), best.line.eval(x));
            assert!(
                tp <= 1.01 * tb,
                "n = {n}: picked {} ({tp}), best {} ({tb})",
                t.kernel,
                best.kernel
            );
            if by_time[1].line.eval(x) > 1.03 * tb {
                assert!(
                    std::ptr::eq(t, best),
                    "n = {n}: picked {}, best {}",
                    t.kernel,
                    best.kernel
                );
            }
            assert_eq!(p.nb_multiple, t.grid.map(|g| g.0));
            assert!(
                (p.predicted_ms - tp).abs() / tp < 0.02,
                "n = {n}: {p:?} vs {tp}"
            );
        }
    }

    #[test]
    fn vector_models_pick_the_known_best_at_held_out_sizes() {
        let p = vector_profile(11);
        let m = VectorModels::fit(&p).unwrap();
        assert_eq!(m.ops.keys().collect::<Vec<_>>(), ["axpy", "cg_update"]);
        for op in ["axpy", "cg_update"] {
            let truths = vector_truths(op);
            check_picks(&truths, |n| m.pick(op, n));
            let tm = &m.ops[op];
            assert_eq!(tm.max_n, MAX_N);
            assert_eq!(tm.candidates, 5);
            assert_eq!(tm.quality.len(), crate::domains::domains(MAX_N).len());
            for q in &tm.quality {
                assert_eq!((q.fitted, q.skipped), (5, 0));
                assert!(q.worst_rel_residual < 0.011, "{q:?}");
                assert!(q.median_rel_residual <= q.worst_rel_residual);
                assert!(q.leaf_worst_rel_residual <= q.worst_rel_residual);
                assert!(q.leaves >= 1);
            }
        }
        // Covering block counts follow n: one element per thread, then two.
        let a = m.pick("axpy", 150_000).unwrap();
        assert_eq!(
            (a.kernel.as_str(), a.threads, a.blocks),
            ("axpy_elem", 256, 586)
        );
        assert_eq!(a.variant.as_deref(), Some("elem"));
        let b = m.pick("axpy", 500_001).unwrap();
        assert_eq!(
            (b.kernel.as_str(), b.threads, b.blocks),
            ("axpy_elem_v2", 128, 1954)
        );
        let c = m.pick("axpy", 5_000_000).unwrap();
        assert_eq!(
            (c.kernel.as_str(), c.blocks, c.nb_multiple),
            ("axpy_grid_v2", 528, Some(2))
        );
        let d = m.pick("axpy", 40_000_000).unwrap();
        assert_eq!((d.kernel.as_str(), d.blocks), ("axpy_grid", 264));
        // Sizes beyond the measured range use the last leaf, below it the first.
        assert_eq!(m.pick("axpy", 10 * MAX_N).unwrap().kernel, "axpy_grid");
        assert_eq!(m.pick("axpy", 10).unwrap().kernel, "axpy_elem");
        assert!(m.pick("xpay", 1000).is_none());

        let r = evaluate(&m, &p);
        let held = sizes().iter().filter(|s| s.1).count();
        assert_eq!(r.count, 2 * held);
        assert_eq!(
            (r.measured, r.not_measured, r.within),
            (r.count, 0, r.count)
        );
        assert_eq!(r.share_within, 1.0);
        assert!(r.meets_target());
        assert!(
            r.worst_ratio >= 1.0 && r.worst_ratio <= WITHIN_TOLERANCE,
            "{}",
            r.worst_ratio
        );
        assert!(r.max_abs_prediction_error < 0.03, "{}", r.table);
        assert_eq!(r.table.lines().count(), r.count + 1);
        assert!(r.table.starts_with("group"));
    }

    #[test]
    fn dot_models_pick_the_known_best_per_family() {
        let p = dot_profile(5);
        let m = DotModels::fit(&p).unwrap();
        assert_eq!(
            m.families.keys().collect::<Vec<_>>(),
            [DOT_FAMILY, DOT3_FAMILY]
        );
        let truths = dot_truths();
        let (three, one): (Vec<Truth>, Vec<Truth>) = truths
            .into_iter()
            .partition(|t| t.kernel.starts_with("dot3"));
        check_picks(&one, |n| m.pick(DOT_FAMILY, n));
        check_picks(&three, |n| m.pick(DOT3_FAMILY, n));
        // dot_first_add covers two elements per thread: learnt from the records.
        let f = m.pick(DOT_FAMILY, 50_001).unwrap();
        assert_eq!(
            (f.kernel.as_str(), f.blocks, f.nb_multiple),
            ("dot_first_add", 196, None)
        );
        let leaf = m.families[DOT_FAMILY].tree.lookup(50_001).unwrap();
        assert_eq!(
            leaf.label.policy,
            BlockPolicy::Cover {
                elems_per_thread: 2
            }
        );
        // dot_vec2 at two block counts are two candidates.
        assert_eq!(m.families[DOT_FAMILY].candidates, 5);
        assert_eq!(m.families[DOT3_FAMILY].candidates, 2);
        assert_eq!(
            m.pick(DOT3_FAMILY, 100_000).unwrap().kernel,
            "dot3_two_pass"
        );
        assert_eq!(
            m.pick(DOT3_FAMILY, 40_000_000).unwrap().kernel,
            "dot3_last_block"
        );

        let r = evaluate(&m, &p);
        assert_eq!(r.count, 2 * sizes().iter().filter(|s| s.1).count());
        assert_eq!(r.within, r.count, "{}", r.table);
        assert!(r.meets_target());
    }

    #[test]
    fn held_out_records_never_enter_the_fit() {
        let p = vector_profile(3);
        let mut q = p.clone();
        for r in q.vector.iter_mut().filter(|r| r.held_out) {
            r.timing = timing(r.timing.median_ms * 100.0);
        }
        assert_eq!(
            VectorModels::fit(&p).unwrap(),
            VectorModels::fit(&q).unwrap()
        );
        // ... but they are what the evaluation judges: scaling every held-out time of the
        // best candidate makes its picks the slowest.
        let m = VectorModels::fit(&p).unwrap();
        let r = evaluate(&m, &q);
        assert_eq!(r.share_within, 1.0, "all scaled alike, ratios unchanged");
        let mut q2 = p.clone();
        for r in q2
            .vector
            .iter_mut()
            .filter(|r| r.held_out && r.kernel == "axpy_grid_v2")
        {
            r.timing = timing(r.timing.median_ms * 2.0);
        }
        let r = evaluate(&m, &q2);
        assert!(r.share_within < 1.0 && r.worst_ratio > 1.5, "{}", r.table);
        assert!(!r.meets_target());
        assert_eq!(r.worst_at.as_ref().map(|w| w.0.as_str()), Some("axpy"));
    }

    #[test]
    fn picks_that_were_not_measured_are_reported() {
        let p = vector_profile(9);
        let m = VectorModels::fit(&p).unwrap();
        let n = held_out_sizes(&domains(MAX_N)[2], 5)[1];
        let picked = m.pick("axpy", n).unwrap();
        let mut q = p.clone();
        q.vector
            .retain(|r| !(r.held_out && r.op == "axpy" && r.n == n && r.kernel == picked.kernel));
        let r = evaluate(&m, &q);
        assert_eq!(r.not_measured, 1);
        assert_eq!(r.measured, r.count - 1);
        assert_eq!(r.within, r.count - 1);
        let row = r
            .rows
            .iter()
            .find(|x| x.group == "axpy" && x.n == n)
            .unwrap();
        assert_eq!((row.picked_ms, row.ratio), (None, None));
        assert!(r.table.contains("not measured"));
        // No held-out records at all: nothing to judge.
        let mut q = p.clone();
        q.vector.retain(|r| !r.held_out);
        let r = evaluate(&m, &q);
        assert_eq!(r.count, 0);
        assert!(!r.meets_target());
    }

    fn close(a: &TreeModel, b: &TreeModel) {
        assert_eq!(a.tree.leaves().len(), b.tree.leaves().len());
        for (x, y) in a.tree.leaves().iter().zip(b.tree.leaves()) {
            assert_eq!((x.lo, x.hi, &x.label), (y.lo, y.hi, &y.label));
            assert!((x.line.a - y.line.a).abs() <= 1e-14 * x.line.a.abs());
            assert!((x.line.b - y.line.b).abs() <= 1e-14 * x.line.b.abs());
        }
        assert_eq!(a.quality.len(), b.quality.len());
        assert_eq!(
            (a.name.as_str(), a.max_n, a.candidates),
            (b.name.as_str(), b.max_n, b.candidates)
        );
    }

    #[test]
    fn fitted_models_survive_a_serde_round_trip() {
        let v = VectorModels::fit(&vector_profile(1)).unwrap();
        let back: VectorModels = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        for (op, tm) in &v.ops {
            close(tm, &back.ops[op]);
            for (n, _) in sizes() {
                let (a, b) = (v.pick(op, n).unwrap(), back.pick(op, n).unwrap());
                assert_eq!(
                    (&a.kernel, a.threads, a.blocks),
                    (&b.kernel, b.threads, b.blocks)
                );
            }
        }
        let d = DotModels::fit(&dot_profile(1)).unwrap();
        let back: DotModels = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        for (f, tm) in &d.families {
            close(tm, &back.families[f]);
        }
        let r = evaluate(&d, &dot_profile(1));
        let back: TreeEvalReport =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(
            (back.count, back.within, &back.table),
            (r.count, r.within, &r.table)
        );
    }

    #[test]
    fn profiles_without_usable_records_are_fit_errors() {
        let empty = Profile::default();
        let e = VectorModels::fit(&empty).unwrap_err();
        assert!(matches!(e, ModelError::Fit { .. }), "{e}");
        assert!(e.to_string().contains("vector-update"), "{e}");
        let e = DotModels::fit(&empty).unwrap_err();
        assert!(matches!(e, ModelError::Fit { .. }), "{e}");
        // Vector records do not make dot models.
        assert!(DotModels::fit(&vector_profile(1)).is_err());

        // One size per candidate and domain: no line anywhere.
        let mut p = vector_profile(1);
        let firsts: Vec<u64> = domains(MAX_N)
            .iter()
            .map(|d| sample_sizes(d, 5)[0])
            .collect();
        p.vector.retain(|r| firsts.contains(&r.n));
        let e = VectorModels::fit(&p).unwrap_err().to_string();
        assert!(e.contains("two fitted sizes"), "{e}");

        // Only sizes below the first domain.
        let mut p = vector_profile(1);
        for r in &mut p.vector {
            r.n = 1000;
        }
        let e = VectorModels::fit(&p).unwrap_err().to_string();
        assert!(e.contains("not above"), "{e}");

        // Invalid timings are dropped, not fitted; with nothing left it is an error.
        let mut p = dot_profile(1);
        for r in &mut p.dot {
            r.timing.median_ms = f64::NAN;
        }
        let e = DotModels::fit(&p).unwrap_err();
        assert!(matches!(e, ModelError::Fit { .. }), "{e}");
        let mut p = dot_profile(1);
        p.dot[0].timing.median_ms = -1.0;
        let m = DotModels::fit(&p).unwrap();
        assert_eq!(m.families[DOT_FAMILY].dropped_records, 1);
    }

    #[test]
    fn covering_block_counts_no_rule_explains_are_errors() {
        let mut p = vector_profile(1);
        let r = p
            .vector
            .iter_mut()
            .find(|r| r.kernel == "axpy_elem" && r.threads == 256 && r.n > 100_000)
            .unwrap();
        r.blocks += 7;
        let e = VectorModels::fit(&p).unwrap_err().to_string();
        assert!(
            e.contains("axpy_elem") && e.contains("elements per thread"),
            "{e}"
        );
    }
}
