//! What the GPU backend runs for each step of an iteration: a storage format, kernel and launch
//! configuration per SpMV operand (A, K, K^T, M), the variant and configuration of the fused
//! vector update and of the three-dot reduction, and whether iterations are replayed from a CUDA
//! graph.
//!
//! [`GpuPlanChoice::default_for`] is the fixed rule used until a performance model picks:
//! every SpMV by [`SpmvMethod::default_rule`] (DIA for matrices with few diagonals, else CSR
//! vector with a lane count from the mean row length), [`DEFAULT_THREADS`] threads per block,
//! the grid-stride double2 update, the single-launch three-dot reduction and double2
//! element-wise preconditioner kernels. A model replaces it by building a [`GpuPlanChoice`] itself (every
//! field is public) and passing it to [`crate::gpu::GpuBackend::new`].
use autopcg_gpu::kernels::dot::Dot3Kernel;
use autopcg_gpu::kernels::precond::{Loads, PrecondKernel};
use autopcg_gpu::kernels::spmv::SpmvKernel;
use autopcg_gpu::kernels::vector::{VectorKernel, VectorVariant};
use autopcg_gpu::{DeviceProps, Format, LaunchConfig, DEFAULT_THREADS, DOT_BLOCK_SIZES};
use autopcg_sparse::{CsrMatrix, PaddingLimits};
use serde::{Deserialize, Serialize};

use crate::{PcgError, Plan, Preconditioner};

/// Largest number of iterations one captured graph holds; [`GpuPlanChoice::with_graph_iters`]
/// clamps to it (a graph of k iterations has k times the nodes of one, and instantiating it
/// costs host time in proportion).
pub const MAX_GRAPH_ITERS: u32 = 64;

/// How one SpMV `y = B x` runs: the storage format of B, its kernel(s) and launch
/// configuration(s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum SpmvMethod {
    /// CSR with [`SpmvKernel::CsrScalar`], [`SpmvKernel::CsrVector`] or
    /// [`SpmvKernel::CsrMerge`] (load-balanced for very uneven rows; the backend makes its
    /// per-matrix workspace on upload).
    Csr {
        /// The kernel.
        kernel: SpmvKernel,
        /// Its launch.
        config: LaunchConfig,
    },
    /// ELLPACK (padded to the longest row), one thread per row.
    Ell {
        /// Its launch.
        config: LaunchConfig,
    },
    /// Diagonal storage, one thread per row.
    Dia {
        /// Its launch.
        config: LaunchConfig,
    },
    /// COO with [`SpmvKernel::CooAtomic`] or [`SpmvKernel::CooSegment`] (y is zeroed first).
    Coo {
        /// The kernel.
        kernel: SpmvKernel,
        /// Its launch.
        config: LaunchConfig,
    },
    /// HYB: an ELL part of width `split` (the one-third rule when `None`) and a COO part.
    Hyb {
        /// ELL width; `None` for the one-third rule of the host conversion.
        split: Option<usize>,
        /// Launch of the ELL part.
        ell_config: LaunchConfig,
        /// Kernel of the COO part.
        coo_kernel: SpmvKernel,
        /// Launch of the COO part.
        coo_config: LaunchConfig,
    },
}

impl SpmvMethod {
    /// The default rule for a matrix of `nrows` rows: CSR scalar, one thread per row,
    /// [`DEFAULT_THREADS`] threads per block.
    pub fn csr_scalar(nrows: usize) -> SpmvMethod {
        SpmvMethod::Csr {
            kernel: SpmvKernel::CsrScalar,
            config: LaunchConfig::per_item(nrows as u64, DEFAULT_THREADS),
        }
    }

    /// The default rule, until a model chooses, from two cheap statistics of the matrix:
    /// - DIA, one thread per row, when the band is dense: ndiag * nrows <= 1.5 nnz (stencil
    ///   matrices: DIA reads no column indices, so it moves a third fewer bytes than CSR);
    /// - else CSR scalar when rows are short (mean below 3 entries);
    /// - else CSR vector with the smallest power of two of lanes (2 to 32) at or above
    ///   mean row length / 2.5, one lane per work item.
    ///
    /// The thresholds come from `autopcg bench spmv` on an H200 (2026-11-21): DIA was fastest
    /// on the 7-point 192^3 Poisson matrix (0.127 ms, against 0.278 ms for cuSPARSE); CSR
    /// vector with 4 lanes on a 2D P1 FEM matrix (7 entries per row), 16 lanes on s3rmt3m3 (39)
    /// and 32 on bcsstk13 (42).
    pub fn default_rule(a: &CsrMatrix) -> SpmvMethod {
        let n = a.nrows();
        let nnz = a.nnz().max(1);
        let t = DEFAULT_THREADS;
        let ndiag = autopcg_sparse::dia::count_diagonals(a);
        if (ndiag as f64) * (n as f64) <= 1.5 * nnz as f64 {
            return SpmvMethod::Dia {
                config: LaunchConfig::per_item(n as u64, t),
            };
        }
        let mean = a.nnz() as f64 / n.max(1) as f64;
        if mean < 3.0 {
            return SpmvMethod::csr_scalar(n);
        }
        let lanes = (mean / 2.5).ceil().clamp(2.0, 32.0) as u32;
        let lanes = lanes.next_power_of_two().min(32);
        SpmvMethod::Csr {
            kernel: SpmvKernel::CsrVector(lanes),
            config: LaunchConfig::per_item((n as u64).saturating_mul(u64::from(lanes)), t),
        }
    }

    /// The storage format.
    pub fn format(&self) -> Format {
        match self {
            SpmvMethod::Csr { .. } => Format::Csr,
            SpmvMethod::Ell { .. } => Format::Ell,
            SpmvMethod::Dia { .. } => Format::Dia,
            SpmvMethod::Coo { .. } => Format::Coo,
            SpmvMethod::Hyb { .. } => Format::Hyb,
        }
    }

    /// The kernels launched, in order, with their configurations.
    pub fn launches(&self) -> Vec<(SpmvKernel, LaunchConfig)> {
        match *self {
            SpmvMethod::Csr { kernel, config } | SpmvMethod::Coo { kernel, config } => {
                vec![(kernel, config)]
            }
            SpmvMethod::Ell { config } => vec![(SpmvKernel::Ell, config)],
            SpmvMethod::Dia { config } => vec![(SpmvKernel::Dia, config)],
            SpmvMethod::Hyb {
                ell_config,
                coo_kernel,
                coo_config,
                ..
            } => vec![(SpmvKernel::Ell, ell_config), (coo_kernel, coo_config)],
        }
    }

    /// Kernel name(s) as the profiler records them, `+`-joined for HYB.
    pub fn kernel_name(&self) -> String {
        let names: Vec<String> = self.launches().iter().map(|(k, _)| k.to_string()).collect();
        names.join("+")
    }

    /// Launch configuration(s) in words, `+`-joined for HYB.
    pub fn config_text(&self) -> String {
        let cfgs: Vec<String> = self
            .launches()
            .iter()
            .map(|(_, c)| config_words(*c))
            .collect();
        cfgs.join(" + ")
    }

    /// Checks that each kernel reads this format and each configuration fits the device.
    pub fn check(&self, operand: &str, props: &DeviceProps) -> Result<(), PcgError> {
        let format = self.format();
        for (i, (kernel, cfg)) in self.launches().into_iter().enumerate() {
            let expected = match (format, i) {
                (Format::Hyb, 0) => Format::Ell,
                (Format::Hyb, _) => Format::Coo,
                (f, _) => f,
            };
            if kernel.format() != expected {
                return Err(PcgError::InvalidParameter(format!(
                    "SpMV of {operand}: kernel {kernel} reads {} but the plan stores {operand} as {format}",
                    kernel.format()
                )));
            }
            check_config(operand, &kernel.to_string(), cfg, props)?;
            if kernel.needs_whole_warps() && cfg.threads % 32 != 0 {
                return Err(PcgError::InvalidParameter(format!(
                    "SpMV of {operand}: {kernel} needs whole warps, got {} threads per block",
                    cfg.threads
                )));
            }
        }
        Ok(())
    }
}

/// One SpMV operand's choice.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpmvChoice {
    /// Format, kernel, configuration.
    pub method: SpmvMethod,
    /// Predicted time in ms when a model chose it.
    pub predicted_ms: Option<f64>,
}

impl SpmvChoice {
    /// The default rule ([`SpmvMethod::default_rule`]), no prediction.
    pub fn default_for(b: &CsrMatrix) -> SpmvChoice {
        SpmvChoice {
            method: SpmvMethod::default_rule(b),
            predicted_ms: None,
        }
    }
}

/// The fused four-vector update.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UpdateChoice {
    /// How elements map to threads.
    pub variant: VectorVariant,
    /// Its launch.
    pub config: LaunchConfig,
    /// Predicted time in ms when a model chose it.
    pub predicted_ms: Option<f64>,
}

/// The fused three-dot reduction with the scalar recurrence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Dot3Choice {
    /// Two launches or one (last block finishes).
    pub kernel: Dot3Kernel,
    /// Launch of the first (or only) stage; threads must be one of [`DOT_BLOCK_SIZES`].
    pub config: LaunchConfig,
    /// Predicted time in ms when a model chose it.
    pub predicted_ms: Option<f64>,
}

/// An element-wise preconditioner kernel (Jacobi, or the diagonal scaling of factored SSOR-AI).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ElementwiseChoice {
    /// Scalar or double2 loads.
    pub loads: Loads,
    /// Its launch (grid-stride: any block count).
    pub config: LaunchConfig,
    /// Predicted time in ms when a model chose it.
    pub predicted_ms: Option<f64>,
}

/// How `u = M^-1 r` runs; the variant must match the [`Preconditioner`] given to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum PrecondChoice {
    /// No preconditioner: a device copy `u = r`.
    None,
    /// `u = inv_diag .* r`.
    Jacobi(ElementwiseChoice),
    /// Factored SSOR-AI: `t = K r; t = inv_diag .* t; u = K^T t`.
    Factored {
        /// SpMV with K.
        k: SpmvChoice,
        /// The diagonal scaling.
        scale: ElementwiseChoice,
        /// SpMV with K^T.
        kt: SpmvChoice,
    },
    /// Explicit SSOR-AI: `u = M r`.
    Explicit {
        /// SpMV with M = K^T diag K.
        m: SpmvChoice,
    },
}

impl PrecondChoice {
    /// The default rule for `pre`.
    pub fn default_for(pre: &Preconditioner, n: usize, props: &DeviceProps) -> PrecondChoice {
        let elementwise = |kernel: PrecondKernel| ElementwiseChoice {
            loads: Loads::Double2,
            config: kernel.default_config(n as u64, props),
            predicted_ms: None,
        };
        match pre {
            Preconditioner::None => PrecondChoice::None,
            Preconditioner::Jacobi { .. } => {
                PrecondChoice::Jacobi(elementwise(PrecondKernel::Jacobi(Loads::Double2)))
            }
            Preconditioner::SsorFactored { k, kt, .. } => PrecondChoice::Factored {
                k: SpmvChoice::default_for(k),
                scale: elementwise(PrecondKernel::DiagScale(Loads::Double2)),
                kt: SpmvChoice::default_for(kt),
            },
            Preconditioner::SsorExplicit { m } => PrecondChoice::Explicit {
                m: SpmvChoice::default_for(m),
            },
        }
    }

    /// The name of the preconditioner this choice is for, as [`Preconditioner::kind_name`]
    /// spells it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            PrecondChoice::None => "none",
            PrecondChoice::Jacobi(_) => "jacobi",
            PrecondChoice::Factored { .. } => "ssor-ai-factored",
            PrecondChoice::Explicit { .. } => "ssor-ai-explicit",
        }
    }

    fn matches(&self, pre: &Preconditioner) -> bool {
        matches!(
            (self, pre),
            (PrecondChoice::None, Preconditioner::None)
                | (PrecondChoice::Jacobi(_), Preconditioner::Jacobi { .. })
                | (
                    PrecondChoice::Factored { .. },
                    Preconditioner::SsorFactored { .. }
                )
                | (
                    PrecondChoice::Explicit { .. },
                    Preconditioner::SsorExplicit { .. }
                )
        )
    }
}

/// Everything the GPU backend needs to know about how to run each step. Build it with
/// [`GpuPlanChoice::default_for`] or field by field (a performance model does the latter).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPlanChoice {
    /// SpMV with A (`w = A u`; also the start and the true residual).
    pub a: SpmvChoice,
    /// The preconditioner application.
    pub precond: PrecondChoice,
    /// The fused update.
    pub update: UpdateChoice,
    /// The three-dot reduction.
    pub dot3: Dot3Choice,
    /// Replay iterations from captured CUDA graphs instead of launching kernel by kernel.
    pub use_graph: bool,
    /// Iterations per captured graph (1..=[`MAX_GRAPH_ITERS`]); a batch of this many is
    /// launched at once, and what is left when the driver polls goes one iteration at a time.
    /// Best equal to the driver's `check_every` (or a divisor of it).
    pub graph_iters: u32,
    /// Limits on the padded formats (ELL, DIA, HYB) when the matrices are converted.
    pub padding: PaddingLimits,
    /// Where the choice came from ("default rule", a model file...), for the plan.
    pub source: String,
}

/// The [`GpuPlanChoice::source`] of [`GpuPlanChoice::default_for`].
pub const DEFAULT_RULE: &str = "default rule (DIA or CSR vector by matrix shape, 256 threads, \
                                cg_update grid-stride double2, dot3 last-block)";

impl GpuPlanChoice {
    /// The documented default rule, until a model chooses: [`SpmvMethod::default_rule`] for
    /// every SpMV operand; the grid-stride double2
    /// update and the last-block three-dot reduction, each [`DEFAULT_THREADS`] threads and one
    /// resident wave of blocks; double2 element-wise preconditioner kernels; one-iteration CUDA
    /// graphs.
    pub fn default_for(a: &CsrMatrix, pre: &Preconditioner, props: &DeviceProps) -> Self {
        let n = a.nrows();
        let update = VectorVariant::GridV2;
        let dot3 = Dot3Kernel::LastBlock;
        GpuPlanChoice {
            a: SpmvChoice::default_for(a),
            precond: PrecondChoice::default_for(pre, n, props),
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
            source: DEFAULT_RULE.to_string(),
        }
    }

    /// Turns graph replay on or off.
    pub fn with_graph(mut self, on: bool) -> Self {
        self.use_graph = on;
        self
    }

    /// Sets the iterations per captured graph to `k` clamped to 1..=[`MAX_GRAPH_ITERS`].
    pub fn with_graph_iters(mut self, k: u32) -> Self {
        self.graph_iters = k.clamp(1, MAX_GRAPH_ITERS);
        self
    }

    /// The largest divisor of `check_every` not above [`MAX_GRAPH_ITERS`]: graphs of that many
    /// iterations fill every polling interval exactly.
    pub fn graph_iters_for(check_every: usize) -> u32 {
        let c = check_every.max(1);
        (1..=MAX_GRAPH_ITERS as usize)
            .rev()
            .find(|k| c % k == 0)
            .unwrap_or(1) as u32
    }

    /// Checks the choice for vectors of length `n`, the preconditioner `pre` and the device:
    /// the preconditioner step matches `pre`, each kernel reads the format it is given, every
    /// configuration fits the device (and covers n where a kernel needs a thread per item), the
    /// reduction's block size is one it is compiled for, and `graph_iters` is in range.
    pub fn check(
        &self,
        n: usize,
        pre: &Preconditioner,
        props: &DeviceProps,
    ) -> Result<(), PcgError> {
        if !self.precond.matches(pre) {
            return Err(PcgError::InvalidParameter(format!(
                "the GPU plan's preconditioner step is for {} but the preconditioner is {}",
                self.precond.kind_name(),
                pre.kind_name()
            )));
        }
        self.a.method.check("A", props)?;
        match &self.precond {
            PrecondChoice::None => {}
            PrecondChoice::Jacobi(e) => check_config(
                "M",
                &PrecondKernel::Jacobi(e.loads).to_string(),
                e.config,
                props,
            )?,
            PrecondChoice::Factored { k, scale, kt } => {
                k.method.check("K", props)?;
                check_config(
                    "M",
                    &PrecondKernel::DiagScale(scale.loads).to_string(),
                    scale.config,
                    props,
                )?;
                kt.method.check("K^T", props)?;
            }
            PrecondChoice::Explicit { m } => m.method.check("M", props)?,
        }
        check_config(
            "the update",
            &VectorKernel::CgUpdate(self.update.variant).to_string(),
            self.update.config,
            props,
        )?;
        if let Some(items) = self.update.variant.items(n as u64) {
            if self.update.config.total_threads() < items {
                return Err(PcgError::InvalidParameter(format!(
                    "the update {} needs a thread per item ({items} items) but {} threads x {} blocks cover {}",
                    VectorKernel::CgUpdate(self.update.variant),
                    self.update.config.threads,
                    self.update.config.blocks,
                    self.update.config.total_threads()
                )));
            }
        }
        check_config(
            "the reduction",
            &self.dot3.kernel.to_string(),
            self.dot3.config,
            props,
        )?;
        if !DOT_BLOCK_SIZES.contains(&self.dot3.config.threads) {
            return Err(PcgError::InvalidParameter(format!(
                "the reduction {} is compiled for {DOT_BLOCK_SIZES:?} threads per block, the plan asks for {}",
                self.dot3.kernel, self.dot3.config.threads
            )));
        }
        if !(1..=MAX_GRAPH_ITERS).contains(&self.graph_iters) {
            return Err(PcgError::InvalidParameter(format!(
                "graph_iters must be in 1..={MAX_GRAPH_ITERS}, got {}",
                self.graph_iters
            )));
        }
        Ok(())
    }

    /// Every step of one iteration, in execution order, for reporting.
    pub fn plan(&self) -> Plan {
        let mut plan = Plan::default();
        plan.push(
            "update",
            "-",
            &VectorKernel::CgUpdate(self.update.variant).to_string(),
            config_words(self.update.config),
            self.update.predicted_ms,
        );
        let spmv = |plan: &mut Plan, step: &str, c: &SpmvChoice| {
            plan.push(
                step,
                &c.method.format().to_string(),
                &c.method.kernel_name(),
                c.method.config_text(),
                c.predicted_ms,
            );
        };
        match &self.precond {
            PrecondChoice::None => plan.push("precond", "-", "copy", "device copy u = r", None),
            PrecondChoice::Jacobi(e) => plan.push(
                "precond",
                "-",
                &PrecondKernel::Jacobi(e.loads).to_string(),
                config_words(e.config),
                e.predicted_ms,
            ),
            PrecondChoice::Factored { k, scale, kt } => {
                spmv(&mut plan, "precond (K)", k);
                plan.push(
                    "precond (scale)",
                    "-",
                    &PrecondKernel::DiagScale(scale.loads).to_string(),
                    config_words(scale.config),
                    scale.predicted_ms,
                );
                spmv(&mut plan, "precond (K^T)", kt);
            }
            PrecondChoice::Explicit { m } => spmv(&mut plan, "precond (M)", m),
        }
        spmv(&mut plan, "spmv", &self.a);
        plan.push(
            "dots",
            "-",
            // The variant's name as the profiler records it (the entry points that take the
            // iteration from the scalar buffer do the same work).
            &self.dot3.kernel.to_string(),
            config_words(self.dot3.config),
            self.dot3.predicted_ms,
        );
        plan.source = if self.use_graph {
            format!(
                "{}; CUDA graphs of {} iteration(s)",
                self.source, self.graph_iters
            )
        } else {
            format!("{}; kernel by kernel", self.source)
        };
        plan
    }
}

/// "256 threads x 21 blocks".
fn config_words(c: LaunchConfig) -> String {
    format!("{} threads x {} blocks", c.threads, c.blocks)
}

fn check_config(
    operand: &str,
    kernel: &str,
    cfg: LaunchConfig,
    props: &DeviceProps,
) -> Result<(), PcgError> {
    cfg.check(kernel, props)
        .map_err(|e| PcgError::InvalidParameter(format!("{operand}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PrecondKind;

    fn h100_like() -> DeviceProps {
        autopcg_gpu::testing::hopper_like_props()
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

    #[test]
    fn default_rule_picks_csr_vector_lanes_from_the_mean_row_length() {
        // Rows of 1 + 2 * 20 entries at scattered offsets: many diagonals, mean 41 -> 32 lanes;
        // then rows of 1 + 2 * 3 entries, mean 7 -> 4 lanes; a diagonal matrix -> DIA.
        for (half, lanes) in [(20usize, 32u32), (3, 4)] {
            let n = 3000;
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
            let a = CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap();
            match SpmvMethod::default_rule(&a) {
                SpmvMethod::Csr {
                    kernel: SpmvKernel::CsrVector(l),
                    config,
                } => {
                    assert_eq!(l, lanes, "mean {}", a.nnz() as f64 / n as f64);
                    assert_eq!(config.threads, 256);
                    assert!(u64::from(config.blocks) * 256 >= (n as u64) * u64::from(l));
                }
                m => panic!("expected CSR vector, got {m:?}"),
            }
        }
        let d = CsrMatrix::identity(100).unwrap();
        assert!(matches!(
            SpmvMethod::default_rule(&d),
            SpmvMethod::Dia { .. }
        ));
    }

    #[test]
    fn default_rule_is_valid_and_described_by_the_plan() {
        let props = h100_like();
        let a = tridiag(5357);
        for kind in [
            PrecondKind::None,
            PrecondKind::Jacobi,
            PrecondKind::ssor_ai(),
            PrecondKind::ssor_ai().with_form(crate::SsorForm::Explicit),
        ] {
            let pre = Preconditioner::build(&a, &kind).unwrap();
            let c = GpuPlanChoice::default_for(&a, &pre, &props);
            c.check(a.nrows(), &pre, &props).unwrap();
            // Three diagonals holding 3n - 2 entries: the band is dense, so DIA.
            assert_eq!(
                c.a.method,
                SpmvMethod::Dia {
                    config: LaunchConfig::new(256, 21)
                }
            );
            assert_eq!(c.update.variant, VectorVariant::GridV2);
            assert_eq!(c.dot3.kernel, Dot3Kernel::LastBlock);
            assert_eq!(c.precond.kind_name(), pre.kind_name());
            let plan = c.plan();
            let steps: Vec<&str> = plan.steps.iter().map(|s| s.step.as_str()).collect();
            let want: Vec<&str> = match kind {
                PrecondKind::SsorAi {
                    form: crate::SsorForm::Factored,
                    ..
                } => vec![
                    "update",
                    "precond (K)",
                    "precond (scale)",
                    "precond (K^T)",
                    "spmv",
                    "dots",
                ],
                PrecondKind::SsorAi { .. } => vec!["update", "precond (M)", "spmv", "dots"],
                _ => vec!["update", "precond", "spmv", "dots"],
            };
            assert_eq!(steps, want, "{kind}");
            assert_eq!(plan.steps[0].kernel, "cg_update_grid_v2");
            assert_eq!(plan.steps.last().unwrap().kernel, "dot3_last_block");
            let spmv = plan.steps.iter().find(|s| s.step == "spmv").unwrap();
            assert_eq!(
                (spmv.format.as_str(), spmv.kernel.as_str()),
                ("dia", "spmv_dia")
            );
            assert!(plan.source.starts_with(DEFAULT_RULE));
            // The choice survives a JSON round trip (models write them to files).
            let back: GpuPlanChoice =
                serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
            assert_eq!(back, c);
        }
    }

    #[test]
    fn bad_choices_are_refused() {
        let props = h100_like();
        let a = tridiag(100);
        let jac = Preconditioner::build(&a, &PrecondKind::Jacobi).unwrap();
        let none = Preconditioner::None;
        let c = GpuPlanChoice::default_for(&a, &jac, &props);
        let e = c.check(100, &none, &props).unwrap_err();
        assert!(e.to_string().contains("jacobi"), "{e}");

        let mut bad = c.clone();
        bad.a.method = SpmvMethod::Csr {
            kernel: SpmvKernel::Ell,
            config: LaunchConfig::new(256, 1),
        };
        assert!(bad.check(100, &jac, &props).is_err());

        let mut bad = c.clone();
        bad.a.method = SpmvMethod::Csr {
            kernel: SpmvKernel::CsrVector(8),
            config: LaunchConfig::new(100, 8),
        };
        assert!(bad
            .check(100, &jac, &props)
            .unwrap_err()
            .to_string()
            .contains("warps"));

        let mut bad = c.clone();
        bad.dot3.config.threads = 96;
        assert!(bad.check(100, &jac, &props).is_err());

        let mut bad = c.clone();
        bad.update = UpdateChoice {
            variant: VectorVariant::Elem,
            config: LaunchConfig::new(32, 3),
            predicted_ms: None,
        };
        assert!(bad.check(100, &jac, &props).is_err());
        bad.update.config = LaunchConfig::new(32, 4);
        bad.check(100, &jac, &props).unwrap();

        let mut bad = c.clone();
        bad.graph_iters = 0;
        assert!(bad.check(100, &jac, &props).is_err());
        assert_eq!(
            c.clone().with_graph_iters(1000).graph_iters,
            MAX_GRAPH_ITERS
        );
        assert_eq!(c.with_graph_iters(0).graph_iters, 1);
    }

    #[test]
    fn graph_iterations_divide_the_polling_interval() {
        assert_eq!(GpuPlanChoice::graph_iters_for(1), 1);
        assert_eq!(GpuPlanChoice::graph_iters_for(7), 7);
        assert_eq!(GpuPlanChoice::graph_iters_for(50), 50);
        assert_eq!(GpuPlanChoice::graph_iters_for(64), 64);
        assert_eq!(GpuPlanChoice::graph_iters_for(100), 50);
        assert_eq!(GpuPlanChoice::graph_iters_for(127), 1);
        assert_eq!(GpuPlanChoice::graph_iters_for(0), 1);
    }

    #[test]
    fn merge_path_csr_is_a_csr_method() {
        let props = h100_like();
        let m = SpmvMethod::Csr {
            kernel: SpmvKernel::CsrMerge,
            config: LaunchConfig::new(256, 40),
        };
        m.check("A", &props).unwrap();
        assert_eq!(m.format(), Format::Csr);
        assert_eq!(m.kernel_name(), "spmv_csr_merge");
        // Warp-cooperative: whole warps only.
        let odd = SpmvMethod::Csr {
            kernel: SpmvKernel::CsrMerge,
            config: LaunchConfig::new(100, 40),
        };
        assert!(odd
            .check("A", &props)
            .unwrap_err()
            .to_string()
            .contains("warps"));
        let a = tridiag(300);
        let pre = Preconditioner::build(&a, &PrecondKind::Jacobi).unwrap();
        let mut c = GpuPlanChoice::default_for(&a, &pre, &props);
        c.a.method = m;
        c.check(300, &pre, &props).unwrap();
        let back: GpuPlanChoice =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn hyb_plan_names_both_parts() {
        let m = SpmvMethod::Hyb {
            split: None,
            ell_config: LaunchConfig::new(256, 4),
            coo_kernel: SpmvKernel::CooSegment,
            coo_config: LaunchConfig::new(128, 8),
        };
        assert_eq!(m.kernel_name(), "spmv_ell+spmv_coo_segment");
        assert_eq!(
            m.config_text(),
            "256 threads x 4 blocks + 128 threads x 8 blocks"
        );
        m.check("A", &h100_like()).unwrap();
        let wrong = SpmvMethod::Hyb {
            split: None,
            ell_config: LaunchConfig::new(256, 4),
            coo_kernel: SpmvKernel::CsrScalar,
            coo_config: LaunchConfig::new(128, 8),
        };
        assert!(wrong.check("A", &h100_like()).is_err());
    }
}
