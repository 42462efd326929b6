//! autopcg-generator: selection. A fitted [`ModelFile`] and a matrix give the GPU plan: the
//! storage format, kernel and launch configuration of every step of a PCG iteration, each with
//! its predicted time, and the runner-up choices with theirs.
//!
//! - SpMV operands (A; K and K^T of factored SSOR-AI; M of explicit SSOR-AI): the SpMV
//!   performance model predicts every (format, kernel, threads, grid) candidate from the
//!   operand's work counts; the pick minimises predicted time plus the predicted conversion
//!   cost amortised over [`EXPECTED_ITERATIONS`] (method.md 3.3 and 3.4).
//! - The fused update: the `cg_update` decision tree (Alg. 3-1) at the vector length.
//! - The three-dot reduction: the `dot3` decision tree at the vector length.
//! - SSOR-AI's form, when left to the model: factored (SpMV K, scaling, SpMV K^T) against
//!   explicit (SpMV M), by predicted time per iteration.
//! - Element-wise preconditioner kernels (Jacobi, the diagonal scaling) are not profiled: they
//!   keep the default rule, and the plan says so.
#![warn(missing_docs)]

use autopcg_catalog::{KernelId, Reduction, SpmvMethod as CandidateMethod, VectorKernel};
use autopcg_gpu::kernels::vector::VectorVariant;
use autopcg_gpu::{DeviceProps, LaunchConfig, DOT_BLOCK_SIZES};
use autopcg_model::file::ModelFile;
use autopcg_model::spmv::SpmvPrediction;
use autopcg_model::work::{spmv_work, SpmvWork};
use autopcg_solver::gpu::{
    Dot3Choice, GpuPlanChoice, PrecondChoice, SpmvChoice, SpmvMethod, UpdateChoice,
};
use autopcg_solver::{Preconditioner, SsorForm};
use serde::Serialize;

/// Iterations a conversion is amortised over when a solve does not say how many it expects.
/// A guess of the order of the iteration counts of the benchmark families with SSOR-AI at a
/// 1e-8 tolerance; a solve that expects far fewer should pass its own.
pub const EXPECTED_ITERATIONS: f64 = 500.0;

/// How many runner-up choices an explanation lists per step.
pub const RUNNERS_UP: usize = 4;

/// Why a model could not give a plan.
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

/// One option considered for a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepOption {
    /// Candidate name (`format/kernel/tT/grid` for SpMV, `kernel tT bB` for vector steps).
    pub name: String,
    /// Predicted milliseconds per call.
    pub predicted_ms: f64,
    /// Predicted conversion milliseconds (SpMV only; 0 for CSR).
    pub conversion_ms: Option<f64>,
    /// What the choice minimised: predicted ms plus conversion / iterations.
    pub score_ms: f64,
}

/// How one step was chosen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepExplain {
    /// The step (`spmv A`, `spmv K`, `update`, `dots`...).
    pub step: String,
    /// The choice, then up to [`RUNNERS_UP`] runners-up, best first.
    pub options: Vec<StepOption>,
    /// Why, in words.
    pub why: String,
    /// The classifier's label for this operand, where there is one (a second opinion).
    pub classifier: Option<String>,
}

/// A plan chosen by a model.
#[derive(Debug, Clone)]
pub struct Selection {
    /// What the GPU backend runs.
    pub choice: GpuPlanChoice,
    /// How each step was chosen.
    pub explain: Vec<StepExplain>,
    /// Predicted milliseconds per iteration (sum of the predicted steps).
    pub predicted_iteration_ms: f64,
}

/// The method a SpMV prediction stands for on a matrix with work `w`
/// ([`autopcg_catalog::SpmvCandidate::method_for`]), or `None` for cuSPARSE (or a candidate
/// without a launch rule, or whose format and kernel disagree).
pub fn method_of(p: &SpmvPrediction, w: &SpmvWork, props: &DeviceProps) -> Option<SpmvMethod> {
    Some(match p.candidate.method_for(w.shape(), props)? {
        CandidateMethod::Csr { kernel, config } => SpmvMethod::Csr { kernel, config },
        CandidateMethod::Ell { config } => SpmvMethod::Ell { config },
        CandidateMethod::Dia { config } => SpmvMethod::Dia { config },
        CandidateMethod::Coo { kernel, config } => SpmvMethod::Coo { kernel, config },
        CandidateMethod::Hyb {
            split,
            ell_config,
            coo_kernel,
            coo_config,
        } => SpmvMethod::Hyb {
            split,
            ell_config,
            coo_kernel,
            coo_config,
        },
    })
}

/// Chooses the SpMV of operand `b` (named `step` in the explanation).
pub fn select_spmv(
    model: &ModelFile,
    step: &str,
    b: &autopcg_sparse::CsrMatrix,
    props: &DeviceProps,
    expected_iterations: f64,
) -> Result<(SpmvChoice, StepExplain), SelectError> {
    let w = spmv_work(b);
    let iters = expected_iterations.max(1.0);
    let mut scored: Vec<(f64, SpmvPrediction, SpmvMethod)> = model
        .spmv
        .predict(&w)
        .into_iter()
        .filter(|p| !p.candidate.is_cusparse())
        .filter_map(|p| {
            let m = method_of(&p, &w, props)?;
            m.check(step, props).ok()?;
            let score = p.predicted_ms + p.conversion_ms.unwrap_or(0.0) / iters;
            Some((score, p, m))
        })
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some((_, best, method)) = scored.first().cloned() else {
        return Err(SelectError::NoChoice {
            step: step.to_string(),
            reason: "no candidate of the SpMV model applies to this matrix on this device".into(),
        });
    };
    let options = scored
        .iter()
        .take(1 + RUNNERS_UP)
        .map(|(s, p, _)| StepOption {
            name: p.name(),
            predicted_ms: p.predicted_ms,
            conversion_ms: p.conversion_ms,
            score_ms: *s,
        })
        .collect();
    let why = format!(
        "least predicted SpMV time plus conversion / {iters:.0} iterations, over {} candidates that apply",
        scored.len()
    );
    let classifier = model.classifier.as_ref().and_then(|c| {
        let f = autopcg_sparse::features::features(b);
        c.predict(&f, &w)
    });
    Ok((
        SpmvChoice {
            method,
            predicted_ms: Some(best.predicted_ms),
        },
        StepExplain {
            step: step.to_string(),
            options,
            why,
            classifier,
        },
    ))
}

/// A tree's block count for `items` work items of `threads` threads each, capped at the blocks
/// that cover the items once. The trees' grid-stride candidates keep their block count at every
/// length, and at the shortest lengths profiled (timed back to back, where the launches
/// overlap) blocks without work cost nothing measurable; replayed from a CUDA graph they do
/// (bcsstk13 without preconditioner on an H200: 0.0114 ms per iteration with 1584 and 264
/// blocks for 2003 rows, 0.0094 with the fixed rule's 4). A grid-stride kernel with fewer
/// blocks does the same work with no idle block, so the cap never adds work.
fn cap_blocks(blocks: u32, items: u64, threads: u32) -> u32 {
    let cover = items.div_ceil(u64::from(threads.max(1))).max(1);
    u32::try_from(cover).map_or(blocks, |c| blocks.min(c))
}

/// Chooses the fused update for vectors of length `n`.
pub fn select_update(
    model: &ModelFile,
    n: u64,
    props: &DeviceProps,
) -> Result<(UpdateChoice, StepExplain), SelectError> {
    let no = |reason: String| SelectError::NoChoice {
        step: "update".into(),
        reason,
    };
    let p = model
        .vector
        .pick("cg_update", n)
        .ok_or_else(|| no("the model has no cg_update tree".into()))?;
    let KernelId::Vector(VectorKernel::CgUpdate(variant)) = p.kernel else {
        return Err(no(format!("{} is not a cg_update kernel", p.kernel)));
    };
    let items = match variant {
        VectorVariant::ElemV2 | VectorVariant::GridV2 => n.div_ceil(2),
        VectorVariant::Elem | VectorVariant::Grid => n,
    };
    let config = LaunchConfig {
        threads: p.threads,
        blocks: cap_blocks(p.blocks, items, p.threads),
    };
    if p.threads > props.max_threads_per_block || p.blocks == 0 {
        return Err(no(format!(
            "{} threads x {} blocks does not fit",
            p.threads, p.blocks
        )));
    }
    let name = format!("{} t{} b{}", p.kernel, p.threads, config.blocks);
    Ok((
        UpdateChoice {
            variant,
            config,
            predicted_ms: Some(p.predicted_ms),
        },
        StepExplain {
            step: "update".into(),
            options: vec![StepOption {
                name,
                predicted_ms: p.predicted_ms,
                conversion_ms: None,
                score_ms: p.predicted_ms,
            }],
            why: format!("cg_update decision tree (Alg. 3-1) at n = {n}"),
            classifier: None,
        },
    ))
}

/// Chooses the three-dot reduction for vectors of length `n`.
pub fn select_dot3(model: &ModelFile, n: u64) -> Result<(Dot3Choice, StepExplain), SelectError> {
    let no = |reason: String| SelectError::NoChoice {
        step: "dots".into(),
        reason,
    };
    let p = model
        .dot
        .pick("dot3", n)
        .ok_or_else(|| no("the model has no dot3 tree".into()))?;
    let KernelId::Reduction(Reduction::Dot3(kernel)) = p.kernel else {
        return Err(no(format!("{} is not a three-dot reduction", p.kernel)));
    };
    if !DOT_BLOCK_SIZES.contains(&p.threads) || p.blocks == 0 {
        return Err(no(format!(
            "{} threads x {} blocks is not a reduction launch",
            p.threads, p.blocks
        )));
    }
    let blocks = cap_blocks(p.blocks, n.div_ceil(2), p.threads);
    let name = format!("{} t{} b{}", p.kernel, p.threads, blocks);
    Ok((
        Dot3Choice {
            kernel,
            config: LaunchConfig {
                threads: p.threads,
                blocks,
            },
            predicted_ms: Some(p.predicted_ms),
        },
        StepExplain {
            step: "dots".into(),
            options: vec![StepOption {
                name,
                predicted_ms: p.predicted_ms,
                conversion_ms: None,
                score_ms: p.predicted_ms,
            }],
            why: format!("dot3 decision tree (Alg. 3-1) at n = {n}"),
            classifier: None,
        },
    ))
}

/// The plan for `a` with preconditioner `pre`: every modelled step from `model`, the rest by the
/// default rule ([`GpuPlanChoice::default_for`]). `form`, when [`choose_ssor_form`] already
/// chose SSOR-AI's form, supplies the SpMV choices of K, K^T or M.
pub fn select_plan(
    model: &ModelFile,
    a: &autopcg_sparse::CsrMatrix,
    pre: &Preconditioner,
    props: &DeviceProps,
    expected_iterations: f64,
    form: Option<&SsorFormChoice>,
) -> Result<Selection, SelectError> {
    let n = a.nrows() as u64;
    let mut choice = GpuPlanChoice::default_for(a, pre, props);
    let mut explain = Vec::new();
    let (ca, ea) = select_spmv(model, "spmv A", a, props, expected_iterations)?;
    choice.a = ca;
    explain.push(ea);
    choice.precond = match (pre, choice.precond) {
        (Preconditioner::SsorFactored { k, kt, .. }, PrecondChoice::Factored { scale, .. }) => {
            let ((ck, ek), (ckt, ekt)) = match form {
                Some(f) => (f.k.clone(), f.kt.clone()),
                None => (
                    select_spmv(model, "spmv K", k, props, expected_iterations)?,
                    select_spmv(model, "spmv K^T", kt, props, expected_iterations)?,
                ),
            };
            explain.push(ek);
            explain.push(ekt);
            PrecondChoice::Factored {
                k: ck,
                scale,
                kt: ckt,
            }
        }
        (Preconditioner::SsorExplicit { m }, PrecondChoice::Explicit { .. }) => {
            let (cm, em) = match form {
                Some(f) => f.m.clone(),
                None => select_spmv(model, "spmv M", m, props, expected_iterations)?,
            };
            explain.push(em);
            PrecondChoice::Explicit { m: cm }
        }
        (_, other) => other,
    };
    let (cu, eu) = select_update(model, n, props)?;
    choice.update = cu;
    explain.push(eu);
    let (cd, ed) = select_dot3(model, n)?;
    choice.dot3 = cd;
    explain.push(ed);
    let predicted_iteration_ms = explain
        .iter()
        .filter_map(|e| e.options.first())
        .map(|o| o.predicted_ms)
        .sum();
    Ok(Selection {
        choice,
        explain,
        predicted_iteration_ms,
    })
}

/// Picks SSOR-AI's application form by predicted time per application: SpMV(K) + SpMV(K^T)
/// for the factored form against SpMV(M) for the explicit one. The factored form also runs a
/// diagonal scaling (one vector pass), which is not profiled and not counted: the comparison
/// favours the factored form by that pass.
pub fn choose_ssor_form(
    model: &ModelFile,
    k: &autopcg_sparse::CsrMatrix,
    kt: &autopcg_sparse::CsrMatrix,
    m: &autopcg_sparse::CsrMatrix,
    props: &DeviceProps,
    expected_iterations: f64,
) -> Result<SsorFormChoice, SelectError> {
    let k = select_spmv(model, "spmv K", k, props, expected_iterations)?;
    let kt = select_spmv(model, "spmv K^T", kt, props, expected_iterations)?;
    let m = select_spmv(model, "spmv M", m, props, expected_iterations)?;
    let fact =
        k.0.predicted_ms.unwrap_or(f64::INFINITY) + kt.0.predicted_ms.unwrap_or(f64::INFINITY);
    let expl = m.0.predicted_ms.unwrap_or(f64::INFINITY);
    let form = if expl < fact {
        SsorForm::Explicit
    } else {
        SsorForm::Factored
    };
    let opt = |name: &str, ms: f64| StepOption {
        name: name.into(),
        predicted_ms: ms,
        conversion_ms: None,
        score_ms: ms,
    };
    let mut options = vec![
        opt("factored: SpMV K + SpMV K^T", fact),
        opt("explicit: SpMV M", expl),
    ];
    options.sort_by(|a, b| a.score_ms.total_cmp(&b.score_ms));
    Ok(SsorFormChoice {
        form,
        explain: StepExplain {
            step: "ssor-ai form".into(),
            options,
            why: "least predicted SpMV time per application (the factored form's diagonal \
                  scaling, a vector pass, is not counted)"
                .into(),
            classifier: None,
        },
        k,
        kt,
        m,
    })
}

/// What [`choose_ssor_form`] found: the form, why, and the SpMV choices of K, K^T and M it
/// compared, which [`select_plan`] reuses instead of choosing them again.
#[derive(Debug, Clone)]
pub struct SsorFormChoice {
    /// The form with the least predicted time per application.
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

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg_gpu::testing::hopper_like_props;
    use autopcg_solver::PrecondKind;
    use autopcg_sparse::families;
    use std::path::Path;

    /// The committed H200 model: a real fit, read as any solve reads it.
    fn model() -> ModelFile {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
        ModelFile::load(&p).expect("the committed H200 model loads")
    }

    fn check_choice(sel: &Selection, props: &DeviceProps) {
        sel.choice.a.method.check("A", props).unwrap();
        assert!(sel.choice.a.predicted_ms.is_some_and(|t| t > 0.0));
        assert!(sel.choice.update.predicted_ms.is_some_and(|t| t > 0.0));
        assert!(sel.choice.dot3.predicted_ms.is_some_and(|t| t > 0.0));
        assert!(sel.predicted_iteration_ms > 0.0);
        for e in &sel.explain {
            assert!(!e.options.is_empty());
            assert!(e.options.windows(2).all(|w| w[0].score_ms <= w[1].score_ms));
        }
    }

    #[test]
    fn stencil_plan_is_valid_and_never_hyb_without_a_coo_part() {
        let m = model();
        let props = hopper_like_props();
        let a = families::poisson3d_7pt(24, 24, 24).unwrap();
        let pre = Preconditioner::build(&a, &PrecondKind::ssor_ai()).unwrap();
        let sel = select_plan(&m, &a, &pre, &props, EXPECTED_ITERATIONS, None).unwrap();
        check_choice(&sel, &props);
        assert_ne!(sel.choice.a.method.format(), autopcg_gpu::Format::Hyb);
        let PrecondChoice::Factored { k, kt, .. } = sel.choice.precond else {
            panic!("a factored preconditioner gets a factored choice")
        };
        k.method.check("K", &props).unwrap();
        kt.method.check("K^T", &props).unwrap();
        let steps: Vec<&str> = sel.explain.iter().map(|e| e.step.as_str()).collect();
        assert_eq!(steps, ["spmv A", "spmv K", "spmv K^T", "update", "dots"]);
    }

    #[test]
    fn power_law_and_explicit_plans_are_valid() {
        let m = model();
        let props = hopper_like_props();
        let a = families::random_powerlaw_spd(20_000, 12.0, 1.4, 3).unwrap();
        let kind = PrecondKind::ssor_ai().with_omega(autopcg_solver::auto_omega(&a));
        let pre = Preconditioner::build(&a, &kind).unwrap();
        let sel = select_plan(&m, &a, &pre, &props, EXPECTED_ITERATIONS, None).unwrap();
        check_choice(&sel, &props);
        let expl = pre.to_explicit().unwrap().unwrap();
        let sel = select_plan(&m, &a, &expl, &props, EXPECTED_ITERATIONS, None).unwrap();
        check_choice(&sel, &props);
        assert!(matches!(sel.choice.precond, PrecondChoice::Explicit { .. }));
        let (Preconditioner::SsorFactored { k, kt, .. }, Preconditioner::SsorExplicit { m: mm }) =
            (&pre, &expl)
        else {
            panic!("factored then explicit")
        };
        let f = choose_ssor_form(&m, k, kt, mm, &props, EXPECTED_ITERATIONS).unwrap();
        assert_eq!(f.explain.options.len(), 2);
        // The plan reuses the form's choices and gives the same plan as choosing afresh.
        let again = select_plan(&m, &a, &expl, &props, EXPECTED_ITERATIONS, Some(&f)).unwrap();
        assert_eq!(again.choice, sel.choice);
    }

    #[test]
    fn amortised_conversions_favour_csr_for_one_iteration() {
        let m = model();
        let props = hopper_like_props();
        let a = families::poisson2d_5pt(300, 300).unwrap();
        let (one, _) = select_spmv(&m, "spmv A", &a, &props, 1.0).unwrap();
        let (many, _) = select_spmv(&m, "spmv A", &a, &props, 1e9).unwrap();
        assert_eq!(one.method.format(), autopcg_gpu::Format::Csr);
        assert!(many.predicted_ms.unwrap() <= one.predicted_ms.unwrap());
    }

    #[test]
    fn small_vectors_get_no_idle_blocks() {
        let m = model();
        let props = hopper_like_props();
        let (u, _) = select_update(&m, 2003, &props).unwrap();
        let per = match u.variant {
            VectorVariant::ElemV2 | VectorVariant::GridV2 => 1002,
            _ => 2003,
        };
        assert!(u.config.blocks as u64 <= (per as u64).div_ceil(u64::from(u.config.threads)));
        let (d, _) = select_dot3(&m, 2003).unwrap();
        assert!(d.config.blocks as u64 <= 1002u64.div_ceil(u64::from(d.config.threads)));
        assert_eq!(cap_blocks(264, 10, 1024), 1);
        assert_eq!(cap_blocks(264, 1 << 30, 256), 264);
    }
}
