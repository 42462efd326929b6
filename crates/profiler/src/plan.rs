//! The sweep plan: what `autopcg tune` measures, computed from the device and the options.
//!
//! - Vector stage: the fused Chronopoulos–Gear update `cg_update` (the update the solver runs)
//!   and `axpy`, each in its four thread mappings, at [`SWEEP_THREADS`] threads per block
//!   (capped by the device and by the compiled kernel). One-element-per-thread variants get the
//!   blocks that cover the vector; grid-stride variants get `NB_nt * i` blocks for `i` in
//!   [`VECTOR_NB_MULTIPLES`] (`NB_nt` by eq. 3-2 on the kernel's registers and shared memory).
//! - Dot stage: every rung of the reduction ladder and both fused three-dot kernels at every
//!   block size of [`DOT_BLOCK_SIZES`]; the fixed-coverage rungs get the blocks their coverage
//!   needs, the others `NB_nt * i` for `i = 1..=20` ([`DOT_NB_MULTIPLES`]).
//! - Sizes (both stages): in every test domain up to the stage's largest length,
//!   [`sample_sizes`]`(d, 4)` for the fits plus two of [`held_out_sizes`]`(d, 4)` marked held
//!   out. The largest length is the largest `n` whose buffers fit the memory budget (a fraction
//!   of the device memory, 0.6 by default), and at most [`DEFAULT_MAX_VECTOR_LEN`] (2^28): beyond
//!   a few times the L2 cache every kernel of these stages is a long bandwidth-bound stream whose
//!   time is linear in n with the slope of the (2^24, 2^27] domain, and measuring lengths of
//!   1e9 would take minutes of the tune's budget for nothing a line through the smaller lengths
//!   does not already give.
//! - Epilogue stage: every row kernel that has a dot3 variant (CSR scalar, CSR vector, ELL,
//!   DIA) on a tridiagonal matrix of `n` rows, at every thread count of the sweep, three ways:
//!   the plain product (a thread or lane group per row) and the dot3 variant with r apart from u
//!   and with u = r (the same threads, blocks capped at one wave of the blocks the compiled
//!   variant keeps resident, as the model's plans launch it);
//!   lengths as above up to [`EPILOGUE_MAX_LEN`] on the tridiagonal, and up to
//!   [`EPILOGUE_WIDE_MAX_LEN`] on a band of 27 entries a row (the fused loops' cost per entry).
//!   The model weighs the fused kernel's excess over the plain one against the separate
//!   reduction ([`autopcg_model::epilogue`]).
//! - SpMV stage: the fit matrices of [`crate::matrices`] through the GPU crate's SpMV benchmark
//!   (every format, kernel, thread count and grid policy, and cuSPARSE).
//!
//! `--quick` keeps the same structure with two thread counts, two sizes plus one held out per
//! domain up to 2^22, fewer block multiples, shorter timing and the six small matrices of
//! [`crate::matrices::quick_matrices`].
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use autopcg_catalog::{
    DeviceProps, Dot3Kernel, DotKernel, GridPolicy, KernelId, LaunchConfig, Reduction, SpmvKernel,
    VectorKernel, VectorVariant, DOT_BLOCK_SIZES,
};
use autopcg_gpu::SpmvBenchOptions;
use autopcg_model::domains::{domains, held_out_sizes, sample_sizes, Domain};
use autopcg_model::profile::{EpilogueVariant, OccupancyRecord};
use autopcg_sparse::PaddingLimits;

use crate::matrices::{eval_matrices, fit_matrices, quick_matrices, MatrixSpec};
use crate::occupancy::{occupancy, KernelResources};
use crate::ProfilerError;

/// Default share of the device memory the sweep may allocate.
pub const DEFAULT_MEMORY_FRACTION: f64 = 0.6;
/// Default upper bound on the vector lengths of the vector and dot stages (see the module
/// documentation).
pub const DEFAULT_MAX_VECTOR_LEN: u64 = 1 << 28;
/// Upper bound on the row counts of the epilogue stage: its matrices are built on the host at
/// every length, and beyond a few times the L2 cache the kernels are long streams whose lines
/// the largest domain's already give.
pub const EPILOGUE_MAX_LEN: u64 = 1 << 24;
/// Upper bound on the row counts of the epilogue stage's wide band (27 entries a row: 113M
/// entries at this length, built on the host in CSR, ELL and DIA).
pub const EPILOGUE_WIDE_MAX_LEN: u64 = 1 << 22;
/// Upper bound on the vector lengths of a quick sweep.
pub const QUICK_MAX_VECTOR_LEN: u64 = 1 << 22;
/// Threads per block tried by a full sweep.
pub const SWEEP_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// Threads per block tried by a quick sweep.
pub const QUICK_THREADS: [u32; 2] = [128, 256];
/// `i` in `blocks = NB_nt * i` for the grid-stride vector kernels.
pub const VECTOR_NB_MULTIPLES: [u32; 4] = [1, 2, 4, 8];
/// The same for a quick sweep.
pub const QUICK_VECTOR_NB_MULTIPLES: [u32; 2] = [1, 4];
/// `i` in `blocks = NB_nt * i` for the grid reductions: 1..=20 (method 3.2).
pub const DOT_NB_MULTIPLES: [u32; 20] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
];
/// The same for a quick sweep.
pub const QUICK_DOT_NB_MULTIPLES: [u32; 3] = [1, 4, 16];
/// Bytes of device memory kept free beside every stage's buffers (scalars, workspaces of one
/// element, allocator rounding).
const MEMORY_SLACK: u64 = 1 << 20;

/// What a sweep measures and where its files are.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepOptions {
    /// A reduced sweep (finishes in under a minute).
    pub quick: bool,
    /// Share of the device's total memory the sweep may allocate, in (0, 1].
    pub memory_fraction: f64,
    /// Folder the file paths of matrix recipes are relative to (the repository root).
    pub base_dir: PathBuf,
    /// Largest vector length of the vector and dot stages, before the memory bound.
    pub max_vector_len: u64,
    /// Time the SpMV products launched alone with L2 cold
    /// ([`SpmvBenchOptions::flush_l2`]) instead of as repeated calls. Off by default: on the
    /// H100 (2026-12-07) the model fitted that way chose worse on the held-out matrices
    /// (within 5% of the best on 47% of them against 68%, geomean slowdown 1.047 against
    /// 1.037) and did not change the SSOR-AI form it chose on 3D Poisson 64^3.
    pub spmv_l2_cold: bool,
}

impl SweepOptions {
    /// Defaults: full sweep, 0.6 of the memory, recipes relative to `base_dir`.
    pub fn new(quick: bool, base_dir: impl Into<PathBuf>) -> SweepOptions {
        SweepOptions {
            quick,
            memory_fraction: DEFAULT_MEMORY_FRACTION,
            base_dir: base_dir.into(),
            max_vector_len: if quick {
                QUICK_MAX_VECTOR_LEN
            } else {
                DEFAULT_MAX_VECTOR_LEN
            },
            spmv_l2_cold: false,
        }
    }

    /// The SpMV benchmark options of a sweep made with these options: [`Sweep::spmv_options`]
    /// of [`SweepOptions::quick`], timed with L2 cold where [`SweepOptions::spmv_l2_cold`]
    /// asks for it.
    pub fn spmv_bench(&self) -> SpmvBenchOptions {
        SpmvBenchOptions {
            flush_l2: self.spmv_l2_cold,
            ..Sweep::spmv_options(self.quick)
        }
    }

    /// Checks the options, naming the value at fault.
    pub fn validate(&self) -> Result<(), ProfilerError> {
        if !(self.memory_fraction > 0.0 && self.memory_fraction <= 1.0) {
            return Err(ProfilerError::InvalidOption(format!(
                "memory fraction {}; expected a value in (0, 1]",
                self.memory_fraction
            )));
        }
        Ok(())
    }
}

/// How one measurement is timed: an untimed warm-up call, then event-timed samples until at
/// least `min_reps` samples AND `min_ms` milliseconds; the median, fastest and slowest sample
/// are recorded. A call estimated (then probed) below `batch_below_ms` is timed in batches of
/// back-to-back calls so that each sample lasts about `batch_sample_ms`; a sample is then the
/// mean of its batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingPolicy {
    /// Fewest samples.
    pub min_reps: usize,
    /// Least total milliseconds of the samples.
    pub min_ms: f64,
    /// Calls shorter than this are batched, milliseconds.
    pub batch_below_ms: f64,
    /// Target length of a batched sample, milliseconds.
    pub batch_sample_ms: f64,
    /// Largest batch.
    pub max_batch: usize,
}

impl TimingPolicy {
    /// The policy of a full sweep: 5 samples and 2 ms at least.
    pub fn full() -> TimingPolicy {
        TimingPolicy {
            min_reps: 5,
            min_ms: 2.0,
            batch_below_ms: 0.02,
            batch_sample_ms: 0.1,
            max_batch: 256,
        }
    }

    /// The policy of the vector stage of a full sweep: 10 samples and 4 ms at least, batched
    /// samples of 0.2 ms. Updates are the shortest kernels profiled: at small lengths the
    /// configurations differ by a few percent of a few microseconds, and the decision trees
    /// are judged at 3%, so their medians need more samples than the other stages (the stage
    /// is the cheapest of the sweep: about 30 s on an H200).
    pub fn vector_full() -> TimingPolicy {
        TimingPolicy {
            min_reps: 10,
            min_ms: 4.0,
            batch_sample_ms: 0.2,
            ..TimingPolicy::full()
        }
    }

    /// The policy of a quick sweep: 3 samples and 0.5 ms at least.
    pub fn quick() -> TimingPolicy {
        TimingPolicy {
            min_reps: 3,
            min_ms: 0.5,
            ..TimingPolicy::full()
        }
    }
}

/// One vector-update measurement at a given length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorPoint {
    /// The kernel.
    pub kernel: VectorKernel,
    /// Its launch.
    pub cfg: LaunchConfig,
    /// `i` of `blocks = NB_nt * i` for grid-stride variants.
    pub nb_multiple: Option<u32>,
}

/// Vectors a reduction reads (2 for a dot product, 3 for the fused three-dot kernels).
pub fn reduction_vectors(r: Reduction) -> u64 {
    match r {
        Reduction::Dot(_) => 2,
        Reduction::Dot3(_) => 3,
    }
}

/// Kernel launches per call of a reduction: one for the kernels whose last block finishes,
/// two for the others (a first stage and [`autopcg_catalog::kernels::DOT_FINISH`] or
/// `dot3_finish`).
pub fn reduction_launches(r: Reduction) -> u32 {
    match r {
        Reduction::Dot(DotKernel::LastBlock) | Reduction::Dot3(Dot3Kernel::LastBlock) => 1,
        _ => 2,
    }
}

/// One reduction measurement at a given length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DotPoint {
    /// The kernel.
    pub op: Reduction,
    /// Its first-stage launch.
    pub cfg: LaunchConfig,
    /// `i` of `blocks = NB_nt * i`; `None` for the fixed-coverage rungs.
    pub nb_multiple: Option<u32>,
}

/// One launch of the epilogue stage at a given length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpiloguePoint {
    /// The row kernel.
    pub kernel: SpmvKernel,
    /// Plain or fused.
    pub variant: EpilogueVariant,
    /// Its launch.
    pub cfg: LaunchConfig,
    /// For the fused kernel, the blocks per SM it keeps resident at these threads (eq. 3-2
    /// on its registers), which cap its grid.
    pub blocks_per_sm: Option<u32>,
}

/// Every launch of the epilogue stage at one length of one of its matrices.
#[derive(Debug, Clone, PartialEq)]
pub struct EpilogueSize {
    /// Rows of the matrix.
    pub n: u64,
    /// Entries per row: [`EPILOGUE_NARROW_ENTRIES`] (the tridiagonal) or
    /// [`EPILOGUE_WIDE_ENTRIES`] (the band of columns `i - 13 ..= i + 13`).
    pub row_entries: u32,
    /// Held out of the fits.
    pub held_out: bool,
    /// The launches.
    pub points: Vec<EpiloguePoint>,
    /// Largest block count among the fused launches (the partial-sum workspace).
    pub max_fused_blocks: u32,
}

pub use autopcg_model::profile::{EPILOGUE_NARROW_ENTRIES, EPILOGUE_WIDE_ENTRIES};

/// Device bytes of the epilogue stage at `n` rows of `row_entries` entries: the matrix in CSR
/// (row pointers, 12 bytes an entry), ELL (12 bytes a slot) and DIA (8 bytes a diagonal's
/// entry), the vectors u, w and r, three partial sums per fused block, plus slack.
pub fn epilogue_stage_bytes(n: u64, row_entries: u32, max_fused_blocks: u32) -> u64 {
    let e = u64::from(row_entries);
    n.saturating_mul(4 + 12 * e + 12 * e + 8 * e + 24)
        .saturating_add(24 * u64::from(max_fused_blocks))
        .saturating_add(MEMORY_SLACK)
}

/// Every measurement of the vector stage at one length.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSize {
    /// Vector length.
    pub n: u64,
    /// Held out of the fits.
    pub held_out: bool,
    /// The measurements.
    pub points: Vec<VectorPoint>,
}

/// Every measurement of the dot stage at one length.
#[derive(Debug, Clone, PartialEq)]
pub struct DotSize {
    /// Vector length.
    pub n: u64,
    /// Held out of the fits.
    pub held_out: bool,
    /// The measurements.
    pub points: Vec<DotPoint>,
    /// Largest first-stage block count among the `dot` points (the partial-sum workspace).
    pub max_dot_blocks: u32,
    /// Largest block count among the three-dot points.
    pub max_dot3_blocks: u32,
}

/// A compiled kernel whose resources the plan needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelRef {
    /// A kernel of `vector.cu`.
    Vector(VectorKernel),
    /// A reduction compiled for a block size.
    Dot(Reduction, u32),
    /// The dot3 variant of a SpMV row kernel (`spmv_*_dot3_next`).
    SpmvDot3(SpmvKernel),
}

impl fmt::Display for KernelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelRef::Vector(k) => k.fmt(f),
            KernelRef::Dot(op, b) => write!(f, "{op} (block size {b})"),
            KernelRef::SpmvDot3(k) => f.write_str(k.dot3_entry_point().unwrap_or("-")),
        }
    }
}

/// Resources of the kernels a plan launches, as the measurement source reports them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelTable {
    map: HashMap<KernelRef, KernelResources>,
}

impl KernelTable {
    /// An empty table.
    pub fn new() -> KernelTable {
        KernelTable::default()
    }

    /// Adds (or replaces) a kernel's resources.
    pub fn insert(&mut self, k: KernelRef, r: KernelResources) {
        self.map.insert(k, r);
    }

    /// A kernel's resources.
    pub fn get(&self, k: &KernelRef) -> Result<KernelResources, ProfilerError> {
        self.map.get(k).copied().ok_or_else(|| {
            ProfilerError::Measurement(format!("no resource figures for kernel {k}"))
        })
    }
}

/// The vector kernels the sweep measures: `cg_update` then `axpy`, each in every mapping.
pub fn vector_kernels() -> Vec<VectorKernel> {
    let mut v: Vec<VectorKernel> = VectorVariant::ALL
        .iter()
        .map(|&m| VectorKernel::CgUpdate(m))
        .collect();
    v.extend(VectorVariant::ALL.iter().map(|&m| VectorKernel::Axpy(m)));
    v
}

/// Every reduction the sweep measures, ladder first.
pub fn dot_ops() -> Vec<Reduction> {
    Reduction::all()
}

/// Bytes one call of a vector kernel moves per element: `cg_update` reads u, w, p, s, x, r and
/// writes p, s, x, r; `axpy` and `xpay` read two vectors and write one.
pub fn vector_bytes_per_elem(k: VectorKernel) -> u64 {
    8 * u64::from(k.op().vectors_moved())
}

/// Device bytes of the vector stage at length `n`: the six vectors of `cg_update` (axpy reuses
/// two of them) plus slack.
pub fn vector_stage_bytes(n: u64) -> u64 {
    n.saturating_mul(48).saturating_add(MEMORY_SLACK)
}

/// Device bytes of the dot stage at length `n`: three vectors, the partial sums of the largest
/// launches (one per block, three per block for the fused kernels), plus slack.
pub fn dot_stage_bytes(n: u64, max_dot_blocks: u32, max_dot3_blocks: u32) -> u64 {
    n.saturating_mul(24)
        .saturating_add(8 * u64::from(max_dot_blocks))
        .saturating_add(24 * u64::from(max_dot3_blocks))
        .saturating_add(MEMORY_SLACK)
}

/// The largest `n <= cap` with `bytes(n) <= budget` (`bytes` non-decreasing); 0 when none.
fn largest_fitting(cap: u64, budget: u64, bytes: impl Fn(u64) -> u64) -> u64 {
    if bytes(cap) <= budget {
        return cap;
    }
    let (mut lo, mut hi) = (0u64, cap);
    // Invariant: bytes(lo) <= budget or lo == 0; bytes(hi) > budget.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if bytes(mid) <= budget {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if bytes(lo) <= budget {
        lo
    } else {
        0
    }
}

/// The sizes of one stage: fitted ones and held-out ones, merged in increasing order.
fn stage_sizes(max_n: u64, quick: bool) -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    for d in domains(max_n) {
        out.extend(domain_sizes(&d, quick));
    }
    out.sort_by_key(|&(n, _)| n);
    out.dedup_by_key(|&mut (n, _)| n);
    out
}

fn domain_sizes(d: &Domain, quick: bool) -> Vec<(u64, bool)> {
    let (k, pick): (usize, &[usize]) = if quick { (2, &[1]) } else { (4, &[1, 3]) };
    let mut out: Vec<(u64, bool)> = sample_sizes(d, k).into_iter().map(|n| (n, false)).collect();
    let held = held_out_sizes(d, k);
    let mut chosen: Vec<u64> = pick.iter().filter_map(|&i| held.get(i).copied()).collect();
    if chosen.is_empty() {
        chosen.extend(held.last().copied());
    }
    out.extend(chosen.into_iter().map(|n| (n, true)));
    out
}

/// Thread counts a kernel is tried with: the sweep's list, capped by the device and by the
/// compiled kernel.
fn threads_for(list: &[u32], device: &DeviceProps, res: &KernelResources) -> Vec<u32> {
    list.iter()
        .copied()
        .filter(|&t| t <= device.max_threads_per_block && t <= res.max_threads_per_block)
        .collect()
}

/// The whole plan of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The device measured.
    pub device: DeviceProps,
    /// The options it was planned with.
    pub options: SweepOptions,
    /// Bytes the sweep may allocate: the memory fraction of the total.
    pub memory_budget: u64,
    /// Largest length of the vector stage.
    pub vector_max_n: u64,
    /// Largest length of the dot stage.
    pub dot_max_n: u64,
    /// Eq. 3-2 for every kernel and thread count whose block counts derive from `NB_nt`.
    pub occupancy: Vec<OccupancyRecord>,
    /// The vector stage, by length.
    pub vector: Vec<VectorSize>,
    /// The dot stage, by length.
    pub dot: Vec<DotSize>,
    /// Largest length of the epilogue stage (the tridiagonal).
    pub epilogue_max_n: u64,
    /// Largest length of the epilogue stage's wide band.
    pub epilogue_wide_max_n: u64,
    /// The epilogue stage: the tridiagonal by length, then the wide band by length.
    pub epilogue: Vec<EpilogueSize>,
    /// Name of the matrix stage in the profile (`spmv`, or `spmv_eval` for the evaluation set).
    pub matrix_stage: String,
    /// The matrices of the SpMV stage.
    pub matrices: Vec<MatrixSpec>,
    /// Timing of vector updates.
    pub vector_timing: TimingPolicy,
    /// Timing of reductions.
    pub dot_timing: TimingPolicy,
    /// What the SpMV benchmark of every matrix measures.
    pub spmv: SpmvBenchOptions,
}

/// Counts of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepCounts {
    /// Occupancy records.
    pub occupancy: usize,
    /// Vector measurements.
    pub vector: usize,
    /// Distinct vector lengths.
    pub vector_sizes: usize,
    /// Reduction measurements.
    pub dot: usize,
    /// Distinct reduction lengths.
    pub dot_sizes: usize,
    /// Epilogue launches.
    pub epilogue: usize,
    /// Distinct epilogue lengths.
    pub epilogue_sizes: usize,
    /// Matrices.
    pub matrices: usize,
}

/// Estimated seconds per stage (see [`Sweep::estimate`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StageEstimate {
    /// Vector stage.
    pub vector_s: f64,
    /// Dot stage.
    pub dot_s: f64,
    /// Epilogue stage.
    pub epilogue_s: f64,
    /// SpMV stage.
    pub spmv_s: f64,
}

impl StageEstimate {
    /// All stages.
    pub fn total_s(&self) -> f64 {
        self.vector_s + self.dot_s + self.epilogue_s + self.spmv_s
    }
}

/// Assumptions of the time estimate (rough figures of a current data-centre GPU host).
mod cost {
    /// Seconds per kernel launch in a back-to-back sequence.
    pub const LAUNCH_S: f64 = 4e-6;
    /// Fixed seconds per measurement: events, synchronisations, writing the record.
    pub const MEASURE_OVERHEAD_S: f64 = 2e-4;
    /// Seconds the host waits for one event-timed sample beyond its work.
    pub const SYNC_S: f64 = 1e-5;
    /// Host-device copy rate of pageable memory, bytes per second.
    pub const COPY_BPS: f64 = 10e9;
    /// Host seconds per stored entry of a benchmark matrix inside the SpMV benchmark:
    /// features, the reference product and four host conversions (building the matrix
    /// overlaps the previous matrix's benchmark and is not counted).
    pub const HOST_S_PER_NNZ: f64 = 80e-9;
    /// Host seconds per row and check of a SpMV candidate's result.
    pub const CHECK_S_PER_ROW: f64 = 3e-9;
    /// Mean SpMV candidate time over the fastest one's.
    pub const SPMV_SLOWDOWN: f64 = 2.0;
    /// Tree reductions of the fixed-coverage rungs over a streaming kernel.
    pub const TREE_SLOWDOWN: f64 = 1.5;
}

/// Estimated seconds of one timed measurement whose call takes `t` seconds.
fn measurement_s(t: f64, pol: &TimingPolicy) -> f64 {
    let warm = if t * 1e3 < pol.batch_below_ms {
        4.0
    } else {
        1.0
    };
    cost::MEASURE_OVERHEAD_S + warm * t + (pol.min_reps as f64 * t).max(pol.min_ms * 1e-3)
}

impl Sweep {
    /// The kernels whose resources [`Sweep::plan`] needs for `device` and `opts`.
    pub fn kernel_refs(device: &DeviceProps, opts: &SweepOptions) -> Vec<KernelRef> {
        let mut v: Vec<KernelRef> = vector_kernels()
            .into_iter()
            .map(KernelRef::Vector)
            .collect();
        for b in Sweep::dot_block_sizes(device, opts) {
            v.extend(dot_ops().into_iter().map(|op| KernelRef::Dot(op, b)));
        }
        v.extend(
            SpmvKernel::with_dot3_variant()
                .into_iter()
                .map(KernelRef::SpmvDot3),
        );
        v
    }

    fn thread_list(opts: &SweepOptions) -> &'static [u32] {
        if opts.quick {
            &QUICK_THREADS
        } else {
            &SWEEP_THREADS
        }
    }

    fn dot_block_sizes(device: &DeviceProps, opts: &SweepOptions) -> Vec<u32> {
        Sweep::thread_list(opts)
            .iter()
            .copied()
            .filter(|b| DOT_BLOCK_SIZES.contains(b) && *b <= device.max_threads_per_block)
            .collect()
    }

    /// The tune's plan: vector and dot stages and the fit matrices (the quick set for a quick
    /// sweep), with block counts from the kernels' resources in `kernels`.
    pub fn plan(
        device: &DeviceProps,
        opts: &SweepOptions,
        kernels: &KernelTable,
    ) -> Result<Sweep, ProfilerError> {
        opts.validate()?;
        let quick = opts.quick;
        let memory_budget = (device.total_mem as f64 * opts.memory_fraction) as u64;
        let cap = opts.max_vector_len;
        let threads = Sweep::thread_list(opts);
        let grid_x = device.max_grid_x.max(1);
        let mut occ: Vec<OccupancyRecord> = Vec::new();
        let mut nb_of: HashMap<(KernelId, u32), u32> = HashMap::new();
        let mut nb = |kernel: KernelId, t: u32, res: &KernelResources| -> u32 {
            *nb_of.entry((kernel, t)).or_insert_with(|| {
                let r = occupancy(device, kernel, t, res);
                let v = r.nb_nt;
                occ.push(r);
                v
            })
        };

        // Vector stage: the configurations per kernel do not depend on n except for the
        // covering block counts.
        let vmult: &[u32] = if quick {
            &QUICK_VECTOR_NB_MULTIPLES
        } else {
            &VECTOR_NB_MULTIPLES
        };
        let mut vgrid: Vec<(VectorKernel, u32, u32, u32)> = Vec::new();
        let mut velem: Vec<(VectorKernel, u32)> = Vec::new();
        for k in vector_kernels() {
            let res = kernels.get(&KernelRef::Vector(k))?;
            for t in threads_for(threads, device, &res) {
                if k.variant().items(1).is_some() {
                    velem.push((k, t));
                } else {
                    let nbt = nb(KernelId::Vector(k), t, &res);
                    for &i in vmult {
                        let blocks = u64::from(nbt) * u64::from(i);
                        if blocks <= u64::from(grid_x) {
                            vgrid.push((k, t, blocks as u32, i));
                        }
                    }
                }
            }
        }
        let vector_max_n = largest_fitting(cap, memory_budget, vector_stage_bytes);
        let vector = stage_sizes(vector_max_n, quick)
            .into_iter()
            .map(|(n, held_out)| {
                let mut points = Vec::new();
                for k in vector_kernels() {
                    for &(kk, t) in velem.iter().filter(|(kk, _)| *kk == k) {
                        let items = kk.variant().items(n).unwrap_or(n);
                        let cfg = LaunchConfig::per_item(items, t);
                        if cfg.blocks <= grid_x {
                            points.push(VectorPoint {
                                kernel: kk,
                                cfg,
                                nb_multiple: None,
                            });
                        }
                    }
                    for &(kk, t, b, i) in vgrid.iter().filter(|(kk, ..)| *kk == k) {
                        points.push(VectorPoint {
                            kernel: kk,
                            cfg: LaunchConfig::new(t, b),
                            nb_multiple: Some(i),
                        });
                    }
                }
                VectorSize {
                    n,
                    held_out,
                    points,
                }
            })
            .collect();

        // Dot stage.
        let dmult: &[u32] = if quick {
            &QUICK_DOT_NB_MULTIPLES
        } else {
            &DOT_NB_MULTIPLES
        };
        let mut dfixed: Vec<(Reduction, u32, u64)> = Vec::new();
        let mut dgrid: Vec<(Reduction, u32, u32, u32)> = Vec::new();
        for b in Sweep::dot_block_sizes(device, opts) {
            for op in dot_ops() {
                let res = kernels.get(&KernelRef::Dot(op, b))?;
                if b > res.max_threads_per_block {
                    continue;
                }
                match op.elements_per_thread() {
                    Some(e) => dfixed.push((op, b, u64::from(e))),
                    None => {
                        let nbt = nb(KernelId::Reduction(op), b, &res);
                        for &i in dmult {
                            let blocks = u64::from(nbt) * u64::from(i);
                            if blocks <= u64::from(grid_x) {
                                dgrid.push((op, b, blocks as u32, i));
                            }
                        }
                    }
                }
            }
        }
        let grid_max = |three: bool| {
            dgrid
                .iter()
                .filter(|(op, ..)| matches!(op, Reduction::Dot3(_)) == three)
                .map(|&(_, _, b, _)| b)
                .max()
                .unwrap_or(0)
        };
        let (g2, g3) = (grid_max(false), grid_max(true));
        let fixed_blocks = |n: u64| -> u32 {
            dfixed
                .iter()
                .map(|&(_, b, e)| LaunchConfig::per_item(n.div_ceil(e), b).blocks)
                .max()
                .unwrap_or(0)
        };
        let dot_bytes = |n: u64| dot_stage_bytes(n, fixed_blocks(n).max(g2), g3);
        let dot_max_n = largest_fitting(cap, memory_budget, dot_bytes);
        let dot = stage_sizes(dot_max_n, quick)
            .into_iter()
            .map(|(n, held_out)| {
                let mut points = Vec::new();
                let mut max2 = 1u32;
                let mut max3 = 1u32;
                for op in dot_ops() {
                    for &(o, b, e) in dfixed.iter().filter(|(o, ..)| *o == op) {
                        let cfg = LaunchConfig::per_item(n.div_ceil(e), b);
                        if cfg.blocks <= grid_x {
                            max2 = max2.max(cfg.blocks);
                            points.push(DotPoint {
                                op: o,
                                cfg,
                                nb_multiple: None,
                            });
                        }
                    }
                    for &(o, t, b, i) in dgrid.iter().filter(|(o, ..)| *o == op) {
                        match o {
                            Reduction::Dot(_) => max2 = max2.max(b),
                            Reduction::Dot3(_) => max3 = max3.max(b),
                        }
                        points.push(DotPoint {
                            op: o,
                            cfg: LaunchConfig::new(t, b),
                            nb_multiple: Some(i),
                        });
                    }
                }
                DotSize {
                    n,
                    held_out,
                    points,
                    max_dot_blocks: max2,
                    max_dot3_blocks: max3,
                }
            })
            .collect();

        // Epilogue stage: the plain launch covers the rows; the fused one is capped at one wave
        // of the blocks the compiled variant keeps resident, as the model's plans launch it.
        let ecap = cap.min(EPILOGUE_MAX_LEN);
        let mut eresident: Vec<(SpmvKernel, u32, u32)> = Vec::new();
        for kernel in SpmvKernel::with_dot3_variant() {
            let res = kernels.get(&KernelRef::SpmvDot3(kernel))?;
            for &t in threads {
                if t > device.max_threads_per_block || t > res.max_threads_per_block {
                    continue;
                }
                let smem = res.static_smem_bytes;
                if let Ok(o) = autopcg_catalog::occupancy(device, t, res.regs_per_thread, smem) {
                    eresident.push((kernel, t, o.blocks_per_sm));
                }
            }
        }
        let epilogue_launches = |n: u64, entries: u32| -> Vec<EpiloguePoint> {
            let mut points = Vec::new();
            for &(kernel, t, per_sm) in &eresident {
                let items = kernel.work_items(n, u64::from(entries) * n);
                let plain = LaunchConfig::per_item(items, t);
                if plain.blocks > grid_x {
                    continue;
                }
                let Some(fused) = kernel.dot3_launch(plain, n, device, Some(per_sm)) else {
                    continue;
                };
                for variant in EpilogueVariant::ALL {
                    let (cfg, blocks_per_sm) = match variant {
                        EpilogueVariant::Plain => (plain, None),
                        _ => (fused, Some(per_sm)),
                    };
                    points.push(EpiloguePoint {
                        kernel,
                        variant,
                        cfg,
                        blocks_per_sm,
                    });
                }
            }
            points
        };
        let fused_blocks = |points: &[EpiloguePoint]| {
            points
                .iter()
                .filter(|p| p.variant != EpilogueVariant::Plain)
                .map(|p| p.cfg.blocks)
                .max()
                .unwrap_or(1)
        };
        let max_n_of = |cap: u64, entries: u32| {
            largest_fitting(cap, memory_budget, |n| {
                epilogue_stage_bytes(n, entries, fused_blocks(&epilogue_launches(n, entries)))
            })
        };
        let epilogue_max_n = max_n_of(ecap, EPILOGUE_NARROW_ENTRIES);
        let epilogue_wide_max_n = max_n_of(ecap.min(EPILOGUE_WIDE_MAX_LEN), EPILOGUE_WIDE_ENTRIES);
        let mut epilogue = Vec::new();
        for (max_n, entries) in [
            (epilogue_max_n, EPILOGUE_NARROW_ENTRIES),
            (epilogue_wide_max_n, EPILOGUE_WIDE_ENTRIES),
        ] {
            epilogue.extend(stage_sizes(max_n, quick).into_iter().map(|(n, held_out)| {
                let points = epilogue_launches(n, entries);
                EpilogueSize {
                    n,
                    row_entries: entries,
                    held_out,
                    max_fused_blocks: fused_blocks(&points),
                    points,
                }
            }));
        }

        Ok(Sweep {
            device: device.clone(),
            options: opts.clone(),
            memory_budget,
            vector_max_n,
            dot_max_n,
            occupancy: occ,
            vector,
            dot,
            epilogue_max_n,
            epilogue_wide_max_n,
            epilogue,
            matrix_stage: "spmv".into(),
            matrices: if quick {
                quick_matrices()
            } else {
                fit_matrices()
            },
            vector_timing: if quick {
                TimingPolicy::quick()
            } else {
                TimingPolicy::vector_full()
            },
            dot_timing: if quick {
                TimingPolicy::quick()
            } else {
                TimingPolicy::full()
            },
            spmv: opts.spmv_bench(),
        })
    }

    /// The plan of the evaluation set: its matrices only (no vector or dot stage).
    pub fn eval_plan(device: &DeviceProps, opts: &SweepOptions) -> Result<Sweep, ProfilerError> {
        opts.validate()?;
        Ok(Sweep {
            device: device.clone(),
            options: opts.clone(),
            memory_budget: (device.total_mem as f64 * opts.memory_fraction) as u64,
            vector_max_n: 0,
            dot_max_n: 0,
            occupancy: Vec::new(),
            vector: Vec::new(),
            dot: Vec::new(),
            epilogue_max_n: 0,
            epilogue_wide_max_n: 0,
            epilogue: Vec::new(),
            matrix_stage: "spmv_eval".into(),
            matrices: eval_matrices(),
            vector_timing: TimingPolicy::full(),
            dot_timing: TimingPolicy::full(),
            spmv: opts.spmv_bench(),
        })
    }

    /// The SpMV benchmark options of a sweep: every thread count of the sweep, both grid
    /// policies, cuSPARSE, no triad; 5 samples and 2 ms (3 and 0.5 ms when quick); matrices
    /// whose iteration fits in half of L2 also timed from graph replays, as the solver runs
    /// them (`replays_spmv_at`, the rule the reductions and updates follow); the calls launched
    /// alone as repeated calls ([`SweepOptions::spmv_bench`] sets `flush_l2` where
    /// [`SweepOptions::spmv_l2_cold`] asks for L2-cold timing). The check
    /// tolerance is looser than the benchmark's default so that the long rows of the power-law
    /// matrices (whose rounding grows with the row length) are not reported as wrong.
    pub fn spmv_options(quick: bool) -> SpmvBenchOptions {
        let t = TimingPolicy::full();
        let q = TimingPolicy::quick();
        SpmvBenchOptions {
            threads: if quick {
                QUICK_THREADS.to_vec()
            } else {
                SWEEP_THREADS.to_vec()
            },
            grids: vec![GridPolicy::Wave, GridPolicy::Cover],
            padding: PaddingLimits::default(),
            min_reps: if quick { q.min_reps } else { t.min_reps },
            min_ms: if quick { q.min_ms } else { t.min_ms },
            seed: 42,
            tolerance: 1e-10,
            cusparse: true,
            triad: false,
            replay_within_l2: true,
            flush_l2: false,
        }
    }

    /// How many records of each kind the plan measures.
    pub fn counts(&self) -> SweepCounts {
        SweepCounts {
            occupancy: self.occupancy.len(),
            vector: self.vector.iter().map(|s| s.points.len()).sum(),
            vector_sizes: self.vector.len(),
            dot: self.dot.iter().map(|s| s.points.len()).sum(),
            dot_sizes: self.dot.len(),
            epilogue: self.epilogue.iter().map(|s| s.points.len()).sum(),
            epilogue_sizes: self.epilogue.len(),
            matrices: self.matrices.len(),
        }
    }

    /// Estimated seconds of one vector measurement at length `n` on a device moving
    /// `bandwidth` bytes per second.
    pub fn vector_point_s(&self, n: u64, p: &VectorPoint, bandwidth: f64) -> f64 {
        let t = (vector_bytes_per_elem(p.kernel) * n) as f64 / bandwidth + cost::LAUNCH_S;
        measurement_s(t, &self.vector_timing)
    }

    /// Estimated seconds of one reduction measurement.
    pub fn dot_point_s(&self, n: u64, p: &DotPoint, bandwidth: f64) -> f64 {
        let slow = if p.nb_multiple.is_none() {
            cost::TREE_SLOWDOWN
        } else {
            1.0
        };
        let t = slow * (8 * reduction_vectors(p.op) * n) as f64 / bandwidth
            + f64::from(reduction_launches(p.op)) * cost::LAUNCH_S;
        measurement_s(t, &self.dot_timing)
    }

    /// Estimated seconds of one epilogue launch at `n` rows of `row_entries` entries: the
    /// product (12 bytes an entry and 16 a row in CSR) and, fused, the three vectors of the
    /// dots; the host builds the matrix once per length (not counted here).
    pub fn epilogue_point_s(
        &self,
        n: u64,
        row_entries: u32,
        p: &EpiloguePoint,
        bandwidth: f64,
    ) -> f64 {
        let plain = 12 * u64::from(row_entries) + 16;
        let bytes = match p.variant {
            EpilogueVariant::Plain => plain,
            EpilogueVariant::Fused => plain + 24,
            EpilogueVariant::FusedAliased => plain + 16,
        };
        let t = (bytes * n) as f64 / bandwidth + cost::LAUNCH_S;
        measurement_s(t, &self.dot_timing)
    }

    /// Estimated seconds of the SpMV benchmark of one matrix, host work included.
    pub fn matrix_s(&self, m: &MatrixSpec, bandwidth: f64) -> f64 {
        let (n, z) = (m.approx_rows as f64, m.approx_nnz as f64);
        let tg = (self.spmv.threads.len() * self.spmv.grids.len()) as f64;
        // CSR scalar + 5 vector widths, ELL, DIA, two COO kernels, HYB with both COO kernels.
        let candidates = 12.0 * tg + if self.spmv.cusparse { 3.0 } else { 0.0 };
        let t = cost::SPMV_SLOWDOWN * (12.0 * z + 20.0 * n) / bandwidth + cost::LAUNCH_S;
        let pol = TimingPolicy {
            min_reps: self.spmv.min_reps,
            min_ms: self.spmv.min_ms,
            ..TimingPolicy::full()
        };
        let check = 3.0 * 8.0 * n / cost::COPY_BPS + 2.0 * n * cost::CHECK_S_PER_ROW + t;
        // Timed with L2 cold, every sample also reads twice the L2 and waits for the call.
        let flushes = match self.spmv.flush_l2 {
            true => {
                let reps = ((pol.min_ms * 1e-3 / t).ceil() as usize).clamp(
                    pol.min_reps,
                    autopcg_gpu::timer::MAX_FLUSHED_REPS.max(pol.min_reps),
                );
                let flush = 2.0 * f64::from(self.device.l2_bytes) / bandwidth + cost::SYNC_S;
                reps as f64 * flush
            }
            false => 0.0,
        };
        let per_candidate = measurement_s(t, &pol) + check + flushes;
        let host = z * cost::HOST_S_PER_NNZ + 5.0 * 12.0 * z / cost::COPY_BPS;
        candidates * per_candidate + host
    }

    /// Estimated seconds per stage on a device moving `bandwidth` bytes per second, from
    /// rough costs: a launch gap of 4 us, 0.2 ms per measurement beside its timed calls, the
    /// calls' bytes at `bandwidth` (fixed-coverage tree reductions 1.5 times slower, SpMV
    /// candidates on average twice the fastest), 10 GB/s host-device copies for the SpMV
    /// result checks and uploads, 80 ns of host work per stored entry of a matrix. Kernel
    /// compilation and context creation are not included.
    pub fn estimate(&self, bandwidth: f64) -> StageEstimate {
        let bw = bandwidth.max(1.0);
        StageEstimate {
            vector_s: self
                .vector
                .iter()
                .flat_map(|s| {
                    s.points
                        .iter()
                        .map(move |p| self.vector_point_s(s.n, p, bw))
                })
                .sum(),
            dot_s: self
                .dot
                .iter()
                .flat_map(|s| s.points.iter().map(move |p| self.dot_point_s(s.n, p, bw)))
                .sum(),
            epilogue_s: self
                .epilogue
                .iter()
                .flat_map(|s| {
                    s.points
                        .iter()
                        .map(move |p| self.epilogue_point_s(s.n, s.row_entries, p, bw))
                })
                .sum(),
            spmv_s: self.matrices.iter().map(|m| self.matrix_s(m, bw)).sum(),
        }
    }
}
