//! SSOR-AI's application form (method.md 2 and 3.4): factored (SpMV with K, then SpMV with
//! K^T with the diagonal scaling folded into its columns) or explicit (one SpMV with
//! M = K^T D^-1 K), chosen once the explicit product is known not to be far larger than A: by
//! the model's form tree where the model has one (fitted on tune's timings of both forms'
//! iterations, [`autopcg_model::form`]), else by the SpMV model's predicted time per
//! application.
#[cfg(feature = "model")]
use autopcg_catalog::DeviceProps;
#[cfg(feature = "model")]
use autopcg_model::file::ModelFile;
#[cfg(feature = "model")]
use autopcg_model::form::{FormFeature, FormFeatures, FormPick};
#[cfg(feature = "model")]
use autopcg_solver::gpu::SpmvChoice;
use autopcg_solver::SsorForm;
use autopcg_sparse::CsrMatrix;

#[cfg(feature = "model")]
use crate::explain::{StepExplain, StepOption};
#[cfg(feature = "model")]
use crate::select::{select_spmv_counted, SpmvCounts};
#[cfg(feature = "model")]
use crate::SelectError;
#[cfg(feature = "model")]
use autopcg_model::work::{spmv_work_counted, WorkTally};
#[cfg(feature = "model")]
use autopcg_solver::Preconditioner;
#[cfg(feature = "model")]
use autopcg_sparse::features::{FeatureCounter, KnownSymmetry, RowTally};

/// The explicit form is not considered when the bound on its nonzeros exceeds this many times
/// nnz(A) (and [`EXPLICIT_BOUND_MIN`]): past a few times nnz(A) it reads more than the
/// factored form, and forming it could take longer than the solve.
pub const EXPLICIT_BOUND_FACTOR: f64 = 8.0;

/// Below this many entries the explicit form is always considered (small matrices, where one
/// launch instead of three matters most).
pub const EXPLICIT_BOUND_MIN: f64 = 4e6;

/// An upper bound on nnz(K^T D K) from the pattern of K: every row of K adds the outer product
/// of its pattern, so the product has at most the sum over rows of (row length)^2 entries.
pub fn explicit_nnz_bound(k: &CsrMatrix) -> f64 {
    k.indptr()
        .windows(2)
        .map(|w| f64::from(w[1] - w[0]).powi(2))
        .sum()
}

/// True when the explicit product may be worth forming for a matrix with `nnz_a` entries:
/// its bound is within [`EXPLICIT_BOUND_FACTOR`] times nnz(A), or below
/// [`EXPLICIT_BOUND_MIN`].
pub fn explicit_within_bound(bound: f64, nnz_a: usize) -> bool {
    !(bound > EXPLICIT_BOUND_FACTOR * nnz_a as f64 && bound > EXPLICIT_BOUND_MIN)
}

/// What [`choose_ssor_form`] found: the form, why, and the SpMV choices of K, K^T and M it
/// compared (the plan reuses them instead of choosing them again).
#[cfg(feature = "model")]
#[derive(Debug, Clone)]
pub struct SsorFormChoice {
    /// The form chosen: the form model's pick, or without one the form with the least
    /// predicted time per application.
    pub form: SsorForm,
    /// The comparison.
    pub explain: StepExplain,
    /// SpMV with K.
    pub k: (SpmvChoice, StepExplain),
    /// SpMV with K^T.
    pub kt: (SpmvChoice, StepExplain),
    /// SpMV with M.
    pub m: (SpmvChoice, StepExplain),
}

/// The form with the smaller predicted time per application; a tie keeps the factored form
/// (fewer nonzeros, nothing to form).
pub fn faster_form(factored_ms: f64, explicit_ms: f64) -> SsorForm {
    if explicit_ms < factored_ms {
        SsorForm::Explicit
    } else {
        SsorForm::Factored
    }
}

/// The counts the SpMV choice reads of the explicit product `M = K^T diag(s) K` of a factored
/// SSOR-AI preconditioner, found by one parallel symbolic pass over K and K^T that counts each
/// row of M and drops it: M's columns and values are never stored. `None` for any other
/// preconditioner.
///
/// They are the counts of the product itself whenever K's values are finite
/// ([`Preconditioner::values_finite`]): the product then stores exactly the entries of its
/// symbolic pattern, is exactly symmetric, and has a positive diagonal (each `M_ii` holds the
/// term `s_i > 0` and the others are squares times positive scales), so the features are
/// counted with symmetry stated and every stored value taken as positive.
#[cfg(feature = "model")]
pub fn explicit_counts(pre: &Preconditioner) -> Option<SpmvCounts> {
    let n = pre.dim()?;
    let counter = FeatureCounter::new(n, n);
    let (rows, work) = pre.fold_explicit_rows(
        <(RowTally, WorkTally)>::default,
        |(rows, work), i, cols| {
            counter.add_row(rows, i, cols);
            work.add_row(i, cols);
        },
        |(r1, w1), (r2, w2)| (r1.merge(r2), w1.merge(w2)),
    )?;
    let (features, hist) = counter.finish(rows, true);
    Some(SpmvCounts {
        work: spmv_work_counted(&features, &hist, &work),
        features,
    })
}

/// The SSOR-AI order whose iterations tune's form stage times, the only one the form tree
/// decides for.
pub const FORM_MODEL_ORDER: u8 = 1;

/// Picks SSOR-AI's application form: by the model's form tree ([`ModelFile::ssor_form`]) on
/// the factored iteration's bytes over L2 and the explicit product's fill, where the model has
/// one and SSOR-AI is of the `order` the tree was fitted on ([`FORM_MODEL_ORDER`]: tune's form
/// stage times first-order SSOR-AI only); else by predicted time per application, SpMV(K) +
/// SpMV(K^T) for the factored form (its diagonal scaling is folded into the stored K^T, so the
/// two products are all it runs) against SpMV(M) for the explicit one. M is known by its
/// counts ([`explicit_counts`], or [`SpmvCounts::of`] the formed product). Either way the three products' SpMV choices are
/// made, and the predicted times of both forms shown.
#[cfg(feature = "model")]
pub fn choose_ssor_form(
    model: &ModelFile,
    k: &CsrMatrix,
    kt: &CsrMatrix,
    m: &SpmvCounts,
    props: &DeviceProps,
    expected_iterations: f64,
    order: u8,
) -> Result<SsorFormChoice, SelectError> {
    // K and K^T are triangular by construction.
    let tri = KnownSymmetry::Triangular;
    let k = SpmvCounts::of_knowing(k, tri);
    let kt = SpmvCounts::of_knowing(kt, tri);
    choose_ssor_form_counted(model, &k, &kt, m, props, expected_iterations, order)
}

/// [`choose_ssor_form`] of factors known by their counts only (those
/// [`crate::factors::K1Factors`] reads through `A`'s pattern, or of the formed factors).
#[cfg(feature = "model")]
pub fn choose_ssor_form_counted(
    model: &ModelFile,
    k: &SpmvCounts,
    kt: &SpmvCounts,
    m: &SpmvCounts,
    props: &DeviceProps,
    expected_iterations: f64,
    order: u8,
) -> Result<SsorFormChoice, SelectError> {
    let nnz_factors = k.work.nnz + kt.work.nnz;
    let features = FormFeatures::of(
        k.work.n,
        // K and K^T share A's diagonal.
        nnz_factors.saturating_sub(k.work.n),
        nnz_factors,
        m.work.nnz,
        u64::from(props.l2_bytes),
    );
    let k = select_spmv_counted(model, "spmv K", k, props, expected_iterations)?;
    let kt = select_spmv_counted(model, "spmv K^T", kt, props, expected_iterations)?;
    let m = select_spmv_counted(model, "spmv M", m, props, expected_iterations)?;
    let fact =
        k.0.predicted_ms.unwrap_or(f64::INFINITY) + kt.0.predicted_ms.unwrap_or(f64::INFINITY);
    let expl = m.0.predicted_ms.unwrap_or(f64::INFINITY);
    let (form, why) = match model
        .ssor_form
        .as_ref()
        .filter(|_| order == FORM_MODEL_ORDER)
    {
        Some(fm) => (
            match fm.pick(&features) {
                FormPick::Factored => SsorForm::Factored,
                FormPick::Explicit => SsorForm::Explicit,
            },
            format!(
                "the form model (both forms' iterations timed by tune on {} matrices, the \
                 faster picked on {} of them): {} {:.3}, {} {:.3} under {}; the predicted SpMV \
                 times, beside, are not what it reads",
                fm.fit.matrices,
                fm.fit.right,
                FormFeature::IterationL2.name(),
                features.iteration_l2,
                FormFeature::Fill.name(),
                features.fill,
                fm.tree.describe()
            ),
        ),
        None if model.ssor_form.is_some() => (
            faster_form(fact, expl),
            format!(
                "least predicted SpMV time per application (the form model was fitted on \
                 order-{FORM_MODEL_ORDER} SSOR-AI's iterations, not order {order}'s)"
            ),
        ),
        None => (
            faster_form(fact, expl),
            "least predicted SpMV time per application".into(),
        ),
    };
    let mut options = vec![
        StepOption::timed("factored: SpMV K + SpMV K^T", fact),
        StepOption::timed("explicit: SpMV M", expl),
    ];
    // The chosen form first.
    options.sort_by(|a, b| a.score_ms.total_cmp(&b.score_ms));
    let chosen = match form {
        SsorForm::Factored => "factored",
        SsorForm::Explicit => "explicit",
    };
    options.sort_by_key(|o| !o.name.starts_with(chosen));
    Ok(SsorFormChoice {
        form,
        explain: StepExplain {
            step: "ssor-ai form".into(),
            options,
            why,
            classifier: None,
        },
        k,
        kt,
        m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_wins_where_it_is_faster() {
        assert_eq!(faster_form(0.02, 0.01), SsorForm::Explicit);
        assert_eq!(faster_form(0.01, 0.02), SsorForm::Factored);
        assert_eq!(faster_form(0.01, 0.01), SsorForm::Factored);
        assert_eq!(faster_form(0.01, f64::INFINITY), SsorForm::Factored);
    }

    #[test]
    fn the_bound_keeps_small_products_and_refuses_huge_ones() {
        // Below the floor: always considered.
        assert!(explicit_within_bound(3.9e6, 1000));
        // Above the floor, within 8 nnz(A): considered; beyond: refused.
        assert!(explicit_within_bound(8e7, 10_000_000));
        assert!(!explicit_within_bound(8.1e7, 10_000_000));
        let k = autopcg_sparse::CsrMatrix::identity(10).unwrap();
        assert_eq!(explicit_nnz_bound(&k), 10.0);
    }
}
