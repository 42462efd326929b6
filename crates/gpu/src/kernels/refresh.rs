//! Value refreshes of the preconditioners on the device (entry points in `precond.cu`): for new
//! values of `A` on its kept pattern, Jacobi's inverse diagonal, SSOR-AI's truncated inverse
//! `K` (order 1 or 2), `K^T` (or the factored form's `K^T diag(s)`) by a gather and the
//! explicit product `K^T diag(s) K`, each written into the values of a pattern built on the
//! host once. The values equal those the host build
//! computes from the same `A` (the same expressions, summed in the same order, rounded term by
//! term), up to the sign of a zero.
//!
//! The wrappers check every length they can see; what they cannot see (that a pattern is the
//! one the host built for `A`'s pattern) only decides whether the values are right: every write
//! stays inside its row of the output, every read inside its array.
use std::fmt;

use autopcg_sparse::CsrMatrix;
use cudarc::driver::PushKernelArg;

use super::{check_len, Launch, PushGroups};
use crate::sources::KernelSource;
use crate::{DeviceCsr, DeviceVec, GpuDevice, GpuError, LaunchConfig, DEFAULT_THREADS};

/// A kernel of the value refreshes; `Display` is its entry point in `precond.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefreshKernel {
    /// `out[i] = s / a_ii`.
    InvDiag,
    /// `K = I - X`, `X = omega L D^-1`.
    SsorK1,
    /// `K = I - X + X^2`, a thread per row.
    SsorK2,
    /// The same, a warp per row (rows of `K` of [`K2_VALUES_WARP_MIN_AVG`] entries or more on
    /// average).
    SsorK2Warp,
    /// `out[p] = in[src[p]]`.
    Gather,
    /// `out[p] = in[src[p]] * (s / a_jj)`, `j` the column of entry `p` of the output.
    GatherScaled,
    /// `M = K^T diag(s) K`, `s_q = scale / a_qq`, a thread per row.
    Gram,
    /// The same, a warp per row and a lane per entry (rows of `M` of [`GRAM_WARP_MIN_AVG`]
    /// entries or more on average).
    GramWarp,
}

impl RefreshKernel {
    /// Every refresh kernel.
    pub const ALL: [RefreshKernel; 8] = [
        RefreshKernel::InvDiag,
        RefreshKernel::SsorK1,
        RefreshKernel::SsorK2,
        RefreshKernel::SsorK2Warp,
        RefreshKernel::Gather,
        RefreshKernel::GatherScaled,
        RefreshKernel::Gram,
        RefreshKernel::GramWarp,
    ];
}

impl fmt::Display for RefreshKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefreshKernel::InvDiag => "precond_inv_diag",
            RefreshKernel::SsorK1 => "ssor_k1_values",
            RefreshKernel::SsorK2 => "ssor_k2_values",
            RefreshKernel::SsorK2Warp => "ssor_k2_values_warp",
            RefreshKernel::Gather => "gather_values",
            RefreshKernel::GatherScaled => "gather_scaled_values",
            RefreshKernel::Gram => "ssor_gram_values",
            RefreshKernel::GramWarp => "ssor_gram_values_warp",
        })
    }
}

/// The position of each row's diagonal entry in a square CSR pattern, on the device.
#[derive(Debug)]
pub struct DeviceDiagonal {
    pub(crate) pos: DeviceVec<u32>,
    nnz: usize,
}

impl DeviceDiagonal {
    /// The positions of `a`'s diagonal entries; an error names the first row without one.
    pub fn upload(dev: &GpuDevice, a: &CsrMatrix) -> Result<DeviceDiagonal, GpuError> {
        if a.nrows() != a.ncols() {
            return Err(GpuError::InvalidInput {
                what: "diagonal positions".into(),
                reason: format!("a {} x {} matrix is not square", a.nrows(), a.ncols()),
            });
        }
        let pos = a.diagonal_positions();
        if let Some(row) = pos.iter().position(|&p| p == autopcg_sparse::csr::NO_ENTRY) {
            return Err(GpuError::InvalidInput {
                what: "diagonal positions".into(),
                reason: format!("row {} stores no diagonal entry", row + 1),
            });
        }
        Ok(DeviceDiagonal {
            pos: dev.upload(&pos)?,
            nnz: a.nnz(),
        })
    }

    /// Positions a kernel found on the device for a square pattern of `nnz` entries, each
    /// below `nnz` (the caller's kernel answers for it).
    pub(crate) fn from_device(pos: DeviceVec<u32>, nnz: usize) -> DeviceDiagonal {
        DeviceDiagonal { pos, nnz }
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.pos.len()
    }

    /// True for a matrix of no rows.
    pub fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }

    /// Fails unless `a` is square with as many rows and entries as the pattern these
    /// positions were taken from.
    fn check(&self, kernel: RefreshKernel, a: &DeviceCsr) -> Result<(), GpuError> {
        check_len(&kernel, "A's rows", a.nrows(), self.len())?;
        check_len(&kernel, "A's columns", a.ncols(), self.len())?;
        check_len(&kernel, "A's entries", a.nnz(), self.nnz)
    }
}

/// Where each value of a gather comes from: `out[p] = in[src[p]]`, `src` checked on upload.
#[derive(Debug)]
pub struct DeviceGather {
    src: DeviceVec<u32>,
    from_len: usize,
}

impl DeviceGather {
    /// Uploads `src`, every entry of which must be below `from_len`.
    pub fn upload(dev: &GpuDevice, src: &[u32], from_len: usize) -> Result<DeviceGather, GpuError> {
        if let Some(p) = src.iter().position(|&s| s as usize >= from_len) {
            return Err(GpuError::InvalidInput {
                what: "gather sources".into(),
                reason: format!(
                    "entry {p} takes element {} of an array of {from_len}",
                    src[p]
                ),
            });
        }
        Ok(DeviceGather {
            src: dev.upload(src)?,
            from_len,
        })
    }

    /// Sources a kernel found on the device, each below `from_len` (the caller's kernel
    /// answers for it).
    pub(crate) fn from_device(src: DeviceVec<u32>, from_len: usize) -> DeviceGather {
        DeviceGather { src, from_len }
    }

    /// Elements written.
    pub fn len(&self) -> usize {
        self.src.len()
    }

    /// True when nothing is gathered.
    pub fn is_empty(&self) -> bool {
        self.src.is_empty()
    }
}

/// Average entries per row of the explicit product from which its values are summed a warp
/// per row ([`RefreshKernel::GramWarp`]): a thread's row then holds at least as many entries
/// as the warp has lanes, each of whose terms the thread would find one after another.
pub const GRAM_WARP_MIN_AVG: usize = 32;

// ssor_gram_values_warp and ssor_k2_values_warp keep a row of M or K per warp in shared memory
// sized for at most GRAM_VALUES_WARPS and K2_VALUES_WARPS (8) warps a block.
const _: () = assert!(DEFAULT_THREADS <= 8 * 32 && DEFAULT_THREADS % 32 == 0);

/// Whether the values of an explicit product of `n` rows and `nnz` entries are summed a warp per
/// row (see [`GRAM_WARP_MIN_AVG`]).
fn gram_values_by_warp(n: usize, nnz: usize) -> bool {
    nnz >= GRAM_WARP_MIN_AVG.saturating_mul(n)
}

/// Average entries per row of second-order SSOR-AI's `K` from which its values are summed a
/// warp per row ([`RefreshKernel::SsorK2Warp`]): a thread's row finds the place of each term of
/// its entries by a search, one after another (on SuiteSparse bcsstk13 x a 8 x 8 Poisson grid,
/// 128192 rows of 895 entries on average, that took the thread's kernel 417 ms on an H200).
pub const K2_VALUES_WARP_MIN_AVG: usize = 32;

/// Whether second order's `K` of `n` rows and `nnz` entries takes its values a warp per row
/// (see [`K2_VALUES_WARP_MIN_AVG`]).
fn k2_values_by_warp(n: usize, nnz: usize) -> bool {
    nnz >= K2_VALUES_WARP_MIN_AVG.saturating_mul(n)
}

/// A launch of `kernel` with a thread per item (grid-stride, so any block count is safe).
fn cover(dev: &GpuDevice, kernel: RefreshKernel, items: usize) -> Result<Launch<'_>, GpuError> {
    let blocks = items.div_ceil(DEFAULT_THREADS as usize).clamp(1, 1 << 20) as u32;
    let cfg = LaunchConfig::new(DEFAULT_THREADS, blocks);
    cfg.check(kernel, dev.props())?;
    Launch::plain(dev, KernelSource::Precond, &kernel, cfg)
}

/// Fails unless `m` is square with `n` rows.
fn check_square(
    kernel: RefreshKernel,
    what: &str,
    m: &DeviceCsr,
    n: usize,
) -> Result<(), GpuError> {
    check_len(&kernel, &format!("{what}'s rows"), m.nrows(), n)?;
    check_len(&kernel, &format!("{what}'s columns"), m.ncols(), n)
}

fn rows_u32(kernel: RefreshKernel, n: usize) -> Result<u32, GpuError> {
    u32::try_from(n).map_err(|_| GpuError::launch(kernel, format!("{n} rows exceed 32 bits")))
}

/// `out[i] = s / a_ii`: Jacobi's inverse diagonal (`s = 1`) or SSOR-AI's scale
/// (`s = omega (2 - omega)`), from `a`'s values on the device.
pub fn inv_diag(
    dev: &GpuDevice,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    s: f64,
    out: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let kernel = RefreshKernel::InvDiag;
    diag.check(kernel, a)?;
    check_len(&kernel, "out", out.len(), diag.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let n = out.len() as u64;
    let l = cover(dev, kernel, out.len())?;
    // SAFETY: matches `precond_inv_diag(u64 n, const double *a_vals, const u32 *diag, double s,
    // double *out)`; diag holds n positions below nnz(a) (checked on upload, nnz checked above),
    // out n elements, distinct from the inputs.
    unsafe {
        l.run(|b| {
            b.arg(&n)
                .arg(&a.vals.buf)
                .arg(&diag.pos.buf)
                .arg(&s)
                .arg(&mut out.buf);
        })
    }
}

/// The values of SSOR-AI's `K` (order 1: `I - X`; order 2: `I - X + X^2`, with
/// `X = omega L D^-1`) from `a`'s values, written into `k`, which holds the pattern the host
/// build made for `a`'s pattern.
pub fn ssor_k_values(
    dev: &GpuDevice,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    omega: f64,
    order: u8,
    k: &mut DeviceCsr,
) -> Result<(), GpuError> {
    let kernel = match order {
        1 => RefreshKernel::SsorK1,
        2 => RefreshKernel::SsorK2,
        o => {
            return Err(GpuError::InvalidInput {
                what: "SSOR-AI order".into(),
                reason: format!("{o} (1 or 2)"),
            })
        }
    };
    diag.check(kernel, a)?;
    check_square(kernel, "K", k, diag.len())?;
    if diag.is_empty() {
        return Ok(());
    }
    let n = rows_u32(kernel, diag.len())?;
    let (kernel, threads) = if order == 2 && k2_values_by_warp(diag.len(), k.nnz()) {
        (RefreshKernel::SsorK2Warp, diag.len().saturating_mul(32))
    } else {
        (kernel, diag.len())
    };
    let l = cover(dev, kernel, threads)?;
    // SAFETY: matches `ssor_k1_values(u32 n, const u32 *a_ptr, const u32 *a_idx,
    // const double *a_vals, const u32 *diag, double omega, const u32 *k_ptr, double *k_vals)`
    // and `ssor_k2_values(..., const u32 *k_ptr, const u32 *k_idx, double *k_vals)`. a and k
    // are validated CSR of n rows (indices below n); diag holds positions below nnz(a); each
    // thread writes only inside its row of k (bounded by k_ptr), a buffer no input aliases.
    // `ssor_k2_values_warp` takes ssor_k2_values' arguments, a warp per row, each writing only
    // inside its row of k too (cover launches DEFAULT_THREADS a block, a multiple of 32 and at
    // most the 8 warps its shared memory is sized for).
    unsafe {
        l.run(|b| {
            b.arg(&n)
                .csr(a)
                .arg(&diag.pos.buf)
                .arg(&omega)
                .arg(&k.indptr.buf);
            if order == 2 {
                b.arg(&k.indices.buf);
            }
            b.arg(&mut k.vals.buf);
        })
    }
}

/// `to`'s values gathered from `from`'s: `to.vals[p] = from.vals[src[p]]` (`K^T` from `K`).
pub fn gather_values(
    dev: &GpuDevice,
    src: &DeviceGather,
    from: &DeviceCsr,
    to: &mut DeviceCsr,
) -> Result<(), GpuError> {
    let kernel = RefreshKernel::Gather;
    check_len(&kernel, "from", from.nnz(), src.from_len)?;
    check_len(&kernel, "to", to.nnz(), src.len())?;
    if src.is_empty() {
        return Ok(());
    }
    let n = src.len() as u64;
    let l = cover(dev, kernel, src.len())?;
    // SAFETY: matches `gather_values(u64 n, const u32 *src, const double *in, double *out)`;
    // src holds n entries below nnz(from) (checked on upload and above), out n elements.
    unsafe {
        l.run(|b| {
            b.arg(&n)
                .arg(&src.src.buf)
                .arg(&from.vals.buf)
                .arg(&mut to.vals.buf);
        })
    }
}

/// `to`'s values gathered from `from`'s and scaled by column: `to.vals[p] = from.vals[src[p]] *
/// (scale / a_jj)` with `j` the column of entry `p` of `to` (`K^T diag(s)` from `K`, `s_j =
/// scale / a_jj`, each factor rounded as the host build rounds it).
pub fn gather_scaled_values(
    dev: &GpuDevice,
    src: &DeviceGather,
    from: &DeviceCsr,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    scale: f64,
    to: &mut DeviceCsr,
) -> Result<(), GpuError> {
    let kernel = RefreshKernel::GatherScaled;
    diag.check(kernel, a)?;
    check_len(&kernel, "from", from.nnz(), src.from_len)?;
    check_len(&kernel, "to", to.nnz(), src.len())?;
    check_len(&kernel, "to's columns", to.ncols(), diag.len())?;
    if src.is_empty() {
        return Ok(());
    }
    let n = src.len() as u64;
    let l = cover(dev, kernel, src.len())?;
    // SAFETY: matches `gather_scaled_values(u64 n, const u32 *src, const double *in,
    // const u32 *to_idx, const double *a_vals, const u32 *diag, double scale, double *out)`;
    // src holds n entries below nnz(from) (checked on upload and above); to is a validated CSR
    // matrix of n entries whose columns are below its column count, which is diag's length;
    // diag holds positions below nnz(a); out (to's values) aliases no input.
    unsafe {
        l.run(|b| {
            b.arg(&n)
                .arg(&src.src.buf)
                .arg(&from.vals.buf)
                .arg(&to.indices.buf)
                .arg(&a.vals.buf)
                .arg(&diag.pos.buf)
                .arg(&scale)
                .arg(&mut to.vals.buf);
        })
    }
}

/// The values of the explicit product `M = K^T diag(s) K`, `s_q = scale / a_qq`, written into
/// `m`, which holds the pattern the host build made; `kt` is `K^T` with its values.
pub fn gram_values(
    dev: &GpuDevice,
    kt: &DeviceCsr,
    k: &DeviceCsr,
    a: &DeviceCsr,
    diag: &DeviceDiagonal,
    scale: f64,
    m: &mut DeviceCsr,
) -> Result<(), GpuError> {
    let kernel = RefreshKernel::Gram;
    diag.check(kernel, a)?;
    let n = diag.len();
    check_square(kernel, "K", k, n)?;
    check_square(kernel, "K^T", kt, n)?;
    check_square(kernel, "M", m, n)?;
    if n == 0 {
        return Ok(());
    }
    let n32 = rows_u32(kernel, n)?;
    // A thread sums every term of its row, a lane of a warp those of one entry: the warp's
    // where rows are long enough to keep its lanes busy.
    let (kernel, threads) = if gram_values_by_warp(n, m.nnz()) {
        (RefreshKernel::GramWarp, n.saturating_mul(32))
    } else {
        (kernel, n)
    };
    let l = cover(dev, kernel, threads)?;
    // SAFETY: matches `ssor_gram_values(u32 n, kt_ptr, kt_idx, kt_vals, k_ptr, k_idx, k_vals,
    // const double *a_vals, const u32 *diag, double scale, const u32 *m_ptr, const u32 *m_idx,
    // double *m_vals)`, as does `ssor_gram_values_warp`; kt, k and m are validated CSR of n rows (indices below n), diag holds
    // positions below nnz(a); each thread writes only inside its row of m, which no input
    // aliases.
    unsafe {
        l.run(|b| {
            b.arg(&n32)
                .csr(kt)
                .csr(k)
                .arg(&a.vals.buf)
                .arg(&diag.pos.buf)
                .arg(&scale)
                .arg(&m.indptr.buf)
                .arg(&m.indices.buf)
                .arg(&mut m.vals.buf);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The products measured: bcsstk13's (2003 rows, 214051 entries) and s3rmt3m3's (5357,
    /// 288245) are summed a warp per row, 100^2 Poisson's (1e4 rows, 69202) and 2D FEM's
    /// (2e5 rows, 1892416) a thread per row.
    #[test]
    fn long_product_rows_are_summed_by_warps() {
        assert!(gram_values_by_warp(2003, 214_051));
        assert!(gram_values_by_warp(5357, 288_245));
        assert!(!gram_values_by_warp(10_000, 69_202));
        assert!(!gram_values_by_warp(200_000, 1_892_416));
    }

    /// The warps' values kernels keep their shared memory for the warps the launch gives a block.
    #[test]
    fn the_warp_values_kernel_fits_the_launch() {
        let text = crate::sources::source_text(crate::sources::KernelSource::Precond);
        assert!(text.contains("#define GRAM_VALUES_WARPS 8\n"));
        assert!(text.contains("#define K2_VALUES_WARPS 8\n"));
    }

    /// Second order's values are a warp's per row on long rows only: bcsstk13 x Poisson 8^2
    /// (128192 rows, 114728694 entries in K), not 3D Poisson 192^3 (K of 10 entries a row but
    /// at the boundary) nor FEM-like rows of 20.
    #[test]
    fn second_order_values_by_warp_on_long_rows() {
        assert!(k2_values_by_warp(128_192, 114_728_694));
        assert!(!k2_values_by_warp(7_077_888, 70_000_000));
        assert!(!k2_values_by_warp(2_000_000, 40_000_000));
        assert!(k2_values_by_warp(1_200, 1_200 * 32));
        assert!(!k2_values_by_warp(1_200, 1_200 * 32 - 1));
    }

    #[test]
    fn names_are_the_entry_points() {
        let names: Vec<String> = RefreshKernel::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names,
            [
                "precond_inv_diag",
                "ssor_k1_values",
                "ssor_k2_values",
                "ssor_k2_values_warp",
                "gather_values",
                "gather_scaled_values",
                "ssor_gram_values",
                "ssor_gram_values_warp"
            ]
        );
    }
}
