//! The fallback rule: the plan a GPU runs when no model chooses (no model file for the device,
//! `--model none`, or a model that has no answer for a step), and the element-wise
//! preconditioner kernels, which no model covers.
//!
//! - Every SpMV operand by [`spmv_method`]: DIA when the band is dense, else CSR scalar for very
//!   short rows, else CSR vector with a lane count from the mean row length; [`DEFAULT_THREADS`]
//!   threads per block.
//! - The grid-stride double2 update and the last-block three-dot reduction, [`DEFAULT_THREADS`]
//!   threads, one resident wave of blocks.
//! - Double2 element-wise preconditioner kernels (Jacobi, the diagonal scaling of factored
//!   SSOR-AI), grid-stride, one wave.
//! - One-iteration CUDA graphs (the entry point sets the graph length from the polling
//!   interval).
use autopcg_catalog::{DeviceProps, GridPolicy, LaunchConfig, SpmvCandidate, SpmvImpl};
use autopcg_catalog::{
    Dot3Kernel, Loads, PrecondKernel, SpmvKernel, SpmvMethod, VectorVariant, DEFAULT_THREADS,
};
use autopcg_solver::gpu::{
    fused_dots_launch, Dot3Choice, ElementwiseChoice, GpuPlanChoice, PrecondChoice, SpmvChoice,
    UpdateChoice,
};
use autopcg_solver::Preconditioner;
use autopcg_sparse::{CsrMatrix, PaddingLimits};

/// How plans chosen by the fallback rule describe their source.
pub const FALLBACK_RULE: &str = "default rule (DIA or CSR vector by matrix shape, 256 threads, \
                                 cg_update grid-stride double2, dot3 last-block)";

/// Band density at or below which DIA is used: `ndiag * nrows <= DIA_FILL * nnz`.
pub const DIA_FILL: f64 = 1.5;

/// Mean row length below which CSR scalar (a thread per row) is used.
pub const SCALAR_BELOW: f64 = 3.0;

/// Mean row length per CSR vector lane: lanes = the power of two at or above `mean / 2.5`.
pub const ENTRIES_PER_LANE: f64 = 2.5;

/// The SpMV of operand `b` by the fallback rule, from two cheap statistics of the matrix:
/// - DIA, one thread per row, when the band is dense: ndiag * nrows <= 1.5 nnz (stencil
///   matrices: DIA reads no column indices, so it moves a third fewer bytes than CSR);
/// - else CSR scalar when rows are short (mean below 3 entries);
/// - else CSR vector with the smallest power of two of lanes (2 to 32) at or above
///   mean row length / 2.5, one lane per work item.
///
/// The thresholds come from `autopcg bench spmv` on an H200 (2026-11-21): DIA was fastest on
/// the 7-point 192^3 Poisson matrix (0.127 ms, against 0.278 ms for cuSPARSE); CSR vector with
/// 4 lanes on a 2D P1 FEM matrix (7 entries per row), 16 lanes on s3rmt3m3 (39) and 32 on
/// bcsstk13 (42).
pub fn spmv_method(b: &CsrMatrix) -> SpmvMethod {
    spmv_method_of(
        b.nrows() as u64,
        b.nnz() as u64,
        autopcg_sparse::dia::count_diagonals(b) as u64,
    )
}

/// [`spmv_method`] of an operand of `n` rows, `nnz` entries and `ndiag` diagonals (one that
/// need not be stored).
pub fn spmv_method_of(n: u64, nnz: u64, ndiag: u64) -> SpmvMethod {
    let kernel = spmv_kernel(n, nnz, ndiag);
    let config = LaunchConfig::per_item(kernel.work_items(n, nnz), DEFAULT_THREADS);
    match kernel {
        SpmvKernel::Dia => SpmvMethod::Dia { config },
        k => SpmvMethod::Csr { kernel: k, config },
    }
}

/// The kernel the rule picks for a matrix of `n` rows, `nnz` entries and `ndiag` diagonals
/// (see [`spmv_method`]): [`SpmvKernel::Dia`], [`SpmvKernel::CsrScalar`] or
/// [`SpmvKernel::CsrVector`].
pub fn spmv_kernel(n: u64, nnz: u64, ndiag: u64) -> SpmvKernel {
    if (ndiag as f64) * (n as f64) <= DIA_FILL * nnz.max(1) as f64 {
        return SpmvKernel::Dia;
    }
    let mean = nnz as f64 / n.max(1) as f64;
    if mean < SCALAR_BELOW {
        return SpmvKernel::CsrScalar;
    }
    let lanes = (mean / ENTRIES_PER_LANE).ceil().clamp(2.0, 32.0) as u32;
    SpmvKernel::CsrVector(lanes.next_power_of_two().min(32))
}

/// The rule's pick as a candidate of the SpMV model (a thread or lane per work item:
/// [`GridPolicy::Cover`], [`DEFAULT_THREADS`] threads), from a matrix's work counts: what
/// `eval-model` measures the shipped rule by.
pub fn spmv_candidate(n: u64, nnz: u64, ndiag: u64) -> SpmvCandidate {
    SpmvCandidate::own(
        SpmvImpl::Kernel(spmv_kernel(n, nnz, ndiag)),
        DEFAULT_THREADS,
        GridPolicy::Cover,
    )
}

/// The fallback SpMV choice of operand `b` (no prediction).
pub fn spmv_choice(b: &CsrMatrix) -> SpmvChoice {
    SpmvChoice {
        method: spmv_method(b),
        predicted_ms: None,
    }
}

/// An element-wise preconditioner kernel's fallback launch for vectors of length `n`.
pub fn elementwise(kernel: PrecondKernel, n: usize, props: &DeviceProps) -> ElementwiseChoice {
    ElementwiseChoice {
        loads: kernel.loads(),
        config: kernel.default_config(n as u64, props),
        predicted_ms: None,
    }
}

/// Jacobi's step by the fallback rule, for vectors of length `n` (the plan fuses it into the
/// update; the launch serves where it runs on its own).
pub fn jacobi_choice(n: usize, props: &DeviceProps) -> PrecondChoice {
    PrecondChoice::Jacobi(elementwise(PrecondKernel::Jacobi(Loads::Double2), n, props))
}

/// The preconditioner step by the fallback rule.
pub fn precond_choice(pre: &Preconditioner, n: usize, props: &DeviceProps) -> PrecondChoice {
    match pre {
        Preconditioner::None => PrecondChoice::None,
        Preconditioner::Jacobi { .. } => jacobi_choice(n, props),
        Preconditioner::SsorFactored { k, kt, .. } => PrecondChoice::Factored {
            k: spmv_choice(k),
            kt: spmv_choice(kt),
        },
        Preconditioner::SsorExplicit { m } => PrecondChoice::Explicit { m: spmv_choice(m) },
    }
}

/// The whole GPU plan of `a` with `pre` by the fallback rule, with one-iteration graphs.
pub fn gpu_choice(a: &CsrMatrix, pre: &Preconditioner, props: &DeviceProps) -> GpuPlanChoice {
    let n = a.nrows();
    gpu_choice_of(n, spmv_choice(a), precond_choice(pre, n, props), props)
}

/// The GPU plan for vectors of length `n` with the SpMV of A and the preconditioner step
/// given, the rest by the fallback rule, with one-iteration graphs.
pub fn gpu_choice_of(
    n: usize,
    a: SpmvChoice,
    precond: PrecondChoice,
    props: &DeviceProps,
) -> GpuPlanChoice {
    let update = VectorVariant::GridV2;
    let dot3 = Dot3Kernel::LastBlock;
    GpuPlanChoice {
        fused_dots: fused_dots_launch(&a.method, n, props),
        a,
        precond,
        update: UpdateChoice {
            variant: update,
            config: update.default_config(n as u64, props),
            predicted_ms: None,
        },
        dot3: Dot3Choice {
            kernel: dot3,
            config: dot3.default_config(n as u64, props),
            predicted_ms: None,
        },
        use_graph: true,
        graph_iters: 1,
        padding: PaddingLimits::default(),
        source: FALLBACK_RULE.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg_solver::PrecondKind;

    /// Rows of `1 + 2 * half` entries at scattered columns (many diagonals), value 100 on the
    /// diagonal.
    fn scattered(n: usize, half: usize) -> CsrMatrix {
        let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
        for i in 0..n {
            r.push(i as u32);
            c.push(i as u32);
            v.push(100.0);
            for k in 1..=half {
                let j = (i * 7 + k * 131) % n;
                if j != i {
                    r.extend([i as u32, j as u32]);
                    c.extend([j as u32, i as u32]);
                    v.extend([-1.0, -1.0]);
                }
            }
        }
        CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
    }

    /// Tridiagonal [-1, 4, -1] of size n.
    fn tridiag(n: usize) -> CsrMatrix {
        let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            for (j, x) in [(i.wrapping_sub(1), -1.0), (i, 4.0), (i + 1, -1.0)] {
                if j < n {
                    r.push(i as u32);
                    c.push(j as u32);
                    v.push(x);
                }
            }
        }
        CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
    }

    /// Each branch of the rule, pinned: DIA for a dense band, CSR scalar for rows of fewer
    /// than 3 entries, CSR vector with the lanes of the mean row length otherwise.
    #[test]
    fn every_branch_of_the_rule_is_taken_where_it_should() {
        // A dense band: DIA, a thread per row.
        assert_eq!(
            spmv_method(&tridiag(5357)),
            SpmvMethod::Dia {
                config: LaunchConfig::new(256, 21)
            }
        );
        assert!(matches!(
            spmv_method(&CsrMatrix::identity(100).unwrap()),
            SpmvMethod::Dia { .. }
        ));
        // Rows of 2 entries, row i coupled to row n-1-i (every offset different, so no dense
        // band): CSR scalar.
        let n = 3000u32;
        let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
        for i in 0..n {
            r.extend([i, i]);
            c.extend([i, n - 1 - i]);
            v.extend([4.0, -1.0]);
        }
        let short = CsrMatrix::from_triplets(3000, 3000, &r, &c, &v).unwrap();
        let mean = short.nnz() as f64 / 3000.0;
        assert!(mean < SCALAR_BELOW, "mean {mean}");
        assert_eq!(
            spmv_method(&short),
            SpmvMethod::Csr {
                kernel: SpmvKernel::CsrScalar,
                config: LaunchConfig::new(256, 12)
            }
        );
        // Longer scattered rows: CSR vector, lanes from the mean (41 -> 32, 7 -> 4).
        for (half, lanes) in [(20usize, 32u32), (3, 4)] {
            let a = scattered(3000, half);
            match spmv_method(&a) {
                SpmvMethod::Csr {
                    kernel: SpmvKernel::CsrVector(l),
                    config,
                } => {
                    assert_eq!(l, lanes, "mean {}", a.nnz() as f64 / 3000.0);
                    assert_eq!(config.threads, 256);
                    assert_eq!(
                        u64::from(config.blocks),
                        (3000 * u64::from(l)).div_ceil(256)
                    );
                }
                m => panic!("expected CSR vector, got {m:?}"),
            }
        }
    }

    #[test]
    fn the_candidate_is_the_method_the_rule_runs() {
        let props = DeviceProps::hopper_like();
        for a in [tridiag(5000), scattered(3000, 3), scattered(3000, 20)] {
            let w = (a.nrows() as u64, a.nnz() as u64);
            let c = spmv_candidate(w.0, w.1, autopcg_sparse::dia::count_diagonals(&a) as u64);
            let shape = autopcg_catalog::SpmvShape {
                nrows: w.0,
                nnz: w.1,
                hyb_coo_nnz: 0,
            };
            assert_eq!(c.method_for(shape, &props), Some(spmv_method(&a)));
        }
    }

    #[test]
    fn fallback_plans_are_valid_for_every_preconditioner() {
        let props = DeviceProps::hopper_like();
        let a = tridiag(5357);
        for kind in [
            PrecondKind::None,
            PrecondKind::Jacobi,
            PrecondKind::ssor_ai(),
            PrecondKind::ssor_ai().with_form(autopcg_solver::SsorForm::Explicit),
        ] {
            let pre = Preconditioner::build(&a, &kind).unwrap();
            let c = gpu_choice(&a, &pre, &props);
            c.check(a.nrows(), &pre, &props).unwrap();
            assert_eq!(c.update.variant, VectorVariant::GridV2);
            assert_eq!(c.dot3.kernel, Dot3Kernel::LastBlock);
            assert_eq!(c.precond.kind_name(), pre.kind_name());
            let back: GpuPlanChoice =
                serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
            assert_eq!(back, c);
        }
    }
}
