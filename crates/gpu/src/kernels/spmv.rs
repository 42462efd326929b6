//! `spmv_*.cu`: y = A x in every device format, and the per-matrix workspace of the merge-path
//! CSR kernel ([`CsrMergeWorkspace`]).

use cudarc::driver::PushKernelArg;

use super::dot::Dot3Workspace;
use super::{check_len, Launch, PushGroups};
use crate::formats::{DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, Format};
use crate::sources::{KernelSource, ModuleSpec};
use crate::{CgScalars, DeviceVec, GpuDevice, GpuError, LaunchConfig, DEFAULT_THREADS};

pub use autopcg_catalog::kernels::{
    merge_smem_bytes, merge_tiles, CSR_LANES, MERGE_FIXUP, MERGE_ITEMS, MERGE_MAX_THREADS,
    MERGE_PARTITION, MERGE_SMEM_PER_WARP, MERGE_TILE,
};
pub use autopcg_catalog::SpmvKernel;

/// Checks that `kernel` reads `format` and can run `cfg` on `dev`.
fn check(
    kernel: SpmvKernel,
    dev: &GpuDevice,
    cfg: LaunchConfig,
    format: Format,
) -> Result<(), GpuError> {
    if kernel.format() != format {
        return Err(GpuError::launch(
            kernel,
            format!("reads {} but was given a {format} matrix", kernel.format()),
        ));
    }
    Ok(kernel.check_launch(cfg, dev.props())?)
}

/// Fails unless x holds ncols and y nrows elements of a matrix of shape `(nrows, ncols)`.
fn check_xy(
    kernel: SpmvKernel,
    (nrows, ncols): (usize, usize),
    x: &DeviceVec<f64>,
    y: &DeviceVec<f64>,
) -> Result<(), GpuError> {
    check_len(&kernel, "x", x.len(), ncols)?;
    check_len(&kernel, "y", y.len(), nrows)
}

/// The checks every SpMV wrapper makes ([`check`], then x of `ncols` and y of `nrows`
/// elements), then the launch of `kernel` with `cfg`, or `None` when there are no `items`
/// (rows or entries) to work on.
#[allow(clippy::too_many_arguments)]
fn prepare<'d>(
    dev: &'d GpuDevice,
    kernel: SpmvKernel,
    cfg: LaunchConfig,
    format: Format,
    shape: (usize, usize),
    x: &DeviceVec<f64>,
    y: &DeviceVec<f64>,
    items: usize,
) -> Result<Option<Launch<'d>>, GpuError> {
    check(kernel, dev, cfg, format)?;
    check_xy(kernel, shape, x, y)?;
    if items == 0 {
        return Ok(None);
    }
    Launch::plain(dev, kernel.source(), &kernel, cfg).map(Some)
}

/// The device memory [`SpmvKernel::CsrMerge`] needs for one matrix, allocated once (by
/// [`DeviceCsr::prepare_merge`]) and reused by every SpMV: where the merge path of the matrix
/// crosses each tile boundary (computed when the workspace is made), and one carry-out (row,
/// partial sum) per tile, overwritten by every SpMV.
#[derive(Debug)]
pub struct CsrMergeWorkspace {
    nrows: usize,
    nnz: usize,
    ntiles: u32,
    tile_rows: DeviceVec<u32>,
    carry_rows: DeviceVec<u32>,
    carry_vals: DeviceVec<f64>,
}

impl CsrMergeWorkspace {
    /// Allocates the workspace of `a` and queues the partition kernel that fills its tile
    /// boundaries.
    pub(crate) fn new(dev: &GpuDevice, a: &DeviceCsr) -> Result<CsrMergeWorkspace, GpuError> {
        let kernel = SpmvKernel::CsrMerge;
        let tiles = merge_tiles(a.nrows(), a.nnz());
        let ntiles = u32::try_from(tiles).map_err(|_| {
            GpuError::launch(
                kernel,
                format!("{tiles} merge tiles exceed the 32-bit range"),
            )
        })?;
        let nt = ntiles as usize;
        let mut ws = CsrMergeWorkspace {
            nrows: a.nrows(),
            nnz: a.nnz(),
            ntiles,
            tile_rows: dev.alloc_zeros(nt + 1)?,
            carry_rows: dev.alloc_zeros(nt)?,
            carry_vals: dev.alloc_zeros(nt)?,
        };
        if a.nrows() == 0 {
            return Ok(ws);
        }
        let cfg = LaunchConfig::grid_stride(tiles + 1, DEFAULT_THREADS, dev.props());
        cfg.check(MERGE_PARTITION, dev.props())?;
        let l = Launch::plain(dev, KernelSource::SpmvCsr, &MERGE_PARTITION, cfg)?;
        let (nrows, nnz) = (a.nrows() as u32, a.nnz() as u32);
        // SAFETY: matches `spmv_csr_merge_partition(u32 nrows, u32 nnz, const u32 *indptr,
        // u32 ntiles, u32 *tile_rows)`; indptr holds nrows + 1 non-decreasing offsets ending at
        // nnz (validated on upload), tile_rows ntiles + 1 entries (allocated above).
        unsafe {
            l.run(|b| {
                b.arg(&nrows)
                    .arg(&nnz)
                    .arg(&a.indptr.buf)
                    .arg(&ntiles)
                    .arg(&mut ws.tile_rows.buf);
            })
        }?;
        Ok(ws)
    }

    /// Tiles of the merge path.
    pub fn tiles(&self) -> usize {
        self.ntiles as usize
    }

    /// Bytes of device memory the workspace occupies.
    pub fn device_bytes(&self) -> usize {
        self.tile_rows.num_bytes() + self.carry_rows.num_bytes() + self.carry_vals.num_bytes()
    }

    /// The row at which the merge path enters each tile (tiles + 1 entries, the last one
    /// nrows): a host copy, for tests.
    pub fn download_tile_rows(&self, dev: &GpuDevice) -> Result<Vec<u32>, GpuError> {
        dev.download(&self.tile_rows)
    }
}

/// y = A x with a CSR kernel ([`SpmvKernel::CsrScalar`], [`SpmvKernel::CsrVector`] or
/// [`SpmvKernel::CsrMerge`]; the merge kernel needs [`DeviceCsr::prepare_merge`] first).
pub fn spmv_csr(
    dev: &GpuDevice,
    a: &DeviceCsr,
    kernel: SpmvKernel,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    if kernel == SpmvKernel::CsrMerge {
        check(kernel, dev, cfg, Format::Csr)?;
        check_xy(kernel, a.shape(), x, y)?;
        return spmv_csr_merge(dev, a, cfg, x, y);
    }
    let Some(l) = prepare(dev, kernel, cfg, Format::Csr, a.shape(), x, y, a.nrows())? else {
        return Ok(());
    };
    let nrows = a.nrows() as u32;
    // SAFETY: matches `spmv_csr_scalar` / `spmv_csr_vector_L(u32 nrows, const u32 *indptr,
    // const u32 *indices, const double *vals, const double *x, double *y)`; the arrays were
    // validated on upload (indices < ncols = len(x)), y holds nrows (checked), threads are whole
    // warps for the vector kernels (checked).
    unsafe {
        l.run(|b| {
            b.arg(&nrows).csr(a).arg(&x.buf).arg(&mut y.buf);
        })
    }
}

/// The merge-path SpMV: the main kernel with `cfg` (checked by the caller), then the fixup.
fn spmv_csr_merge(
    dev: &GpuDevice,
    a: &DeviceCsr,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let kernel = SpmvKernel::CsrMerge;
    let ws = a.merge.as_ref().ok_or_else(|| {
        GpuError::launch(
            kernel,
            "the matrix has no merge workspace: call DeviceCsr::prepare_merge after the upload",
        )
    })?;
    if (ws.nrows, ws.nnz) != (a.nrows(), a.nnz()) {
        return Err(GpuError::launch(
            kernel,
            format!(
                "the merge workspace was made for {} rows and {} entries, the matrix has {} and {}",
                ws.nrows,
                ws.nnz,
                a.nrows(),
                a.nnz()
            ),
        ));
    }
    if a.nrows() == 0 {
        return Ok(());
    }
    let main = Launch::plain(dev, kernel.source(), &kernel, cfg)?
        .with_shared_mem(merge_smem_bytes(cfg.threads));
    let (nrows, nnz) = (a.nrows() as u32, a.nnz() as u32);
    // SAFETY: matches `spmv_csr_merge(u32 nrows, u32 nnz, const u32 *indptr,
    // const u32 *indices, const double *vals, const double *x, double *y,
    // const u32 *tile_rows, u32 *carry_rows, double *carry_vals)`; the CSR arrays were
    // validated on upload (indices < ncols = len(x)), y holds nrows (checked); the workspace
    // was made for this matrix (checked): tile_rows holds ntiles + 1 tile boundaries written by
    // the partition kernel, carry_rows and carry_vals ntiles entries. The carry arrays are
    // written through a shared reference: they are private scratch of this matrix that only
    // this kernel and the fixup below touch, in order, on the device's one stream. Threads are
    // whole warps, at most MERGE_MAX_THREADS, and the dynamic shared memory (threads / 32 x
    // MERGE_SMEM_PER_WARP) fits the device (checked).
    unsafe {
        main.run(|b| {
            b.arg(&nrows)
                .arg(&nnz)
                .csr(a)
                .arg(&x.buf)
                .arg(&mut y.buf)
                .arg(&ws.tile_rows.buf)
                .arg(&ws.carry_rows.buf)
                .arg(&ws.carry_vals.buf);
        })
    }?;

    let fix_cfg = LaunchConfig::grid_stride(u64::from(ws.ntiles), DEFAULT_THREADS, dev.props());
    let fix = Launch::plain(dev, KernelSource::SpmvCsr, &MERGE_FIXUP, fix_cfg)?;
    fix_cfg.check(MERGE_FIXUP, dev.props())?;
    // SAFETY: matches `spmv_csr_merge_fixup(u32 nrows, u32 ntiles, const u32 *carry_rows,
    // const double *carry_vals, double *y)`; the carry arrays hold ntiles entries written by
    // the launch above (rows <= nrows; the kernel skips nrows), y holds nrows; DEFAULT_THREADS
    // is a whole number of warps.
    unsafe {
        fix.run(|b| {
            b.arg(&nrows)
                .arg(&ws.ntiles)
                .arg(&ws.carry_rows.buf)
                .arg(&ws.carry_vals.buf)
                .arg(&mut y.buf);
        })
    }
}

/// y = A x for ELLPACK.
pub fn spmv_ell(
    dev: &GpuDevice,
    a: &DeviceEll,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let kernel = SpmvKernel::Ell;
    let Some(l) = prepare(dev, kernel, cfg, Format::Ell, a.shape(), x, y, a.nrows())? else {
        return Ok(());
    };
    let (nrows, width) = (a.nrows() as u32, a.width() as u32);
    // SAFETY: matches `spmv_ell(u32 nrows, u32 width, const u32 *cols, const double *vals,
    // const double *x, double *y)`; cols and vals hold width x nrows slots whose columns are
    // ELL_PAD or < ncols = len(x) (validated on upload); y holds nrows (checked).
    unsafe {
        l.run(|b| {
            b.arg(&nrows)
                .arg(&width)
                .arg(&a.cols.buf)
                .arg(&a.vals.buf)
                .arg(&x.buf)
                .arg(&mut y.buf);
        })
    }
}

/// y = A x for the diagonal format.
pub fn spmv_dia(
    dev: &GpuDevice,
    a: &DeviceDia,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let kernel = SpmvKernel::Dia;
    let Some(l) = prepare(dev, kernel, cfg, Format::Dia, a.shape(), x, y, a.nrows())? else {
        return Ok(());
    };
    let (nrows, ncols, ndiag) = (a.nrows() as u32, a.ncols() as u32, a.ndiag() as u32);
    // SAFETY: matches `spmv_dia(u32 nrows, u32 ncols, u32 ndiag, const int *offsets,
    // const double *data, const double *x, double *y)`; data holds ndiag x nrows values
    // (validated), the kernel reads x only at columns in [0, ncols) = [0, len(x)), y holds nrows.
    unsafe {
        l.run(|b| {
            b.arg(&nrows)
                .arg(&ncols)
                .arg(&ndiag)
                .arg(&a.offsets.buf)
                .arg(&a.data.buf)
                .arg(&x.buf)
                .arg(&mut y.buf);
        })
    }
}

/// y += A x for COO (no zeroing: the HYB path adds to the ELL result).
pub fn spmv_coo_accumulate(
    dev: &GpuDevice,
    a: &DeviceCoo,
    kernel: SpmvKernel,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let Some(l) = prepare(dev, kernel, cfg, Format::Coo, a.shape(), x, y, a.nnz())? else {
        return Ok(());
    };
    let nnz = a.nnz() as u32;
    // SAFETY: matches `spmv_coo_atomic` / `spmv_coo_segment(u32 nnz, const u32 *rows,
    // const u32 *cols, const double *vals, const double *x, double *y)`; rows < nrows = len(y),
    // cols < ncols = len(x), rows sorted (validated on upload); whole warps (checked).
    unsafe {
        l.run(|b| {
            b.arg(&nnz)
                .arg(&a.rows.buf)
                .arg(&a.cols.buf)
                .arg(&a.vals.buf)
                .arg(&x.buf)
                .arg(&mut y.buf);
        })
    }
}

/// y = A x for COO: zeroes y, then [`spmv_coo_accumulate`].
pub fn spmv_coo(
    dev: &GpuDevice,
    a: &DeviceCoo,
    kernel: SpmvKernel,
    cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    check(kernel, dev, cfg, Format::Coo)?;
    check_xy(kernel, a.shape(), x, y)?;
    dev.fill_zeros(y)?;
    spmv_coo_accumulate(dev, a, kernel, cfg, x, y)
}

/// y = A x for HYB: the ELL part writes y with `ell_cfg`, then the COO part adds with
/// `coo_kernel` and `coo_cfg`.
pub fn spmv_hyb(
    dev: &GpuDevice,
    a: &DeviceHyb,
    ell_cfg: LaunchConfig,
    coo_kernel: SpmvKernel,
    coo_cfg: LaunchConfig,
    x: &DeviceVec<f64>,
    y: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    check(coo_kernel, dev, coo_cfg, Format::Coo)?;
    spmv_ell(dev, &a.ell, ell_cfg, x, y)?;
    spmv_coo_accumulate(dev, &a.coo, coo_kernel, coo_cfg, x, y)
}

/// What the dot3 variant of a SpMV ([`SpmvKernel::dot3_entry_point`]) needs besides the
/// matrix, u and w: the residual r (it may be u itself, without a preconditioner), the
/// last-block workspace of the reduction, and the scalar buffer whose recurrence its last block
/// runs for the next iteration (as [`crate::kernels::dot::dot3_advance_next`] does).
pub struct Dot3Epilogue<'a> {
    /// The residual.
    pub r: &'a DeviceVec<f64>,
    /// Partial sums (three per block) and the ticket counter.
    pub ws: &'a mut Dot3Workspace,
    /// The recurrence's scalars and history.
    pub scalars: &'a mut CgScalars,
}

/// The checks of every dot3 variant: the kernel has one and can run `cfg` with whole warps,
/// reads `format`, the matrix is square, u, w and r hold its rows, and the workspace holds
/// partial sums for `cfg`'s blocks. Then the launch (the kernel's module has the variant).
#[allow(clippy::too_many_arguments)]
fn prepare_dot3<'d>(
    dev: &'d GpuDevice,
    kernel: SpmvKernel,
    cfg: LaunchConfig,
    format: Format,
    (nrows, ncols): (usize, usize),
    u: &DeviceVec<f64>,
    w: &DeviceVec<f64>,
    e: &Dot3Epilogue<'_>,
) -> Result<Launch<'d>, GpuError> {
    check(kernel, dev, cfg, format)?;
    kernel.check_dot3_launch(cfg, dev.props())?;
    let entry = kernel.dot3_entry_point().unwrap_or_default();
    if nrows != ncols {
        return Err(GpuError::launch(
            entry,
            format!("needs a square matrix (u and w of one length), got {nrows} x {ncols}"),
        ));
    }
    check_len(&entry, "u", u.len(), nrows)?;
    check_len(&entry, "w", w.len(), nrows)?;
    check_len(&entry, "r", e.r.len(), nrows)?;
    if cfg.blocks > e.ws.max_blocks() {
        return Err(GpuError::launch(
            entry,
            format!(
                "{} blocks but the workspace holds partial sums for {}",
                cfg.blocks,
                e.ws.max_blocks()
            ),
        ));
    }
    Launch::new(dev, &ModuleSpec::plain(kernel.source()), entry, cfg)
}

/// w = A u with a CSR row kernel (scalar or vector) whose epilogue adds the three dots of the
/// PCG iteration and runs the recurrence for the next iteration ([`Dot3Epilogue`]): one launch
/// instead of the SpMV and [`crate::kernels::dot::dot3_advance_next`]. The dots are added in
/// another order than the separate reduction's, so they agree with it to rounding.
pub fn spmv_csr_dot3_next(
    dev: &GpuDevice,
    a: &DeviceCsr,
    kernel: SpmvKernel,
    cfg: LaunchConfig,
    u: &DeviceVec<f64>,
    w: &mut DeviceVec<f64>,
    e: Dot3Epilogue<'_>,
) -> Result<(), GpuError> {
    let l = prepare_dot3(dev, kernel, cfg, Format::Csr, a.shape(), u, w, &e)?;
    let nrows = a.nrows() as u32;
    let cap = e.scalars.capacity();
    // SAFETY: matches `spmv_csr_scalar_dot3_next` / `spmv_csr_vector_dot3_next_L(u32 nrows,
    // const u32 *indptr, const u32 *indices, const double *vals, const double *u, double *w,
    // const double *r, double *partial, u32 *counter, double *scalars, double *history,
    // u32 history_cap)`; the arrays were validated on upload (indices < ncols = nrows = len(u)),
    // w and r hold nrows (checked), partial 3 x max_blocks >= 3 x blocks (checked), the
    // scalars CG_SCALARS_LEN and the history 3 x history_cap; threads are whole warps (checked).
    // w is written and is borrowed mutably, so it is neither u nor r.
    unsafe {
        l.run(|b| {
            b.arg(&nrows)
                .csr(a)
                .arg(&u.buf)
                .arg(&mut w.buf)
                .arg(&e.r.buf)
                .arg(&mut e.ws.partial.buf)
                .arg(&mut e.ws.counter.buf)
                .recurrence(e.scalars, &cap, None);
        })
    }
}

/// [`spmv_csr_dot3_next`] for ELLPACK.
pub fn spmv_ell_dot3_next(
    dev: &GpuDevice,
    a: &DeviceEll,
    cfg: LaunchConfig,
    u: &DeviceVec<f64>,
    w: &mut DeviceVec<f64>,
    e: Dot3Epilogue<'_>,
) -> Result<(), GpuError> {
    let l = prepare_dot3(dev, SpmvKernel::Ell, cfg, Format::Ell, a.shape(), u, w, &e)?;
    let (nrows, width) = (a.nrows() as u32, a.width() as u32);
    let cap = e.scalars.capacity();
    // SAFETY: matches `spmv_ell_dot3_next(u32 nrows, u32 width, const u32 *cols,
    // const double *vals, const double *u, double *w, const double *r, double *partial,
    // u32 *counter, double *scalars, double *history, u32 history_cap)`; cols and vals hold
    // width x nrows slots whose columns are ELL_PAD or < ncols = nrows = len(u) (validated on
    // upload); w, r, the workspace and the recurrence's buffers as in spmv_csr_dot3_next.
    unsafe {
        l.run(|b| {
            b.arg(&nrows)
                .arg(&width)
                .arg(&a.cols.buf)
                .arg(&a.vals.buf)
                .arg(&u.buf)
                .arg(&mut w.buf)
                .arg(&e.r.buf)
                .arg(&mut e.ws.partial.buf)
                .arg(&mut e.ws.counter.buf)
                .recurrence(e.scalars, &cap, None);
        })
    }
}

/// [`spmv_csr_dot3_next`] for the diagonal format.
pub fn spmv_dia_dot3_next(
    dev: &GpuDevice,
    a: &DeviceDia,
    cfg: LaunchConfig,
    u: &DeviceVec<f64>,
    w: &mut DeviceVec<f64>,
    e: Dot3Epilogue<'_>,
) -> Result<(), GpuError> {
    let l = prepare_dot3(dev, SpmvKernel::Dia, cfg, Format::Dia, a.shape(), u, w, &e)?;
    let (nrows, ndiag) = (a.nrows() as u32, a.ndiag() as u32);
    let cap = e.scalars.capacity();
    // SAFETY: matches `spmv_dia_dot3_next(u32 nrows, u32 ndiag, const int *offsets,
    // const double *data, const double *u, double *w, const double *r, double *partial,
    // u32 *counter, double *scalars, double *history, u32 history_cap)`; data holds
    // ndiag x nrows values (validated), the kernel reads u only at columns in [0, nrows) =
    // [0, len(u)) (square, checked); w, r, the workspace and the recurrence's buffers as in
    // spmv_csr_dot3_next.
    unsafe {
        l.run(|b| {
            b.arg(&nrows)
                .arg(&ndiag)
                .arg(&a.offsets.buf)
                .arg(&a.data.buf)
                .arg(&u.buf)
                .arg(&mut w.buf)
                .arg(&e.r.buf)
                .arg(&mut e.ws.partial.buf)
                .arg(&mut e.ws.counter.buf)
                .recurrence(e.scalars, &cap, None);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_constants_match_the_cuda_source() {
        let src = crate::sources::source_text(KernelSource::SpmvCsr);
        assert!(src.contains(&format!("#define MERGE_ITEMS {MERGE_ITEMS}\n")));
        assert!(src.contains(&format!("#define MERGE_MAX_THREADS {MERGE_MAX_THREADS}\n")));
        assert!(src.contains("#define MERGE_TILE (32 * MERGE_ITEMS)\n"));
        assert!(src.contains("#define MERGE_SMEM_PER_WARP (MERGE_TILE * 12)\n"));
        assert!(src.contains(&format!(
            "__launch_bounds__(MERGE_MAX_THREADS)\n    {}(",
            SpmvKernel::CsrMerge
        )));
        // The largest block fits the 48 KiB every device gives without opting in.
        assert!(merge_smem_bytes(MERGE_MAX_THREADS) <= 48 * 1024);
        assert_eq!(merge_smem_bytes(256), 8 * MERGE_TILE * 12);
        assert_eq!(merge_tiles(0, 0), 0);
        assert_eq!(merge_tiles(1, 0), 1);
        assert_eq!(merge_tiles(100, 124), 1);
        assert_eq!(merge_tiles(100, 125), 2);
        let k = SpmvKernel::CsrMerge;
        assert_eq!(k.work_items(100, 125), 64);
        assert_eq!(k.entry_points(), ["spmv_csr_merge", MERGE_FIXUP]);
        assert_eq!(SpmvKernel::CsrScalar.entry_points(), ["spmv_csr_scalar"]);
        assert!(k.needs_whole_warps());
        assert_eq!(
            (k.format(), k.source()),
            (Format::Csr, KernelSource::SpmvCsr)
        );
    }

    #[test]
    fn names() {
        let names: Vec<String> = SpmvKernel::all().iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names,
            [
                "spmv_csr_scalar",
                "spmv_csr_vector_2",
                "spmv_csr_vector_4",
                "spmv_csr_vector_8",
                "spmv_csr_vector_16",
                "spmv_csr_vector_32",
                "spmv_csr_merge",
                "spmv_ell",
                "spmv_dia",
                "spmv_coo_atomic",
                "spmv_coo_segment"
            ]
        );
    }
}
