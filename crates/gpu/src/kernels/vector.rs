//! `vector.cu`: axpy, xpay and the fused Chronopoulos–Gear update.

use cudarc::driver::PushKernelArg;

use super::{check_covers, check_len, Launch};
use crate::sources::KernelSource;
use crate::{CgScalars, DeviceVec, GpuDevice, GpuError, LaunchConfig};

pub use autopcg_catalog::{VectorKernel, VectorOp, VectorVariant};

fn prepare(
    dev: &GpuDevice,
    kernel: VectorKernel,
    cfg: LaunchConfig,
    n: usize,
) -> Result<Option<Launch<'_>>, GpuError> {
    cfg.check(kernel, dev.props())?;
    if let Some(items) = kernel.variant().items(n as u64) {
        check_covers(&kernel, cfg, items)?;
    }
    if n == 0 {
        return Ok(None);
    }
    Launch::plain(dev, KernelSource::Vector, &kernel, cfg).map(Some)
}

/// Defines the public wrapper `$name` of the kernels `$kernel(variant)`: [`axpy`] and [`xpay`]
/// take the same arguments (`u64 n, double a, const double *x, double *y` in vector.cu) and
/// differ only in the kernel, so one body serves both.
macro_rules! scaled_add {
    ($(#[$doc:meta])* $name:ident => $kernel:ident) => {
        $(#[$doc])*
        pub fn $name(
            dev: &GpuDevice,
            variant: VectorVariant,
            cfg: LaunchConfig,
            a: f64,
            x: &DeviceVec<f64>,
            y: &mut DeviceVec<f64>,
        ) -> Result<(), GpuError> {
            let kernel = VectorKernel::$kernel(variant);
            check_len(&kernel, "x", x.len(), y.len())?;
            let n = y.len() as u64;
            let Some(l) = prepare(dev, kernel, cfg, y.len())? else {
                return Ok(());
            };
            // SAFETY: matches `axpy_*` / `xpay_*(u64 n, double a, const double *x, double *y)`
            // in vector.cu; x and y hold n elements (checked above) and are distinct buffers.
            unsafe {
                l.run(|b| {
                    b.arg(&n).arg(&a).arg(&x.buf).arg(&mut y.buf);
                })
            }
        }
    };
}

scaled_add!(
    /// `y = y + a x` with kernel `axpy_<variant>`.
    axpy => Axpy
);
scaled_add!(
    /// `y = x + a y` with kernel `xpay_<variant>`.
    xpay => Xpay
);

/// Where the fused update finds u = M^-1 r.
#[derive(Debug)]
pub enum UpdateU<'a> {
    /// In its own vector, written by the preconditioner's kernels (`cg_update_*`).
    Separate(&'a DeviceVec<f64>),
    /// No preconditioner: u is r (`cg_update_nopre_*`), so no copy is made and the SpMV and
    /// the dots read r.
    IsR,
    /// Jacobi fused (`cg_update_jacobi_*`): u is read, then overwritten with
    /// `inv_diag .* r_new`, the next iteration's u.
    Jacobi {
        /// The inverse diagonal D^-1.
        inv_diag: &'a DeviceVec<f64>,
        /// u (read, then written).
        u: &'a mut DeviceVec<f64>,
    },
}

impl UpdateU<'_> {
    /// The operation this form of u is updated by.
    pub fn op(&self) -> VectorOp {
        match self {
            UpdateU::Separate(_) => VectorOp::CgUpdate,
            UpdateU::IsR => VectorOp::CgUpdateNoPre,
            UpdateU::Jacobi { .. } => VectorOp::CgUpdateJacobi,
        }
    }
}

/// The vectors of the fused update.
#[derive(Debug)]
pub struct CgVectors<'a> {
    /// u = M^-1 r, or how it is obtained.
    pub u: UpdateU<'a>,
    /// w = A u (read).
    pub w: &'a DeviceVec<f64>,
    /// Search direction (updated).
    pub p: &'a mut DeviceVec<f64>,
    /// s = A p (updated).
    pub s: &'a mut DeviceVec<f64>,
    /// Iterate (updated).
    pub x: &'a mut DeviceVec<f64>,
    /// Residual (updated).
    pub r: &'a mut DeviceVec<f64>,
}

/// `p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s` with alpha and beta read from
/// the device scalar buffer; does nothing once the recurrence has halted. When beta is 0 (the
/// first step) the old p and s are not used. The kernel is `cg_update_<variant>`,
/// `cg_update_nopre_<variant>` or `cg_update_jacobi_<variant>` as [`CgVectors::u`] says.
pub fn cg_update(
    dev: &GpuDevice,
    variant: VectorVariant,
    cfg: LaunchConfig,
    scalars: &CgScalars,
    v: CgVectors<'_>,
) -> Result<(), GpuError> {
    let kernel = v.u.op().kernel(variant);
    let n = v.x.len();
    match &v.u {
        UpdateU::Separate(u) => check_len(&kernel, "u", u.len(), n)?,
        UpdateU::IsR => {}
        UpdateU::Jacobi { inv_diag, u } => {
            check_len(&kernel, "inv_diag", inv_diag.len(), n)?;
            check_len(&kernel, "u", u.len(), n)?;
        }
    }
    check_len(&kernel, "w", v.w.len(), n)?;
    check_len(&kernel, "p", v.p.len(), n)?;
    check_len(&kernel, "s", v.s.len(), n)?;
    check_len(&kernel, "r", v.r.len(), n)?;
    let Some(l) = prepare(dev, kernel, cfg, n)? else {
        return Ok(());
    };
    let n64 = n as u64;
    // SAFETY: matches, in vector.cu, `cg_update_*(u64 n, const double *scalars, const double
    // *u, const double *w, double *p, double *s, double *x, double *r)`,
    // `cg_update_nopre_*(n, scalars, w, p, s, x, r)` and `cg_update_jacobi_*(n, scalars, const
    // double *dinv, double *u, w, p, s, x, r)`; the scalar buffer has CG_SCALARS_LEN entries,
    // every vector n (checked above), and the written vectors are distinct buffers (distinct
    // &mut borrows, none of them aliasing a read one).
    unsafe {
        l.run(|b| {
            b.arg(&n64).arg(&scalars.scalars.buf);
            match v.u {
                UpdateU::Separate(u) => {
                    b.arg(&u.buf);
                }
                UpdateU::IsR => {}
                UpdateU::Jacobi { inv_diag, u } => {
                    b.arg(&inv_diag.buf).arg(&mut u.buf);
                }
            }
            b.arg(&v.w.buf)
                .arg(&mut v.p.buf)
                .arg(&mut v.s.buf)
                .arg(&mut v.x.buf)
                .arg(&mut v.r.buf);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            VectorKernel::Axpy(VectorVariant::Elem).to_string(),
            "axpy_elem"
        );
        assert_eq!(
            VectorKernel::Xpay(VectorVariant::GridV2).to_string(),
            "xpay_grid_v2"
        );
        assert_eq!(
            VectorKernel::CgUpdate(VectorVariant::ElemV2).to_string(),
            "cg_update_elem_v2"
        );
        assert_eq!(VectorKernel::all().len(), 20);
    }
}
