//! SSOR-AI's application form from measured iterations: a small decision tree fitted on the
//! form stage of `tune`, which times the PCG iteration with each form on every benchmark
//! matrix ([`FormRecord`]).
//!
//! Why a model of its own: the form could be judged from the SpMV model's predicted times of
//! the operands' products (SpMV K + SpMV K^T against SpMV M), but those are times of each
//! product alone, and the two forms differ by how the iteration's products share L2. On the
//! H100, 3D Poisson 64^3 runs 10-12% faster factored, while the product times (repeated calls,
//! L2-cold calls, or each kernel of the iteration under Nsight Compute with L2 flushed) all put
//! the explicit product ahead; the predicted comparison picked the faster form on 13 of 16
//! matrices, and four re-pricings of it no better (README, "SSOR-AI's form, matrix by matrix").
//!
//! The tree reads two features of the structure, known before anything is formed
//! ([`FormFeatures`]): the factored iteration's bytes over the L2 size (whether the
//! iteration's data stays in L2) and the fill `nnz(M) / (nnz(K) + nnz(K^T))` (how many more
//! entries the explicit product reads). It is fitted by exhaustive search over trees of a
//! depth limit (thresholds midway between neighbouring values, at least [`MIN_LEAF`] matrices a
//! leaf), minimising the cost of a wrong pick: the sum over the fit matrices it misjudges of
//! `|ln(t_explicit / t_factored)|`, the time lost. A split is kept only where it lowers that
//! cost; a tie keeps the factored form (nothing to form). The depth limit, 1 to [`MAX_DEPTH`],
//! is chosen by leave-one-out cost on the fit matrices: the shallowest within one standard
//! error of the least (on the H100's form stage: 2.87, 1.04 and 1.29 for depths 1, 2 and 3, each
//! +-0.4-0.6, so depth 2; on a re-run 2.80, 1.03 and 0.85, depth 2 again and the same tree).
use autopcg_catalog::{square_csr_bytes, ITERATION_VECTOR_BYTES_PER_ROW};
use serde::{Deserialize, Serialize};

use crate::profile::{FormRecord, MatrixSet, Profile, Status};

/// Deepest tree the fit considers (the depth itself is chosen by leave-one-out cost).
pub const MAX_DEPTH: usize = 3;

/// Fewest matrices a leaf of the tree holds.
pub const MIN_LEAF: usize = 2;

/// Least gap, `ln(hi / lo)`, between the two neighbouring values a threshold may part: closer
/// values differ by accident of the generator (the FEM meshes' fills, 1.1855 and 1.1860, were
/// parted on the H100 by ties of 0.3-2.8% and cost a mesh it misjudged 8.7%).
pub const MIN_GAP: f64 = 0.02;

/// Fewest fit matrices with both forms timed for a form model to be fitted.
pub const MIN_MATRICES: usize = 6;

/// SSOR-AI's application form, as the form model names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormPick {
    /// SpMV with K, then with K^T (the scaling folded into it).
    Factored,
    /// One SpMV with M = K^T D^-1 K.
    Explicit,
}

/// What the form model reads of a matrix.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FormFeatures {
    /// Bytes the factored iteration moves (A's, K's and K^T's CSR arrays and the iteration's
    /// vectors) over the L2 size.
    pub iteration_l2: f64,
    /// `nnz(M) / (nnz(K) + nnz(K^T))`.
    pub fill: f64,
}

impl FormFeatures {
    /// The features of a matrix of `rows` rows and `nnz_a` entries whose factors hold
    /// `nnz_factors` entries together and whose explicit product holds `nnz_explicit`, on a
    /// device of `l2_bytes` of L2.
    pub fn of(rows: u64, nnz_a: u64, nnz_factors: u64, nnz_explicit: u64, l2_bytes: u64) -> Self {
        // K's and K^T's CSR arrays: entries and row pointers of each.
        let factors = nnz_factors
            .saturating_mul(12)
            .saturating_add(rows.saturating_mul(40));
        let bytes = square_csr_bytes(rows, nnz_a)
            .saturating_add(factors)
            .saturating_add(rows.saturating_mul(ITERATION_VECTOR_BYTES_PER_ROW));
        FormFeatures {
            iteration_l2: bytes as f64 / l2_bytes.max(1) as f64,
            fill: nnz_explicit as f64 / nnz_factors.max(1) as f64,
        }
    }

    fn get(&self, f: FormFeature) -> f64 {
        match f {
            FormFeature::IterationL2 => self.iteration_l2,
            FormFeature::Fill => self.fill,
        }
    }
}

/// A feature of [`FormFeatures`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormFeature {
    /// [`FormFeatures::iteration_l2`].
    IterationL2,
    /// [`FormFeatures::fill`].
    Fill,
}

impl FormFeature {
    const ALL: [FormFeature; 2] = [FormFeature::IterationL2, FormFeature::Fill];

    /// The feature's name.
    pub fn name(self) -> &'static str {
        match self {
            FormFeature::IterationL2 => "iteration bytes / L2",
            FormFeature::Fill => "nnz(M) / nnz(K + K^T)",
        }
    }
}

/// A decision tree over [`FormFeatures`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormTree {
    /// One form for every matrix reaching here.
    Leaf(FormPick),
    /// `feature <= threshold` goes below, else above.
    Split {
        /// The feature compared.
        feature: FormFeature,
        /// The threshold.
        threshold: f64,
        /// Where `feature <= threshold`.
        below: Box<FormTree>,
        /// Where `feature > threshold`.
        above: Box<FormTree>,
    },
}

impl FormTree {
    /// The form for a matrix of features `f`.
    pub fn pick(&self, f: &FormFeatures) -> FormPick {
        match self {
            FormTree::Leaf(p) => *p,
            FormTree::Split {
                feature,
                threshold,
                below,
                above,
            } => {
                if f.get(*feature) <= *threshold {
                    below.pick(f)
                } else {
                    above.pick(f)
                }
            }
        }
    }

    /// The tree as one line (`fill <= 1.40 ? explicit : (...)`).
    pub fn describe(&self) -> String {
        match self {
            FormTree::Leaf(FormPick::Factored) => "factored".into(),
            FormTree::Leaf(FormPick::Explicit) => "explicit".into(),
            FormTree::Split {
                feature,
                threshold,
                below,
                above,
            } => format!(
                "{} <= {threshold:.3} ? {} : {}",
                feature.name(),
                below.describe_inner(),
                above.describe_inner()
            ),
        }
    }

    fn describe_inner(&self) -> String {
        match self {
            FormTree::Leaf(_) => self.describe(),
            FormTree::Split { .. } => format!("({})", self.describe()),
        }
    }
}

/// One matrix of the form stage: its features and the measured ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormPoint {
    /// [`FormRecord::matrix`].
    pub matrix: String,
    /// Fit or held out.
    pub set: MatrixSet,
    /// Its features on the profiled device.
    pub features: FormFeatures,
    /// `ln(t_explicit / t_factored)` per iteration: negative where the explicit form is faster.
    pub log_ratio: f64,
}

impl FormPoint {
    /// The faster form (a tie: factored).
    pub fn faster(&self) -> FormPick {
        if self.log_ratio < 0.0 {
            FormPick::Explicit
        } else {
            FormPick::Factored
        }
    }

    /// The time lost picking `p`: `|ln ratio|` when `p` is the slower form, else 0.
    fn cost(&self, p: FormPick) -> f64 {
        if p == self.faster() {
            0.0
        } else {
            self.log_ratio.abs()
        }
    }
}

/// How well the tree picks on a set of matrices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormQuality {
    /// Matrices with both forms timed.
    pub matrices: usize,
    /// Those the tree picks the faster form on.
    pub right: usize,
    /// The largest slowdown of the tree's pick against the faster form (1 when always right).
    pub worst_slowdown: f64,
}

impl FormQuality {
    fn of<'a>(tree: &FormTree, points: impl Iterator<Item = &'a FormPoint>) -> FormQuality {
        let mut q = FormQuality {
            matrices: 0,
            right: 0,
            worst_slowdown: 1.0,
        };
        for p in points {
            q.matrices += 1;
            let c = p.cost(tree.pick(&p.features));
            if c == 0.0 {
                q.right += 1;
            }
            q.worst_slowdown = q.worst_slowdown.max(c.exp());
        }
        q
    }
}

/// The form model: the tree, the points it was fitted on and judged by, and its quality on
/// the fit and held-out matrices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormModel {
    /// The tree.
    pub tree: FormTree,
    /// Every matrix of the form stage with both forms timed.
    pub points: Vec<FormPoint>,
    /// The tree's depth limit, chosen by leave-one-out cost on the fit matrices (the
    /// shallowest within one standard error of the least).
    #[serde(default)]
    pub depth: usize,
    /// Per depth limit 1..=[`MAX_DEPTH`], the fit matrices' leave-one-out cost: each matrix
    /// judged by the tree fitted on the others, the time lost summed (`|ln ratio|` per
    /// misjudged matrix).
    #[serde(default)]
    pub cross_validated: Vec<f64>,
    /// The standard error of each of those costs (`sqrt(n)` times the sample standard
    /// deviation of the matrices' losses): the depth is the shallowest within one of the least.
    #[serde(default)]
    pub cross_validated_error: Vec<f64>,
    /// On the fit matrices.
    pub fit: FormQuality,
    /// On the held-out matrices (none fitted on).
    pub held_out: FormQuality,
}

impl FormModel {
    /// Fits the tree on the fit matrices of `profile`'s form records, on a device of
    /// `l2_bytes` of L2; `None` with fewer than [`MIN_MATRICES`] fit matrices timed both ways.
    pub fn fit(profile: &Profile, l2_bytes: u64) -> Option<FormModel> {
        let points: Vec<FormPoint> = profile
            .forms
            .iter()
            .filter_map(|r| point(r, l2_bytes))
            .collect();
        let fit: Vec<&FormPoint> = points.iter().filter(|p| p.set == MatrixSet::Fit).collect();
        if fit.len() < MIN_MATRICES {
            return None;
        }
        let (depth, cross_validated, cross_validated_error) = chosen_depth(&fit);
        let tree = best_tree(&fit, depth);
        Some(FormModel {
            depth,
            cross_validated,
            cross_validated_error,
            fit: FormQuality::of(&tree, fit.iter().copied()),
            held_out: FormQuality::of(&tree, points.iter().filter(|p| p.set == MatrixSet::Eval)),
            tree,
            points,
        })
    }

    /// The form for a matrix of features `f`.
    pub fn pick(&self, f: &FormFeatures) -> FormPick {
        self.tree.pick(f)
    }
}

/// The point of a form record measured both ways.
fn point(r: &FormRecord, l2_bytes: u64) -> Option<FormPoint> {
    if r.status != Status::Ok {
        return None;
    }
    let (f, e) = (r.factored?, r.explicit?);
    if !(f.is_valid() && e.is_valid() && f.median_ms > 0.0 && e.median_ms > 0.0) {
        return None;
    }
    Some(FormPoint {
        matrix: r.matrix.clone(),
        set: r.set,
        features: FormFeatures::of(r.rows, r.nnz_a, r.nnz_factors, r.nnz_explicit, l2_bytes),
        log_ratio: (e.median_ms / f.median_ms).ln(),
    })
}

/// The leaf of least cost on `pts` (a tie: factored).
fn best_leaf(pts: &[&FormPoint]) -> (f64, FormTree) {
    let cost = |p: FormPick| pts.iter().map(|x| x.cost(p)).sum::<f64>();
    let (cf, ce) = (cost(FormPick::Factored), cost(FormPick::Explicit));
    if ce < cf {
        (ce, FormTree::Leaf(FormPick::Explicit))
    } else {
        (cf, FormTree::Leaf(FormPick::Factored))
    }
}

/// The depth limit of `fit`'s tree by leave-one-out cost, with that cost per depth limit
/// 1..=[`MAX_DEPTH`] and its standard error: each fit matrix is judged by the tree fitted on
/// the others, and the time lost summed. The depth taken is the shallowest whose cost is within
/// one standard error of the least (the one-standard-error rule of Breiman, Friedman, Olshen
/// and Stone, "Classification and Regression Trees"): the costs of deeper trees move with the
/// timing noise of the few matrices they part, and a re-run of the same form stage on the
/// H100 turned the least cost from depth 2 (1.04 against 1.29) to depth 3 (1.03 against 0.85)
/// with every matrix's ratio within a few percent of the first run's.
fn chosen_depth(fit: &[&FormPoint]) -> (usize, Vec<f64>, Vec<f64>) {
    let per_matrix: Vec<Vec<f64>> = (1..=MAX_DEPTH)
        .map(|d| {
            (0..fit.len())
                .map(|i| {
                    let rest: Vec<&FormPoint> = fit
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| j != i)
                        .map(|(_, p)| *p)
                        .collect();
                    fit[i].cost(best_tree(&rest, d).pick(&fit[i].features))
                })
                .collect()
        })
        .collect();
    let costs: Vec<f64> = per_matrix.iter().map(|c| c.iter().sum()).collect();
    let errors: Vec<f64> = per_matrix.iter().map(|c| sum_standard_error(c)).collect();
    (one_error_depth(&costs, &errors), costs, errors)
}

/// The shallowest depth limit (1-based) whose cost is within one standard error of the least
/// cost (`costs[d - 1]`, `errors[d - 1]` for depth limit `d`; a tie: the shallower).
fn one_error_depth(costs: &[f64], errors: &[f64]) -> usize {
    let least = (0..costs.len())
        .min_by(|&a, &b| costs[a].total_cmp(&costs[b]))
        .unwrap_or(0);
    let bound = costs.get(least).copied().unwrap_or(0.0)
        + errors.get(least).copied().unwrap_or(0.0)
        + 1e-12;
    costs.iter().position(|&c| c <= bound).unwrap_or(least) + 1
}

/// The standard error of the sum of `c` as an estimate from `c.len()` samples:
/// `sqrt(n) * s`, `s` the sample standard deviation (0 for fewer than two).
fn sum_standard_error(c: &[f64]) -> f64 {
    let n = c.len();
    if n < 2 {
        return 0.0;
    }
    let mean = c.iter().sum::<f64>() / n as f64;
    let var = c.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (n as f64 * var).sqrt()
}

/// The tree of depth at most `depth` of least cost on `pts`: a split only where it lowers the
/// cost, thresholds midway between neighbouring values at least [`MIN_GAP`] apart, at least
/// [`MIN_LEAF`] points a side. Among trees of equal cost the one whose narrowest split has the widest gap between
/// the values it parts wins (in the log of the features, which are positive): a threshold
/// squeezed between two nearly equal values (3D Poisson's fill, 1.604 at 50^3 and 1.607 at
/// 56^3) separates the fit matrices by accident.
fn best_tree(pts: &[&FormPoint], depth: usize) -> FormTree {
    best_tree_scored(pts, depth).tree
}

struct Scored {
    cost: f64,
    /// The least gap, `ln(hi / lo)`, of the tree's splits (infinite for a leaf).
    margin: f64,
    tree: FormTree,
}

fn best_tree_scored(pts: &[&FormPoint], depth: usize) -> Scored {
    let (cost, tree) = best_leaf(pts);
    let leaf_cost = cost;
    let mut best = Scored {
        cost,
        margin: f64::INFINITY,
        tree,
    };
    if depth == 0 || pts.len() < 2 * MIN_LEAF {
        return best;
    }
    for feature in FormFeature::ALL {
        let mut vals: Vec<f64> = pts.iter().map(|p| p.features.get(feature)).collect();
        vals.sort_by(f64::total_cmp);
        vals.dedup();
        for w in vals.windows(2) {
            if w[0] > 0.0 && (w[1] / w[0]).ln() < MIN_GAP {
                continue;
            }
            let threshold = 0.5 * (w[0] + w[1]);
            let (below, above): (Vec<&FormPoint>, Vec<&FormPoint>) = pts
                .iter()
                .partition(|p| p.features.get(feature) <= threshold);
            if below.len() < MIN_LEAF || above.len() < MIN_LEAF {
                continue;
            }
            let b = best_tree_scored(&below, depth - 1);
            let a = best_tree_scored(&above, depth - 1);
            let cost = b.cost + a.cost;
            // Strictly below the leaf's cost (with a margin for rounding): a split that
            // changes nothing is not kept.
            if cost >= leaf_cost - 1e-12 {
                continue;
            }
            let gap = if w[0] > 0.0 {
                (w[1] / w[0]).ln()
            } else {
                f64::INFINITY
            };
            let margin = gap.min(b.margin).min(a.margin);
            let better =
                cost < best.cost - 1e-12 || (cost <= best.cost + 1e-12 && margin > best.margin);
            if better {
                best = Scored {
                    cost,
                    margin,
                    tree: FormTree::Split {
                        feature,
                        threshold,
                        below: Box::new(b.tree),
                        above: Box::new(a.tree),
                    },
                };
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(name: &str, set: MatrixSet, iteration_l2: f64, fill: f64, ratio: f64) -> FormPoint {
        FormPoint {
            matrix: name.into(),
            set,
            features: FormFeatures { iteration_l2, fill },
            log_ratio: f64::ln(ratio),
        }
    }

    /// Thirteen of the H100's sixteen matrices in the README's table (features as
    /// `FormFeatures::of` counts them on its 50 MiB of L2, ratios explicit / factored as
    /// measured): the explicit form wins while the iteration stays in L2 and at low fill, and
    /// loses past L2 at 3D Poisson's fill and beyond. A depth-2 tree separates them all.
    fn h100_table() -> Vec<FormPoint> {
        use MatrixSet::Fit;
        vec![
            pt("p3d40", Fit, 0.367, 1.599, 0.966),
            pt("p3d50", Fit, 0.718, 1.604, 0.951),
            pt("p3d56", Fit, 1.01, 1.607, 1.112),
            pt("p3d64", Fit, 1.509, 1.609, 1.097),
            pt("p3d80", Fit, 2.951, 1.612, 1.078),
            pt("p3d100", Fit, 5.771, 1.615, 1.111),
            pt("p2d300", Fit, 0.439, 1.165, 0.865),
            pt("p2d512", Fit, 1.279, 1.166, 0.902),
            pt("p2d1000", Fit, 4.881, 1.166, 0.987),
            pt("fem1e5", Fit, 0.579, 1.185, 0.864),
            pt("fem4e5", Fit, 2.317, 1.186, 0.970),
            pt("fem2m", Fit, 11.591, 1.186, 0.922),
            pt("k1138", Fit, 19.272, 3.031, 1.687),
        ]
    }

    #[test]
    fn the_tree_separates_the_measured_forms() {
        let pts = h100_table();
        let refs: Vec<&FormPoint> = pts.iter().collect();
        let tree = best_tree(&refs, 2);
        for p in &pts {
            assert_eq!(
                tree.pick(&p.features),
                p.faster(),
                "{} under {}",
                p.matrix,
                tree.describe()
            );
        }
        // One split on the fill would separate them too, between 3D Poisson 50^3's 1.604 and
        // 56^3's 1.607: the widest-gap rule keeps the iteration's size and the fill instead,
        // so a 3D Poisson grid between the two, its iteration in L2, stays explicit.
        let f = |l2, fill| {
            tree.pick(&FormFeatures {
                iteration_l2: l2,
                fill,
            })
        };
        assert_eq!(f(0.8, 1.6055), FormPick::Explicit, "{}", tree.describe());
        assert!(matches!(
            tree,
            FormTree::Split {
                feature: FormFeature::IterationL2,
                ..
            }
        ));
        // The pinned decisions: 3D Poisson 64^3 factored, 50^3 explicit, the FEM matrices
        // explicit.
        let f = |l2, fill| {
            tree.pick(&FormFeatures {
                iteration_l2: l2,
                fill,
            })
        };
        assert_eq!(f(1.509, 1.609), FormPick::Factored);
        assert_eq!(f(0.718, 1.604), FormPick::Explicit);
        assert_eq!(f(11.591, 1.186), FormPick::Explicit);
    }

    /// The shallowest depth within one standard error of the least cost: the H100's two runs
    /// of the form stage both take depth 2, the second though depth 3's cost is lower there.
    #[test]
    fn the_depth_is_the_shallowest_within_one_error_of_the_least() {
        let first = one_error_depth(&[2.871, 1.041, 1.294], &[0.573, 0.399, 0.513]);
        let rerun = one_error_depth(&[2.805, 1.028, 0.851], &[0.594, 0.395, 0.391]);
        assert_eq!((first, rerun), (2, 2));
        // Past one error, the deeper limit.
        assert_eq!(one_error_depth(&[2.0, 1.5, 0.5], &[0.5, 0.4, 0.3]), 3);
        // A tie: the shallower.
        assert_eq!(one_error_depth(&[1.0, 1.0, 1.0], &[0.0, 0.0, 0.0]), 1);
        assert_eq!(one_error_depth(&[3.0, 1.0, 1.2], &[0.1, 0.1, 0.0]), 2);
        assert_eq!(sum_standard_error(&[1.0]), 0.0);
        // n = 4, s = sqrt(4/3): sqrt(4 * 4/3).
        let e = sum_standard_error(&[0.0, 0.0, 2.0, 2.0]);
        assert!((e - (16.0f64 / 3.0).sqrt()).abs() < 1e-12, "{e}");
    }

    /// The depth limit by leave-one-out cost: one split on the size separates these matrices,
    /// and a deeper tree, free to split off pairs, judges the left-out matrix no better;
    /// points a deeper tree separates where one split cannot get a deeper limit.
    #[test]
    fn the_depth_is_chosen_by_leave_one_out_cost() {
        use MatrixSet::Fit;
        let one_split: Vec<FormPoint> = (0..10)
            .map(|i| {
                let l2 = 0.2 * (i + 1) as f64;
                let fill = 1.1 + 0.07 * ((i * 7) % 10) as f64;
                pt(
                    &format!("m{i}"),
                    Fit,
                    l2,
                    fill,
                    if l2 < 1.0 { 0.9 } else { 1.1 },
                )
            })
            .collect();
        let refs: Vec<&FormPoint> = one_split.iter().collect();
        let (depth, costs, _) = chosen_depth(&refs);
        assert_eq!(costs.len(), MAX_DEPTH);
        assert_eq!(depth, 1, "{costs:?}");
        // Explicit only in L2 at low fill: the size and the fill both, two levels.
        let mut two = Vec::new();
        for (i, l2) in [0.2, 0.4, 0.6, 0.8, 1.5, 2.0, 3.0, 4.0]
            .into_iter()
            .enumerate()
        {
            for (j, fill) in [1.2, 1.3, 2.2, 2.4].into_iter().enumerate() {
                let explicit = l2 < 1.0 && fill < 2.0;
                let name = format!("m{i}{j}");
                two.push(pt(&name, Fit, l2, fill, if explicit { 0.9 } else { 1.1 }));
            }
        }
        let refs: Vec<&FormPoint> = two.iter().collect();
        let (depth, costs, _) = chosen_depth(&refs);
        assert_eq!(depth, 2, "{costs:?}");
        assert!(costs[1] < costs[0]);
    }

    #[test]
    fn a_split_is_kept_only_where_it_lowers_the_cost() {
        use MatrixSet::Fit;
        // Every matrix faster factored: one leaf, whatever the features.
        let pts = [
            pt("a", Fit, 0.1, 1.0, 1.1),
            pt("b", Fit, 1.0, 2.0, 1.2),
            pt("c", Fit, 10.0, 3.0, 1.05),
            pt("d", Fit, 5.0, 1.5, 1.3),
        ];
        let refs: Vec<&FormPoint> = pts.iter().collect();
        assert_eq!(best_tree(&refs, 2), FormTree::Leaf(FormPick::Factored));
        // A tie (no time lost either way) keeps the factored form.
        let tie = [pt("e", Fit, 1.0, 1.0, 1.0)];
        let r: Vec<&FormPoint> = tie.iter().collect();
        assert_eq!(best_leaf(&r).1, FormTree::Leaf(FormPick::Factored));
        // Values closer than MIN_GAP are not parted: two FEM meshes' fills.
        let close = [
            pt("g", Fit, 1.0, 1.1855, 1.05),
            pt("h", Fit, 1.0, 1.1855, 1.03),
            pt("i", Fit, 1.0, 1.1860, 0.90),
            pt("j", Fit, 1.0, 1.1860, 0.92),
        ];
        let refs: Vec<&FormPoint> = close.iter().collect();
        assert!(matches!(best_tree(&refs, 2), FormTree::Leaf(_)));
        // A leaf holds at least MIN_LEAF matrices: one explicit matrix (f) at the end of
        // every feature is not split off alone; its neighbour (c) goes with it.
        let one = [
            pt("a", Fit, 0.1, 1.0, 1.1),
            pt("b", Fit, 1.0, 2.0, 1.2),
            pt("c", Fit, 10.0, 3.0, 1.05),
            pt("f", Fit, 20.0, 4.0, 0.5),
        ];
        let refs: Vec<&FormPoint> = one.iter().collect();
        let tree = best_tree(&refs, 2);
        assert_eq!(tree.pick(&one[3].features), FormPick::Explicit);
        assert_eq!(tree.pick(&one[2].features), FormPick::Explicit);
        assert_eq!(tree.pick(&one[0].features), FormPick::Factored);
    }

    /// From a profile: every matrix with both forms timed is a point of its record's set; the
    /// fit matrices make the tree, the held-out ones only judge it; records skipped or with one
    /// form missing are no points.
    #[test]
    fn a_profile_s_form_records_make_the_points_and_the_quality() {
        use crate::profile::Timing;
        let mut p = crate::spmv_synth::profile(8);
        let t = |ms: f64| Timing {
            median_ms: ms,
            min_ms: ms,
            max_ms: ms,
            reps: 3,
        };
        let ids: Vec<(String, MatrixSet)> =
            p.matrices.iter().map(|m| (m.id.clone(), m.set)).collect();
        assert!(ids.iter().filter(|(_, s)| *s == MatrixSet::Fit).count() >= MIN_MATRICES);
        for (i, (id, _)) in ids.iter().enumerate() {
            // Small iterations explicit, large ones factored.
            let rows = 1000 * (i as u64 + 1);
            let big = i % 2 == 1;
            p.forms.push(FormRecord {
                matrix: id.clone(),
                set: ids[i].1,
                rows,
                nnz_a: 5 * rows,
                nnz_factors: 6 * rows,
                nnz_explicit: 9 * rows,
                status: Status::Ok,
                factored: Some(t(1.0)),
                explicit: Some(t(if big { 1.2 } else { 0.8 })),
            });
        }
        p.forms.push(FormRecord {
            status: Status::Skipped("past the bound".into()),
            factored: None,
            explicit: None,
            ..p.forms[0].clone()
        });
        let m = FormModel::fit(&p, 1 << 20).unwrap();
        assert_eq!(m.points.len(), ids.len());
        let fit = ids.iter().filter(|(_, s)| *s == MatrixSet::Fit).count();
        assert_eq!(m.fit.matrices, fit);
        assert_eq!(m.held_out.matrices, ids.len() - fit);
        // Too few fit matrices: no model.
        let mut few = p.clone();
        few.forms.truncate(MIN_MATRICES - 1);
        few.forms
            .retain(|r| p.matrix(&r.matrix).map(|m| m.set) == Some(MatrixSet::Fit));
        assert!(FormModel::fit(&few, 1 << 20).is_none());
    }

    #[test]
    fn features_count_the_factored_iteration_and_the_fill() {
        // 10 rows, 28 entries of A, 38 of K and K^T, 57 of M, 1 kB of L2.
        let f = FormFeatures::of(10, 28, 38, 57, 1000);
        let bytes = (12 * 28 + 20 * 10) + (12 * 38 + 40 * 10) + 64 * 10;
        assert!((f.iteration_l2 - bytes as f64 / 1000.0).abs() < 1e-12);
        assert!((f.fill - 1.5).abs() < 1e-12);
    }

    #[test]
    fn quality_counts_right_picks_and_the_worst_loss() {
        use MatrixSet::Eval;
        let tree = FormTree::Leaf(FormPick::Explicit);
        let pts = [pt("a", Eval, 1.0, 1.0, 0.9), pt("b", Eval, 1.0, 1.0, 1.25)];
        let q = FormQuality::of(&tree, pts.iter());
        assert_eq!((q.matrices, q.right), (2, 1));
        assert!((q.worst_slowdown - 1.25).abs() < 1e-12);
    }
}
