//! Model-driven choices, step by step (method.md 3.1 to 3.4):
//!
//! - SpMV operands (A; K and K^T of factored SSOR-AI; M of explicit SSOR-AI): the SpMV
//!   performance model predicts every (format, kernel, threads, grid) candidate from the
//!   operand's work counts; the pick minimises [`amortised_ms`], the predicted time plus the
//!   predicted conversion cost spread over the expected iterations. A's pick adds the
//!   iteration's three dots beside each candidate ([`select_spmv_with_dots`]: in its epilogue or
//!   apart, the cheaper), so the product and where the dots go are chosen together.
//! - The fused update: the `cg_update` decision tree (Alg. 3-1) at the vector length.
//! - The three-dot reduction: the `dot3` decision tree at the vector length.
//! - The dots in the epilogue of A's SpMV or apart ([`select_fused_dots`]): the epilogue
//!   model's predicted excess of A's dot3 variant over its plain product against the
//!   reduction's predicted time.
//!
//! Grid-stride launches from the trees are capped at the blocks that cover the vector
//! ([`autopcg_catalog::VectorVariant::launch_at`], [`Reduction::launch_at`]): the trees keep
//! their block count at every length, blocks without work cost time, and the profile timed
//! each configuration capped the same way.
use autopcg_catalog::{
    DeviceProps, KernelId, LaunchConfig, Reduction, SpmvMethod, VectorKernel, DOT_BLOCK_SIZES,
};
use autopcg_model::file::ModelFile;
use autopcg_model::spmv::SpmvPrediction;
use autopcg_model::work::{spmv_work_counted, SpmvWork, WorkTally};
use autopcg_solver::gpu::{Dot3Choice, GpuPlanChoice, PrecondChoice, SpmvChoice, UpdateChoice};
use autopcg_sparse::features::{FeatureCounter, KnownSymmetry, MatrixFeatures, RowTally};
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;

use crate::explain::{StepExplain, StepOption, RUNNERS_UP};
use crate::SelectError;

/// The one amortisation formula: predicted SpMV time plus the predicted conversion from CSR
/// spread over `iterations` SpMVs. A non-CSR candidate whose conversion cost the model cannot
/// predict has no score (it is not chosen: an unknown cost is not a free one).
pub fn amortised_ms(
    predicted_ms: f64,
    conversion_ms: Option<f64>,
    csr: bool,
    iterations: f64,
) -> Option<f64> {
    let conversion = match conversion_ms {
        Some(c) => c,
        None if csr => 0.0,
        None => return None,
    };
    Some(predicted_ms + conversion / iterations.max(1.0))
}

/// The method a SpMV prediction stands for on a matrix with work `w` (cuSPARSE's algorithms
/// included), or `None` for a candidate this build cannot run.
pub fn method_of(p: &SpmvPrediction, w: &SpmvWork, props: &DeviceProps) -> Option<SpmvMethod> {
    p.candidate.method_for(w.shape(), props)
}

/// What the SpMV choice reads of an operand: its work counts (the SpMV model's terms) and its
/// structural features (the classifier's inputs). Nothing else of the matrix is read, so an
/// operand that is never formed can be judged from counts alone.
#[derive(Debug, Clone, PartialEq)]
pub struct SpmvCounts {
    /// The work counts ([`spmv_work`](autopcg_model::work::spmv_work)).
    pub work: SpmvWork,
    /// The structural features ([`autopcg_sparse::features::features`]).
    pub features: MatrixFeatures,
}

impl SpmvCounts {
    /// The counts of a stored matrix.
    pub fn of(b: &CsrMatrix) -> Self {
        Self::of_knowing(b, KnownSymmetry::Unknown)
    }

    /// [`SpmvCounts::of`] with what is known of `b`'s symmetry (the same counts; see
    /// [`features_knowing`](autopcg_sparse::features::features_knowing)).
    ///
    /// One parallel pass over the rows counts the features (row lengths, diagonals, whether
    /// every diagonal value is positive) and the work (x lines, distances, warp slots)
    /// together: on a large matrix the choice is bound by reading the indices, which separate
    /// feature and work passes read twice. The counts equal those passes' but for
    /// `work.row_len_std`, exact here where
    /// [`spmv_work`](autopcg_model::work::spmv_work) sums in floating point. A symmetry
    /// search, when one is needed, runs beside the pass.
    pub fn of_knowing(b: &CsrMatrix, known: KnownSymmetry) -> Self {
        /// Rows per task of the pass.
        const ROWS: usize = 8192;
        let (n, m) = (b.nrows(), b.ncols());
        let counter = FeatureCounter::new(n, m);
        let (ptr, idx, val) = (b.indptr(), b.indices(), b.data());
        let init = || (RowTally::default(), WorkTally::default(), true);
        let ((rows, work, diag_positive), symmetric) = rayon::join(
            || {
                (0..n.div_ceil(ROWS))
                    .into_par_iter()
                    .fold(init, |(mut rows, mut work, mut diag), c| {
                        for i in c * ROWS..((c + 1) * ROWS).min(n) {
                            let (lo, hi) = (ptr[i] as usize, ptr[i + 1] as usize);
                            let cols = &idx[lo..hi];
                            counter.add_row(&mut rows, i, cols);
                            work.add_row(i, cols);
                            // `features_knowing`'s test: a(i, i) > 0, absent entries 0.
                            if diag && i < m {
                                diag = cols
                                    .binary_search(&(i as u32))
                                    .is_ok_and(|q| val[lo + q] > 0.0);
                            }
                        }
                        (rows, work, diag)
                    })
                    .reduce(init, |(r1, w1, d1), (r2, w2, d2)| {
                        (r1.merge(r2), w1.merge(w2), d1 && d2)
                    })
            },
            || known.symmetric(b),
        );
        let (mut features, hist) = counter.finish(rows, symmetric);
        features.diag_positive = diag_positive;
        SpmvCounts {
            work: spmv_work_counted(&features, &hist, &work),
            features,
        }
    }
}

/// Chooses the SpMV of operand `b` (named `step` in the explanation): its counts
/// ([`SpmvCounts::of`], work and features found side by side) and [`select_spmv_counted`].
pub fn select_spmv(
    model: &ModelFile,
    step: &str,
    b: &CsrMatrix,
    props: &DeviceProps,
    expected_iterations: f64,
) -> Result<(SpmvChoice, StepExplain), SelectError> {
    select_spmv_knowing(
        model,
        step,
        b,
        KnownSymmetry::Unknown,
        props,
        expected_iterations,
    )
}

/// [`select_spmv`] with what is known of `b`'s symmetry (the same choice, without the search
/// for an asymmetric pair when `known` settles it).
pub fn select_spmv_knowing(
    model: &ModelFile,
    step: &str,
    b: &CsrMatrix,
    known: KnownSymmetry,
    props: &DeviceProps,
    expected_iterations: f64,
) -> Result<(SpmvChoice, StepExplain), SelectError> {
    let counts = SpmvCounts::of_knowing(b, known);
    select_spmv_counted(model, step, &counts, props, expected_iterations)
}

/// Chooses the SpMV of an operand known by its counts only (the same choice as
/// [`select_spmv`] on a matrix with these counts): the model's SpMV time plus the conversion
/// amortised over the expected iterations; the classifier, when the model has one, reads the
/// features as a second opinion.
pub fn select_spmv_counted(
    model: &ModelFile,
    step: &str,
    counts: &SpmvCounts,
    props: &DeviceProps,
    expected_iterations: f64,
) -> Result<(SpmvChoice, StepExplain), SelectError> {
    select_spmv_scored(model, step, counts, props, expected_iterations, None)
}

/// The three dots beside A's product: what [`select_spmv_with_dots`] adds to each candidate.
#[derive(Debug, Clone, Copy)]
pub struct DotsBeside {
    /// Rows of A.
    pub n: u64,
    /// Entries of A.
    pub nnz: u64,
    /// u = r (no preconditioner): the fused variant reads one vector fewer.
    pub aliased: bool,
    /// The separate reduction's predicted time, ms.
    pub reduction_ms: f64,
}

/// Chooses A's SpMV together with where the iteration's three dots go: each candidate is
/// scored by its SpMV score ([`select_spmv_counted`]) plus the dots' predicted cost beside it,
/// the least of the excess of its dot3 variant over its plain product ([`fused_dots_excess`])
/// and the separate reduction. A product a little slower alone whose epilogue takes the dots
/// cheaply then beats one whose dots must run apart. Without the epilogue lines every candidate
/// adds the reduction, and the order is [`select_spmv_counted`]'s.
pub fn select_spmv_with_dots(
    model: &ModelFile,
    counts: &SpmvCounts,
    props: &DeviceProps,
    expected_iterations: f64,
    dots: DotsBeside,
) -> Result<(SpmvChoice, StepExplain), SelectError> {
    select_spmv_scored(
        model,
        "spmv A",
        counts,
        props,
        expected_iterations,
        Some(dots),
    )
}

/// The predicted milliseconds the dot3 variant of `method` adds to its plain product of `n`
/// rows and `nnz` entries, at the fused launch the plan would run (capped at one wave of the
/// blocks the compiled variant keeps resident), at least zero (lines extrapolated past what
/// the stage measured can predict a fused kernel faster than its plain product, and a
/// negative excess would buy the product a discount it does not have): `None` without a
/// variant, without the model's epilogue lines for it, or where no block of it stays resident.
pub fn fused_dots_excess(
    model: &ModelFile,
    method: &SpmvMethod,
    n: u64,
    nnz: u64,
    aliased: bool,
    props: &DeviceProps,
) -> Option<f64> {
    let (kernel, a_cfg) = method.dot3_variant()?;
    let e = model.epilogue.as_ref()?;
    let resident = e.resident_blocks(kernel, a_cfg.threads)?;
    let cfg = kernel.dot3_launch(a_cfg, n, props, Some(resident))?;
    e.excess_ms(kernel, cfg.threads, aliased, n, nnz)
        .map(|x| x.max(0.0))
}

/// What the plan charges the reduction apart from A's product of `spmv_ms` where the product
/// could take the dots in its epilogue instead: the reduction's predicted `reduction_ms` plus the
/// epilogue stage's median held-out error of a fused time (`held_out.median_rel_err`) on the
/// product and the reduction together. The fallback rule fuses wherever A's kernel has the
/// variant; the plan keeps the dots apart only where that is predicted faster by more than the
/// model resolves. (On the H100, bcsstk13 without a preconditioner: its CSR vector 32 at 128
/// threads with the dots apart was predicted 0.02 us an iteration faster than at 512 threads
/// with them fused, and ran 0.85 us slower; `tools/pcg_model_vs_fixed.sh`, 2026-12-07.) Without
/// the epilogue lines, the reduction's time alone.
pub fn apart_charge_ms(model: &ModelFile, spmv_ms: f64, reduction_ms: f64) -> f64 {
    let err = model
        .epilogue
        .as_ref()
        .map_or(0.0, |e| e.held_out.median_rel_err.max(0.0));
    reduction_ms + err * (spmv_ms.max(0.0) + reduction_ms)
}

fn select_spmv_scored(
    model: &ModelFile,
    step: &str,
    counts: &SpmvCounts,
    props: &DeviceProps,
    expected_iterations: f64,
    dots: Option<DotsBeside>,
) -> Result<(SpmvChoice, StepExplain), SelectError> {
    let w = &counts.work;
    let iters = expected_iterations.max(1.0);
    let beside = |m: &SpmvMethod, spmv_ms: f64| -> f64 {
        dots.map_or(0.0, |d| {
            fused_dots_excess(model, m, d.n, d.nnz, d.aliased, props).map_or(d.reduction_ms, |x| {
                x.min(apart_charge_ms(model, spmv_ms, d.reduction_ms))
            })
        })
    };
    let mut scored: Vec<(f64, SpmvPrediction, SpmvMethod)> = model
        .spmv
        .predict(w)
        .into_iter()
        .filter_map(|p| {
            let m = method_of(&p, w, props)?;
            m.check(step, props).ok()?;
            let csr = m.format() == autopcg_catalog::Format::Csr;
            let score = amortised_ms(p.predicted_ms, p.conversion_ms, csr, iters)?
                + beside(&m, p.predicted_ms);
            score.is_finite().then_some((score, p, m))
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
        "least predicted SpMV time plus conversion / {iters:.0} iterations{}, over {} candidates \
         that apply",
        if dots.is_some() {
            " plus the three dots (in its epilogue or apart, the cheaper)"
        } else {
            ""
        },
        scored.len()
    );
    let classifier = model
        .classifier
        .as_ref()
        .and_then(|c| c.predict(&counts.features, w));
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

/// Chooses the fused update for vectors of length `n`.
pub fn select_update(
    model: &ModelFile,
    n: u64,
    props: &DeviceProps,
) -> Result<(UpdateChoice, StepExplain), SelectError> {
    let no = no_choice("update");
    let p = tree_pick(model.vector.pick("cg_update", n), "cg_update", &no)?;
    let variant = match p.kernel {
        KernelId::Vector(VectorKernel::CgUpdate(v)) => v,
        k => return Err(no(format!("{k} is not an update kernel"))),
    };
    if p.threads > props.max_threads_per_block || p.blocks == 0 {
        return Err(no(format!(
            "{} threads x {} blocks does not fit",
            p.threads, p.blocks
        )));
    }
    let config = variant.launch_at(LaunchConfig::new(p.threads, p.blocks), n);
    Ok((
        UpdateChoice {
            variant,
            config,
            predicted_ms: Some(p.predicted_ms),
        },
        tree_explain("update", &p, config, "cg_update", n),
    ))
}

/// The error of a step the model cannot choose, for the reason given.
fn no_choice(step: &'static str) -> impl Fn(String) -> SelectError {
    move |reason| SelectError::NoChoice {
        step: step.into(),
        reason,
    }
}

/// What the decision tree `tree` picked, or the step's error `no` when the model has no such
/// tree.
fn tree_pick(
    p: Option<autopcg_model::vecdot::Pick>,
    tree: &str,
    no: &impl Fn(String) -> SelectError,
) -> Result<autopcg_model::vecdot::Pick, SelectError> {
    p.ok_or_else(|| no(format!("the model has no {tree} tree")))
}

/// The explanation of a step the decision tree `tree` chose at `n`: its one option, the
/// picked kernel at the launch `config`.
fn tree_explain(
    step: &str,
    p: &autopcg_model::vecdot::Pick,
    config: LaunchConfig,
    tree: &str,
    n: u64,
) -> StepExplain {
    let name = format!("{} t{} b{}", p.kernel, p.threads, config.blocks);
    StepExplain {
        step: step.into(),
        options: vec![StepOption::timed(name, p.predicted_ms)],
        why: format!("{tree} decision tree (Alg. 3-1) at n = {n}"),
        classifier: None,
    }
}

/// Chooses the three-dot reduction for vectors of length `n`.
pub fn select_dot3(model: &ModelFile, n: u64) -> Result<(Dot3Choice, StepExplain), SelectError> {
    let no = no_choice("dots");
    let p = tree_pick(model.dot.pick("dot3", n), "dot3", &no)?;
    let kernel = match p.kernel {
        KernelId::Reduction(Reduction::Dot3(k)) => k,
        k => return Err(no(format!("{k} is not a three-dot reduction"))),
    };
    if !DOT_BLOCK_SIZES.contains(&p.threads) || p.blocks == 0 {
        return Err(no(format!(
            "{} threads x {} blocks is not a reduction launch",
            p.threads, p.blocks
        )));
    }
    let config = Reduction::Dot3(kernel).launch_at(LaunchConfig::new(p.threads, p.blocks), n);
    Ok((
        Dot3Choice {
            kernel,
            config,
            predicted_ms: Some(p.predicted_ms),
        },
        tree_explain("dots", &p, config, "dot3", n),
    ))
}

/// Decides whether the plan adds the three dots in the epilogue of A's SpMV
/// ([`GpuPlanChoice::fused_dots`], set by the fallback rule wherever A's method has the variant)
/// or runs the reduction `choice.dot3` after the product, and explains it as the `dots` step
/// (`dots_tree`: the reduction tree's explanation, whose option stays the runner-up or the
/// choice).
///
/// With the epilogue model (the tune's epilogue stage): the fused launch is capped at one wave of
/// the blocks the compiled variant keeps resident at A's threads (as the stage measured it), and
/// the dots are fused when the predicted excess of the fused kernel over A's plain product of
/// `n` rows and `nnz` entries (with u = r when there is no preconditioner; the tridiagonal's
/// lines at `n` plus the wide band's cost per entry) is below what the reduction apart is
/// charged ([`apart_charge_ms`]: its predicted time and the stage's median error).
/// Without it (a
/// model file fitted on a profile from before the stage), or when the stage did not measure A's
/// kernel, the rule's choice stays and the explanation says so.
pub fn select_fused_dots(
    model: &ModelFile,
    choice: &mut GpuPlanChoice,
    n: u64,
    nnz: u64,
    props: &DeviceProps,
    mut dots_tree: StepExplain,
) -> StepExplain {
    let (Some(rule), Some((kernel, a_cfg))) = (choice.fused_dots, choice.a.method.dot3_variant())
    else {
        return dots_tree;
    };
    let resident = model
        .epilogue
        .as_ref()
        .and_then(|e| e.resident_blocks(kernel, a_cfg.threads));
    let cfg = match resident {
        Some(b) => match kernel.dot3_launch(a_cfg, n, props, Some(b)) {
            Some(c) => c,
            None => {
                choice.fused_dots = None;
                dots_tree.why = format!(
                    "{}; the dots stay apart: {} keeps no block of {} threads resident",
                    dots_tree.why,
                    kernel.dot3_entry_point().unwrap_or_default(),
                    a_cfg.threads
                );
                return dots_tree;
            }
        },
        None => rule,
    };
    let entry = kernel.dot3_entry_point().unwrap_or_default();
    let fused_name = format!(
        "{entry} t{} b{} (epilogue of A's SpMV)",
        cfg.threads, cfg.blocks
    );
    let aliased = matches!(choice.precond, PrecondChoice::None);
    let excess = model
        .epilogue
        .as_ref()
        .and_then(|e| e.excess_ms(kernel, cfg.threads, aliased, n, nnz))
        .map(|x| x.max(0.0));
    let (Some(excess), Some(reduction)) = (excess, choice.dot3.predicted_ms) else {
        dots_tree.why = format!(
            "{}; the dots go into the epilogue of A's SpMV by the fallback rule ({})",
            dots_tree.why,
            if model.epilogue.is_none() {
                "the model file has no epilogue lines: tune again to measure them"
            } else {
                "the epilogue stage did not measure this kernel"
            }
        );
        return dots_tree;
    };
    let fused = StepOption::timed(fused_name, excess);
    let charge = apart_charge_ms(model, choice.a.predicted_ms.unwrap_or(0.0), reduction);
    // The reduction's option is scored by what it is charged, the comparison made.
    let apart = dots_tree.options.first().cloned().map(|mut o| {
        o.score_ms = charge;
        o
    });
    let fuse = excess < charge;
    choice.fused_dots = fuse.then_some(cfg);
    let mut options = Vec::new();
    if fuse {
        options.push(fused);
        options.extend(apart);
    } else {
        options.extend(apart);
        options.push(fused);
    }
    StepExplain {
        step: dots_tree.step,
        options,
        why: format!(
            "epilogue lines at n = {n}, {nnz} entries{}{}: the dots in A's SpMV add {excess:.4} ms \
             to the product, the reduction apart takes {reduction:.4} ms, charged {charge:.4} ms \
             with the stage's median held-out error on the product and the reduction ({})",
            if aliased { ", u = r" } else { "" },
            if model.epilogue.as_ref().is_some_and(|e| e.per_entry.is_empty()) {
                " (no cost per entry in the model file: the tridiagonal's lines alone)"
            } else {
                ""
            },
            dots_tree.why
        ),
        classifier: None,
    }
}
