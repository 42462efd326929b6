//! `convert.cu`: row-length histograms, COO row counts and the exclusive scan, the GPU side of
//! matrix statistics and format conversion (COO to CSR row pointers); and the padded formats
//! built on the device from an uploaded CSR matrix ([`csr_to_ell`], [`csr_to_dia`],
//! [`csr_to_hyb`]), each equal, array for array, to the upload of the host conversion.
//!
//! A device conversion first counts (the longest row, the diagonals, the entries past the HYB
//! split), copies that one number to the host, applies the host conversions' padding rule
//! ([`PaddingLimits::check`]) and only then allocates and fills the result, so a refused format
//! allocates nothing but the counting temporaries. It assumes the canonical CSR that
//! `CsrMatrix` uploads (columns ascending within a row, no duplicates); any CSR that passed
//! the upload checks gives a result that is safe to read.

use autopcg_sparse::{PaddingLimits, SparseError};
use cudarc::driver::PushKernelArg;

use super::{check_len, Launch, PushGroups};
use crate::sources::KernelSource;
use crate::{
    DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, DeviceVec, GpuDevice, GpuError,
    LaunchConfig, DEFAULT_THREADS,
};

/// Bins of the row-length histogram (`HIST_BINS` in convert.cu): bin b counts rows of length b,
/// the last bin every row of length >= `HIST_BINS - 1`.
pub const HIST_BINS: usize = 1024;

/// Elements each thread of the scan handles (`SCAN_ITEMS` in convert.cu).
pub const SCAN_ITEMS: usize = 8;

pub use autopcg_catalog::ConvertKernel;

fn load(dev: &GpuDevice, kernel: ConvertKernel, cfg: LaunchConfig) -> Result<Launch<'_>, GpuError> {
    Launch::plain(dev, KernelSource::Convert, &kernel, cfg)
}

/// Histogram of the row lengths of `a` into `hist` ([`HIST_BINS`] entries, overwritten).
pub fn row_length_histogram(
    dev: &GpuDevice,
    a: &DeviceCsr,
    cfg: LaunchConfig,
    hist: &mut DeviceVec<u32>,
) -> Result<(), GpuError> {
    let kernel = ConvertKernel::HistRowLengths;
    check_len(&kernel, "hist", hist.len(), HIST_BINS)?;
    cfg.check(kernel, dev.props())?;
    dev.fill_zeros(hist)?;
    if a.nrows() == 0 {
        return Ok(());
    }
    let l = load(dev, kernel, cfg)?;
    let nrows = a.nrows() as u32;
    // SAFETY: matches `hist_row_lengths(u32 nrows, const u32 *indptr, u32 *hist)`; indptr has
    // nrows + 1 entries (validated on upload), hist HIST_BINS (checked) and zeroed above.
    unsafe {
        l.run(|b| {
            b.arg(&nrows).arg(&a.indptr.buf).arg(&mut hist.buf);
        })
    }
}

/// Entries per row of `a` into `counts` (nrows entries, overwritten).
pub fn coo_row_counts(
    dev: &GpuDevice,
    a: &DeviceCoo,
    cfg: LaunchConfig,
    counts: &mut DeviceVec<u32>,
) -> Result<(), GpuError> {
    let kernel = ConvertKernel::CooRowCounts;
    check_len(&kernel, "counts", counts.len(), a.nrows())?;
    cfg.check(kernel, dev.props())?;
    dev.fill_zeros(counts)?;
    if a.nnz() == 0 {
        return Ok(());
    }
    let l = load(dev, kernel, cfg)?;
    let nnz = a.nnz() as u32;
    // SAFETY: matches `coo_row_counts(u32 nnz, const u32 *rows, u32 *count)`; rows holds nnz
    // indices below nrows = len(counts) (validated on upload and checked), counts zeroed above.
    unsafe {
        l.run(|b| {
            b.arg(&nnz).arg(&a.rows.buf).arg(&mut counts.buf);
        })
    }
}

/// Device memory of the scan: one sum per tile.
#[derive(Debug)]
pub struct ScanWorkspace {
    tile_sums: DeviceVec<u32>,
}

impl ScanWorkspace {
    /// Room for scans of up to `max_tiles` tiles (a tile is threads x [`SCAN_ITEMS`] elements).
    pub fn new(dev: &GpuDevice, max_tiles: usize) -> Result<ScanWorkspace, GpuError> {
        Ok(ScanWorkspace {
            tile_sums: dev.alloc_zeros(max_tiles.max(1))?,
        })
    }

    /// Tiles needed to scan n elements with `threads` threads per block.
    pub fn tiles(n: usize, threads: u32) -> usize {
        n.div_ceil(threads as usize * SCAN_ITEMS)
    }
}

/// `out[i] = input[0] + ... + input[i - 1]` for i <= n (so `out[n]` is the total; `out` has
/// n + 1 entries), with `threads` threads per block (a multiple of 32) in three launches.
pub fn exclusive_scan(
    dev: &GpuDevice,
    threads: u32,
    input: &DeviceVec<u32>,
    out: &mut DeviceVec<u32>,
    ws: &mut ScanWorkspace,
) -> Result<(), GpuError> {
    let n = input.len();
    let kernel = ConvertKernel::ScanApply;
    check_len(&kernel, "out", out.len(), n + 1)?;
    let tiles = ScanWorkspace::tiles(n, threads);
    let cfg = LaunchConfig::new(threads, tiles.max(1).try_into().unwrap_or(u32::MAX));
    cfg.check(kernel, dev.props())?;
    if threads % 32 != 0 {
        return Err(GpuError::launch(
            kernel,
            format!("{threads} threads per block is not a multiple of 32"),
        ));
    }
    if tiles > ws.tile_sums.len() {
        return Err(GpuError::launch(
            kernel,
            format!(
                "{tiles} tiles but the workspace holds {}",
                ws.tile_sums.len()
            ),
        ));
    }
    let n32 = u32::try_from(n)
        .map_err(|_| GpuError::launch(kernel, format!("{n} elements exceed the 32-bit range")))?;
    if n == 0 {
        return dev.fill_zeros(out);
    }
    let t32 = tiles as u32;
    let sums = load(dev, ConvertKernel::ScanTileSums, cfg)?;
    // SAFETY: matches `scan_tile_sums(u32 n, const u32 *in, u32 *tile_sums)`; in holds n, the
    // workspace >= tiles = blocks entries (checked); threads a multiple of 32 (checked).
    unsafe {
        sums.run(|b| {
            b.arg(&n32).arg(&input.buf).arg(&mut ws.tile_sums.buf);
        })
    }?;
    let one = LaunchConfig::new(threads, 1);
    let offs = load(dev, ConvertKernel::ScanTileOffsets, one)?;
    // SAFETY: matches `scan_tile_offsets(u32 ntiles, u32 *tile_sums)`; the workspace holds
    // >= ntiles entries; one block whose size is a multiple of 32.
    unsafe {
        offs.run(|b| {
            b.arg(&t32).arg(&mut ws.tile_sums.buf);
        })
    }?;
    let apply = load(dev, kernel, cfg)?;
    // SAFETY: matches `scan_apply(u32 n, const u32 *in, u32 *out, const u32 *tile_offsets)`;
    // in holds n, out n + 1 (checked), tile_offsets one per block; same threads as stage 1.
    unsafe {
        apply.run(|b| {
            b.arg(&n32)
                .arg(&input.buf)
                .arg(&mut out.buf)
                .arg(&ws.tile_sums.buf);
        })
    }
}

/// CSR row pointers (nrows + 1 entries) of a row-sorted COO matrix: row counts, then an
/// exclusive scan. Uses [`crate::DEFAULT_THREADS`] threads per block.
pub fn coo_row_pointers(dev: &GpuDevice, a: &DeviceCoo) -> Result<DeviceVec<u32>, GpuError> {
    let threads = crate::DEFAULT_THREADS;
    let mut counts = dev.alloc_zeros::<u32>(a.nrows())?;
    let cfg = LaunchConfig::grid_stride(a.nnz() as u64, threads, dev.props());
    coo_row_counts(dev, a, cfg, &mut counts)?;
    let mut ptr = dev.alloc_zeros::<u32>(a.nrows() + 1)?;
    let mut ws = ScanWorkspace::new(dev, ScanWorkspace::tiles(a.nrows(), threads))?;
    exclusive_scan(dev, threads, &counts, &mut ptr, &mut ws)?;
    Ok(ptr)
}

/// Histogram of the lengths of the rows of `a` at least `base` long into `hist`
/// ([`HIST_BINS`] entries, overwritten): bin b counts rows of length `base + b`, the last bin
/// every row of length `base + HIST_BINS - 1` or more.
pub fn row_length_histogram_from(
    dev: &GpuDevice,
    a: &DeviceCsr,
    base: u32,
    cfg: LaunchConfig,
    hist: &mut DeviceVec<u32>,
) -> Result<(), GpuError> {
    let kernel = ConvertKernel::HistRowLengthsFrom;
    check_len(&kernel, "hist", hist.len(), HIST_BINS)?;
    cfg.check(kernel, dev.props())?;
    dev.fill_zeros(hist)?;
    if a.nrows() == 0 {
        return Ok(());
    }
    let l = load(dev, kernel, cfg)?;
    let nrows = a.nrows() as u32;
    // SAFETY: matches `hist_row_lengths_from(u32 nrows, u32 base, const u32 *indptr,
    // u32 *hist)`; indptr has nrows + 1 entries (validated on upload), hist HIST_BINS (checked)
    // and zeroed above.
    unsafe {
        l.run(|b| {
            b.arg(&nrows)
                .arg(&base)
                .arg(&a.indptr.buf)
                .arg(&mut hist.buf);
        })
    }
}

/// The grid-stride configuration of the conversion kernels: [`DEFAULT_THREADS`] threads, one
/// resident wave, no more threads than `work` items.
fn conversion_config(dev: &GpuDevice, work: u64) -> LaunchConfig {
    LaunchConfig::grid_stride(work.max(1), DEFAULT_THREADS, dev.props())
}

/// The checked launch of `kernel` with the [`conversion_config`] for `work` items.
fn conversion_launch(
    dev: &GpuDevice,
    kernel: ConvertKernel,
    work: u64,
) -> Result<Launch<'_>, GpuError> {
    let cfg = conversion_config(dev, work);
    cfg.check(kernel, dev.props())?;
    load(dev, kernel, cfg)
}

/// Length of the longest row of `a` (0 without rows), computed on the device; waits for it.
pub fn max_row_length(dev: &GpuDevice, a: &DeviceCsr) -> Result<usize, GpuError> {
    if a.nrows() == 0 {
        return Ok(0);
    }
    let l = conversion_launch(dev, ConvertKernel::RowLengthMax, a.nrows() as u64)?;
    let mut out = dev.alloc_zeros::<u32>(1)?;
    let nrows = a.nrows() as u32;
    // SAFETY: matches `row_length_max(u32 nrows, const u32 *indptr, u32 *out)`; indptr has
    // nrows + 1 entries (validated on upload), out one zeroed entry; DEFAULT_THREADS threads
    // per block are whole warps.
    unsafe {
        l.run(|b| {
            b.arg(&nrows).arg(&a.indptr.buf).arg(&mut out.buf);
        })
    }?;
    Ok(dev.download(&out)?[0] as usize)
}

/// What one histogram pass says about the one-third split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SplitPass {
    /// The split.
    Found(usize),
    /// At least a third of the rows are `base + HIST_BINS - 1` or more long: look further.
    Beyond,
}

/// The one-third rule from one pass of [`row_length_histogram_from`] at `base` (`bins[b]`
/// counts rows of length `base + b`, the last bin the longer ones): the largest `h >= 1`
/// (`h >= base`) such that at least `need` rows have `h` or more entries; `Found(0)` when no
/// `h >= 1` qualifies (only possible when `base` is 0).
fn one_third_pass(bins: &[u32], base: usize, need: u64) -> SplitPass {
    let mut at_least = 0u64;
    let lowest = usize::from(base == 0);
    for b in (lowest..bins.len()).rev() {
        at_least += u64::from(bins[b]);
        if at_least >= need {
            return if b + 1 == bins.len() {
                SplitPass::Beyond
            } else {
                SplitPass::Found(base + b)
            };
        }
    }
    // A later pass only starts when enough rows reach its base, so it always finds the split.
    SplitPass::Found(base)
}

/// The one-third split of a matrix of `nrows` rows from histogram passes: `bins_from(base)`
/// gives the histogram of the rows at least `base` long; the first pass has base 0, and a
/// further pass (base raised by `HIST_BINS - 1`) is made only while a third of the rows are
/// longer than the last bin of the pass before.
fn one_third_by_passes(
    nrows: usize,
    mut bins_from: impl FnMut(u32) -> Result<Vec<u32>, GpuError>,
) -> Result<usize, GpuError> {
    if nrows == 0 {
        return Ok(0);
    }
    let need = (nrows as u64).div_ceil(3);
    let mut base = 0u32;
    loop {
        let bins = bins_from(base)?;
        match one_third_pass(&bins, base as usize, need) {
            SplitPass::Found(h) => return Ok(h),
            SplitPass::Beyond => {
                base = base.checked_add(HIST_BINS as u32 - 1).ok_or_else(|| {
                    GpuError::launch(
                        ConvertKernel::HistRowLengthsFrom,
                        "row lengths beyond the 32-bit range",
                    )
                })?;
            }
        }
    }
}

/// The one-third split of `a` (the largest H such that at least a third of the rows have H or
/// more entries, 0 without rows), from row-length histograms on the device: the same H as
/// `autopcg_sparse::hyb::one_third_split` of the host matrix. One histogram pass, plus one per
/// further `HIST_BINS - 1` of length when a third of the rows are that long; waits for each.
pub fn one_third_split(dev: &GpuDevice, a: &DeviceCsr) -> Result<usize, GpuError> {
    let cfg = conversion_config(dev, a.nrows() as u64);
    let mut hist = dev.alloc_zeros::<u32>(HIST_BINS)?;
    one_third_by_passes(a.nrows(), |base| {
        row_length_histogram_from(dev, a, base, cfg, &mut hist)?;
        dev.download(&hist)
    })
}

/// Queues `ell_from_csr` into `cols` and `vals` (width x nrows each, written in full).
fn fill_ell(
    dev: &GpuDevice,
    a: &DeviceCsr,
    width: u32,
    cols: &mut DeviceVec<u32>,
    vals: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let kernel = ConvertKernel::EllFromCsr;
    let slots = width as usize * a.nrows();
    check_len(&kernel, "cols", cols.len(), slots)?;
    check_len(&kernel, "vals", vals.len(), slots)?;
    if slots == 0 {
        return Ok(());
    }
    let l = conversion_launch(dev, kernel, a.nrows() as u64)?;
    let nrows = a.nrows() as u32;
    // SAFETY: matches `ell_from_csr(u32 nrows, u32 width, const u32 *indptr,
    // const u32 *indices, const double *vals, u32 *ecols, double *evals)`; the CSR arrays were
    // validated on upload (entry start + k < indptr[row + 1] <= nnz for k < len), ecols and
    // evals hold width x nrows slots (checked).
    unsafe {
        l.run(|b| {
            b.arg(&nrows)
                .arg(&width)
                .csr(a)
                .arg(&mut cols.buf)
                .arg(&mut vals.buf);
        })
    }
}

/// `width` as the kernels' u32, or a [`GpuError::Sparse`] `TooLarge`.
fn width_u32(what: &str, width: usize) -> Result<u32, GpuError> {
    u32::try_from(width).map_err(|_| {
        GpuError::Sparse(SparseError::TooLarge(format!(
            "{what} {width} exceeds the 32-bit range"
        )))
    })
}

/// `n` slots of u32 and f64 for an ELL (part) of `width * nrows` slots, written in full by
/// [`fill_ell`].
fn ell_arrays(dev: &GpuDevice, slots: usize) -> Result<(DeviceVec<u32>, DeviceVec<f64>), GpuError> {
    // SAFETY: fill_ell writes every one of the `slots` slots (entry or padding) before the
    // result is returned to anyone.
    unsafe { Ok((dev.alloc_uninit(slots)?, dev.alloc_uninit(slots)?)) }
}

/// ELL of width K = the longest row, built on the device from `a`; equals
/// `DeviceEll::upload(&EllMatrix::from_csr(host, limits))` array for array. Refused with
/// [`GpuError::Sparse`] (`SparseError::TooMuchPadding`, format `"ELL"`) before the padded
/// arrays are allocated, by the host conversion's rule. Waits for the longest row.
pub fn csr_to_ell(
    dev: &GpuDevice,
    a: &DeviceCsr,
    limits: &PaddingLimits,
) -> Result<DeviceEll, GpuError> {
    let k = max_row_length(dev, a)?;
    let n = a.nrows();
    let slots = k as u128 * n as u128;
    limits.check("ELL", slots, a.nnz(), slots * 12)?;
    let width = width_u32("ELL width", k)?;
    let slots = k * n;
    let (mut cols, mut vals) = ell_arrays(dev, slots)?;
    fill_ell(dev, a, width, &mut cols, &mut vals)?;
    Ok(DeviceEll::from_device(n, a.ncols(), k, cols, vals))
}

/// The smallest index b in `0..len` whose inclusive count (`fetch(b + 1)`, the exclusive scan
/// of the flags at b + 1) reaches `target`, by bisection over the non-decreasing scan; `len`
/// when none does.
fn first_reaching(
    len: usize,
    target: u32,
    mut fetch: impl FnMut(usize) -> Result<u32, GpuError>,
) -> Result<usize, GpuError> {
    let (mut lo, mut hi) = (0usize, len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fetch(mid + 1)? >= target {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

/// DIA of every diagonal holding a stored entry, built on the device from `a`: a flag per
/// possible offset (`j - i + nrows - 1`), an exclusive scan of the flags to number the
/// diagonals, then the offsets and the band. Equals `DeviceDia::upload(&DiaMatrix::from_csr(
/// host, limits))` array for array. Refused with [`GpuError::Sparse`] before the band is
/// allocated, as the host conversion refuses: `SparseError::TooMuchPadding` (format `"DIA"`),
/// or `SparseError::TooLarge` for offsets outside `i32`. Waits for the diagonal count.
pub fn csr_to_dia(
    dev: &GpuDevice,
    a: &DeviceCsr,
    limits: &PaddingLimits,
) -> Result<DeviceDia, GpuError> {
    let (n, m) = (a.nrows(), a.ncols());
    if n == 0 || m == 0 {
        limits.check("DIA", 0, a.nnz(), 0)?;
        return Ok(DeviceDia::from_device(
            n,
            m,
            dev.alloc_zeros(0)?,
            dev.alloc_zeros(0)?,
        ));
    }
    let nbits = n + m - 1;
    let nbits32 = u32::try_from(nbits).map_err(|_| GpuError::InvalidInput {
        what: "DIA conversion on the device".into(),
        reason: format!(
            "{n} rows + {m} columns - 1 = {nbits} possible diagonals exceed the 32-bit scan"
        ),
    })?;
    let threads = DEFAULT_THREADS;
    let mut flags = dev.alloc_zeros::<u32>(nbits)?;
    if a.nnz() > 0 {
        let kernel = ConvertKernel::DiaMark;
        let l = conversion_launch(dev, kernel, a.nnz() as u64)?;
        let (nrows, nnz) = (n as u32, a.nnz() as u32);
        // SAFETY: matches `dia_mark(u32 nrows, u32 nnz, const u32 *indptr, const u32 *indices,
        // u32 *flags)`; indptr is non-decreasing from 0 to nnz and indices < ncols (validated
        // on upload), so every flag index j + nrows - 1 - i is below nrows + ncols - 1 = the
        // length of flags.
        unsafe {
            l.run(|b| {
                b.arg(&nrows)
                    .arg(&nnz)
                    .arg(&a.indptr.buf)
                    .arg(&a.indices.buf)
                    .arg(&mut flags.buf);
            })
        }?;
    }
    // SAFETY: exclusive_scan writes all nbits + 1 entries.
    let mut rank = unsafe { dev.alloc_uninit::<u32>(nbits + 1)? };
    let mut ws = ScanWorkspace::new(dev, ScanWorkspace::tiles(nbits, threads))?;
    exclusive_scan(dev, threads, &flags, &mut rank, &mut ws)?;
    drop(ws);
    let ndiag = dev.download_range(&rank, nbits, nbits + 1)?[0] as usize;
    let slots = ndiag as u128 * n as u128;
    limits.check("DIA", slots, a.nnz(), slots * 8 + ndiag as u128 * 4)?;
    let shift = n - 1;
    if ndiag > 0 && (shift > i32::MAX as usize || m - 1 > i32::MAX as usize) {
        // Offsets run from -(nrows - 1) to ncols - 1: only here can one leave i32. The extreme
        // set flags, found by bisection over the scan, decide as the host does.
        let fetch =
            |i: usize| -> Result<u32, GpuError> { Ok(dev.download_range(&rank, i, i + 1)?[0]) };
        let lo = first_reaching(nbits, 1, fetch)? as i64 - shift as i64;
        let hi = first_reaching(nbits, ndiag as u32, fetch)? as i64 - shift as i64;
        if lo < i64::from(i32::MIN) || hi > i64::from(i32::MAX) {
            return Err(GpuError::Sparse(SparseError::TooLarge(format!(
                "diagonal offsets {lo} .. {hi} do not fit 32-bit signed integers"
            ))));
        }
    }
    // SAFETY: dia_offsets writes offsets[rank[b]] for every set flag b, and the ranks of the
    // ndiag set flags are 0..ndiag.
    let mut offsets = unsafe { dev.alloc_uninit::<i32>(ndiag)? };
    let mut data = dev.alloc_zeros::<f64>(ndiag * n)?;
    if ndiag > 0 {
        let kernel = ConvertKernel::DiaOffsets;
        let l = conversion_launch(dev, kernel, nbits as u64)?;
        let shift32 = shift as u32;
        // SAFETY: matches `dia_offsets(u32 nbits, u32 shift, const u32 *flags,
        // const u32 *rank, int *offsets)`; flags holds nbits entries, rank their exclusive
        // scan (nbits + 1 entries), so rank[b] < ndiag = len(offsets) for every set flag; the
        // offsets fit i32 (checked above).
        unsafe {
            l.run(|b| {
                b.arg(&nbits32)
                    .arg(&shift32)
                    .arg(&flags.buf)
                    .arg(&rank.buf)
                    .arg(&mut offsets.buf);
            })
        }?;

        let kernel = ConvertKernel::DiaFromCsr;
        let l = conversion_launch(dev, kernel, n as u64)?;
        let nrows = n as u32;
        // SAFETY: matches `dia_from_csr(u32 nrows, const u32 *indptr, const u32 *indices,
        // const double *vals, const u32 *rank, double *data)`; every entry's flag is set (by
        // dia_mark above), so its rank is below ndiag and the slot rank * nrows + row is below
        // ndiag * nrows = len(data).
        unsafe {
            l.run(|b| {
                b.arg(&nrows).csr(a).arg(&rank.buf).arg(&mut data.buf);
            })
        }?;
    }
    Ok(DeviceDia::from_device(n, m, offsets, data))
}

/// HYB built on the device from `a`: an ELL part of width H (`split`, or the one-third rule
/// computed on the device by [`one_third_split`] when `None`) and a COO part of the entries
/// past H of every row, in row order (per-row overflow counts, an exclusive scan, a scatter).
/// Equals `DeviceHyb::upload(&HybMatrix::from_csr(host, split, limits))` array for array.
/// Refused with [`GpuError::Sparse`] (`SparseError::TooMuchPadding`, format `"HYB"`) before
/// the ELL part is allocated, by the host conversion's rule. Waits for H and the size of the
/// COO part.
pub fn csr_to_hyb(
    dev: &GpuDevice,
    a: &DeviceCsr,
    split: Option<usize>,
    limits: &PaddingLimits,
) -> Result<DeviceHyb, GpuError> {
    let h = match split {
        Some(h) => h,
        None => one_third_split(dev, a)?,
    };
    let (n, m) = (a.nrows(), a.ncols());
    let threads = DEFAULT_THREADS;
    // Entries past H per row, and their row pointers.
    let h32 = u32::try_from(h).unwrap_or(u32::MAX);
    let mut coo_ptr = dev.alloc_zeros::<u32>(n + 1)?;
    if n > 0 {
        // SAFETY: hyb_overflow_counts writes all n counts.
        let mut counts = unsafe { dev.alloc_uninit::<u32>(n)? };
        let kernel = ConvertKernel::HybOverflowCounts;
        let l = conversion_launch(dev, kernel, n as u64)?;
        let nrows = n as u32;
        // SAFETY: matches `hyb_overflow_counts(u32 nrows, u32 split, const u32 *indptr,
        // u32 *counts)`; indptr has nrows + 1 entries (validated on upload), counts nrows.
        unsafe {
            l.run(|b| {
                b.arg(&nrows)
                    .arg(&h32)
                    .arg(&a.indptr.buf)
                    .arg(&mut counts.buf);
            })
        }?;
        let mut ws = ScanWorkspace::new(dev, ScanWorkspace::tiles(n, threads))?;
        exclusive_scan(dev, threads, &counts, &mut coo_ptr, &mut ws)?;
    }
    let coo_nnz = dev.download_range(&coo_ptr, n, n + 1)?[0] as usize;
    let in_ell = a.nnz().checked_sub(coo_nnz).ok_or_else(|| {
        GpuError::launch(
            ConvertKernel::HybOverflowCounts,
            format!(
                "{coo_nnz} entries past the split of a matrix of {}",
                a.nnz()
            ),
        )
    })?;
    let slots = h as u128 * n as u128;
    limits.check("HYB", slots, in_ell, slots * 12)?;
    let width = width_u32("HYB split", h)?;
    let slots = h * n;
    let (mut cols, mut vals) = ell_arrays(dev, slots)?;
    fill_ell(dev, a, width, &mut cols, &mut vals)?;
    let ell = DeviceEll::from_device(n, m, h, cols, vals);
    // SAFETY: hyb_coo_from_csr writes all coo_nnz entries of the three arrays.
    let (mut crows, mut ccols, mut cvals) = unsafe {
        (
            dev.alloc_uninit::<u32>(coo_nnz)?,
            dev.alloc_uninit::<u32>(coo_nnz)?,
            dev.alloc_uninit::<f64>(coo_nnz)?,
        )
    };
    if coo_nnz > 0 {
        let kernel = ConvertKernel::HybCooFromCsr;
        let l = conversion_launch(dev, kernel, coo_nnz as u64)?;
        let (nrows, cnnz) = (n as u32, coo_nnz as u32);
        // SAFETY: matches `hyb_coo_from_csr(u32 nrows, u32 coo_nnz, u32 split,
        // const u32 *indptr, const u32 *indices, const double *vals, const u32 *coo_ptr,
        // u32 *crows, u32 *ccols, double *cvals)`; coo_ptr is the exclusive scan of the
        // entries past split per row (nrows + 1 entries, ending at coo_nnz), so entry p lies
        // in a row i with coo_ptr[i] <= p < coo_ptr[i + 1] and its source indptr[i] + split +
        // p - coo_ptr[i] < indptr[i + 1]; the outputs hold coo_nnz entries.
        unsafe {
            l.run(|b| {
                b.arg(&nrows)
                    .arg(&cnnz)
                    .arg(&width)
                    .csr(a)
                    .arg(&coo_ptr.buf)
                    .arg(&mut crows.buf)
                    .arg(&mut ccols.buf)
                    .arg(&mut cvals.buf);
            })
        }?;
    }
    let coo = DeviceCoo::from_device(n, m, crows, ccols, cvals);
    DeviceHyb::from_parts(ell, coo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_the_cuda_source() {
        let src = crate::sources::source_text(KernelSource::Convert);
        assert!(src.contains(&format!("#define HIST_BINS {HIST_BINS}\n")));
        assert!(src.contains(&format!("#define SCAN_ITEMS {SCAN_ITEMS}\n")));
        assert_eq!(ScanWorkspace::tiles(0, 256), 0);
        assert_eq!(ScanWorkspace::tiles(2048, 256), 1);
        assert_eq!(ScanWorkspace::tiles(2049, 256), 2);
    }

    /// The bins a histogram pass at `base` gives for these row lengths.
    fn bins(lens: &[usize], base: usize) -> Vec<u32> {
        let mut h = vec![0u32; HIST_BINS];
        for &l in lens.iter().filter(|&&l| l >= base) {
            h[(l - base).min(HIST_BINS - 1)] += 1;
        }
        h
    }

    fn split_of(lens: &[usize]) -> (usize, usize) {
        let mut passes = 0;
        let h = one_third_by_passes(lens.len(), |base| {
            passes += 1;
            Ok(bins(lens, base as usize))
        })
        .unwrap();
        (h, passes)
    }

    #[test]
    fn one_third_split_from_passes_matches_the_host_rule() {
        use autopcg_sparse::hyb::one_third_split as host_split;
        use autopcg_sparse::CsrMatrix;
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        // Row-length mixes: short rows, a third just below / at / above the last bin of the
        // first pass, two and three passes deep, and none at all.
        let cases: Vec<Vec<usize>> = vec![
            vec![],
            vec![0],
            vec![0, 0, 0, 0],
            vec![3],
            vec![1, 0, 0],
            vec![1, 0, 0, 0],
            (0..50).map(|_| rng.random_range(0..12)).collect(),
            (0..30).map(|i| if i % 3 == 0 { 1022 } else { 2 }).collect(),
            (0..30).map(|i| if i % 3 == 0 { 1023 } else { 2 }).collect(),
            (0..30)
                .map(|i| if i % 3 == 0 { 1024 + i } else { 2 })
                .collect(),
            (0..31).map(|i| if i % 3 == 0 { 2046 } else { 2 }).collect(),
            (0..31)
                .map(|i| if i % 3 == 0 { 2500 + i } else { 2 })
                .collect(),
            (0..9).map(|i| 100 + 500 * i).collect(),
        ];
        for lens in cases {
            let n = lens.len();
            let ncols = lens.iter().copied().max().unwrap_or(0).max(1);
            let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
            for (i, &l) in lens.iter().enumerate() {
                for j in 0..l {
                    r.push(i as u32);
                    c.push(j as u32);
                    v.push(1.0);
                }
            }
            let a = CsrMatrix::from_triplets(n, ncols, &r, &c, &v).unwrap();
            let (h, passes) = split_of(&lens);
            assert_eq!(h, host_split(&a), "lengths {lens:?}");
            let want_passes = if n == 0 { 0 } else { 1 + h / (HIST_BINS - 1) };
            assert_eq!(passes, want_passes, "passes for H = {h}");
        }
    }

    #[test]
    fn bisection_finds_the_extreme_flags() {
        // flags 0 1 0 0 1 1 0 -> exclusive scan 0 0 1 1 1 2 3 3
        let scan = [0u32, 0, 1, 1, 1, 2, 3, 3];
        let fetch = |i: usize| Ok(scan[i]);
        assert_eq!(first_reaching(7, 1, fetch).unwrap(), 1);
        assert_eq!(first_reaching(7, 3, fetch).unwrap(), 5);
        assert_eq!(first_reaching(7, 4, fetch).unwrap(), 7);
        assert_eq!(first_reaching(0, 1, fetch).unwrap(), 0);
    }
}
