//! A decision-tree classifier from matrix features to the best SpMV candidate: a second
//! opinion beside the performance model ([`crate::spmv`]), and a rule that needs no time
//! model at all. The tree is grown with linfa-trees (CART with Gini impurity) on the fit
//! matrices of a profile; the label of a matrix is the best of autopcg's own candidates
//! measured on it (cuSPARSE is the peer, never a label).
//!
//! Two refinements over a plain classification tree:
//!
//! - **Label denoising.** Near-ties between candidates (256 or 512 threads within 1%) would
//!   make the label depend on timing noise. Every candidate within `near_best` of a matrix's
//!   fastest counts as good on it; a matrix's label is, among its good candidates, the one good
//!   on the most fit matrices (ties: faster here, then name). Consistent labels make a smaller
//!   tree.
//! - **Cost-sensitive leaves.** After growing, each leaf ranks the candidates measured on all
//!   of its training matrices by their mean log slowdown there (`ln(t / t_best)`), so a leaf
//!   predicts the candidate that loses least on its matrices, not merely the most frequent
//!   label; exact ties keep the leaf's most frequent label first. A leaf also keeps its runners-up:
//!   if its first choice's format does not apply to a new matrix (DIA or ELL beyond the
//!   padding limits), the next one that applies is returned, and failing all of them the
//!   candidate with the least mean log slowdown over every fit matrix.
//!
//! The tree is stored in this module's own serialisable form ([`TreeNode`]), converted from
//! linfa's: linfa-trees' `DecisionTree` does serialise with its `serde` feature, but its leaves
//! break class ties in hash-map order and hold a single class, while the converted form is
//! deterministic, carries the ranked runners-up and predicts without ndarray.
//!
//! Features ([`FEATURE_NAMES`], computed by [`classifier_features`]): log10 of rows and
//! nonzeros, mean row length, coefficient of variation and max/mean of the row lengths, log10
//! of the DIA and ELL fill ratios, the HYB COO share, `x` cache lines per nonzero, log10 of the
//! CSR working set over the L2 size, the share of empty rows, and log10(1 + mean |i - j|).
use std::collections::{BTreeMap, HashMap};

use autopcg_catalog::Format;
use autopcg_sparse::features::MatrixFeatures;
use autopcg_sparse::PaddingLimits;
use linfa::prelude::*;
use linfa_trees::DecisionTree;
use ndarray::{Array1, Array2};
use serde::{Deserialize, Serialize};

use crate::profile::MatrixRecord;
use crate::profile::{MatrixSet, Profile};
use crate::spmv::{
    format_applies, geomean, measured_times, model_order, working_set_bytes, SpmvCandidate,
};
use crate::work::SpmvWork;
use crate::ModelError;

/// Names of the classifier's features, in the order of [`classifier_features`].
pub const FEATURE_NAMES: [&str; 12] = [
    "log10_n",
    "log10_nnz",
    "row_len_mean",
    "row_len_cv",
    "row_len_max_over_mean",
    "log10_dia_fill",
    "log10_ell_fill",
    "hyb_coo_share",
    "x_lines_per_nnz",
    "log10_bytes_over_l2",
    "empty_row_share",
    "log10_mean_col_distance",
];

/// Fill ratios above this are clamped (an unusable padded format is unusable however padded).
const FILL_CAP: f64 = 1e6;

/// The feature vector of a matrix (see [`FEATURE_NAMES`]); `l2_bytes` is the device's L2 size.
/// Every entry is finite.
pub fn classifier_features(f: &MatrixFeatures, w: &SpmvWork, l2_bytes: u64) -> Vec<f64> {
    let fin = |v: f64| if v.is_finite() { v } else { 0.0 };
    let n = f.n.max(1) as f64;
    let nnz = f.nnz.max(1) as f64;
    let mean = f.row_len_mean;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let fill = |v: f64| v.clamp(1e-3, FILL_CAP).log10();
    vec![
        n.log10(),
        nnz.log10(),
        fin(mean),
        fin(ratio(f.row_len_std, mean)),
        fin(ratio(f.row_len_max as f64, mean)),
        fin(fill(f.dia_fill_ratio)),
        fin(fill(f.ell_fill_ratio)),
        fin(f.hyb_coo_share),
        fin(w.x_lines as f64 / nnz),
        fin((working_set_bytes(Format::Csr, w) / l2_bytes.max(1) as f64).log10()),
        fin(f.empty_rows as f64 / n),
        fin((1.0 + w.mean_col_distance).log10()),
    ]
}

/// A node of the classification tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeNode {
    /// A leaf: candidate indices (into [`SpmvClassifier::labels`]), best first.
    Leaf {
        /// Ranked candidates.
        ranked: Vec<usize>,
        /// Training matrices that reached it.
        matrices: usize,
    },
    /// A split: `x[feature] < threshold` goes left, otherwise right.
    Split {
        /// Feature index.
        feature: usize,
        /// Threshold.
        threshold: f64,
        /// The `<` side.
        left: Box<TreeNode>,
        /// The `>=` side.
        right: Box<TreeNode>,
    },
}

impl TreeNode {
    fn leaf<'a>(&'a self, x: &[f64]) -> &'a TreeNode {
        let mut node = self;
        while let TreeNode::Split {
            feature,
            threshold,
            left,
            right,
        } = node
        {
            let v = x.get(*feature).copied().unwrap_or(0.0);
            node = if v < *threshold { left } else { right };
        }
        node
    }

    /// Every node of the tree, parents before children and left before right (the order a
    /// recursive walk visits them).
    fn nodes(&self) -> Vec<&TreeNode> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(n) = stack.pop() {
            out.push(n);
            if let TreeNode::Split { left, right, .. } = n {
                stack.push(right);
                stack.push(left);
            }
        }
        out
    }

    /// Depth of the tree (a leaf has depth 0).
    pub fn depth(&self) -> usize {
        match self {
            TreeNode::Leaf { .. } => 0,
            TreeNode::Split { left, right, .. } => 1 + left.depth().max(right.depth()),
        }
    }

    /// Number of leaves.
    pub fn leaves(&self) -> usize {
        match self {
            TreeNode::Leaf { .. } => 1,
            TreeNode::Split { left, right, .. } => left.leaves() + right.leaves(),
        }
    }
}

/// Options of [`SpmvClassifier::fit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifierOptions {
    /// Matrices to learn from (default: the fit set).
    pub set: MatrixSet,
    /// Deepest split (default 8).
    pub max_depth: usize,
    /// Fewest matrices in a leaf (default 1).
    pub min_leaf: usize,
    /// A candidate within this factor of a matrix's fastest counts as good on it (default
    /// 1.02).
    pub near_best: f64,
    /// Runners-up kept per leaf (default 8).
    pub ranked_per_leaf: usize,
    /// Padding limits deciding where ELL, DIA and HYB apply at prediction.
    pub padding: PaddingLimits,
}

impl Default for ClassifierOptions {
    fn default() -> Self {
        ClassifierOptions {
            set: MatrixSet::Fit,
            max_depth: 8,
            min_leaf: 1,
            near_best: 1.02,
            ranked_per_leaf: 8,
            padding: PaddingLimits::default(),
        }
    }
}

/// How well the classifier does on its own training matrices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifierStats {
    /// Training matrices.
    pub matrices: usize,
    /// Distinct labels after denoising.
    pub distinct_labels: usize,
    /// Share of training matrices whose prediction is within `near_best` of their fastest.
    pub near_best_share: f64,
    /// Geometric mean over training matrices of the predicted candidate's time over the
    /// fastest (matrices where the pick was not measured left out; 1.0 when none is left).
    pub geomean_slowdown: f64,
    /// Tree depth.
    pub depth: usize,
    /// Tree leaves.
    pub leaves: usize,
}

/// The decision-tree SpMV classifier of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvClassifier {
    /// Feature names ([`FEATURE_NAMES`]).
    pub feature_names: Vec<String>,
    /// The candidates the tree can return.
    pub labels: Vec<SpmvCandidate>,
    /// The tree.
    pub root: TreeNode,
    /// Candidates by mean log slowdown over every training matrix, best first (those measured
    /// on all of them): the last resort when no runner-up of a leaf applies.
    pub fallback: Vec<usize>,
    /// L2 size of the device (a feature is relative to it).
    pub l2_bytes: u64,
    /// Padding limits deciding where ELL, DIA and HYB apply.
    pub padding: PaddingLimits,
    /// Training statistics.
    pub stats: ClassifierStats,
}

/// Mean of `ln(t_c / t_best)` over `mats` for every candidate measured on all of them, best
/// first (ties: `prefer` first, then candidate order).
fn rank(
    mats: &[usize],
    times: &[&BTreeMap<SpmvCandidate, f64>],
    best: &[f64],
    universe: &[SpmvCandidate],
    prefer: Option<usize>,
) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = universe
        .iter()
        .enumerate()
        .filter_map(|(ci, c)| {
            let mut s = 0.0;
            for &m in mats {
                s += (times[m].get(c)? / best[m]).ln();
            }
            Some((s / mats.len().max(1) as f64, ci))
        })
        .collect();
    scored.sort_by(|a, b| {
        // Equal within rounding: the preferred label first.
        let close = (a.0 - b.0).abs() <= 1e-12;
        if close {
            let pa = Some(a.1) == prefer;
            let pb = Some(b.1) == prefer;
            pb.cmp(&pa).then(a.1.cmp(&b.1))
        } else {
            a.0.total_cmp(&b.0)
        }
    });
    scored.into_iter().map(|s| s.1).collect()
}

fn convert(node: &linfa_trees::TreeNode<f64, usize>) -> Result<TreeNode, String> {
    if node.is_leaf() {
        let label = node
            .prediction()
            .ok_or_else(|| "a leaf without a prediction".to_string())?;
        return Ok(TreeNode::Leaf {
            ranked: vec![label],
            matrices: 0,
        });
    }
    let (feature, threshold, _) = node.split();
    let children = node.children();
    let (Some(Some(l)), Some(Some(r))) = (children.first(), children.get(1)) else {
        return Err("a split without two children".into());
    };
    Ok(TreeNode::Split {
        feature,
        threshold,
        left: Box::new(convert(l)?),
        right: Box::new(convert(r)?),
    })
}

impl SpmvClassifier {
    /// Grows the tree on the matrices of `opts.set` that have measured own candidates.
    ///
    /// Errors ([`ModelError::Fit`]): no header, fewer than two such matrices.
    pub fn fit(profile: &Profile, opts: &ClassifierOptions) -> Result<SpmvClassifier, ModelError> {
        let fit_err = |reason: String| ModelError::Fit {
            what: "SpMV classifier".into(),
            reason,
        };
        if !(opts.near_best.is_finite() && opts.near_best >= 1.0) || opts.max_depth == 0 {
            return Err(ModelError::InvalidParameter(format!(
                "classifier: near_best {} must be >= 1 and max_depth {} positive",
                opts.near_best, opts.max_depth
            )));
        }
        let device = profile
            .device()
            .ok_or_else(|| fit_err("the profile has no header (empty profile)".into()))?;
        let l2_bytes = u64::from(device.l2_bytes);
        let measured = measured_times(profile);
        let mut rows = Vec::new();
        let mut owned: Vec<BTreeMap<SpmvCandidate, f64>> = Vec::new();
        let mut used: Vec<&MatrixRecord> = Vec::new();
        for m in profile.matrices.iter().filter(|m| m.set == opts.set) {
            // Only candidates whose format applies are labels (a HYB without a COO part is
            // the ELL kernel and is never offered; the classifier could not pick it).
            let Some(own) = measured.get(&m.id).map(|t| {
                t.own
                    .iter()
                    .filter(|(c, _)| format_applies(c.format, &m.work, &opts.padding))
                    .map(|(c, &v)| (*c, v))
                    .collect::<BTreeMap<_, _>>()
            }) else {
                continue;
            };
            if !own.is_empty() {
                rows.push(classifier_features(&m.features, &m.work, l2_bytes));
                owned.push(own);
                used.push(m);
            }
        }
        let times: Vec<&BTreeMap<SpmvCandidate, f64>> = owned.iter().collect();
        if rows.len() < 2 {
            return Err(fit_err(format!(
                "{} {:?}-set matrices with measured candidates; at least 2 needed",
                rows.len(),
                opts.set
            )));
        }
        let best: Vec<f64> = times
            .iter()
            .map(|t| t.values().copied().fold(f64::INFINITY, f64::min))
            .collect();
        // Good candidates per matrix, and how many matrices each is good on.
        let good: Vec<Vec<&SpmvCandidate>> = times
            .iter()
            .zip(&best)
            .map(|(t, b)| {
                t.iter()
                    .filter(|(_, &v)| v <= b * opts.near_best)
                    .map(|(c, _)| c)
                    .collect()
            })
            .collect();
        let mut count: HashMap<&SpmvCandidate, usize> = HashMap::new();
        for g in &good {
            for c in g {
                *count.entry(c).or_default() += 1;
            }
        }
        let universe: Vec<SpmvCandidate> = {
            let mut u: Vec<SpmvCandidate> = times.iter().flat_map(|t| t.keys().copied()).collect();
            u.sort_by(model_order);
            u.dedup();
            u
        };
        let index: HashMap<&SpmvCandidate, usize> =
            universe.iter().enumerate().map(|(i, c)| (c, i)).collect();
        let labels: Vec<usize> = good
            .iter()
            .enumerate()
            .map(|(m, g)| {
                let pick = g
                    .iter()
                    .max_by(|a, b| {
                        count[*a]
                            .cmp(&count[*b])
                            .then_with(|| times[m][*b].total_cmp(&times[m][*a]))
                            .then_with(|| model_order(b, a))
                    })
                    .copied();
                pick.map_or(0, |c| index[c])
            })
            .collect();
        let distinct_labels = {
            let mut l = labels.clone();
            l.sort_unstable();
            l.dedup();
            l.len()
        };

        let nf = FEATURE_NAMES.len();
        let x = Array2::from_shape_vec((rows.len(), nf), rows.iter().flatten().copied().collect())
            .map_err(|e| fit_err(e.to_string()))?;
        let y = Array1::from_vec(labels.clone());
        let ds = Dataset::new(x, y);
        let min_leaf = opts.min_leaf.max(1) as f32;
        let tree = DecisionTree::params()
            .max_depth(Some(opts.max_depth))
            .min_weight_leaf(min_leaf)
            .min_weight_split(2.0 * min_leaf)
            .fit(&ds)
            .map_err(|e| fit_err(e.to_string()))?;
        let mut root = convert(tree.root_node()).map_err(fit_err)?;
        let ctx = RankCtx {
            rows: &rows,
            labels: &labels,
            times: &times,
            best: &best,
            universe: &universe,
            keep: opts.ranked_per_leaf.max(1),
        };
        ctx.rank_leaves(&mut root, (0..rows.len()).collect());
        let all: Vec<usize> = (0..rows.len()).collect();
        let fallback = rank(&all, &times, &best, &universe, None);

        let mut c = SpmvClassifier {
            feature_names: FEATURE_NAMES.iter().map(|s| s.to_string()).collect(),
            labels: universe,
            root,
            fallback,
            l2_bytes,
            padding: opts.padding,
            stats: ClassifierStats {
                matrices: rows.len(),
                distinct_labels,
                near_best_share: 0.0,
                geomean_slowdown: 1.0,
                depth: 0,
                leaves: 0,
            },
        };
        // Training statistics of the finished classifier (applicability included).
        let mut near = 0usize;
        let mut logs = Vec::with_capacity(rows.len());
        for (m, mat) in used.iter().enumerate() {
            let t = c
                .predict_candidate(&mat.features, &mat.work)
                .and_then(|p| times[m].get(p).copied());
            // A pick not measured on the matrix counts as a miss, not as a time.
            if let Some(t) = t {
                if t <= best[m] * opts.near_best {
                    near += 1;
                }
                logs.push(t / best[m]);
            }
        }
        c.stats.near_best_share = near as f64 / rows.len() as f64;
        if !logs.is_empty() {
            c.stats.geomean_slowdown = geomean(&logs);
        }
        c.stats.depth = c.root.depth();
        c.stats.leaves = c.root.leaves();
        Ok(c)
    }

    /// Checks the classifier's internal consistency (feature count, every index in range); a
    /// classifier read from a file should pass this before use.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |reason: String| ModelError::Invalid {
            path: "<memory>".into(),
            reason: format!("SpMV classifier: {reason}"),
        };
        if self.feature_names.len() != FEATURE_NAMES.len() {
            return Err(bad(format!(
                "{} features, this build computes {}",
                self.feature_names.len(),
                FEATURE_NAMES.len()
            )));
        }
        for node in self.root.nodes() {
            match node {
                TreeNode::Leaf { ranked, .. } => {
                    if ranked.is_empty() || ranked.iter().any(|&i| i >= self.labels.len()) {
                        return Err(bad("a leaf with no or an unknown candidate".into()));
                    }
                }
                TreeNode::Split {
                    feature, threshold, ..
                } => {
                    if *feature >= FEATURE_NAMES.len() || threshold.is_nan() {
                        return Err(bad(format!("a split on feature {feature} at {threshold}")));
                    }
                }
            }
        }
        if self.fallback.iter().any(|&i| i >= self.labels.len()) {
            return Err(bad("a fallback index out of range".into()));
        }
        Ok(())
    }

    /// The candidate for a matrix: its leaf's best-ranked candidate whose format applies
    /// (within the padding limits), else the first applicable fallback; `None` when nothing
    /// applies.
    pub fn predict_candidate(&self, f: &MatrixFeatures, w: &SpmvWork) -> Option<&SpmvCandidate> {
        let x = classifier_features(f, w, self.l2_bytes);
        let TreeNode::Leaf { ranked, .. } = self.root.leaf(&x) else {
            return None;
        };
        ranked
            .iter()
            .chain(&self.fallback)
            .filter_map(|&i| self.labels.get(i))
            .find(|c| format_applies(c.format, w, &self.padding))
    }

    /// The name of the candidate for a matrix ([`SpmvClassifier::predict_candidate`]).
    pub fn predict(&self, f: &MatrixFeatures, w: &SpmvWork) -> Option<String> {
        self.predict_candidate(f, w).map(SpmvCandidate::name)
    }
}

/// What ranking the leaves needs.
struct RankCtx<'a> {
    rows: &'a [Vec<f64>],
    labels: &'a [usize],
    times: &'a [&'a BTreeMap<SpmvCandidate, f64>],
    best: &'a [f64],
    universe: &'a [SpmvCandidate],
    keep: usize,
}

impl RankCtx<'_> {
    /// Sends the training matrices `mats` down `node` and ranks each leaf's candidates on the
    /// matrices that reach it.
    fn rank_leaves(&self, node: &mut TreeNode, mats: Vec<usize>) {
        match node {
            TreeNode::Leaf { ranked, matrices } => {
                *matrices = mats.len();
                if mats.is_empty() {
                    return;
                }
                // Exact ties (twin launches) go to the leaf's most frequent label, ties of
                // frequency to the first candidate: deterministic, unlike the tree's own
                // leaf class.
                let mut freq: BTreeMap<usize, usize> = BTreeMap::new();
                for &m in &mats {
                    *freq.entry(self.labels[m]).or_default() += 1;
                }
                let prefer = freq
                    .iter()
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                    .map(|(&l, _)| l);
                let mut r = rank(&mats, self.times, self.best, self.universe, prefer);
                r.truncate(self.keep);
                if !r.is_empty() {
                    *ranked = r;
                }
            }
            TreeNode::Split {
                feature,
                threshold,
                left,
                right,
            } => {
                let (l, r): (Vec<usize>, Vec<usize>) = mats.into_iter().partition(|&m| {
                    self.rows[m].get(*feature).copied().unwrap_or(0.0) < *threshold
                });
                self.rank_leaves(left, l);
                self.rank_leaves(right, r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Header, MatrixRecord, SpmvRecord, Status, Timing, PROFILE_SCHEMA};
    use crate::spmv::geomean;
    use crate::spmv_synth::{self, Rng};
    use autopcg_catalog::{GridPolicy, SpmvImpl, SpmvKernel, SpmvLaunch};
    use autopcg_sparse::families::{Family, FamilyParams, Recipe};

    fn cand(kernel: SpmvKernel) -> SpmvCandidate {
        SpmvCandidate::own(SpmvImpl::Kernel(kernel), 256, GridPolicy::Cover)
    }

    /// A matrix record with random features; `mean` sets the mean row length.
    fn fake_matrix(id: &str, set: MatrixSet, mean: f64, rng: &mut Rng) -> MatrixRecord {
        let n = (1000.0 + 1e6 * rng.uniform()) as usize;
        let nnz = (n as f64 * mean) as usize;
        let std = mean * rng.uniform();
        let features = MatrixFeatures {
            n,
            ncols: n,
            nnz,
            row_len_mean: mean,
            row_len_max: (mean * (1.0 + 20.0 * rng.uniform())) as usize,
            row_len_min: 1,
            row_len_std: std,
            ndiag: 1 + (300.0 * rng.uniform()) as usize,
            dia_fill_ratio: 1.0 + 50.0 * rng.uniform(),
            ell_width: 10,
            ell_fill_ratio: 1.0 + 5.0 * rng.uniform(),
            hyb_split: 3,
            hyb_coo_share: rng.uniform() * 0.3,
            bandwidth: n / 2,
            symmetric: true,
            empty_rows: 0,
            diag_positive: true,
        };
        let work = SpmvWork {
            n: n as u64,
            ncols: n as u64,
            nnz: nnz as u64,
            row_len_max: features.row_len_max as u64,
            row_len_std: std,
            empty_rows: 0,
            scalar_warp_slots: (nnz as f64 * 1.5) as u64,
            vector_steps: [nnz as u64; 5],
            ell_width: 10,
            ell_slots: 10 * n as u64,
            ndiag: features.ndiag as u64,
            dia_slots: (n * features.ndiag) as u64,
            hyb_split: 3,
            hyb_ell_slots: 3 * n as u64,
            hyb_coo_nnz: 0,
            x_lines: (nnz as f64 * (0.2 + 0.8 * rng.uniform())) as u64,
            mean_col_distance: 1e3 * rng.uniform(),
        };
        MatrixRecord {
            id: id.into(),
            set,
            recipe: Recipe::family(Family::Banded, FamilyParams::new(n, 0)),
            features,
            work,
        }
    }

    fn rec(matrix: &str, c: &SpmvCandidate, t: f64) -> SpmvRecord {
        SpmvRecord {
            matrix: matrix.into(),
            launch: SpmvLaunch {
                format: c.format,
                kernel: c.kernel,
                threads: c.threads,
                blocks: Some(1),
                coo_blocks: None,
                grid: c.grid,
            },
            status: Status::Ok,
            timing: Some(Timing {
                median_ms: t,
                min_ms: t,
                max_ms: t,
                reps: 5,
            }),
            replayed: false,
            l2_flushed: false,
        }
    }

    /// Scalar wins below 9 entries per row, vector-32 above 11; a third candidate is never
    /// best; every other feature is noise.
    fn rule_profile(seed: u64) -> Profile {
        let mut rng = Rng::new(seed);
        let mut p = Profile {
            header: Some(Header {
                schema: PROFILE_SCHEMA,
                device: spmv_synth::device(),
                quick: false,
                tool_version: "test".into(),
                started_unix_s: 0,
            }),
            ..Profile::default()
        };
        let (a, b, c) = (
            cand(SpmvKernel::CsrScalar),
            cand(SpmvKernel::CsrVector(32)),
            cand(SpmvKernel::CsrVector(4)),
        );
        for (set, count) in [(MatrixSet::Fit, 60), (MatrixSet::Eval, 30)] {
            for i in 0..count {
                let long = i % 2 == 0;
                let mean = if long {
                    11.0 + 40.0 * rng.uniform()
                } else {
                    2.0 + 7.0 * rng.uniform()
                };
                let id = format!("{set:?}{i}");
                let m = fake_matrix(&id, set, mean, &mut rng);
                let (ta, tb) = if long { (2.0, 1.0) } else { (1.0, 2.0) };
                let noise = 1.0 + 0.002 * rng.normal();
                p.spmv.push(rec(&id, &a, ta * noise));
                p.spmv.push(rec(&id, &b, tb * noise));
                p.spmv.push(rec(&id, &c, 1.5));
                p.matrices.push(m);
            }
        }
        p
    }

    #[test]
    fn learns_a_separable_rule() {
        let p = rule_profile(1);
        let cl = SpmvClassifier::fit(&p, &ClassifierOptions::default()).unwrap();
        cl.validate().unwrap();
        assert_eq!(cl.stats.matrices, 60);
        assert_eq!(cl.stats.near_best_share, 1.0);
        assert_eq!(cl.stats.leaves, 2, "{:?}", cl.root);
        let TreeNode::Split { feature, .. } = &cl.root else {
            panic!("no split: {:?}", cl.root)
        };
        assert_eq!(FEATURE_NAMES[*feature], "row_len_mean");
        for m in p.matrices.iter().filter(|m| m.set == MatrixSet::Eval) {
            let want = if m.features.row_len_mean > 10.0 {
                "csr/spmv_csr_vector_32/t256/cover"
            } else {
                "csr/spmv_csr_scalar/t256/cover"
            };
            assert_eq!(cl.predict(&m.features, &m.work).as_deref(), Some(want));
        }
    }

    #[test]
    fn serde_round_trip_keeps_the_predictions() {
        let p = rule_profile(2);
        let cl = SpmvClassifier::fit(&p, &ClassifierOptions::default()).unwrap();
        let s = serde_json::to_string(&cl).unwrap();
        let back: SpmvClassifier = serde_json::from_str(&s).unwrap();
        back.validate().unwrap();
        assert_eq!(back.labels, cl.labels);
        for m in &p.matrices {
            assert_eq!(
                back.predict(&m.features, &m.work),
                cl.predict(&m.features, &m.work)
            );
        }
        let mut bad = back.clone();
        bad.fallback.push(99);
        assert!(matches!(bad.validate(), Err(ModelError::Invalid { .. })));
    }

    #[test]
    fn a_leaf_whose_pick_does_not_apply_falls_back() {
        let p = rule_profile(3);
        let m = &p.matrices[0];
        // DIA first at the only leaf; this matrix's DIA fill is far beyond the limit.
        let mut w = m.work.clone();
        w.dia_slots = 100 * w.nnz;
        let cl = SpmvClassifier {
            feature_names: FEATURE_NAMES.iter().map(|s| s.to_string()).collect(),
            labels: vec![
                cand(SpmvKernel::Dia),
                cand(SpmvKernel::CsrVector(4)),
                cand(SpmvKernel::CsrScalar),
            ],
            root: TreeNode::Leaf {
                ranked: vec![0],
                matrices: 1,
            },
            fallback: vec![0, 2],
            l2_bytes: 1 << 20,
            padding: PaddingLimits::default(),
            stats: ClassifierStats {
                matrices: 1,
                distinct_labels: 1,
                near_best_share: 1.0,
                geomean_slowdown: 1.0,
                depth: 0,
                leaves: 1,
            },
        };
        cl.validate().unwrap();
        assert_eq!(
            cl.predict(&m.features, &w).as_deref(),
            Some("csr/spmv_csr_scalar/t256/cover")
        );
        w.dia_slots = w.nnz;
        assert_eq!(
            cl.predict(&m.features, &w).as_deref(),
            Some("dia/spmv_dia/t256/cover")
        );
    }

    #[test]
    fn synthetic_profile_picks_are_applicable_and_close_to_the_best() {
        let p = spmv_synth::profile(4);
        let cl = SpmvClassifier::fit(&p, &ClassifierOptions::default()).unwrap();
        let times = measured_times(&p);
        let mut slow = Vec::new();
        for m in &p.matrices {
            let pick = cl.predict_candidate(&m.features, &m.work).unwrap();
            assert!(format_applies(
                pick.format,
                &m.work,
                &PaddingLimits::default()
            ));
            let t = &times[&m.id];
            let best = t.best_own().unwrap().1;
            slow.push(t.own[pick] / best);
        }
        let g = geomean(&slow);
        assert!(g < 1.15, "geomean slowdown {g}");
        assert!(cl.stats.near_best_share > 0.8, "{:?}", cl.stats);
    }

    #[test]
    fn too_little_data_is_a_fit_error() {
        assert!(matches!(
            SpmvClassifier::fit(&Profile::default(), &ClassifierOptions::default()),
            Err(ModelError::Fit { .. })
        ));
        let mut p = rule_profile(5);
        let first = p.matrices[0].id.clone();
        p.spmv.retain(|r| r.matrix == first);
        assert!(matches!(
            SpmvClassifier::fit(&p, &ClassifierOptions::default()),
            Err(ModelError::Fit { .. })
        ));
        let opts = ClassifierOptions {
            near_best: 0.5,
            ..ClassifierOptions::default()
        };
        assert!(matches!(
            SpmvClassifier::fit(&rule_profile(5), &opts),
            Err(ModelError::InvalidParameter(_))
        ));
    }

    #[test]
    fn linfa_trees_serialise_with_the_serde_feature() {
        // The claim the module documentation makes about linfa-trees.
        let x = Array2::from_shape_vec((4, 1), vec![1.0, 2.0, 10.0, 11.0]).unwrap();
        let ds = Dataset::new(x.clone(), Array1::from_vec(vec![0usize, 0, 1, 1]));
        let tree = DecisionTree::params().fit(&ds).unwrap();
        let back: DecisionTree<f64, usize> =
            serde_json::from_str(&serde_json::to_string(&tree).unwrap()).unwrap();
        assert_eq!(back.predict(&x), tree.predict(&x));
        assert_eq!(tree.predict(&x).to_vec(), vec![0, 0, 1, 1]);
    }

    #[test]
    fn features_are_finite_even_for_an_empty_matrix() {
        let a = autopcg_sparse::CsrMatrix::from_triplets(4, 4, &[], &[], &[]).unwrap();
        let f = autopcg_sparse::features::features(&a);
        let w = crate::work::spmv_work(&a);
        let x = classifier_features(&f, &w, 0);
        assert_eq!(x.len(), FEATURE_NAMES.len());
        assert!(x.iter().all(|v| v.is_finite()), "{x:?}");
    }
}
