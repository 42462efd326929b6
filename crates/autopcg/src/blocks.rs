//! Solves with the matrix split into row blocks ([`crate::Solver::blocks`]): the multi-block
//! PCG of [`autopcg_solver::blocks`] on the CPU, blocks balanced by rows and nonzeros
//! ([`autopcg_sparse::blocks::default_row_costs`]). The report says how the matrix was split
//! and what one iteration exchanges.
use std::ops::ControlFlow;
use std::time::Instant;

use autopcg_solver::blocks::{solve_blocks_cpu_with, BlockReport};
use autopcg_solver::{IterRecord, PcgError, PcgParams, Plan, PrecondKind};
use autopcg_sparse::blocks::RowPartition;
use autopcg_sparse::CsrMatrix;

use crate::prepared::SYMMETRY_TOLERANCE;
use crate::{Device, Error, SetupTimes, Solution, SolveFailure};

/// What [`solve`] needs of the builder.
pub(crate) struct BlockSettings<'a> {
    pub a: &'a CsrMatrix,
    pub precond: PrecondKind,
    pub params: &'a PcgParams,
    pub device: Device,
    pub check_symmetry: bool,
    pub check_every: Option<usize>,
    pub nblocks: usize,
}

/// One solve split into `s.nblocks` row blocks.
pub(crate) fn solve(
    s: &BlockSettings,
    b: &[f64],
    x0: Option<&[f64]>,
    progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
) -> Result<Solution, SolveFailure> {
    let a = s.a;
    let mut notes = Vec::new();
    #[cfg(feature = "gpu")]
    let gpu = match s.device {
        Device::Gpu => Some(crate::device::open_gpu(0).map_err(Error::DeviceUnavailable)?),
        Device::Auto => {
            notes.push("row blocks run on the CPU unless --device gpu is given".to_string());
            None
        }
        Device::Cpu => None,
    };
    #[cfg(not(feature = "gpu"))]
    match s.device {
        Device::Gpu => {
            return Err(Error::DeviceUnavailable(
                "this build has no GPU support (the `gpu` feature is off)".into(),
            )
            .into())
        }
        Device::Auto => notes.push("row blocks run on the CPU".to_string()),
        Device::Cpu => {}
    }
    if s.nblocks == 0 || s.nblocks > a.nrows() {
        return Err(Error::Pcg(PcgError::InvalidParameter(format!(
            "cannot split {} rows into {} non-empty row blocks",
            a.nrows(),
            s.nblocks
        )))
        .into());
    }
    let mut check_ms = 0.0;
    if s.check_symmetry {
        let tc = Instant::now();
        a.check_symmetric(SYMMETRY_TOLERANCE).map_err(Error::from)?;
        check_ms = tc.elapsed().as_secs_f64() * 1e3;
    }
    let kind = s.precond.resolved_for(a);
    let mut params = s.params.clone();
    let check_every = s
        .check_every
        .or(params.check_every)
        .unwrap_or(autopcg_generator::CPU_CHECK_EVERY);
    params.check_every = Some(check_every);
    let tp = Instant::now();
    let partition = RowPartition::by_default_costs(a, s.nblocks).map_err(Error::from)?;
    let partition_ms = tp.elapsed().as_secs_f64() * 1e3;
    let mut report: Option<BlockReport> = None;
    let t0 = Instant::now();
    #[cfg(feature = "gpu")]
    let on_gpu = gpu.is_some();
    #[cfg(not(feature = "gpu"))]
    let on_gpu = false;
    #[cfg(feature = "gpu")]
    let result = match &gpu {
        // Every block runs the fixed rule's plan for its local part (per-block model plans
        // are not wired yet); the halo parts use the CSR scalar kernel.
        Some(dev) => autopcg_solver::blocks::gpu::solve_blocks_gpu(
            &vec![dev.clone(); s.nblocks],
            a,
            b,
            x0,
            &kind,
            &params,
            partition,
            |_, local, pre| autopcg_generator::fallback::gpu_choice(local, pre, dev.props()),
            &mut report,
        ),
        None => solve_blocks_cpu_with(a, b, x0, &kind, &params, partition, &mut report, progress),
    };
    #[cfg(not(feature = "gpu"))]
    let result = solve_blocks_cpu_with(a, b, x0, &kind, &params, partition, &mut report, progress);
    let total_ms = t0.elapsed().as_secs_f64() * 1e3;
    let backend_ms = report.as_ref().map_or(0.0, |r| r.setup_ms);
    let setup = SetupTimes {
        check_ms,
        select_ms: partition_ms,
        backend_ms,
        ..SetupTimes::default()
    };
    let threads = rayon::current_num_threads();
    let plan = if on_gpu {
        gpu_block_steps(&kind, s.nblocks)
    } else {
        block_steps(&kind, s.nblocks, threads)
    };
    let precond_applied = match kind {
        PrecondKind::None => "none",
        PrecondKind::Jacobi => "jacobi",
        PrecondKind::SsorAi { .. } => "ssor-ai-block-local",
    };
    if matches!(kind, PrecondKind::SsorAi { .. }) && s.nblocks > 1 {
        let dropped = report.as_ref().map_or(0, |r| r.precond_dropped_couplings);
        notes.push(format!(
            "SSOR-AI is built per block on its local part: {dropped} couplings between blocks \
             are left out of the preconditioner"
        ));
    }
    let make = |x: Vec<f64>, info| Solution {
        x,
        info,
        device: if on_gpu {
            format!("gpu 0 ({} row blocks on one GPU)", s.nblocks)
        } else {
            format!("cpu ({threads} threads, {} row blocks)", s.nblocks)
        },
        setup_ms: setup.total_ms(),
        setup,
        solve_ms: (total_ms - backend_ms).max(0.0),
        plan: plan.clone(),
        notes: notes.clone(),
        precond_applied: precond_applied.to_string(),
        model: None,
        explain: Vec::new(),
        predicted_iteration_ms: None,
        check_every,
        blocks: report.clone(),
    };
    match result {
        Ok(sol) => Ok(make(sol.x, sol.info)),
        Err(f) => {
            let partial = match (f.x, f.error.info()) {
                (Some(x), Some(info)) => Some(Box::new(make(x, info.clone()))),
                _ => None,
            };
            Err(SolveFailure {
                error: Error::Pcg(f.error),
                partial,
            })
        }
    }
}

/// The steps of a multi-block iteration on one GPU (kernel by kernel, per block).
fn gpu_block_steps(kind: &PrecondKind, nblocks: usize) -> Plan {
    let mut plan = Plan {
        steps: Vec::new(),
        source: format!(
            "{nblocks} row blocks on one GPU, each block's local part by the fixed rule; kernel \
             by kernel (no CUDA graphs)"
        ),
    };
    let cfg = format!("{nblocks} blocks");
    plan.push("update", "-", "cg_update per block", cfg.clone(), None);
    let pkernel = match kind {
        PrecondKind::None => "none",
        PrecondKind::Jacobi => "jacobi",
        PrecondKind::SsorAi { .. } => "ssor-ai-block-local",
    };
    plan.push("precond", "-", pkernel, cfg.clone(), None);
    plan.push(
        "halo",
        "packed",
        "gather_f64 + device copies",
        cfg.clone(),
        None,
    );
    plan.push("spmv", "local + halo (csr)", "per block", cfg.clone(), None);
    plan.push("dots", "-", "dot3_slot + dot3_slots_advance", cfg, None);
    plan
}

/// The steps of a multi-block CPU iteration.
fn block_steps(kind: &PrecondKind, nblocks: usize, threads: usize) -> Plan {
    let mut plan = Plan {
        steps: Vec::new(),
        source: format!("{nblocks} row blocks, fixed CPU kernels"),
    };
    let cfg = format!("{nblocks} blocks on {threads} CPU threads");
    plan.push("update", "-", "cpu_cg_update_fused", cfg.clone(), None);
    let (pformat, pkernel) = match kind {
        PrecondKind::None => ("-", "none"),
        PrecondKind::Jacobi => ("diagonal", "jacobi"),
        PrecondKind::SsorAi { .. } => ("csr (K, K^T) per block", "ssor-ai-block-local"),
    };
    plan.push("precond", pformat, pkernel, cfg.clone(), None);
    plan.push("halo", "packed", "in_process_copy", cfg.clone(), None);
    plan.push(
        "spmv+dots",
        "csr local + halo",
        "cpu_block_spmv_dots",
        cfg.clone(),
        None,
    );
    plan.push("allreduce", "-", "in_process_sum", cfg, None);
    plan
}
