//! The SpMV benchmark: every SpMV kernel of the pool in every format it reads, at every thread
//! count and grid policy asked for, plus cuSPARSE's generic SpMV with each CSR algorithm, on one
//! matrix; and the device's triad bandwidth as the yardstick.
//!
//! Protocol, per candidate: every kernel is compiled before anything is timed; `y` is filled
//! with NaN, the kernel runs once and `y` is compared with [`CsrMatrix::spmv`] (each row's error
//! relative to `sum_j |a_ij x_j|`); a kernel whose result is wrong is recorded as failed and not
//! timed. Otherwise [`time_kernel`] takes a warm-up call, then event-timed repetitions until a
//! minimum count and a minimum total time are reached, and `y` is checked again. `x` is uniform
//! in [0.5, 1.5) from a seeded ChaCha8 generator, never zero.
//!
//! Bandwidth: every row of the table divides the SAME byte count, the least traffic a CSR SpMV
//! can move ([`csr_min_bytes`]: `12 nnz + 12 nrows + 8 ncols`, `12 nnz + 20 n` when square),
//! by the median time, so the GB/s column orders candidates exactly as their times do. Each
//! record also carries the bytes its own format moves ([`format_bytes`]) and the bandwidth that
//! implies.
//!
//! Formats are converted and uploaded one at a time (and dropped after), so device memory holds
//! the matrix in one format at a time. A padded format the conversion refuses
//! ([`SparseError::TooMuchPadding`](autopcg_sparse::SparseError::TooMuchPadding) under
//! [`SpmvBenchOptions::padding`]) is recorded as skipped with the reason.
//!
//! Beside each host conversion, the same conversion on the device from the uploaded CSR
//! matrix ([`csr_to_ell`], [`csr_to_dia`], [`csr_to_hyb`]) is timed while the CSR arrays are on
//! the device: one untimed call, then [`DEVICE_CONVERSION_REPS`] calls each between two
//! events (the copies of the counts to the host that each conversion waits for included), the
//! median in [`ConversionRecord::device_ms`]; each result is dropped before the next, so the
//! device holds the CSR matrix and one converted copy at a time.
use std::fmt::Write as _;
use std::time::Instant;

use autopcg_sparse::features::{features, MatrixFeatures};
use autopcg_sparse::{CooMatrix, CsrMatrix, DiaMatrix, EllMatrix, HybMatrix, PaddingLimits};
use cudarc::driver::PushKernelArg;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cusparse::{cusparse_version, CusparseAlg, CusparseSpmv};
use crate::kernels::convert::{csr_to_dia, csr_to_ell, csr_to_hyb};
use crate::kernels::launched;
use crate::kernels::spmv::{spmv_coo, spmv_csr, spmv_dia, spmv_ell, spmv_hyb, SpmvKernel};
use crate::sources::{KernelSource, ModuleSpec};
use crate::{
    time_kernel, DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, DeviceProps, DeviceVec,
    Format, GpuDevice, GpuError, LaunchConfig, TimingStats,
};

/// Thread counts tried by default.
pub const DEFAULT_BENCH_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];

/// Elements of each of the three triad buffers of [`measure_triad_gbps`]: 256 MiB of f64 each,
/// far beyond any L2 cache.
pub const TRIAD_ELEMS: usize = 32 << 20;

pub use autopcg_catalog::kernels::TRIAD_KERNEL;

/// Timed repetitions of each device conversion (after one untimed call).
pub const DEVICE_CONVERSION_REPS: usize = 5;

pub use autopcg_catalog::GridPolicy;

/// What [`bench_spmv`] measures and how.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpmvBenchOptions {
    /// Threads per block to try for every kernel ([`DEFAULT_BENCH_THREADS`]).
    pub threads: Vec<u32>,
    /// Grid policies to try for every thread count (both by default; a policy giving the same
    /// block count as an earlier one is not repeated).
    pub grids: Vec<GridPolicy>,
    /// Limits on the padded formats (ELL, DIA, HYB's ELL part).
    pub padding: PaddingLimits,
    /// Fewest timed repetitions per candidate.
    pub min_reps: usize,
    /// Least total timed milliseconds per candidate.
    pub min_ms: f64,
    /// Seed of `x`.
    pub seed: u64,
    /// Largest accepted error of a row, relative to `sum_j |a_ij x_j|`.
    pub tolerance: f64,
    /// Also measure cuSPARSE (every algorithm of [`CusparseAlg::ALL`]).
    pub cusparse: bool,
    /// Also measure the triad bandwidth ([`measure_triad_gbps`]) for the "% of triad" column.
    pub triad: bool,
}

impl Default for SpmvBenchOptions {
    fn default() -> Self {
        SpmvBenchOptions {
            threads: DEFAULT_BENCH_THREADS.to_vec(),
            grids: vec![GridPolicy::Wave, GridPolicy::Cover],
            padding: PaddingLimits::default(),
            min_reps: 20,
            min_ms: 50.0,
            seed: 42,
            tolerance: 1e-12,
            cusparse: true,
            triad: true,
        }
    }
}

impl SpmvBenchOptions {
    /// A short run (two thread counts, one grid policy, few repetitions, no triad): for tests
    /// and quick looks, not for figures.
    pub fn quick() -> Self {
        SpmvBenchOptions {
            threads: vec![128, 256],
            grids: vec![GridPolicy::Wave],
            min_reps: 3,
            min_ms: 0.0,
            triad: false,
            ..SpmvBenchOptions::default()
        }
    }

    /// Checks the options, naming the value at fault.
    pub fn validate(&self) -> Result<(), GpuError> {
        let bad = |reason: String| {
            Err(GpuError::InvalidInput {
                what: "SpMV benchmark options".into(),
                reason,
            })
        };
        if self.threads.is_empty() {
            return bad("no thread count to try".into());
        }
        if let Some(t) = self.threads.iter().find(|&&t| t == 0 || t > 1024) {
            return bad(format!("{t} threads per block; expected 1..=1024"));
        }
        if self.grids.is_empty() {
            return bad("no grid policy to try".into());
        }
        if self.min_reps == 0 {
            return bad("min_reps = 0; at least one timed repetition is needed".into());
        }
        if !(self.min_ms >= 0.0 && self.min_ms.is_finite()) {
            return bad(format!(
                "min_ms = {}; expected a finite value >= 0",
                self.min_ms
            ));
        }
        if !(self.tolerance > 0.0 && self.tolerance.is_finite()) {
            return bad(format!(
                "tolerance = {}; expected a finite value > 0",
                self.tolerance
            ));
        }
        Ok(())
    }
}

/// How a candidate ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum RecordStatus {
    /// Correct and timed.
    Ok,
    /// Not run: the format was refused, or the configuration does not apply.
    Skipped(String),
    /// Ran but failed: a wrong result or an error; not timed.
    Failed(String),
}

impl RecordStatus {
    /// True for [`RecordStatus::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, RecordStatus::Ok)
    }
}

/// One candidate: a kernel (or cuSPARSE algorithm) in a format with a launch configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpmvRecord {
    /// The format the kernel reads.
    pub format: Format,
    /// Kernel entry point (`spmv_csr_vector_4`), `spmv_ell+spmv_coo_segment` for HYB's two
    /// launches, or the cuSPARSE algorithm (`cusparse_spmv_csr_alg2`).
    pub kernel: String,
    /// Threads per block; `None` for cuSPARSE and for records of a whole skipped format.
    pub threads: Option<u32>,
    /// Blocks (of the ELL launch, for HYB); `None` where `threads` is.
    pub blocks: Option<u32>,
    /// Blocks of HYB's COO launch.
    pub coo_blocks: Option<u32>,
    /// The grid policy that gave `blocks`.
    pub grid: Option<GridPolicy>,
    /// Outcome.
    pub status: RecordStatus,
    /// Median milliseconds per SpMV.
    pub median_ms: Option<f64>,
    /// Fastest repetition, milliseconds.
    pub min_ms: Option<f64>,
    /// Slowest repetition, milliseconds.
    pub max_ms: Option<f64>,
    /// Timed repetitions.
    pub reps: Option<usize>,
    /// Effective bandwidth, GB/s: [`csr_min_bytes`] over the median (comparable across rows).
    pub gbps: Option<f64>,
    /// Bytes this format's SpMV moves at least ([`format_bytes`]).
    pub bytes_format: u64,
    /// `bytes_format` over the median, GB/s.
    pub gbps_format: Option<f64>,
    /// Largest row error relative to `sum_j |a_ij x_j|`, over the checks made.
    pub max_rel_err: Option<f64>,
}

impl SpmvRecord {
    fn new(format: Format, kernel: impl Into<String>, bytes_format: u64) -> Self {
        SpmvRecord {
            format,
            kernel: kernel.into(),
            threads: None,
            blocks: None,
            coo_blocks: None,
            grid: None,
            status: RecordStatus::Ok,
            median_ms: None,
            min_ms: None,
            max_ms: None,
            reps: None,
            gbps: None,
            bytes_format,
            gbps_format: None,
            max_rel_err: None,
        }
    }

    /// True for a cuSPARSE record.
    pub fn is_cusparse(&self) -> bool {
        self.kernel.starts_with("cusparse")
    }

    fn with_config(mut self, cfg: LaunchConfig, grid: GridPolicy) -> Self {
        self.threads = Some(cfg.threads);
        self.blocks = Some(cfg.blocks);
        self.grid = Some(grid);
        self
    }

    fn with_status(mut self, status: RecordStatus) -> Self {
        self.status = status;
        self
    }
}

/// Converting and uploading the matrix in one format.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConversionRecord {
    /// The format.
    pub format: Format,
    /// Ok, or why the format was skipped (refused conversion) or failed (upload).
    pub status: RecordStatus,
    /// Milliseconds to convert from CSR on the host (0 for CSR itself).
    pub host_ms: f64,
    /// Milliseconds to upload to the device (until the copies finished).
    pub upload_ms: f64,
    /// Bytes the format occupies on the device.
    pub device_bytes: u64,
    /// Milliseconds to build the format on the device from the uploaded CSR matrix (ELL, DIA
    /// and HYB: median of [`DEVICE_CONVERSION_REPS`] event-timed runs); `None` for the other
    /// formats, when the conversion is refused (as on the host), or when it failed
    /// (`device_error`).
    #[serde(default)]
    pub device_ms: Option<f64>,
    /// Why the device conversion failed, when it did for another reason than a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_error: Option<String>,
}

/// The triad measurement: `a[i] = b[i] + s c[i]`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TriadResult {
    /// Elements per buffer.
    pub n: usize,
    /// Bytes moved per call: `24 n` (two reads, one write).
    pub bytes: u64,
    /// Threads per block of the fastest configuration.
    pub threads: u32,
    /// Blocks of the fastest configuration.
    pub blocks: u32,
    /// Timing of the fastest configuration.
    pub stats: TimingStats,
    /// `bytes` over the median, GB/s.
    pub gbps: f64,
}

/// Everything [`bench_spmv`] measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpmvBench {
    /// The device.
    pub device: DeviceProps,
    /// The matrix.
    pub matrix: MatrixFeatures,
    /// How the comparable bandwidth (`gbps`) is computed, in words.
    pub bytes_formula: String,
    /// The byte count every `gbps` divides ([`csr_min_bytes`]).
    pub bytes_csr_min: u64,
    /// The triad measurement, when asked for.
    pub triad: Option<TriadResult>,
    /// cuSPARSE's version `major.minor.patch`, when it loaded.
    pub cusparse_version: Option<String>,
    /// Milliseconds to compile (or load from the cache) every kernel before timing.
    pub compile_ms: f64,
    /// The options used.
    pub options: SpmvBenchOptions,
    /// Conversion and upload per format.
    pub conversions: Vec<ConversionRecord>,
    /// Every candidate, by format.
    pub records: Vec<SpmvRecord>,
    /// Index in `records` of the fastest correct candidate (by median).
    pub best: Option<usize>,
    /// Index in `records` of the fastest correct candidate among autopcg's own kernels
    /// (cuSPARSE left out): the label a selection model learns.
    pub best_own: Option<usize>,
}

/// The least bytes a CSR SpMV with 32-bit indices moves: an f64 value and an i32 column per
/// nonzero, an i32 row pointer and an f64 of `y` per row, an f64 of `x` per column (each read
/// once): `12 nnz + 12 nrows + 8 ncols`, which is `12 nnz + 20 n` for a square matrix.
pub fn csr_min_bytes(nrows: usize, ncols: usize, nnz: usize) -> u64 {
    12 * nnz as u64 + 12 * nrows as u64 + 8 * ncols as u64
}

/// The shape of a format's arrays that its traffic depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatShape {
    /// CSR (also cuSPARSE).
    Csr,
    /// ELL of this width.
    Ell {
        /// Slots per row.
        width: usize,
    },
    /// DIA with this many diagonals.
    Dia {
        /// Stored diagonals.
        ndiag: usize,
    },
    /// COO (y is zeroed, then updated by atomics).
    Coo,
    /// HYB: ELL part of this width, COO part of `coo_nnz` entries in `coo_rows` distinct rows.
    Hyb {
        /// ELL width.
        width: usize,
        /// Entries of the COO part.
        coo_nnz: usize,
        /// Rows the COO part touches.
        coo_rows: usize,
    },
}

/// The least bytes one SpMV in a format moves, each array element read once, `x` read once
/// (`8 ncols`) and `y` written once (`8 nrows`), plus:
/// - CSR: `12 nnz + 4 nrows` (values, columns, row pointers);
/// - ELL: `12 width nrows` (every slot, padding included);
/// - DIA: `8 ndiag nrows + 4 ndiag`;
/// - COO: `16 nnz + 16 nrows` (rows, columns, values; the atomics read and write y again after
///   the zero fill);
/// - HYB: `12 width nrows + 16 coo_nnz + 16 coo_rows`.
pub fn format_bytes(shape: FormatShape, nrows: usize, ncols: usize, nnz: usize) -> u64 {
    let (n, m, z) = (nrows as u64, ncols as u64, nnz as u64);
    let base = 8 * m + 8 * n;
    base + match shape {
        FormatShape::Csr => 12 * z + 4 * n,
        FormatShape::Ell { width } => 12 * width as u64 * n,
        FormatShape::Dia { ndiag } => 8 * ndiag as u64 * n + 4 * ndiag as u64,
        FormatShape::Coo => 16 * z + 16 * n,
        FormatShape::Hyb {
            width,
            coo_nnz,
            coo_rows,
        } => 12 * width as u64 * n + 16 * coo_nnz as u64 + 16 * coo_rows as u64,
    }
}

/// The bandwidth formula in words, for the table and the JSON.
pub const BYTES_FORMULA: &str = "GB/s = (12*nnz + 12*nrows + 8*ncols) / median time, i.e. \
    12*nnz + 20*n for square matrices: the least traffic of CSR SpMV (f64 value + i32 column per \
    nonzero; i32 row pointer + f64 y per row; f64 x per column), the same byte count for every \
    row";

/// The largest row error of `got` against `want`, relative to `scale` (`sum_j |a_ij x_j|`);
/// `Err` naming the first row whose error exceeds `tol` or is not a number (a NaN left by the
/// poison fill means the row was never written).
pub fn compare_rows(got: &[f64], want: &[f64], scale: &[f64], tol: f64) -> Result<f64, String> {
    if got.len() != want.len() || scale.len() != want.len() {
        return Err(format!(
            "result has {} rows, the reference {} (scale {})",
            got.len(),
            want.len(),
            scale.len()
        ));
    }
    let mut worst = 0.0f64;
    for i in 0..got.len() {
        let err = (got[i] - want[i]).abs() / scale[i].max(f64::MIN_POSITIVE);
        // A NaN (a row never written, or a NaN computed) fails.
        if err.is_nan() || err > tol {
            return Err(format!(
                "row {i}: got {:e}, want {:e} (relative error {err:e} > {tol:e})",
                got[i], want[i]
            ));
        }
        worst = worst.max(err);
    }
    Ok(worst)
}

/// `sum_j |a_ij x_j|` per row.
fn abs_row_sums(a: &CsrMatrix, x: &[f64]) -> Vec<f64> {
    (0..a.nrows())
        .map(|i| {
            let (c, v) = a.row(i);
            c.iter()
                .zip(v)
                .map(|(&j, &aij)| (aij * x[j as usize]).abs())
                .sum()
        })
        .collect()
}

/// `n` values uniform in [0.5, 1.5) from ChaCha8 seeded with `seed`.
pub fn bench_vector(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0.5..1.5)).collect()
}

/// Work items of a kernel ([`SpmvKernel::work_items`]).
fn work_items(kernel: SpmvKernel, nrows: usize, nnz: usize) -> u64 {
    kernel.work_items(nrows as u64, nnz as u64)
}

/// The launch configurations to try for `kernel` over `work` items: for each thread count and
/// grid policy, a configuration, or why it does not apply (more threads than the device or the
/// compiled kernel allows, or not whole warps for a warp-cooperative kernel). A policy giving
/// the same configuration as an earlier one is left out.
pub fn candidate_configs(
    kernel: SpmvKernel,
    work: u64,
    opts: &SpmvBenchOptions,
    props: &DeviceProps,
    kernel_max_threads: u32,
) -> Vec<(u32, GridPolicy, Result<LaunchConfig, String>)> {
    let mut out: Vec<(u32, GridPolicy, Result<LaunchConfig, String>)> = Vec::new();
    for &t in &opts.threads {
        let reason = if t > props.max_threads_per_block {
            Some(format!(
                "{t} threads per block; the device allows {}",
                props.max_threads_per_block
            ))
        } else if t > kernel_max_threads {
            Some(format!(
                "{t} threads per block; {kernel} as compiled allows {kernel_max_threads}"
            ))
        } else if kernel.needs_whole_warps() && t % 32 != 0 {
            Some(format!("{t} threads per block is not a multiple of 32"))
        } else {
            None
        };
        if let Some(r) = reason {
            out.push((t, opts.grids[0], Err(r)));
            continue;
        }
        for &g in &opts.grids {
            let cfg = g.config(work, t, props);
            let dup = out
                .iter()
                .any(|(_, _, c)| c.as_ref().is_ok_and(|c| *c == cfg));
            if !dup {
                out.push((t, g, Ok(cfg)));
            }
        }
    }
    out
}

/// Host-side state shared by every candidate.
struct Ctx<'a> {
    dev: &'a GpuDevice,
    opts: &'a SpmvBenchOptions,
    x: DeviceVec<f64>,
    y: DeviceVec<f64>,
    poison: Vec<f64>,
    want: Vec<f64>,
    scale: Vec<f64>,
    csr_bytes: u64,
}

/// A candidate's launch: `y = A x`.
type Launch<'r> = dyn FnMut(&DeviceVec<f64>, &mut DeviceVec<f64>) -> Result<(), GpuError> + 'r;

impl Ctx<'_> {
    /// Checks, then times, one candidate, filling `rec`. Errors that leave the device unusable
    /// end the benchmark; others are recorded.
    fn measure(
        &mut self,
        mut rec: SpmvRecord,
        run: &mut Launch<'_>,
    ) -> Result<SpmvRecord, GpuError> {
        match self.check_and_time(run) {
            Ok((stats, err)) => {
                let s = stats.median_ms * 1e-3;
                rec.median_ms = Some(stats.median_ms);
                rec.min_ms = Some(stats.min_ms);
                rec.max_ms = Some(stats.max_ms);
                rec.reps = Some(stats.reps);
                rec.max_rel_err = Some(err);
                if s > 0.0 {
                    rec.gbps = Some(self.csr_bytes as f64 / s / 1e9);
                    rec.gbps_format = Some(rec.bytes_format as f64 / s / 1e9);
                }
                Ok(rec.with_status(RecordStatus::Ok))
            }
            Err(Outcome::Wrong(msg)) => Ok(rec.with_status(RecordStatus::Failed(msg))),
            Err(Outcome::Error(e)) => {
                // A kernel fault poisons the context: if the device no longer answers, stop.
                self.dev.synchronize()?;
                Ok(rec.with_status(RecordStatus::Failed(e.to_string())))
            }
        }
    }

    fn check_and_time(&mut self, run: &mut Launch<'_>) -> Result<(TimingStats, f64), Outcome> {
        let dev = self.dev;
        dev.upload_into(&self.poison, &mut self.y)?;
        run(&self.x, &mut self.y)?;
        dev.synchronize()?;
        let first = self.check("first run")?;
        let (x, y) = (&self.x, &mut self.y);
        let stats = time_kernel(
            dev,
            || run(x, &mut *y),
            self.opts.min_reps,
            self.opts.min_ms,
        )?;
        let after = self.check("after the timed runs")?;
        Ok((stats, first.max(after)))
    }

    fn check(&self, when: &str) -> Result<f64, Outcome> {
        let got = self.dev.download(&self.y)?;
        compare_rows(&got, &self.want, &self.scale, self.opts.tolerance)
            .map_err(|m| Outcome::Wrong(format!("wrong result ({when}): {m}")))
    }
}

/// Why a candidate has no time.
enum Outcome {
    /// The result differs from the CPU's (the message names the row).
    Wrong(String),
    /// A launch or copy failed.
    Error(GpuError),
}

impl From<GpuError> for Outcome {
    fn from(e: GpuError) -> Self {
        Outcome::Error(e)
    }
}

/// Converts on the host and uploads, timing both; `Err` holds the record of a refused or
/// failed format.
fn convert<H, D>(
    dev: &GpuDevice,
    format: Format,
    host: impl FnOnce() -> Result<H, autopcg_sparse::SparseError>,
    upload: impl FnOnce(&GpuDevice, &H) -> Result<D, GpuError>,
    bytes: impl FnOnce(&D) -> usize,
) -> (ConversionRecord, Option<(H, D)>) {
    let mut rec = ConversionRecord {
        format,
        status: RecordStatus::Ok,
        host_ms: 0.0,
        upload_ms: 0.0,
        device_bytes: 0,
        device_ms: None,
        device_error: None,
    };
    let t0 = Instant::now();
    let h = match host() {
        Ok(h) => h,
        Err(e) => {
            rec.status = RecordStatus::Skipped(e.to_string());
            return (rec, None);
        }
    };
    rec.host_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let d = match upload(dev, &h).and_then(|d| dev.synchronize().map(|_| d)) {
        Ok(d) => d,
        Err(e) => {
            rec.status = RecordStatus::Failed(format!("upload: {e}"));
            return (rec, None);
        }
    };
    rec.upload_ms = t1.elapsed().as_secs_f64() * 1e3;
    rec.device_bytes = bytes(&d) as u64;
    (rec, Some((h, d)))
}

/// One record per kernel of a format that could not be converted or uploaded.
fn format_unavailable(
    out: &mut Vec<SpmvRecord>,
    format: Format,
    kernels: &[String],
    conv: &ConversionRecord,
    bytes_format: u64,
) {
    let status = match &conv.status {
        RecordStatus::Ok => return,
        s => s.clone(),
    };
    for k in kernels {
        out.push(SpmvRecord::new(format, k.clone(), bytes_format).with_status(status.clone()));
    }
}

fn max_threads(dev: &GpuDevice, kernel: SpmvKernel) -> Result<u32, GpuError> {
    Ok(dev
        .kernel(&ModuleSpec::plain(kernel.source()), &kernel.to_string())?
        .attrs()
        .max_threads_per_block)
}

/// The device conversion of one format: its median time, `Ok(None)` when refused (the host
/// conversion refuses it too), or why it failed.
type DeviceConversion = Result<Option<f64>, String>;

/// Times a conversion on the device ([`DEVICE_CONVERSION_REPS`] runs after one untimed call,
/// each result dropped before the next).
fn time_device_conversion<D>(
    dev: &GpuDevice,
    mut run: impl FnMut() -> Result<D, GpuError>,
) -> Result<DeviceConversion, GpuError> {
    match time_kernel(dev, || run().map(drop), DEVICE_CONVERSION_REPS, 0.0) {
        Ok(stats) => Ok(Ok(Some(stats.median_ms))),
        Err(GpuError::Sparse(_)) => Ok(Ok(None)),
        Err(e) => {
            // A fault poisons the context: if the device no longer answers, stop.
            dev.synchronize()?;
            Ok(Err(e.to_string()))
        }
    }
}

/// Puts a device conversion's outcome into its record.
fn set_device_conversion(rec: &mut ConversionRecord, dc: Option<DeviceConversion>) {
    match dc {
        Some(Ok(ms)) => rec.device_ms = ms,
        Some(Err(e)) => rec.device_error = Some(e),
        None => rec.device_error = Some("the CSR matrix is not on the device".into()),
    }
}

/// Measures every SpMV candidate on `a` (see the module documentation for the protocol).
/// Fails on invalid options, a matrix without rows, and device errors that leave the device
/// unusable; a kernel that computes a wrong result or cannot launch is recorded, not an error.
pub fn bench_spmv(
    dev: &GpuDevice,
    a: &CsrMatrix,
    opts: &SpmvBenchOptions,
) -> Result<SpmvBench, GpuError> {
    opts.validate()?;
    if a.nrows() == 0 {
        return Err(GpuError::InvalidInput {
            what: "matrix to benchmark".into(),
            reason: "it has no rows".into(),
        });
    }
    let (n, m, nnz) = (a.nrows(), a.ncols(), a.nnz());
    let props = dev.props().clone();

    let t = Instant::now();
    dev.compile_all()?;
    dev.kernel(&ModuleSpec::plain(KernelSource::Vector), TRIAD_KERNEL)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;

    let triad = if opts.triad {
        Some(measure_triad(dev, TRIAD_ELEMS)?)
    } else {
        None
    };

    let xh = bench_vector(m, opts.seed);
    let want = a.mul_vec(&xh);
    let scale = abs_row_sums(a, &xh);
    let csr_bytes = csr_min_bytes(n, m, nnz);
    let mut cx = Ctx {
        dev,
        opts,
        x: dev.upload(&xh)?,
        y: dev.alloc_zeros(n)?,
        poison: vec![f64::NAN; n],
        want,
        scale,
        csr_bytes,
    };
    drop(xh);

    let mut conversions = Vec::new();
    let mut records = Vec::new();

    // CSR: our kernels, then cuSPARSE on the same device arrays.
    let csr_kernels: Vec<SpmvKernel> = SpmvKernel::all()
        .into_iter()
        .filter(|k| k.format() == Format::Csr)
        .collect();
    let csr_fmt_bytes = format_bytes(FormatShape::Csr, n, m, nnz);
    let (conv, up) = convert(
        dev,
        Format::Csr,
        || Ok(()),
        |d, _| DeviceCsr::upload(d, a),
        DeviceCsr::device_bytes,
    );
    let mut cusparse_ver = None;
    let mut names: Vec<String> = csr_kernels.iter().map(|k| k.to_string()).collect();
    if opts.cusparse {
        names.extend(CusparseAlg::ALL.iter().map(|k| k.to_string()));
    }
    format_unavailable(&mut records, Format::Csr, &names, &conv, csr_fmt_bytes);
    conversions.push(conv);
    // Device conversions of the padded formats, timed while the CSR arrays are here.
    let (mut dev_ell, mut dev_dia, mut dev_hyb) = (None, None, None);
    if let Some(((), mut da)) = up {
        let pad = &opts.padding;
        dev_ell = Some(time_device_conversion(dev, || csr_to_ell(dev, &da, pad))?);
        dev_dia = Some(time_device_conversion(dev, || csr_to_dia(dev, &da, pad))?);
        dev_hyb = Some(time_device_conversion(dev, || {
            csr_to_hyb(dev, &da, None, pad)
        })?);
        for &k in &csr_kernels {
            let work = work_items(k, n, nnz);
            let kmax = max_threads(dev, k)?;
            let prepared = da
                .prepare_for(dev, k)
                .and_then(|()| dev.synchronize())
                .map_err(|e| format!("preparing {k}: {e}"));
            for (t, g, cfg) in candidate_configs(k, work, opts, &props, kmax) {
                let rec = SpmvRecord::new(Format::Csr, k.to_string(), csr_fmt_bytes);
                let rec = match (cfg, &prepared) {
                    (Err(r), _) => skipped_config(rec, t, g, r),
                    (Ok(cfg), Err(e)) => {
                        let mut r0 = rec.with_config(cfg, g);
                        r0.status = RecordStatus::Failed(e.clone());
                        r0
                    }
                    (Ok(cfg), Ok(())) => cx.measure(rec.with_config(cfg, g), &mut |x, y| {
                        spmv_csr(dev, &da, k, cfg, x, y)
                    })?,
                };
                records.push(rec);
            }
        }
        if opts.cusparse {
            cusparse_ver = cusparse_version()
                .ok()
                .map(|(a, b, c)| format!("{a}.{b}.{c}"));
            for alg in CusparseAlg::ALL {
                let rec = SpmvRecord::new(Format::Csr, alg.to_string(), csr_fmt_bytes);
                let rec = match CusparseSpmv::new(dev, &da, alg) {
                    Err(e) => rec.with_status(RecordStatus::Skipped(e.to_string())),
                    Ok(mut sp) => cx.measure(rec, &mut |x, y| sp.run(x, y))?,
                };
                records.push(rec);
            }
        }
    }

    // ELL.
    let (conv, up) = convert(
        dev,
        Format::Ell,
        || EllMatrix::from_csr(a, &opts.padding),
        DeviceEll::upload,
        DeviceEll::device_bytes,
    );
    let ell_bytes = |w: usize| format_bytes(FormatShape::Ell { width: w }, n, m, nnz);
    let k = SpmvKernel::Ell;
    format_unavailable(
        &mut records,
        Format::Ell,
        &[k.to_string()],
        &conv,
        ell_bytes(0),
    );
    let mut conv = conv;
    set_device_conversion(&mut conv, dev_ell);
    conversions.push(conv);
    if let Some((h, da)) = up {
        let fb = ell_bytes(h.width());
        drop(h);
        let kmax = max_threads(dev, k)?;
        for (t, g, cfg) in candidate_configs(k, work_items(k, n, nnz), opts, &props, kmax) {
            let rec = SpmvRecord::new(Format::Ell, k.to_string(), fb);
            records.push(match cfg {
                Err(r) => skipped_config(rec, t, g, r),
                Ok(cfg) => cx.measure(rec.with_config(cfg, g), &mut |x, y| {
                    spmv_ell(dev, &da, cfg, x, y)
                })?,
            });
        }
    }

    // DIA.
    let (conv, up) = convert(
        dev,
        Format::Dia,
        || DiaMatrix::from_csr(a, &opts.padding),
        DeviceDia::upload,
        DeviceDia::device_bytes,
    );
    let k = SpmvKernel::Dia;
    let dia_bytes = |d: usize| format_bytes(FormatShape::Dia { ndiag: d }, n, m, nnz);
    format_unavailable(
        &mut records,
        Format::Dia,
        &[k.to_string()],
        &conv,
        dia_bytes(0),
    );
    let mut conv = conv;
    set_device_conversion(&mut conv, dev_dia);
    conversions.push(conv);
    if let Some((h, da)) = up {
        let fb = dia_bytes(h.ndiag());
        drop(h);
        let kmax = max_threads(dev, k)?;
        for (t, g, cfg) in candidate_configs(k, work_items(k, n, nnz), opts, &props, kmax) {
            let rec = SpmvRecord::new(Format::Dia, k.to_string(), fb);
            records.push(match cfg {
                Err(r) => skipped_config(rec, t, g, r),
                Ok(cfg) => cx.measure(rec.with_config(cfg, g), &mut |x, y| {
                    spmv_dia(dev, &da, cfg, x, y)
                })?,
            });
        }
    }

    // COO.
    let coo_kernels = [SpmvKernel::CooAtomic, SpmvKernel::CooSegment];
    let coo_bytes = format_bytes(FormatShape::Coo, n, m, nnz);
    let (conv, up) = convert(
        dev,
        Format::Coo,
        || Ok(CooMatrix::from_csr(a)),
        DeviceCoo::upload,
        DeviceCoo::device_bytes,
    );
    let names: Vec<String> = coo_kernels.iter().map(|k| k.to_string()).collect();
    format_unavailable(&mut records, Format::Coo, &names, &conv, coo_bytes);
    conversions.push(conv);
    if let Some((h, da)) = up {
        drop(h);
        for k in coo_kernels {
            let kmax = max_threads(dev, k)?;
            for (t, g, cfg) in candidate_configs(k, work_items(k, n, nnz), opts, &props, kmax) {
                let rec = SpmvRecord::new(Format::Coo, k.to_string(), coo_bytes);
                records.push(match cfg {
                    Err(r) => skipped_config(rec, t, g, r),
                    Ok(cfg) => cx.measure(rec.with_config(cfg, g), &mut |x, y| {
                        spmv_coo(dev, &da, k, cfg, x, y)
                    })?,
                });
            }
        }
    }

    // HYB: the ELL part and then the COO part, both with the same thread count and policy.
    let (conv, up) = convert(
        dev,
        Format::Hyb,
        || HybMatrix::from_csr(a, None, &opts.padding),
        DeviceHyb::upload,
        DeviceHyb::device_bytes,
    );
    let hyb_label = |k: SpmvKernel| format!("{}+{k}", SpmvKernel::Ell);
    let names: Vec<String> = coo_kernels.iter().map(|&k| hyb_label(k)).collect();
    let unknown = format_bytes(
        FormatShape::Hyb {
            width: 0,
            coo_nnz: 0,
            coo_rows: 0,
        },
        n,
        m,
        nnz,
    );
    format_unavailable(&mut records, Format::Hyb, &names, &conv, unknown);
    let mut conv = conv;
    set_device_conversion(&mut conv, dev_hyb);
    conversions.push(conv);
    if let Some((h, da)) = up {
        let coo_nnz = h.coo().nnz();
        let mut coo_rows = h.coo().rows().to_vec();
        coo_rows.dedup();
        let shape = FormatShape::Hyb {
            width: h.ell().width(),
            coo_nnz,
            coo_rows: coo_rows.len(),
        };
        drop(coo_rows);
        drop(h);
        let fb = format_bytes(shape, n, m, nnz);
        let ell_max = max_threads(dev, SpmvKernel::Ell)?;
        // Without a COO part both COO kernels launch nothing: measure one.
        let kinds: &[SpmvKernel] = if coo_nnz == 0 {
            &coo_kernels[..1]
        } else {
            &coo_kernels
        };
        for &ck in kinds {
            let kmax = ell_max.min(max_threads(dev, ck)?);
            let work = work_items(SpmvKernel::Ell, n, nnz);
            for (t, g, cfg) in candidate_configs(ck, work, opts, &props, kmax) {
                let rec = SpmvRecord::new(Format::Hyb, hyb_label(ck), fb);
                records.push(match cfg {
                    Err(r) => skipped_config(rec, t, g, r),
                    Ok(ell_cfg) => {
                        let coo_cfg = g.config(work_items(ck, n, coo_nnz), t, &props);
                        let mut rec = rec.with_config(ell_cfg, g);
                        rec.coo_blocks = Some(coo_cfg.blocks);
                        cx.measure(rec, &mut |x, y| {
                            spmv_hyb(dev, &da, ell_cfg, ck, coo_cfg, x, y)
                        })?
                    }
                });
            }
        }
    }

    let fastest = |own_only: bool| {
        records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.status.is_ok() && !(own_only && r.is_cusparse()))
            .filter_map(|(i, r)| r.median_ms.map(|t| (i, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i)
    };
    let (best, best_own) = (fastest(false), fastest(true));

    Ok(SpmvBench {
        device: props,
        matrix: features(a),
        bytes_formula: BYTES_FORMULA.to_string(),
        bytes_csr_min: csr_bytes,
        triad,
        cusparse_version: cusparse_ver,
        compile_ms,
        options: opts.clone(),
        conversions,
        records,
        best,
        best_own,
    })
}

fn skipped_config(rec: SpmvRecord, t: u32, g: GridPolicy, reason: String) -> SpmvRecord {
    let mut r = rec.with_status(RecordStatus::Skipped(reason));
    r.threads = Some(t);
    r.grid = Some(g);
    r
}

/// Queues one triad `a = b + s c` over `n` elements with `cfg`.
fn triad_launch(
    dev: &GpuDevice,
    cfg: LaunchConfig,
    s: f64,
    b: &DeviceVec<f64>,
    c: &DeviceVec<f64>,
    a: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    cfg.check(TRIAD_KERNEL, dev.props())?;
    let n = a.len();
    if b.len() != n || c.len() != n {
        return Err(GpuError::launch(
            TRIAD_KERNEL,
            format!("a, b, c have {n}, {}, {} elements", b.len(), c.len()),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let k = dev.kernel(&ModuleSpec::plain(KernelSource::Vector), TRIAD_KERNEL)?;
    let n64 = n as u64;
    let mut l = dev.stream().launch_builder(&k.func);
    l.arg(&n64).arg(&s).arg(&b.buf).arg(&c.buf).arg(&mut a.buf);
    // SAFETY: matches `triad(u64 n, double s, const double *b, const double *c, double *a)` in
    // vector.cu; the three buffers hold n elements (checked) and a is distinct from b and c
    // (a &mut borrow); the kernel is grid-stride, so any block count covers n.
    launched(
        unsafe { l.launch(crate::launch::cudarc_config(cfg)) },
        &TRIAD_KERNEL,
        cfg,
    )
}

/// Measures the triad `a[i] = b[i] + s c[i]` over three buffers of `n` f64 with several launch
/// configurations (128 to 1024 threads, one wave and one thread per element) and returns the
/// fastest; the result is checked. Bytes moved: `24 n`.
pub fn measure_triad(dev: &GpuDevice, n: usize) -> Result<TriadResult, GpuError> {
    if n == 0 {
        return Err(GpuError::InvalidInput {
            what: "triad".into(),
            reason: "n = 0".into(),
        });
    }
    let need = 3 * 8 * n;
    let (free, _) = dev.mem_info()?;
    if free < need {
        return Err(GpuError::InvalidInput {
            what: "triad".into(),
            reason: format!("needs {need} bytes of device memory; {free} are free"),
        });
    }
    let b = dev.upload(&vec![1.0f64; n])?;
    let c = dev.upload(&vec![2.0f64; n])?;
    let mut a = dev.alloc_zeros::<f64>(n)?;
    let s = 0.5;
    let props = dev.props().clone();
    let bytes = 24 * n as u64;
    let mut best: Option<TriadResult> = None;
    for t in [128u32, 256, 512, 1024] {
        for g in [GridPolicy::Wave, GridPolicy::Cover] {
            let cfg = g.config(n as u64, t, &props);
            let stats = time_kernel(dev, || triad_launch(dev, cfg, s, &b, &c, &mut a), 20, 20.0)?;
            let gbps = bytes as f64 / (stats.median_ms * 1e-3) / 1e9;
            if best.as_ref().is_none_or(|r| gbps > r.gbps) {
                best = Some(TriadResult {
                    n,
                    bytes,
                    threads: cfg.threads,
                    blocks: cfg.blocks,
                    stats,
                    gbps,
                });
            }
        }
    }
    let got = dev.download(&a)?;
    if let Some((i, v)) = got.iter().enumerate().find(|(_, &v)| v != 2.0) {
        return Err(GpuError::InvalidInput {
            what: "triad result".into(),
            reason: format!("a[{i}] = {v}, expected 1 + 0.5 * 2 = 2"),
        });
    }
    best.ok_or_else(|| GpuError::InvalidInput {
        what: "triad".into(),
        reason: "no configuration was timed".into(),
    })
}

/// The device's triad bandwidth in GB/s (bytes read + written over the median time) over three
/// buffers of [`TRIAD_ELEMS`] f64 (256 MiB each), best of several launch configurations.
pub fn measure_triad_gbps(dev: &GpuDevice) -> Result<f64, GpuError> {
    measure_triad(dev, TRIAD_ELEMS).map(|r| r.gbps)
}

fn opt_f(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}

fn opt_u(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

impl SpmvBench {
    /// The fastest correct record.
    pub fn fastest(&self) -> Option<&SpmvRecord> {
        self.best.and_then(|i| self.records.get(i))
    }

    /// The fastest correct record of each format that has one, in format order.
    pub fn fastest_per_format(&self) -> Vec<&SpmvRecord> {
        let mut out: Vec<&SpmvRecord> = Vec::new();
        for r in self.records.iter().filter(|r| r.status.is_ok()) {
            let Some(t) = r.median_ms else { continue };
            match out.iter_mut().find(|o| o.format == r.format) {
                None => out.push(r),
                Some(o) => {
                    if o.median_ms.is_some_and(|b| t < b) {
                        *o = r;
                    }
                }
            }
        }
        out.sort_by_key(|r| r.format);
        out
    }

    /// The results as a text table: one line per candidate (format, kernel, threads, blocks,
    /// grid, median and min ms, GB/s, % of triad), the fastest marked, then the conversion
    /// times and the fastest candidate of each format.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let f = &self.matrix;
        let _ = writeln!(
            s,
            "SpMV on {} (sm_{}), matrix {} x {}, nnz {}, rows {:.2} +- {:.2} (max {})",
            self.device.name,
            self.device.arch(),
            f.n,
            f.ncols,
            f.nnz,
            f.row_len_mean,
            f.row_len_std,
            f.row_len_max
        );
        let _ = writeln!(s, "{}", self.bytes_formula);
        let _ = writeln!(
            s,
            "bytes per SpMV for GB/s: {} ({:.1} MB)",
            self.bytes_csr_min,
            self.bytes_csr_min as f64 / 1e6
        );
        let triad = self.triad.as_ref().map(|t| t.gbps);
        match &self.triad {
            Some(t) => {
                let _ = writeln!(
                    s,
                    "triad a = b + s*c: {:.1} GB/s (3 x {} MiB, {} threads x {} blocks, median {:.4} ms)",
                    t.gbps,
                    (t.n * 8) >> 20,
                    t.threads,
                    t.blocks,
                    t.stats.median_ms
                );
            }
            None => {
                let _ = writeln!(s, "triad not measured");
            }
        }
        if let Some(v) = &self.cusparse_version {
            let _ = writeln!(s, "cuSPARSE {v}");
        }
        let _ = writeln!(
            s,
            "timing: median of >= {} repetitions and >= {} ms per candidate, CUDA events; x seed {}",
            self.options.min_reps, self.options.min_ms, self.options.seed
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<6} {:<28} {:>7} {:>8} {:<5} {:>10} {:>10} {:>9} {:>7}",
            "format",
            "kernel",
            "threads",
            "blocks",
            "grid",
            "median ms",
            "min ms",
            "GB/s",
            "%triad"
        );
        for (i, r) in self.records.iter().enumerate() {
            let grid = r.grid.map_or_else(|| "-".to_string(), |g| g.to_string());
            let head = format!(
                "{:<6} {:<28} {:>7} {:>8} {:<5}",
                r.format.to_string(),
                r.kernel,
                opt_u(r.threads),
                opt_u(r.blocks),
                grid
            );
            match &r.status {
                RecordStatus::Ok => {
                    let pct = match (r.gbps, triad) {
                        (Some(g), Some(t)) if t > 0.0 => Some(100.0 * g / t),
                        _ => None,
                    };
                    let mark = if Some(i) == self.best {
                        "  <- fastest"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        s,
                        "{head} {:>10} {:>10} {:>9} {:>7}{mark}",
                        opt_f(r.median_ms, 4),
                        opt_f(r.min_ms, 4),
                        opt_f(r.gbps, 1),
                        opt_f(pct, 1)
                    );
                }
                RecordStatus::Skipped(why) => {
                    let _ = writeln!(s, "{head} skipped: {why}");
                }
                RecordStatus::Failed(why) => {
                    let _ = writeln!(s, "{head} FAILED: {why}");
                }
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<6} {:>12} {:>14} {:>10} {:>10}  status",
            "format", "convert ms", "GPU convert ms", "upload ms", "device MB"
        );
        for c in &self.conversions {
            let mut st = match &c.status {
                RecordStatus::Ok => "ok".to_string(),
                RecordStatus::Skipped(w) => format!("skipped: {w}"),
                RecordStatus::Failed(w) => format!("FAILED: {w}"),
            };
            if let Some(e) = &c.device_error {
                let _ = write!(st, "; GPU conversion FAILED: {e}");
            }
            let _ = writeln!(
                s,
                "{:<6} {:>12.1} {:>14} {:>10.1} {:>10.1}  {st}",
                c.format.to_string(),
                c.host_ms,
                opt_f(c.device_ms, 3),
                c.upload_ms,
                c.device_bytes as f64 / 1e6
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "fastest per format:");
        for r in self.fastest_per_format() {
            let _ = writeln!(
                s,
                "  {:<6} {:<28} {:>7} threads {:>8} blocks {:>10} ms {:>9} GB/s",
                r.format.to_string(),
                r.kernel,
                opt_u(r.threads),
                opt_u(r.blocks),
                opt_f(r.median_ms, 4),
                opt_f(r.gbps, 1)
            );
        }
        if let Some(r) = self.best_own.and_then(|i| self.records.get(i)) {
            if Some(r) != self.fastest() {
                let _ = writeln!(
                    s,
                    "fastest of autopcg's kernels: {} {} ({} threads, {} blocks): {} ms, {} GB/s",
                    r.format,
                    r.kernel,
                    opt_u(r.threads),
                    opt_u(r.blocks),
                    opt_f(r.median_ms, 4),
                    opt_f(r.gbps, 1)
                );
            }
        }
        match self.fastest() {
            Some(r) => {
                let _ = writeln!(
                    s,
                    "fastest: {} {} ({} threads, {} blocks): {} ms, {} GB/s",
                    r.format,
                    r.kernel,
                    opt_u(r.threads),
                    opt_u(r.blocks),
                    opt_f(r.median_ms, 4),
                    opt_f(r.gbps, 1)
                );
            }
            None => {
                let _ = writeln!(s, "fastest: none (no candidate ran correctly)");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props() -> DeviceProps {
        crate::testing::hopper_like_props()
    }

    #[test]
    fn byte_counts() {
        // Square: 12 nnz + 20 n.
        assert_eq!(csr_min_bytes(10, 10, 30), 12 * 30 + 20 * 10);
        assert_eq!(
            format_bytes(FormatShape::Csr, 10, 10, 30),
            csr_min_bytes(10, 10, 30)
        );
        // ELL: 12 K n + 16 n.
        assert_eq!(
            format_bytes(FormatShape::Ell { width: 4 }, 10, 10, 30),
            12 * 4 * 10 + 16 * 10
        );
        assert_eq!(
            format_bytes(FormatShape::Dia { ndiag: 3 }, 10, 10, 28),
            8 * 3 * 10 + 4 * 3 + 16 * 10
        );
        assert_eq!(
            format_bytes(FormatShape::Coo, 10, 10, 30),
            16 * 30 + 16 * 10 + 16 * 10
        );
        assert_eq!(
            format_bytes(
                FormatShape::Hyb {
                    width: 2,
                    coo_nnz: 5,
                    coo_rows: 3
                },
                10,
                10,
                25
            ),
            12 * 2 * 10 + 16 * 5 + 16 * 3 + 16 * 10
        );
        // Rectangular: x per column, y per row.
        assert_eq!(csr_min_bytes(4, 6, 0), 12 * 4 + 8 * 6);
    }

    #[test]
    fn comparison_rejects_nan_and_large_errors() {
        let want = [1.0, 2.0, 0.0];
        let scale = [1.0, 2.0, 0.0];
        assert_eq!(compare_rows(&want, &want, &scale, 1e-12), Ok(0.0));
        let e = compare_rows(&[1.0, f64::NAN, 0.0], &want, &scale, 1e-12).unwrap_err();
        assert!(e.contains("row 1"), "{e}");
        let e = compare_rows(&[1.0, 2.0 + 1e-9, 0.0], &want, &scale, 1e-12).unwrap_err();
        assert!(e.contains("row 1"), "{e}");
        // An empty row must be exactly zero.
        assert!(compare_rows(&[1.0, 2.0, 1e-300], &want, &scale, 1e-12).is_err());
        let ok = compare_rows(&[1.0 + 1e-15, 2.0, 0.0], &want, &scale, 1e-12).unwrap();
        assert!(ok > 0.0 && ok < 1e-14);
        assert!(compare_rows(&[1.0], &want, &scale, 1e-12).is_err());
    }

    #[test]
    fn vector_is_seeded_and_in_range() {
        let a = bench_vector(1000, 7);
        assert_eq!(a, bench_vector(1000, 7));
        assert_ne!(a, bench_vector(1000, 8));
        assert!(a.iter().all(|&v| (0.5..1.5).contains(&v)));
    }

    #[test]
    fn configs_cover_threads_and_policies() {
        let p = props();
        let opts = SpmvBenchOptions::default();
        let c = candidate_configs(SpmvKernel::CsrScalar, 1 << 22, &opts, &p, 1024);
        // Large work: both policies differ for every thread count.
        assert_eq!(c.len(), 10);
        for (t, g, cfg) in &c {
            let cfg = cfg.as_ref().unwrap();
            assert_eq!(cfg.threads, *t);
            assert_eq!(*cfg, g.config(1 << 22, *t, &p));
        }
        // Small work: the policies coincide and are not repeated.
        let c = candidate_configs(SpmvKernel::CsrScalar, 100, &opts, &p, 1024);
        assert_eq!(c.len(), 5);
        // A kernel compiled for at most 512 threads skips 1024.
        let c = candidate_configs(SpmvKernel::Ell, 1 << 22, &opts, &p, 512);
        let skipped: Vec<u32> = c
            .iter()
            .filter(|(_, _, r)| r.is_err())
            .map(|(t, _, _)| *t)
            .collect();
        assert_eq!(skipped, [1024]);
        // Whole warps for warp-cooperative kernels.
        let odd = SpmvBenchOptions {
            threads: vec![48, 64],
            ..SpmvBenchOptions::quick()
        };
        let c = candidate_configs(SpmvKernel::CsrVector(4), 1000, &odd, &p, 1024);
        assert!(c[0].2.as_ref().unwrap_err().contains("multiple of 32"));
        assert!(c[1].2.is_ok());
        let c = candidate_configs(SpmvKernel::CsrScalar, 1000, &odd, &p, 1024);
        assert!(c.iter().all(|(_, _, r)| r.is_ok()));
    }

    #[test]
    fn options_are_checked() {
        assert!(SpmvBenchOptions::default().validate().is_ok());
        assert!(SpmvBenchOptions::quick().validate().is_ok());
        let bad = [
            SpmvBenchOptions {
                threads: vec![],
                ..Default::default()
            },
            SpmvBenchOptions {
                threads: vec![2048],
                ..Default::default()
            },
            SpmvBenchOptions {
                grids: vec![],
                ..Default::default()
            },
            SpmvBenchOptions {
                min_reps: 0,
                ..Default::default()
            },
            SpmvBenchOptions {
                min_ms: f64::NAN,
                ..Default::default()
            },
            SpmvBenchOptions {
                tolerance: 0.0,
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(o.validate().is_err(), "{o:?}");
        }
    }

    #[test]
    fn triad_kernel_is_in_vector_cu() {
        let text = crate::sources::source_text(KernelSource::Vector);
        assert!(text.contains("__global__ void triad(u64 n, double s,"));
    }

    fn record(format: Format, kernel: &str, ms: Option<f64>, status: RecordStatus) -> SpmvRecord {
        let mut r = SpmvRecord::new(format, kernel, 1000);
        r.status = status;
        r.median_ms = ms;
        r.min_ms = ms;
        r.max_ms = ms;
        r.gbps = ms.map(|t| 1000.0 / (t * 1e-3) / 1e9);
        if ms.is_some() {
            r.threads = Some(256);
            r.blocks = Some(4);
            r.grid = Some(GridPolicy::Wave);
        }
        r
    }

    #[test]
    fn table_marks_the_fastest_and_shows_skips() {
        let a = CsrMatrix::from_triplets(2, 2, &[0, 1], &[0, 1], &[1.0, 2.0]).unwrap();
        let bench = SpmvBench {
            device: props(),
            matrix: features(&a),
            bytes_formula: BYTES_FORMULA.into(),
            bytes_csr_min: 1000,
            triad: Some(TriadResult {
                n: TRIAD_ELEMS,
                bytes: 24 * TRIAD_ELEMS as u64,
                threads: 256,
                blocks: 1000,
                stats: TimingStats {
                    median_ms: 1.0,
                    min_ms: 1.0,
                    max_ms: 1.0,
                    reps: 20,
                },
                gbps: 0.002,
            }),
            cusparse_version: Some("12.0.0".into()),
            compile_ms: 1.0,
            options: SpmvBenchOptions::default(),
            conversions: vec![
                ConversionRecord {
                    format: Format::Csr,
                    status: RecordStatus::Ok,
                    host_ms: 0.0,
                    upload_ms: 0.5,
                    device_bytes: 40,
                    device_ms: None,
                    device_error: None,
                },
                ConversionRecord {
                    format: Format::Ell,
                    status: RecordStatus::Ok,
                    host_ms: 2.0,
                    upload_ms: 0.5,
                    device_bytes: 48,
                    device_ms: Some(0.125),
                    device_error: None,
                },
                ConversionRecord {
                    format: Format::Dia,
                    status: RecordStatus::Ok,
                    host_ms: 2.0,
                    upload_ms: 0.5,
                    device_bytes: 48,
                    device_ms: None,
                    device_error: Some("out of memory".into()),
                },
            ],
            records: vec![
                record(Format::Csr, "spmv_csr_scalar", Some(2.0), RecordStatus::Ok),
                record(
                    Format::Csr,
                    "spmv_csr_vector_4",
                    Some(1.0),
                    RecordStatus::Ok,
                ),
                record(
                    Format::Ell,
                    "spmv_ell",
                    None,
                    RecordStatus::Skipped("ELL refused".into()),
                ),
                record(
                    Format::Coo,
                    "spmv_coo_atomic",
                    None,
                    RecordStatus::Failed("wrong result".into()),
                ),
                record(Format::Coo, "spmv_coo_segment", Some(3.0), RecordStatus::Ok),
            ],
            best: Some(1),
            best_own: Some(1),
        };
        let t = bench.table();
        let fastest: Vec<&str> = t.lines().filter(|l| l.contains("<- fastest")).collect();
        assert_eq!(fastest.len(), 1, "{t}");
        assert!(fastest[0].contains("spmv_csr_vector_4"), "{t}");
        // 1000 bytes in 1 ms = 0.001 GB/s, half the triad's 0.002.
        assert!(fastest[0].trim_end().ends_with("50.0  <- fastest"), "{t}");
        assert!(t.contains("skipped: ELL refused"), "{t}");
        assert!(t.contains("FAILED: wrong result"), "{t}");
        assert!(t.contains("12*nnz + 20*n"), "{t}");
        assert!(t.contains("GPU convert ms"), "{t}");
        let ell_line = t
            .lines()
            .find(|l| l.starts_with("ell ") && l.contains("ok"));
        assert!(ell_line.is_some_and(|l| l.contains(" 0.125 ")), "{t}");
        assert!(t.contains("GPU conversion FAILED: out of memory"), "{t}");
        let per = bench.fastest_per_format();
        assert_eq!(per.len(), 2);
        assert_eq!(per[0].kernel, "spmv_csr_vector_4");
        assert_eq!(per[1].kernel, "spmv_coo_segment");
        assert_eq!(bench.fastest().unwrap().kernel, "spmv_csr_vector_4");
        let json = serde_json::to_value(&bench).unwrap();
        assert_eq!(json["records"][2]["status"]["kind"], "skipped");
        assert_eq!(json["records"][2]["status"]["reason"], "ELL refused");
        assert_eq!(json["records"][0]["status"]["kind"], "ok");
        assert_eq!(json["best"], 1);
        assert_eq!(json["conversions"][1]["device_ms"], 0.125);
        assert!(json["conversions"][0].get("device_error").is_none());
        // Records written before the device conversion existed still read.
        let mut old = json["conversions"][0].clone();
        let o = old.as_object_mut().unwrap();
        o.remove("device_ms");
        let back: ConversionRecord = serde_json::from_value(old).unwrap();
        assert_eq!(back.device_ms, None);
    }
}
