//! The SpMV performance model (method section 3.3): one time model per candidate — a format,
//! a kernel and a launch configuration (threads per block, grid policy) — fitted from the
//! profile's benchmark matrices, used to predict the time of every candidate on a new matrix
//! and pick the fastest. After the profile-based model of Guo, Wang and Chen ("A Performance
//! Modeling and Optimization Analysis Tool for Sparse Matrix-Vector Multiplication on GPUs"),
//! with the launch configuration as part of the candidate.
//!
//! # The time model of one candidate
//!
//! `t = sum_j c_j * phi_j(work)`, with every coefficient `c_j >= 0` (a cost per unit of work
//! is never negative), fitted by non-negative least squares ([`crate::nnls`]) on the
//! *relative* error: each matrix's row is divided by its measured time, so a 1 microsecond
//! kernel weighs as much as a 10 millisecond one (`min sum_i ((t_pred_i - t_i) / t_i)^2`).
//! The terms `phi_j` ([`Term`]) are the work counts of [`SpmvWork`]:
//!
//! | term | value | what it stands for |
//! |---|---|---|
//! | `launch` | 1 | launch and tail cost |
//! | `coo_launch` | 1 when HYB has a COO part | HYB's second launch |
//! | `rows` | `n` | row pointers read, `y` written |
//! | `nnz` | `nnz` | values and column indices read |
//! | `x_lines` | [`SpmvWork::x_lines`] | gather traffic on `x` |
//! | `slots` | kernel's issued work, see below | padding and idle lanes |
//! | `coo_nnz` | [`SpmvWork::hyb_coo_nnz`] | HYB's COO part |
//! | `depth` | loop trips of the busiest thread | latency-bound critical path |
//! | `contention` | [`atomic_contention`] (COO atomic only) | atomic adds to one row serialised in a warp |
//!
//! `slots` is the work the kernel issues, padding included: CSR scalar
//! [`SpmvWork::scalar_warp_slots`] (each warp runs as long as its longest row), CSR vector with
//! `L` lanes `vector_steps[L]`, ELL [`SpmvWork::ell_slots`], DIA [`SpmvWork::dia_slots`], HYB
//! [`SpmvWork::hyb_ell_slots`]; the COO kernels and kernels this module does not know have no
//! `slots` term. Which terms each kernel gets is [`KernelKind::terms`].
//!
//! `depth` (critical path) is the number of loop trips of the busiest thread under the
//! candidate's launch geometry (the blocks a grid policy gives on the profiled device): a
//! thread per row runs `row_len_max` trips at least, a grid-stride thread `rounds x mean
//! trips`. It matters where the GPU is not filled (small matrices) or one long row keeps a
//! thread busy long after the others (power-law rows under CSR scalar).
//!
//! # The L2 regime
//!
//! A benchmark repeats the same SpMV, so a matrix whose working set (format arrays, `x`, `y`:
//! [`working_set_bytes`]) fits in the L2 cache is read from L2 and every byte costs less. Two
//! ways to let the cost per byte depend on the working set `B`:
//!
//! - an L2 *split* (`l2_fraction = Some(f)`): every traffic term (`rows`, `nnz`, `x_lines`,
//!   `slots`, `coo_nnz`) becomes an L2-resident part `phi * s` and a memory part
//!   `phi * (1 - s)`, each with its own coefficient, where `s = 1 / (1 + (B / (f L2))^4)` is a
//!   smooth step;
//! - L2 *bins* (`l2_knots`): every traffic term gets one column per knot, weighted by hat
//!   functions over `ln(B / L2)`: the cost per unit is piecewise linear in the log of the
//!   working set, so any transition shape between the knots is followed (the real one
//!   depends on the cache's partitioning and replacement policy, which no formula here knows).
//!
//! # The replayed regime
//!
//! The solver replays its iterations as CUDA graphs. Where a matrix and an iteration's
//! vectors fit in half of L2 ([`autopcg_catalog::replays_spmv_at`]), its products take a few
//! microseconds, and launched alone each measures the host's launch pacing instead (on an
//! H200 every format of 2D Poisson 100^2 times 6.6-8.2 us alone, DIA 1.9 us replayed). The
//! profiler times such matrices both ways; [`SpmvModel::replayed`] is a second set of
//! candidate models fitted on the replayed records only (the feature sets without an L2
//! treatment: every such matrix is in L2), and [`SpmvModel::predict`] reads it for those
//! matrices. Fitting the replayed records into the one regime instead moved the other
//! matrices' fit: on the H200's held-out set the choice came within 5% of the best on 47% of
//! the matrices against 74%.
//!
//! # The under-filled GPU
//!
//! Little's law (Little, "A Proof for the Queuing Formula: L = lambda W"): the bandwidth a
//! kernel reaches is proportional to the loads it keeps in flight until it saturates. A launch that keeps fewer threads busy than the device needs
//! (a small matrix, a kernel with few rows per thread) moves its bytes more slowly:
//! `traffic time = bytes / BW * max(1, A0 / active)`, with `active` the threads with work
//! ([`active_threads`]) and `A0` the threads the device needs in flight. With `A0 = f R` fixed
//! (`R` the resident threads of the device, `f` = [`FeatureSet::fill_fraction`]) this is still
//! linear in the coefficients: the traffic terms are multiplied by `max(1, f R / active)`.
//!
//! # Choosing the feature set
//!
//! [`FeatureSet::defaults`] lists 30 feature sets from the simplest up: every combination of
//! `depth` (off, on), the fill scaling (off, `f` = 0.5, 1) and the L2 treatment (none, a
//! split at 1 or 0.5 times the L2 size, bins with knots at 0.5, 1, 2 or at 0.25, 1, 4 times
//! the L2 size). For every candidate measured on enough matrices, each set is scored by k-fold
//! cross-validation over the fit matrices (the mean out-of-fold absolute relative error), and
//! the simplest set within one standard error of the best is kept (the one-standard-error
//! rule). Feature sets are data (the set chosen is
//! stored with each candidate), so trying another one is a change of [`SpmvFitOptions`].
//!
//! # Measured times
//!
//! A record counts when its status is [`crate::profile::Status::Ok`] and its timing is valid; skipped records
//! (padding refused, configuration not allowed) are "not applicable", failed ones are errors,
//! and neither is ever a time. The median of the repetitions is the time. The records of
//! cuSPARSE's algorithms are the peer, never a candidate. The profiler leaves out a grid
//! policy whose launch equals an earlier policy's (on a small matrix one wave covers every
//! row); such a missing record takes its twin's time ([`measured_times`]).

mod candidate;
mod conversion;
mod features;
mod fit;
mod kind;
mod terms;
#[cfg(test)]
mod tests;
mod times;

use std::collections::HashMap;

use autopcg_catalog::{DeviceProps, Format};
use autopcg_sparse::PaddingLimits;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use candidate::{model_order, order_key, SpmvCandidate};
pub use conversion::{format_slots, ConversionModel, ConversionTerm};
pub use features::FeatureSet;
pub use fit::{CandidateModel, DroppedCandidate, FitStats};
pub use kind::{KernelKind, Residency, Term, TermSpec};
pub use terms::{
    active_threads, atomic_contention, depth, design_row, design_row_at, format_applies, l2_share,
    term_value, working_set_bytes,
};
pub use times::{
    geomean, measured_times, measured_times_replayed, quantile, record_time, MatrixTimes,
};

use crate::profile::{MatrixRecord, MatrixSet, Profile};
use crate::work::SpmvWork;
use crate::ModelError;
use conversion::fit_conversions;
use fit::{fit_candidate, Points};

/// What an operand run by cuSPARSE costs once, beyond its SpMVs, in milliseconds: loading the
/// library, its handle, descriptors and preprocessing, and the first product, which loads the
/// library's kernels. It stands where a conversion's cost stands for the pool's formats
/// ([`SpmvPrediction::conversion_ms`]), so that every choice spreading conversions over the
/// expected iterations spreads it too, and cuSPARSE is chosen only where its faster products
/// repay it. The profile does not measure it; this is the setup difference measured on the
/// H200 host (2026-11-24, `tools/cusparse_step_check.sh`: the model's plan against the same
/// plan with its SpMV steps handed to cuSPARSE's CSR_ALG1, medians of three): +44 ms on a
/// power-law matrix of 3e5 rows and 9e6 entries and +33 ms on 3D Poisson 128^3, both without
/// a preconditioner (A by cuSPARSE), of which 22-25 ms in the conversion part; 38 lies between
/// the two (an earlier run of the same comparison gave +35 and +42 ms).
pub const CUSPARSE_SETUP_MS: f64 = 38.0;

/// A candidate's predicted time on a matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvPrediction {
    /// The candidate.
    pub candidate: SpmvCandidate,
    /// Predicted milliseconds per SpMV.
    pub predicted_ms: f64,
    /// Predicted milliseconds to convert the CSR matrix to the candidate's format (0 for CSR;
    /// [`CUSPARSE_SETUP_MS`] for cuSPARSE; `None` where no conversion model covers the
    /// format).
    pub conversion_ms: Option<f64>,
}

impl SpmvPrediction {
    /// The candidate's name.
    pub fn name(&self) -> String {
        self.candidate.name()
    }
}

/// Options of [`SpmvModel::fit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvFitOptions {
    /// Which matrices to fit on (default: the fit set).
    pub set: MatrixSet,
    /// A candidate measured on fewer matrices gets no model (default 5).
    pub min_matrices: usize,
    /// Folds of the cross-validation that picks the feature set (default 5).
    pub folds: usize,
    /// Cross-validate only candidates measured on at least this many matrices; others get the
    /// first feature set (default 12).
    pub min_matrices_cv: usize,
    /// Feature sets to choose from, simplest first ([`FeatureSet::defaults`]).
    pub feature_sets: Vec<FeatureSet>,
    /// Keep the simplest set whose cross-validated mean relative error is within this many
    /// standard errors of the best set's (default 1: the one-standard-error rule; 0 keeps the
    /// best).
    pub se_multiple: f64,
    /// Padding limits deciding where ELL, DIA and HYB apply.
    pub padding: PaddingLimits,
    /// Feature sets of the replayed regime (the records timed from graph replays), simplest
    /// first (default: [`FeatureSet::without_l2`] with the depth term).
    #[serde(default = "replayed_feature_sets")]
    pub replayed_feature_sets: Vec<FeatureSet>,
}

/// The default [`SpmvFitOptions::replayed_feature_sets`]: the sets without an L2 treatment
/// (every such matrix is in L2) that have the depth term (a launch of a few blocks is
/// latency-bound).
pub fn replayed_feature_sets() -> Vec<FeatureSet> {
    let mut v = FeatureSet::without_l2();
    v.retain(|f| f.depth);
    v
}

impl SpmvFitOptions {
    /// The options `autopcg tune` fits with: the default options restricted to the feature
    /// sets that treat the L2 regime and the launch depth ([`FeatureSet::with_l2`] with the
    /// depth term). With the few dozen matrices of a tune, cross-validation cannot resolve
    /// either and falls back to simpler sets that over-predict the matrices that fit in L2.
    /// This design was chosen among three (all sets, L2 sets, L2 and depth sets) by the
    /// held-out evaluation of an H200 and an H100 (`spmv_eval` example): within 5% of the best
    /// on 63%, 68% and 74% of the H200's evaluation matrices, 63%, 68% and 68% of the H100's.
    pub fn for_tune() -> SpmvFitOptions {
        let mut o = SpmvFitOptions {
            feature_sets: FeatureSet::with_l2(),
            ..SpmvFitOptions::default()
        };
        o.feature_sets.retain(|f| f.depth);
        o
    }
}

impl Default for SpmvFitOptions {
    fn default() -> Self {
        SpmvFitOptions {
            set: MatrixSet::Fit,
            min_matrices: 5,
            folds: 5,
            min_matrices_cv: 12,
            feature_sets: FeatureSet::defaults(),
            se_multiple: 1.0,
            padding: PaddingLimits::default(),
            replayed_feature_sets: replayed_feature_sets(),
        }
    }
}

/// The SpMV performance model of one device: a time model per candidate, a conversion model
/// per format, and the padding limits that decide where the padded formats apply.
///
/// Model files store the device as its name (`device`) and the four limits the terms read
/// (`limits`: SM count, resident threads and blocks per SM, L2 bytes; see [`StoredLimits`]);
/// a model read back holds a [`DeviceProps`] with those, and a [`crate::ModelFile`] gives it the
/// file's whole device record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredSpmvModel", into = "StoredSpmvModel")]
pub struct SpmvModel {
    /// The device profiled: the launch geometry of the grid policies, its resident threads
    /// and its L2 size are terms of the candidates' models.
    pub device: DeviceProps,
    /// Padding limits: ELL, DIA and HYB apply only within them.
    pub padding: PaddingLimits,
    /// One model per candidate, in [`model_order`], fitted on the products launched alone.
    pub candidates: Vec<CandidateModel>,
    /// Whether the products launched alone were timed with L2 cold (the profile's records are
    /// [`crate::profile::SpmvRecord::l2_flushed`]); false for models fitted on repeated calls,
    /// which time a matrix that fits in L2 from there and carry the launch latency. A model is
    /// judged on held-out records of its own protocol.
    pub alone_l2_cold: bool,
    /// One model per candidate of the replayed regime, in [`model_order`]: fitted on the
    /// products timed from graph replays on the matrices whose iteration fits in half of L2
    /// (where launched alone every candidate times the host's launch pacing), and used to
    /// predict such matrices ([`SpmvModel::replays`]). Empty for profiles without such
    /// records: every matrix is then predicted by `candidates`.
    pub replayed: Vec<CandidateModel>,
    /// One conversion model per format measured.
    pub conversions: Vec<ConversionModel>,
    /// Candidates without a model and why.
    pub dropped: Vec<DroppedCandidate>,
    /// Notes on the fit (data left out and why).
    pub notes: Vec<String>,
}

impl SpmvModel {
    /// Fits a model per candidate from the matrices of `opts.set` in `profile`.
    ///
    /// Errors ([`ModelError::Fit`]): no header, no matrix of the set, no usable SpMV record on
    /// them, or no candidate measured on enough matrices; invalid options are
    /// [`ModelError::InvalidParameter`].
    pub fn fit(profile: &Profile, opts: &SpmvFitOptions) -> Result<SpmvModel, ModelError> {
        let fit_err = |reason: String| ModelError::Fit {
            what: "SpMV model".into(),
            reason,
        };
        if opts.feature_sets.is_empty() {
            return Err(ModelError::InvalidParameter(
                "no feature set to fit the SpMV model with".into(),
            ));
        }
        for f in &opts.feature_sets {
            f.check().map_err(ModelError::InvalidParameter)?;
        }
        let device = profile
            .device()
            .ok_or_else(|| fit_err("the profile has no header (empty profile)".into()))?;
        let matrices: HashMap<&str, &MatrixRecord> = profile
            .matrices
            .iter()
            .filter(|m| m.set == opts.set)
            .map(|m| (m.id.as_str(), m))
            .collect();
        if matrices.is_empty() {
            return Err(fit_err(format!(
                "the profile has no {:?}-set matrix",
                opts.set
            )));
        }
        let times = measured_times(profile);
        if times.keys().all(|id| !matrices.contains_key(id.as_str())) {
            return Err(fit_err(format!(
                "no usable SpMV record on the {} {:?}-set matrices",
                matrices.len(),
                opts.set
            )));
        }
        let mut notes = Vec::new();
        let without = matrices
            .keys()
            .filter(|id| !times.contains_key(**id))
            .count();
        if without > 0 {
            notes.push(format!("{without} matrices without any usable SpMV record"));
        }
        let (candidates, dropped) = fit_regime(&times, &matrices, device, opts, &opts.feature_sets);
        if candidates.is_empty() {
            return Err(fit_err(format!(
                "no candidate could be fitted ({} dropped: {})",
                dropped.len(),
                dropped
                    .iter()
                    .take(3)
                    .map(|d| format!("{}: {}", d.name, d.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        let replayed_times = measured_times_replayed(profile);
        let (replayed, replayed_dropped) = fit_regime(
            &replayed_times,
            &matrices,
            device,
            opts,
            &opts.replayed_feature_sets,
        );
        let replayed_matrices = replayed_times
            .keys()
            .filter(|id| matrices.contains_key(id.as_str()))
            .count();
        if replayed_matrices > 0 {
            notes.push(format!(
                "replayed regime: {} candidates fitted on {replayed_matrices} matrices timed \
                 from graph replays, {} dropped",
                replayed.len(),
                replayed_dropped.len()
            ));
        }
        let conversions = fit_conversions(profile, &matrices, opts, &mut notes);
        let alone_l2_cold = profile.spmv_l2_flushed();
        if alone_l2_cold {
            notes.push(
                "products launched alone timed with L2 cold (a read pass over twice the L2 \
                 ahead of every sample)"
                    .to_string(),
            );
        }
        if profile.superseded_spmv > 0 {
            notes.push(format!(
                "{} records of repeated calls set aside: the profile holds L2-cold ones",
                profile.superseded_spmv
            ));
        }
        Ok(SpmvModel {
            device: device.clone(),
            padding: opts.padding,
            candidates,
            alone_l2_cold,
            replayed,
            conversions,
            dropped,
            notes,
        })
    }

    /// Checks the model's internal consistency (column and coefficient counts agree, every
    /// coefficient finite and non-negative); a model read from a file should pass this before
    /// use.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |reason: String| ModelError::Invalid {
            path: "<memory>".into(),
            reason,
        };
        for c in self.candidates.iter().chain(&self.replayed) {
            if c.columns.len() != c.coef.len() {
                return Err(bad(format!(
                    "{}: {} columns, {} coefficients",
                    c.candidate.name(),
                    c.columns.len(),
                    c.coef.len()
                )));
            }
            if c.coef.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(bad(format!(
                    "{}: a coefficient is negative or not finite",
                    c.candidate.name()
                )));
            }
        }
        for c in &self.conversions {
            if c.terms.len() != c.coef.len() || c.coef.iter().any(|v| !(v.is_finite() && *v >= 0.0))
            {
                return Err(bad(format!("conversion model of {}", c.format)));
            }
        }
        Ok(())
    }

    /// True when `format` can hold the matrix of `w` within the padding limits (ELL, DIA and
    /// the ELL part of HYB, with the byte counts of the sparse crate's conversions; every other
    /// format always applies).
    pub fn applies(&self, format: Format, w: &SpmvWork) -> bool {
        format_applies(format, w, &self.padding)
    }

    /// Whether the matrix of `w` is predicted by the replayed regime: the model has one and
    /// the matrix with an iteration's vectors fits in half of L2
    /// ([`autopcg_catalog::replays_spmv_at`]), so that the solver's graph-replayed
    /// iterations run its product as the replayed records timed it.
    pub fn replays(&self, w: &SpmvWork) -> bool {
        !self.replayed.is_empty()
            && autopcg_catalog::replays_spmv_at(
                self.device.l2_bytes,
                w.n,
                autopcg_catalog::square_csr_bytes(w.n, w.nnz),
            )
    }

    /// The candidate models that predict the matrix of `w`: the replayed regime's where
    /// [`SpmvModel::replays`], else those of the products launched alone.
    pub fn regime(&self, w: &SpmvWork) -> &[CandidateModel] {
        match self.replays(w) {
            true => &self.replayed,
            false => &self.candidates,
        }
    }

    /// Predicted time of every candidate that applies to the matrix of `w`, fastest first
    /// (ties in [`model_order`]). Candidates whose prediction is not a positive finite time are left
    /// out.
    pub fn predict(&self, w: &SpmvWork) -> Vec<SpmvPrediction> {
        let mut out: Vec<SpmvPrediction> = self
            .regime(w)
            .iter()
            .filter(|c| self.applies(c.candidate.format, w))
            .filter_map(|c| {
                let t = c.predict(w, &self.device);
                (t.is_finite() && t > 0.0).then(|| SpmvPrediction {
                    candidate: c.candidate,
                    predicted_ms: t,
                    conversion_ms: if c.candidate.is_cusparse() {
                        Some(CUSPARSE_SETUP_MS)
                    } else {
                        self.predict_conversion(c.candidate.format, w)
                    },
                })
            })
            .collect();
        out.sort_by(|a, b| {
            a.predicted_ms
                .total_cmp(&b.predicted_ms)
                .then_with(|| model_order(&a.candidate, &b.candidate))
        });
        out
    }

    /// The fit as a text table: one line per candidate (feature set, matrices, in-sample and
    /// cross-validated median and 90th-percentile relative errors), then the conversion
    /// models, the dropped candidates and the notes.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let pct = |v: f64| format!("{:.1}%", 100.0 * v);
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), pct);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "SpMV model of {} ({} candidates, L2 {} KiB)",
            self.device.name,
            self.candidates.len(),
            self.device.l2_bytes >> 10
        );
        let _ = writeln!(
            s,
            "{:<44} {:<11} {:>4} {:>7} {:>7} {:>7} {:>7}",
            "candidate", "features", "mats", "med", "p90", "cv med", "cv p90"
        );
        for c in &self.candidates {
            let st = &c.stats;
            let _ = writeln!(
                s,
                "{:<44} {:<11} {:>4} {:>7} {:>7} {:>7} {:>7}",
                c.candidate.name(),
                c.features.name,
                st.matrices,
                pct(st.median_rel_err),
                pct(st.p90_rel_err),
                opt(st.cv_median_rel_err),
                opt(st.cv_p90_rel_err)
            );
        }
        for c in &self.replayed {
            let st = &c.stats;
            let _ = writeln!(
                s,
                "{:<44} {:<11} {:>4} {:>7} {:>7} {:>7} {:>7}",
                format!("{} (replayed)", c.candidate.name()),
                c.features.name,
                st.matrices,
                pct(st.median_rel_err),
                pct(st.p90_rel_err),
                opt(st.cv_median_rel_err),
                opt(st.cv_p90_rel_err)
            );
        }
        for c in &self.conversions {
            let _ = writeln!(
                s,
                "conversion to {:<6} {:>4} matrices, median {} p90 {}",
                c.format,
                c.stats.matrices,
                pct(c.stats.median_rel_err),
                pct(c.stats.p90_rel_err)
            );
        }
        for d in &self.dropped {
            let _ = writeln!(s, "dropped {}: {}", d.name, d.reason);
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }

    /// The model of the candidate named `name`.
    pub fn candidate(&self, name: &str) -> Option<&CandidateModel> {
        self.candidates.iter().find(|c| c.candidate.name() == name)
    }

    /// Predicted milliseconds to convert the CSR matrix of `w` into `format`: 0 for `csr` (the
    /// input format), `None` for a format without a conversion model.
    pub fn predict_conversion(&self, format: Format, w: &SpmvWork) -> Option<f64> {
        if format == Format::Csr {
            return Some(0.0);
        }
        self.conversions
            .iter()
            .find(|c| c.format == format)
            .map(|c| c.predict(w).max(0.0))
    }

    /// The candidate to use on the matrix of `w`: the fastest predicted SpMV, or, when
    /// `expected_iterations` is given (finite, `>= 0`), the smallest
    /// `conversion + iterations x SpMV` — conversion spread over the SpMVs that use it. With
    /// iterations given, a non-CSR format without a conversion model cannot be priced and is
    /// left out. A NaN or negative iteration count counts as not given. `None` when no
    /// candidate applies.
    pub fn select(&self, w: &SpmvWork, expected_iterations: Option<f64>) -> Option<SpmvPrediction> {
        let preds = self.predict(w);
        match expected_iterations.filter(|i| i.is_finite() && *i >= 0.0) {
            None => preds.into_iter().next(),
            Some(it) => preds
                .into_iter()
                .filter_map(|p| p.conversion_ms.map(|c| (c + it * p.predicted_ms, p)))
                .min_by(|a, b| {
                    a.0.total_cmp(&b.0)
                        .then_with(|| model_order(&a.1.candidate, &b.1.candidate))
                })
                .map(|(_, p)| p),
        }
    }
}

/// Fits the candidates measured on enough matrices of `matrices` in `times`, each with the
/// feature set chosen among `sets` (one regime of [`SpmvModel`]); those that cannot be fitted
/// are returned as dropped.
fn fit_regime(
    times: &std::collections::BTreeMap<String, MatrixTimes>,
    matrices: &HashMap<&str, &MatrixRecord>,
    device: &DeviceProps,
    opts: &SpmvFitOptions,
    sets: &[FeatureSet],
) -> (Vec<CandidateModel>, Vec<DroppedCandidate>) {
    let opts = SpmvFitOptions {
        feature_sets: sets.to_vec(),
        ..opts.clone()
    };
    // candidate -> (nnz, id, work, time)
    let mut per: HashMap<SpmvCandidate, Vec<(u64, &str, &SpmvWork, f64)>> = HashMap::new();
    for (id, mt) in times {
        let Some(m) = matrices.get(id.as_str()) else {
            continue;
        };
        // cuSPARSE's algorithms are candidates like the pool's: a plan runs whichever is
        // predicted fastest.
        for (c, t) in mt.runnable() {
            per.entry(c)
                .or_default()
                .push((m.work.nnz, m.id.as_str(), &m.work, t));
        }
    }
    // Candidates are independent: fit them in parallel, keep the model order.
    let mut per: Vec<_> = per.into_iter().collect();
    per.sort_by(|a, b| model_order(&a.0, &b.0));
    let results: Vec<Result<CandidateModel, DroppedCandidate>> = per
        .into_par_iter()
        .map(|(cand, mut pts)| {
            pts.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
            let count = pts.len();
            if count < opts.min_matrices.max(1) {
                return Err(DroppedCandidate {
                    name: cand.name(),
                    matrices: count,
                    reason: format!(
                        "measured on {count} matrices, fewer than {}",
                        opts.min_matrices
                    ),
                });
            }
            let points = Points {
                works: pts.iter().map(|p| p.2).collect(),
                times: pts.iter().map(|p| p.3).collect(),
            };
            fit_candidate(&cand, &points, device, &opts).map_err(|reason| DroppedCandidate {
                name: cand.name(),
                matrices: count,
                reason,
            })
        })
        .collect();
    let mut candidates = Vec::new();
    let mut dropped = Vec::new();
    for r in results {
        match r {
            Ok(m) => candidates.push(m),
            Err(d) => dropped.push(d),
        }
    }
    (candidates, dropped)
}

/// The device limits an [`SpmvModel`] stores: the launch geometry of the grid policies
/// ([`autopcg_catalog::GridPolicy::blocks`]) and the L2 size, the only properties its terms
/// read. Model files have stored them under `limits` since the first schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredLimits {
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u64,
}

impl StoredLimits {
    /// The limits of a device.
    pub fn of(d: &DeviceProps) -> Self {
        StoredLimits {
            sm_count: d.sm_count,
            max_threads_per_sm: d.max_threads_per_sm,
            max_blocks_per_sm: d.max_blocks_per_sm,
            l2_bytes: u64::from(d.l2_bytes),
        }
    }

    /// A device called `name` with these limits, every other property unknown (0 or `None`).
    pub fn device(&self, name: String) -> DeviceProps {
        DeviceProps {
            name,
            compute_capability: (0, 0),
            sm_count: self.sm_count,
            max_threads_per_block: 0,
            max_threads_per_sm: self.max_threads_per_sm,
            max_blocks_per_sm: self.max_blocks_per_sm,
            regs_per_sm: 0,
            regs_per_block: 0,
            smem_per_sm: 0,
            smem_per_block: 0,
            smem_per_block_optin: 0,
            total_mem: 0,
            l2_bytes: u32::try_from(self.l2_bytes).unwrap_or(u32::MAX),
            warp_size: 0,
            max_grid_x: 0,
            mem_clock_khz: None,
            mem_bus_width_bits: None,
            driver_version: None,
            nvrtc_version: None,
        }
    }
}

/// An [`SpmvModel`] as files store it.
#[derive(Serialize, Deserialize)]
struct StoredSpmvModel {
    device: String,
    limits: StoredLimits,
    padding: PaddingLimits,
    candidates: Vec<CandidateModel>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    alone_l2_cold: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    replayed: Vec<CandidateModel>,
    conversions: Vec<ConversionModel>,
    dropped: Vec<DroppedCandidate>,
    notes: Vec<String>,
}

impl From<StoredSpmvModel> for SpmvModel {
    fn from(s: StoredSpmvModel) -> Self {
        SpmvModel {
            device: s.limits.device(s.device),
            padding: s.padding,
            candidates: s.candidates,
            alone_l2_cold: s.alone_l2_cold,
            replayed: s.replayed,
            conversions: s.conversions,
            dropped: s.dropped,
            notes: s.notes,
        }
    }
}

impl From<SpmvModel> for StoredSpmvModel {
    fn from(m: SpmvModel) -> Self {
        StoredSpmvModel {
            limits: StoredLimits::of(&m.device),
            device: m.device.name,
            padding: m.padding,
            candidates: m.candidates,
            alone_l2_cold: m.alone_l2_cold,
            replayed: m.replayed,
            conversions: m.conversions,
            dropped: m.dropped,
            notes: m.notes,
        }
    }
}
