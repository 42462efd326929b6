//! Fitting one candidate's time model: non-negative least squares on the relative error, the
//! feature set chosen by k-fold cross-validation and the one-standard-error rule.
use serde::{Deserialize, Serialize};

use autopcg_catalog::DeviceProps;

use super::{
    design_row, design_row_at, quantile, FeatureSet, KernelKind, SpmvCandidate, SpmvFitOptions,
    Term, TermSpec,
};
use crate::nnls::{nnls, DenseMatrix};
use crate::work::SpmvWork;

/// In-sample and cross-validated accuracy of one fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitStats {
    /// Matrices the fit used.
    pub matrices: usize,
    /// Median absolute relative error on them.
    pub median_rel_err: f64,
    /// 90th percentile of the absolute relative error.
    pub p90_rel_err: f64,
    /// Largest absolute relative error.
    pub max_rel_err: f64,
    /// Median out-of-fold relative error of the chosen feature set (`None` when too few
    /// matrices for cross-validation).
    pub cv_median_rel_err: Option<f64>,
    /// 90th percentile of the out-of-fold relative errors.
    pub cv_p90_rel_err: Option<f64>,
}

/// The fitted time model of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateModel {
    /// The candidate.
    pub candidate: SpmvCandidate,
    /// Its kernel kind ([`KernelKind::of`], stored for readers of the model file).
    pub kind: KernelKind,
    /// The feature set chosen.
    pub features: FeatureSet,
    /// The columns of the model.
    pub columns: Vec<TermSpec>,
    /// Milliseconds per unit of each column, all `>= 0`.
    pub coef: Vec<f64>,
    /// Accuracy.
    pub stats: FitStats,
}

impl CandidateModel {
    /// A model of `candidate` with given coefficients instead of a fit: the base terms of its
    /// kind ([`KernelKind::terms`], the "base" feature set: no depth, fill or L2 terms), each
    /// priced `coef(term)` milliseconds per unit (negative or non-finite prices are taken as
    /// 0). Its statistics are those of a perfect fit on no matrix. For what-if models and for
    /// the tests of what reads a model's predictions.
    pub fn with_coefficients(
        candidate: SpmvCandidate,
        coef: impl Fn(Term) -> f64,
    ) -> CandidateModel {
        let features = FeatureSet {
            name: "base".into(),
            depth: false,
            l2_fraction: None,
            fill_fraction: None,
            l2_knots: Vec::new(),
        };
        let kind = KernelKind::of(&candidate);
        let columns = features.columns(kind);
        let coef = columns
            .iter()
            .map(|c| {
                Some(coef(c.term))
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .unwrap_or(0.0)
            })
            .collect();
        CandidateModel {
            candidate,
            kind,
            features,
            columns,
            coef,
            stats: FitStats {
                matrices: 0,
                median_rel_err: 0.0,
                p90_rel_err: 0.0,
                max_rel_err: 0.0,
                cv_median_rel_err: None,
                cv_p90_rel_err: None,
            },
        }
    }

    /// Predicted milliseconds on `w`.
    pub fn predict(&self, w: &SpmvWork, dev: &DeviceProps) -> f64 {
        let row = design_row(&self.columns, &self.features, &self.candidate, w, dev);
        row.iter().zip(&self.coef).map(|(a, c)| a * c).sum()
    }

    /// [`CandidateModel::predict`] with the L2 terms evaluated at a working set of `bytes`
    /// ([`design_row_at`]).
    pub fn predict_at(&self, w: &SpmvWork, dev: &DeviceProps, bytes: f64) -> f64 {
        let row = design_row_at(
            &self.columns,
            &self.features,
            &self.candidate,
            w,
            dev,
            bytes,
        );
        row.iter().zip(&self.coef).map(|(a, c)| a * c).sum()
    }
}

/// A candidate left without a model, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedCandidate {
    /// The candidate's name.
    pub name: String,
    /// Fit matrices it was measured on.
    pub matrices: usize,
    /// Why it has no model.
    pub reason: String,
}

pub(super) fn rel_errors(pred: &[f64], t: &[f64]) -> Vec<f64> {
    pred.iter()
        .zip(t)
        .map(|(p, t)| ((p - t) / t).abs())
        .collect()
}

/// Fits `t ~ rows . coef` with coef >= 0 on the relative error. `rows[i]` are the design rows,
/// `t[i] > 0` the measured times.
pub(super) fn fit_relative(rows: &[Vec<f64>], t: &[f64]) -> Result<Vec<f64>, String> {
    let k = rows.first().map_or(0, Vec::len);
    let mut a = DenseMatrix::zeros(rows.len(), k);
    for (i, (r, ti)) in rows.iter().zip(t).enumerate() {
        for (j, v) in r.iter().enumerate() {
            a.set(i, j, v / ti);
        }
    }
    // Column scaling: NNLS is invariant under positive column scaling, and unit columns keep
    // the QR steps well conditioned when terms span ten orders of magnitude.
    let scale: Vec<f64> = (0..k).map(|j| a.col_norm(j)).collect();
    for i in 0..a.rows() {
        for (j, s) in scale.iter().enumerate() {
            if *s > 0.0 {
                a.set(i, j, a.get(i, j) / s);
            }
        }
    }
    let b = vec![1.0; rows.len()];
    let sol = nnls(&a, &b).map_err(|e| e.to_string())?;
    Ok(sol
        .x
        .iter()
        .zip(&scale)
        .map(|(y, s)| if *s > 0.0 { y / s } else { 0.0 })
        .collect())
}

pub(super) fn predict_rows(rows: &[Vec<f64>], coef: &[f64]) -> Vec<f64> {
    rows.iter()
        .map(|r| r.iter().zip(coef).map(|(a, c)| a * c).sum())
        .collect()
}

/// One candidate's data points: (work, measured ms), ordered by nnz then id for the folds.
pub(super) struct Points<'a> {
    pub(super) works: Vec<&'a SpmvWork>,
    pub(super) times: Vec<f64>,
}

/// Cross-validated relative errors of a feature set (`None` if some fold cannot be fitted).
pub(super) fn cross_validate(
    pts: &Points<'_>,
    fs: &FeatureSet,
    cand: &SpmvCandidate,
    dev: &DeviceProps,
    folds: usize,
) -> Option<Vec<f64>> {
    let cols = fs.columns(KernelKind::of(cand));
    let rows: Vec<Vec<f64>> = pts
        .works
        .iter()
        .map(|w| design_row(&cols, fs, cand, w, dev))
        .collect();
    let m = rows.len();
    let k = folds.clamp(2, m.max(2));
    let mut errs = Vec::with_capacity(m);
    for f in 0..k {
        let train: Vec<usize> = (0..m).filter(|i| i % k != f).collect();
        let test: Vec<usize> = (0..m).filter(|i| i % k == f).collect();
        if test.is_empty() {
            continue;
        }
        let tr: Vec<Vec<f64>> = train.iter().map(|&i| rows[i].clone()).collect();
        let tt: Vec<f64> = train.iter().map(|&i| pts.times[i]).collect();
        let coef = fit_relative(&tr, &tt).ok()?;
        for &i in &test {
            let p: f64 = rows[i].iter().zip(&coef).map(|(a, c)| a * c).sum();
            errs.push(((p - pts.times[i]) / pts.times[i]).abs());
        }
    }
    Some(errs)
}

/// Mean of the out-of-fold absolute relative errors and its standard error.
pub(super) fn cv_score(errs: &[f64]) -> (f64, f64) {
    let m = errs.len().max(1) as f64;
    let mean = errs.iter().sum::<f64>() / m;
    let var = errs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (m - 1.0).max(1.0);
    (mean, (var / m).sqrt())
}

pub(super) fn fit_candidate(
    cand: &SpmvCandidate,
    pts: &Points<'_>,
    dev: &DeviceProps,
    opts: &SpmvFitOptions,
) -> Result<CandidateModel, String> {
    let m = pts.times.len();
    let mut chosen = (opts.feature_sets[0].clone(), None::<Vec<f64>>);
    if m >= opts.min_matrices_cv.max(4) {
        let scored: Vec<(usize, (f64, f64), Vec<f64>)> = opts
            .feature_sets
            .iter()
            .enumerate()
            .filter_map(|(i, fs)| {
                cross_validate(pts, fs, cand, dev, opts.folds).map(|e| (i, cv_score(&e), e))
            })
            .filter(|(_, s, _)| s.0.is_finite() && s.1.is_finite())
            .collect();
        // The one-standard-error rule (Breiman, Friedman, Olshen and Stone, "Classification
        // and Regression Trees", section 3.4.3): the simplest set within `se_multiple`
        // standard errors of the best mean error.
        if let Some(best) = scored
            .iter()
            .map(|s| s.1)
            .min_by(|a, b| a.0.total_cmp(&b.0))
        {
            let bound = best.0 + opts.se_multiple.max(0.0) * best.1 + 1e-15;
            if let Some((i, _, e)) = scored.into_iter().find(|s| s.1 .0 <= bound) {
                chosen = (opts.feature_sets[i].clone(), Some(e));
            }
        }
    }
    let (fs, cv) = chosen;
    let columns = fs.columns(KernelKind::of(cand));
    let rows: Vec<Vec<f64>> = pts
        .works
        .iter()
        .map(|w| design_row(&columns, &fs, cand, w, dev))
        .collect();
    if rows.iter().flatten().any(|v| !v.is_finite()) {
        return Err("a work count gives a non-finite term".into());
    }
    let coef = fit_relative(&rows, &pts.times)?;
    if coef.iter().all(|&c| c == 0.0) {
        return Err("the fit gives every coefficient 0".into());
    }
    let errs = rel_errors(&predict_rows(&rows, &coef), &pts.times);
    Ok(CandidateModel {
        candidate: *cand,
        kind: KernelKind::of(cand),
        features: fs,
        columns,
        coef,
        stats: FitStats {
            matrices: m,
            median_rel_err: quantile(&errs, 0.5),
            p90_rel_err: quantile(&errs, 0.9),
            max_rel_err: errs.iter().copied().fold(0.0, f64::max),
            cv_median_rel_err: cv.as_ref().map(|e| quantile(e, 0.5)),
            cv_p90_rel_err: cv.as_ref().map(|e| quantile(e, 0.9)),
        },
    })
}
