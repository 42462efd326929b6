//! autopcg-generator: ALL selection. One entry point, [`plan`], turns a matrix, a
//! preconditioner, an optional fitted model and a target (the CPU, or a GPU's properties) into
//! a [`SolvePlan`]: the preconditioner in its chosen form, what every step of an iteration
//! runs (format, kernel and launch, with predicted times where a model chose), the polling
//! cadence, and why. The solver only executes plans; the facade never decides again.
//!
//! - [`blocks`]: per-block plans for a matrix split into row blocks, the partition balanced by
//!   predicted time, and the GPU count that minimises the predicted time per iteration.
//! - [`fallback`]: the documented fixed rule used without a model (and for the element-wise
//!   preconditioner kernels, which no model covers).
//! - [`select`]: model-driven choices per step (SpMV by least amortised predicted time, the
//!   update and the reduction from their Alg. 3-1 trees), and the one amortisation formula
//!   ([`select::amortised_ms`]).
//! - [`ssor`]: SSOR-AI's application form (factored or explicit), judged on the explicit
//!   product's counted structure without forming it, and the bound on the product's size that
//!   is checked before it is counted.
//! - [`explain`]: how each step was chosen, with its runners-up.
//! - `saved` (feature `model`): a GPU plan as a schema-versioned file (`saved::SavedPlan`,
//!   with the matrix `saved::Fingerprint`), and back to a [`SolvePlan`] without choosing again.
//! - `emit` (feature `emit`): a standalone CUDA solver from a saved plan (the chosen kernels of
//!   `kernels/`, a host driver, a C API, CMake), from templates filled with the plan. It needs
//!   no GPU: the kernels are cut from the GPU crate's embedded sources.
//!
//! The model-driven parts ([`select`], the SSOR-AI form by predicted time, [`ModelRef`]) need
//! the `model` feature (on by default; it brings the model crate and its classifier's
//! dependencies). Without it every GPU plan is the fallback rule's, and CPU plans are the same.
//! Saved plans need it too: a plan's matrix fingerprint records the SpMV work counts the model
//! reads.
#![warn(missing_docs)]

use std::time::Instant;

#[cfg(feature = "model")]
use autopcg_catalog::DeviceProps;
#[cfg(feature = "model")]
use autopcg_model::file::ModelFile;
use autopcg_solver::gpu::{GpuPlanChoice, PrecondChoice, SpmvChoice};
#[cfg(feature = "model")]
use autopcg_solver::precond::DEVICE_EXPLICIT_KT_MAX;
use autopcg_solver::{PcgError, Plan, PlannedPrecond, PrecondKind, Preconditioner, SsorForm};
pub use autopcg_sparse::features::KnownSymmetry;
use autopcg_sparse::CsrMatrix;

pub mod blocks;
#[cfg(feature = "emit")]
pub mod emit;
pub mod explain;
pub mod factors;
pub mod fallback;
#[cfg(feature = "model")]
pub mod saved;
#[cfg(feature = "model")]
pub mod select;
pub mod ssor;

pub use explain::{StepExplain, StepOption, RUNNERS_UP};
#[cfg(feature = "model")]
pub use select::{
    apart_charge_ms, select_dot3, select_fused_dots, select_spmv, select_spmv_counted,
    select_spmv_knowing, select_spmv_with_dots, select_update, DotsBeside, SpmvCounts,
};
#[cfg(feature = "model")]
pub use ssor::{choose_ssor_form, choose_ssor_form_counted, explicit_counts, SsorFormChoice};

/// Iterations a conversion is amortised over when a solve does not say how many it expects.
/// A guess of the order of the iteration counts of the benchmark families with SSOR-AI at a
/// 1e-8 tolerance; a solve that expects far fewer should pass its own.
pub const EXPECTED_ITERATIONS: f64 = 500.0;

/// Iterations between two polls of a GPU (each poll synchronises with the device), unless the
/// caller asks for another interval.
pub const GPU_CHECK_EVERY: usize = 16;

/// Iterations between two polls on the CPU (polling costs nothing there).
pub const CPU_CHECK_EVERY: usize = 1;

/// Why a model gave no plan for a step (the entry point then falls back to the fixed rule and
/// says so in a note).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// The model has no prediction for a step.
    #[error("the model has no choice for {step}: {reason}")]
    NoChoice {
        /// The step.
        step: String,
        /// Why.
        reason: String,
    },
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The preconditioner cannot be built for this matrix (a non-positive diagonal, a bad
    /// relaxation factor...), or the plan does not fit the device.
    #[error(transparent)]
    Solver(#[from] PcgError),
}

/// The properties of the GPU a model file was fitted on, as a plan's target: the device
/// record of the file, with the limits it does not record filled in
/// ([`DeviceProps::with_defaults`]). A plan made for this target needs no GPU (it is a function
/// of the model and the matrix).
#[cfg(feature = "model")]
pub fn model_device_props(model: &ModelFile) -> DeviceProps {
    model.device.clone().with_defaults()
}

/// Where a solve runs, as far as selection is concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// The CPU with this many threads.
    Cpu {
        /// Worker threads.
        threads: usize,
    },
    /// A GPU with these properties.
    Gpu(autopcg_catalog::DeviceProps),
}

/// A fitted model and how to name it in reports (usually its file path).
#[cfg(feature = "model")]
#[derive(Debug, Clone, Copy)]
pub struct ModelRef<'a> {
    /// The model.
    pub file: &'a ModelFile,
    /// Its name in plans and notes.
    pub label: &'a str,
}

/// Everything [`plan`] decides from.
#[derive(Debug, Clone)]
pub struct PlanRequest<'a> {
    /// The matrix A.
    pub matrix: &'a CsrMatrix,
    /// The preconditioner asked for (its `form` is the SSOR-AI form unless `ssor_form_auto`).
    pub precond: PrecondKind,
    /// Let the model choose SSOR-AI's form by predicted time (with a model on a GPU only).
    pub ssor_form_auto: bool,
    /// The fitted model of the target GPU, if one is to choose.
    #[cfg(feature = "model")]
    pub model: Option<ModelRef<'a>>,
    /// Where the solve runs.
    pub target: Target,
    /// Iterations a format conversion is amortised over.
    pub expected_iterations: f64,
    /// The caller's polling interval; `None` for the target's default ([`GPU_CHECK_EVERY`],
    /// [`CPU_CHECK_EVERY`]).
    pub check_every: Option<usize>,
    /// What the caller knows of the matrix's symmetry: [`KnownSymmetry::Symmetric`] after its
    /// own check to the features' tolerance, so that the SpMV choice does not search again
    /// (the same plan, one pass over the matrix less). [`KnownSymmetry::Unknown`] by default.
    pub symmetry: KnownSymmetry,
    /// Where the structure of SSOR-AI's explicit product is counted when the model compares
    /// the forms, if not on the host: the GPU the solve will run on (the same counts, a test
    /// pins them; a count it cannot make, or one that fails, falls back to the host's pass,
    /// the failure noted).
    #[cfg(feature = "model")]
    pub gram_counter: Option<factors::GramCounter<'a>>,
    /// Where the structure of `A` and of first-order factored SSOR-AI's factors is counted for
    /// the model, if not by the host's pass over the factors' views: the GPU the solve will
    /// run on, from the arrays already uploaded there (the same counts, a test pins them; a
    /// count it does not make, or one that fails, falls back to the host's pass, the failure
    /// noted).
    #[cfg(feature = "model")]
    pub factor_counter: Option<factors::FactorCounter<'a>>,
    /// Where the structure of `A` is counted for the model when no count of the factors
    /// counts it too (no preconditioner, Jacobi, a form built on the host), if not by the
    /// host's pass over `A`: the GPU the solve will run on (the same counts, a test pins them;
    /// a count it does not make, or one that fails, falls back to the host's pass, the
    /// failure noted).
    #[cfg(feature = "model")]
    pub a_counter: Option<factors::ACounter<'a>>,
    /// Where the structure of second-order factored SSOR-AI's factors is counted for a GPU
    /// plan, so that the backend builds them where the solve runs: the GPU, from the arrays
    /// uploaded there (the same counts, a test pins them). With it (and
    /// [`PlanRequest::factor_counter`], which counts `A` and reads `X`'s values), the factors
    /// are left to the backend ([`PlannedPrecond::SsorK2FromA`]) unless a model may choose the
    /// explicit form (its product within [`ssor::explicit_within_bound`]), which the host
    /// then counts from the factors it builds. Without it, or where a count fails (noted),
    /// the host builds them.
    #[cfg(feature = "model")]
    pub k2_counter: Option<factors::K2Counter<'a>>,
    /// True when the caller has the diagonal checked where the solve runs (the prepared
    /// solver's upload ahead checks it on the GPU, and the backend reports a bad entry as the
    /// host's check would): a preconditioner the backend builds from `A` (Jacobi) then needs no
    /// host pass over the diagonal here. False by default: the plan reports a bad diagonal.
    pub diagonal_checked: bool,
    /// Where first-order factored SSOR-AI's checks of `A` (its diagonal, the counts of its
    /// factors' views, the automatic relaxation's coupling) are read for a GPU plan, if not by
    /// host passes over `A`: the GPU the solve will run on, from the arrays uploaded there
    /// (the same values, a test pins them; a check it does not make, or one that fails, falls
    /// back to the host's passes, the failure noted).
    pub k1_checker: Option<factors::K1Checker<'a>>,
}

impl<'a> PlanRequest<'a> {
    /// A request with no model, the preconditioner's own form, [`EXPECTED_ITERATIONS`] and the
    /// target's polling interval.
    pub fn new(matrix: &'a CsrMatrix, precond: PrecondKind, target: Target) -> Self {
        PlanRequest {
            matrix,
            precond,
            ssor_form_auto: false,
            #[cfg(feature = "model")]
            model: None,
            target,
            expected_iterations: EXPECTED_ITERATIONS,
            check_every: None,
            symmetry: KnownSymmetry::Unknown,
            #[cfg(feature = "model")]
            gram_counter: None,
            #[cfg(feature = "model")]
            factor_counter: None,
            #[cfg(feature = "model")]
            a_counter: None,
            #[cfg(feature = "model")]
            k2_counter: None,
            diagonal_checked: false,
            k1_checker: None,
        }
    }
}

/// A plan: what to build and what each step runs.
#[derive(Debug, Clone)]
pub struct SolvePlan {
    /// The preconditioner in the chosen form: built on the host, or (first-order factored
    /// SSOR-AI on a GPU) left to the backend, which builds it on the device from `A`
    /// ([`PlannedPrecond::SsorK1FromA`]; [`PlannedPrecond::host`] builds the host copy where one
    /// is needed).
    pub preconditioner: PlannedPrecond,
    /// The preconditioner as applied: its omega resolved for the matrix and its SSOR-AI form
    /// the one chosen. Building it again for new values of the same pattern gives the same
    /// plan's preconditioner.
    pub kind: PrecondKind,
    /// What the GPU runs (`None` on the CPU).
    pub gpu: Option<GpuPlanChoice>,
    /// Poll the backend every this many iterations.
    pub check_every: usize,
    /// Every step of one iteration, for reports.
    pub steps: Plan,
    /// The model that chose (its label), when one did.
    pub model: Option<String>,
    /// How a model chose each step (empty without a model).
    pub explain: Vec<StepExplain>,
    /// Predicted milliseconds per iteration, when a model chose the plan.
    pub predicted_iteration_ms: Option<f64>,
    /// One-line notes (fallbacks taken and why).
    pub notes: Vec<String>,
    /// Milliseconds spent building the preconditioner on the host (with the count of the
    /// explicit product's structure when a model compared the forms, and the product itself
    /// when the explicit form was chosen); for one the backend builds, resolving omega and
    /// finding the diagonal's positions.
    pub precond_ms: f64,
    /// Milliseconds spent choosing.
    pub select_ms: f64,
}

impl SolvePlan {
    /// The preconditioner as applied ([`Preconditioner::kind_name`]).
    pub fn precond_applied(&self) -> &str {
        self.preconditioner.kind_name()
    }
}

/// The one selection entry point: builds the preconditioner, settles SSOR-AI's form, and
/// chooses every step for the target — from the model where it has an answer, else by the
/// fallback rule with a note — and the polling cadence. The GPU plan is checked against the
/// device before it is returned.
///
/// For a GPU, first-order SSOR-AI in the factored form is not built here: its factors are read
/// through `A`'s pattern ([`factors::K1Factors`]) for the choices, and the backend builds them
/// on the device from the `A` it uploads. The host builds them only where that does not apply
/// (a pattern that is not symmetric, a bad diagonal, which the host build then reports), or
/// to form the explicit product when that form is chosen.
pub fn plan(req: &PlanRequest) -> Result<SolvePlan, PlanError> {
    let a = req.matrix;
    let t0 = Instant::now();
    let mut early_notes = Vec::new();
    let views = match (&req.target, req.precond) {
        (
            Target::Gpu(_),
            PrecondKind::SsorAi {
                order: 1,
                form: SsorForm::Factored,
                ..
            },
        ) => k1_views(req, &mut early_notes),
        // Second order reads the same checks (its diagonal, A's pattern, omega) where its
        // factors may be counted where the solve runs.
        #[cfg(feature = "model")]
        (
            Target::Gpu(_),
            PrecondKind::SsorAi {
                order: 2,
                form: SsorForm::Factored,
                ..
            },
        ) if req.k2_counter.is_some() => k1_views(req, &mut early_notes),
        _ => None,
    };
    // A model may switch SSOR-AI to its explicit form.
    #[cfg_attr(not(feature = "model"), allow(unused_mut))]
    let mut kind = match (&views, req.precond.omega()) {
        (Some(v), None) => req.precond.with_omega(v.auto_omega()),
        _ => req.precond.resolved_for(a),
    };
    // Second order's factors as counted, where the backend builds them.
    #[cfg_attr(not(feature = "model"), allow(unused_mut))]
    let mut k2: Option<K2Planned> = None;
    #[cfg_attr(not(feature = "model"), allow(unused_mut))]
    let mut pre: PlannedPrecond = match (&views, kind.omega(), &req.target, &kind) {
        #[cfg(feature = "model")]
        (Some(v), Some(omega), _, PrecondKind::SsorAi { order: 2, .. }) => {
            match k2_planned(req, v, omega, &mut early_notes) {
                Some(f) => {
                    k2 = Some(f);
                    PlannedPrecond::SsorK2FromA {
                        omega,
                        n: a.nrows(),
                    }
                }
                None => Preconditioner::build(a, &kind)?.into(),
            }
        }
        (Some(_), Some(omega), ..) => PlannedPrecond::SsorK1FromA {
            omega,
            n: a.nrows(),
        },
        // Jacobi on a square matrix for a GPU: its inverse diagonal is the backend's to make,
        // from the matrix it uploads; a bad diagonal is the host build's error all the same
        // (one parallel pass that allocates nothing), unless the caller has it checked where
        // the solve runs.
        (_, _, Target::Gpu(_), PrecondKind::Jacobi) if a.is_square() => {
            let bad = match req.diagonal_checked {
                true => None,
                false => autopcg_solver::scaling::first_bad_diagonal(a),
            };
            if let Some((row, value)) = bad {
                return Err(PcgError::BadDiagonal {
                    row,
                    value,
                    precond: kind.to_string(),
                }
                .into());
            }
            PlannedPrecond::JacobiFromA { n: a.nrows() }
        }
        _ => Preconditioner::build(a, &kind)?.into(),
    };
    // With the factors left to the backend: the relaxation factor and the diagonal's
    // positions (read by the views) only.
    let mut precond_ms = t0.elapsed().as_secs_f64() * 1e3;
    let props = match &req.target {
        Target::Cpu { threads } => {
            let check_every = req.check_every.unwrap_or(CPU_CHECK_EVERY);
            let Some(built) = pre.built() else {
                return Err(PcgError::Backend(
                    "a CPU plan without its preconditioner (internal error)".into(),
                )
                .into());
            };
            let steps = cpu_steps(built, *threads);
            #[cfg(feature = "model")]
            let notes = req
                .model
                .map(|m| format!("model {} not used on the CPU", m.label))
                .into_iter()
                .collect();
            #[cfg(not(feature = "model"))]
            let notes = Vec::new();
            return Ok(SolvePlan {
                preconditioner: pre,
                kind,
                gpu: None,
                check_every,
                steps,
                model: None,
                explain: Vec::new(),
                predicted_iteration_ms: None,
                notes,
                precond_ms,
                select_ms: 0.0,
            });
        }
        Target::Gpu(p) => p,
    };
    let t1 = Instant::now();
    #[cfg(feature = "model")]
    let m = modelled(req, props, &mut pre, &mut kind, views.as_ref(), k2.as_ref())?;
    #[cfg(not(feature = "model"))]
    let m = Modelled::default();
    precond_ms += m.spent_building;
    let check_every = req.check_every.unwrap_or(GPU_CHECK_EVERY).max(1);
    let graph_iters = GpuPlanChoice::graph_iters_for(check_every);
    let choice = match m.choice {
        Some(c) => c,
        None => match (&pre, &views) {
            (PlannedPrecond::SsorK1FromA { omega, .. }, Some(v)) => {
                let f = match m.k1 {
                    Some(f) => f,
                    None => v.features(*omega, None),
                };
                // A's diagonals were counted in the same pass.
                let (n, nnz) = (a.nrows() as u64, a.nnz() as u64);
                let a_choice = SpmvChoice {
                    method: fallback::spmv_method_of(n, nnz, f.a_ndiag as u64),
                    predicted_ms: None,
                };
                fallback::gpu_choice_of(
                    a.nrows(),
                    a_choice,
                    PrecondChoice::Factored {
                        k: SpmvChoice {
                            method: factors::fallback_method(&f.k),
                            predicted_ms: None,
                        },
                        kt: SpmvChoice {
                            method: factors::fallback_method(&f.kt),
                            predicted_ms: None,
                        },
                    },
                    props,
                )
            }
            (PlannedPrecond::SsorK2FromA { .. }, _) => {
                let Some(f) = &k2 else {
                    return Err(PcgError::Backend(
                        "second-order factors left to the backend without their counts \
                         (internal error)"
                            .into(),
                    )
                    .into());
                };
                let (n, nnz) = (a.nrows() as u64, a.nnz() as u64);
                let a_choice = SpmvChoice {
                    method: fallback::spmv_method_of(n, nnz, f.a_ndiag as u64),
                    predicted_ms: None,
                };
                let factor = |m: &autopcg_sparse::features::MatrixFeatures| SpmvChoice {
                    method: factors::fallback_method(m),
                    predicted_ms: None,
                };
                fallback::gpu_choice_of(
                    a.nrows(),
                    a_choice,
                    PrecondChoice::Factored {
                        k: factor(&f.k),
                        kt: factor(&f.kt),
                    },
                    props,
                )
            }
            (PlannedPrecond::JacobiFromA { .. }, _) => fallback::gpu_choice_of(
                a.nrows(),
                fallback::spmv_choice(a),
                fallback::jacobi_choice(a.nrows(), props),
                props,
            ),
            _ => {
                let built = pre.host(a)?;
                fallback::gpu_choice(a, built, props)
            }
        },
    }
    .with_graph_iters(graph_iters);
    choice.check(a.nrows(), &pre, props)?;
    let steps = choice.plan();
    let select_ms = (t1.elapsed().as_secs_f64() * 1e3 - m.spent_building).max(0.0);
    let mut notes = early_notes;
    notes.extend(m.notes);
    match pre {
        PlannedPrecond::SsorK1FromA { .. } => notes.push(
            "SSOR-AI's K and K^T diag(s) are built on the device from A's uploaded arrays".into(),
        ),
        PlannedPrecond::SsorK2FromA { .. } => notes.push(
            "second-order SSOR-AI's K = I - X + X^2 and K^T diag(s) are built on the device \
             from A's uploaded arrays"
                .into(),
        ),
        PlannedPrecond::SsorK1ExplicitFromA { .. } => notes.push(
            "SSOR-AI's explicit product K^T diag(s) K is formed on the device from A's uploaded \
             arrays"
                .into(),
        ),
        _ => {}
    }
    Ok(SolvePlan {
        preconditioner: pre,
        kind,
        gpu: Some(choice),
        check_every,
        steps,
        model: m.model_used,
        explain: m.explain,
        predicted_iteration_ms: m.predicted,
        notes,
        precond_ms,
        select_ms,
    })
}

/// What the plan read of second-order SSOR-AI's factors it leaves to the backend
/// ([`PlannedPrecond::SsorK2FromA`]), counted where the solve runs.
struct K2Planned {
    /// The diagonals of `A`.
    a_ndiag: usize,
    /// The features of `K` and of `K^T diag(s)`.
    k: autopcg_sparse::features::MatrixFeatures,
    kt: autopcg_sparse::features::MatrixFeatures,
    /// The counts of `A`, counted with them (with what is known of `A`'s symmetry).
    #[cfg(feature = "model")]
    counts_a: Option<SpmvCounts>,
    /// The counts of `K` and of `K^T diag(s)`.
    #[cfg(feature = "model")]
    counts: (SpmvCounts, SpmvCounts),
}

/// Second-order factored SSOR-AI's factors with relaxation `omega` counted by the request's
/// [`PlanRequest::k2_counter`] (and `A` with `X`'s values by its
/// [`PlanRequest::factor_counter`]), for the backend to build them: `None`, for the host to
/// build them, where either is missing or does not count this matrix, a count fails or does
/// not add up (noted), or a model may choose the explicit form (the product within its
/// bound), whose count the host makes from the factors it builds.
#[cfg(feature = "model")]
fn k2_planned(
    req: &PlanRequest,
    views: &factors::K1Factors,
    omega: f64,
    notes: &mut Vec<String>,
) -> Option<K2Planned> {
    let a = req.matrix;
    let (counter, factor_counter) = (req.k2_counter?, req.factor_counter?);
    let failed = |notes: &mut Vec<String>, e: String| {
        notes.push(format!(
            "second-order SSOR-AI's factors were built on the host: the device's count failed \
             ({e})"
        ))
    };
    let t1 = match (factor_counter.0)(a, omega) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            failed(notes, e);
            return None;
        }
    };
    let off_diagonal_zero = t1.off_diagonal_zero;
    let Some(first) = views.features_from(t1, Some(req.symmetry)) else {
        failed(
            notes,
            "the count of A does not add up (internal error)".into(),
        );
        return None;
    };
    let t2 = match (counter.0)(a) {
        Ok(Some(t)) => t,
        Ok(None) => return None,
        Err(e) => {
            failed(notes, e);
            return None;
        }
    };
    let Some(f) = factors::K2Features::from_totals(a.nrows(), t2, off_diagonal_zero) else {
        failed(
            notes,
            "the count of the factors does not add up (internal error)".into(),
        );
        return None;
    };
    if req.ssor_form_auto && req.model.is_some() {
        if ssor::explicit_within_bound(f.explicit_bound, a.nnz()) {
            return None;
        }
        // As the model's comparison notes it for factors built on the host.
        notes.push(bounded_note(f.explicit_bound, a.nnz()));
    }
    Some(K2Planned {
        a_ndiag: first.a_ndiag,
        k: f.counts.0.features.clone(),
        kt: f.counts.1.features.clone(),
        counts_a: first.counts_a,
        counts: f.counts,
    })
}

/// What a model decided for a GPU plan (nothing without one).
#[derive(Default)]
struct Modelled {
    /// The modelled choice; `None`: the fallback rule.
    choice: Option<GpuPlanChoice>,
    explain: Vec<StepExplain>,
    notes: Vec<String>,
    model_used: Option<String>,
    predicted: Option<f64>,
    /// Milliseconds spent on the preconditioner on the host: counting the explicit product's
    /// structure to compare the forms, and forming it when the explicit form is chosen.
    spent_building: f64,
    /// What the pass over `A` found of first-order SSOR-AI's factors, when it ran.
    k1: Option<factors::K1Features>,
}

/// First-order SSOR-AI's factors seen through `A`'s pattern, from the checks the request's
/// [`PlanRequest::k1_checker`] reads where it reads them (no host pass over `A`), else from
/// the host's passes ([`factors::K1Factors::of`]); a failed check is noted.
fn k1_views<'a>(req: &PlanRequest<'a>, notes: &mut Vec<String>) -> Option<factors::K1Factors<'a>> {
    let a = req.matrix;
    match req.k1_checker.map(|c| (c.0)(a)) {
        Some(Ok(Some(c))) => return factors::K1Factors::from_checks(a, &c),
        Some(Err(e)) => notes.push(format!(
            "SSOR-AI's diagonal and relaxation factor were read on the host: the device's \
             check failed ({e})"
        )),
        Some(Ok(None)) | None => {}
    }
    factors::K1Factors::of(a)
}

/// The model's part of a GPU plan: SSOR-AI's form by predicted time (which may replace `pre`
/// and `kind` with the explicit form), then every modelled step; a model without an answer
/// leaves the choice to the fallback rule, with a note. `views`: first-order SSOR-AI's
/// factors read through `A`'s pattern, when `pre` is left to the backend.
#[cfg(feature = "model")]
fn modelled(
    req: &PlanRequest,
    props: &DeviceProps,
    pre: &mut PlannedPrecond,
    kind: &mut PrecondKind,
    views: Option<&factors::K1Factors>,
    k2: Option<&K2Planned>,
) -> Result<Modelled, PlanError> {
    let a = req.matrix;
    let mut out = Modelled::default();
    let Some(m) = req.model else {
        return Ok(out);
    };
    // The factors' counts, read through A's pattern in one pass.
    let views = match (views, &*pre) {
        (Some(v), PlannedPrecond::SsorK1FromA { omega, .. }) => {
            let counted = match req.factor_counter.map(|c| (c.0)(a, *omega)) {
                Some(Ok(Some(t))) => {
                    let f = v.features_from(t, Some(req.symmetry));
                    if f.is_none() {
                        out.notes.push(
                            "the factors' count made on the device does not add up (internal \
                             error): counted on the host"
                                .into(),
                        );
                    }
                    f
                }
                Some(Err(e)) => {
                    out.notes.push(format!(
                        "the factors' structure was counted on the host: the device's count \
                         failed ({e})"
                    ));
                    None
                }
                Some(Ok(None)) | None => None,
            };
            let f = counted.unwrap_or_else(|| v.features(*omega, Some(req.symmetry)));
            // The explicit product of factors with values that are not finite is counted as
            // formed (see below): the host builds them first.
            if !f.values_finite && req.ssor_form_auto {
                pre.host(a)?;
                None
            } else {
                out.k1 = Some(f);
                Some(v)
            }
        }
        _ => None,
    };
    let mut form_choice = None;
    if let (true, Some(v), Some(f)) = (req.ssor_form_auto, views, out.k1.as_ref()) {
        let bound = v.explicit_nnz_bound();
        if !ssor::explicit_within_bound(bound, a.nnz()) {
            out.notes.push(bounded_note(bound, a.nnz()));
        } else {
            let tb = Instant::now();
            let counted = match req.gram_counter.map(|c| (c.0)(a, f.kt.row_len_max)) {
                Some(Ok(Some(t))) => {
                    let c = v.explicit_counts_from(t);
                    if c.is_none() {
                        out.notes.push(
                            "the explicit product's count made on the device does not add up \
                             (internal error): counted on the host"
                                .into(),
                        );
                    }
                    c
                }
                Some(Err(e)) => {
                    out.notes.push(format!(
                        "the explicit product's structure was counted on the host: the \
                         device's count failed ({e})"
                    ));
                    None
                }
                Some(Ok(None)) | None => None,
            };
            let counts = counted.unwrap_or_else(|| v.explicit_counts());
            out.spent_building = tb.elapsed().as_secs_f64() * 1e3;
            let (ck, ckt) = &f.counts;
            let kt_longest = f.kt.row_len_max;
            match choose_ssor_form_counted(
                m.file,
                ck,
                ckt,
                &counts,
                props,
                req.expected_iterations,
                // These factors are first order's, read through A's pattern.
                1,
            ) {
                Ok(f) => {
                    out.explain.push(f.explain.clone());
                    if f.form == SsorForm::Explicit {
                        *kind = kind.with_form(SsorForm::Explicit);
                        match *pre {
                            // The backend forms the product from the matrix it uploads, as it
                            // would have built the factors, where no row of K^T is past what
                            // the device gathers for a row (and on the host where a row's rows
                            // of K hold more).
                            PlannedPrecond::SsorK1FromA { omega, n }
                                if kt_longest <= DEVICE_EXPLICIT_KT_MAX =>
                            {
                                *pre = PlannedPrecond::SsorK1ExplicitFromA { omega, n };
                            }
                            _ => {
                                let tv = Instant::now();
                                *pre = Preconditioner::build(a, kind)?.into();
                                out.spent_building += tv.elapsed().as_secs_f64() * 1e3;
                            }
                        }
                    }
                    form_choice = Some(f);
                }
                Err(e) => out.notes.push(format!("SSOR-AI form left factored: {e}")),
            }
        }
    } else if let (true, PlannedPrecond::Built(Preconditioner::SsorFactored { k, kt, .. })) =
        (req.ssor_form_auto, &*pre)
    {
        let bound = ssor::explicit_nnz_bound(k);
        if !ssor::explicit_within_bound(bound, a.nnz()) {
            out.notes.push(bounded_note(bound, a.nnz()));
        } else {
            // The model reads the product's structure only: while K's values are finite it is
            // counted by a symbolic pass that stores nothing of it, and the product is formed
            // only when the explicit form wins. Otherwise it is formed first, and counted.
            let tb = Instant::now();
            let built = pre.built().unwrap_or(&Preconditioner::None);
            let (counts, formed) = if built.values_finite() {
                (ssor::explicit_counts(built), None)
            } else {
                match built.to_explicit()? {
                    // The product is symmetric by construction.
                    Some(Preconditioner::SsorExplicit { m }) => (
                        Some(select::SpmvCounts::of_knowing(&m, KnownSymmetry::Symmetric)),
                        Some(m),
                    ),
                    _ => (None, None),
                }
            };
            out.spent_building = tb.elapsed().as_secs_f64() * 1e3;
            if let Some(counts) = counts {
                let order = match *kind {
                    PrecondKind::SsorAi { order, .. } => order,
                    _ => 1,
                };
                match choose_ssor_form(
                    m.file,
                    k,
                    kt,
                    &counts,
                    props,
                    req.expected_iterations,
                    order,
                ) {
                    Ok(f) => {
                        out.explain.push(f.explain.clone());
                        let explicit = f.form == SsorForm::Explicit;
                        form_choice = Some(f);
                        if explicit {
                            let tv = Instant::now();
                            let expl = match formed {
                                Some(m) => Some(Preconditioner::SsorExplicit { m }),
                                None => built.to_explicit()?,
                            };
                            out.spent_building += tv.elapsed().as_secs_f64() * 1e3;
                            let Some(expl) = expl else {
                                return Err(PcgError::Backend(
                                    "the explicit SSOR-AI form is not explicit (internal error)"
                                        .into(),
                                )
                                .into());
                            };
                            *pre = expl.into();
                            *kind = kind.with_form(SsorForm::Explicit);
                        }
                    }
                    Err(e) => out.notes.push(format!("SSOR-AI form left factored: {e}")),
                }
            }
        }
    }
    let k1_counts = match (&*pre, out.k1.as_ref(), k2) {
        (PlannedPrecond::SsorK1FromA { .. }, Some(f), _) => Some(&f.counts),
        (PlannedPrecond::SsorK2FromA { .. }, _, Some(f)) => Some(&f.counts),
        _ => None,
    };
    // A's counts, when the factors' pass counted them too (whatever the form), or else by
    // the counter given, where it counts A.
    let known_a = out
        .k1
        .as_ref()
        .and_then(|f| f.counts_a.as_ref())
        .or(k2.and_then(|f| f.counts_a.as_ref()));
    let counted_a = match known_a {
        Some(_) => None,
        None => a_counted(req, &mut out.notes),
    };
    let a_counts = known_a.or(counted_a.as_ref());
    match select_plan(
        m.file,
        a,
        a_counts,
        pre,
        k1_counts,
        props,
        req.expected_iterations,
        form_choice.as_ref(),
        req.symmetry,
    ) {
        Ok((mut c, ex, p)) => {
            out.model_used = Some(m.label.to_string());
            out.predicted = Some(p);
            out.explain.extend(ex);
            c.source = format!("model {}", m.label);
            out.choice = Some(c);
        }
        Err(e) => out
            .notes
            .push(format!("model {} not used ({e}): default rule", m.label)),
    }
    Ok(out)
}

/// `A`'s counts from the request's [`PlanRequest::a_counter`], when it counts `A` (`None`
/// otherwise, for the host's pass; a count that fails or does not add up is noted).
#[cfg(feature = "model")]
fn a_counted(req: &PlanRequest, notes: &mut Vec<String>) -> Option<SpmvCounts> {
    let a = req.matrix;
    match req.a_counter.map(|c| (c.0)(a)) {
        Some(Ok(Some(t))) => {
            let symmetric = req.symmetry.symmetric(a);
            let c = factors::a_counts_from(a, t, symmetric);
            if c.is_none() {
                notes.push(
                    "the matrix's count made on the device does not add up (internal error): \
                     counted on the host"
                        .into(),
                );
            }
            c
        }
        Some(Err(e)) => {
            notes.push(format!(
                "the matrix's structure was counted on the host: the device's count failed ({e})"
            ));
            None
        }
        Some(Ok(None)) | None => None,
    }
}

/// The note of an explicit product refused by its bound.
#[cfg(feature = "model")]
fn bounded_note(bound: f64, nnz_a: usize) -> String {
    format!(
        "SSOR-AI kept factored: the explicit product could hold up to {bound:.3e} entries \
         ({:.1} times nnz(A))",
        bound / nnz_a.max(1) as f64
    )
}

/// Every modelled step of the GPU plan from `model`, the rest by the fallback rule; `form`,
/// when [`choose_ssor_form`] already chose SSOR-AI's form, supplies the SpMV choices of K, K^T
/// or M; `a_counts`, A's counts when the pass over the factors' views made them;
/// `k1_counts`, the counts of K and K^T read through `A`'s pattern when the backend builds
/// them. Returns the choice, the explanations and the predicted milliseconds per
/// iteration.
#[cfg(feature = "model")]
#[allow(clippy::too_many_arguments)]
fn select_plan(
    model: &ModelFile,
    a: &CsrMatrix,
    a_counts: Option<&SpmvCounts>,
    pre: &mut PlannedPrecond,
    k1_counts: Option<&(SpmvCounts, SpmvCounts)>,
    props: &DeviceProps,
    expected_iterations: f64,
    form: Option<&SsorFormChoice>,
    a_symmetry: KnownSymmetry,
) -> Result<(GpuPlanChoice, Vec<StepExplain>, f64), SelectError> {
    let n = a.nrows() as u64;
    let mut explain = Vec::new();
    let iters = expected_iterations;
    // K and K^T are triangular, M symmetric, by construction.
    let tri = KnownSymmetry::Triangular;
    let precond = match (&*pre, form) {
        (
            PlannedPrecond::SsorK1FromA { .. }
            | PlannedPrecond::Built(Preconditioner::SsorFactored { .. }),
            Some(f),
        ) if f.form == SsorForm::Factored => {
            explain.push(f.k.1.clone());
            explain.push(f.kt.1.clone());
            PrecondChoice::Factored {
                k: f.k.0,
                kt: f.kt.0,
            }
        }
        (
            PlannedPrecond::Built(Preconditioner::SsorExplicit { .. })
            | PlannedPrecond::SsorK1ExplicitFromA { .. },
            Some(f),
        ) if f.form == SsorForm::Explicit => {
            explain.push(f.m.1.clone());
            PrecondChoice::Explicit { m: f.m.0 }
        }
        (PlannedPrecond::SsorK1FromA { .. } | PlannedPrecond::SsorK2FromA { .. }, None) => {
            let Some((k, kt)) = k1_counts else {
                return Err(SelectError::NoChoice {
                    step: "spmv K".into(),
                    reason: "the factors' counts are missing (internal error)".into(),
                });
            };
            let (ck, ek) = select_spmv_counted(model, "spmv K", k, props, iters)?;
            let (ckt, ekt) = select_spmv_counted(model, "spmv K^T", kt, props, iters)?;
            explain.push(ek);
            explain.push(ekt);
            PrecondChoice::Factored { k: ck, kt: ckt }
        }
        (PlannedPrecond::Built(Preconditioner::SsorFactored { k, kt, .. }), _) => {
            let (ck, ek) = select_spmv_knowing(model, "spmv K", k, tri, props, iters)?;
            let (ckt, ekt) = select_spmv_knowing(model, "spmv K^T", kt, tri, props, iters)?;
            explain.push(ek);
            explain.push(ekt);
            PrecondChoice::Factored { k: ck, kt: ckt }
        }
        (PlannedPrecond::Built(Preconditioner::SsorExplicit { m }), _) => {
            let sym = KnownSymmetry::Symmetric;
            let (cm, em) = select_spmv_knowing(model, "spmv M", m, sym, props, iters)?;
            explain.push(em);
            PrecondChoice::Explicit { m: cm }
        }
        (PlannedPrecond::Built(p), _) => fallback::precond_choice(p, a.nrows(), props),
        (PlannedPrecond::JacobiFromA { .. }, _) => fallback::jacobi_choice(a.nrows(), props),
        (PlannedPrecond::SsorK1FromA { .. } | PlannedPrecond::SsorK2FromA { .. }, Some(_))
        | (PlannedPrecond::SsorK1ExplicitFromA { .. }, _) => {
            return Err(SelectError::NoChoice {
                step: "ssor-ai form".into(),
                reason: "a form without its counts (internal error)".into(),
            })
        }
    };
    // A's product is chosen with the dots beside it (in its epilogue or apart), once the
    // preconditioner says whether u is r; it is the first step explained.
    let (cd, ed) = select_dot3(model, n)?;
    let nnz = a.nnz() as u64;
    let aliased = matches!(precond, PrecondChoice::None);
    let owned;
    let a_counts = match a_counts {
        Some(c) => c,
        None => {
            owned = SpmvCounts::of_knowing(a, a_symmetry);
            &owned
        }
    };
    let (ca, ea) = match cd.predicted_ms {
        Some(reduction_ms) => {
            let dots = DotsBeside {
                n,
                nnz,
                aliased,
                reduction_ms,
            };
            select_spmv_with_dots(model, a_counts, props, iters, dots)?
        }
        None => select_spmv_counted(model, "spmv A", a_counts, props, iters)?,
    };
    explain.insert(0, ea);
    let mut choice = fallback::gpu_choice_of(a.nrows(), ca, precond, props);
    let (cu, eu) = select_update(model, n, props)?;
    choice.update = cu;
    explain.push(eu);
    choice.dot3 = cd;
    explain.push(select_fused_dots(model, &mut choice, n, nnz, props, ed));
    let predicted = explain
        .iter()
        .filter_map(|e| e.options.first())
        .map(|o| o.predicted_ms)
        .sum();
    Ok((choice, explain, predicted))
}

/// The steps of a CPU iteration: fixed kernels (the fused update, the preconditioner, the SpMV
/// with the three dots in one pass) on `threads` threads.
fn cpu_steps(pre: &Preconditioner, threads: usize) -> Plan {
    let mut plan = Plan {
        steps: Vec::new(),
        source: "fixed CPU kernels".into(),
    };
    let cfg = format!("{threads} CPU threads");
    plan.push("update", "-", "cpu_cg_update_fused", cfg.clone(), None);
    let pformat = match pre {
        Preconditioner::None => "-",
        Preconditioner::Jacobi { .. } => "diagonal",
        Preconditioner::SsorFactored { .. } => "csr (K, K^T)",
        Preconditioner::SsorExplicit { .. } => "csr (K^T D^-1 K)",
    };
    plan.push("precond", pformat, pre.kind_name(), cfg.clone(), None);
    plan.push("spmv+dots", "csr", "cpu_csr_spmv_dots_fused", cfg, None);
    plan
}

#[cfg(all(test, feature = "model"))]
mod tests;
