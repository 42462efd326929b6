//! The operands of the GPU backend on the device: a sparse matrix in the format its
//! [`SpmvMethod`] names, and the preconditioner's arrays.
use autopcg_gpu::kernels::convert::{csr_to_dia, csr_to_ell, csr_to_hyb};
use autopcg_gpu::kernels::dot::Dot3Kernel;
use autopcg_gpu::kernels::precond::{diag_scale, jacobi_apply, PrecondKernel};
use autopcg_gpu::kernels::spmv::{spmv_coo, spmv_csr, spmv_dia, spmv_ell, spmv_hyb, SpmvKernel};
use autopcg_gpu::kernels::vector::VectorKernel;
use autopcg_gpu::{
    DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, DeviceVec, GpuDevice, GpuError,
    KernelSource, ModuleSpec,
};
use autopcg_sparse::{CooMatrix, CsrMatrix, PaddingLimits, SparseError};

use super::choice::{ElementwiseChoice, PrecondChoice, SpmvMethod};
use crate::{PcgError, Preconditioner};

/// A matrix in one device format.
#[derive(Debug)]
enum DeviceMatrix {
    Csr(DeviceCsr),
    Ell(DeviceEll),
    Dia(DeviceDia),
    Coo(DeviceCoo),
    Hyb(DeviceHyb),
}

/// A matrix on the device with the way its SpMV runs.
#[derive(Debug)]
pub(crate) struct DeviceOperator {
    mat: DeviceMatrix,
    method: SpmvMethod,
    /// The CSR arrays an ELL, DIA or HYB operand was converted from, kept once its values have
    /// been refreshed ([`DeviceOperator::refresh`]), so that later refreshes upload values only.
    source: Option<DeviceCsr>,
}

fn conversion(operand: &str, format: &str, e: SparseError) -> PcgError {
    PcgError::InvalidParameter(format!(
        "the GPU plan stores {operand} as {format}, which it cannot be: {e}"
    ))
}

/// `csr` converted on the device to the format `method` runs (ELL, DIA or HYB).
fn convert(
    dev: &GpuDevice,
    csr: &DeviceCsr,
    method: SpmvMethod,
    limits: &PaddingLimits,
    operand: &str,
) -> Result<DeviceMatrix, PcgError> {
    let on_device = |format: &str, e: GpuError| match e {
        GpuError::Sparse(e) => conversion(operand, format, e),
        e => PcgError::from(e),
    };
    Ok(match method {
        SpmvMethod::Ell { .. } => {
            DeviceMatrix::Ell(csr_to_ell(dev, csr, limits).map_err(|e| on_device("ELL", e))?)
        }
        SpmvMethod::Dia { .. } => {
            DeviceMatrix::Dia(csr_to_dia(dev, csr, limits).map_err(|e| on_device("DIA", e))?)
        }
        SpmvMethod::Hyb { split, .. } => {
            DeviceMatrix::Hyb(csr_to_hyb(dev, csr, split, limits).map_err(|e| on_device("HYB", e))?)
        }
        other => {
            return Err(PcgError::Backend(format!(
                "{} is not converted on the device (internal error)",
                other.kernel_name()
            )))
        }
    })
}

impl DeviceOperator {
    /// Uploads `a` in CSR and, for ELL, DIA and HYB, converts it on the device (the pool's
    /// conversion kernels, which build the same arrays as the host conversions, so the GPU
    /// never waits for a single-threaded host pass over the matrix and the bus carries the
    /// compact CSR arrays); COO is converted on the host. Adds whatever the method's kernel
    /// needs beside the matrix (the merge-path CSR kernel's workspace).
    pub(crate) fn upload(
        dev: &GpuDevice,
        a: &CsrMatrix,
        method: SpmvMethod,
        limits: &PaddingLimits,
        operand: &str,
    ) -> Result<DeviceOperator, PcgError> {
        let mat = match method {
            SpmvMethod::Csr { kernel, .. } => {
                let mut m = DeviceCsr::upload(dev, a)?;
                // The merge-path kernel's workspace, made once here, before any graph capture.
                m.prepare_for(dev, kernel)?;
                DeviceMatrix::Csr(m)
            }
            SpmvMethod::Coo { .. } => {
                DeviceMatrix::Coo(DeviceCoo::upload(dev, &CooMatrix::from_csr(a))?)
            }
            _ => convert(dev, &DeviceCsr::upload(dev, a)?, method, limits, operand)?,
        };
        Ok(DeviceOperator {
            mat,
            method,
            source: None,
        })
    }

    /// Takes new values of the same pattern (`a` has the pattern the operator was made from):
    /// a CSR operand gets its values overwritten in place; an ELL, DIA or HYB operand is
    /// converted again on the device from its CSR source, whose values alone cross the bus once
    /// the source is kept (the first refresh uploads it whole: it costs device memory only for
    /// a caller that refreshes); a COO operand is made again. Buffers of a converted operand
    /// may be new: graphs that captured them must be captured again.
    pub(crate) fn refresh(
        &mut self,
        dev: &GpuDevice,
        a: &CsrMatrix,
        limits: &PaddingLimits,
        operand: &str,
    ) -> Result<(), PcgError> {
        match (&mut self.mat, self.method) {
            (DeviceMatrix::Csr(m), _) if m.nnz() == a.nnz() && m.nrows() == a.nrows() => {
                m.upload_values(dev, a.data())?;
            }
            (DeviceMatrix::Ell(_) | DeviceMatrix::Dia(_) | DeviceMatrix::Hyb(_), method) => {
                let source = match self.source.take() {
                    Some(mut s) if s.nnz() == a.nnz() && s.nrows() == a.nrows() => {
                        s.upload_values(dev, a.data())?;
                        s
                    }
                    _ => DeviceCsr::upload(dev, a)?,
                };
                self.mat = convert(dev, &source, method, limits, operand)?;
                self.source = Some(source);
            }
            _ => *self = DeviceOperator::upload(dev, a, self.method, limits, operand)?,
        }
        Ok(())
    }

    /// Queues `y = B x`.
    pub(crate) fn apply(
        &self,
        dev: &GpuDevice,
        x: &DeviceVec<f64>,
        y: &mut DeviceVec<f64>,
    ) -> Result<(), GpuError> {
        match (&self.mat, self.method) {
            (DeviceMatrix::Csr(m), SpmvMethod::Csr { kernel, config }) => {
                spmv_csr(dev, m, kernel, config, x, y)
            }
            (DeviceMatrix::Ell(m), SpmvMethod::Ell { config }) => spmv_ell(dev, m, config, x, y),
            (DeviceMatrix::Dia(m), SpmvMethod::Dia { config }) => spmv_dia(dev, m, config, x, y),
            (DeviceMatrix::Coo(m), SpmvMethod::Coo { kernel, config }) => {
                spmv_coo(dev, m, kernel, config, x, y)
            }
            (
                DeviceMatrix::Hyb(m),
                SpmvMethod::Hyb {
                    ell_config,
                    coo_kernel,
                    coo_config,
                    ..
                },
            ) => spmv_hyb(dev, m, ell_config, coo_kernel, coo_config, x, y),
            (_, method) => Err(GpuError::launch(
                method.kernel_name(),
                "the uploaded matrix is in another format (internal error)",
            )),
        }
    }

    /// Compiles (or finds) and loads every kernel [`DeviceOperator::apply`] launches.
    pub(crate) fn preload(&self, dev: &GpuDevice) -> Result<(), GpuError> {
        for (k, _) in self.method.launches() {
            preload_spmv(dev, k)?;
        }
        Ok(())
    }
}

fn preload_spmv(dev: &GpuDevice, k: SpmvKernel) -> Result<(), GpuError> {
    for e in k.entry_points() {
        dev.kernel(&ModuleSpec::plain(k.source()), &e)?;
    }
    Ok(())
}

/// Loads the element-wise kernel `k` of `precond.cu`.
pub(crate) fn preload_precond(dev: &GpuDevice, k: PrecondKernel) -> Result<(), GpuError> {
    dev.kernel(&ModuleSpec::plain(KernelSource::Precond), &k.to_string())
        .map(|_| ())
}

/// Loads the kernel `k` of `vector.cu`.
pub(crate) fn preload_vector(dev: &GpuDevice, k: VectorKernel) -> Result<(), GpuError> {
    dev.kernel(&ModuleSpec::plain(KernelSource::Vector), &k.to_string())
        .map(|_| ())
}

/// Loads every entry point of the reduction `k` (both the iteration-argument and the
/// iteration-from-the-buffer forms) for `threads` threads per block.
pub(crate) fn preload_dot3(dev: &GpuDevice, k: Dot3Kernel, threads: u32) -> Result<(), GpuError> {
    let spec = ModuleSpec::dot(threads);
    for e in k.entry_points().iter().chain(k.next_entry_points()) {
        dev.kernel(&spec, e)?;
    }
    Ok(())
}

/// The preconditioner on the device.
#[derive(Debug)]
pub(crate) enum DevicePrecond {
    /// No preconditioner (u is r; `apply` copies, which the backend's iteration never calls).
    None,
    /// `u = inv_diag .* r`.
    Jacobi {
        inv_diag: DeviceVec<f64>,
        how: ElementwiseChoice,
    },
    /// `t = K r; t = inv_diag .* t; u = K^T t`.
    Factored {
        k: Box<DeviceOperator>,
        inv_diag: DeviceVec<f64>,
        scale: ElementwiseChoice,
        kt: Box<DeviceOperator>,
    },
    /// `u = M r`.
    Explicit { m: Box<DeviceOperator> },
}

impl DevicePrecond {
    /// Uploads `pre` as `choice` says (the two must match: checked by the caller).
    pub(crate) fn upload(
        dev: &GpuDevice,
        pre: &Preconditioner,
        choice: &PrecondChoice,
        limits: &PaddingLimits,
    ) -> Result<DevicePrecond, PcgError> {
        Ok(match (pre, choice) {
            (Preconditioner::None, PrecondChoice::None) => DevicePrecond::None,
            (Preconditioner::Jacobi { inv_diag }, PrecondChoice::Jacobi(how)) => {
                DevicePrecond::Jacobi {
                    inv_diag: dev.upload(inv_diag)?,
                    how: *how,
                }
            }
            (
                Preconditioner::SsorFactored { k, kt, inv_diag },
                PrecondChoice::Factored {
                    k: kc,
                    scale,
                    kt: ktc,
                },
            ) => DevicePrecond::Factored {
                k: Box::new(DeviceOperator::upload(dev, k, kc.method, limits, "K")?),
                inv_diag: dev.upload(inv_diag)?,
                scale: *scale,
                kt: Box::new(DeviceOperator::upload(dev, kt, ktc.method, limits, "K^T")?),
            },
            (Preconditioner::SsorExplicit { m }, PrecondChoice::Explicit { m: mc }) => {
                DevicePrecond::Explicit {
                    m: Box::new(DeviceOperator::upload(dev, m, mc.method, limits, "M")?),
                }
            }
            (p, c) => {
                return Err(PcgError::InvalidParameter(format!(
                    "the GPU plan's preconditioner step is for {} but the preconditioner is {}",
                    c.kind_name(),
                    p.kind_name()
                )))
            }
        })
    }

    /// Takes the values of `pre`, a preconditioner of the same kind, form and patterns as the
    /// one uploaded (see [`DeviceOperator::refresh`]).
    pub(crate) fn refresh(
        &mut self,
        dev: &GpuDevice,
        pre: &Preconditioner,
        limits: &PaddingLimits,
    ) -> Result<(), PcgError> {
        match (self, pre) {
            (DevicePrecond::None, Preconditioner::None) => {}
            (DevicePrecond::Jacobi { inv_diag, .. }, Preconditioner::Jacobi { inv_diag: d }) => {
                dev.upload_into(d, inv_diag)?;
            }
            (
                DevicePrecond::Factored {
                    k, inv_diag, kt, ..
                },
                Preconditioner::SsorFactored {
                    k: hk,
                    kt: hkt,
                    inv_diag: d,
                },
            ) => {
                k.refresh(dev, hk, limits, "K")?;
                kt.refresh(dev, hkt, limits, "K^T")?;
                dev.upload_into(d, inv_diag)?;
            }
            (DevicePrecond::Explicit { m }, Preconditioner::SsorExplicit { m: hm }) => {
                m.refresh(dev, hm, limits, "M")?;
            }
            (_, p) => {
                return Err(PcgError::InvalidParameter(format!(
                    "new values for a {} preconditioner of another kind or form than the one \
                     on the device",
                    p.kind_name()
                )))
            }
        }
        Ok(())
    }

    /// Queues `u = M^-1 r`; `t` is scratch (the factored form's middle vector).
    pub(crate) fn apply(
        &self,
        dev: &GpuDevice,
        r: &DeviceVec<f64>,
        u: &mut DeviceVec<f64>,
        t: &mut DeviceVec<f64>,
    ) -> Result<(), GpuError> {
        match self {
            DevicePrecond::None => dev.copy(r, u),
            DevicePrecond::Jacobi { inv_diag, how } => {
                jacobi_apply(dev, how.loads, how.config, inv_diag, r, u)
            }
            DevicePrecond::Factored {
                k,
                inv_diag,
                scale,
                kt,
            } => {
                k.apply(dev, r, t)?;
                diag_scale(dev, scale.loads, scale.config, inv_diag, t)?;
                kt.apply(dev, t, u)
            }
            DevicePrecond::Explicit { m } => m.apply(dev, r, u),
        }
    }

    /// Compiles (or finds) and loads every kernel [`DevicePrecond::apply`] launches.
    pub(crate) fn preload(&self, dev: &GpuDevice) -> Result<(), GpuError> {
        match self {
            DevicePrecond::None => Ok(()),
            DevicePrecond::Jacobi { how, .. } => {
                preload_precond(dev, PrecondKernel::Jacobi(how.loads))
            }
            DevicePrecond::Factored { k, scale, kt, .. } => {
                k.preload(dev)?;
                preload_precond(dev, PrecondKernel::DiagScale(scale.loads))?;
                kt.preload(dev)
            }
            DevicePrecond::Explicit { m } => m.preload(dev),
        }
    }
}
