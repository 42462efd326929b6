//! Plans for a matrix split into row blocks (one block per GPU), and the GPU count.
//!
//! - [`plan_blocks`]: one sub-plan per block, next to [`crate::plan`]: each block's local part
//!   gets the plan [`crate::plan`] makes for it (format, kernel and launch per step, its
//!   block-local preconditioner, chosen by the model where there is one), and its halo part a
//!   SpMV choice of its own ([`BlockPlan::halo_method`]): on a GPU with a model, the kernel and
//!   launch the SpMV model predicts fastest on the halo part among the CSR kernels with an
//!   add variant (CSR scalar and CSR vector with 2, 4, 8, 16 or 32 lanes per row, at every
//!   profiled threads per block and grid policy); on a GPU without one, CSR scalar at
//!   [`HALO_THREADS`] threads per block; on the CPU, CSR.
//! - [`rebalance`]: a partition balanced by predicted per-block time instead of rows and
//!   nonzeros.
//! - [`choose_gpu_count`]: the predicted time per iteration on 1..N GPUs (slowest block's
//!   compute, its halo over the link, one all-reduce) and the count that minimises it;
//!   [`choose_gpu_count_planned`] takes each block's compute from its sub-plan (the model's
//!   prediction on a GPU with a model).
//! - [`link_for`]: the link figures for a device's model: those `tune` measured on the host,
//!   else [`DEFAULT_LINK`].
use std::ops::Range;

use autopcg_catalog::{DeviceProps, LinkProps};
use autopcg_solver::gpu::HaloMethod;
use autopcg_solver::{PcgError, PlanStep};
use autopcg_sparse::blocks::{default_row_costs, BlockSplit, HaloBlock, RowPartition};
use rayon::prelude::*;
use serde::Serialize;

use crate::{plan, PlanError, PlanRequest, SolvePlan, Target};

/// Fixed cost of one kernel of an iteration (launch in graph replay, tail of the grid),
/// microseconds. An iteration runs about five (update, preconditioner, halo pack, SpMV,
/// reduction).
pub const KERNEL_OVERHEAD_US: f64 = 3.0;

/// Kernels per iteration of one block.
pub const KERNELS_PER_ITERATION: f64 = 5.0;

/// Bytes one unit of [`default_row_costs`] moves (20 bytes per nonzero, a row costing
/// [`autopcg_sparse::blocks::ROW_COST_IN_NONZEROS`] nonzeros).
pub const BYTES_PER_COST_UNIT: f64 = 20.0;

/// Memory bandwidth assumed when the device does not report its clock and bus, GB/s.
pub const DEFAULT_BANDWIDTH_GBS: f64 = 3000.0;

/// The link figures `--gpus auto` predicts with when the model holds no measured link (see
/// [`link_for`]): [`LinkProps::NVLINK4`], the defaults for the NVLink 4 of H100 / H200 SXM
/// boards. They are not measured: 300 GB/s per direction between
/// two GPUs (below the 450 GB/s nominal peak of NVLink 4 per direction, for halo-sized
/// messages), 10 us per message and 20 us per all-reduce of a few doubles (launch and
/// synchronisation costs of that order within one host). On PCIe-connected GPUs they favour
/// too many GPUs; [`LinkProps::PCIE5`] holds the PCIe 5 defaults.
pub const DEFAULT_LINK: LinkProps = LinkProps::NVLINK4;

/// The link figures to predict with for a device whose model is `model`: the link `tune`
/// measured between the host's GPUs when the model holds one (named [`LinkProps::MEASURED`]),
/// else [`DEFAULT_LINK`] (no model, a model of a one-GPU host, or one written before the link
/// was measured).
#[cfg(feature = "model")]
pub fn link_for(model: Option<&autopcg_model::file::ModelFile>) -> LinkProps {
    model
        .and_then(|m| m.link.as_ref())
        .map_or(DEFAULT_LINK, |l| l.props())
}

/// The plan of one block.
#[derive(Debug, Clone)]
pub struct BlockPlan {
    /// Global rows of the block.
    pub rows: Range<usize>,
    /// The plan of the block's local part (its preconditioner built on the local part).
    pub local: SolvePlan,
    /// The multiply of the halo part, for the plan's steps: kernel, launch, halo nonzeros and
    /// predicted time.
    pub halo: PlanStep,
    /// What a GPU runs for the halo part (the model's choice, else [`HaloMethod::fixed`]);
    /// `None` on the CPU.
    pub halo_method: Option<HaloMethod>,
    /// Predicted microseconds per iteration of the block's compute (model where it chose,
    /// else the bandwidth bound of [`roofline_block_us`]).
    pub predicted_us: f64,
    /// Whether `predicted_us` is the model's (the local plan's iteration and the halo part's
    /// multiply) rather than the bandwidth bound.
    pub modelled: bool,
}

impl BlockPlan {
    /// The block's steps: what a block runs with its local part's plan
    /// ([`autopcg_solver::gpu::GpuPlanChoice::block_plan`] on a GPU), then the multiply of its
    /// halo part.
    pub fn steps(&self) -> autopcg_solver::Plan {
        let mut steps = match &self.local.gpu {
            Some(c) => autopcg_solver::Plan {
                source: self.local.steps.source.clone(),
                ..c.block_plan()
            },
            None => self.local.steps.clone(),
        };
        steps.source = format!(
            "rows {}..{}: {}; predicted {:.1} us per iteration",
            self.rows.start, self.rows.end, steps.source, self.predicted_us
        );
        steps.steps.push(self.halo.clone());
        steps
    }
}

/// One sub-plan per block.
#[derive(Debug, Clone)]
pub struct BlockPlans {
    /// The blocks, in row order.
    pub blocks: Vec<BlockPlan>,
}

/// The sub-plans of every block of `split` (made from `req.matrix`): [`crate::plan`] on each
/// block's local part with the request's preconditioner, model and target, and the halo part's
/// SpMV.
pub fn plan_blocks(req: &PlanRequest, split: &BlockSplit) -> Result<BlockPlans, PlanError> {
    if split.partition().nrows() != req.matrix.nrows() {
        return Err(PcgError::Dimension(format!(
            "the block split covers {} rows, the matrix has {}",
            split.partition().nrows(),
            req.matrix.nrows()
        ))
        .into());
    }
    // One omega for every block: the one of the whole matrix.
    let kind = req.precond.resolved_for(req.matrix);
    let bw = match &req.target {
        Target::Gpu(p) => bandwidth_gbs(p),
        Target::Cpu { .. } => DEFAULT_BANDWIDTH_GBS,
    };
    // The blocks are planned concurrently (each plan's own passes are parallel too, but
    // parts of a plan run on one thread).
    let blocks = split
        .blocks()
        .par_iter()
        .map(|blk| {
            let mut r = req.clone();
            r.matrix = &blk.local;
            r.precond = kind;
            let mut local = plan(&r)?;
            // A block adds its dots into its slot (dot3_slot) for the sum over the blocks, so
            // its SpMV runs without the dots in its epilogue.
            if let Some(g) = local.gpu.as_mut() {
                if g.fused_dots.take().is_some() {
                    local.steps = g.plan();
                }
            }
            let HaloPlan {
                step: halo,
                us: halo_us,
                method: halo_method,
            } = halo_step(req, blk);
            let (predicted_us, modelled) = match (local.predicted_iteration_ms, halo_us) {
                (Some(ms), Some(h)) => (ms * 1e3 + h, true),
                _ => (roofline_block_us(blk, bw), false),
            };
            Ok(BlockPlan {
                rows: blk.rows.clone(),
                local,
                halo,
                halo_method,
                predicted_us,
                modelled,
            })
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    Ok(BlockPlans { blocks })
}

/// How the rows of a block split were balanced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Balance {
    /// "predicted time" when the rows were moved by the model's per-block predictions,
    /// "rows and nonzeros" otherwise.
    pub by: &'static str,
    /// The slowest block's predicted microseconds per iteration on the split by rows and
    /// nonzeros.
    pub initial_us: f64,
    /// The same on the split used (equal to `initial_us` when the rows were not moved).
    pub final_us: f64,
    /// Why the rows were not moved, when they were not.
    pub kept_because: Option<String>,
}

/// A split into row blocks with one sub-plan per block.
#[derive(Debug, Clone)]
pub struct BalancedBlocks {
    /// The rows of every block.
    pub partition: RowPartition,
    /// The sub-plans, in block order.
    pub plans: BlockPlans,
    /// How the rows were balanced.
    pub balance: Balance,
}

fn slowest_us(p: &BlockPlans) -> f64 {
    p.blocks.iter().map(|b| b.predicted_us).fold(0.0, f64::max)
}

/// `nblocks` row blocks of `req.matrix` with their sub-plans ([`plan_blocks`]), balanced by
/// predicted time: the rows are first split by rows and nonzeros
/// ([`default_row_costs`]); when the model predicted every block's iteration, the split is
/// moved by [`rebalance`] towards the predicted times (fully and damped, see
/// [`REBALANCE_DAMPING`]), every candidate is planned again, and the one whose slowest block
/// is predicted fastest is kept when it beats the first split. No move is tried when the
/// slowest block is predicted within [`BALANCED_WITHIN`] of the blocks' mean (a move could
/// gain no more than that). Without a model (or on the CPU) the split by
/// rows and nonzeros stands: the bandwidth bound is proportional to those costs already.
pub fn plan_blocks_balanced(
    req: &PlanRequest,
    nblocks: usize,
) -> Result<BalancedBlocks, PlanError> {
    let invalid = |e: autopcg_sparse::SparseError| -> PlanError {
        PcgError::InvalidParameter(e.to_string()).into()
    };
    let costs = default_row_costs(req.matrix);
    let partition = RowPartition::balanced(&costs, nblocks).map_err(invalid)?;
    let split = BlockSplit::new(req.matrix, partition.clone()).map_err(invalid)?;
    let plans = plan_blocks(req, &split)?;
    let initial_us = slowest_us(&plans);
    let kept = |partition, plans, why: &str| BalancedBlocks {
        partition,
        plans,
        balance: Balance {
            by: "rows and nonzeros",
            initial_us,
            final_us: initial_us,
            kept_because: Some(why.to_string()),
        },
    };
    if nblocks < 2 {
        return Ok(kept(partition, plans, "one block"));
    }
    if !plans.blocks.iter().all(|b| b.modelled) {
        return Ok(kept(
            partition,
            plans,
            "no model prediction for every block",
        ));
    }
    // Moving rows does not change the blocks' summed time much (the same rows run), so the
    // slowest block can come down to about their mean and no further: when it is within
    // BALANCED_WITHIN of the mean, the candidates (each a split and a plan of every block,
    // as much again as the first) are not worth trying.
    let block_us: Vec<f64> = plans.blocks.iter().map(|b| b.predicted_us).collect();
    let mean_us = block_us.iter().sum::<f64>() / block_us.len() as f64;
    if initial_us <= mean_us * (1.0 + BALANCED_WITHIN) {
        return Ok(kept(
            partition,
            plans,
            &format!(
                "the slowest block is predicted within {}% of the blocks' mean",
                BALANCED_WITHIN * 100.0
            ),
        ));
    }
    // A block's time is not proportional to its cost (launches and tails are fixed, formats
    // change with the rows): move the rows by the full ratio of predicted time to cost and by
    // damped ratios, plan each candidate and keep the fastest slowest block.
    let own = partition.block_costs(&costs);
    let mut best: Option<(RowPartition, BlockPlans, f64)> = None;
    let mut tried: Vec<RowPartition> = vec![partition.clone()];
    for damping in REBALANCE_DAMPING {
        let target: Vec<f64> = own
            .iter()
            .zip(&block_us)
            .map(|(&c, &t)| c * (t / c).powf(damping))
            .collect();
        let moved = rebalance(&costs, &partition, &target)?;
        if tried.contains(&moved) {
            continue;
        }
        tried.push(moved.clone());
        let moved_split = BlockSplit::new(req.matrix, moved.clone()).map_err(invalid)?;
        let moved_plans = plan_blocks(req, &moved_split)?;
        let us = slowest_us(&moved_plans);
        if us < best.as_ref().map_or(initial_us, |b| b.2) {
            best = Some((moved, moved_plans, us));
        }
    }
    match best {
        Some((moved, moved_plans, final_us)) => Ok(BalancedBlocks {
            partition: moved,
            plans: moved_plans,
            balance: Balance {
                by: "predicted time",
                initial_us,
                final_us,
                kept_because: None,
            },
        }),
        None if tried.len() == 1 => Ok(kept(partition, plans, "the predictions asked for no move")),
        None => Ok(kept(
            partition,
            plans,
            "moving rows by the predictions did not shorten the slowest block",
        )),
    }
}

/// How close to the blocks' mean predicted time the slowest block must be for
/// [`plan_blocks_balanced`] to keep the split by rows and nonzeros without trying moves.
pub const BALANCED_WITHIN: f64 = 0.01;

/// The exponents `d` of the candidate moves of [`plan_blocks_balanced`]: block `b`'s cost is
/// scaled to `cost_b (time_b / cost_b)^d` before the rows are split again (`d = 1`: time taken
/// as proportional to cost; smaller `d`: a smaller move).
pub const REBALANCE_DAMPING: [f64; 3] = [1.0, 0.5, 0.25];

/// Threads per block of the halo multiply without a model ([`HaloMethod::fixed`]).
pub use autopcg_solver::gpu::HALO_THREADS;

/// The halo part's multiply as planned.
struct HaloPlan {
    /// The step as the plan shows it.
    step: PlanStep,
    /// Its predicted microseconds, where known.
    us: Option<f64>,
    /// What a GPU runs (`None` on the CPU).
    method: Option<HaloMethod>,
}

/// The halo part's SpMV, adding into the local part's product. On a GPU with a model: the
/// least predicted time of the SpMV model on the halo part among the CSR kernels with an add
/// variant ([`autopcg_catalog::SpmvKernel::add_entry_point`]: CSR scalar and CSR vector with
/// any lane count, at any profiled launch), launched as the model's candidate launches it
/// ([`model_halo_method`]). Without a model, or when the model predicts none of them: CSR
/// scalar at [`HALO_THREADS`] threads per block ([`HaloMethod::fixed`]) and no prediction. A
/// halo part without entries costs nothing (it is not launched).
fn halo_step(req: &PlanRequest, blk: &HaloBlock) -> HaloPlan {
    let nnz = blk.halo.nnz();
    let (kernel, config, predicted, method) = match &req.target {
        Target::Cpu { .. } => (
            "cpu_csr".to_string(),
            format!("{nnz} halo nonzeros"),
            None,
            None,
        ),
        Target::Gpu(_props) => {
            let fixed = HaloMethod::fixed(blk.nrows());
            #[cfg(feature = "model")]
            let (method, predicted) = if nnz == 0 {
                (fixed, Some(0.0))
            } else {
                req.model
                    .and_then(|m| model_halo_method(m.file, &blk.halo, _props))
                    .map_or((fixed, None), |(m, ms)| (m, Some(ms)))
            };
            #[cfg(not(feature = "model"))]
            let (method, predicted) = (fixed, (nnz == 0).then_some(0.0));
            (
                method.entry_point().unwrap_or("?").to_string(),
                format!("{}, {nnz} halo nonzeros", method.config.words()),
                predicted,
                Some(method),
            )
        }
    };
    HaloPlan {
        step: PlanStep {
            step: "spmv halo".into(),
            format: "csr".into(),
            kernel,
            config,
            predicted_ms: predicted,
        },
        us: predicted.map(|ms| ms * 1e3),
        method,
    }
}

/// The halo multiply the model predicts fastest on `halo`, with its predicted milliseconds:
/// every SpMV prediction of the model ([`autopcg_model::spmv::SpmvModel::predict`] on the halo
/// part's work counts) whose launch on `halo` ([`crate::select::method_of`]) is a CSR kernel
/// with an add variant that fits the device; the least predicted time wins (the first in the
/// model's order on a tie). `None` when the model predicts none of them.
#[cfg(feature = "model")]
pub fn model_halo_method(
    model: &autopcg_model::file::ModelFile,
    halo: &autopcg_sparse::CsrMatrix,
    props: &DeviceProps,
) -> Option<(HaloMethod, f64)> {
    use autopcg_catalog::SpmvMethod;
    let w = autopcg_model::work::spmv_work(halo);
    model
        .spmv
        .predict(&w)
        .iter()
        .filter(|p| p.predicted_ms.is_finite() && p.predicted_ms >= 0.0)
        .filter_map(|p| match crate::select::method_of(p, &w, props)? {
            SpmvMethod::Csr { kernel, config } => {
                let m = HaloMethod { kernel, config };
                m.check(props).is_ok().then_some((m, p.predicted_ms))
            }
            _ => None,
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The device's memory bandwidth (theoretical, from its clock and bus), or
/// [`DEFAULT_BANDWIDTH_GBS`].
pub fn bandwidth_gbs(props: &DeviceProps) -> f64 {
    props
        .peak_bandwidth_gbs()
        .filter(|b| b.is_finite() && *b > 0.0)
        .unwrap_or(DEFAULT_BANDWIDTH_GBS)
}

/// Bandwidth bound of one block's iteration, microseconds: the bytes its rows and nonzeros
/// move ([`BYTES_PER_COST_UNIT`] per unit of [`default_row_costs`]) at `bandwidth_gbs`, plus
/// [`KERNELS_PER_ITERATION`] kernel overheads.
pub fn roofline_block_us(blk: &HaloBlock, bandwidth_gbs: f64) -> f64 {
    let cost = autopcg_sparse::blocks::ROW_COST_IN_NONZEROS * blk.nrows() as f64
        + (blk.local.nnz() + blk.halo.nnz()) as f64;
    cost * BYTES_PER_COST_UNIT / (bandwidth_gbs * 1e3) + KERNELS_PER_ITERATION * KERNEL_OVERHEAD_US
}

/// A partition of the same rows balanced by predicted time: the row costs of each block are
/// scaled so that they sum to the block's predicted time `block_us[b]`, then the rows are
/// split again ([`RowPartition::balanced`]). A block predicted slower than its cost share
/// gives up rows.
pub fn rebalance(
    costs: &[f64],
    partition: &RowPartition,
    block_us: &[f64],
) -> Result<RowPartition, PlanError> {
    let own = partition.block_costs(costs);
    let mut scaled = costs.to_vec();
    for (b, (&c, &t)) in own.iter().zip(block_us).enumerate() {
        if c > 0.0 && t.is_finite() && t > 0.0 {
            scaled[partition.range(b)]
                .iter_mut()
                .for_each(|v| *v *= t / c);
        }
    }
    RowPartition::balanced(&scaled, partition.nblocks())
        .map_err(|e| PcgError::InvalidParameter(e.to_string()).into())
}

/// The predicted time per iteration on one GPU count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuCountOption {
    /// GPUs (= row blocks).
    pub gpus: usize,
    /// The slowest block's compute, microseconds.
    pub compute_us: f64,
    /// The slowest block's halo receive over the link, microseconds.
    pub halo_us: f64,
    /// The all-reduce of the three dots (0 on one GPU), microseconds.
    pub allreduce_us: f64,
    /// The sum: predicted microseconds per iteration.
    pub predicted_us: f64,
    /// Vector entries exchanged per iteration.
    pub halo_entries: usize,
}

/// The GPU count minimising the predicted time per iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuCountChoice {
    /// The count chosen.
    pub gpus: usize,
    /// Every count considered, 1..=max.
    pub options: Vec<GpuCountOption>,
    /// The link figures used.
    pub link: LinkProps,
}

/// Predicted time per iteration of `split` on one GPU per block: the slowest block's compute
/// (`block_us`) plus the slowest block's halo over `link` plus one all-reduce.
pub fn predict_split_us(
    split: &BlockSplit,
    link: &LinkProps,
    block_us: impl Fn(&HaloBlock) -> f64,
) -> GpuCountOption {
    let per_block: Vec<f64> = split.blocks().iter().map(block_us).collect();
    predict_split_from(split, link, &per_block)
}

/// [`predict_split_us`] with the blocks' compute times given (`block_us[i]` of block `i`).
fn predict_split_from(split: &BlockSplit, link: &LinkProps, block_us: &[f64]) -> GpuCountOption {
    let g = split.blocks().len();
    let compute_us = block_us.iter().copied().fold(0.0, f64::max);
    let halo_us = if g > 1 {
        split
            .blocks()
            .iter()
            .map(|b| link.transfer_us(8.0 * b.halo_len() as f64, b.recvs.len()))
            .fold(0.0, f64::max)
    } else {
        0.0
    };
    let allreduce_us = if g > 1 {
        link.allreduce_latency_us
    } else {
        0.0
    };
    GpuCountOption {
        gpus: g,
        compute_us,
        halo_us,
        allreduce_us,
        predicted_us: compute_us + halo_us + allreduce_us,
        halo_entries: split.halo_entries(),
    }
}

/// Predicts 1..=`max_gpus` GPUs for `a` (row blocks balanced by rows and nonzeros, compute by
/// `block_us`, e.g. [`roofline_block_us`] with the device's bandwidth) and picks the count
/// with the least predicted time per iteration (the smaller count on a tie).
pub fn choose_gpu_count(
    a: &autopcg_sparse::CsrMatrix,
    max_gpus: usize,
    link: &LinkProps,
    block_us: impl Fn(&HaloBlock) -> f64,
) -> Result<GpuCountChoice, PlanError> {
    choose_count_by(a, max_gpus, link, |split| {
        Ok(split.blocks().iter().map(&block_us).collect())
    })
}

/// [`choose_gpu_count`] with each block's compute time from its sub-plan: [`plan_blocks`] of
/// `req` on every split, so on a GPU with a model the time is the model's prediction of the
/// block's local plan and halo multiply ([`BlockPlan::predicted_us`]; the bandwidth bound for
/// a block the model did not predict). Plans every split, preconditioners included: costlier
/// than the bound, and what the blocks will run.
pub fn choose_gpu_count_planned(
    req: &PlanRequest,
    max_gpus: usize,
    link: &LinkProps,
) -> Result<(GpuCountChoice, bool), PlanError> {
    let mut modelled = true;
    let choice = choose_count_by(req.matrix, max_gpus, link, |split| {
        let plans = plan_blocks(req, split)?;
        modelled &= plans.blocks.iter().all(|b| b.modelled);
        Ok(plans.blocks.iter().map(|b| b.predicted_us).collect())
    })?;
    Ok((choice, modelled))
}

/// The counts 1..=`max_gpus` on splits balanced by rows and nonzeros, each block's compute
/// time given by `block_us` of the split, and the count with the least predicted time.
fn choose_count_by(
    a: &autopcg_sparse::CsrMatrix,
    max_gpus: usize,
    link: &LinkProps,
    mut block_us: impl FnMut(&BlockSplit) -> Result<Vec<f64>, PlanError>,
) -> Result<GpuCountChoice, PlanError> {
    let max = max_gpus.min(a.nrows()).max(1);
    let costs = default_row_costs(a);
    let mut options = Vec::with_capacity(max);
    for g in 1..=max {
        let part = RowPartition::balanced(&costs, g)
            .map_err(|e| PlanError::from(PcgError::InvalidParameter(e.to_string())))?;
        let split = BlockSplit::new(a, part)
            .map_err(|e| PlanError::from(PcgError::InvalidParameter(e.to_string())))?;
        options.push(predict_split_from(&split, link, &block_us(&split)?));
    }
    let gpus = options
        .iter()
        .min_by(|x, y| x.predicted_us.total_cmp(&y.predicted_us))
        .map_or(1, |o| o.gpus);
    Ok(GpuCountChoice {
        gpus,
        options,
        link: *link,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg_solver::PrecondKind;
    use autopcg_sparse::families::poisson3d_7pt;

    fn h100_bw() -> f64 {
        3350.0
    }

    #[test]
    fn a_small_matrix_stays_on_one_gpu() {
        let a = poisson3d_7pt(16, 16, 16).unwrap();
        let c = choose_gpu_count(&a, 8, &LinkProps::NVLINK4, |b| {
            roofline_block_us(b, h100_bw())
        })
        .unwrap();
        assert_eq!(c.gpus, 1, "{:#?}", c.options);
        assert_eq!(c.options.len(), 8);
        assert_eq!(c.options[0].allreduce_us, 0.0);
    }

    #[test]
    fn a_large_stencil_with_fast_links_spreads_and_slow_links_spread_less() {
        let a = poisson3d_7pt(96, 96, 96).unwrap();
        let fast = choose_gpu_count(&a, 8, &LinkProps::NVLINK4, |b| {
            roofline_block_us(b, h100_bw())
        })
        .unwrap();
        assert!(fast.gpus > 1, "{:#?}", fast.options);
        // A link with ten times the latencies: more GPUs no longer pay.
        let slow = LinkProps {
            name: "slow",
            bandwidth_gbs: 10.0,
            message_latency_us: 100.0,
            allreduce_latency_us: 200.0,
        };
        let s = choose_gpu_count(&a, 8, &slow, |b| roofline_block_us(b, h100_bw())).unwrap();
        assert!(s.gpus < fast.gpus, "{} vs {}", s.gpus, fast.gpus);
        // The prediction is the sum of its parts, compute shrinking with the count.
        for o in &fast.options {
            assert!((o.predicted_us - o.compute_us - o.halo_us - o.allreduce_us).abs() < 1e-9);
        }
        assert!(fast.options[1].compute_us < fast.options[0].compute_us);
    }

    /// With the committed H200 model, the count's compute times are the sub-plans'
    /// predictions (the slowest block of each split as plan_blocks predicts it), a small
    /// matrix stays on one GPU and a large stencil spreads over NVLink.
    #[cfg(feature = "model")]
    #[test]
    fn the_model_predicts_the_blocks_of_every_count() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
        let m = autopcg_model::file::ModelFile::load(path).unwrap();
        let props = crate::model_device_props(&m);
        let choose = |a: &autopcg_sparse::CsrMatrix, max: usize, link: &LinkProps| {
            let mut r = PlanRequest::new(a, PrecondKind::Jacobi, Target::Gpu(props.clone()));
            r.model = Some(crate::ModelRef {
                file: &m,
                label: "h200",
            });
            let (c, modelled) = choose_gpu_count_planned(&r, max, link).unwrap();
            assert!(modelled);
            // Each option's compute is its split's slowest sub-plan.
            for o in &c.options {
                let part = RowPartition::balanced(&default_row_costs(a), o.gpus).unwrap();
                let split = BlockSplit::new(a, part).unwrap();
                let plans = plan_blocks(&r, &split).unwrap();
                let slowest = plans
                    .blocks
                    .iter()
                    .map(|b| b.predicted_us)
                    .fold(0.0, f64::max);
                assert_eq!(o.compute_us, slowest, "{} GPUs", o.gpus);
            }
            c
        };
        let nvlink = LinkProps::NVLINK4;
        let small = choose(&poisson3d_7pt(16, 16, 16).unwrap(), 4, &nvlink);
        assert_eq!(small.gpus, 1, "{:#?}", small.options);
        // 96^3: the model predicts about 44 us per iteration on one H200, so the all-reduce's
        // latency and the halo cost more than the second GPU saves (the bandwidth bound of
        // the test above spreads the same matrix); over a link with microsecond latencies,
        // two GPUs pay.
        let a = poisson3d_7pt(96, 96, 96).unwrap();
        let large = choose(&a, 2, &nvlink);
        assert_eq!(large.gpus, 1, "{:#?}", large.options);
        assert!(large.options[1].compute_us < 0.7 * large.options[0].compute_us);
        let quick = LinkProps {
            name: "quick",
            bandwidth_gbs: 400.0,
            message_latency_us: 1.0,
            allreduce_latency_us: 1.0,
        };
        assert_eq!(choose(&a, 2, &quick).gpus, 2);
    }

    #[cfg(feature = "model")]
    #[test]
    fn the_link_is_the_measured_one_when_the_model_holds_it() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
        let mut m = autopcg_model::file::ModelFile::load(path).unwrap();
        // No model, or a model without a measured link: the defaults.
        assert_eq!(link_for(None), DEFAULT_LINK);
        assert_eq!(m.link, None);
        assert_eq!(link_for(Some(&m)), DEFAULT_LINK);
        m.link = Some(autopcg_model::MeasuredLink::synthetic(
            2,
            25.0,
            18.0,
            45.0,
            &[8, 1 << 20],
        ));
        let l = link_for(Some(&m));
        assert_eq!(l, LinkProps::measured(25.0, 18.0, 45.0));
        assert_eq!(l.name, LinkProps::MEASURED);
        // The measured figures reach the GPU count: a slow link keeps a small matrix on one.
        let a = poisson3d_7pt(16, 16, 16).unwrap();
        let c = choose_gpu_count(&a, 4, &l, |b| roofline_block_us(b, h100_bw())).unwrap();
        assert_eq!(c.link, l);
        assert_eq!(c.options[1].allreduce_us, 45.0);
    }

    #[test]
    fn rebalancing_moves_rows_away_from_a_slow_block() {
        let costs = vec![1.0; 100];
        let p = RowPartition::balanced(&costs, 2).unwrap();
        assert_eq!(p.starts(), &[0, 50, 100]);
        // Block 0 predicted three times slower than block 1.
        let q = rebalance(&costs, &p, &[3.0, 1.0]).unwrap();
        let r0 = q.range(0).len();
        assert!(r0 < 50 && r0 > 20, "{:?}", q.starts());
    }

    #[test]
    fn cpu_block_plans_have_one_plan_per_block_with_block_local_preconditioners() {
        let a = poisson3d_7pt(6, 6, 6).unwrap();
        let split = BlockSplit::by_default_costs(&a, 3).unwrap();
        let req = PlanRequest::new(&a, PrecondKind::ssor_ai(), Target::Cpu { threads: 2 });
        let p = plan_blocks(&req, &split).unwrap();
        assert_eq!(p.blocks.len(), 3);
        for (b, blk) in p.blocks.iter().zip(split.blocks()) {
            assert_eq!(b.rows, blk.rows);
            assert_eq!(b.local.preconditioner.dim(), Some(blk.nrows()));
            assert_eq!(b.halo.format, "csr");
            assert!(b.predicted_us > 0.0);
        }
    }
}
