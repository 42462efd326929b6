//! The operands of the GPU backend on the device: a sparse matrix in the format its
//! [`SpmvMethod`] names, and the preconditioner's arrays.
use std::time::Instant;

use autopcg_gpu::kernels::convert::{csr_to_dia, csr_to_ell, csr_to_hyb, ConvertKernel};
use autopcg_gpu::kernels::dot::Dot3Kernel;
use autopcg_gpu::kernels::precond::{jacobi_apply, PrecondKernel};
use autopcg_gpu::kernels::spmv::{
    spmv_coo, spmv_csr, spmv_csr_dot3_next, spmv_dia, spmv_dia_dot3_next, spmv_ell,
    spmv_ell_dot3_next, spmv_hyb, Dot3Epilogue, SpmvKernel,
};
use autopcg_gpu::kernels::vector::VectorKernel;
use autopcg_gpu::{
    CusparseCsr, DeviceCoo, DeviceCsr, DeviceDia, DeviceEll, DeviceHyb, DeviceVec, GpuDevice,
    GpuError, KernelSource, ModuleSpec,
};
use autopcg_sparse::{CooMatrix, CsrMatrix, PaddingLimits, SparseError};

use super::choice::{ElementwiseChoice, PrecondChoice, SpmvMethod};
use super::BackendTimes;
use crate::{PcgError, Preconditioner};

/// Times the phases of putting operands on the device, when `times` is given (otherwise it only
/// keeps time, and synchronises nothing). Device work is asynchronous: each phase ends with a
/// synchronisation of the stream (a few microseconds), so that the copies and kernels it
/// queued are counted in it and not in the phase after it.
pub(crate) struct Stopwatch<'t> {
    times: Option<&'t mut BackendTimes>,
    start: Instant,
}

impl<'t> Stopwatch<'t> {
    /// Starts the first phase now.
    pub(crate) fn new(times: Option<&'t mut BackendTimes>) -> Self {
        Stopwatch {
            times,
            start: Instant::now(),
        }
    }

    /// The times being kept, for a nested upload to add to.
    pub(crate) fn times(&mut self) -> Option<&mut BackendTimes> {
        self.times.as_deref_mut()
    }

    /// Ends the phase since the last lap (waiting for its device work) and adds its time to
    /// `part`; the next phase starts now.
    pub(crate) fn lap(
        &mut self,
        dev: &GpuDevice,
        part: fn(&mut BackendTimes) -> &mut f64,
    ) -> Result<(), GpuError> {
        if let Some(t) = self.times.as_deref_mut() {
            dev.synchronize()?;
            *part(t) += self.start.elapsed().as_secs_f64() * 1e3;
        }
        self.start = Instant::now();
        Ok(())
    }

    /// Restarts the phase now, leaving out what happened since the last lap.
    pub(crate) fn restart(&mut self) {
        self.start = Instant::now();
    }
}

/// [`BackendTimes::upload_ms`].
pub(crate) fn upload_part(t: &mut BackendTimes) -> &mut f64 {
    &mut t.upload_ms
}

/// [`BackendTimes::convert_ms`].
pub(crate) fn convert_part(t: &mut BackendTimes) -> &mut f64 {
    &mut t.convert_ms
}

/// [`BackendTimes::load_ms`].
pub(crate) fn load_part(t: &mut BackendTimes) -> &mut f64 {
    &mut t.load_ms
}

/// [`BackendTimes::precond_ms`].
pub(crate) fn precond_part(t: &mut BackendTimes) -> &mut f64 {
    &mut t.precond_ms
}

/// A matrix in one device format.
#[derive(Debug)]
enum DeviceMatrix {
    Csr(DeviceCsr),
    Ell(DeviceEll),
    Dia(DeviceDia),
    Coo(DeviceCoo),
    Hyb(DeviceHyb),
    /// CSR with cuSPARSE's SpMV prepared for it (boxed: its handle and descriptors make it
    /// the largest variant by far).
    Cusparse(Box<CusparseCsr>),
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
    /// needs beside the matrix (the merge-path CSR kernel's workspace; for cuSPARSE, its
    /// handle, descriptors and preprocessed buffer, timed as the conversion).
    ///
    /// Adds the time of its copies and allocations (the merge-path workspace's small kernel
    /// included) and of its conversion to `times` when given (see [`Stopwatch`]).
    pub(crate) fn upload_timed(
        dev: &GpuDevice,
        a: &CsrMatrix,
        method: SpmvMethod,
        limits: &PaddingLimits,
        operand: &str,
        mut times: Option<&mut BackendTimes>,
    ) -> Result<DeviceOperator, PcgError> {
        if let SpmvMethod::Coo { .. } = method {
            let mut sw = Stopwatch::new(times);
            let coo = CooMatrix::from_csr(a);
            sw.lap(dev, convert_part)?;
            let m = DeviceCoo::upload(dev, &coo)?;
            sw.lap(dev, upload_part)?;
            return Ok(DeviceOperator {
                mat: DeviceMatrix::Coo(m),
                method,
                source: None,
            });
        }
        let mut sw = Stopwatch::new(times.as_deref_mut());
        let csr = DeviceCsr::upload(dev, a)?;
        sw.lap(dev, upload_part)?;
        Self::from_csr_timed(dev, csr, method, limits, operand, times)
    }

    /// The operand made from CSR arrays already on the device (uploaded, or built there): kept
    /// as they are for the CSR kernels (with the merge-path workspace when the kernel needs
    /// it), handed to cuSPARSE, or converted on the device to ELL, DIA or HYB (the CSR arrays
    /// are then dropped). COO, built on the host only, goes through a host copy of the arrays.
    /// Adds the time of its allocations and conversion to `times` when given.
    pub(crate) fn from_csr_timed(
        dev: &GpuDevice,
        mut csr: DeviceCsr,
        method: SpmvMethod,
        limits: &PaddingLimits,
        operand: &str,
        times: Option<&mut BackendTimes>,
    ) -> Result<DeviceOperator, PcgError> {
        let mut sw = Stopwatch::new(times);
        let mat = match method {
            SpmvMethod::Csr { kernel, .. } => {
                // The merge-path kernel's workspace, made once here, before any graph capture.
                csr.prepare_for(dev, kernel)?;
                sw.lap(dev, upload_part)?;
                DeviceMatrix::Csr(csr)
            }
            SpmvMethod::Cusparse { alg } => {
                let m = CusparseCsr::new(dev, csr, alg)?;
                sw.lap(dev, convert_part)?;
                DeviceMatrix::Cusparse(Box::new(m))
            }
            SpmvMethod::Coo { .. } => {
                let (indptr, indices, data) = csr.download(dev)?;
                let host =
                    CsrMatrix::try_from_parts(csr.nrows(), csr.ncols(), indptr, indices, data)
                        .map_err(|e| conversion(operand, "COO", e))?;
                drop(csr);
                let coo = CooMatrix::from_csr(&host);
                sw.lap(dev, convert_part)?;
                let m = DeviceCoo::upload(dev, &coo)?;
                sw.lap(dev, upload_part)?;
                DeviceMatrix::Coo(m)
            }
            _ => {
                let m = convert(dev, &csr, method, limits, operand)?;
                drop(csr);
                sw.lap(dev, convert_part)?;
                m
            }
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
    /// The time of the copies and of the conversion is added to `times` when given (see
    /// [`Stopwatch`]).
    pub(crate) fn refresh(
        &mut self,
        dev: &GpuDevice,
        a: &CsrMatrix,
        limits: &PaddingLimits,
        operand: &str,
        times: Option<&mut BackendTimes>,
    ) -> Result<(), PcgError> {
        let mut sw = Stopwatch::new(times);
        match (&mut self.mat, self.method) {
            (DeviceMatrix::Csr(m), _) if m.nnz() == a.nnz() && m.nrows() == a.nrows() => {
                m.upload_values(dev, a.data())?;
                sw.lap(dev, upload_part)?;
            }
            // cuSPARSE's preprocessing depends on the pattern only: it stays.
            (DeviceMatrix::Cusparse(c), _)
                if c.matrix().nnz() == a.nnz() && c.matrix().nrows() == a.nrows() =>
            {
                c.matrix_mut().upload_values(dev, a.data())?;
                sw.lap(dev, upload_part)?;
            }
            (DeviceMatrix::Ell(_) | DeviceMatrix::Dia(_) | DeviceMatrix::Hyb(_), method) => {
                let source = match self.source.take() {
                    Some(mut s) if s.nnz() == a.nnz() && s.nrows() == a.nrows() => {
                        s.upload_values(dev, a.data())?;
                        s
                    }
                    _ => DeviceCsr::upload(dev, a)?,
                };
                sw.lap(dev, upload_part)?;
                self.mat = convert(dev, &source, method, limits, operand)?;
                sw.lap(dev, convert_part)?;
                self.source = Some(source);
            }
            _ => {
                *self =
                    DeviceOperator::upload_timed(dev, a, self.method, limits, operand, sw.times())?
            }
        }
        Ok(())
    }

    /// The CSR values the operand is made from, on the device: a CSR operand's own, or the
    /// kept source of an ELL, DIA or HYB operand after its first refresh; `None` otherwise (a
    /// COO operand, or a converted one not yet refreshed).
    pub(crate) fn device_csr_source(&mut self) -> Option<&mut DeviceCsr> {
        match &mut self.mat {
            DeviceMatrix::Csr(m) => Some(m),
            DeviceMatrix::Cusparse(c) => Some(c.matrix_mut()),
            DeviceMatrix::Ell(_) | DeviceMatrix::Dia(_) | DeviceMatrix::Hyb(_) => {
                self.source.as_mut()
            }
            _ => None,
        }
    }

    /// Makes sure the operand keeps CSR values on the device (see
    /// [`DeviceOperator::device_csr_source`]): an ELL, DIA or HYB operand without a kept
    /// source gets `b`, the host matrix it was made from, uploaded as one. Returns `false`
    /// (nothing done) for a COO operand, which keeps none.
    pub(crate) fn keep_source(&mut self, dev: &GpuDevice, b: &CsrMatrix) -> Result<bool, PcgError> {
        match &self.mat {
            DeviceMatrix::Csr(_) | DeviceMatrix::Cusparse(_) => Ok(true),
            DeviceMatrix::Ell(_) | DeviceMatrix::Dia(_) | DeviceMatrix::Hyb(_) => {
                if self.source.is_none() {
                    self.source = Some(DeviceCsr::upload(dev, b)?);
                }
                Ok(true)
            }
            DeviceMatrix::Coo(_) => Ok(false),
        }
    }

    /// Makes an ELL, DIA or HYB operand keep `csr`, CSR arrays of the matrix it was made from
    /// already on the device (built there), as its source, unless it keeps one; `false`
    /// (nothing kept) for a COO operand, which keeps none. CSR and cuSPARSE operands are their
    /// own source: `csr` is dropped.
    pub(crate) fn keep_device_source(&mut self, csr: DeviceCsr) -> bool {
        match &self.mat {
            DeviceMatrix::Csr(_) | DeviceMatrix::Cusparse(_) => true,
            DeviceMatrix::Ell(_) | DeviceMatrix::Dia(_) | DeviceMatrix::Hyb(_) => {
                if self.source.is_none() {
                    self.source = Some(csr);
                }
                true
            }
            DeviceMatrix::Coo(_) => false,
        }
    }

    /// Whether [`DeviceOperator::device_csr_source`] has nothing yet for an operand that can
    /// keep one (a converted operand without a kept source).
    pub(crate) fn lacks_source(&self) -> bool {
        matches!(
            self.mat,
            DeviceMatrix::Ell(_) | DeviceMatrix::Dia(_) | DeviceMatrix::Hyb(_)
        ) && self.source.is_none()
    }

    /// `||B||_inf` from the CSR values on the device (downloaded; see
    /// [`DeviceOperator::can_stage`]), as `inf_norm` computes it on the host.
    pub(crate) fn csr_inf_norm(&mut self, dev: &GpuDevice) -> Result<f64, PcgError> {
        let m = self.device_csr_source().ok_or_else(|| {
            PcgError::InvalidParameter(
                "the norm of an operand without CSR values on the device (internal error)".into(),
            )
        })?;
        let (indptr, _, vals) = m.download(dev)?;
        Ok(indptr
            .windows(2)
            .map(|w| {
                vals[w[0] as usize..w[1] as usize]
                    .iter()
                    .fold(0.0f64, |s, v| s + v.abs())
            })
            .fold(0.0f64, f64::max))
    }

    /// Whether [`DeviceOperator::stage_values`] can take new values of `nnz` entries.
    pub(crate) fn can_stage(&mut self, nnz: usize) -> bool {
        self.device_csr_source().is_some_and(|m| m.nnz() == nnz)
    }

    /// Overwrites the CSR values the operand is made from (see
    /// [`DeviceOperator::can_stage`], which must hold) with what `fill` writes
    /// (see `GpuDevice::upload_into_filled`). A converted operand is left as it was until
    /// [`DeviceOperator::convert_staged`]; staging the old values again undoes this. The
    /// time of the copy is added to `times` when given.
    pub(crate) fn stage_values(
        &mut self,
        dev: &GpuDevice,
        fill: &(dyn Fn(usize, &mut [f64]) + Sync),
        times: Option<&mut BackendTimes>,
    ) -> Result<(), PcgError> {
        let mut sw = Stopwatch::new(times);
        let m = self.device_csr_source().ok_or_else(|| {
            PcgError::InvalidParameter(
                "staged values for an operand without CSR values on the device (internal error)"
                    .into(),
            )
        })?;
        m.fill_values(dev, fill)?;
        sw.lap(dev, upload_part)?;
        Ok(())
    }

    /// Makes an ELL, DIA or HYB operand again from its staged source (nothing for a CSR
    /// operand, which the staging overwrote in place). Buffers of a converted operand may be
    /// new: graphs that captured them must be captured again.
    pub(crate) fn convert_staged(
        &mut self,
        dev: &GpuDevice,
        limits: &PaddingLimits,
        operand: &str,
        times: Option<&mut BackendTimes>,
    ) -> Result<(), PcgError> {
        let mut sw = Stopwatch::new(times);
        if let (DeviceMatrix::Ell(_) | DeviceMatrix::Dia(_) | DeviceMatrix::Hyb(_), Some(source)) =
            (&self.mat, &self.source)
        {
            self.mat = convert(dev, source, self.method, limits, operand)?;
            sw.lap(dev, convert_part)?;
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
            (DeviceMatrix::Cusparse(m), SpmvMethod::Cusparse { .. }) => m.run(x, y),
            (_, method) => Err(GpuError::launch(
                method.kernel_name(),
                "the uploaded matrix is in another format (internal error)",
            )),
        }
    }

    /// Queues `w = B u` with the variant of the method's kernel that adds the three dots of
    /// the PCG iteration in its epilogue and runs the recurrence for the next iteration, with
    /// `cfg` (the plan's [`super::GpuPlanChoice::fused_dots`]).
    pub(crate) fn apply_dot3_next(
        &self,
        dev: &GpuDevice,
        cfg: autopcg_gpu::LaunchConfig,
        u: &DeviceVec<f64>,
        w: &mut DeviceVec<f64>,
        e: Dot3Epilogue<'_>,
    ) -> Result<(), GpuError> {
        match (&self.mat, self.method) {
            (DeviceMatrix::Csr(m), SpmvMethod::Csr { kernel, .. }) => {
                spmv_csr_dot3_next(dev, m, kernel, cfg, u, w, e)
            }
            (DeviceMatrix::Ell(m), SpmvMethod::Ell { .. }) => {
                spmv_ell_dot3_next(dev, m, cfg, u, w, e)
            }
            (DeviceMatrix::Dia(m), SpmvMethod::Dia { .. }) => {
                spmv_dia_dot3_next(dev, m, cfg, u, w, e)
            }
            (_, method) => Err(GpuError::launch(
                method.kernel_name(),
                "has no variant with the three dots in its epilogue (internal error: the plan \
                 was checked)",
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

/// Compiles (or finds) and loads every kernel an operand run by `method` launches and, for a
/// format built on the device (ELL, DIA, HYB), the conversion kernels, before the operand is
/// uploaded.
pub(crate) fn preload_method(dev: &GpuDevice, method: SpmvMethod) -> Result<(), GpuError> {
    for (k, _) in method.launches() {
        preload_spmv(dev, k)?;
    }
    if matches!(
        method,
        SpmvMethod::Ell { .. } | SpmvMethod::Dia { .. } | SpmvMethod::Hyb { .. }
    ) {
        let spec = ModuleSpec::plain(KernelSource::Convert);
        for k in ConvertKernel::ALL {
            dev.kernel(&spec, &k.to_string())?;
        }
    }
    Ok(())
}

/// [`preload_method`] for every operand of the preconditioner `choice` runs, and its
/// element-wise kernels: what [`DevicePrecond::preload`] loads, before anything is uploaded.
pub(crate) fn preload_precond_choice(
    dev: &GpuDevice,
    choice: &PrecondChoice,
) -> Result<(), GpuError> {
    match choice {
        PrecondChoice::None => Ok(()),
        PrecondChoice::Jacobi(how) => preload_precond(dev, PrecondKernel::Jacobi(how.loads)),
        PrecondChoice::Factored { k, kt } => {
            preload_method(dev, k.method)?;
            preload_method(dev, kt.method)
        }
        PrecondChoice::Explicit { m } => preload_method(dev, m.method),
    }
}

/// Loads the variant of `method`'s kernel with the three dots in its epilogue, when it has one.
pub(crate) fn preload_dot3_variant(dev: &GpuDevice, method: SpmvMethod) -> Result<(), GpuError> {
    if let Some((k, _)) = method.dot3_variant() {
        if let Some(e) = k.dot3_entry_point() {
            dev.kernel(&ModuleSpec::plain(k.source()), e)?;
        }
    }
    Ok(())
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
    /// `t = K r; u = (K^T diag(s)) t` (the scaling is in the stored `K^T`).
    Factored {
        k: Box<DeviceOperator>,
        kt: Box<DeviceOperator>,
    },
    /// `u = M r`.
    Explicit { m: Box<DeviceOperator> },
}

impl DevicePrecond {
    /// Uploads `pre` as `choice` says (the two must match: checked by the caller), adding the
    /// time of its copies and conversions to `times` when given (see [`Stopwatch`]).
    pub(crate) fn upload_timed(
        dev: &GpuDevice,
        pre: &Preconditioner,
        choice: &PrecondChoice,
        limits: &PaddingLimits,
        mut times: Option<&mut BackendTimes>,
    ) -> Result<DevicePrecond, PcgError> {
        let vector = |v: &[f64], times: Option<&mut BackendTimes>| {
            let mut sw = Stopwatch::new(times);
            let d = dev.upload(v)?;
            sw.lap(dev, upload_part)?;
            Ok::<_, PcgError>(d)
        };
        Ok(match (pre, choice) {
            (Preconditioner::None, PrecondChoice::None) => DevicePrecond::None,
            (Preconditioner::Jacobi { inv_diag }, PrecondChoice::Jacobi(how)) => {
                DevicePrecond::Jacobi {
                    inv_diag: vector(inv_diag, times)?,
                    how: *how,
                }
            }
            (
                Preconditioner::SsorFactored { k, kt, .. },
                PrecondChoice::Factored { k: kc, kt: ktc },
            ) => {
                let op = |m: &CsrMatrix, method, name, times: Option<&mut BackendTimes>| {
                    DeviceOperator::upload_timed(dev, m, method, limits, name, times).map(Box::new)
                };
                DevicePrecond::Factored {
                    k: op(k, kc.method, "K", times.as_deref_mut())?,
                    kt: op(kt, ktc.method, "K^T", times)?,
                }
            }
            (Preconditioner::SsorExplicit { m }, PrecondChoice::Explicit { m: mc }) => {
                DevicePrecond::Explicit {
                    m: Box::new(DeviceOperator::upload_timed(
                        dev, m, mc.method, limits, "M", times,
                    )?),
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
    /// The time of the copies and conversions is added to `times` when given.
    pub(crate) fn refresh(
        &mut self,
        dev: &GpuDevice,
        pre: &Preconditioner,
        limits: &PaddingLimits,
        mut times: Option<&mut BackendTimes>,
    ) -> Result<(), PcgError> {
        let vector = |d: &[f64], to: &mut DeviceVec<f64>, times: Option<&mut BackendTimes>| {
            let mut sw = Stopwatch::new(times);
            dev.upload_into(d, to)?;
            sw.lap(dev, upload_part)
        };
        match (self, pre) {
            (DevicePrecond::None, Preconditioner::None) => {}
            (DevicePrecond::Jacobi { inv_diag, .. }, Preconditioner::Jacobi { inv_diag: d }) => {
                vector(d, inv_diag, times)?;
            }
            (
                DevicePrecond::Factored { k, kt },
                Preconditioner::SsorFactored { k: hk, kt: hkt, .. },
            ) => {
                k.refresh(dev, hk, limits, "K", times.as_deref_mut())?;
                kt.refresh(dev, hkt, limits, "K^T", times)?;
            }
            (DevicePrecond::Explicit { m }, Preconditioner::SsorExplicit { m: hm }) => {
                m.refresh(dev, hm, limits, "M", times)?;
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
            DevicePrecond::Factored { k, kt } => {
                k.apply(dev, r, t)?;
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
            DevicePrecond::Factored { k, kt } => {
                k.preload(dev)?;
                kt.preload(dev)
            }
            DevicePrecond::Explicit { m } => m.preload(dev),
        }
    }
}
