//! Multi-block PCG: the matrix split into row blocks (the basis of multi-GPU solves), each
//! block iterating on its rows' slices of the vectors and communicating through a
//! [`Transport`]: one halo exchange of the vector being multiplied and one all-reduce of the
//! three dots per iteration, so the method keeps the single reduction per iteration of
//! Chronopoulos–Gear PCG.
//!
//! - [`transport`]: the [`Transport`] trait and the in-process transport [`InProcess`].
//! - [`cpu`]: the host backend [`BlockCpuBackend`], run by the unsplit driver
//!   ([`crate::pcg()`]): same stopping rule, true-residual check and residual replacement.
//! - [`gpu`] (with the `gpu` feature): the device backend [`BlockGpuBackend`], blocks on one or
//!   several devices, and [`solve_blocks_gpu`].
//! - [`BlockPrecond`]: the preconditioner per block, and [`solve_blocks_cpu`].
//!
//! # What the split does to the preconditioner
//!
//! - none and Jacobi are the same operator as unsplit (Jacobi needs only the diagonal, which
//!   every block owns), so the iterates differ from the unsplit ones only by the rounding of
//!   the reductions (partial sums per block, then the all-reduce);
//! - SSOR-AI is built on each block's **local part only**: the couplings between blocks are
//!   dropped (block Jacobi with SSOR-AI inside each block), so applying it needs no
//!   communication. The preconditioner weakens as blocks get smaller and the iteration count
//!   grows; omega is chosen once for the whole matrix, so every block uses the same one.
pub mod cpu;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod schedule;
pub mod transport;

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::time::Instant;

use autopcg_sparse::blocks::{BlockSplit, BlockSummary, RowPartition};
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;
use serde::Serialize;

pub use cpu::BlockCpuBackend;
#[cfg(feature = "gpu")]
pub use gpu::{solve_blocks_gpu, BlockGpuBackend, BlockGpuChoice, BlockTraffic};
pub use transport::{InProcess, Transport};

use crate::scaling::ScaleFactors;
use crate::{
    pcg, IterRecord, PcgError, PcgInfo, PcgParams, Plan, PrecondKind, Preconditioner, SolveFailure,
};

/// The preconditioner of a block split: one per block, built on the block's local part.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockPrecond {
    blocks: Vec<Preconditioner>,
    dropped: usize,
}

impl BlockPrecond {
    /// Builds `kind` for every block of `split` (made from `a`): none and Jacobi as unsplit,
    /// SSOR-AI on the local part with omega resolved once for `a` ([`PrecondKind::resolved_for`]).
    ///
    /// Errors: those of [`Preconditioner::build`], with the row of a bad diagonal entry global
    /// (1-based).
    pub fn build(a: &CsrMatrix, split: &BlockSplit, kind: &PrecondKind) -> Result<Self, PcgError> {
        kind.validate()?;
        let kind = kind.resolved_for(a);
        let blocks = split
            .blocks()
            .par_iter()
            .map(|blk| {
                Preconditioner::build(&blk.local, &kind).map_err(|e| match e {
                    PcgError::BadDiagonal {
                        row,
                        value,
                        precond,
                    } => PcgError::BadDiagonal {
                        row: if row == 0 { 0 } else { row + blk.rows.start },
                        value,
                        precond,
                    },
                    e => e,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let dropped = match kind {
            PrecondKind::SsorAi { .. } => split.blocks().iter().map(|b| b.halo.nnz()).sum(),
            _ => 0,
        };
        Ok(BlockPrecond { blocks, dropped })
    }

    /// Matrix entries the preconditioner ignores because they couple two blocks (0 for none
    /// and Jacobi).
    pub fn dropped_couplings(&self) -> usize {
        self.dropped
    }

    /// The per-block preconditioners, in block order.
    pub fn blocks(&self) -> &[Preconditioner] {
        &self.blocks
    }

    /// The per-block preconditioners, in block order.
    pub fn into_blocks(self) -> Vec<Preconditioner> {
        self.blocks
    }
}

/// What a block split looks like and what one iteration communicates, for reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockReport {
    /// Number of blocks.
    pub nblocks: usize,
    /// Rows, nonzeros, local/halo sizes and neighbours of every block.
    pub blocks: Vec<BlockSummary>,
    /// Vector entries one iteration exchanges (the halo of `u` before `w = A u`).
    pub halo_entries_per_iteration: usize,
    /// Point-to-point messages per iteration.
    pub messages_per_iteration: usize,
    /// All-reduces per iteration (of the three dots).
    pub all_reduces_per_iteration: usize,
    /// Matrix entries coupling two blocks that the preconditioner drops (block-local SSOR-AI;
    /// 0 for none and Jacobi).
    pub precond_dropped_couplings: usize,
    /// Milliseconds spent splitting the matrix and building the blocks' preconditioners and
    /// vectors (0 until the backend is built).
    pub setup_ms: f64,
    /// The GPU of every block, by driver ordinal (empty on the CPU).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<usize>,
    /// How the GPU count was chosen, when it was (`--gpus auto`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<GpuCountReport>,
    /// The sub-plan of every block (its local part's plan, then its halo part's multiply),
    /// when the blocks were planned one by one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub block_plans: Vec<Plan>,
    /// How the rows were balanced between the blocks, when the blocks were planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance: Option<BalanceReport>,
}

/// How the rows of a split were balanced (filled by the caller that planned the blocks).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BalanceReport {
    /// "predicted time" or "rows and nonzeros".
    pub by: String,
    /// The slowest block's predicted microseconds per iteration on the split by rows and
    /// nonzeros.
    pub initial_us: f64,
    /// The same on the split used.
    pub final_us: f64,
    /// Why the rows were not moved by the predictions, when they were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_because: Option<String>,
}

/// The GPU count a solve chose and the predictions it chose from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuCountReport {
    /// The count chosen.
    pub chosen: usize,
    /// GPUs present.
    pub found: usize,
    /// The link figures the predictions assumed (their name says whether they are defaults).
    pub link: String,
    /// Every count considered.
    pub options: Vec<GpuCountPrediction>,
}

/// The predicted time per iteration on one GPU count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuCountPrediction {
    /// GPUs (= row blocks).
    pub gpus: usize,
    /// The slowest block's compute, microseconds.
    pub compute_us: f64,
    /// The slowest block's halo over the link, microseconds.
    pub halo_us: f64,
    /// The all-reduce of the dots, microseconds.
    pub allreduce_us: f64,
    /// Their sum, microseconds.
    pub predicted_us: f64,
}

impl BlockReport {
    /// The report of `split` with a preconditioner dropping `dropped` couplings.
    pub fn new(split: &BlockSplit, dropped: usize) -> Self {
        BlockReport {
            nblocks: split.partition().nblocks(),
            blocks: split.summary(),
            halo_entries_per_iteration: split.halo_entries(),
            messages_per_iteration: split.messages().len(),
            all_reduces_per_iteration: 1,
            precond_dropped_couplings: dropped,
            setup_ms: 0.0,
            devices: Vec::new(),
            gpu_count: None,
            block_plans: Vec::new(),
            balance: None,
        }
    }
}

/// A finished multi-block solve.
#[derive(Debug, Clone)]
pub struct BlockSolve {
    /// The solution.
    pub x: Vec<f64>,
    /// What the solve did.
    pub info: PcgInfo,
}

/// A system `A x = b` to solve split into row blocks: the matrix, the right-hand side, the
/// initial guess (zero when `None`), the preconditioner and the iteration parameters.
#[derive(Debug, Clone, Copy)]
pub struct BlockProblem<'a> {
    /// The matrix.
    pub a: &'a CsrMatrix,
    /// The right-hand side.
    pub b: &'a [f64],
    /// The initial guess (zero when `None`).
    pub x0: Option<&'a [f64]>,
    /// The preconditioner, built per block ([`BlockPrecond`]).
    pub kind: &'a PrecondKind,
    /// Tolerance, iteration limit and the rest.
    pub params: &'a PcgParams,
}

impl<'a> BlockProblem<'a> {
    /// `a x = b` from x0 = 0.
    pub fn new(
        a: &'a CsrMatrix,
        b: &'a [f64],
        kind: &'a PrecondKind,
        params: &'a PcgParams,
    ) -> Self {
        BlockProblem {
            a,
            b,
            x0: None,
            kind,
            params,
        }
    }

    /// The same problem from `x0`.
    pub fn with_x0(self, x0: Option<&'a [f64]>) -> Self {
        BlockProblem { x0, ..self }
    }
}

/// Solves the problem `p` on the CPU with its matrix split into the row blocks of `partition`,
/// preconditioned per block ([`BlockPrecond`]).
///
/// Like [`crate::solve_cpu`], a badly scaled system is scaled by powers of two first; the
/// split is then made of the scaled matrix (the same pattern). Returns the solution, or a
/// [`SolveFailure`] that carries the last iterate when the solve ran out of iterations or
/// stagnated. `report` receives the split's [`BlockReport`] as soon as it is built (so that a
/// failed solve can still describe it).
pub fn solve_blocks_cpu(
    p: &BlockProblem<'_>,
    partition: RowPartition,
    report: &mut Option<BlockReport>,
) -> Result<BlockSolve, SolveFailure> {
    solve_blocks_cpu_with(p, partition, report, |_| ControlFlow::Continue(()))
}

/// [`solve_blocks_cpu`] with a callback that sees every record the driver examines (see
/// [`crate::pcg()`]).
pub fn solve_blocks_cpu_with(
    p: &BlockProblem<'_>,
    partition: RowPartition,
    report: &mut Option<BlockReport>,
    callback: impl FnMut(&IterRecord) -> ControlFlow<()>,
) -> Result<BlockSolve, SolveFailure> {
    let (a, b, x0, kind, params) = (p.a, p.b, p.x0, p.kind, p.params);
    let t0 = Instant::now();
    let (factors, scaled, split) = scaled_split(a, b, partition)?;
    let dropped = match kind {
        PrecondKind::SsorAi { .. } => split.blocks().iter().map(|b| b.halo.nnz()).sum(),
        _ => 0,
    };
    *report = Some(BlockReport::new(&split, dropped));
    let sb = factors.scale_rhs(b);
    let sx0 = x0.map(|x| factors.scale_solution(x));
    let mut backend = BlockCpuBackend::with_transport(
        &scaled,
        split,
        kind,
        &sb,
        sx0.as_deref(),
        factors,
        InProcess::default(),
    )?;
    if let Some(r) = report.as_mut() {
        r.setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    }
    match pcg(&mut backend, params, callback) {
        Ok(info) => Ok(BlockSolve {
            x: backend.x(),
            info,
        }),
        Err(error @ (PcgError::NotConverged { .. } | PcgError::Stagnated { .. })) => {
            Err(SolveFailure {
                error,
                x: Some(backend.x()),
            })
        }
        Err(error) => Err(SolveFailure { error, x: None }),
    }
}

/// The system scaled like [`crate::solve_cpu`] scales it (powers of two, for a badly scaled
/// one) and its split into the row blocks of `partition`: the first steps of every block solve.
pub(crate) fn scaled_split<'a>(
    a: &'a CsrMatrix,
    b: &[f64],
    partition: RowPartition,
) -> Result<(ScaleFactors, Cow<'a, CsrMatrix>, BlockSplit), PcgError> {
    if b.len() != a.nrows() {
        return Err(PcgError::Dimension(format!(
            "right-hand side has length {}, the matrix has {} rows",
            b.len(),
            a.nrows()
        )));
    }
    let factors = ScaleFactors::for_system(a, b);
    let scaled: Cow<'a, CsrMatrix> = factors.scale_matrix(a);
    let split = BlockSplit::new(&scaled, partition)
        .map_err(|e| PcgError::InvalidParameter(format!("block split: {e}")))?;
    Ok((factors, scaled, split))
}

/// Checks a (scaled) system before a block backend is built from it: `a` square, `split` over
/// its rows, `b` and `x0` of its length, and a positive diagonal (reported unscaled, for the
/// preconditioner named `precond`).
pub(crate) fn check_block_system(
    a: &CsrMatrix,
    split: &BlockSplit,
    b: &[f64],
    x0: Option<&[f64]>,
    scale: &ScaleFactors,
    precond: &str,
) -> Result<(), PcgError> {
    let n = a.nrows();
    if a.ncols() != n {
        return Err(PcgError::Dimension(format!(
            "the matrix must be square, got {} x {}",
            n,
            a.ncols()
        )));
    }
    if split.partition().nrows() != n {
        return Err(PcgError::Dimension(format!(
            "the block split covers {} rows, the matrix has {n}",
            split.partition().nrows()
        )));
    }
    for (what, len) in [
        ("right-hand side", Some(b.len())),
        ("initial guess", x0.map(<[f64]>::len)),
    ] {
        match len {
            Some(len) if len != n => {
                return Err(PcgError::Dimension(format!(
                    "{what} has length {len}, the matrix has {n} rows"
                )))
            }
            _ => {}
        }
    }
    if let Some((row, value)) = crate::scaling::first_bad_diagonal(a) {
        return Err(PcgError::BadDiagonal {
            row,
            value: crate::scaling::ldexp(value, -scale.matrix_exp),
            precond: precond.to_string(),
        });
    }
    Ok(())
}
