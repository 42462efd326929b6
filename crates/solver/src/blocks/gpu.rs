//! Multi-block Chronopoulos–Gear PCG on the device: the block code a multi-GPU solve runs, with
//! every block on one GPU and a [`DeviceTransport`] moving the halos and combining the dots.
//!
//! Per block: its rows' slices of x, r, u, w, p, s (and b and a scratch vector), its local part
//! in the format its sub-plan chooses ([`DeviceOperator`]), its halo part in CSR, its
//! preconditioner (none, Jacobi, or block-local SSOR-AI, uploaded as [`DevicePrecond`]), a
//! send buffer with its gather list, and a halo buffer. Per iteration:
//!
//! 1. each block's fused update (`cg_update`, reading alpha and beta from the one scalar
//!    buffer) and preconditioner;
//! 2. each block packs its `u` entries its neighbours need (`gather_f64`), the transport
//!    delivers them into the neighbours' halo buffers, each block multiplies its local part
//!    (`w = A_loc u`) and adds its halo part (`w += A_halo h`), and writes its three dots into
//!    its slot of a small array (`dot3_slot`);
//! 3. the transport sums the slots and runs the recurrence step on the device into the scalar
//!    buffer ([`CgScalars`]), exactly as `dot3_advance` does, so the driver's polling, halts and
//!    history are those of the unsplit GPU backend.
//!
//! Kernels are launched one by one (no CUDA graph). [`PcgBackend::poll`] is the only
//! synchronisation of an iteration.
use std::borrow::Cow;
use std::ops::{ControlFlow, Range};

use autopcg_gpu::kernels::blocks::{
    dot3_slot, dot3_slots_advance, gather, grid_stride_config, preload, spmv_csr_add,
};
use autopcg_gpu::kernels::dot::{dot, Dot3Workspace, DotKernel, DotWorkspace};
use autopcg_gpu::kernels::vector::{
    cg_update, xpay, CgVectors, UpdateU, VectorKernel, VectorVariant,
};
use autopcg_gpu::scalars::{DeviceHalt, HaltCode};
use autopcg_gpu::{CgScalars, DeviceCsr, DeviceVec, GpuDevice, LaunchConfig};
use autopcg_sparse::blocks::{BlockSplit, HaloBlock, RowPartition};
use autopcg_sparse::CsrMatrix;

use super::schedule::{copy_schedule, pack_indices, DeviceCopy};
use super::{BlockPrecond, BlockReport, BlockSolve};
use crate::backend::{Dots, GearScalars, Halt, IterRecord, PcgBackend};
use crate::gpu::ops::{preload_dot3, preload_vector, DeviceOperator, DevicePrecond};
use crate::gpu::GpuPlanChoice;
use crate::scaling::{first_bad_diagonal, inf_norm, ScaleFactors};
use crate::{pcg, PcgError, PcgParams, PrecondKind, Preconditioner, SolveFailure};

/// Iterations the device history holds before it first grows.
const INITIAL_HISTORY: u32 = 1024;
/// Most iterations reserved ahead of a solve.
const MAX_RESERVED_HISTORY: u32 = 1 << 20;

/// The communication of multi-block PCG between device buffers.
///
/// On one GPU ([`OneDevice`]) the exchange is device-to-device copies on the stream and the
/// all-reduce one small kernel. A multi-GPU transport would deliver the same copies with peer
/// copies or NCCL send/receive, and all-reduce the slots (NCCL) before each device runs the
/// recurrence step on its own scalar buffer.
pub trait DeviceTransport {
    /// Queues `halo[c.to][c.dst_start..] = send[c.from][c.src]` for every copy, ordered before
    /// any later work that reads the halo buffers.
    fn exchange(
        &mut self,
        dev: &GpuDevice,
        copies: &[DeviceCopy],
        send: &[DeviceVec<f64>],
        halo: &mut [DeviceVec<f64>],
    ) -> Result<(), PcgError>;

    /// Queues the sum of the `nblocks` slot triples of `slots` (block `b`'s gamma, delta, rr at
    /// `3 b..3 b + 3`) and the recurrence step into `scalars`, for `iteration` when given, else
    /// for the one after the last recorded. `threads` is a reduction block size.
    fn reduce_advance(
        &mut self,
        dev: &GpuDevice,
        threads: u32,
        slots: &DeviceVec<f64>,
        nblocks: u32,
        scalars: &mut CgScalars,
        iteration: Option<u32>,
    ) -> Result<(), PcgError>;
}

/// Every block on one device: copies on the stream, the sum in block order in one kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneDevice {
    /// Vector entries copied by [`DeviceTransport::exchange`].
    pub entries_moved: u64,
    /// Exchanges made.
    pub exchanges: u64,
    /// All-reduces made.
    pub reductions: u64,
}

impl DeviceTransport for OneDevice {
    fn exchange(
        &mut self,
        dev: &GpuDevice,
        copies: &[DeviceCopy],
        send: &[DeviceVec<f64>],
        halo: &mut [DeviceVec<f64>],
    ) -> Result<(), PcgError> {
        for c in copies {
            let src = send
                .get(c.from)
                .ok_or_else(|| PcgError::Backend(format!("no send buffer for {c:?}")))?;
            let dst = halo
                .get_mut(c.to)
                .ok_or_else(|| PcgError::Backend(format!("no halo buffer for {c:?}")))?;
            dev.copy_range(src, c.src.clone(), dst, c.dst_start)?;
            self.entries_moved += c.src.len() as u64;
        }
        self.exchanges += 1;
        Ok(())
    }

    fn reduce_advance(
        &mut self,
        dev: &GpuDevice,
        threads: u32,
        slots: &DeviceVec<f64>,
        nblocks: u32,
        scalars: &mut CgScalars,
        iteration: Option<u32>,
    ) -> Result<(), PcgError> {
        dot3_slots_advance(dev, threads, slots, nblocks, scalars, iteration)?;
        self.reductions += 1;
        Ok(())
    }
}

/// One block on the device.
struct DeviceBlock {
    choice: GpuPlanChoice,
    local: DeviceOperator,
    /// The halo part (absent when the block couples to no other).
    halo: Option<DeviceCsr>,
    halo_cfg: LaunchConfig,
    pre: DevicePrecond,
    send_idx: DeviceVec<u32>,
    gather_cfg: LaunchConfig,
    xpay: (VectorVariant, LaunchConfig),
    dot: (DotKernel, LaunchConfig),
    b: DeviceVec<f64>,
    x: DeviceVec<f64>,
    r: DeviceVec<f64>,
    u: DeviceVec<f64>,
    w: DeviceVec<f64>,
    p: DeviceVec<f64>,
    s: DeviceVec<f64>,
    t: DeviceVec<f64>,
    ws3: Dot3Workspace,
    ws: DotWorkspace,
}

/// Which vector a halo exchange carries.
#[derive(Debug, Clone, Copy)]
enum Carried {
    U,
    X,
}

/// Multi-block PCG state on the device.
pub struct BlockGpuBackend<T: DeviceTransport = OneDevice> {
    dev: GpuDevice,
    n: usize,
    row_ranges: Vec<Range<usize>>,
    blocks: Vec<DeviceBlock>,
    sends: Vec<DeviceVec<f64>>,
    halos: Vec<DeviceVec<f64>>,
    copies: Vec<DeviceCopy>,
    transport: T,
    slots: DeviceVec<f64>,
    threads: u32,
    scalars: CgScalars,
    running: bool,
    queued: u32,
    polled: u32,
    carried: Vec<[f64; 3]>,
    host_scalars: Option<GearScalars>,
    scale: ScaleFactors,
    a_norm: f64,
}

impl<T: DeviceTransport> std::fmt::Debug for BlockGpuBackend<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockGpuBackend")
            .field("n", &self.n)
            .field("blocks", &self.row_ranges)
            .field("running", &self.running)
            .field("queued", &self.queued)
            .finish()
    }
}

fn halt_from_device(h: DeviceHalt) -> Halt {
    match h.code {
        HaltCode::GammaNotPositive => Halt::GammaNotPositive(h.value),
        HaltCode::CurvatureNotPositive => Halt::CurvatureNotPositive(h.value),
        HaltCode::NotFinite => Halt::NotFinite,
    }
}

impl<T: DeviceTransport> BlockGpuBackend<T> {
    /// A backend for the system already scaled by `scale` (`a`, `b`, `x0` are those of the
    /// scaled system, `split` was built from `a`): block `i` gets the preconditioner `pre[i]`
    /// (built on its local part) run as `choices[i]` says (a plan of the block's local part),
    /// its halo part in CSR. Uploads everything and loads every kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &GpuDevice,
        a: &CsrMatrix,
        split: &BlockSplit,
        pre: &[Preconditioner],
        choices: &[GpuPlanChoice],
        b: &[f64],
        x0: Option<&[f64]>,
        scale: ScaleFactors,
        transport: T,
    ) -> Result<Self, PcgError> {
        let n = a.nrows();
        let nb = split.blocks().len();
        if a.ncols() != n || split.partition().nrows() != n || b.len() != n {
            return Err(PcgError::Dimension(format!(
                "a {} x {} matrix, a split of {} rows and a right-hand side of {}",
                n,
                a.ncols(),
                split.partition().nrows(),
                b.len()
            )));
        }
        if x0.is_some_and(|x| x.len() != n) || pre.len() != nb || choices.len() != nb {
            return Err(PcgError::Dimension(format!(
                "{nb} blocks need {nb} preconditioners and plans (got {} and {}) and an \
                 initial guess of {n}",
                pre.len(),
                choices.len()
            )));
        }
        if u32::try_from(n).is_err() {
            return Err(PcgError::Dimension(format!(
                "{n} rows exceed the 32-bit indices of the GPU kernels"
            )));
        }
        if let Some((row, value)) = first_bad_diagonal(a) {
            return Err(PcgError::BadDiagonal {
                row,
                value: crate::scaling::ldexp(value, -scale.matrix_exp),
                precond: pre
                    .first()
                    .map_or("none", Preconditioner::kind_name)
                    .to_string(),
            });
        }
        let threads = choices.first().map_or(256, |c| c.dot3.config.threads);
        let mut blocks = Vec::with_capacity(nb);
        let mut sends = Vec::with_capacity(nb);
        let mut halos = Vec::with_capacity(nb);
        for ((blk, p), c) in split.blocks().iter().zip(pre).zip(choices) {
            blocks.push(upload_block(dev, blk, p, c, b, x0)?);
            sends.push(dev.alloc_zeros(blk.send_len())?);
            halos.push(dev.alloc_zeros(blk.halo_len())?);
        }
        let backend = BlockGpuBackend {
            dev: dev.clone(),
            n,
            row_ranges: split.blocks().iter().map(|b| b.rows.clone()).collect(),
            blocks,
            sends,
            halos,
            copies: copy_schedule(split)?,
            transport,
            slots: dev.alloc_zeros(3 * nb)?,
            threads,
            scalars: CgScalars::new(dev, INITIAL_HISTORY)?,
            running: false,
            queued: 0,
            polled: 0,
            carried: Vec::new(),
            host_scalars: None,
            scale,
            a_norm: inf_norm(a),
        };
        backend.preload()?;
        Ok(backend)
    }

    fn preload(&self) -> Result<(), PcgError> {
        let dev = &self.dev;
        preload(dev, self.threads)?;
        for blk in &self.blocks {
            blk.local.preload(dev)?;
            blk.pre.preload(dev)?;
            preload_vector(dev, VectorKernel::CgUpdate(blk.choice.update.variant))?;
            preload_vector(dev, VectorKernel::Xpay(blk.xpay.0))?;
            preload_dot3(dev, blk.choice.dot3.kernel, blk.choice.dot3.config.threads)?;
            preload(dev, blk.choice.dot3.config.threads)?;
            dev.kernel(
                &autopcg_gpu::ModuleSpec::dot(blk.dot.1.threads),
                &blk.dot.0.to_string(),
            )?;
        }
        Ok(())
    }

    /// The transport (for its counters).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Rows of every block.
    pub fn block_rows(&self) -> &[Range<usize>] {
        &self.row_ranges
    }

    /// Makes room in the device history for `max_iter` iterations (up to 2^20; beyond, it grows
    /// on demand).
    pub fn reserve_iterations(&mut self, max_iter: usize) -> Result<(), PcgError> {
        let want = u32::try_from(max_iter.saturating_add(1))
            .unwrap_or(u32::MAX)
            .min(MAX_RESERVED_HISTORY);
        if want > self.scalars.capacity() {
            self.grow_history(want)?;
        }
        Ok(())
    }

    fn grow_history(&mut self, capacity: u32) -> Result<(), PcgError> {
        let dev = &self.dev;
        let from = self.polled + self.carried.len() as u32;
        if self.running && from < self.queued {
            let (_, hist) = self.scalars.read_since(dev, from, self.queued)?;
            self.carried.extend(hist);
        }
        let raw = self.scalars.read_raw(dev)?;
        let mut fresh = CgScalars::new(dev, capacity)?;
        fresh.write_raw(dev, &raw)?;
        self.scalars = fresh;
        Ok(())
    }

    /// The iterate of the original system, joined from the blocks (waits for queued work).
    pub fn x(&mut self) -> Result<Vec<f64>, PcgError> {
        let mut x = Vec::with_capacity(self.n);
        for blk in &self.blocks {
            x.extend(self.dev.download(&blk.x)?);
        }
        self.scale.unscale_solution(&mut x);
        Ok(x)
    }

    /// Packs the carried vector of every block and delivers the halos.
    fn exchange(&mut self, which: Carried) -> Result<(), PcgError> {
        let dev = &self.dev;
        for (blk, send) in self.blocks.iter().zip(&mut self.sends) {
            let src = match which {
                Carried::U => &blk.u,
                Carried::X => &blk.x,
            };
            gather(dev, blk.gather_cfg, &blk.send_idx, src, send)?;
        }
        self.transport
            .exchange(dev, &self.copies, &self.sends, &mut self.halos)
    }

    /// `out = A v` per block, after the exchange of `v`.
    fn multiply(&mut self, which: Carried) -> Result<(), PcgError> {
        self.exchange(which)?;
        let dev = &self.dev;
        for (blk, h) in self.blocks.iter_mut().zip(&self.halos) {
            let (src, out) = match which {
                Carried::U => (&blk.u, &mut blk.w),
                Carried::X => (&blk.x, &mut blk.t),
            };
            blk.local.apply(dev, src, out)?;
            if let Some(hm) = &blk.halo {
                spmv_csr_add(dev, hm, blk.halo_cfg, h, out)?;
            }
        }
        Ok(())
    }

    /// `w = A u`, the three dots per block and the all-reduce with the recurrence step.
    fn spmv_dots(&mut self, iteration: Option<u32>) -> Result<(), PcgError> {
        self.multiply(Carried::U)?;
        let dev = &self.dev;
        for (b, blk) in self.blocks.iter_mut().enumerate() {
            let c = blk.choice.dot3;
            dot3_slot(
                dev,
                c.config,
                &blk.r,
                &blk.u,
                &blk.w,
                &mut blk.ws3,
                &mut self.slots,
                b as u32,
            )?;
        }
        let nb = self.blocks.len() as u32;
        self.transport.reduce_advance(
            dev,
            self.threads,
            &self.slots,
            nb,
            &mut self.scalars,
            iteration,
        )
    }

    /// Sum over the blocks of `(v, v)` for the vector `which` names (block order, on the host).
    fn sum_squares(&mut self, which: Squared) -> Result<f64, PcgError> {
        let dev = &self.dev;
        let mut total = 0.0;
        for blk in &mut self.blocks {
            let (k, cfg) = blk.dot;
            let v = match which {
                Squared::B => &blk.b,
                Squared::X => &blk.x,
                Squared::T => &blk.t,
            };
            dot(dev, k, cfg, v, v, &mut blk.ws)?;
            total += blk.ws.result(dev)?;
        }
        Ok(total.max(0.0))
    }
}

/// Which vector [`BlockGpuBackend::sum_squares`] reduces.
#[derive(Debug, Clone, Copy)]
enum Squared {
    B,
    X,
    T,
}

fn upload_block(
    dev: &GpuDevice,
    blk: &HaloBlock,
    pre: &Preconditioner,
    choice: &GpuPlanChoice,
    b: &[f64],
    x0: Option<&[f64]>,
) -> Result<DeviceBlock, PcgError> {
    let m = blk.nrows();
    let props = dev.props();
    choice.check(m, pre, props)?;
    let local = DeviceOperator::upload(dev, &blk.local, choice.a.method, &choice.padding, "A")?;
    let pre_dev = DevicePrecond::upload(dev, pre, &choice.precond, &choice.padding)?;
    let halo = if blk.halo.nnz() > 0 {
        Some(DeviceCsr::upload(dev, &blk.halo)?)
    } else {
        None
    };
    let rows = blk.rows.clone();
    Ok(DeviceBlock {
        choice: choice.clone(),
        local,
        halo,
        halo_cfg: grid_stride_config(m),
        pre: pre_dev,
        send_idx: dev.upload(&pack_indices(blk))?,
        gather_cfg: grid_stride_config(blk.send_len()),
        xpay: (
            VectorVariant::GridV2,
            VectorVariant::GridV2.default_config(m as u64, props),
        ),
        dot: (
            DotKernel::LastBlock,
            DotKernel::LastBlock.default_config(m as u64, props),
        ),
        b: dev.upload(&b[rows.clone()])?,
        x: match x0 {
            Some(x0) => dev.upload(&x0[rows])?,
            None => dev.alloc_zeros(m)?,
        },
        r: dev.alloc_zeros(m)?,
        u: dev.alloc_zeros(m)?,
        w: dev.alloc_zeros(m)?,
        p: dev.alloc_zeros(m)?,
        s: dev.alloc_zeros(m)?,
        t: dev.alloc_zeros(m)?,
        ws3: Dot3Workspace::new(dev, choice.dot3.config.blocks)?,
        ws: DotWorkspace::new(
            dev,
            DotKernel::LastBlock.default_config(m as u64, props).blocks,
        )?,
    })
}

impl<T: DeviceTransport> PcgBackend for BlockGpuBackend<T> {
    fn n(&self) -> usize {
        self.n
    }

    fn rhs_norm(&mut self) -> Result<f64, PcgError> {
        Ok(self.sum_squares(Squared::B)?.sqrt())
    }

    fn start(&mut self) -> Result<(), PcgError> {
        // r = b - A x
        self.multiply(Carried::X)?;
        let dev = self.dev.clone();
        for blk in &mut self.blocks {
            dev.copy(&blk.t, &mut blk.r)?;
            let (v, cfg) = blk.xpay;
            xpay(&dev, v, cfg, -1.0, &blk.b, &mut blk.r)?;
            blk.pre.apply(&dev, &blk.r, &mut blk.u, &mut blk.t)?;
            dev.fill_zeros(&mut blk.p)?;
            dev.fill_zeros(&mut blk.s)?;
        }
        self.spmv_dots(Some(0))?;
        self.running = true;
        self.queued = 1;
        self.polled = 0;
        self.carried.clear();
        self.host_scalars = None;
        Ok(())
    }

    fn update_vectors(&mut self) -> Result<(), PcgError> {
        if !self.running {
            return Ok(());
        }
        for blk in &mut self.blocks {
            let c = blk.choice.update;
            cg_update(
                &self.dev,
                c.variant,
                c.config,
                &self.scalars,
                CgVectors {
                    u: UpdateU::Separate(&blk.u),
                    w: &blk.w,
                    p: &mut blk.p,
                    s: &mut blk.s,
                    x: &mut blk.x,
                    r: &mut blk.r,
                },
            )?;
        }
        Ok(())
    }

    fn apply_preconditioner(&mut self) -> Result<(), PcgError> {
        if !self.running {
            return Ok(());
        }
        for blk in &mut self.blocks {
            blk.pre.apply(&self.dev, &blk.r, &mut blk.u, &mut blk.t)?;
        }
        Ok(())
    }

    fn spmv_reduce_advance(&mut self) -> Result<(), PcgError> {
        if !self.running {
            return Ok(());
        }
        if self.queued >= self.scalars.capacity() {
            let cap = self.scalars.capacity();
            let grown = cap
                .checked_mul(2)
                .filter(|&c| c > self.queued)
                .ok_or_else(|| {
                    PcgError::Backend(format!(
                        "the device history cannot grow beyond {cap} iterations"
                    ))
                })?;
            self.grow_history(grown)?;
        }
        self.spmv_dots(None)?;
        self.queued += 1;
        Ok(())
    }

    fn poll(&mut self) -> Result<Vec<IterRecord>, PcgError> {
        if !self.running {
            return Ok(Vec::new());
        }
        let from = self.polled + self.carried.len() as u32;
        let (snap, hist) = self.scalars.read_since(&self.dev, from, self.queued)?;
        let entries: Vec<[f64; 3]> = self.carried.drain(..).chain(hist).collect();
        let mut records = Vec::with_capacity(entries.len());
        for (j, e) in entries.iter().enumerate() {
            let k = self.polled + j as u32;
            let dots = Dots {
                gamma: e[0],
                delta: e[1],
                rr: e[2],
            };
            if let Some(h) = snap.halt.filter(|h| h.iteration == k) {
                records.push(IterRecord {
                    iteration: k as usize,
                    dots,
                    outcome: Err(halt_from_device(h)),
                });
                self.running = false;
                self.host_scalars = None;
                self.polled = self.queued;
                return Ok(records);
            }
            let outcome = if k == 0 {
                GearScalars::start(dots)
            } else {
                match self.host_scalars {
                    Some(s) => s.advance(dots),
                    None => {
                        return Err(PcgError::Backend(format!(
                            "record {k} has no predecessor scalars (internal error)"
                        )))
                    }
                }
            };
            let sc = outcome.map_err(|h| {
                PcgError::Backend(format!(
                    "the device recurrence went on at iteration {k} where the host's halts \
                     ({h:?}); dots {dots:?}"
                ))
            })?;
            self.host_scalars = Some(sc);
            records.push(IterRecord {
                iteration: k as usize,
                dots,
                outcome: Ok(sc),
            });
        }
        if let Some(h) = snap.halt {
            return Err(PcgError::Backend(format!(
                "the device recurrence halted at iteration {} outside the records {}..{} \
                 (internal error)",
                h.iteration, self.polled, self.queued
            )));
        }
        if let Some(last) = records.last_mut() {
            if snap.iteration as usize != last.iteration {
                return Err(PcgError::Backend(format!(
                    "the device recorded iteration {} last but the host queued up to {} \
                     (internal error)",
                    snap.iteration, last.iteration
                )));
            }
            let sc = GearScalars {
                alpha: snap.alpha,
                beta: snap.beta,
                gamma: snap.gamma,
            };
            last.outcome = Ok(sc);
            self.host_scalars = Some(sc);
        }
        self.polled = self.queued;
        Ok(records)
    }

    fn true_residual_norm(&mut self) -> Result<f64, PcgError> {
        self.multiply(Carried::X)?;
        let dev = self.dev.clone();
        for blk in &mut self.blocks {
            let (v, cfg) = blk.xpay;
            xpay(&dev, v, cfg, -1.0, &blk.b, &mut blk.t)?;
        }
        Ok(self.sum_squares(Squared::T)?.sqrt())
    }

    fn matrix_norm(&mut self) -> Result<f64, PcgError> {
        Ok(self.a_norm)
    }

    fn solution_norm(&mut self) -> Result<f64, PcgError> {
        Ok(self.sum_squares(Squared::X)?.sqrt())
    }

    fn norm_factor(&self) -> f64 {
        self.scale.norm_factor()
    }

    fn solution(&mut self) -> Result<Vec<f64>, PcgError> {
        self.x()
    }

    fn zero_solution(&mut self) -> Result<(), PcgError> {
        for blk in &mut self.blocks {
            self.dev.fill_zeros(&mut blk.x)?;
        }
        self.running = false;
        self.polled = self.queued;
        self.carried.clear();
        self.host_scalars = None;
        Ok(())
    }
}

/// Solves `A x = b` on one GPU with `a` split into the row blocks of `partition`, from `x0`
/// (zero when `None`), preconditioned per block like [`super::solve_blocks_cpu`]
/// ([`BlockPrecond`], built on the scaled blocks); `choose(b, local, pre)` gives block `b`'s
/// plan for its (scaled) local part and preconditioner. `report` receives the split's
/// [`BlockReport`] as soon as it is built.
#[allow(clippy::too_many_arguments)]
pub fn solve_blocks_gpu(
    dev: &GpuDevice,
    a: &CsrMatrix,
    b: &[f64],
    x0: Option<&[f64]>,
    kind: &PrecondKind,
    params: &PcgParams,
    partition: RowPartition,
    mut choose: impl FnMut(usize, &CsrMatrix, &Preconditioner) -> GpuPlanChoice,
    report: &mut Option<BlockReport>,
) -> Result<BlockSolve, SolveFailure> {
    let t0 = std::time::Instant::now();
    if b.len() != a.nrows() {
        return Err(PcgError::Dimension(format!(
            "right-hand side has length {}, the matrix has {} rows",
            b.len(),
            a.nrows()
        ))
        .into());
    }
    let factors = ScaleFactors::for_system(a, b);
    let scaled: Cow<'_, CsrMatrix> = factors.scale_matrix(a);
    let split = BlockSplit::new(&scaled, partition)
        .map_err(|e| PcgError::InvalidParameter(format!("block split: {e}")))?;
    let pre = BlockPrecond::build(&scaled, &split, kind)?;
    *report = Some(BlockReport::new(&split, pre.dropped_couplings()));
    let choices: Vec<GpuPlanChoice> = split
        .blocks()
        .iter()
        .zip(pre.blocks())
        .enumerate()
        .map(|(i, (blk, p))| choose(i, &blk.local, p))
        .collect();
    let sb = factors.scale_rhs(b);
    let sx0 = x0.map(|x| factors.scale_solution(x));
    let mut backend = BlockGpuBackend::new(
        dev,
        &scaled,
        &split,
        pre.blocks(),
        &choices,
        &sb,
        sx0.as_deref(),
        factors,
        OneDevice::default(),
    )?;
    backend.reserve_iterations(params.max_iter)?;
    if let Some(r) = report.as_mut() {
        r.setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    }
    match pcg(&mut backend, params, |_| ControlFlow::Continue(())) {
        Ok(info) => Ok(BlockSolve {
            x: backend.x()?,
            info,
        }),
        Err(error @ (PcgError::NotConverged { .. } | PcgError::Stagnated { .. })) => {
            Err(SolveFailure {
                error,
                x: backend.x().ok(),
            })
        }
        Err(error) => Err(SolveFailure { error, x: None }),
    }
}
