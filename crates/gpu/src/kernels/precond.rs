//! `precond.cu`: Jacobi's application (the element-wise part of the preconditioners; the rest
//! is SpMV, and the value refreshes of [`super::refresh`]).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let names: Vec<String> = PrecondKernel::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(names, ["jacobi_apply", "jacobi_apply_v2"]);
    }
}
