//! Multi-block Chronopoulos–Gear PCG on CUDA devices: every block on a device handle of its
//! own, or several blocks sharing one.
//!
//! # Design
//!
//! There is one code path. The caller gives one [`GpuDevice`] handle per block. Blocks given
//! the same handle (clones of one [`GpuDevice`]) form a **lane**: they share its stream, its
//! scalar buffer and its slot array, and run one after the other on that stream. Blocks given
//! different handles are on different lanes, whose streams run concurrently; the lanes order
//! their work with events ([`GpuEvent`]) and copy between each other with
//! [`GpuDevice::copy_range_from`] (a device-to-device copy when the two handles share a context,
//! as two handles opened on one GPU do, a peer copy between GPUs). So:
//!
//! - one handle for every block (the one-GPU case) is one lane: no event, no peer copy, one
//!   reduction kernel per iteration, exactly the work of a single-stream solve;
//! - one handle per block on N GPUs is the several-GPU solve;
//! - N handles opened on the same GPU run the several-GPU code, events included, on one GPU
//!   (what the tests do).
//!
//! A transport trait over device buffers was tried and dropped: the all-reduce below needs
//! every lane's own scalar buffer and slot array and the events between the lanes' streams, so
//! the trait would have had to own most of the backend.
//!
//! # One iteration
//!
//! 1. Per block, on its lane: the fused update (`cg_update`, reading alpha and beta from the
//!    lane's scalar buffer) and the preconditioner.
//! 2. Halo exchange, pulled by the receiver, overlapped with the local multiply: each lane
//!    waits until the other lanes have finished reading its send buffers (their `pulled`
//!    events), packs its blocks' `u` entries (`gather_f64`) and records `packed`, then queues
//!    its blocks' local SpMV. With several lanes, each lane's *copier* (a second handle on the
//!    same device: its own stream in the same context) waits for the senders' `packed` and
//!    for the lane's own halo parts of the last multiply (`halo_read`), copies the messages
//!    for its blocks into their halo buffers and records `pulled` and `halo_ready`; the copies
//!    thus run while the local SpMV does. With one lane the copies follow the local SpMV on
//!    its one stream.
//! 3. Per block, once its lane's `halo_ready` is reached: the halo part added with the kernel
//!    and launch of the block's [`HaloMethod`] (the add variant of CSR scalar or of CSR vector
//!    with 2 to 32 lanes per row, `spmv_csr_scalar_add` / `spmv_csr_vector_add_L`: the model's
//!    choice for the block's halo part where a plan made one, else CSR scalar at 256 threads
//!    per block, [`HaloMethod::fixed`]); the lane then records `halo_read`.
//! 4. The dot all-reduce as an all-gather: each lane waits until the others have copied its
//!    slots of the last iteration (their `gathered`), writes its blocks' three dots into its
//!    slot array (`dot3_slot`, block `b` at `3 b..3 b + 3`) and records `dotted`; each lane then
//!    waits for the others' `dotted`, copies their blocks' slots into its own array, records
//!    `gathered` and runs `dot3_slots_advance` on its own scalar buffer. Every lane sums the
//!    same slots in block order with the same kernel, so all scalar buffers hold bit-identical
//!    scalars, and the iteration keeps one reduction.
//!
//! The driver polls the first lane's scalars (they are the same everywhere). Lane 0's
//! reduction waits for every lane's dots, so its history is complete when it is read. The norms
//! of b, x and the true residual are summed per block on its device and across blocks on the
//! host; the solution is gathered from every block.
//!
//! # Graphs
//!
//! Where every block's plan replays its iterations from CUDA graphs
//! ([`GpuPlanChoice::use_graph`]) and every lane shares one context (all blocks on one GPU,
//! on one handle or several), whole iterations are captured and replayed as the one-block
//! backend does: the steps a PCG iteration asks for are deferred, and every
//! [`GpuPlanChoice::graph_iters`] iterations (the least over the blocks) are replayed from one
//! graph, the rest (before a poll) from graphs of one iteration. A capture begins on lane 0's
//! stream, which every other stream (the other lanes' and the copiers') joins by waiting for
//! an event recorded there, and ends with every stream joined back into lane 0's; the events
//! between the lanes become the graph's edges. A wait for an event that the capture has not
//! recorded yet (the first iteration's wait for the last iteration's copies) is left out: the
//! graph is launched after lane 0's stream has waited for the end of every other stream, and
//! every other stream waits for the graph's end, so the work before and after a replay is
//! ordered with it. Lanes on several GPUs (several contexts) launch their kernels one by one;
//! a graph spanning devices is not built. Replay is off until
//! [`BlockGpuBackend::replay_graphs`] turns it on: its capture has not run on a GPU yet.
use std::ops::{ControlFlow, Range};

use autopcg_gpu::device::GpuEvent;
use autopcg_gpu::kernels::blocks::{
    dot3_slot, dot3_slots_advance, gather, grid_stride_config, preload, spmv_csr_add,
};
use autopcg_gpu::kernels::dot::{dot, Dot3Workspace, DotKernel, DotWorkspace};
use autopcg_gpu::kernels::vector::{
    cg_update, xpay, CgVectors, UpdateU, VectorKernel, VectorVariant,
};
use autopcg_gpu::{CgScalars, DeviceCsr, DeviceVec, GpuDevice, GpuError, GpuGraph, LaunchConfig};
use autopcg_sparse::blocks::{block_values_into, BlockSplit, HaloBlock, RowPartition};
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;
use std::cell::RefCell;

use super::schedule::{copy_schedule, pack_indices, DeviceCopy};
use super::{
    check_block_system, scaled_split, BlockPrecond, BlockProblem, BlockReport, BlockSolve,
};
use crate::backend::{IterRecord, PcgBackend};
use crate::gpu::ops::{
    preload_dot3, preload_vector, upload_part, DeviceOperator, DevicePrecond, Stopwatch,
};
use crate::gpu::poll::{poll_records, PollState};
use crate::gpu::refresh::DeviceRefresh;
use crate::gpu::{BackendTimes, GpuPlanChoice, HaloMethod};
use crate::scaling::{inf_norm, ldexp, scale_slice, ScaleFactors, ValueStats};
use crate::{pcg, PcgError, PrecondKind, Preconditioner, SolveFailure, ValueRefresh};

/// Iterations the device history holds before it first grows.
const INITIAL_HISTORY: u32 = 1024;
/// Most iterations reserved ahead of a solve.
const MAX_RESERVED_HISTORY: u32 = 1 << 20;

/// What the communication of a block solve moved (replayed iterations included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockTraffic {
    /// Halo entries copied into halo buffers.
    pub entries_moved: u64,
    /// Halo exchanges made.
    pub exchanges: u64,
    /// All-reduces of the dots made (each ends with every lane's recurrence step).
    pub reductions: u64,
    /// Slot triples copied between lanes by the all-reduces (0 with one lane).
    pub slots_moved: u64,
}

impl BlockTraffic {
    fn plus(self, o: BlockTraffic) -> BlockTraffic {
        BlockTraffic {
            entries_moved: self.entries_moved + o.entries_moved,
            exchanges: self.exchanges + o.exchanges,
            reductions: self.reductions + o.reductions,
            slots_moved: self.slots_moved + o.slots_moved,
        }
    }

    fn minus(self, o: BlockTraffic) -> BlockTraffic {
        BlockTraffic {
            entries_moved: self.entries_moved - o.entries_moved,
            exchanges: self.exchanges - o.exchanges,
            reductions: self.reductions - o.reductions,
            slots_moved: self.slots_moved - o.slots_moved,
        }
    }
}

/// The events a lane records for the other lanes (see [`Lane`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Packed,
    Pulled,
    HaloReady,
    HaloRead,
    Dotted,
    Gathered,
    /// The end of the lane's stream, where a graph replay joins or forks the streams.
    Tail,
    /// The end of the lane's copier stream.
    CopierTail,
}

impl Ev {
    const COUNT: usize = 8;
    const ALL: [Ev; Ev::COUNT] = [
        Ev::Packed,
        Ev::Pulled,
        Ev::HaloReady,
        Ev::HaloRead,
        Ev::Dotted,
        Ev::Gathered,
        Ev::Tail,
        Ev::CopierTail,
    ];
}

/// Which steps of the current iteration were asked for but not yet launched (graph mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Idle,
    Updated,
    Preconditioned,
}

/// A captured graph of whole iterations and what one replay of it moves.
struct BlockGraph {
    graph: GpuGraph,
    traffic: BlockTraffic,
}

/// The iterations replayed from graphs (see the module documentation).
struct Replay {
    /// Iterations are replayed ([`BlockGpuBackend::replay_graphs`]).
    on: bool,
    /// Every lane shares one context and every block's plan replays graphs.
    possible: bool,
    /// Iterations per batched graph.
    iters: u32,
    one: Option<BlockGraph>,
    batch: Option<BlockGraph>,
    /// Whole iterations asked for but not yet launched.
    pending_iters: u32,
    /// Steps of the current iteration asked for but not yet launched.
    stage: Stage,
}

/// The blocks sharing one device handle, and what they share.
struct Lane {
    dev: GpuDevice,
    /// A second handle on the same device (its own stream, same context) that pulls the halos
    /// while `dev`'s stream runs the local multiply; only when there are several lanes.
    copier: Option<GpuDevice>,
    /// Its blocks, in block order.
    blocks: Vec<usize>,
    /// The other lanes' blocks as runs of consecutive blocks: `(lane, blocks)`, whose slots
    /// this lane copies in at every all-reduce.
    foreign_runs: Vec<(usize, Range<usize>)>,
    /// Its blocks' send buffers are packed.
    packed: GpuEvent,
    /// Its copies out of the other lanes' send buffers are done (recorded on the copier).
    pulled: GpuEvent,
    /// Its halo buffers are filled (recorded on the copier, waited for by `dev`).
    halo_ready: GpuEvent,
    /// Its halo parts have read the halo buffers (recorded on `dev`, waited for by the
    /// copier before it overwrites them).
    halo_read: GpuEvent,
    /// Its blocks' slots are written.
    dotted: GpuEvent,
    /// Its copies out of the other lanes' slot arrays are done.
    gathered: GpuEvent,
    /// The end of its stream (graph replays order the streams with it).
    tail: GpuEvent,
    /// The end of its copier's stream (made by the copier).
    copier_tail: Option<GpuEvent>,
}

impl Lane {
    fn event(&self, ev: Ev) -> Option<&GpuEvent> {
        Some(match ev {
            Ev::Packed => &self.packed,
            Ev::Pulled => &self.pulled,
            Ev::HaloReady => &self.halo_ready,
            Ev::HaloRead => &self.halo_read,
            Ev::Dotted => &self.dotted,
            Ev::Gathered => &self.gathered,
            Ev::Tail => &self.tail,
            Ev::CopierTail => return self.copier_tail.as_ref(),
        })
    }

    /// The stream an event is recorded on: the copier's for the copies' events.
    fn records_on(&self, ev: Ev) -> &GpuDevice {
        match ev {
            Ev::Pulled | Ev::HaloReady | Ev::CopierTail => {
                self.copier.as_ref().unwrap_or(&self.dev)
            }
            _ => &self.dev,
        }
    }
}

/// What one row block runs: the plan of its local part (operator, preconditioner, update and
/// dots) and the multiply of its halo part.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockGpuChoice {
    /// The plan of the block's local part.
    pub local: GpuPlanChoice,
    /// The kernel and launch adding the halo part's product.
    pub halo: HaloMethod,
}

impl BlockGpuChoice {
    /// `local` with the halo rule without a model ([`HaloMethod::fixed`]) for a block of
    /// `rows` rows.
    pub fn fixed_halo(local: GpuPlanChoice, rows: usize) -> Self {
        BlockGpuChoice {
            local,
            halo: HaloMethod::fixed(rows),
        }
    }
}

/// One block on its device.
struct DeviceBlock {
    lane: usize,
    choice: GpuPlanChoice,
    local: DeviceOperator,
    /// The halo part (absent when the block couples to no other).
    halo: Option<DeviceCsr>,
    /// How the halo part is added.
    halo_method: HaloMethod,
    pre: DevicePrecond,
    /// The preconditioner recomputed on the device after new values (prepared by
    /// [`prepare_blocks_gpu_with`]; see [`BlockGpuBackend::update_values`]).
    refresh: Option<DeviceRefresh>,
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

/// Multi-block PCG state on one or several devices (see the module documentation).
pub struct BlockGpuBackend {
    n: usize,
    row_ranges: Vec<Range<usize>>,
    lanes: Vec<Lane>,
    blocks: Vec<DeviceBlock>,
    sends: Vec<DeviceVec<f64>>,
    halos: Vec<DeviceVec<f64>>,
    copies: Vec<DeviceCopy>,
    /// Per lane: the slot array (3 per block, all blocks) and the scalar buffer.
    slots: Vec<DeviceVec<f64>>,
    scalars: Vec<CgScalars>,
    threads: u32,
    traffic: BlockTraffic,
    /// Whether the recurrence runs, what was queued and what was polled.
    poll: PollState,
    scale: ScaleFactors,
    a_norm: f64,
    /// Largest |a_ij| of the unscaled matrix (NaN when the backend was built without it, and
    /// [`BlockGpuBackend::set_problem`] then always asks for a new backend).
    a_max: f64,
    /// What building the backend spent on copies, conversions and kernel loading.
    times: BackendTimes,
    /// Per block, the host arrays value updates split the new values into (kept from one
    /// update to the next).
    update_values: Vec<(Vec<f64>, Vec<f64>)>,
    /// The iterations replayed from graphs.
    replay: Replay,
    /// While a capture runs: per lane and event, whether the capture has recorded it.
    captured: RefCell<Option<Vec<bool>>>,
}

impl std::fmt::Debug for BlockGpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockGpuBackend")
            .field("n", &self.n)
            .field("blocks", &self.row_ranges)
            .field("lanes", &self.lanes.len())
            .field("running", &self.poll.running)
            .field("queued", &self.poll.queued)
            .finish()
    }
}

impl Drop for BlockGpuBackend {
    fn drop(&mut self) {
        // A lane's buffers are freed in its own stream's order; another lane may still have a
        // copy out of them queued. Let every lane finish first (errors were reported by the
        // calls that queued the work).
        for lane in &self.lanes {
            let _ = lane.dev.synchronize();
            if let Some(c) = &lane.copier {
                let _ = c.synchronize();
            }
        }
    }
}

/// `(&mut v[dst], &v[src])` for `dst != src`.
fn pair_mut<T>(v: &mut [T], dst: usize, src: usize) -> (&mut T, &T) {
    if dst < src {
        let (lo, hi) = v.split_at_mut(src);
        (&mut lo[dst], &hi[0])
    } else {
        let (lo, hi) = v.split_at_mut(dst);
        (&mut hi[0], &lo[src])
    }
}

/// Groups the blocks by device handle: the lane of every block, and the lanes with their
/// events. Lane 0 holds block 0.
fn make_lanes(devices: &[GpuDevice]) -> Result<(Vec<usize>, Vec<Lane>), PcgError> {
    let mut lane_of = Vec::with_capacity(devices.len());
    let mut lanes: Vec<Lane> = Vec::new();
    for (b, dev) in devices.iter().enumerate() {
        match lanes.iter().position(|l| l.dev.same_handle(dev)) {
            Some(l) => {
                lanes[l].blocks.push(b);
                lane_of.push(l);
            }
            None => {
                lane_of.push(lanes.len());
                lanes.push(Lane {
                    dev: dev.clone(),
                    copier: None,
                    blocks: vec![b],
                    foreign_runs: Vec::new(),
                    packed: dev.new_event()?,
                    pulled: dev.new_event()?,
                    halo_ready: dev.new_event()?,
                    halo_read: dev.new_event()?,
                    dotted: dev.new_event()?,
                    gathered: dev.new_event()?,
                    tail: dev.new_event()?,
                    copier_tail: None,
                });
            }
        }
    }
    let mut runs: Vec<(usize, Range<usize>)> = Vec::new();
    for (b, &l) in lane_of.iter().enumerate() {
        match runs.last_mut() {
            Some((rl, r)) if *rl == l && r.end == b => r.end = b + 1,
            _ => runs.push((l, b..b + 1)),
        }
    }
    let several = lanes.len() > 1;
    for (l, lane) in lanes.iter_mut().enumerate() {
        lane.foreign_runs = runs.iter().filter(|(rl, _)| *rl != l).cloned().collect();
        if several {
            let copier = GpuDevice::open(lane.dev.ordinal())?;
            lane.copier_tail = Some(copier.new_event()?);
            lane.copier = Some(copier);
        }
    }
    // Direct access between GPUs where the hardware has it. The peer copies work without it
    // (staged by the driver), so a refusal only costs speed and is not an error.
    for i in 0..lanes.len() {
        for j in 0..lanes.len() {
            if i != j && !lanes[i].dev.shares_context(&lanes[j].dev) {
                let _ = lanes[i].dev.enable_peer_access(&lanes[j].dev);
            }
        }
    }
    Ok((lane_of, lanes))
}

impl BlockGpuBackend {
    /// A backend for the system already scaled by `scale` (`a`, `b`, `x0` are those of the
    /// scaled system, `split` was built from `a`): block `i` runs on `devices[i]` (blocks given
    /// clones of one handle share its stream; see the module documentation), with the
    /// preconditioner `pre[i]` (built on its local part) run as `choices[i]` says (a plan of
    /// the block's local part, `choices[i].local`), its halo part in CSR added as
    /// `choices[i].halo` says. Uploads everything and loads every kernel on every handle.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        devices: &[GpuDevice],
        a: &CsrMatrix,
        split: &BlockSplit,
        pre: &[Preconditioner],
        choices: &[BlockGpuChoice],
        b: &[f64],
        x0: Option<&[f64]>,
        scale: ScaleFactors,
    ) -> Result<Self, PcgError> {
        let n = a.nrows();
        let nb = split.blocks().len();
        let pname = pre.first().map_or("none", Preconditioner::kind_name);
        check_block_system(a, split, b, x0, &scale, pname)?;
        if pre.len() != nb || choices.len() != nb || devices.len() != nb {
            return Err(PcgError::Dimension(format!(
                "{nb} blocks need {nb} preconditioners, plans and devices (got {}, {} and {})",
                pre.len(),
                choices.len(),
                devices.len()
            )));
        }
        if u32::try_from(n).is_err() {
            return Err(PcgError::Dimension(format!(
                "{n} rows exceed the 32-bit indices of the GPU kernels"
            )));
        }
        let (lane_of, lanes) = make_lanes(devices)?;
        let threads = choices.first().map_or(256, |c| c.local.dot3.config.threads);
        let one_context = lanes.iter().all(|l| l.dev.shares_context(&lanes[0].dev));
        let replay = Replay {
            on: false,
            possible: one_context && choices.iter().all(|c| c.local.use_graph),
            iters: choices
                .iter()
                .map(|c| c.local.graph_iters)
                .min()
                .unwrap_or(1)
                .max(1),
            one: None,
            batch: None,
            pending_iters: 0,
            stage: Stage::Idle,
        };
        let mut times = BackendTimes::default();
        let mut blocks = Vec::with_capacity(nb);
        let mut sends = Vec::with_capacity(nb);
        let mut halos = Vec::with_capacity(nb);
        for (((blk, p), c), (dev, &lane)) in split
            .blocks()
            .iter()
            .zip(pre)
            .zip(choices)
            .zip(devices.iter().zip(&lane_of))
        {
            blocks.push(upload_block(dev, lane, blk, p, c, b, x0, &mut times)?);
            let mut sw = Stopwatch::new(Some(&mut times));
            sends.push(dev.alloc_zeros(blk.send_len())?);
            halos.push(dev.alloc_zeros(blk.halo_len())?);
            sw.lap(dev, upload_part)?;
        }
        let mut slots = Vec::with_capacity(lanes.len());
        let mut scalars = Vec::with_capacity(lanes.len());
        for lane in &lanes {
            let mut sw = Stopwatch::new(Some(&mut times));
            slots.push(lane.dev.alloc_zeros(3 * nb)?);
            scalars.push(CgScalars::new(&lane.dev, INITIAL_HISTORY)?);
            sw.lap(&lane.dev, upload_part)?;
        }
        let mut backend = BlockGpuBackend {
            n,
            row_ranges: split.blocks().iter().map(|b| b.rows.clone()).collect(),
            lanes,
            blocks,
            sends,
            halos,
            copies: copy_schedule(split)?,
            slots,
            scalars,
            threads,
            traffic: BlockTraffic::default(),
            poll: PollState::default(),
            scale,
            a_norm: inf_norm(a),
            a_max: f64::NAN,
            times: BackendTimes::default(),
            update_values: Vec::new(),
            replay,
            captured: RefCell::new(None),
        };
        // Loading is host work (over every lane's device): timed without a synchronisation.
        let t = std::time::Instant::now();
        backend.preload()?;
        times.load_ms += t.elapsed().as_secs_f64() * 1e3;
        backend.times = times;
        Ok(backend)
    }

    /// What building the backend spent on host-to-device copies and allocations
    /// (`upload_ms`), format conversions (`convert_ms`) and compiling and loading kernels
    /// (`load_ms`), over every block.
    pub fn setup_times(&self) -> BackendTimes {
        self.times
    }

    fn preload(&self) -> Result<(), PcgError> {
        for lane in &self.lanes {
            preload(&lane.dev, self.threads)?;
            // The gather of every poll of the lane's recurrence.
            autopcg_gpu::scalars::preload(&lane.dev)?;
        }
        for blk in &self.blocks {
            let dev = &self.lanes[blk.lane].dev;
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

    /// Puts a new right-hand side `b` and initial guess `x0` (zero when `None`) of the
    /// original system in place (scaled as the backend's system is, per block), for the next
    /// solve. Returns `Ok(false)` without changing anything when `b` needs other scale factors
    /// than the backend was built with (the caller builds a new backend, as for
    /// [`crate::gpu::GpuBackend::set_problem`]).
    pub fn set_problem(&mut self, b: &[f64], x0: Option<&[f64]>) -> Result<bool, PcgError> {
        crate::backend::check_problem_len(self.n, b, x0)?;
        if ScaleFactors::from_maxima(self.a_max, crate::scaling::max_abs(b)) != self.scale {
            return Ok(false);
        }
        // The graphs stay: the same buffers are overwritten.
        self.flush()?;
        let sb = self.scale.scale_rhs(b);
        let sx0 = x0.map(|x| self.scale.scale_solution(x));
        for (blk, rows) in self.blocks.iter_mut().zip(&self.row_ranges) {
            let dev = &self.lanes[blk.lane].dev;
            dev.upload_into(&sb[rows.clone()], &mut blk.b)?;
            match &sx0 {
                Some(x) => dev.upload_into(&x[rows.clone()], &mut blk.x)?,
                None => dev.fill_zeros(&mut blk.x)?,
            }
        }
        self.poll.reset();
        Ok(true)
    }

    /// Prepares value updates ([`BlockGpuBackend::update_values`]) of the backend made from
    /// `split` and `pre` with the preconditioner `kind` (omega resolved): every block's operand
    /// keeps CSR values on the device (a converted one gets its source uploaded) and its
    /// preconditioner a device refresh ([`DeviceRefresh`]: patterns uploaded once). Returns
    /// whether every block can take them: not when an operand is kept in COO (which keeps no
    /// CSR values) or omega is unresolved; updates then build a new backend.
    fn prepare_value_updates(
        &mut self,
        split: &BlockSplit,
        pre: &[Preconditioner],
        kind: &PrecondKind,
    ) -> Result<bool, PcgError> {
        let mut refreshes = Vec::with_capacity(self.blocks.len());
        for ((blk, hb), p) in self.blocks.iter_mut().zip(split.blocks()).zip(pre) {
            let dev = &self.lanes[blk.lane].dev;
            if !blk.local.keep_source(dev, &hb.local)? {
                return Ok(false);
            }
            let host = ValueRefresh::new(&hb.local, kind, p)?;
            match DeviceRefresh::new(dev, &hb.local, &host, p, &mut blk.pre)? {
                Some(r) => refreshes.push(r),
                None => return Ok(false),
            }
        }
        for (blk, r) in self.blocks.iter_mut().zip(refreshes) {
            blk.refresh = Some(r);
        }
        Ok(true)
    }

    /// Whether [`BlockGpuBackend::update_values`] can take new values (the backend was made by
    /// [`prepare_blocks_gpu_with`] for value updates and every block could prepare them).
    pub fn takes_value_updates(&self) -> bool {
        self.blocks.iter().all(|b| b.refresh.is_some())
    }

    /// New values of the matrix the backend was made from: `a` is the whole unscaled matrix
    /// with the new values (its pattern the old one's), checked by the caller (finite, every
    /// diagonal entry positive), and `stats` their statistics ([`ValueStats::of`] them: the
    /// largest magnitude decides the scale, `||A||_inf` is kept). Each block's local and
    /// halo values are taken from `a` on the host ([`block_values_into`], scaled as the
    /// backend's system is) and copied to the block's device, where its operand is converted
    /// again and its preconditioner recomputed from them (the unsplit refresh's kernels,
    /// `autopcg_gpu::kernels::refresh`): values alone cross the bus, and the values equal
    /// those a backend made from `a` holds (up to the sign of a zero).
    /// The right-hand side must be set again ([`BlockGpuBackend::set_problem`]) before the
    /// next solve.
    ///
    /// Returns the milliseconds of the preconditioner's kernels and the copies' and
    /// conversions' times, or `None`, with nothing changed, when the backend does not take
    /// value updates ([`BlockGpuBackend::takes_value_updates`]) or the new values need another
    /// scale of the matrix: the caller then builds a new backend.
    pub fn update_values(
        &mut self,
        a: &CsrMatrix,
        stats: &ValueStats,
    ) -> Result<Option<(f64, BackendTimes)>, PcgError> {
        if a.nrows() != self.n || a.ncols() != self.n {
            return Err(PcgError::Dimension(format!(
                "new values for a {} x {} matrix, the blocks hold {} rows",
                a.nrows(),
                a.ncols(),
                self.n
            )));
        }
        let exp = ScaleFactors::from_maxima(stats.max_abs, 1.0).matrix_exp;
        if !self.takes_value_updates() || exp != self.scale.matrix_exp {
            return Ok(None);
        }
        // What was deferred runs on the old values; the graphs are captured again (a conversion
        // may put an operand into new buffers).
        self.flush()?;
        self.replay.one = None;
        self.replay.batch = None;
        // Every block's values, split and scaled as a backend made from `a` has them, into
        // the arrays the last update used.
        let mut values = std::mem::take(&mut self.update_values);
        values.resize_with(self.blocks.len(), Default::default);
        let split = self
            .row_ranges
            .par_iter()
            .zip(values.par_iter_mut())
            .try_for_each(|(rows, (local, halo))| {
                block_values_into(a, rows.clone(), local, halo)
                    .map_err(|e| PcgError::Dimension(format!("new block values: {e}")))?;
                scale_slice(local, exp);
                scale_slice(halo, exp);
                Ok::<(), PcgError>(())
            });
        self.update_values = values;
        split?;
        let values = &self.update_values;
        for (b, (blk, (local, halo))) in self.blocks.iter_mut().zip(values).enumerate() {
            let halo_nnz = blk.halo.as_ref().map_or(0, DeviceCsr::nnz);
            if !blk.local.can_stage(local.len()) || halo_nnz != halo.len() {
                return Err(PcgError::Dimension(format!(
                    "block {b}: new values of {} local and {} halo entries, the block holds \
                     {halo_nnz} halo entries and another local pattern",
                    local.len(),
                    halo.len()
                )));
            }
        }
        // Nothing queued may still read the values overwritten below.
        for lane in &self.lanes {
            lane.dev.synchronize()?;
            if let Some(c) = &lane.copier {
                c.synchronize()?;
            }
        }
        let mut times = BackendTimes::default();
        let mut precond_ms = 0.0;
        for (blk, (local, halo)) in self.blocks.iter_mut().zip(values) {
            let dev = &self.lanes[blk.lane].dev;
            let limits = &blk.choice.padding;
            blk.local.stage_values(
                dev,
                &|off, piece| piece.copy_from_slice(&local[off..off + piece.len()]),
                Some(&mut times),
            )?;
            if let Some(h) = blk.halo.as_mut() {
                let mut sw = Stopwatch::new(Some(&mut times));
                h.upload_values(dev, halo)?;
                sw.lap(dev, upload_part)?;
            }
            blk.local
                .convert_staged(dev, limits, "A", Some(&mut times))?;
            let (Some(refresh), Some(src)) = (blk.refresh.as_mut(), blk.local.device_csr_source())
            else {
                return Err(PcgError::Backend(
                    "a block value update without its device refresh (internal error)".into(),
                ));
            };
            precond_ms += refresh.run(dev, src, &mut blk.pre, limits, Some(&mut times))?;
        }
        // Scaling by a power of two scales every row sum exactly.
        self.a_norm = ldexp(stats.inf_norm, exp);
        self.a_max = stats.max_abs;
        self.poll.reset();
        Ok(Some((precond_ms, times)))
    }

    /// What the communication moved so far.
    pub fn traffic(&self) -> BlockTraffic {
        self.traffic
    }

    /// Number of lanes: distinct device handles the blocks run on.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
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
        if want > self.scalars[0].capacity() {
            self.grow_history(want)?;
        }
        Ok(())
    }

    /// Replaces every lane's history with one of `capacity` iterations, keeping the scalars
    /// and the entries not yet polled; graphs are captured anew.
    fn grow_history(&mut self, capacity: u32) -> Result<(), PcgError> {
        self.flush()?;
        self.replay.one = None;
        self.replay.batch = None;
        let from = self.poll.polled + self.poll.carried.len() as u32;
        if self.poll.running && from < self.poll.queued {
            let (_, hist) =
                self.scalars[0].read_since(&self.lanes[0].dev, from, self.poll.queued)?;
            self.poll.carried.extend(hist);
        }
        for (lane, sc) in self.lanes.iter().zip(&mut self.scalars) {
            let raw = sc.read_raw(&lane.dev)?;
            let mut fresh = CgScalars::new(&lane.dev, capacity)?;
            fresh.write_raw(&lane.dev, &raw)?;
            *sc = fresh;
        }
        Ok(())
    }

    /// The iterate of the original system, joined from the blocks (waits for queued work).
    pub fn x(&mut self) -> Result<Vec<f64>, PcgError> {
        self.flush()?;
        let mut x = Vec::with_capacity(self.n);
        for blk in &self.blocks {
            x.extend(self.lanes[blk.lane].dev.download(&blk.x)?);
        }
        self.scale.unscale_solution(&mut x);
        Ok(x)
    }

    /// Makes `on`'s stream wait for lane `lane`'s event `ev`; inside a capture, only for an
    /// event the capture has recorded (see the module documentation).
    fn wait(&self, on: &GpuDevice, lane: usize, ev: Ev) -> Result<(), PcgError> {
        if let Some(seen) = self.captured.borrow().as_ref() {
            if !seen[lane * Ev::COUNT + ev as usize] {
                return Ok(());
            }
        }
        if let Some(e) = self.lanes[lane].event(ev) {
            on.wait_for(e)?;
        }
        Ok(())
    }

    /// Records lane `lane`'s event `ev` on the stream it belongs to (only needed when other
    /// lanes wait for it).
    fn record(&self, lane: usize, ev: Ev) -> Result<(), PcgError> {
        if self.lanes.len() > 1 {
            let l = &self.lanes[lane];
            if let Some(e) = l.event(ev) {
                l.records_on(ev).record(e)?;
                if let Some(seen) = self.captured.borrow_mut().as_mut() {
                    seen[lane * Ev::COUNT + ev as usize] = true;
                }
            }
        }
        Ok(())
    }

    /// Makes `lane`'s stream wait for the event `ev` of every other lane.
    fn wait_for_others(&self, lane: usize, ev: Ev) -> Result<(), PcgError> {
        for j in 0..self.lanes.len() {
            if j != lane {
                self.wait(&self.lanes[lane].dev, j, ev)?;
            }
        }
        Ok(())
    }

    /// Lane 0's stream waits for the end of every other stream (the other lanes' and every
    /// copier's).
    fn join_into_first(&self) -> Result<(), PcgError> {
        if self.lanes.len() < 2 {
            return Ok(());
        }
        for l in 0..self.lanes.len() {
            if l > 0 {
                self.record(l, Ev::Tail)?;
                self.wait(&self.lanes[0].dev, l, Ev::Tail)?;
            }
            self.record(l, Ev::CopierTail)?;
            self.wait(&self.lanes[0].dev, l, Ev::CopierTail)?;
        }
        Ok(())
    }

    /// Every other stream waits for the end of lane 0's.
    fn fork_from_first(&self) -> Result<(), PcgError> {
        if self.lanes.len() < 2 {
            return Ok(());
        }
        self.record(0, Ev::Tail)?;
        for (l, lane) in self.lanes.iter().enumerate() {
            if l > 0 {
                self.wait(&lane.dev, 0, Ev::Tail)?;
            }
            if let Some(c) = &lane.copier {
                self.wait(c, 0, Ev::Tail)?;
            }
        }
        Ok(())
    }

    /// Packs the carried vector of every block into its send buffer (each lane waits until
    /// the other lanes have pulled the previous contents) and records `packed`.
    fn pack(&mut self, which: Carried) -> Result<(), PcgError> {
        for l in 0..self.lanes.len() {
            self.wait_for_others(l, Ev::Pulled)?;
            let dev = &self.lanes[l].dev;
            for &b in &self.lanes[l].blocks {
                let blk = &self.blocks[b];
                let src = match which {
                    Carried::U => &blk.u,
                    Carried::X => &blk.x,
                };
                gather(dev, blk.gather_cfg, &blk.send_idx, src, &mut self.sends[b])?;
            }
            self.record(l, Ev::Packed)?;
        }
        Ok(())
    }

    /// Pulls every lane's halo messages out of the senders' packed buffers. With several lanes
    /// the copies run on the lane's copier stream, after the senders' `packed` and after the
    /// lane's own halo parts have read the previous contents (`halo_read`), and end with
    /// `pulled` and `halo_ready`; with one lane they are queued on its stream in order.
    fn pull(&mut self) -> Result<(), PcgError> {
        for l in 0..self.lanes.len() {
            let lane = &self.lanes[l];
            let on = lane.copier.as_ref().unwrap_or(&lane.dev);
            if lane.copier.is_some() {
                for j in 0..self.lanes.len() {
                    if j != l {
                        self.wait(on, j, Ev::Packed)?;
                    }
                }
                self.wait(on, l, Ev::HaloRead)?;
            }
            for c in &self.copies {
                if self.blocks[c.to].lane != l {
                    continue;
                }
                let src_dev = &self.lanes[self.blocks[c.from].lane].dev;
                let src = self
                    .sends
                    .get(c.from)
                    .ok_or_else(|| PcgError::Backend(format!("no send buffer for {c:?}")))?;
                let dst = self
                    .halos
                    .get_mut(c.to)
                    .ok_or_else(|| PcgError::Backend(format!("no halo buffer for {c:?}")))?;
                on.copy_range_from(src_dev, src, c.src.clone(), dst, c.dst_start)?;
                self.traffic.entries_moved += c.src.len() as u64;
            }
            if lane.copier.is_some() {
                self.record(l, Ev::Pulled)?;
                self.record(l, Ev::HaloReady)?;
            }
        }
        self.traffic.exchanges += 1;
        Ok(())
    }

    /// `out = A v` per block (steps 2 and 3 of the module documentation): pack, then every
    /// block's local part while the copier streams pull the halos, then the halo parts added
    /// once the lane's halos have arrived.
    fn multiply(&mut self, which: Carried) -> Result<(), PcgError> {
        self.pack(which)?;
        for blk in self.blocks.iter_mut() {
            let dev = &self.lanes[blk.lane].dev;
            let (src, out) = match which {
                Carried::U => (&blk.u, &mut blk.w),
                Carried::X => (&blk.x, &mut blk.t),
            };
            blk.local.apply(dev, src, out)?;
        }
        self.pull()?;
        for (l, lane) in self.lanes.iter().enumerate() {
            if lane.copier.is_some() {
                self.wait(&lane.dev, l, Ev::HaloReady)?;
            }
        }
        for (blk, h) in self.blocks.iter_mut().zip(&self.halos) {
            let dev = &self.lanes[blk.lane].dev;
            let out = match which {
                Carried::U => &mut blk.w,
                Carried::X => &mut blk.t,
            };
            if let Some(hm) = &blk.halo {
                let m = blk.halo_method;
                spmv_csr_add(dev, hm, m.kernel, m.config, h, out)?;
            }
        }
        for (l, lane) in self.lanes.iter().enumerate() {
            if lane.copier.is_some() {
                self.record(l, Ev::HaloRead)?;
            }
        }
        Ok(())
    }

    /// `w = A u`, the three dots per block and the all-reduce with the recurrence step (steps 3
    /// and 4 of the module documentation).
    fn spmv_dots(&mut self, iteration: Option<u32>) -> Result<(), PcgError> {
        self.multiply(Carried::U)?;
        for l in 0..self.lanes.len() {
            self.wait_for_others(l, Ev::Gathered)?;
            let dev = &self.lanes[l].dev;
            for &b in &self.lanes[l].blocks {
                let blk = &mut self.blocks[b];
                dot3_slot(
                    dev,
                    blk.choice.dot3.config,
                    &blk.r,
                    &blk.u,
                    &blk.w,
                    &mut blk.ws3,
                    &mut self.slots[l],
                    b as u32,
                )?;
            }
            self.record(l, Ev::Dotted)?;
        }
        let nb = self.blocks.len() as u32;
        for l in 0..self.lanes.len() {
            self.wait_for_others(l, Ev::Dotted)?;
            let lane = &self.lanes[l];
            for (src_lane, run) in &lane.foreign_runs {
                let (dst, src) = pair_mut(&mut self.slots, l, *src_lane);
                let range = 3 * run.start..3 * run.end;
                lane.dev.copy_range_from(
                    &self.lanes[*src_lane].dev,
                    src,
                    range,
                    dst,
                    3 * run.start,
                )?;
                self.traffic.slots_moved += run.len() as u64;
            }
            self.record(l, Ev::Gathered)?;
            dot3_slots_advance(
                &lane.dev,
                self.threads,
                &self.slots[l],
                nb,
                &mut self.scalars[l],
                iteration,
            )?;
        }
        self.traffic.reductions += 1;
        Ok(())
    }

    /// Every block's fused update (alpha and beta read from its lane's scalars).
    fn launch_update(&mut self) -> Result<(), PcgError> {
        for blk in &mut self.blocks {
            let c = blk.choice.update;
            cg_update(
                &self.lanes[blk.lane].dev,
                c.variant,
                c.config,
                &self.scalars[blk.lane],
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

    /// Every block's preconditioner: `u = M^-1 r`.
    fn launch_precond(&mut self) -> Result<(), PcgError> {
        for blk in &mut self.blocks {
            let dev = &self.lanes[blk.lane].dev;
            blk.pre.apply(dev, &blk.r, &mut blk.u, &mut blk.t)?;
        }
        Ok(())
    }

    /// Captures `k` whole iterations into a graph on lane 0's stream (see the module
    /// documentation), with what one replay moves between the blocks.
    fn capture(&mut self, k: u32) -> Result<BlockGraph, PcgError> {
        let lead = self.lanes[0].dev.clone();
        let before = self.traffic;
        *self.captured.borrow_mut() = Some(vec![false; self.lanes.len() * Ev::COUNT]);
        let mut failure: Option<PcgError> = None;
        let graph = lead.capture(|| {
            let mut queue = || -> Result<(), PcgError> {
                self.fork_from_first()?;
                for _ in 0..k {
                    self.launch_update()?;
                    self.launch_precond()?;
                    self.spmv_dots(None)?;
                }
                self.join_into_first()
            };
            queue().map_err(|e| {
                let reason = e.to_string();
                failure = Some(e);
                GpuError::InvalidInput {
                    what: "a captured block iteration".into(),
                    reason,
                }
            })
        });
        *self.captured.borrow_mut() = None;
        let traffic = self.traffic.minus(before);
        self.traffic = before;
        if let Some(e) = failure {
            return Err(e);
        }
        let graph = graph?;
        // The events the capture recorded stand for nodes of its graph; record them again on
        // their streams so that later waits outside a capture find ordinary events.
        if self.lanes.len() > 1 {
            for lane in &self.lanes {
                for ev in Ev::ALL {
                    if let Some(e) = lane.event(ev) {
                        lane.records_on(ev).record(e)?;
                    }
                }
            }
        }
        Ok(BlockGraph { graph, traffic })
    }

    /// Replays the graph of one iteration (`batch` false) or of `replay.iters` (captured on
    /// first use), ordered after everything queued on every stream and before everything
    /// queued after it.
    fn launch_graph(&mut self, batch: bool) -> Result<(), PcgError> {
        let missing = if batch {
            self.replay.batch.is_none()
        } else {
            self.replay.one.is_none()
        };
        if missing {
            let k = if batch { self.replay.iters } else { 1 };
            let g = self.capture(k)?;
            if batch {
                self.replay.batch = Some(g);
            } else {
                self.replay.one = Some(g);
            }
        }
        self.join_into_first()?;
        let g = if batch {
            self.replay.batch.as_ref()
        } else {
            self.replay.one.as_ref()
        };
        let Some(g) = g else {
            return Err(PcgError::Backend(
                "a block graph missing after its capture (internal error)".into(),
            ));
        };
        g.graph.launch()?;
        let moved = g.traffic;
        self.fork_from_first()?;
        self.traffic = self.traffic.plus(moved);
        Ok(())
    }

    /// Launches what was asked for and deferred: whole iterations first (they came first),
    /// then the steps of the current one.
    fn flush(&mut self) -> Result<(), PcgError> {
        while self.replay.pending_iters > 0 {
            self.launch_graph(false)?;
            self.replay.pending_iters -= 1;
        }
        match std::mem::replace(&mut self.replay.stage, Stage::Idle) {
            Stage::Idle => Ok(()),
            Stage::Updated => self.launch_update(),
            Stage::Preconditioned => {
                self.launch_update()?;
                self.launch_precond()
            }
        }
    }

    /// Whether whole iterations are replayed from graphs, and how many a batched graph holds.
    pub fn replays_graphs(&self) -> Option<u32> {
        self.replay.on.then_some(self.replay.iters)
    }

    /// Turns graph replay of whole iterations on or off (off when the backend is built) and
    /// returns whether it is on: it can be only where every block's plan replays graphs
    /// ([`GpuPlanChoice::use_graph`]) and every lane shares one context (see the module
    /// documentation). What was deferred is launched first. Replay is not on by default until
    /// the GPU tests of the capture (`gpu_blocks`'s `graphs_replay_what_the_launches_do`)
    /// have run on a GPU.
    pub fn replay_graphs(&mut self, on: bool) -> Result<bool, PcgError> {
        self.flush()?;
        self.replay.on = on && self.replay.possible;
        if !self.replay.on {
            self.replay.one = None;
            self.replay.batch = None;
        }
        Ok(self.replay.on)
    }

    /// Sum over the blocks of `(v, v)` for the vector `which` names (block order, on the host).
    fn sum_squares(&mut self, which: Squared) -> Result<f64, PcgError> {
        let mut total = 0.0;
        for blk in &mut self.blocks {
            let dev = &self.lanes[blk.lane].dev;
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

/// Puts block `blk` on `dev`, adding the time of its copies and conversions to `times`.
#[allow(clippy::too_many_arguments)]
fn upload_block(
    dev: &GpuDevice,
    lane: usize,
    blk: &HaloBlock,
    pre: &Preconditioner,
    block_choice: &BlockGpuChoice,
    b: &[f64],
    x0: Option<&[f64]>,
    times: &mut BackendTimes,
) -> Result<DeviceBlock, PcgError> {
    let m = blk.nrows();
    let props = dev.props();
    let choice = &block_choice.local;
    choice.check(m, pre, props)?;
    block_choice.halo.check(props)?;
    let local = DeviceOperator::upload_timed(
        dev,
        &blk.local,
        choice.a.method,
        &choice.padding,
        "A",
        Some(&mut *times),
    )?;
    let pre_dev = DevicePrecond::upload_timed(
        dev,
        pre,
        &choice.precond,
        &choice.padding,
        Some(&mut *times),
    )?;
    // The halo part and the vectors: one upload phase.
    let mut sw = Stopwatch::new(Some(times));
    let halo = if blk.halo.nnz() > 0 {
        Some(DeviceCsr::upload(dev, &blk.halo)?)
    } else {
        None
    };
    let rows = blk.rows.clone();
    let block = DeviceBlock {
        lane,
        choice: choice.clone(),
        local,
        halo,
        halo_method: block_choice.halo,
        pre: pre_dev,
        refresh: None,
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
    };
    sw.lap(dev, upload_part)?;
    Ok(block)
}

impl PcgBackend for BlockGpuBackend {
    fn n(&self) -> usize {
        self.n
    }

    fn rhs_norm(&mut self) -> Result<f64, PcgError> {
        self.flush()?;
        Ok(self.sum_squares(Squared::B)?.sqrt())
    }

    fn start(&mut self) -> Result<(), PcgError> {
        self.flush()?;
        // r = b - A x
        self.multiply(Carried::X)?;
        for blk in &mut self.blocks {
            let dev = &self.lanes[blk.lane].dev;
            dev.copy(&blk.t, &mut blk.r)?;
            let (v, cfg) = blk.xpay;
            xpay(dev, v, cfg, -1.0, &blk.b, &mut blk.r)?;
            blk.pre.apply(dev, &blk.r, &mut blk.u, &mut blk.t)?;
            dev.fill_zeros(&mut blk.p)?;
            dev.fill_zeros(&mut blk.s)?;
        }
        self.spmv_dots(Some(0))?;
        self.poll.running = true;
        self.poll.queued = 1;
        self.poll.polled = 0;
        self.poll.carried.clear();
        self.poll.host_scalars = None;
        Ok(())
    }

    fn update_vectors(&mut self) -> Result<(), PcgError> {
        if !self.poll.running {
            return Ok(());
        }
        if self.replay.on {
            if self.replay.stage != Stage::Idle {
                self.flush()?;
            }
            self.replay.stage = Stage::Updated;
            return Ok(());
        }
        self.launch_update()
    }

    fn apply_preconditioner(&mut self) -> Result<(), PcgError> {
        if !self.poll.running {
            return Ok(());
        }
        if self.replay.on && self.replay.stage == Stage::Updated {
            self.replay.stage = Stage::Preconditioned;
            return Ok(());
        }
        self.flush()?;
        self.launch_precond()
    }

    fn spmv_reduce_advance(&mut self) -> Result<(), PcgError> {
        if !self.poll.running {
            return Ok(());
        }
        let cap = self.scalars[0].capacity();
        if self.poll.queued >= cap {
            let grown = cap
                .checked_mul(2)
                .filter(|&c| c > self.poll.queued)
                .ok_or_else(|| {
                    PcgError::Backend(format!(
                        "the device history cannot grow beyond {cap} iterations"
                    ))
                })?;
            self.grow_history(grown)?;
        }
        // Growing the history launches everything deferred, so the stage is Idle after it.
        if self.replay.on && self.replay.stage == Stage::Preconditioned {
            self.replay.stage = Stage::Idle;
            self.replay.pending_iters += 1;
            self.poll.queued += 1;
            let k = self.replay.iters;
            if k > 1 && self.replay.pending_iters == k {
                self.launch_graph(true)?;
                self.replay.pending_iters = 0;
            } else if k == 1 {
                self.launch_graph(false)?;
                self.replay.pending_iters = 0;
            }
            return Ok(());
        }
        self.flush()?;
        self.spmv_dots(None)?;
        self.poll.queued += 1;
        Ok(())
    }

    fn poll(&mut self) -> Result<Vec<IterRecord>, PcgError> {
        self.flush()?;
        poll_records(&self.lanes[0].dev, &mut self.scalars[0], &mut self.poll)
    }

    fn poll_growth(&self) -> usize {
        crate::gpu::GPU_POLL_GROWTH
    }

    fn true_residual_norm(&mut self) -> Result<f64, PcgError> {
        self.flush()?;
        self.multiply(Carried::X)?;
        for blk in &mut self.blocks {
            let (v, cfg) = blk.xpay;
            xpay(&self.lanes[blk.lane].dev, v, cfg, -1.0, &blk.b, &mut blk.t)?;
        }
        Ok(self.sum_squares(Squared::T)?.sqrt())
    }

    fn matrix_norm(&mut self) -> Result<f64, PcgError> {
        Ok(self.a_norm)
    }

    fn solution_norm(&mut self) -> Result<f64, PcgError> {
        self.flush()?;
        Ok(self.sum_squares(Squared::X)?.sqrt())
    }

    fn norm_factor(&self) -> f64 {
        self.scale.norm_factor()
    }

    fn solution(&mut self) -> Result<Vec<f64>, PcgError> {
        self.x()
    }

    fn zero_solution(&mut self) -> Result<(), PcgError> {
        self.flush()?;
        for blk in &mut self.blocks {
            self.lanes[blk.lane].dev.fill_zeros(&mut blk.x)?;
        }
        self.poll.reset();
        Ok(())
    }
}

/// Builds the block backend of the problem `p` with its matrix split into the row blocks of
/// `partition`, block `i` on `devices[i]` (one handle per block; clones of one handle put
/// blocks on one stream, see the module documentation), preconditioned per block like
/// [`super::solve_blocks_cpu`] ([`BlockPrecond`], built on the scaled blocks); `choose(b,
/// local, pre)` gives block `b`'s plan for its (scaled) local part and preconditioner and the
/// multiply of its halo part ([`BlockGpuChoice`]).
/// `report` receives the split's [`BlockReport`] as soon as it is built, and its `setup_ms`
/// once the backend is ready (room made for `p.params.max_iter` iterations). Solve with
/// [`crate::pcg()`]; later right-hand sides go in with [`BlockGpuBackend::set_problem`].
pub fn prepare_blocks_gpu(
    devices: &[GpuDevice],
    p: &BlockProblem<'_>,
    partition: RowPartition,
    choose: impl FnMut(usize, &CsrMatrix, &Preconditioner) -> BlockGpuChoice,
    report: &mut Option<BlockReport>,
) -> Result<BlockGpuBackend, PcgError> {
    prepare_blocks_gpu_with(devices, p, partition, choose, report, false)
}

/// [`prepare_blocks_gpu`], and with `value_updates` a backend that takes new values of the
/// matrix ([`BlockGpuBackend::update_values`]) where every block can (see
/// [`BlockGpuBackend::takes_value_updates`]): it also keeps every block operand's CSR values
/// and uploads the patterns its preconditioner's device refresh needs (for the explicit SSOR-AI
/// form, `K` and `K^T` of every block, built on the host here).
pub fn prepare_blocks_gpu_with(
    devices: &[GpuDevice],
    p: &BlockProblem<'_>,
    partition: RowPartition,
    mut choose: impl FnMut(usize, &CsrMatrix, &Preconditioner) -> BlockGpuChoice,
    report: &mut Option<BlockReport>,
    value_updates: bool,
) -> Result<BlockGpuBackend, PcgError> {
    let (a, b, x0, kind, params) = (p.a, p.b, p.x0, p.kind, p.params);
    let t0 = std::time::Instant::now();
    if devices.len() != partition.nblocks() {
        return Err(PcgError::InvalidParameter(format!(
            "{} row blocks need one device handle each, got {}",
            partition.nblocks(),
            devices.len()
        )));
    }
    let (factors, scaled, split) = scaled_split(a, b, partition)?;
    let pre = BlockPrecond::build(&scaled, &split, kind)?;
    *report = Some(BlockReport::new(&split, pre.dropped_couplings()));
    let choices: Vec<BlockGpuChoice> = split
        .blocks()
        .iter()
        .zip(pre.blocks())
        .enumerate()
        .map(|(i, (blk, p))| choose(i, &blk.local, p))
        .collect();
    let sb = factors.scale_rhs(b);
    let sx0 = x0.map(|x| factors.scale_solution(x));
    let mut backend = BlockGpuBackend::new(
        devices,
        &scaled,
        &split,
        pre.blocks(),
        &choices,
        &sb,
        sx0.as_deref(),
        factors,
    )?;
    backend.a_max = crate::scaling::max_abs(a.data());
    backend.reserve_iterations(params.max_iter)?;
    if value_updates {
        backend.prepare_value_updates(&split, pre.blocks(), &kind.resolved_for(&scaled))?;
    }
    if let Some(r) = report.as_mut() {
        r.setup_ms = t0.elapsed().as_secs_f64() * 1e3;
    }
    Ok(backend)
}

/// Runs PCG on a prepared block backend and returns the solution of the original system (or
/// the failure with the last iterate where there is one).
pub fn run_blocks_gpu(
    backend: &mut BlockGpuBackend,
    params: &crate::PcgParams,
    progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
) -> Result<BlockSolve, SolveFailure> {
    match pcg(backend, params, progress) {
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

/// Solves the problem `p` once: [`prepare_blocks_gpu`] then [`run_blocks_gpu`].
pub fn solve_blocks_gpu(
    devices: &[GpuDevice],
    p: &BlockProblem<'_>,
    partition: RowPartition,
    choose: impl FnMut(usize, &CsrMatrix, &Preconditioner) -> BlockGpuChoice,
    report: &mut Option<BlockReport>,
) -> Result<BlockSolve, SolveFailure> {
    let mut backend = prepare_blocks_gpu(devices, p, partition, choose, report)?;
    run_blocks_gpu(&mut backend, p.params, |_| ControlFlow::Continue(()))
}
