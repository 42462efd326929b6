//! SSOR-AI's first-order factors built on the device from `A`'s CSR arrays (entry points in
//! `precond.cu`): `K = I - omega L D^-1` and the factored form's `K^T diag(s)`,
//! `s_j = omega (2 - omega) / a_jj`, equal bit for bit to the host build of
//! `autopcg-solver` from the same matrix (the same expressions, rounded the same way), so
//! that neither factor is formed on the host nor copied over the bus.
//!
//! Three launches and two small copies back: the diagonal positions and K's row lengths (a
//! thread per row, a binary search each), the exclusive scan of the lengths into K's row
//! pointers (whose last entry, nnz(K), is read back to size the arrays), then both factors'
//! rows (a thread per row, or a warp per row where rows average 16 entries or more; an entry of
//! `K^T` finds its mirror in `A`'s row by a binary search).
//! `K^T`'s rows are read off `A`'s upper triangle, which needs a symmetric pattern: a pattern
//! that is not symmetric is reported as [`SsorK1Build::AsymmetricPattern`] for the caller to
//! build on the host, as the host build transposes such a `K`.
use std::fmt;

use autopcg_sparse::features::{K1Checks, K1Totals, StructureTotals};

use cudarc::driver::PushKernelArg;

use super::convert::{exclusive_scan, ConvertKernel, ScanWorkspace};
use super::refresh::{
    gather_values, gram_values, inv_diag, DeviceDiagonal, DeviceGather, RefreshKernel,
};
use super::{Launch, PushGroups};
use crate::sources::{KernelSource, ModuleSpec};
use crate::{DeviceCsr, DeviceVec, GpuDevice, GpuError, LaunchConfig, DEFAULT_THREADS};

/// A kernel of the device build; `Display` is its entry point in `precond.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SsorBuildKernel {
    /// Diagonal positions and K's row lengths.
    Lengths,
    /// K's and `K^T diag(s)`'s rows.
    Build,
    /// [`SsorBuildKernel::Build`] a warp per row (rows of [`TOTALS_WARP_MIN_AVG`] entries or
    /// more on average).
    BuildWarp,
    /// The position in K of each entry of `K^T diag(s)`'s mirror, for value refreshes.
    KtSources,
    /// [`SsorBuildKernel::KtSources`] a warp per row (the same rows).
    KtSourcesWarp,
    /// The structure of the explicit product `K^T diag(s) K`, counted ([`ssor_k1_gram_count`]):
    /// its short rows and the warps' slots.
    GramCount,
    /// The rows of the explicit product a block forms (longer rows of `K^T` than a thread
    /// merges), listed for the launches that take one such row per block.
    GramList,
    /// The count of the explicit product's listed long rows.
    GramCountLong,
    /// The explicit product's listed long rows' lengths ([`ssor_k1_explicit`]).
    GramLengthsLong,
    /// The explicit product's listed long rows' columns ([`ssor_k1_explicit`]).
    GramFillLong,
    /// The checks of every upload of `A` ([`row_checks`]; not the build's own): the first row
    /// whose diagonal entry is missing or not positive, and `||A||_inf`.
    RowChecks,
    /// The structure of `A`, `K` and `K^T diag(s)`, counted ([`ssor_k1_totals`]).
    Totals,
    /// The structure of `A` alone, counted ([`csr_totals`]).
    CsrTotals,
    /// [`SsorBuildKernel::Totals`] a warp per row (rows of [`TOTALS_WARP_MIN_AVG`] entries
    /// or more on average).
    TotalsWarp,
    /// [`SsorBuildKernel::CsrTotals`] a warp per row (the same rows).
    CsrTotalsWarp,
    /// The explicit product's row lengths ([`ssor_k1_explicit`]).
    GramLengths,
    /// The explicit product's columns ([`ssor_k1_explicit`]).
    GramFill,
    /// What the selection reads of `A` before the factors exist ([`ssor_k1_checks`]).
    Checks,
    /// [`SsorBuildKernel::Checks`] a warp per row (rows of [`TOTALS_WARP_MIN_AVG`] entries or
    /// more on average).
    ChecksWarp,
    /// The position in `K` of each entry of `K^T`'s mirror, searched ([`ssor_k2_factors`]).
    KtSourcesSearch,
    /// [`SsorBuildKernel::KtSourcesSearch`] a warp per row (rows of [`TOTALS_WARP_MIN_AVG`]
    /// entries or more on average).
    KtSourcesSearchWarp,
}

impl SsorBuildKernel {
    /// Every kernel of the build.
    pub const ALL: [SsorBuildKernel; 21] = [
        SsorBuildKernel::Lengths,
        SsorBuildKernel::Build,
        SsorBuildKernel::BuildWarp,
        SsorBuildKernel::KtSources,
        SsorBuildKernel::KtSourcesWarp,
        SsorBuildKernel::GramCount,
        SsorBuildKernel::GramList,
        SsorBuildKernel::GramCountLong,
        SsorBuildKernel::GramLengthsLong,
        SsorBuildKernel::GramFillLong,
        SsorBuildKernel::RowChecks,
        SsorBuildKernel::Totals,
        SsorBuildKernel::CsrTotals,
        SsorBuildKernel::TotalsWarp,
        SsorBuildKernel::CsrTotalsWarp,
        SsorBuildKernel::GramLengths,
        SsorBuildKernel::GramFill,
        SsorBuildKernel::Checks,
        SsorBuildKernel::ChecksWarp,
        SsorBuildKernel::KtSourcesSearch,
        SsorBuildKernel::KtSourcesSearchWarp,
    ];
}

impl fmt::Display for SsorBuildKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SsorBuildKernel::Lengths => "ssor_k1_lengths",
            SsorBuildKernel::Build => "ssor_k1_build",
            SsorBuildKernel::BuildWarp => "ssor_k1_build_warp",
            SsorBuildKernel::KtSources => "ssor_k1_kt_sources",
            SsorBuildKernel::KtSourcesWarp => "ssor_k1_kt_sources_warp",
            SsorBuildKernel::GramCount => "ssor_k1_gram_count",
            SsorBuildKernel::GramList => "ssor_k1_gram_list",
            SsorBuildKernel::GramCountLong => "ssor_k1_gram_count_long",
            SsorBuildKernel::GramLengthsLong => "ssor_k1_gram_lengths_long",
            SsorBuildKernel::GramFillLong => "ssor_k1_gram_fill_long",
            SsorBuildKernel::RowChecks => "csr_row_checks",
            SsorBuildKernel::Totals => "ssor_k1_totals",
            SsorBuildKernel::CsrTotals => "csr_totals",
            SsorBuildKernel::TotalsWarp => "ssor_k1_totals_warp",
            SsorBuildKernel::CsrTotalsWarp => "csr_totals_warp",
            SsorBuildKernel::GramLengths => "ssor_k1_gram_lengths",
            SsorBuildKernel::GramFill => "ssor_k1_gram_fill",
            SsorBuildKernel::Checks => "ssor_k1_checks",
            SsorBuildKernel::ChecksWarp => "ssor_k1_checks_warp",
            SsorBuildKernel::KtSourcesSearch => "ssor_kt_sources_search",
            SsorBuildKernel::KtSourcesSearchWarp => "ssor_kt_sources_search_warp",
        })
    }
}

/// What [`ssor_k1_factors`] made.
#[derive(Debug)]
pub enum SsorK1Build {
    /// `K` and `K^T diag(s)` on the device.
    Built {
        /// `K = I - omega L D^-1` (lower triangular, unit diagonal).
        k: Box<DeviceCsr>,
        /// `K^T diag(s)` (upper triangular, diagonal `s`).
        kt: Box<DeviceCsr>,
    },
    /// `A`'s pattern is not symmetric (an entry without its mirror, `first_row` 0-based, or
    /// more entries below the diagonal than above): `K^T` cannot be read off `A`'s upper
    /// triangle. Nothing was kept on the device.
    AsymmetricPattern {
        /// The first row found with an entry right of the diagonal whose mirror is not
        /// stored (`None` when only the counts differ).
        first_row: Option<usize>,
    },
}

/// Compiles (or finds) and loads every kernel [`ssor_k1_factors`], [`ssor_k1_explicit`] and
/// [`jacobi_inv_diag`] launch (their own, the value kernels and the scan's), so that a caller
/// can time loading apart from the build.
pub fn preload(dev: &GpuDevice) -> Result<(), GpuError> {
    let precond = ModuleSpec::plain(KernelSource::Precond);
    for k in SsorBuildKernel::ALL {
        dev.kernel(&precond, &k.to_string())?;
    }
    for k in [
        RefreshKernel::InvDiag,
        RefreshKernel::SsorK2,
        RefreshKernel::SsorK2Warp,
        RefreshKernel::Gather,
        RefreshKernel::GatherScaled,
        RefreshKernel::Gram,
        RefreshKernel::GramWarp,
    ] {
        dev.kernel(&precond, &k.to_string())?;
    }
    let convert = ModuleSpec::plain(KernelSource::Convert);
    for k in [
        ConvertKernel::ScanTileSums,
        ConvertKernel::ScanTileOffsets,
        ConvertKernel::ScanApply,
    ] {
        dev.kernel(&convert, &k.to_string())?;
    }
    Ok(())
}

/// Loads the module of every upload's checks ([`row_checks`]), which also holds the device
/// build's kernels, its counts and checks (compiling it first where the kernel cache does not
/// hold it): what [`GpuDevice::prepare_for_upload`] does ahead of a first upload.
pub fn preload_checks(dev: &GpuDevice) -> Result<(), GpuError> {
    let precond = ModuleSpec::plain(KernelSource::Precond);
    dev.kernel(&precond, &SsorBuildKernel::RowChecks.to_string())
        .map(|_| ())
}

/// Whether the kernels of the device build, its counts and checks, and of every upload's
/// checks ([`row_checks`]) are loaded on `dev`'s context: true once `dev` has taken an upload
/// (or built or counted anything here) in this process, or was prepared for one
/// ([`GpuDevice::prepare_for_upload`], which a device opened ahead with a size does), so that
/// a count launched now waits neither for a module load nor for the first use of the device's
/// memory pool.
pub fn loaded(dev: &GpuDevice) -> bool {
    dev.module_loaded(&ModuleSpec::plain(KernelSource::Precond))
}

/// The kernels' `gather_max` for an `n`-row matrix on a device of `sm_count` multiprocessors
/// (see [`LongRows::gather_max`]).
fn gather_max_for(n: usize, sm_count: usize) -> u32 {
    let small = GRAM_SMALL_ROUNDS * GRAM_LONG_BLOCKS_PER_SM * sm_count.max(1);
    if n <= small {
        GRAM_SHORT_GATHER
    } else {
        GRAM_NO_GATHER_LIMIT
    }
}

/// The launch of `kernel` ([`SsorBuildKernel::Build`], [`SsorBuildKernel::KtSources`] or
/// [`SsorBuildKernel::Checks`]) over an `n`-row matrix of `nnz` entries (any number of blocks:
/// the kernels stride over the grid): a thread per row, or its warp's variant where rows
/// average [`TOTALS_WARP_MIN_AVG`] entries or more, whose mirror searches a thread would take
/// one after another (on bcsstk13, 42 entries a row, the thread's build took 110 us and its
/// sources 63 us on 8 of the H200's 132 multiprocessors).
fn row_launch(
    dev: &GpuDevice,
    kernel: SsorBuildKernel,
    n: usize,
    nnz: usize,
) -> Result<Launch<'_>, GpuError> {
    thread_or_warp(dev, kernel, n, nnz, per_row)
}

/// The variant of `kernel` that takes a row per warp, where it has one.
fn warp_variant(kernel: SsorBuildKernel) -> Option<SsorBuildKernel> {
    match kernel {
        SsorBuildKernel::Build => Some(SsorBuildKernel::BuildWarp),
        SsorBuildKernel::KtSources => Some(SsorBuildKernel::KtSourcesWarp),
        SsorBuildKernel::Totals => Some(SsorBuildKernel::TotalsWarp),
        SsorBuildKernel::CsrTotals => Some(SsorBuildKernel::CsrTotalsWarp),
        SsorBuildKernel::Checks => Some(SsorBuildKernel::ChecksWarp),
        SsorBuildKernel::KtSourcesSearch => Some(SsorBuildKernel::KtSourcesSearchWarp),
        _ => None,
    }
}

/// A launch over the `n` rows of a matrix of `nnz` entries made by `launch` (given a kernel and
/// its number of threads): `kernel` a thread per row, or its warp's variant a warp per row
/// where the rows are long enough ([`totals_by_warp`]).
fn thread_or_warp<'d>(
    dev: &'d GpuDevice,
    kernel: SsorBuildKernel,
    n: usize,
    nnz: usize,
    launch: fn(&'d GpuDevice, SsorBuildKernel, usize) -> Result<Launch<'d>, GpuError>,
) -> Result<Launch<'d>, GpuError> {
    match warp_variant(kernel) {
        Some(warp) if totals_by_warp(n, nnz) => launch(dev, warp, n.saturating_mul(32)),
        _ => launch(dev, kernel, n),
    }
}

/// A launch of `kernel` with a thread per row (grid-stride, so any block count is safe).
fn per_row(dev: &GpuDevice, kernel: SsorBuildKernel, n: usize) -> Result<Launch<'_>, GpuError> {
    let blocks = n.div_ceil(DEFAULT_THREADS as usize).clamp(1, 1 << 20) as u32;
    let cfg = LaunchConfig::new(DEFAULT_THREADS, blocks);
    cfg.check(kernel, dev.props())?;
    Launch::plain(dev, KernelSource::Precond, &kernel, cfg)
}

/// Queues `ssor_k1_lengths` on `a` (square, `n >= 1` rows, sizes checked by the caller):
/// each row's diagonal position, K's row lengths, and the flags `[first row without a
/// diagonal entry, first row whose mirror search failed, longest row of K^T]`, the first two
/// `n` while none is found.
#[allow(clippy::type_complexity)]
fn lengths(
    dev: &GpuDevice,
    a: &DeviceCsr,
) -> Result<(DeviceVec<u32>, DeviceVec<u32>, DeviceVec<u32>), GpuError> {
    lengths_of(dev, a.nrows(), &a.indptr, &a.indices)
}

/// [`lengths`] of the `n`-row pattern `indptr`, `indices` (a validated CSR pattern).
#[allow(clippy::type_complexity)]
fn lengths_of(
    dev: &GpuDevice,
    n: usize,
    indptr: &DeviceVec<u32>,
    indices: &DeviceVec<u32>,
) -> Result<(DeviceVec<u32>, DeviceVec<u32>, DeviceVec<u32>), GpuError> {
    let n32 = n as u32;
    // SAFETY: ssor_k1_lengths writes diag and len for every row.
    let mut diag = unsafe { dev.alloc_uninit::<u32>(n)? };
    let mut len = unsafe { dev.alloc_uninit::<u32>(n)? };
    let mut bad = dev.upload(&[n32, n32, 0])?;
    let l = per_row(dev, SsorBuildKernel::Lengths, n)?;
    // SAFETY: matches `ssor_k1_lengths(u32 n, const u32 *a_ptr, const u32 *a_idx, u32 *diag,
    // u32 *len, u32 *bad)`; indptr, indices are a validated CSR pattern of n rows, diag and
    // len hold n elements, bad 3; every read stays inside a row of it. per_row launches
    // DEFAULT_THREADS a block, a multiple of 32 as the kernel's warp maximum needs.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&indptr.buf)
                .arg(&indices.buf)
                .arg(&mut diag.buf)
                .arg(&mut len.buf)
                .arg(&mut bad.buf);
        })
    }?;
    Ok((diag, len, bad))
}

/// First-order SSOR-AI's `K` and `K^T diag(s)` built on the device from `a` (a square CSR
/// matrix as `CsrMatrix` uploads it: columns ascending within each row, no duplicates) with
/// relaxation `omega` in (0, 2): the factors `autopcg_solver::Preconditioner::build` makes on
/// the host for the factored form, value for value. Every diagonal entry must be stored (a row
/// without one is an error naming it, 1-based); whether the diagonal values are positive is the
/// caller's check, as for the host build. Waits for two small copies back (the number of
/// entries of K, and whether the pattern was symmetric).
pub fn ssor_k1_factors(
    dev: &GpuDevice,
    a: &DeviceCsr,
    omega: f64,
) -> Result<SsorK1Build, GpuError> {
    factors_and_longest(dev, a, omega).map(|(b, _, _)| b)
}

/// The diagonal positions and flags of [`lengths`] after a build that found every diagonal
/// entry and every mirror (`[n, n, longest row of K^T]`), for a value refresh's map of the
/// same matrix ([`kt_sources_of`]).
type BuildLengths = Option<(DeviceVec<u32>, DeviceVec<u32>)>;

/// The checks of a device build of SSOR-AI's factors (`what` names it in the error): `a`
/// square, `omega` in (0, 2), and `nnz(a) + n` within the builds' 32-bit positions (row i of
/// the first-order K^T starts at a_ptr[i] + i - k_ptr[i]).
fn check_factors_input(a: &DeviceCsr, omega: f64, what: &str) -> Result<(), GpuError> {
    let (n, m) = a.shape();
    let invalid = |reason: String| GpuError::InvalidInput {
        what: what.into(),
        reason,
    };
    if n != m {
        return Err(invalid(format!("a {n} x {m} matrix is not square")));
    }
    if !(omega.is_finite() && omega > 0.0 && omega < 2.0) {
        return Err(invalid(format!("omega {omega} is not in (0, 2)")));
    }
    if a.nnz() as u64 + n as u64 >= u64::from(u32::MAX) {
        return Err(invalid(format!(
            "{} entries and {n} rows exceed the 32-bit indices of the build",
            a.nnz()
        )));
    }
    Ok(())
}

/// A matrix of no rows on the device (the factors of an empty matrix).
fn empty_csr(dev: &GpuDevice) -> Result<DeviceCsr, GpuError> {
    DeviceCsr::from_device(
        0,
        0,
        dev.alloc_zeros(1)?,
        dev.alloc_zeros(0)?,
        dev.alloc_zeros(0)?,
    )
}

/// [`ssor_k1_factors`], the longest row of `K^T` (read back with the build's first flags; 0
/// for no rows), and for factors built of `n >= 1` rows the diagonal positions and flags
/// ([`BuildLengths`]).
fn factors_and_longest(
    dev: &GpuDevice,
    a: &DeviceCsr,
    omega: f64,
) -> Result<(SsorK1Build, usize, BuildLengths), GpuError> {
    const WHAT: &str = "SSOR-AI factors on the device";
    check_factors_input(a, omega, WHAT)?;
    let n = a.nrows();
    let invalid = |reason: String| GpuError::InvalidInput {
        what: WHAT.into(),
        reason,
    };
    if n == 0 {
        return Ok((
            SsorK1Build::Built {
                k: Box::new(empty_csr(dev)?),
                kt: Box::new(empty_csr(dev)?),
            },
            0,
            None,
        ));
    }
    let n32 = n as u32;
    let scale = omega * (2.0 - omega);
    let (diag, len, mut bad) = lengths(dev, a)?;
    // SAFETY: exclusive_scan writes all n + 1 entries.
    let mut k_ptr = unsafe { dev.alloc_uninit::<u32>(n + 1)? };
    let mut ws = ScanWorkspace::new(dev, ScanWorkspace::tiles(n, DEFAULT_THREADS))?;
    exclusive_scan(dev, DEFAULT_THREADS, &len, &mut k_ptr, &mut ws)?;
    drop((ws, len));
    let flags = dev.download_range(&bad, 0, 3)?;
    let (first_missing, kt_longest) = (flags[0], flags[2] as usize);
    if first_missing < n32 {
        return Err(invalid(format!(
            "row {} stores no diagonal entry",
            first_missing as usize + 1
        )));
    }
    let nnz_k = dev.download_range(&k_ptr, n, n + 1)?[0] as usize;
    let nnz_kt = a.nnz() + n - nnz_k;
    if nnz_k != nnz_kt {
        return Ok((
            SsorK1Build::AsymmetricPattern { first_row: None },
            kt_longest,
            None,
        ));
    }
    // SAFETY: ssor_k1_build writes every entry of every row of both factors (row i of K gets
    // len[i] = k_ptr[i + 1] - k_ptr[i] entries, row i of K^T the rest of A's row i and its
    // diagonal) and every row pointer of K^T.
    let (mut k_idx, mut k_vals) = unsafe {
        (
            dev.alloc_uninit::<u32>(nnz_k)?,
            dev.alloc_uninit::<f64>(nnz_k)?,
        )
    };
    let (mut kt_ptr, mut kt_idx, mut kt_vals) = unsafe {
        (
            dev.alloc_uninit::<u32>(n + 1)?,
            dev.alloc_uninit::<u32>(nnz_kt)?,
            dev.alloc_uninit::<f64>(nnz_kt)?,
        )
    };
    let l = row_launch(dev, SsorBuildKernel::Build, n, a.nnz())?;
    // SAFETY: matches `ssor_k1_build(u32 n, const u32 *a_ptr, const u32 *a_idx,
    // const double *a_vals, const u32 *diag, double omega, double scale, const u32 *k_ptr,
    // u32 *k_idx, double *k_vals, u32 *kt_ptr, u32 *kt_idx, double *kt_vals, u32 *bad)`. a is
    // a validated CSR matrix of n rows with every diagonal position in diag (no row lacks one:
    // checked above); k_ptr is the scan of K's row lengths, so row i of K is written inside
    // [k_ptr[i], k_ptr[i + 1]) of arrays of k_ptr[n] = nnz_k elements; row i of K^T starts at
    // a_ptr[i] + i - k_ptr[i] and holds a_ptr[i + 1] - diag[i] entries, so the rows tile
    // [0, nnz(A) + n - nnz_k) = the nnz_kt elements allocated, and a_ptr[n] + n fits u32
    // (checked above); mirror searches read inside rows of a; no output aliases an input.
    // The warp's variant takes the same arguments and writes the same places (each entry's
    // from its position in A's row); DEFAULT_THREADS is a multiple of 32, as its rows need.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .csr(a)
                .arg(&diag.buf)
                .arg(&omega)
                .arg(&scale)
                .arg(&k_ptr.buf)
                .arg(&mut k_idx.buf)
                .arg(&mut k_vals.buf)
                .arg(&mut kt_ptr.buf)
                .arg(&mut kt_idx.buf)
                .arg(&mut kt_vals.buf)
                .arg(&mut bad.buf);
        })
    }?;
    let first_unmirrored = dev.download_range(&bad, 1, 2)?[0];
    if first_unmirrored < n32 {
        return Ok((
            SsorK1Build::AsymmetricPattern {
                first_row: Some(first_unmirrored as usize),
            },
            kt_longest,
            None,
        ));
    }
    Ok((
        SsorK1Build::Built {
            k: Box::new(DeviceCsr::from_device(n, n, k_ptr, k_idx, k_vals)?),
            kt: Box::new(DeviceCsr::from_device(n, n, kt_ptr, kt_idx, kt_vals)?),
        },
        kt_longest,
        Some((diag, bad)),
    ))
}

/// What [`row_checks`] finds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowChecks {
    /// The first row (0-based) whose diagonal entry is not stored, or is not positive and
    /// finite: what `autopcg_solver::first_bad_diagonal` finds on the host.
    pub bad_diagonal: Option<usize>,
    /// `||A||_inf`, the largest row sum of `|a_ij|` (each row summed in order, as the host's
    /// `inf_norm` sums it; rows whose sum is NaN skipped; 0 for no rows).
    pub inf_norm: f64,
}

/// The checks every upload of `a` needs, read on the device from its uploaded arrays by one
/// launch (a thread per row, a binary search for its diagonal entry and a pass over its values)
/// rather than by host passes over the matrix: see [`RowChecks`]. The diagonal is that of the
/// leading square block (`min(rows, cols)` rows). Waits for one 12-byte copy back.
pub fn row_checks(dev: &GpuDevice, a: &DeviceCsr) -> Result<RowChecks, GpuError> {
    let (n, m) = a.shape();
    let range = |rows: usize| GpuError::InvalidInput {
        what: "CSR matrix".into(),
        reason: format!("{rows} rows exceed the 32-bit index range"),
    };
    let n32 = u32::try_from(n).map_err(|_| range(n))?;
    if n == 0 {
        return Ok(RowChecks {
            bad_diagonal: None,
            inf_norm: 0.0,
        });
    }
    // The kernel flags rows past the square block too (they store no column i); the first
    // flagged row is the least, so one below `square` is found whenever there is one.
    let square = n.min(m) as u32;
    let mut bad = dev.upload(&[n32])?;
    let mut norm = dev.alloc_zeros::<u64>(1)?;
    let l = per_row(dev, SsorBuildKernel::RowChecks, n)?;
    // SAFETY: matches `csr_row_checks(u32 n, const u32 *a_ptr, const u32 *a_idx,
    // const double *a_vals, u32 *bad, u64 *norm)`; a's arrays are a CSR matrix of n rows (n + 1
    // pointers read), every read stays inside a row, bad and norm hold one element each;
    // per_row launches DEFAULT_THREADS threads a block, a multiple of 32 as the kernel needs.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&a.indptr.buf)
                .arg(&a.indices.buf)
                .arg(&a.vals.buf)
                .arg(&mut bad.buf)
                .arg(&mut norm.buf);
        })
    }?;
    let row = dev.download(&bad)?[0];
    let bits = dev.download(&norm)?[0];
    Ok(RowChecks {
        // A row past the square block has no diagonal entry: it is not reported.
        bad_diagonal: (row < square).then_some(row as usize),
        inf_norm: f64::from_bits(bits),
    })
}

/// Row lengths the counting kernels' histograms hold (in shared memory, then in their
/// output). A row of the explicit product or of second order's factors that is longer is
/// still counted, its bin added from the row lengths the kernels write (read back only where
/// such a row exists); a longer row of `A` or of the first-order factors leaves their count to
/// the host.
pub const GRAM_HIST: usize = 1024;
/// Totals ahead of the histogram in the kernel's output (lines, distances, warp slots, stored
/// diagonals, flags).
const GRAM_HEAD: usize = 5;
/// Rows of `K^T` one thread merges per row of `M` at most, their next columns in registers; a
/// row of `M` that unites more rows of `K` is formed by a whole block instead (see
/// [`GRAM_LONG_CAP`]).
pub const GRAM_MERGE: usize = 16;
/// Words of shared memory (16 KiB) in which a block takes in one row of `M` that unites more
/// than [`GRAM_MERGE`] rows of `K`: as bits where its columns lie within this many words of 32
/// columns ([`GRAM_LONG_SPAN`]), however many entries its rows of `K` hold, and otherwise as
/// the gathered columns, to be sorted, of which it holds this many: a row whose columns span
/// more and whose rows of `K` hold more entries together leaves the count, or the product, to
/// the host.
pub const GRAM_LONG_CAP: usize = 4096;
/// Columns a block's bits of a long row cover ([`GRAM_LONG_CAP`] words of 32). A row of `K^T`
/// longer than this is certainly past what a block takes in: its columns, each the diagonal
/// of a row of `K` it unites, span more, and its rows of `K` hold more than
/// [`GRAM_LONG_CAP`] entries.
pub const GRAM_LONG_SPAN: usize = 32 * GRAM_LONG_CAP;

/// Threads of a block that forms one long row of the explicit product at a time (its gather
/// takes a warp per row of `K`, its scan of the row's bits a run of words per thread, its sort
/// where the bits do not fit a pair of columns per thread and step).
const GRAM_LONG_THREADS: u32 = 128;
/// Blocks per multiprocessor of the launches over the listed long rows: each block takes
/// rows of the list in turn, so these many rows are formed side by side at most (fewer fit
/// at once where the shared memory of a block, 16.6 KiB and the count's 8 KiB of tallies, runs
/// out first).
const GRAM_LONG_BLOCKS_PER_SM: usize = 16;
/// Rounds of the launch over the long rows (at most [`GRAM_LONG_BLOCKS_PER_SM`] rows per
/// multiprocessor each) up to which a matrix counts as small: there, a row of `K^T` of at most
/// [`GRAM_MERGE`] entries is a block's too when the rows of `K` it unites hold more than
/// [`GRAM_SHORT_GATHER`] entries, since a thread's merge of it, a step per entry of the row of
/// `M` each waiting for the last one's load, would take longer than the blocks' rounds (on
/// SuiteSparse bcsstk13, 2003 rows, such rows at the end of the matrix made the thread's
/// kernels 140 us, as long as the blocks' launch over every other row).
const GRAM_SMALL_ROUNDS: usize = 4;
/// Entries gathered above which a short row of a small matrix is a block's (see
/// [`GRAM_SMALL_ROUNDS`]).
const GRAM_SHORT_GATHER: u32 = 64;
/// `gather_max` when no row is sent to a block by what it gathers (`GRAM_DONE` in the kernels).
const GRAM_NO_GATHER_LIMIT: u32 = u32::MAX;

// The counting kernels sum and take maxima in whole warps, of 32 consecutive rows from each
// tile's first (so the tiles start at multiples of 32), and a block that forms long rows sums
// its warps' entries in 1024 / 32 slots (GRAM_BLOCK_MAX).
const _: () = assert!(DEFAULT_THREADS <= 1024 && DEFAULT_THREADS % 32 == 0);
const _: () = assert!(GRAM_LONG_THREADS <= 1024 && GRAM_LONG_THREADS % 32 == 0);

/// Counts the structure of the explicit product `M = K^T diag(s) K` of first-order SSOR-AI
/// for the square matrix `a` on the device (its [`StructureTotals`], the histogram at least
/// [`GRAM_HIST`] long): row `i` of `M` is the union of the
/// rows `q` of `K` (A's columns of row `q` up to its diagonal) over the columns `q` of row `i`
/// of `K^T` (A's columns of row `i` from its diagonal on), the pattern the host's symbolic pass
/// finds for factors viewed through a symmetric pattern. Only `a`'s pattern is uploaded (and
/// freed on return). One thread merges the rows of `K` a row of `M` unites, their next columns
/// held in registers, where its row of `K^T` holds at most [`GRAM_MERGE`] entries; a longer
/// row is a block's, which sets their columns as bits in shared memory where the row's span
/// fits there, and otherwise gathers them there and sorts them (the long
/// rows are listed first and spread over the whole device, a row per block; on a matrix of few
/// rows, a shorter row that unites long rows of `K` is a block's too). A caller that knows the
/// longest row of `K^T` exceeds [`GRAM_LONG_SPAN`] should not call it: the kernel runs before
/// it finds that. `kt_longest` is that longest row where the caller knows it (otherwise it is
/// read back from the device: one more wait): where no row is a block's, neither the list nor
/// the blocks' launch is made.
///
/// `None` when the device cannot count it exactly: a row without a stored diagonal entry, a
/// row of `M` whose rows of `K` hold more than [`GRAM_LONG_CAP`] entries together over a span
/// of more than [`GRAM_LONG_SPAN`] columns, or a sum of distances that could pass 64 bits.
/// Waits for one copy back (the counts), and one more (each row's length) where a row of `M`
/// holds [`GRAM_HIST`] entries or more.
pub fn ssor_k1_gram_count(
    dev: &GpuDevice,
    a: &autopcg_sparse::CsrMatrix,
    kt_longest: Option<usize>,
) -> Result<Option<StructureTotals>, GpuError> {
    if !gram_countable(a.nrows(), a.ncols(), a.nnz()) {
        return Ok(None);
    }
    let indptr = dev.upload(a.indptr())?;
    let indices = dev.upload(a.indices())?;
    let counted = gram_count_of(
        dev,
        a.nrows(),
        &indptr,
        &indices,
        kt_longest,
        GramProduct::Explicit,
    )?;
    Ok(counted.map(|(totals, _)| totals))
}

/// [`ssor_k1_gram_count`] of a matrix whose arrays are already on the device (only its
/// pattern is read; nothing is copied but the counts back).
pub fn ssor_k1_gram_count_on(
    dev: &GpuDevice,
    a: &DeviceCsr,
    kt_longest: Option<usize>,
) -> Result<Option<StructureTotals>, GpuError> {
    Ok(ssor_k1_gram_count_kept(dev, a, kt_longest)?.map(|(totals, _)| totals))
}

/// [`ssor_k1_gram_count_on`], with what the count found of the product's pattern kept on the
/// device for [`ssor_k1_explicit_counted`] to form it from `a` without counting its rows
/// again (their lengths, their number, the rows a block forms).
pub fn ssor_k1_gram_count_kept(
    dev: &GpuDevice,
    a: &DeviceCsr,
    kt_longest: Option<usize>,
) -> Result<Option<(StructureTotals, GramPattern)>, GpuError> {
    let (n, m) = a.shape();
    if !gram_countable(n, m, a.nnz()) {
        return Ok(None);
    }
    gram_count_of(
        dev,
        n,
        &a.indptr,
        &a.indices,
        kt_longest,
        GramProduct::Explicit,
    )
}

/// Which product of `A`'s pattern the merge kernels of the explicit product form (their last
/// argument, `GRAM_PROD_*` in `precond.cu`): row `i` unites rows `q` of a factor, each taken
/// over a part of `A`'s row `q`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GramProduct {
    /// First order's explicit product `K^T diag(s) K`.
    Explicit = 0,
    /// Second order's `K = I - X + X^2`: the first-order `K`'s rows `q` of row `i` of it.
    K2 = 1,
    /// Its transpose: the first-order `K^T`'s rows `q` of row `i` of it.
    K2T = 2,
}

impl GramProduct {
    /// The kernels' argument.
    fn arg(self) -> &'static u32 {
        match self {
            GramProduct::Explicit => &0,
            GramProduct::K2 => &1,
            GramProduct::K2T => &2,
        }
    }
}

/// What [`ssor_k1_gram_count_kept`] found of the pattern of the explicit product of a matrix
/// `A` on the device: each row's length, their sum, and the rows a block forms. It stands for
/// the pattern of the matrix it was counted from: [`ssor_k1_explicit_counted`] takes it for a
/// matrix of that shape and number of entries, and checks as it writes the columns that every
/// row has the length kept (a row that does not makes it count the pattern itself).
pub struct GramPattern {
    n: usize,
    prod: GramProduct,
    nnz_a: usize,
    gather_max: u32,
    len: DeviceVec<u32>,
    nnz_m: u64,
    long: Option<LongRows>,
}

impl fmt::Debug for GramPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GramPattern")
            .field("n", &self.n)
            .field("nnz_a", &self.nnz_a)
            .field("nnz_m", &self.nnz_m)
            .field("long_rows_listed", &self.long.is_some())
            .finish()
    }
}

impl GramPattern {
    /// Entries of the product.
    pub fn nnz(&self) -> u64 {
        self.nnz_m
    }

    /// Whether it may stand for the pattern of `a`'s product `prod` formed on `dev` (the
    /// product counted, the shape and entries of the matrix it was counted from, and the same
    /// rows sent to blocks).
    fn fits(&self, dev: &GpuDevice, a: &DeviceCsr, prod: GramProduct) -> bool {
        a.shape() == (self.n, self.n)
            && self.prod == prod
            && a.nnz() == self.nnz_a
            && self.len.len() == self.n
            && self.gather_max == LongRows::gather_max(dev, self.n)
            && self.nnz_m < u64::from(u32::MAX)
    }
}

/// Whether an `n` x `m` matrix of `nnz` entries is in the device count's range: square, not
/// empty, its entries within the 32-bit positions (whether the product's sum of distances
/// stayed within its 64-bit counter is checked once its entries are known:
/// [`gram_distances_exact`]).
fn gram_countable(n: usize, m: usize, nnz: usize) -> bool {
    n == m && n > 0 && (nnz as u64) < u64::from(u32::MAX)
}

/// Whether the sum of distances `|i - j|` over the `nnz_m` entries of an `n`-row product is
/// certainly exact in the kernels' 64-bit counters (each entry adds at most `n - 1`).
fn gram_distances_exact(n: usize, nnz_m: u64) -> bool {
    u128::from(nnz_m) * (n as u128) < 1u128 << 63
}

/// The count of [`ssor_k1_gram_count`] (or, by `prod`, of another product of the pattern) on
/// the `n`-row pattern `indptr`, `indices` (a square CSR pattern in range, see
/// [`gram_countable`]), and the pattern it found. `kt_longest`: the most rows a row unites
/// (for the explicit product, the longest row of `K^T`; `None`: read back).
fn gram_count_of(
    dev: &GpuDevice,
    n: usize,
    indptr: &DeviceVec<u32>,
    indices: &DeviceVec<u32>,
    kt_longest: Option<usize>,
    prod: GramProduct,
) -> Result<Option<(StructureTotals, GramPattern)>, GpuError> {
    let (diag, len, bad) = lengths_of(dev, n, indptr, indices)?;
    drop(len);
    let kt_longest = match kt_longest {
        Some(l) => l,
        None => dev.download_range(&bad, 2, 3)?[0] as usize,
    };
    drop(bad);
    let gather_max = LongRows::gather_max(dev, n);
    let long = LongRows::list_if_any(dev, n, indptr, indices, &diag, kt_longest, gather_max, prod)?;
    let words = (2 * n - 1).div_ceil(64);
    let mut out = dev.alloc_zeros::<u64>(GRAM_HEAD + GRAM_HIST + words)?;
    let mut group = dev.alloc_zeros::<u32>(n.div_ceil(32))?;
    // The kernels write the length of each row they count, the one its bin of the histogram
    // takes; a row left uncounted keeps 0, so the lengths sum to the histogram's entries.
    let mut row_len = dev.alloc_zeros::<u32>(n)?;
    let n32 = n as u32;
    if let Some(long) = &long {
        let l = long.launch(dev, SsorBuildKernel::GramCountLong)?;
        // SAFETY: matches `ssor_k1_gram_count_long(u32 n, const u32 *list, const u32 *count,
        // const u32 *a_ptr, const u32 *a_idx, const u32 *diag, u64 *out, u32 *group,
        // u32 *row_len)`. indptr
        // and indices are the pattern of a validated square CSR matrix (n + 1 pointers, columns
        // below n); list holds count[0] rows below n (ssor_k1_gram_list), each storing its
        // diagonal at diag[i]; diag holds a position inside each row, or its start for a row
        // without a diagonal entry, which the kernel tests (inside the row) before it reads
        // from diag[q] + 1 back to the row's start; the block's gather writes no column past
        // its shared buffer (a row with more is flagged); out holds the GRAM_HEAD totals,
        // GRAM_HIST bins and the words of bits below 2n - 1; group one word per 32 rows;
        // row_len n words, written at listed rows.
        unsafe {
            l.run(|b| {
                b.arg(&n32)
                    .arg(&long.rows.buf)
                    .arg(&long.count.buf)
                    .arg(&indptr.buf)
                    .arg(&indices.buf)
                    .arg(&diag.buf)
                    .arg(&mut out.buf)
                    .arg(&mut group.buf)
                    .arg(&mut row_len.buf)
                    .arg(prod.arg());
            })
        }?;
    }
    let l = counting(dev, SsorBuildKernel::GramCount, n)?;
    // SAFETY: matches `ssor_k1_gram_count(u32 n, const u32 *a_ptr, const u32 *a_idx,
    // const u32 *diag, u32 gather_max, const u32 *group, u64 *out, u32 *row_len)`; pattern,
    // diag, out and row_len as
    // above, group the ceil(n / 32) words the launch above raised (zeros without it: no row is
    // long); gather_max is the list's, so the rows the list holds are the ones skipped here; a
    // short row's merge reads inside rows of the pattern and keeps its heads in the kernel's
    // GRAM_MERGE registers. DEFAULT_THREADS is a multiple of 32, as the kernel's warp rounds
    // and the groups of 32 rows need.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&indptr.buf)
                .arg(&indices.buf)
                .arg(&diag.buf)
                .arg(&gather_max)
                .arg(&group.buf)
                .arg(&mut out.buf)
                .arg(&mut row_len.buf)
                .arg(prod.arg());
        })
    }?;
    let o = dev.download(&out)?;
    let mut totals = section_totals(&o);
    match o[GRAM_HEAD - 1] {
        0 => {}
        // Every row counted, some of GRAM_HIST entries or more, which the kernels leave out of
        // the histogram: their bins from the lengths the kernels wrote (one more copy back).
        GRAM_FLAG_PAST_HIST => bin_long_rows(&mut totals.hist, &dev.download(&row_len)?),
        _ => return Ok(None),
    }
    // Every row was counted, and is in its bin.
    let nnz_m = totals
        .hist
        .iter()
        .enumerate()
        .map(|(l, &rows)| l as u64 * rows)
        .sum();
    if !gram_distances_exact(n, nnz_m) {
        return Ok(None);
    }
    let pattern = GramPattern {
        n,
        prod,
        nnz_a: indices.len(),
        gather_max,
        len: row_len,
        nnz_m,
        long,
    };
    Ok(Some((totals, pattern)))
}

/// The rows of the explicit product that a block forms (`ssor_k1_gram_list`: a row of `K^T`
/// longer than [`GRAM_MERGE`], its diagonal stored), listed on the device in no particular
/// order, with their number on the device: the launches over them take a row per block at a
/// time, spread over the whole device, so that no block forms many of them one after another.
struct LongRows {
    rows: DeviceVec<u32>,
    count: DeviceVec<u32>,
    n: usize,
    /// The product whose rows these are (the launches over them form the same).
    prod: GramProduct,
}

impl LongRows {
    /// Lists the long rows of the `n`-row pattern `indptr`, `indices` (`n >= 1`; `diag` from
    /// [`lengths_of`]). Nothing is copied back: the launches over the list read its length on
    /// the device.
    fn list(
        dev: &GpuDevice,
        n: usize,
        indptr: &DeviceVec<u32>,
        indices: &DeviceVec<u32>,
        diag: &DeviceVec<u32>,
        gather_max: u32,
        prod: GramProduct,
    ) -> Result<LongRows, GpuError> {
        // SAFETY: ssor_k1_gram_list writes the first count[0] entries, which alone are read.
        let mut rows = unsafe { dev.alloc_uninit::<u32>(n)? };
        let mut count = dev.alloc_zeros::<u32>(1)?;
        let n32 = n as u32;
        let l = counting(dev, SsorBuildKernel::GramList, n)?;
        // SAFETY: matches `ssor_k1_gram_list(u32 n, const u32 *a_ptr, const u32 *a_idx,
        // const u32 *diag, u32 gather_max, u32 *list, u32 *count)`; indptr and indices are a validated CSR
        // pattern of n rows, diag a position inside each row (or its start), tested before use;
        // each row is listed at most once, so at most n entries of rows are written.
        // DEFAULT_THREADS is a multiple of 32, as the kernel's ballots need.
        unsafe {
            l.run(|b| {
                b.arg(&n32)
                    .arg(&indptr.buf)
                    .arg(&indices.buf)
                    .arg(&diag.buf)
                    .arg(&gather_max)
                    .arg(&mut rows.buf)
                    .arg(&mut count.buf)
                    .arg(prod.arg());
            })
        }?;
        Ok(LongRows {
            rows,
            count,
            n,
            prod,
        })
    }

    /// The kernels' `gather_max` for an `n`-row matrix on `dev`: [`GRAM_SHORT_GATHER`] on a
    /// small matrix (see [`GRAM_SMALL_ROUNDS`]), no limit otherwise.
    fn gather_max(dev: &GpuDevice, n: usize) -> u32 {
        gather_max_for(n, dev.props().sm_count as usize)
    }

    /// [`LongRows::list`], or `None` where no row can be long: no row of `K^T` longer than
    /// [`GRAM_MERGE`] (`kt_longest`) and no limit on what a short row gathers.
    #[allow(clippy::too_many_arguments)]
    fn list_if_any(
        dev: &GpuDevice,
        n: usize,
        indptr: &DeviceVec<u32>,
        indices: &DeviceVec<u32>,
        diag: &DeviceVec<u32>,
        kt_longest: usize,
        gather_max: u32,
        prod: GramProduct,
    ) -> Result<Option<LongRows>, GpuError> {
        if n == 0 || (kt_longest <= GRAM_MERGE && gather_max == GRAM_NO_GATHER_LIMIT) {
            return Ok(None);
        }
        LongRows::list(dev, n, indptr, indices, diag, gather_max, prod).map(Some)
    }

    /// A launch of `kernel` over the listed rows: [`GRAM_LONG_THREADS`] a block, as many blocks
    /// as the device holds side by side (at most a row each), each taking rows in turn.
    fn launch<'d>(
        &self,
        dev: &'d GpuDevice,
        kernel: SsorBuildKernel,
    ) -> Result<Launch<'d>, GpuError> {
        let blocks = self
            .n
            .min(GRAM_LONG_BLOCKS_PER_SM * dev.props().sm_count.max(1) as usize)
            .max(1) as u32;
        let cfg = LaunchConfig::new(GRAM_LONG_THREADS, blocks);
        cfg.check(kernel, dev.props())?;
        Launch::plain(dev, KernelSource::Precond, &kernel, cfg)
    }
}

/// Average entries per row of `A` from which its structure (and its factors') is counted a warp
/// per row ([`SsorBuildKernel::TotalsWarp`], [`SsorBuildKernel::CsrTotalsWarp`]): a thread's
/// row tallies its entries one after another, each waiting on loads (on bcsstk13, 42 entries a
/// row, that made the three sections' count 330 us for 2003 rows).
pub const TOTALS_WARP_MIN_AVG: usize = 16;

/// The launch of `kernel` (the thread's totals, [`SsorBuildKernel::Totals`] or
/// [`SsorBuildKernel::CsrTotals`]) over an `n`-row matrix of `nnz` entries, or of its warp's
/// variant where rows average [`TOTALS_WARP_MIN_AVG`] entries or more (a warp per row: as many
/// warps as rows, within the blocks a counting launch fills the device with).
fn totals_launch(
    dev: &GpuDevice,
    kernel: SsorBuildKernel,
    n: usize,
    nnz: usize,
) -> Result<Launch<'_>, GpuError> {
    thread_or_warp(dev, kernel, n, nnz, counting)
}

/// Whether the structure of an `n`-row matrix of `nnz` entries is counted a warp per row (see
/// [`TOTALS_WARP_MIN_AVG`]).
fn totals_by_warp(n: usize, nnz: usize) -> bool {
    nnz >= TOTALS_WARP_MIN_AVG.saturating_mul(n)
}

/// A launch of a counting kernel over `n` rows (grid-stride): enough blocks to fill the device,
/// each of which flushes its shared histograms once.
fn counting(dev: &GpuDevice, kernel: SsorBuildKernel, n: usize) -> Result<Launch<'_>, GpuError> {
    let blocks = n
        .div_ceil(DEFAULT_THREADS as usize)
        .min(8 * dev.props().sm_count.max(1) as usize) as u32;
    let cfg = LaunchConfig::new(DEFAULT_THREADS, blocks.max(1));
    cfg.check(kernel, dev.props())?;
    Launch::plain(dev, KernelSource::Precond, &kernel, cfg)
}

/// The totals of one section of a counting kernel's output ([`GRAM_HEAD`] totals, the flags
/// last among them, [`GRAM_HIST`] bins, then the diagonal bitmap to the section's end); `None`
/// when a flag is set (the count is not exact).
fn totals_at(o: &[u64]) -> Option<StructureTotals> {
    (o[GRAM_HEAD - 1] == 0).then(|| section_totals(o))
}

/// The flag of a count whose rows were all counted, some of them of [`GRAM_HIST`] entries or
/// more: their bins are not in the section's histogram.
const GRAM_FLAG_PAST_HIST: u64 = 2;

/// A section's totals as [`totals_at`] reads them, whatever its flags.
fn section_totals(o: &[u64]) -> StructureTotals {
    StructureTotals {
        x_lines: o[0],
        dist: o[1],
        warp_slots: o[2],
        diag_stored: o[3],
        hist: o[GRAM_HEAD..GRAM_HEAD + GRAM_HIST].to_vec(),
        diagonals: o[GRAM_HEAD + GRAM_HIST..].to_vec(),
    }
}

/// The rows of [`GRAM_HIST`] entries or more among `row_len` (each counted row's length)
/// added to `hist` (the section's bins, which hold the shorter ones), the histogram grown to
/// the longest.
fn bin_long_rows(hist: &mut Vec<u64>, row_len: &[u32]) {
    for &l in row_len {
        let l = l as usize;
        if l >= GRAM_HIST {
            if hist.len() <= l {
                hist.resize(l + 1, 0);
            }
            hist[l] += 1;
        }
    }
}

/// What a value refresh of factors [`ssor_k1_factors`] built from `a` needs to recompute them
/// on the device after new values of `a` (see [`super::refresh`]): the positions of `a`'s
/// diagonal entries, and for each entry of `kt` (`K^T diag(s)`) the position in `k` of its
/// mirror. `k` and `kt` must have the patterns the build gives for `a`'s pattern (their values
/// are not read). `None` when they do not (a pattern that is not symmetric, or factors of
/// another matrix): nothing is kept then. Waits for one small copy back.
pub fn ssor_k1_refresh_maps(
    dev: &GpuDevice,
    a: &DeviceCsr,
    k: &DeviceCsr,
    kt: &DeviceCsr,
) -> Result<Option<(DeviceDiagonal, DeviceGather)>, GpuError> {
    let n = a.nrows();
    if !maps_fit(a, k, kt) {
        return Ok(None);
    }
    if n == 0 {
        return no_rows_maps(dev).map(Some);
    }
    let (diag, len, bad) = lengths(dev, a)?;
    drop(len);
    kt_sources_of(dev, a, k, kt, diag, bad)
}

/// The refresh maps of a matrix of no rows (no diagonal positions, nothing gathered).
fn no_rows_maps(dev: &GpuDevice) -> Result<(DeviceDiagonal, DeviceGather), GpuError> {
    Ok((
        DeviceDiagonal::from_device(dev.alloc_zeros(0)?, 0),
        DeviceGather::from_device(dev.alloc_zeros(0)?, 0),
    ))
}

/// Whether `k` and `kt` have the shapes and entries of the factors of the square matrix `a`
/// (what [`ssor_k1_refresh_maps`] checks before it maps them), within the 32-bit positions.
fn maps_fit(a: &DeviceCsr, k: &DeviceCsr, kt: &DeviceCsr) -> bool {
    let n = a.nrows();
    let square = |m: &DeviceCsr| m.shape() == (n, n);
    a.ncols() == n
        && square(k)
        && square(kt)
        && k.nnz() == kt.nnz()
        && (a.nnz() as u64 + n as u64) < u64::from(u32::MAX)
        && k.nnz() + kt.nnz() == a.nnz() + n
}

/// The maps of [`ssor_k1_refresh_maps`] from `a`'s diagonal positions `diag` and flags `bad`
/// as [`lengths`] leaves them (first two words `n` unless a row lacks its diagonal entry or a
/// mirror), for `k` and `kt` that [`maps_fit`] `a` (`n >= 1` rows).
fn kt_sources_of(
    dev: &GpuDevice,
    a: &DeviceCsr,
    k: &DeviceCsr,
    kt: &DeviceCsr,
    diag: DeviceVec<u32>,
    mut bad: DeviceVec<u32>,
) -> Result<Option<(DeviceDiagonal, DeviceGather)>, GpuError> {
    let n = a.nrows();
    let n32 = n as u32;
    // Every entry is written unless a row's count differs from A's, which the flag reports
    // (the map is then dropped unread).
    let mut src = dev.alloc_zeros::<u32>(kt.nnz())?;
    let l = row_launch(dev, SsorBuildKernel::KtSources, n, a.nnz())?;
    // SAFETY: matches `ssor_k1_kt_sources(u32 n, const u32 *a_ptr, const u32 *a_idx,
    // const u32 *diag, const u32 *k_ptr, const u32 *kt_ptr, u32 *src, u32 *bad)`; a, k and kt
    // are CSR matrices of n rows (kt's row pointers rise to nnz(kt) = len(src)); a row of kt
    // is written only when it holds as many entries as A's row from its diagonal on, inside
    // [kt_ptr[i], kt_ptr[i + 1]); diag holds positions inside each row of a (or its start,
    // when a row has none: flagged in bad[0]); mirror searches read inside rows of a. The
    // sources it writes lie inside k only when every row's lengths match, which the flags
    // report: the map is returned only then, and the gather reads in[src[p]] below nnz(k).
    // The warp's variant takes the same arguments and writes the same places.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&a.indptr.buf)
                .arg(&a.indices.buf)
                .arg(&diag.buf)
                .arg(&k.indptr.buf)
                .arg(&kt.indptr.buf)
                .arg(&mut src.buf)
                .arg(&mut bad.buf);
        })
    }?;
    let flags = dev.download(&bad)?;
    if flags[0] < n32 || flags[1] < n32 {
        return Ok(None);
    }
    Ok(Some((
        DeviceDiagonal::from_device(diag, a.nnz()),
        DeviceGather::from_device(src, k.nnz()),
    )))
}

/// Counts, on the device, the structure of the square matrix `a` (every diagonal entry
/// stored) and of its first-order SSOR-AI factors with relaxation `omega`, and what their
/// values are ([`K1Totals`]): what the host's one pass over the factors' views finds, read
/// from the arrays already uploaded by one launch (a thread per row of `A`, whose three row
/// segments are tallied as [`ssor_k1_gram_count`] tallies a row of the product). Waits for two
/// copies back (the diagonal check and the counts).
///
/// `None` where the device does not count it exactly: not square, a row without its diagonal
/// entry, a row of `A` with [`GRAM_HIST`] entries or more, or a sum of distances that could
/// pass 64 bits.
pub fn ssor_k1_totals(
    dev: &GpuDevice,
    a: &DeviceCsr,
    omega: f64,
) -> Result<Option<K1Totals>, GpuError> {
    let (n, m) = a.shape();
    let nnz = a.nnz();
    if n != m || n == 0 || nnz as u64 >= u64::from(u32::MAX) {
        return Ok(None);
    }
    // Every entry adds at most n - 1 to a section's distances.
    if (nnz as u128) * (n as u128) >= 1u128 << 63 {
        return Ok(None);
    }
    let (diag, len, bad) = lengths_of(dev, n, &a.indptr, &a.indices)?;
    drop(len);
    let n32 = n as u32;
    if dev.download(&bad)?[0] < n32 {
        return Ok(None);
    }
    let words = (2 * n - 1).div_ceil(64);
    let section = GRAM_HEAD + GRAM_HIST + words;
    let mut out = dev.alloc_zeros::<u64>(3 * section + 1)?;
    let l = totals_launch(dev, SsorBuildKernel::Totals, n, nnz)?;
    let scale = omega * (2.0 - omega);
    let words64 = words as u64;
    // SAFETY: matches `ssor_k1_totals(u32 n, const u32 *a_ptr, const u32 *a_idx,
    // const double *a_vals, const u32 *diag, double omega, double scale, u64 words, u64 *out)`,
    // as does `ssor_k1_totals_warp`;
    // a's arrays are a square CSR matrix of n rows whose every row stores its diagonal entry
    // (checked above), at diag[i]; every read stays inside a row; out holds three sections of
    // GRAM_HEAD + GRAM_HIST + words words (words covering the bits below 2n - 1) and one more.
    // DEFAULT_THREADS is a multiple of 32, as the kernel's warp rounds need.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&a.indptr.buf)
                .arg(&a.indices.buf)
                .arg(&a.vals.buf)
                .arg(&diag.buf)
                .arg(&omega)
                .arg(&scale)
                .arg(&words64)
                .arg(&mut out.buf);
        })
    }?;
    let out = dev.download(&out)?;
    let totals = |s: usize| totals_at(&out[s * section..(s + 1) * section]);
    let (Some(ta), Some(tk), Some(tkt)) = (totals(0), totals(1), totals(2)) else {
        return Ok(None);
    };
    let values = out[3 * section];
    Ok(Some(K1Totals {
        a: ta,
        k: tk,
        kt: tkt,
        values_finite: values & 1 == 0,
        off_diagonal_zero: values & 2 == 0,
    }))
}

/// What the selection reads of the square matrix `a` before first-order SSOR-AI's factors
/// exist ([`K1Checks`]: the first bad diagonal entry, `K`'s entries and their squared row
/// lengths, the coupling the automatic relaxation factor is computed from), read on the device
/// from its uploaded arrays by two launches (the diagonal positions of [`ssor_k1_factors`],
/// then a thread per row) instead of by host passes over `A`: the same values as the host's
/// (`K1Factors` of `autopcg-generator`; the coupling's terms summed in the same order, so
/// the same bits). `None` for a matrix that is not square. Waits for two small copies back.
pub fn ssor_k1_checks(dev: &GpuDevice, a: &DeviceCsr) -> Result<Option<K1Checks>, GpuError> {
    let (n, m) = a.shape();
    if n != m || u32::try_from(n).is_err() {
        return Ok(None);
    }
    if n == 0 {
        return Ok(Some(K1Checks {
            bad_diagonal: None,
            nnz_k: 0,
            k_len_squares: 0,
            coupling: 0.0,
        }));
    }
    let (diag, len, mut bad) = lengths(dev, a)?;
    drop(len);
    let n32 = n as u32;
    let mut out = dev.alloc_zeros::<u64>(3)?;
    let l = row_launch(dev, SsorBuildKernel::Checks, n, a.nnz())?;
    // SAFETY: matches `ssor_k1_checks(u32 n, const u32 *a_ptr, const u32 *a_idx,
    // const double *a_vals, const u32 *diag, u32 *bad, u64 *out)`, as does
    // `ssor_k1_checks_warp`; a's arrays are a square
    // CSR matrix of n rows, diag holds n positions from ssor_k1_lengths (a row's own diagonal
    // position, checked before use, or its start), every read stays inside a row or at a
    // diagonal position checked to be stored; bad holds 2 words, out 3; row_launch launches
    // DEFAULT_THREADS threads a block, a multiple of 32 as the kernels' reductions and the
    // warp's shuffles need.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&a.indptr.buf)
                .arg(&a.indices.buf)
                .arg(&a.vals.buf)
                .arg(&diag.buf)
                .arg(&mut bad.buf)
                .arg(&mut out.buf);
        })
    }?;
    let first = dev.download_range(&bad, 0, 1)?[0];
    let out = dev.download(&out)?;
    Ok(Some(K1Checks {
        bad_diagonal: (first < n32).then_some(first as usize),
        nnz_k: out[0],
        k_len_squares: out[1],
        coupling: f64::from_bits(out[2]),
    }))
}

/// The position of each row's diagonal entry of the square matrix `a`, found on the device
/// from its uploaded pattern (a binary search per row, the search of [`ssor_k1_factors`]):
/// what value kernels such as Jacobi's inverse diagonal read. `None` when `a` is not square or
/// a row stores no diagonal entry. Waits for one 8-byte copy back.
pub fn diagonal_positions(
    dev: &GpuDevice,
    a: &DeviceCsr,
) -> Result<Option<DeviceDiagonal>, GpuError> {
    let (n, m) = a.shape();
    if n != m || u32::try_from(n).is_err() {
        return Ok(None);
    }
    if n == 0 {
        return Ok(Some(DeviceDiagonal::from_device(dev.alloc_zeros(0)?, 0)));
    }
    let (diag, len, bad) = lengths(dev, a)?;
    drop(len);
    if dev.download(&bad)?[0] < n as u32 {
        return Ok(None);
    }
    Ok(Some(DeviceDiagonal::from_device(diag, a.nnz())))
}

/// What [`ssor_k1_explicit`] made.
#[derive(Debug)]
pub enum SsorK1Explicit {
    /// The product, with what a value refresh of it needs.
    Built(Box<ExplicitParts>),
    /// Not formed on the device, for the reason given (the caller forms it on the host, as
    /// the host build transposes `K` for a pattern that is not symmetric). Nothing was kept.
    Refused(String),
}

/// The explicit product formed on the device and the operands it was formed from, which a
/// value refresh recomputes it from (see [`super::refresh`]).
#[derive(Debug)]
pub struct ExplicitParts {
    /// `M = K^T diag(s) K`.
    pub m: DeviceCsr,
    /// `K = I - omega L D^-1`.
    pub k: DeviceCsr,
    /// `K^T`, its values `K`'s (not scaled).
    pub kt: DeviceCsr,
    /// The positions of `A`'s diagonal entries.
    pub diag: DeviceDiagonal,
    /// For each entry of `K^T`, the position in `K` of its mirror.
    pub kt_src: DeviceGather,
}

/// First-order SSOR-AI's explicit product `M = K^T diag(s) K`, `s_q = omega (2 - omega) /
/// a_qq`, formed on the device from `a` (a square CSR matrix as `CsrMatrix` uploads it) with
/// relaxation `omega` in (0, 2): the matrix `autopcg_solver::Preconditioner::build` forms on the
/// host for the explicit form, the same pattern and, term by term in the same order, the same
/// values (up to the sign of a zero). `K` and `K^T` are built as [`ssor_k1_factors`] builds
/// them (`K^T` then takes `K`'s values by the refresh's gather); the product's pattern is the
/// merge [`ssor_k1_gram_count`] counts, its row lengths found first, scanned into its row
/// pointers, then its columns written; its values are the value refresh's kernel. Every
/// diagonal entry must be stored (an error otherwise); whether the diagonal values are
/// positive is the caller's check. Refused (for the host to form) where `a`'s pattern is not
/// symmetric, a row of the product unites rows of `K` that hold more than [`GRAM_LONG_CAP`]
/// entries together over more than [`GRAM_LONG_SPAN`] columns, or the product holds `2^32`
/// entries or more. Waits for six small copies back.
pub fn ssor_k1_explicit(
    dev: &GpuDevice,
    a: &DeviceCsr,
    omega: f64,
) -> Result<SsorK1Explicit, GpuError> {
    ssor_k1_explicit_counted(dev, a, omega, None)
}

/// [`ssor_k1_explicit`], its pattern taken from `counted` where given, what
/// [`ssor_k1_gram_count_kept`] counted of `a` (the plan's count of the product, made before
/// the explicit form was chosen): its rows' lengths are scanned into the product's row pointers
/// and only the columns are written, each row checked to have the length kept, instead of
/// counting every row twice (lengths, then columns). Where `counted` does not fit `a` (another
/// shape or number of entries) or a row does not have its length, the pattern is counted here
/// as without it. Waits for five small copies back with `counted` (six without).
pub fn ssor_k1_explicit_counted(
    dev: &GpuDevice,
    a: &DeviceCsr,
    omega: f64,
    counted: Option<GramPattern>,
) -> Result<SsorK1Explicit, GpuError> {
    let n = a.nrows();
    let (k, mut kt, kt_longest, build_lengths) = match factors_and_longest(dev, a, omega)? {
        (SsorK1Build::Built { k, kt }, longest, lengths) => (*k, *kt, longest, lengths),
        (SsorK1Build::AsymmetricPattern { .. }, _, _) => {
            return Ok(SsorK1Explicit::Refused(
                "the matrix's pattern is not symmetric".into(),
            ))
        }
    };
    // The build's diagonal positions serve the map of K^T's sources (no search again).
    let maps = match build_lengths {
        Some((diag, bad)) if maps_fit(a, &k, &kt) => kt_sources_of(dev, a, &k, &kt, diag, bad)?,
        _ => ssor_k1_refresh_maps(dev, a, &k, &kt)?,
    };
    let Some((diag, kt_src)) = maps else {
        return Ok(SsorK1Explicit::Refused(
            "the factors' rows do not follow the matrix's pattern".into(),
        ));
    };
    // K^T with K's values: the product scales by s_q itself.
    gather_values(dev, &kt_src, &k, &mut kt)?;
    let kept = match counted.filter(|p| p.fits(dev, a, GramProduct::Explicit)) {
        Some(p) => pattern_from_count(dev, a, &diag, p)?,
        None => None,
    };
    let (m_ptr, m_idx, nnz_m) = match kept {
        Some(pattern) => pattern,
        None => match pattern_counted_here(dev, a, &diag, kt_longest, GramProduct::Explicit)? {
            Ok(pattern) => pattern,
            Err(reason) => return Ok(SsorK1Explicit::Refused(reason)),
        },
    };
    // SAFETY: ssor_gram_values writes every value.
    let m_vals = unsafe { dev.alloc_uninit::<f64>(nnz_m)? };
    let mut m = DeviceCsr::from_device(n, n, m_ptr, m_idx, m_vals)?;
    gram_values(dev, &kt, &k, a, &diag, omega * (2.0 - omega), &mut m)?;
    Ok(SsorK1Explicit::Built(Box::new(ExplicitParts {
        m,
        k,
        kt,
        diag,
        kt_src,
    })))
}

/// Row pointers, columns and entries of the explicit product's pattern.
type GramArrays = (DeviceVec<u32>, DeviceVec<u32>, usize);

/// The product's pattern from the lengths `counted` kept (which [`GramPattern::fits`] `a`):
/// scanned into row pointers, then the columns written, each row's number checked against its
/// length (one copy back). `None` when a row's differs: the arrays are dropped unread.
fn pattern_from_count(
    dev: &GpuDevice,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    counted: GramPattern,
) -> Result<Option<GramArrays>, GpuError> {
    let n = counted.n;
    let nnz_m = counted.nnz_m as usize;
    // SAFETY: exclusive_scan writes all n + 1 pointers.
    let mut m_ptr = unsafe { dev.alloc_uninit::<u32>(n + 1)? };
    let mut ws = ScanWorkspace::new(dev, ScanWorkspace::tiles(n, DEFAULT_THREADS))?;
    exclusive_scan(dev, DEFAULT_THREADS, &counted.len, &mut m_ptr, &mut ws)?;
    drop(ws);
    // The kept lengths sum to nnz_m (each row's is its bin's in the histogram nnz_m was summed
    // from, a row not counted 0; fits checked nnz_m < 2^32), so m_ptr rises to m_ptr[n] =
    // nnz_m = len(m_idx).
    // SAFETY: the fill writes every entry of every row whose length is the one kept, and
    // flags any other row, when the arrays are dropped unread.
    let mut m_idx = unsafe { dev.alloc_uninit::<u32>(nnz_m)? };
    let mut bad = dev.upload(&[n as u32])?;
    fill_pattern(
        dev,
        a,
        diag,
        counted.long.as_ref(),
        counted.gather_max,
        counted.prod,
        &m_ptr,
        &mut m_idx,
        &mut bad,
    )?;
    let first_bad = dev.download(&bad)?[0];
    Ok((first_bad >= n as u32).then_some((m_ptr, m_idx, nnz_m)))
}

/// The product's pattern counted here: the row lengths (two launches), their sum and flags
/// read back, the scan, then the columns. `Err` with the reason it is not formed on the
/// device: a row uniting more than [`GRAM_LONG_CAP`] entries of `K` over more than
/// [`GRAM_LONG_SPAN`] columns, or `2^32` entries.
fn pattern_counted_here(
    dev: &GpuDevice,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    kt_longest: usize,
    prod: GramProduct,
) -> Result<Result<GramArrays, String>, GpuError> {
    let n = a.nrows();
    let n32 = n as u32;
    // SAFETY: ssor_k1_gram_lengths writes every short row's length, ssor_k1_gram_lengths_long
    // every long row's.
    let mut len = unsafe { dev.alloc_uninit::<u32>(n)? };
    let mut total = dev.alloc_zeros::<u64>(1)?;
    let mut bad = dev.upload(&[n32])?;
    let gather_max = LongRows::gather_max(dev, n);
    let long = LongRows::list_if_any(
        dev, n, &a.indptr, &a.indices, &diag.pos, kt_longest, gather_max, prod,
    )?;
    if let Some(long) = &long {
        let l = long.launch(dev, SsorBuildKernel::GramLengthsLong)?;
        // SAFETY: matches `ssor_k1_gram_lengths_long(const u32 *list, const u32 *count,
        // const u32 *a_ptr, const u32 *a_idx, const u32 *diag, u32 *len, u64 *total,
        // u32 *bad)`; the list holds count[0] distinct rows below n, each storing its diagonal
        // at diag[i]; the block's gather reads inside rows of a and writes no column past its
        // shared buffer (a row with more is flagged); len holds n elements, total and bad one
        // each.
        unsafe {
            l.run(|b| {
                b.arg(&long.rows.buf)
                    .arg(&long.count.buf)
                    .arg(&a.indptr.buf)
                    .arg(&a.indices.buf)
                    .arg(&diag.pos.buf)
                    .arg(&mut len.buf)
                    .arg(&mut total.buf)
                    .arg(&mut bad.buf)
                    .arg(long.prod.arg());
            })
        }?;
    }
    if n > 0 {
        let l = per_row(dev, SsorBuildKernel::GramLengths, n)?;
        // SAFETY: matches `ssor_k1_gram_lengths(u32 n, const u32 *a_ptr, const u32 *a_idx,
        // const u32 *diag, u32 gather_max, u32 *len, u64 *total, u32 *bad)`; a is a validated
        // square CSR matrix of n rows whose every row stores its diagonal entry, at diag[i]
        // (the factors were built from it); the merge of a short row reads inside rows of a
        // and keeps its heads in the kernel's GRAM_MERGE registers; len holds n elements,
        // total and bad one each; per_row launches DEFAULT_THREADS threads a block, a multiple
        // of 32 as the kernel's sum needs; gather_max is the list's, so the short rows are the
        // others.
        unsafe {
            l.run(|b| {
                b.arg(&n32)
                    .arg(&a.indptr.buf)
                    .arg(&a.indices.buf)
                    .arg(&diag.pos.buf)
                    .arg(&gather_max)
                    .arg(&mut len.buf)
                    .arg(&mut total.buf)
                    .arg(&mut bad.buf)
                    .arg(prod.arg());
            })
        }?;
    }
    let first_unmerged = dev.download(&bad)?[0];
    if first_unmerged < n32 {
        return Ok(Err(format!(
            "row {} of the product unites rows of K with more than the {GRAM_LONG_CAP} \
             entries the device sorts for a row, over more than the {GRAM_LONG_SPAN} columns \
             its bits cover",
            first_unmerged as usize + 1
        )));
    }
    let nnz_m = dev.download(&total)?[0];
    if nnz_m >= u64::from(u32::MAX) {
        return Ok(Err(format!(
            "its {nnz_m} entries exceed the 32-bit indices of the device's arrays"
        )));
    }
    let nnz_m = nnz_m as usize;
    // SAFETY: exclusive_scan writes all n + 1 pointers.
    let mut m_ptr = unsafe { dev.alloc_uninit::<u32>(n + 1)? };
    let mut ws = ScanWorkspace::new(dev, ScanWorkspace::tiles(n, DEFAULT_THREADS))?;
    exclusive_scan(dev, DEFAULT_THREADS, &len, &mut m_ptr, &mut ws)?;
    drop((ws, len));
    // SAFETY: the fill writes every entry of every row (the lengths above are its own merge's
    // on the same pattern: its flags, which bad would hold, are not read).
    let mut m_idx = unsafe { dev.alloc_uninit::<u32>(nnz_m)? };
    fill_pattern(
        dev,
        a,
        diag,
        long.as_ref(),
        gather_max,
        prod,
        &m_ptr,
        &mut m_idx,
        &mut bad,
    )?;
    Ok(Ok((m_ptr, m_idx, nnz_m)))
}

/// Queues the launches that write the product's columns (`ssor_k1_gram_fill_long` over the
/// listed rows `long`, `ssor_k1_gram_fill` over the others, `gather_max` the list's): row `i`
/// at `m_idx[m_ptr[i] ..]`, never past `m_ptr[i + 1]`; a row whose merge finds another number
/// of columns lowers `bad[0]` to its index.
#[allow(clippy::too_many_arguments)]
fn fill_pattern(
    dev: &GpuDevice,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    long: Option<&LongRows>,
    gather_max: u32,
    prod: GramProduct,
    m_ptr: &DeviceVec<u32>,
    m_idx: &mut DeviceVec<u32>,
    bad: &mut DeviceVec<u32>,
) -> Result<(), GpuError> {
    let n = a.nrows();
    let n32 = n as u32;
    if let Some(long) = long {
        let l = long.launch(dev, SsorBuildKernel::GramFillLong)?;
        // SAFETY: matches `ssor_k1_gram_fill_long(const u32 *list, const u32 *count,
        // const u32 *a_ptr, const u32 *a_idx, const u32 *diag, const u32 *m_ptr,
        // u32 *m_idx, u32 *bad)`; the list holds count[0] distinct rows below n, each storing
        // its diagonal at diag[i]; m_ptr holds n + 1 ascending pointers (a scan) whose last is
        // len(m_idx) (the callers' nnz_m, checked before m_idx is read), and row i writes
        // only inside [m_ptr[i], m_ptr[i + 1]); the block's gather reads inside rows of a and
        // writes no column past its shared buffer; bad holds one word.
        unsafe {
            l.run(|b| {
                b.arg(&long.rows.buf)
                    .arg(&long.count.buf)
                    .arg(&a.indptr.buf)
                    .arg(&a.indices.buf)
                    .arg(&diag.pos.buf)
                    .arg(&m_ptr.buf)
                    .arg(&mut m_idx.buf)
                    .arg(&mut bad.buf)
                    .arg(long.prod.arg());
            })
        }?;
    }
    if n > 0 {
        let l = per_row(dev, SsorBuildKernel::GramFill, n)?;
        // SAFETY: matches `ssor_k1_gram_fill(u32 n, const u32 *a_ptr, const u32 *a_idx,
        // const u32 *diag, u32 gather_max, const u32 *m_ptr, u32 *m_idx, u32 *bad)`; a is a
        // square CSR matrix of n rows, each storing its diagonal at diag[i]; each short row
        // (the same gather_max as the list) writes only inside [m_ptr[i], m_ptr[i + 1]) of
        // m_ptr's scan, whose last pointer is len(m_idx) as above; its merge reads inside rows
        // of a and keeps its heads in the kernel's GRAM_MERGE registers; bad holds one word.
        unsafe {
            l.run(|b| {
                b.arg(&n32)
                    .arg(&a.indptr.buf)
                    .arg(&a.indices.buf)
                    .arg(&diag.pos.buf)
                    .arg(&gather_max)
                    .arg(&m_ptr.buf)
                    .arg(&mut m_idx.buf)
                    .arg(&mut bad.buf)
                    .arg(prod.arg());
            })
        }?;
    }
    Ok(())
}

/// What [`ssor_k2_factors`] made.
#[derive(Debug)]
pub enum SsorK2Build {
    /// The factors on the device, with the maps a value refresh reads.
    Built(Box<SsorK2Parts>),
    /// Not built on the device, and why (for the host to build them): a pattern that is not
    /// symmetric, a row uniting rows of the first-order factor that hold more than
    /// [`GRAM_LONG_CAP`] entries together over more than [`GRAM_LONG_SPAN`] columns, or
    /// `2^32` entries or more.
    Refused(String),
}

/// Second-order SSOR-AI's factors built on the device ([`ssor_k2_factors`]).
#[derive(Debug)]
pub struct SsorK2Parts {
    /// `K = I - X + X^2`, `X = omega L D^-1` (lower triangular, unit diagonal).
    pub k: DeviceCsr,
    /// `K^T diag(s)` (upper triangular, diagonal `s`).
    pub kt: DeviceCsr,
    /// The positions of `A`'s diagonal entries.
    pub diag: DeviceDiagonal,
    /// For each entry of `kt`, the position in `k` of its mirror.
    pub kt_src: DeviceGather,
}

/// Second-order SSOR-AI's `K = I - X + X^2` and `K^T diag(s)` built on the device from `a` (a
/// square CSR matrix as `CsrMatrix` uploads it) with relaxation `omega` in (0, 2): the factors
/// `autopcg_solver::Preconditioner::build` makes on the host for the factored form, the same
/// patterns and, term by term in the same order, the same values (up to the sign of a zero).
/// Row `i` of `K` is the union of the first-order `K`'s rows `q` over the columns `q` of its
/// row `i` (the pattern of `X`, of `X^2` and the diagonal), found by the explicit product's
/// merges; its values are the value refresh's kernel. `K^T`'s pattern is the same union over
/// the first-order `K^T` (which is `K`'s transpose where `A`'s pattern is symmetric: checked,
/// every entry's mirror being searched in `K`, and the map kept), its values `K`'s gathered
/// and scaled by column. Every diagonal entry must be stored (an error otherwise); whether the
/// diagonal values are positive is the caller's check. Waits for eight small copies back.
pub fn ssor_k2_factors(
    dev: &GpuDevice,
    a: &DeviceCsr,
    omega: f64,
) -> Result<SsorK2Build, GpuError> {
    ssor_k2_factors_counted(dev, a, omega, None)
}

/// [`ssor_k2_factors`], the patterns of `K` and `K^T` taken from `counted` where given, what
/// [`ssor_k2_totals_kept`] counted of `a` (the plan's count of the factors): each factor's row
/// lengths are scanned into its row pointers and only its columns are written, each row
/// checked to have the length kept, instead of merging every row twice (lengths, then
/// columns). A factor whose kept pattern does not fit `a` (another shape or number of entries)
/// or whose row does not have its length is counted here as without it. Waits for six small
/// copies back with `counted` (eight without).
pub fn ssor_k2_factors_counted(
    dev: &GpuDevice,
    a: &DeviceCsr,
    omega: f64,
    counted: Option<K2Pattern>,
) -> Result<SsorK2Build, GpuError> {
    const WHAT: &str = "second-order SSOR-AI factors on the device";
    check_factors_input(a, omega, WHAT)?;
    let n = a.nrows();
    let invalid = |reason: String| GpuError::InvalidInput {
        what: WHAT.into(),
        reason,
    };
    if n == 0 {
        return Ok(SsorK2Build::Built(Box::new(SsorK2Parts {
            k: empty_csr(dev)?,
            kt: empty_csr(dev)?,
            diag: DeviceDiagonal::from_device(dev.alloc_zeros(0)?, 0),
            kt_src: DeviceGather::from_device(dev.alloc_zeros(0)?, 0),
        })));
    }
    let n32 = n as u32;
    let (diag, len, bad) = lengths(dev, a)?;
    drop(len);
    let flags = dev.download(&bad)?;
    drop(bad);
    let (first_missing, kt_longest) = (flags[0], flags[2] as usize);
    if first_missing < n32 {
        return Err(invalid(format!(
            "row {} stores no diagonal entry",
            first_missing as usize + 1
        )));
    }
    let diag = DeviceDiagonal::from_device(diag, a.nnz());
    let (counted_k, counted_kt) = match counted {
        Some(K2Pattern { k, kt }) => (Some(k), Some(kt)),
        None => (None, None),
    };
    // The rows q a row of K unites are its first-order row (up to the diagonal), whose
    // longest the lengths did not find: every row that may be a block's is listed.
    let (k_ptr, k_idx, nnz_k) =
        match factor_pattern(dev, a, &diag, counted_k, usize::MAX, GramProduct::K2)? {
            Ok(p) => p,
            Err(reason) => return Ok(SsorK2Build::Refused(reason)),
        };
    let (kt_ptr, kt_idx, nnz_kt) =
        match factor_pattern(dev, a, &diag, counted_kt, kt_longest, GramProduct::K2T)? {
            Ok(p) => p,
            Err(reason) => return Ok(SsorK2Build::Refused(reason)),
        };
    let asymmetric = || {
        SsorK2Build::Refused("the matrix's pattern is not symmetric: K^T is not read off it".into())
    };
    if nnz_k != nnz_kt {
        return Ok(asymmetric());
    }
    // SAFETY: ssor_k2_values writes every value of every row of K (zeros first).
    let k_vals = unsafe { dev.alloc_uninit::<f64>(nnz_k)? };
    let mut k = DeviceCsr::from_device(n, n, k_ptr, k_idx, k_vals)?;
    super::refresh::ssor_k_values(dev, a, &diag, omega, 2, &mut k)?;
    let Some(src) = kt_mirrors(dev, n, &kt_ptr, &kt_idx, &k.indptr, &k.indices, nnz_kt)? else {
        return Ok(asymmetric());
    };
    // Every entry of K^T has its mirror in K, each a distinct one, and both hold as many:
    // K^T is K's transpose.
    let kt_src = DeviceGather::from_device(src, nnz_k);
    // SAFETY: gather_scaled_values writes every value of K^T.
    let kt_vals = unsafe { dev.alloc_uninit::<f64>(nnz_kt)? };
    let mut kt = DeviceCsr::from_device(n, n, kt_ptr, kt_idx, kt_vals)?;
    let scale = omega * (2.0 - omega);
    super::refresh::gather_scaled_values(dev, &kt_src, &k, a, &diag, scale, &mut kt)?;
    Ok(SsorK2Build::Built(Box::new(SsorK2Parts {
        k,
        kt,
        diag,
        kt_src,
    })))
}

/// The pattern of second order's factor `prod` of `a`: from the lengths `counted` kept where
/// they fit and every row has its length ([`pattern_from_count`]), else counted here
/// ([`pattern_counted_here`], `kt_longest` as there; `Err` with the reason it is not formed).
fn factor_pattern(
    dev: &GpuDevice,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    counted: Option<GramPattern>,
    kt_longest: usize,
    prod: GramProduct,
) -> Result<Result<GramArrays, String>, GpuError> {
    let kept = match counted.filter(|p| p.fits(dev, a, prod)) {
        Some(p) => pattern_from_count(dev, a, diag, p)?,
        None => None,
    };
    match kept {
        Some(p) => Ok(Ok(p)),
        None => pattern_counted_here(dev, a, diag, kt_longest, prod),
    }
}

/// For each entry of the `n`-row pattern `kt_ptr`, `kt_idx` (`nnz_kt` entries), the position
/// in the pattern `k_ptr`, `k_idx` of its mirror (entry `(j, i)` for `(i, j)`), found by a
/// search of row `j` of K; `None` when an entry has none. Both patterns must be CSR patterns
/// of `n >= 1` rows, columns below `n` and ascending within a row, and hold `nnz_kt` entries
/// each: every entry then has a distinct mirror, and the map is K^T's gather from K. Waits for
/// one small copy back.
fn kt_mirrors(
    dev: &GpuDevice,
    n: usize,
    kt_ptr: &DeviceVec<u32>,
    kt_idx: &DeviceVec<u32>,
    k_ptr: &DeviceVec<u32>,
    k_idx: &DeviceVec<u32>,
    nnz_kt: usize,
) -> Result<Option<DeviceVec<u32>>, GpuError> {
    let n32 = n as u32;
    let mut src = dev.alloc_zeros::<u32>(nnz_kt)?;
    let mut bad = dev.upload(&[n32])?;
    let l = thread_or_warp(dev, SsorBuildKernel::KtSourcesSearch, n, nnz_kt, per_row)?;
    // SAFETY: matches `ssor_kt_sources_search(u32 n, const u32 *kt_ptr, const u32 *kt_idx,
    // const u32 *k_ptr, const u32 *k_idx, u32 *src, u32 *bad)`; kt_ptr, kt_idx and k's arrays
    // are CSR patterns of n rows (scans whose last pointer is the length of their columns,
    // columns below n, ascending within a row: the caller's promise); row i writes src only
    // inside [kt_ptr[i], kt_ptr[i + 1]) of nnz_kt elements; each search reads inside a row of
    // k; a source is either a position in k (below nnz_k = nnz_kt) or 0, which nnz_kt >= n >=
    // 1 holds too; bad holds one word. `ssor_kt_sources_search_warp` takes the same arguments
    // and writes the same places, a warp per row (DEFAULT_THREADS, which per_row launches, is
    // a multiple of 32).
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&kt_ptr.buf)
                .arg(&kt_idx.buf)
                .arg(&k_ptr.buf)
                .arg(&k_idx.buf)
                .arg(&mut src.buf)
                .arg(&mut bad.buf);
        })
    }?;
    Ok((dev.download(&bad)?[0] >= n32).then_some(src))
}

/// What a value refresh of second order's factors [`ssor_k2_factors`] built from `a` needs to
/// recompute them on the device after new values of `a` (see [`super::refresh`]), read off the
/// factors already there rather than formed again: the positions of `a`'s diagonal entries,
/// and for each entry of `kt` (`K^T diag(s)`) the position in `k` of its mirror. `k` and `kt`
/// must hold the patterns the build gives for `a`'s pattern (columns ascending within each
/// row, as the build leaves them; their values are not read); `None` when their shapes or
/// entries are not those of a pair of transposes of `a`'s size, a row of `a` stores no diagonal
/// entry, or an entry of `kt` has no mirror in `k`: nothing is kept then. Waits for two small
/// copies back.
pub fn ssor_k2_refresh_maps(
    dev: &GpuDevice,
    a: &DeviceCsr,
    k: &DeviceCsr,
    kt: &DeviceCsr,
) -> Result<Option<(DeviceDiagonal, DeviceGather)>, GpuError> {
    let n = a.nrows();
    let square = |m: &DeviceCsr| m.shape() == (n, n);
    if a.ncols() != n
        || !square(k)
        || !square(kt)
        || k.nnz() != kt.nnz()
        || k.nnz() < n
        || k.nnz() as u64 >= u64::from(u32::MAX)
    {
        return Ok(None);
    }
    if n == 0 {
        return no_rows_maps(dev).map(Some);
    }
    let (diag, len, bad) = lengths(dev, a)?;
    drop(len);
    if dev.download(&bad)?[0] < n as u32 {
        return Ok(None);
    }
    let Some(src) = kt_mirrors(
        dev,
        n,
        &kt.indptr,
        &kt.indices,
        &k.indptr,
        &k.indices,
        kt.nnz(),
    )?
    else {
        return Ok(None);
    };
    Ok(Some((
        DeviceDiagonal::from_device(diag, a.nnz()),
        DeviceGather::from_device(src, k.nnz()),
    )))
}

/// What [`ssor_k2_totals_kept`] found of the patterns of second order's factors `K` and `K^T`
/// of a matrix on the device (for each, as [`GramPattern`]: its rows' lengths, their sum, the
/// rows a block forms), for [`ssor_k2_factors_counted`] to form them without merging their
/// rows again.
#[derive(Debug)]
pub struct K2Pattern {
    k: GramPattern,
    kt: GramPattern,
}

impl K2Pattern {
    /// Entries of `K` and of `K^T` counted.
    pub fn nnz(&self) -> (u64, u64) {
        (self.k.nnz(), self.kt.nnz())
    }
}

/// The structure of second-order SSOR-AI's factors, `K = I - X + X^2` and `K^T diag(s)`, of
/// `a` (its arrays on the device: only its pattern is read), counted on the device as
/// [`ssor_k1_gram_count`] counts the explicit product's (the same merges [`ssor_k2_factors`]
/// forms the patterns by), nothing of them stored: what the host counts of the factors it
/// builds. `a`'s pattern must be symmetric for the second to be `K^T`'s (the caller's check).
/// `None` where the device does not count them exactly (as [`ssor_k1_gram_count`]). Waits for
/// four copies back, and one more for each factor with a row of [`GRAM_HIST`] entries or
/// more.
pub fn ssor_k2_totals(
    dev: &GpuDevice,
    a: &DeviceCsr,
) -> Result<Option<(StructureTotals, StructureTotals)>, GpuError> {
    Ok(ssor_k2_totals_kept(dev, a)?.map(|(totals, _)| totals))
}

/// The structures of second order's `K` and `K^T` ([`ssor_k2_totals`]).
pub type K2StructureTotals = (StructureTotals, StructureTotals);

/// [`ssor_k2_totals`], with what the counts found of the factors' patterns kept on the device
/// for [`ssor_k2_factors_counted`] to form them from `a` without merging their rows again.
pub fn ssor_k2_totals_kept(
    dev: &GpuDevice,
    a: &DeviceCsr,
) -> Result<Option<(K2StructureTotals, K2Pattern)>, GpuError> {
    let (n, m) = a.shape();
    if !gram_countable(n, m, a.nnz()) {
        return Ok(None);
    }
    let count = |united, prod| gram_count_of(dev, n, &a.indptr, &a.indices, united, prod);
    let Some((k, k_pattern)) = count(Some(usize::MAX), GramProduct::K2)? else {
        return Ok(None);
    };
    let Some((kt, kt_pattern)) = count(None, GramProduct::K2T)? else {
        return Ok(None);
    };
    Ok(Some((
        (k, kt),
        K2Pattern {
            k: k_pattern,
            kt: kt_pattern,
        },
    )))
}

/// Jacobi's inverse diagonal `1 / a_ii` of the square matrix `a`, built on the device from
/// its uploaded arrays ([`diagonal_positions`], then the value refresh's kernel): the values
/// `autopcg_solver::Preconditioner::build` makes on the host, bit for bit (one rounded
/// division each). `None` when a row stores no diagonal entry (whether the diagonal values
/// are positive is the caller's check, as for the host build). Waits for one small copy back.
pub fn jacobi_inv_diag(dev: &GpuDevice, a: &DeviceCsr) -> Result<Option<DeviceVec<f64>>, GpuError> {
    let Some(diag) = diagonal_positions(dev, a)? else {
        return Ok(None);
    };
    // SAFETY: inv_diag writes every element.
    let mut out = unsafe { dev.alloc_uninit::<f64>(a.nrows())? };
    inv_diag(dev, a, &diag, 1.0, &mut out)?;
    Ok(Some(out))
}

/// Counts, on the device, the structure of the square matrix `a` as the SpMV model reads it
/// ([`StructureTotals`], the histogram [`GRAM_HIST`] long): the section of [`ssor_k1_totals`]
/// that counts `A`, for a plan with no factors to count alongside (no preconditioner, Jacobi).
/// One launch on the arrays already uploaded, one copy back.
///
/// `None` where the device does not count it exactly: not square, empty, a row of
/// [`GRAM_HIST`] entries or more, or a sum of distances that could pass 64 bits.
pub fn csr_totals(dev: &GpuDevice, a: &DeviceCsr) -> Result<Option<StructureTotals>, GpuError> {
    let (n, m) = a.shape();
    let nnz = a.nnz();
    if n != m || n == 0 || nnz as u64 >= u64::from(u32::MAX) {
        return Ok(None);
    }
    // Every entry adds at most n - 1 to the distances.
    if (nnz as u128) * (n as u128) >= 1u128 << 63 {
        return Ok(None);
    }
    let words = (2 * n - 1).div_ceil(64);
    let mut out = dev.alloc_zeros::<u64>(GRAM_HEAD + GRAM_HIST + words)?;
    let l = totals_launch(dev, SsorBuildKernel::CsrTotals, n, nnz)?;
    let n32 = n as u32;
    // SAFETY: matches `csr_totals(u32 n, const u32 *a_ptr, const u32 *a_idx, u64 *out)`, as
    // does `csr_totals_warp`; a's
    // arrays are a square CSR matrix of n rows (n + 1 pointers, columns below n), every read
    // stays inside a row; out holds GRAM_HEAD + GRAM_HIST words and the bitmap's words
    // covering the bits below 2n - 1. DEFAULT_THREADS is a multiple of 32, as the kernel's
    // warp rounds need.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .arg(&a.indptr.buf)
                .arg(&a.indices.buf)
                .arg(&mut out.buf);
        })
    }?;
    Ok(totals_at(&dev.download(&out)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_limits_are_the_kernels() {
        let text = crate::sources::source_text(KernelSource::Precond);
        assert!(text.contains(&format!("#define GRAM_MERGE {GRAM_MERGE}\n")));
        assert!(text.contains(&format!("#define GRAM_LONG_CAP {GRAM_LONG_CAP}\n")));
        assert!(text.contains("#define GRAM_BLOCK_MAX 1024\n"));
        assert!(text.contains(&format!("#define GRAM_HIST {GRAM_HIST}\n")));
        // 128-byte lines of doubles, as the SpMV model counts them.
        assert!(text.contains("#define GRAM_LINE_COLS 16\n"));
        assert!(text.contains(&format!("#define GRAM_HEAD {GRAM_HEAD}\n")));
        // No limit on what a short row gathers is the kernels' GRAM_DONE.
        assert_eq!(GRAM_NO_GATHER_LIMIT, 0xffff_ffff);
        assert!(text.contains("#define GRAM_DONE 0xffffffffu\n"));
        assert!(GRAM_SHORT_GATHER < GRAM_LONG_CAP as u32);
    }

    /// Which rows a block forms and which counts a warp takes, pinned on the fixtures that
    /// decided them (H200: 132 multiprocessors): bcsstk13 (2003 rows, 83883 entries) and
    /// s3rmt3m3 (5357, 207695) are small, their short rows sent to blocks by what they gather,
    /// 100^2 Poisson (1e4 rows) is not; bcsstk13 and the 27-point Poisson matrix are counted a
    /// warp per row, 7-point Poisson and 2D FEM (about 7 entries a row) a thread per row.
    #[test]
    fn small_matrices_and_long_rows_are_decided_as_measured() {
        assert_eq!(gather_max_for(2003, 132), GRAM_SHORT_GATHER);
        assert_eq!(gather_max_for(5357, 132), GRAM_SHORT_GATHER);
        assert_eq!(gather_max_for(4 * 16 * 132, 132), GRAM_SHORT_GATHER);
        assert_eq!(gather_max_for(4 * 16 * 132 + 1, 132), GRAM_NO_GATHER_LIMIT);
        assert_eq!(gather_max_for(10_000, 132), GRAM_NO_GATHER_LIMIT);
        // A device reporting no multiprocessor counts as one.
        assert_eq!(gather_max_for(64, 0), GRAM_SHORT_GATHER);
        assert_eq!(gather_max_for(65, 0), GRAM_NO_GATHER_LIMIT);
        assert!(totals_by_warp(2003, 83_883));
        assert!(totals_by_warp(8000, 8000 * 27 - 2400));
        assert!(!totals_by_warp(128 * 128 * 128, 14_581_760));
        assert!(!totals_by_warp(200_000, 1_396_422));
    }

    /// A section reads as the kernels write it: totals, flags, histogram, then the bitmap; a
    /// flag refuses it.
    #[test]
    fn a_section_reads_as_the_kernels_write_it() {
        let mut o: Vec<u64> = (0..(GRAM_HEAD + GRAM_HIST + 3) as u64).collect();
        o[GRAM_HEAD - 1] = 0;
        let t = totals_at(&o).unwrap();
        assert_eq!(
            (t.x_lines, t.dist, t.warp_slots, t.diag_stored),
            (0, 1, 2, 3)
        );
        assert_eq!(t.hist.len(), GRAM_HIST);
        assert_eq!(t.hist[0], GRAM_HEAD as u64);
        assert_eq!(
            t.diagonals,
            ((GRAM_HEAD + GRAM_HIST) as u64..(GRAM_HEAD + GRAM_HIST + 3) as u64)
                .collect::<Vec<_>>()
        );
        o[GRAM_HEAD - 1] = 2;
        assert!(totals_at(&o).is_none());
        assert_eq!(section_totals(&o).hist, t.hist);
    }

    /// Rows past the section's bins are binned from their lengths, the histogram grown to the
    /// longest; shorter rows (already in the section's bins) and uncounted rows (length 0) are
    /// not added again.
    #[test]
    fn rows_past_the_bins_are_binned_from_their_lengths() {
        let mut hist = vec![0u64; GRAM_HIST];
        hist[3] = 2;
        bin_long_rows(
            &mut hist,
            &[3, 0, GRAM_HIST as u32, 3, 4215, GRAM_HIST as u32],
        );
        assert_eq!(hist.len(), 4216);
        assert_eq!((hist[0], hist[3]), (0, 2));
        assert_eq!((hist[GRAM_HIST], hist[4215]), (2, 1));
        assert_eq!(hist.iter().sum::<u64>(), 5);
        let mut short = vec![0u64; GRAM_HIST];
        bin_long_rows(&mut short, &[1, 2, GRAM_HIST as u32 - 1]);
        assert_eq!(short, vec![0u64; GRAM_HIST]);
        // 7M rows of 27 entries, and the largest products whose distances fit.
        assert!(gram_distances_exact(7_077_888, 7_077_888 * 27 * 8));
        assert!(gram_distances_exact(1 << 31, (1 << 31) - 1));
        assert!(!gram_distances_exact(1 << 31, 1 << 32));
    }

    #[test]
    fn names_are_the_entry_points() {
        let names: Vec<String> = SsorBuildKernel::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names,
            [
                "ssor_k1_lengths",
                "ssor_k1_build",
                "ssor_k1_build_warp",
                "ssor_k1_kt_sources",
                "ssor_k1_kt_sources_warp",
                "ssor_k1_gram_count",
                "ssor_k1_gram_list",
                "ssor_k1_gram_count_long",
                "ssor_k1_gram_lengths_long",
                "ssor_k1_gram_fill_long",
                "csr_row_checks",
                "ssor_k1_totals",
                "csr_totals",
                "ssor_k1_totals_warp",
                "csr_totals_warp",
                "ssor_k1_gram_lengths",
                "ssor_k1_gram_fill",
                "ssor_k1_checks",
                "ssor_k1_checks_warp",
                "ssor_kt_sources_search",
                "ssor_kt_sources_search_warp",
            ]
        );
    }
}
