//! `precond.cu`: Jacobi application and diagonal scaling (the element-wise parts of the
//! preconditioners; the rest is SpMV).

use cudarc::driver::PushKernelArg;

use super::{check_len, Launch};
use crate::sources::KernelSource;
use crate::{DeviceVec, GpuDevice, GpuError, LaunchConfig};

pub use autopcg_catalog::{Loads, PrecondKernel};

/// `z = inv_diag .* r`.
pub fn jacobi_apply(
    dev: &GpuDevice,
    loads: Loads,
    cfg: LaunchConfig,
    inv_diag: &DeviceVec<f64>,
    r: &DeviceVec<f64>,
    z: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let kernel = PrecondKernel::Jacobi(loads);
    check_len(&kernel, "inv_diag", inv_diag.len(), z.len())?;
    check_len(&kernel, "r", r.len(), z.len())?;
    cfg.check(kernel, dev.props())?;
    if z.is_empty() {
        return Ok(());
    }
    let n = z.len() as u64;
    let l = Launch::plain(dev, KernelSource::Precond, &kernel, cfg)?;
    // SAFETY: matches `jacobi_apply[_v2](u64 n, const double *inv_diag, const double *r,
    // double *z)`; all three hold n elements (checked) and z is distinct from the inputs.
    unsafe {
        l.run(|b| {
            b.arg(&n).arg(&inv_diag.buf).arg(&r.buf).arg(&mut z.buf);
        })
    }
}

/// `x = d .* x` in place.
pub fn diag_scale(
    dev: &GpuDevice,
    loads: Loads,
    cfg: LaunchConfig,
    d: &DeviceVec<f64>,
    x: &mut DeviceVec<f64>,
) -> Result<(), GpuError> {
    let kernel = PrecondKernel::DiagScale(loads);
    check_len(&kernel, "d", d.len(), x.len())?;
    cfg.check(kernel, dev.props())?;
    if x.is_empty() {
        return Ok(());
    }
    let n = x.len() as u64;
    let l = Launch::plain(dev, KernelSource::Precond, &kernel, cfg)?;
    // SAFETY: matches `diag_scale[_v2](u64 n, const double *d, double *x)`; both hold n
    // elements (checked) and are distinct buffers.
    unsafe {
        l.run(|b| {
            b.arg(&n).arg(&d.buf).arg(&mut x.buf);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let names: Vec<String> = PrecondKernel::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names,
            [
                "jacobi_apply",
                "jacobi_apply_v2",
                "diag_scale",
                "diag_scale_v2"
            ]
        );
    }
}
