//! What the GPU backend runs for each step of an iteration: a storage format, kernel and launch
//! configuration per SpMV operand (A, K, K^T, M), the variant and configuration of the fused
//! vector update and of the three-dot reduction, and whether iterations are replayed from a CUDA
//! graph; for a row block, also the kernel and launch adding its halo part ([`HaloMethod`]).
//!
//! These are plan types only: the generator crate chooses them (from a performance model or
//! its fallback rule); the backend checks and executes them.
pub use autopcg_catalog::SpmvMethod;
use autopcg_catalog::{
    DeviceProps, Dot3Kernel, LaunchConfig, LaunchError, Loads, PrecondKernel, SpmvKernel, VectorOp,
    VectorVariant, DOT_BLOCK_SIZES,
};
use autopcg_sparse::PaddingLimits;
use serde::{Deserialize, Serialize};

use crate::{PcgError, Plan, PrecondRef, Preconditioner};

impl From<LaunchError> for PcgError {
    fn from(e: LaunchError) -> Self {
        PcgError::InvalidParameter(e.to_string())
    }
}

/// Largest number of iterations one captured graph holds; [`GpuPlanChoice::with_graph_iters`]
/// clamps to it (a graph of k iterations has k times the nodes of one, and instantiating it
/// costs host time in proportion).
pub const MAX_GRAPH_ITERS: u32 = 64;

/// One SpMV operand's choice.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpmvChoice {
    /// Format, kernel, configuration.
    pub method: SpmvMethod,
    /// Predicted time in ms when a model chose it.
    pub predicted_ms: Option<f64>,
}

/// Threads per block of a halo multiply chosen without a model ([`HaloMethod::fixed`]).
pub const HALO_THREADS: u32 = 256;

/// The multiply of a row block's halo part, added into the local part's product (`y += H h`):
/// a CSR row kernel with an add variant ([`SpmvKernel::add_entry_point`]: scalar, one thread
/// per row, or vector with L lanes per row) and its launch. Both kernels loop grid-stride over
/// the rows, so any block count covers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaloMethod {
    /// The kernel whose add variant runs.
    pub kernel: SpmvKernel,
    /// Its launch.
    pub config: LaunchConfig,
}

impl HaloMethod {
    /// The rule without a model's choice, for a block of `rows` rows: CSR scalar,
    /// [`HALO_THREADS`] threads per block, the blocks that cover the rows (at most 65535).
    pub fn fixed(rows: usize) -> HaloMethod {
        let blocks = rows.div_ceil(HALO_THREADS as usize).clamp(1, 65_535) as u32;
        HaloMethod {
            kernel: SpmvKernel::CsrScalar,
            config: LaunchConfig::new(HALO_THREADS, blocks),
        }
    }

    /// The entry point launched (`spmv_csr_scalar_add`, `spmv_csr_vector_add_8`...), or `None`
    /// for a kernel without an add variant.
    pub fn entry_point(&self) -> Option<&'static str> {
        self.kernel.add_entry_point()
    }

    /// Checks that the kernel has an add variant and that the launch fits it and the device
    /// (whole warps for the vector kernels).
    pub fn check(&self, props: &DeviceProps) -> Result<(), LaunchError> {
        if self.entry_point().is_none() {
            return Err(LaunchError::new(
                "SpMV of the halo part",
                format!(
                    "{} has no add variant (only CSR scalar and CSR vector add into y)",
                    self.kernel
                ),
            ));
        }
        self.kernel
            .check_launch(self.config, props)
            .map_err(|e| LaunchError::new("SpMV of the halo part", e.to_string()))
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

/// An element-wise preconditioner kernel (Jacobi's).
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
    /// Factored SSOR-AI: `t = K r; u = (K^T diag(s)) t` (the diagonal scaling is folded into
    /// the stored `K^T`, see [`Preconditioner::SsorFactored`]).
    Factored {
        /// SpMV with K.
        k: SpmvChoice,
        /// SpMV with K^T diag(s).
        kt: SpmvChoice,
    },
    /// Explicit SSOR-AI: `u = M r`.
    Explicit {
        /// SpMV with M = K^T diag K.
        m: SpmvChoice,
    },
}

impl PrecondChoice {
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

    fn matches(&self, pre: PrecondRef<'_>) -> bool {
        match pre {
            PrecondRef::Built(pre) => matches!(
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
            ),
            PrecondRef::SsorK1FromA { .. } | PrecondRef::SsorK2FromA { .. } => {
                matches!(self, PrecondChoice::Factored { .. })
            }
            PrecondRef::SsorK1ExplicitFromA { .. } => {
                matches!(self, PrecondChoice::Explicit { .. })
            }
            PrecondRef::JacobiFromA { .. } => matches!(self, PrecondChoice::Jacobi(_)),
        }
    }
}

/// Everything the GPU backend needs to know about how to run each step, as the generator
/// chose it.
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
    /// The launch of A's SpMV variant that adds the three dots in its epilogue
    /// ([`SpmvKernel::dot3_entry_point`]), which then replaces the SpMV and the reduction of
    /// every iteration (the start and the residual checks still run them apart); `None`: the
    /// SpMV and [`GpuPlanChoice::dot3`] run one after the other. See [`fused_dots_launch`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_dots: Option<LaunchConfig>,
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

impl GpuPlanChoice {
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

    /// The same plan with A's product run by `a`, the dots in its epilogue decided again for
    /// it by the rule ([`fused_dots_launch`] for vectors of length `n` on `props`).
    pub fn with_a(mut self, a: SpmvChoice, n: usize, props: &DeviceProps) -> Self {
        self.fused_dots = fused_dots_launch(&a.method, n, props);
        self.a = a;
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
    pub fn check<'p>(
        &self,
        n: usize,
        pre: impl Into<PrecondRef<'p>>,
        props: &DeviceProps,
    ) -> Result<(), PcgError> {
        let pre = pre.into();
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
            PrecondChoice::Factored { k, kt } => {
                k.method.check("K", props)?;
                kt.method.check("K^T", props)?;
            }
            PrecondChoice::Explicit { m } => m.method.check("M", props)?,
        }
        check_config(
            "the update",
            &self.update_op().kernel(self.update.variant).to_string(),
            self.update.config,
            props,
        )?;
        if let Some(items) = self.update.variant.items(n as u64) {
            if self.update.config.total_threads() < items {
                return Err(PcgError::InvalidParameter(format!(
                    "the update {} needs a thread per item ({items} items) but {} threads x {} blocks cover {}",
                    self.update_op().kernel(self.update.variant),
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
        if let Some(cfg) = self.fused_dots {
            let Some((kernel, _)) = self.a.method.dot3_variant() else {
                return Err(PcgError::InvalidParameter(format!(
                    "the plan adds the dots in the epilogue of A's SpMV (fused_dots), but {} has \
                     no such variant (only one launch of CSR scalar, CSR vector, ELL or DIA): \
                     leave fused_dots out of a plan whose A runs another method",
                    self.a.method.kernel_name()
                )));
            };
            kernel
                .check_dot3_launch(cfg, props)
                .map_err(|e| PcgError::InvalidParameter(format!("A with the dots: {e}")))?;
        }
        if !(1..=MAX_GRAPH_ITERS).contains(&self.graph_iters) {
            return Err(PcgError::InvalidParameter(format!(
                "graph_iters must be in 1..={MAX_GRAPH_ITERS}, got {}",
                self.graph_iters
            )));
        }
        Ok(())
    }

    /// The update kernel's operation: without a preconditioner u is r (no copy), Jacobi is
    /// fused into the update (which writes the next u); the other preconditioners write u with
    /// their own kernels.
    pub fn update_op(&self) -> VectorOp {
        match self.precond {
            PrecondChoice::None => VectorOp::CgUpdateNoPre,
            PrecondChoice::Jacobi(_) => VectorOp::CgUpdateJacobi,
            PrecondChoice::Factored { .. } | PrecondChoice::Explicit { .. } => VectorOp::CgUpdate,
        }
    }

    /// Every step of one iteration, in execution order, for reporting.
    pub fn plan(&self) -> Plan {
        let mut plan = Plan::default();
        plan.push(
            "update",
            "-",
            &self.update_op().kernel(self.update.variant).to_string(),
            self.update.config.words(),
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
            PrecondChoice::None => plan.push("precond", "-", "none", "u is r: no kernel", None),
            PrecondChoice::Jacobi(_) => plan.push(
                "precond",
                "-",
                "jacobi (fused)",
                "u = D^-1 r written by the update: no kernel",
                None,
            ),
            PrecondChoice::Factored { k, kt } => {
                spmv(&mut plan, "precond (K)", k);
                spmv(&mut plan, "precond (K^T S)", kt);
            }
            PrecondChoice::Explicit { m } => spmv(&mut plan, "precond (M)", m),
        }
        match (self.fused_dots, self.a.method.dot3_variant()) {
            (Some(cfg), Some((kernel, _))) => {
                plan.push(
                    "spmv",
                    &self.a.method.format().to_string(),
                    kernel.dot3_entry_point().unwrap_or_default(),
                    cfg.words(),
                    self.a.predicted_ms,
                );
                plan.push(
                    "dots",
                    "-",
                    "in the spmv's epilogue",
                    "(r,u), (w,u), (r,r) of each row as it is written: no kernel",
                    None,
                );
            }
            _ => {
                spmv(&mut plan, "spmv", &self.a);
                plan.push(
                    "dots",
                    "-",
                    // The variant's name as the profiler records it (the entry points that take
                    // the iteration from the scalar buffer do the same work).
                    &self.dot3.kernel.to_string(),
                    self.dot3.config.words(),
                    self.dot3.predicted_ms,
                );
            }
        }
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

impl GpuPlanChoice {
    /// The steps one row block of a split solve runs with this choice for its local part (the
    /// multi-block GPU solver, `blocks::gpu`, and the generated split driver): the update with u
    /// in its own vector ([`VectorOp::CgUpdate`], the variant and launch chosen), the
    /// preconditioner applied from r (Jacobi as its own kernel, none as a copy of r), the
    /// products as chosen, and the block's three dots into its slot (`dot3_slot`, the launch
    /// chosen for the reduction), whose sum over the blocks runs the recurrence.
    pub fn block_plan(&self) -> Plan {
        // A block's SpMV never adds the dots (they go to its slot).
        let full = GpuPlanChoice {
            fused_dots: None,
            ..self.clone()
        }
        .plan();
        let mut plan = Plan::default();
        for st in full.steps {
            match st.step.as_str() {
                "update" => plan.push(
                    "update",
                    "-",
                    &VectorOp::CgUpdate.kernel(self.update.variant).to_string(),
                    self.update.config.words(),
                    self.update.predicted_ms,
                ),
                "precond" => match &self.precond {
                    PrecondChoice::Jacobi(e) => plan.push(
                        "precond",
                        "-",
                        &PrecondKernel::Jacobi(e.loads).to_string(),
                        e.config.words(),
                        e.predicted_ms,
                    ),
                    _ => plan.push("precond", "-", "copy", "u = r (a device copy)", None),
                },
                "dots" => plan.push(
                    "dots",
                    "-",
                    "dot3_slot",
                    format!(
                        "{}; the blocks' slots summed by dot3_slots_advance_next",
                        self.dot3.config.words()
                    ),
                    None,
                ),
                _ => plan.steps.push(st),
            }
        }
        plan.source = format!("{}; kernel by kernel", self.source);
        plan
    }
}

/// The launch of A's SpMV with the three dots in its epilogue, for vectors of length `n`, when
/// A's method has that variant ([`SpmvMethod::dot3_variant`]: one launch of CSR scalar, CSR
/// vector, ELL or DIA) and its threads per block are whole warps: the method's threads, and its
/// blocks capped at one resident wave ([`LaunchConfig::grid_stride`]: the kernels stride over
/// the rows, and the last block adds three partial sums per block). `None` otherwise.
///
/// This is the fallback rule, which fuses whenever it can: the fused kernel reads r beside the
/// product (nothing more when u is r) and does the reduction's work where the rows are written,
/// in place of a pass of the reduction over r, u and w and its launch. A model file that holds
/// the tune's epilogue measurements weighs the two instead (the generator's selection).
pub fn fused_dots_launch(a: &SpmvMethod, n: usize, props: &DeviceProps) -> Option<LaunchConfig> {
    let (kernel, cfg) = a.dot3_variant()?;
    kernel.dot3_launch(cfg, n as u64, props, None)
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

    #[test]
    fn the_dots_go_into_the_epilogue_of_every_row_kernel_that_has_the_variant() {
        let p = DeviceProps::hopper_like();
        let n = 10_000_000;
        let wave = |t: u32| autopcg_catalog::launch::wave_blocks(t, &p) as u32;
        let big = LaunchConfig::new(256, 40_000);
        // One thread or one group of lanes per row: fused, the blocks capped at one wave.
        for m in [
            SpmvMethod::Dia { config: big },
            SpmvMethod::Ell { config: big },
            SpmvMethod::Csr {
                kernel: SpmvKernel::CsrScalar,
                config: big,
            },
            SpmvMethod::Csr {
                kernel: SpmvKernel::CsrVector(8),
                config: big,
            },
        ] {
            assert_eq!(
                fused_dots_launch(&m, n, &p),
                Some(LaunchConfig::new(256, wave(256))),
                "{m:?}"
            );
        }
        // Fewer blocks than a wave are kept.
        let small = SpmvMethod::Dia {
            config: LaunchConfig::new(128, 5),
        };
        assert_eq!(
            fused_dots_launch(&small, 600, &p),
            Some(LaunchConfig::new(128, 5))
        );
        // Not fused: the merge and COO kernels, HYB's two launches, cuSPARSE, and a block size
        // that is not whole warps (the epilogue's block reduction).
        for m in [
            SpmvMethod::Csr {
                kernel: SpmvKernel::CsrMerge,
                config: big,
            },
            SpmvMethod::Coo {
                kernel: SpmvKernel::CooSegment,
                config: big,
            },
            SpmvMethod::Hyb {
                split: None,
                ell_config: big,
                coo_kernel: SpmvKernel::CooAtomic,
                coo_config: big,
            },
            SpmvMethod::Cusparse {
                alg: autopcg_catalog::CusparseAlg::Default,
            },
            SpmvMethod::Dia {
                config: LaunchConfig::new(100, 50),
            },
        ] {
            assert_eq!(fused_dots_launch(&m, n, &p), None, "{m:?}");
        }
    }

    #[test]
    fn a_plan_fusing_the_dots_into_a_method_without_the_variant_is_refused() {
        let p = DeviceProps::hopper_like();
        let n = 1000;
        let dia = SpmvChoice {
            method: SpmvMethod::Dia {
                config: LaunchConfig::new(128, 8),
            },
            predicted_ms: None,
        };
        let ok = GpuPlanChoice {
            a: dia,
            precond: PrecondChoice::None,
            update: UpdateChoice {
                variant: VectorVariant::GridV2,
                config: LaunchConfig::new(256, 4),
                predicted_ms: None,
            },
            dot3: Dot3Choice {
                kernel: Dot3Kernel::LastBlock,
                config: LaunchConfig::new(256, 4),
                predicted_ms: None,
            },
            fused_dots: fused_dots_launch(&dia.method, n, &p),
            use_graph: true,
            graph_iters: 1,
            padding: PaddingLimits::default(),
            source: "test".into(),
        };
        assert!(ok.fused_dots.is_some());
        ok.check(n, &Preconditioner::None, &p).unwrap();
        // A hand-edited plan: A swapped for HYB, the fused launch kept.
        let hyb = SpmvChoice {
            method: SpmvMethod::Hyb {
                split: None,
                ell_config: LaunchConfig::new(128, 8),
                coo_kernel: SpmvKernel::CooAtomic,
                coo_config: LaunchConfig::new(128, 8),
            },
            predicted_ms: None,
        };
        let bad = GpuPlanChoice {
            a: hyb,
            ..ok.clone()
        };
        let e = bad
            .check(n, &Preconditioner::None, &p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fused_dots") && e.contains("spmv_ell+spmv_coo_atomic"),
            "{e}"
        );
        // with_a decides again, and the plan is valid.
        let fixed = ok.clone().with_a(hyb, n, &p);
        assert_eq!(fixed.fused_dots, None);
        fixed.check(n, &Preconditioner::None, &p).unwrap();
        // A fused launch that is not whole warps is refused, naming the entry point.
        let odd = GpuPlanChoice {
            fused_dots: Some(LaunchConfig::new(100, 8)),
            ..ok
        };
        let e = odd
            .check(n, &Preconditioner::None, &p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spmv_dia_dot3_next") && e.contains("warps"),
            "{e}"
        );
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
    fn the_fixed_halo_method_is_csr_scalar_over_the_rows_and_checks_refuse_bad_launches() {
        let p = DeviceProps::hopper_like();
        let f = HaloMethod::fixed(1000);
        assert_eq!(f.kernel, SpmvKernel::CsrScalar);
        assert_eq!(f.config, LaunchConfig::new(HALO_THREADS, 4));
        assert_eq!(f.entry_point(), Some("spmv_csr_scalar_add"));
        f.check(&p).unwrap();
        assert_eq!(HaloMethod::fixed(0).config.blocks, 1);
        assert_eq!(HaloMethod::fixed(1 << 30).config.blocks, 65_535);
        let v = HaloMethod {
            kernel: SpmvKernel::CsrVector(8),
            config: LaunchConfig::new(128, 10),
        };
        assert_eq!(v.entry_point(), Some("spmv_csr_vector_add_8"));
        v.check(&p).unwrap();
        let odd = HaloMethod {
            config: LaunchConfig::new(48, 10),
            ..v
        };
        assert!(odd.check(&p).unwrap_err().to_string().contains("warps"));
        // The scalar kernel takes any block size.
        HaloMethod {
            kernel: SpmvKernel::CsrScalar,
            config: LaunchConfig::new(48, 10),
        }
        .check(&p)
        .unwrap();
        for kernel in [
            SpmvKernel::CsrMerge,
            SpmvKernel::Ell,
            SpmvKernel::CsrVector(3),
        ] {
            let m = HaloMethod {
                kernel,
                config: LaunchConfig::new(128, 10),
            };
            assert!(m.check(&p).is_err(), "{kernel:?}");
        }
    }
}
