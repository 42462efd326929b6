//! The CUDA backend: Chronopoulos–Gear PCG with every vector and scalar on one GPU.
//!
//! Each step of an iteration is a fixed sequence of kernel launches with no host
//! synchronisation:
//! - [`PcgBackend::update_vectors`]: one `cg_update` launch, which reads alpha and beta from the
//!   device scalar buffer ([`CgScalars`]) and does nothing once the recurrence has halted;
//! - [`PcgBackend::apply_preconditioner`]: SpMV(K) then SpMV(K^T diag(s)), or SpMV(M); nothing
//!   without a preconditioner (u is r: the update, the SpMV and the dots read r, so there is no
//!   copy) or with Jacobi (fused into the update, which writes the next u = D^-1 r; the start
//!   of a solve applies it once with `jacobi_apply`);
//! - [`PcgBackend::spmv_reduce_advance`]: SpMV(A), then the fused three-dot reduction whose last
//!   stage runs the recurrence on the device and appends (gamma, delta, rr) to the device history;
//!   or, where the plan says so ([`GpuPlanChoice::fused_dots`]), one launch of A's SpMV variant
//!   that adds the three dots in its epilogue and runs the recurrence in its last block. Either
//!   takes the iteration index from the scalar buffer (the iteration it last recorded plus one),
//!   so its launch arguments never change.
//!
//! [`PcgBackend::poll`] is the only synchronisation of a solve: one download of the history
//! entries since the last poll together with the scalar buffer. The records' outcomes are
//! recomputed on the host with [`GearScalars::advance`] (the same operations in the same order as
//! the device, so the same values), the last one is taken from the device, and a halt is reported
//! with the device's code, value and iteration.
//!
//! With [`GpuPlanChoice::use_graph`] the steps of an iteration are not launched when called:
//! once update, preconditioner and SpMV-reduction of an iteration have been asked for in order,
//! the whole iteration is replayed from a captured CUDA graph ([`GpuGraph`]), or, with
//! [`GpuPlanChoice::graph_iters`] = k > 1, every k such iterations from a graph of k. Anything
//! else (a poll, a step out of order, the true residual...) first launches what is still
//! deferred, so the work done is the same as kernel by kernel, and so are the results.
//!
//! The history of dots grows on demand (doubling, with one synchronisation each time);
//! [`GpuBackend::reserve_iterations`] sizes it ahead of a solve.
//!
//! As on the CPU, construction refuses a non-positive diagonal and uploads a badly scaled
//! system scaled by powers of two ([`crate::scaling`]); [`PcgBackend::solution`] scales the
//! iterate back on the host. Residual replacement is the driver's: it calls
//! [`PcgBackend::start`] again, whose reduction at iteration 0 resets the device recurrence
//! (a halt included).
use std::borrow::Cow;
use std::ops::ControlFlow;

use autopcg_gpu::kernels::dot::{
    dot, dot3_advance, dot3_advance_next, Dot3Workspace, DotKernel, DotWorkspace,
};
use autopcg_gpu::kernels::spmv::Dot3Epilogue;
use autopcg_gpu::kernels::ssor::{
    jacobi_inv_diag, ssor_k1_explicit_counted, ssor_k1_factors, ssor_k2_factors_counted,
    GramPattern, K2Pattern, SsorK1Build, SsorK1Explicit, SsorK2Build, SsorK2Parts,
};
use autopcg_gpu::kernels::vector::{
    cg_update, xpay, CgVectors, UpdateU, VectorKernel, VectorOp, VectorVariant,
};
use autopcg_gpu::{
    CgScalars, DeviceCsr, DeviceVec, GpuDevice, GpuError, GpuGraph, GpuTimer, LaunchConfig,
    TimingStats,
};
use autopcg_sparse::CsrMatrix;
use serde::Serialize;

use crate::backend::{IterRecord, PcgBackend};
use crate::gpu::poll::PollState;
use crate::scaling::{first_bad_diagonal, inf_norm, max_abs, ScaleFactors, ValueStats};
use crate::{
    pcg, PcgError, PcgInfo, PcgParams, Plan, PlannedPrecond, PrecondRef, Preconditioner,
    SolveFailure, ValueRefresh,
};

use super::ahead::UploadedA;
use super::ops::{
    load_part, precond_part, preload_dot3, preload_dot3_variant, preload_method,
    preload_precond_choice, preload_vector, upload_part, DeviceOperator, DevicePrecond, Stopwatch,
};
use super::refresh::DeviceRefresh;
use super::{BackendTimes, GpuPlanChoice, PrecondChoice, SpmvMethod, MAX_GRAPH_ITERS};

/// Iterations the device history holds before it first grows.
pub const INITIAL_HISTORY: u32 = 1024;

/// Most iterations [`GpuBackend::reserve_iterations`] reserves ahead (24 MiB of history, and as
/// much again of device staging where polls cannot use mapped host memory), so that a huge
/// iteration limit does not allocate a huge history up front.
pub const MAX_RESERVED_HISTORY: u32 = 1 << 20;

impl From<GpuError> for PcgError {
    fn from(e: GpuError) -> Self {
        PcgError::Gpu(std::sync::Arc::new(e))
    }
}

/// Which steps of the current iteration were asked for but not yet launched (graph mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing deferred beyond whole iterations.
    Idle,
    /// The update was asked for.
    Updated,
    /// The update and the preconditioner were asked for.
    Preconditioned,
}

/// The kernels of the start and of the residual checks (not part of the plan's iteration).
#[derive(Debug, Clone, Copy)]
struct AuxKernels {
    xpay: (VectorVariant, LaunchConfig),
    dot: (DotKernel, LaunchConfig),
}

/// Chronopoulos–Gear PCG state on one GPU.
pub struct GpuBackend {
    /// A handle to the device (shared with the caller's).
    dev: GpuDevice,
    n: usize,
    choice: GpuPlanChoice,
    aux: AuxKernels,
    a: DeviceOperator,
    pre: DevicePrecond,
    b: DeviceVec<f64>,
    x: DeviceVec<f64>,
    r: DeviceVec<f64>,
    u: DeviceVec<f64>,
    w: DeviceVec<f64>,
    p: DeviceVec<f64>,
    s: DeviceVec<f64>,
    /// Scratch: the factored preconditioner's middle vector, the true residual.
    t: DeviceVec<f64>,
    scalars: CgScalars,
    ws3: Dot3Workspace,
    ws: DotWorkspace,
    /// One iteration, captured on first use.
    graph_one: Option<GpuGraph>,
    /// `choice.graph_iters` iterations, captured on first use (when more than 1).
    graph_batch: Option<GpuGraph>,
    /// Whether the recurrence runs, what was queued and what was polled.
    poll: PollState,
    /// Whole iterations asked for but not yet launched (graph mode).
    pending_iters: u32,
    /// Steps of the current iteration asked for but not yet launched (graph mode).
    stage: Stage,
    /// The powers of two the uploaded system is scaled by.
    scale: ScaleFactors,
    /// ||A||_inf of the uploaded (scaled) matrix, computed on the host at construction;
    /// `None` after a staged value update until [`PcgBackend::matrix_norm`] asks for it (it
    /// serves only the estimate of a stagnation error, so an update does not read the rows
    /// for it).
    a_norm: Option<f64>,
    /// `max |a_ij|` of the caller's (unscaled) matrix: with a right-hand side's, it gives the
    /// scale factors of a new problem without reading A again.
    a_max: f64,
    /// Where the construction's time went, or the last [`GpuBackend::update_matrix`]'s.
    times: BackendTimes,
    /// What refreshes the preconditioner's values on the device, once
    /// [`GpuBackend::prepare_device_refresh`] made it.
    device_refresh: Option<DeviceRefresh>,
    /// The preconditioner the device built from `A`, when it did.
    built_from_a: Option<BuiltFromA>,
}

/// A preconditioner the device built from `A`'s arrays (see [`PrecondRef`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum BuiltFromA {
    /// First-order factored SSOR-AI with this omega.
    SsorK1(f64),
    /// First-order explicit SSOR-AI with this omega.
    SsorK1Explicit(f64),
    /// Second-order factored SSOR-AI with this omega.
    SsorK2(f64),
    /// Jacobi's inverse diagonal.
    Jacobi,
}

impl std::fmt::Debug for GpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBackend")
            .field("device", &&self.dev)
            .field("n", &self.n)
            .field("choice", &self.choice)
            .field("running", &self.poll.running)
            .field("queued", &self.poll.queued)
            .field("polled", &self.poll.polled)
            .finish()
    }
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
        // Executable graphs are destroyed with the backend; let replays still queued finish
        // first. An error here was already reported to whoever queued the work, or will be by
        // the next call on the device.
        if self.graph_one.is_some() || self.graph_batch.is_some() {
            let _ = self.dev.synchronize();
        }
    }
}

/// The diagonal entry of row `i` of `a` (0 when it is not stored).
fn diagonal_entry(a: &CsrMatrix, i: usize) -> f64 {
    let (c, v) = a.row(i);
    c.binary_search(&(i as u32)).map_or(0.0, |k| v[k])
}

/// The size of the system, checked against `b` (zero when `None`), `x0` and the
/// preconditioner.
fn dimension_checks(
    a: &CsrMatrix,
    pre_dim: Option<usize>,
    b: Option<&[f64]>,
    x0: Option<&[f64]>,
) -> Result<usize, PcgError> {
    let n = a.nrows();
    if a.ncols() != n {
        return Err(PcgError::Dimension(format!(
            "the matrix must be square, got {} x {}",
            n,
            a.ncols()
        )));
    }
    if u32::try_from(n).is_err() {
        return Err(PcgError::Dimension(format!(
            "{n} rows exceed the 32-bit indices of the GPU kernels"
        )));
    }
    if let Some(b) = b.filter(|b| b.len() != n) {
        return Err(PcgError::Dimension(format!(
            "right-hand side has length {}, the matrix has {n} rows",
            b.len()
        )));
    }
    if let Some(x0) = x0 {
        if x0.len() != n {
            return Err(PcgError::Dimension(format!(
                "initial guess has length {}, the matrix has {n} rows",
                x0.len()
            )));
        }
    }
    if let Some(m) = pre_dim {
        if m != n {
            return Err(PcgError::Dimension(format!(
                "preconditioner built for {m} rows, the matrix has {n}"
            )));
        }
    }
    Ok(n)
}

/// `A`'s operand in the format `choice` names: converted on the device from CSR arrays of `a`
/// already there (`ahead`: uploaded ahead, the unscaled `a` when the system is not scaled, or
/// by the caller) or from `a` uploaded now; COO is made on the host from `a` whatever was
/// uploaded.
fn operand_a(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<DeviceCsr>,
    choice: &GpuPlanChoice,
    times: Option<&mut BackendTimes>,
) -> Result<DeviceOperator, PcgError> {
    let limits = &choice.padding;
    match (ahead, choice.a.method) {
        (Some(csr), method) if !matches!(method, SpmvMethod::Coo { .. }) => {
            DeviceOperator::from_csr_timed(dev, csr, method, limits, "A", times)
        }
        // Arrays uploaded but not taken are freed before A is uploaded again.
        (ahead, method) => {
            drop(ahead);
            DeviceOperator::upload_timed(dev, a, method, limits, "A", times)
        }
    }
}

/// `A` (scaled as the backend solves it) and first-order explicit SSOR-AI with relaxation
/// `omega` on the device: `A`'s CSR arrays are uploaded once (or were, ahead), the product
/// `K^T diag(s) K` formed from them there ([`ssor_k1_explicit`]), then each operand put in the
/// format `choice` runs it in. Where the device does not form it (a pattern that is not
/// symmetric, a row uniting more entries of `K` than the device sorts for a row, too many
/// entries) the host forms it and it is uploaded, as a preconditioner built on the host would
/// be. Says which it was (`true`: formed on the device). `counted`: the product's pattern as
/// the plan counted it from `A`'s arrays uploaded ahead, if it did (the same pattern as `a`'s,
/// scaled or not), which the build then does not count again.
fn operands_with_ssor_k1_explicit(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<DeviceCsr>,
    counted: Option<GramPattern>,
    omega: f64,
    choice: &GpuPlanChoice,
    mut times: Option<&mut BackendTimes>,
) -> Result<(DeviceOperator, DevicePrecond, bool), PcgError> {
    let PrecondChoice::Explicit { m: mc } = &choice.precond else {
        return Err(PcgError::Backend(
            "a GPU plan forms explicit SSOR-AI without an explicit step (internal error)".into(),
        ));
    };
    let limits = &choice.padding;
    let mut sw = Stopwatch::new(times.as_deref_mut());
    let csr = match ahead {
        Some(csr) => csr,
        None => DeviceCsr::upload(dev, a)?,
    };
    sw.lap(dev, upload_part)?;
    let formed = ssor_k1_explicit_counted(dev, &csr, omega, counted)?;
    sw.lap(dev, precond_part)?;
    let on_device = matches!(formed, SsorK1Explicit::Built(_));
    let pre_dev = match formed {
        SsorK1Explicit::Built(parts) => {
            let m = DeviceOperator::from_csr_timed(
                dev,
                parts.m,
                mc.method,
                limits,
                "M",
                times.as_deref_mut(),
            )?;
            DevicePrecond::Explicit { m: Box::new(m) }
        }
        SsorK1Explicit::Refused(_) => host_precond(
            dev,
            a,
            &PlannedPrecond::ssor_k1_explicit_kind(omega),
            choice,
            times.as_deref_mut(),
        )?,
    };
    let a_dev = operand_a(dev, a, Some(csr), choice, times)?;
    Ok((a_dev, pre_dev, on_device))
}

/// `A` (scaled as the backend solves it) and Jacobi's inverse diagonal on the device: `A`'s
/// CSR arrays are uploaded once (or were, ahead: `ahead`, the unscaled `a`, which the system
/// then is), the inverse diagonal computed from them there, then `A` put in the format
/// `choice` runs it in. Says whether it was built on the device (`true`), as it is unless a
/// row stores no diagonal entry (the caller checked the diagonal; the host's build is then
/// uploaded).
fn operands_with_jacobi(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<DeviceCsr>,
    choice: &GpuPlanChoice,
    mut times: Option<&mut BackendTimes>,
) -> Result<(DeviceOperator, DevicePrecond, bool), PcgError> {
    let PrecondChoice::Jacobi(how) = choice.precond else {
        return Err(PcgError::Backend(
            "a GPU plan builds Jacobi without a Jacobi step (internal error)".into(),
        ));
    };
    let mut sw = Stopwatch::new(times.as_deref_mut());
    let csr = match ahead {
        Some(csr) => csr,
        None => DeviceCsr::upload(dev, a)?,
    };
    sw.lap(dev, upload_part)?;
    let built = jacobi_inv_diag(dev, &csr)?;
    sw.lap(dev, precond_part)?;
    let on_device = built.is_some();
    let pre_dev = match built {
        Some(inv_diag) => DevicePrecond::Jacobi { inv_diag, how },
        None => host_precond(
            dev,
            a,
            &crate::PrecondKind::Jacobi,
            choice,
            times.as_deref_mut(),
        )?,
    };
    let a_dev = operand_a(dev, a, Some(csr), choice, times)?;
    Ok((a_dev, pre_dev, on_device))
}

/// `A` (scaled as the backend solves it) and first-order factored SSOR-AI with relaxation
/// `omega` on the device: `A`'s CSR arrays are uploaded once, `K` and `K^T diag(s)` built
/// from them there, then each operand put in the format `choice` runs it in. Where `A`'s
/// pattern is not symmetric the factors are built on the host and uploaded instead (the host
/// build transposes K), as a preconditioner built on the host would be. Says which it was
/// (`true`: built on the device).
fn operands_with_ssor_k1(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<DeviceCsr>,
    omega: f64,
    choice: &GpuPlanChoice,
    times: Option<&mut BackendTimes>,
) -> Result<(DeviceOperator, DevicePrecond, bool), PcgError> {
    let kind = PlannedPrecond::ssor_k1_kind(omega);
    operands_with_factors(dev, a, ahead, &kind, choice, times, |csr| {
        Ok(match ssor_k1_factors(dev, csr, omega)? {
            SsorK1Build::Built { k, kt } => Some((*k, *kt)),
            SsorK1Build::AsymmetricPattern { .. } => None,
        })
    })
}

/// `A` (scaled as the backend solves it) and second-order factored SSOR-AI with relaxation
/// `omega` on the device: `A`'s CSR arrays are uploaded once (or were, ahead), `K = I - X +
/// X^2` and `K^T diag(s)` built from them there ([`ssor_k2_factors`]), then each operand put
/// in the format `choice` runs it in. Where the device does not build them (a pattern that is
/// not symmetric, a row uniting more entries than the device gathers for a row, too many
/// entries) the host builds them and they are uploaded, as a preconditioner built on the host
/// would be. Says which it was (`true`: built on the device). `counted`: the factors'
/// patterns as the plan counted them from `A`'s arrays uploaded ahead, if it did (the same
/// pattern as `a`'s, scaled or not), which the build then does not merge again.
fn operands_with_ssor_k2(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<DeviceCsr>,
    counted: Option<K2Pattern>,
    omega: f64,
    choice: &GpuPlanChoice,
    times: Option<&mut BackendTimes>,
) -> Result<(DeviceOperator, DevicePrecond, bool), PcgError> {
    let kind = PlannedPrecond::ssor_k2_kind(omega);
    operands_with_factors(dev, a, ahead, &kind, choice, times, |csr| {
        Ok(match ssor_k2_factors_counted(dev, csr, omega, counted)? {
            SsorK2Build::Built(parts) => {
                let SsorK2Parts { k, kt, .. } = *parts;
                Some((k, kt))
            }
            SsorK2Build::Refused(_) => None,
        })
    })
}

/// `A` (scaled as the backend solves it) and the factored SSOR-AI `kind`, its `K` and
/// `K^T diag(s)` made by `build` from `A`'s CSR arrays on the device (uploaded here, or ahead),
/// or, where `build` gives none, built on the host and uploaded; then each operand put in the
/// format `choice` runs it in. Says whether `build` made them (`true`).
fn operands_with_factors(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<DeviceCsr>,
    kind: &crate::PrecondKind,
    choice: &GpuPlanChoice,
    mut times: Option<&mut BackendTimes>,
    build: impl FnOnce(&DeviceCsr) -> Result<Option<(DeviceCsr, DeviceCsr)>, GpuError>,
) -> Result<(DeviceOperator, DevicePrecond, bool), PcgError> {
    let PrecondChoice::Factored { k: kc, kt: ktc } = &choice.precond else {
        return Err(PcgError::Backend(
            "a GPU plan builds factored SSOR-AI without factored steps (internal error)".into(),
        ));
    };
    let limits = &choice.padding;
    let mut sw = Stopwatch::new(times.as_deref_mut());
    let csr = match ahead {
        Some(csr) => csr,
        None => DeviceCsr::upload(dev, a)?,
    };
    sw.lap(dev, upload_part)?;
    let built = build(&csr)?;
    sw.lap(dev, precond_part)?;
    let on_device = built.is_some();
    let pre_dev = match built {
        Some((k, kt)) => {
            let mut op = |m, method, name| {
                DeviceOperator::from_csr_timed(dev, m, method, limits, name, times.as_deref_mut())
                    .map(Box::new)
            };
            let k = op(k, kc.method, "K")?;
            let kt = op(kt, ktc.method, "K^T")?;
            DevicePrecond::Factored { k, kt }
        }
        None => host_precond(dev, a, kind, choice, times.as_deref_mut())?,
    };
    let a_dev = operand_a(dev, a, Some(csr), choice, times)?;
    Ok((a_dev, pre_dev, on_device))
}

/// The preconditioner `kind` built on the host from `a` (scaled as the backend solves it) and
/// uploaded as `choice` says, where the device does not build it; the build is timed as the
/// preconditioner's, the copies as uploads.
fn host_precond(
    dev: &GpuDevice,
    a: &CsrMatrix,
    kind: &crate::PrecondKind,
    choice: &GpuPlanChoice,
    mut times: Option<&mut BackendTimes>,
) -> Result<DevicePrecond, PcgError> {
    let mut sw = Stopwatch::new(times.as_deref_mut());
    let host = Preconditioner::build(a, kind)?;
    sw.lap(dev, precond_part)?;
    DevicePrecond::upload_timed(dev, &host, &choice.precond, &choice.padding, times)
}

/// Compiles (or finds) and loads every kernel the plan `choice` launches, with the auxiliary
/// kernels `aux` and the conversion kernels of the operands built on the device.
fn preload(dev: &GpuDevice, choice: &GpuPlanChoice, aux: &AuxKernels) -> Result<(), GpuError> {
    preload_method(dev, choice.a.method)?;
    if choice.fused_dots.is_some() {
        preload_dot3_variant(dev, choice.a.method)?;
    }
    preload_precond_choice(dev, &choice.precond)?;
    preload_vector(dev, choice.update_op().kernel(choice.update.variant))?;
    preload_vector(dev, VectorKernel::Xpay(aux.xpay.0))?;
    preload_dot3(dev, choice.dot3.kernel, choice.dot3.config.threads)?;
    dev.kernel(
        &autopcg_gpu::ModuleSpec::dot(aux.dot.1.threads),
        &aux.dot.0.to_string(),
    )?;
    // The gather of every poll of the recurrence.
    autopcg_gpu::scalars::preload(dev)?;
    Ok(())
}

impl GpuBackend {
    /// Uploads A (in the format `choice` names), the preconditioner's arrays, b and x0 (zero
    /// when `None`) to `dev`, allocates the work vectors, the scalar buffer and the history, and
    /// loads every kernel the plan uses (compiling on first use), so that later steps only
    /// queue work. Checks dimensions, the choice ([`GpuPlanChoice::check`]) and that the
    /// diagonal is positive ([`PcgError::BadDiagonal`]). A badly scaled system is uploaded
    /// scaled by powers of two ([`ScaleFactors::for_system`], the preconditioner scaled to
    /// match); the solution is scaled back when downloaded.
    ///
    /// `pre` is the host's preconditioner, or one for the backend to build from `A`: for
    /// first-order SSOR-AI ([`PrecondRef::SsorK1FromA`], [`PrecondRef::SsorK1ExplicitFromA`])
    /// `A`'s CSR arrays are uploaded once, `K` and `K^T diag(s)` (or the product
    /// `K^T diag(s) K`) are built from them on the device (the same values as the host build),
    /// and only then is each operand put in the format its step runs; a pattern that is not
    /// symmetric, from which `K^T` cannot be read off (or a product the device does not form),
    /// is built on the host instead. Jacobi's inverse diagonal ([`PrecondRef::JacobiFromA`])
    /// is computed on the device from `A`'s CSR arrays the same way.
    pub fn new<'p>(
        dev: &GpuDevice,
        a: &CsrMatrix,
        pre: impl Into<PrecondRef<'p>>,
        b: &[f64],
        x0: Option<&[f64]>,
        choice: &GpuPlanChoice,
    ) -> Result<Self, PcgError> {
        Self::build(dev, a, None, pre.into(), Some(b), x0, choice)
    }

    /// [`GpuBackend::new`] for `a` whose CSR arrays `uploaded` holds on `dev` already (see
    /// [`crate::gpu::AheadUpload`]), with what its upload checked, and a zero right-hand side
    /// and start (the problem is set later, [`GpuBackend::set_problem`]): `a`'s values are not
    /// read on the host again, nor copied again, unless the system must be scaled (a badly
    /// scaled matrix, uploaded again scaled) or its SpMV runs in COO (made on the host).
    /// `uploaded` must hold `a`'s arrays as [`crate::gpu::UploadedA::upload`] made them from
    /// `a`; arrays of another shape are an error.
    pub fn with_uploaded<'p>(
        dev: &GpuDevice,
        a: &CsrMatrix,
        uploaded: UploadedA,
        pre: impl Into<PrecondRef<'p>>,
        choice: &GpuPlanChoice,
    ) -> Result<Self, PcgError> {
        if !uploaded.fits(a) {
            return Err(PcgError::Backend(format!(
                "the arrays uploaded ahead are {:?} with {} entries, the matrix {} x {} with {} \
                 (internal error)",
                uploaded.csr.shape(),
                uploaded.csr.nnz(),
                a.nrows(),
                a.ncols(),
                a.nnz()
            )));
        }
        Self::build(dev, a, Some(uploaded), pre.into(), None, None, choice)
    }

    /// [`GpuBackend::new`] (`b` zero when `None`), from arrays uploaded ahead when given.
    fn build(
        dev: &GpuDevice,
        a: &CsrMatrix,
        uploaded: Option<UploadedA>,
        pre: PrecondRef<'_>,
        b: Option<&[f64]>,
        x0: Option<&[f64]>,
        choice: &GpuPlanChoice,
    ) -> Result<Self, PcgError> {
        let n = dimension_checks(a, pre.dim(), b, x0)?;
        let props = dev.props();
        choice.check(n, pre, props)?;
        // The largest magnitude, the diagonal and the largest row sum of A: taken as it was
        // uploaded ahead, or here in one pass over its values and one over its diagonal.
        let (a_max, bad_diagonal, a_norm_unscaled, ahead, (gram, k2)) = match uploaded {
            Some(u) => {
                let bad = u.bad_diagonal.map(|i| (i + 1, diagonal_entry(a, i)));
                let gram = u.gram.into_inner().unwrap_or_else(|p| p.into_inner());
                let k2 = u.k2.into_inner().unwrap_or_else(|p| p.into_inner());
                (u.max_abs, bad, u.inf_norm, Some(u.csr), (gram, k2))
            }
            None => {
                let stats = ValueStats::of(a.indptr(), a.data());
                (
                    stats.max_abs,
                    first_bad_diagonal(a),
                    stats.inf_norm,
                    None,
                    (None, None),
                )
            }
        };
        let scale = ScaleFactors::from_maxima(a_max, b.map_or(0.0, max_abs));
        if let Some((row, value)) = bad_diagonal {
            return Err(PcgError::BadDiagonal {
                row,
                value,
                precond: pre.kind_name().to_string(),
            });
        }
        // Arrays uploaded ahead hold the unscaled values: a scaled system uploads its own.
        let ahead = ahead.filter(|_| scale.matrix_exp == 0);
        let a: Cow<'_, CsrMatrix> = scale.scale_matrix(a);
        let b = b.map(|b| scale.scale_rhs(b));
        let x0 = x0.map(|x| scale.scale_solution(x));
        // Scaling by a power of two scales every row sum exactly; the scaled matrix is summed
        // again all the same, as a value update does.
        let a_norm = if scale.matrix_exp == 0 {
            a_norm_unscaled
        } else {
            inf_norm(&a)
        };
        let aux = AuxKernels {
            xpay: (
                VectorVariant::GridV2,
                VectorVariant::GridV2.default_config(n as u64, props),
            ),
            dot: (
                DotKernel::LastBlock,
                DotKernel::LastBlock.default_config(n as u64, props),
            ),
        };
        let mut times = BackendTimes::default();
        // Every kernel the plan runs (and the conversion kernels an operand needs) is loaded
        // before anything is uploaded, so that compiling and loading is timed apart from the
        // copies and the conversions.
        let mut sw = Stopwatch::new(Some(&mut times));
        preload(dev, choice, &aux)?;
        if !matches!(pre, PrecondRef::Built(_)) {
            autopcg_gpu::kernels::ssor::preload(dev)?;
        }
        sw.lap(dev, load_part)?;
        let limits = &choice.padding;
        let mut built_from_a = None;
        let (a_dev, pre_dev) = match pre {
            PrecondRef::Built(pre) => {
                // The preconditioner of the scaled matrix.
                let pre = scale.scale_preconditioner(pre);
                let a_dev = operand_a(dev, &a, ahead, choice, sw.times())?;
                let pre_dev =
                    DevicePrecond::upload_timed(dev, &pre, &choice.precond, limits, sw.times())?;
                (a_dev, pre_dev)
            }
            // Built from the scaled matrix: K does not change with a power-of-two scaling and
            // K^T diag(s) scales with s, as the host's scaled preconditioner does.
            PrecondRef::SsorK1FromA { omega, .. } => {
                let (a_dev, pre_dev, on_device) =
                    operands_with_ssor_k1(dev, &a, ahead, omega, choice, sw.times())?;
                built_from_a = on_device.then_some(BuiltFromA::SsorK1(omega));
                (a_dev, pre_dev)
            }
            // As first order's: K does not change with a power-of-two scaling of A, K^T diag(s)
            // scales with s.
            PrecondRef::SsorK2FromA { omega, .. } => {
                let (a_dev, pre_dev, on_device) =
                    operands_with_ssor_k2(dev, &a, ahead, k2, omega, choice, sw.times())?;
                built_from_a = on_device.then_some(BuiltFromA::SsorK2(omega));
                (a_dev, pre_dev)
            }
            // K^T diag(s) K scales with s, as the host's scaled preconditioner does.
            PrecondRef::SsorK1ExplicitFromA { omega, .. } => {
                let (a_dev, pre_dev, on_device) = operands_with_ssor_k1_explicit(
                    dev,
                    &a,
                    ahead,
                    gram,
                    omega,
                    choice,
                    sw.times(),
                )?;
                built_from_a = on_device.then_some(BuiltFromA::SsorK1Explicit(omega));
                (a_dev, pre_dev)
            }
            // From the arrays uploaded ahead, unscaled: a scaled system builds it on the host
            // from the scaled matrix (1 / (2^e a_ii), the host's scaled preconditioner).
            PrecondRef::JacobiFromA { .. } => {
                let (a_dev, pre_dev, on_device) =
                    operands_with_jacobi(dev, &a, ahead, choice, sw.times())?;
                built_from_a = on_device.then_some(BuiltFromA::Jacobi);
                (a_dev, pre_dev)
            }
        };
        // The operands' phases were timed by their own uploads: the vectors' phase starts now.
        sw.restart();
        let x = match &x0 {
            Some(x0) => dev.upload(x0)?,
            None => dev.alloc_zeros(n)?,
        };
        let b = match &b {
            Some(b) => dev.upload(b)?,
            None => dev.alloc_zeros(n)?,
        };
        let (r, u, w) = (
            dev.alloc_zeros(n)?,
            dev.alloc_zeros(n)?,
            dev.alloc_zeros(n)?,
        );
        let (p, s, t) = (
            dev.alloc_zeros(n)?,
            dev.alloc_zeros(n)?,
            dev.alloc_zeros(n)?,
        );
        let scalars = CgScalars::new(dev, INITIAL_HISTORY)?;
        // The reduction and, when the plan fuses them, the SpMV with the dots share the
        // partial sums (they run one after the other).
        let fused_blocks = choice.fused_dots.map_or(0, |c| c.blocks);
        let ws3 = Dot3Workspace::new(dev, choice.dot3.config.blocks.max(fused_blocks))?;
        let ws = DotWorkspace::new(dev, aux.dot.1.blocks)?;
        sw.lap(dev, upload_part)?;
        Ok(GpuBackend {
            dev: dev.clone(),
            n,
            aux,
            a: a_dev,
            pre: pre_dev,
            b,
            x,
            r,
            u,
            w,
            p,
            s,
            t,
            scalars,
            ws3,
            ws,
            choice: choice.clone(),
            graph_one: None,
            graph_batch: None,
            poll: PollState::default(),
            pending_iters: 0,
            stage: Stage::Idle,
            scale,
            a_norm: Some(a_norm),
            a_max,
            times,
            device_refresh: None,
            built_from_a,
        })
    }

    /// Where the time of the construction went (uploads, conversions, kernel loading), or
    /// that of the last [`GpuBackend::update_matrix`] that changed the values (its uploads and
    /// conversions; it loads nothing).
    pub fn setup_times(&self) -> BackendTimes {
        self.times
    }

    /// The device.
    pub fn device(&self) -> &GpuDevice {
        &self.dev
    }

    /// The powers of two the system is solved scaled by ([`ScaleFactors::IDENTITY`] for an
    /// ordinary system).
    pub fn scale_factors(&self) -> ScaleFactors {
        self.scale
    }

    /// Sets a new right-hand side `b` and start `x0` (zero when `None`) for the next solve,
    /// keeping the matrix, the preconditioner, the plan, every device buffer and the captured
    /// graphs (the same buffers are overwritten). Returns `Ok(false)` without changing anything
    /// when `b` needs other power-of-two factors than the uploaded system was scaled by (a
    /// right-hand side of a very different magnitude): the caller then builds a new backend.
    pub fn set_problem(&mut self, b: &[f64], x0: Option<&[f64]>) -> Result<bool, PcgError> {
        crate::backend::check_problem_len(self.n, b, x0)?;
        if ScaleFactors::from_maxima(self.a_max, max_abs(b)) != self.scale {
            return Ok(false);
        }
        self.flush()?;
        let handle = self.dev.clone();
        let dev = &handle;
        dev.upload_into(&self.scale.scale_rhs(b), &mut self.b)?;
        match x0 {
            Some(x0) => dev.upload_into(&self.scale.scale_solution(x0), &mut self.x)?,
            None => dev.fill_zeros(&mut self.x)?,
        }
        self.poll.reset();
        Ok(true)
    }

    /// Replaces the matrix and the preconditioner by `a` and `pre` of the same pattern and
    /// size (new values: a time step, a Newton step), as the plan says: the matrices are
    /// converted and uploaded again, the vectors, scalars, workspaces and loaded kernels are
    /// kept, and graphs are captured anew at the next iteration. The right-hand side must be
    /// set again ([`GpuBackend::set_problem`]) before the next solve; returns `Ok(false)`
    /// without changing anything when the new values need other scale factors (the caller
    /// builds a new backend).
    pub fn update_matrix(&mut self, a: &CsrMatrix, pre: &Preconditioner) -> Result<bool, PcgError> {
        self.update_matrix_with(a, pre, &ValueStats::of(a.indptr(), a.data()))
    }

    /// [`GpuBackend::update_matrix`] with the statistics of `a`'s values already taken
    /// (`stats` must be [`ValueStats::of`] `a`: the caller's own pass over the new values).
    pub fn update_matrix_with(
        &mut self,
        a: &CsrMatrix,
        pre: &Preconditioner,
        stats: &ValueStats,
    ) -> Result<bool, PcgError> {
        if let Some(k) = stats.first_non_finite {
            return Err(PcgError::InvalidParameter(format!(
                "new matrix value {k} is {}",
                a.data().get(k).copied().unwrap_or(f64::NAN)
            )));
        }
        if a.nrows() != self.n || a.ncols() != self.n || pre.dim().is_some_and(|m| m != self.n) {
            return Err(PcgError::Dimension(format!(
                "new values for a {} x {} matrix and a preconditioner of {:?} rows, the prepared \
                 matrix has {} rows",
                a.nrows(),
                a.ncols(),
                pre.dim(),
                self.n
            )));
        }
        if let Some((row, value)) = first_bad_diagonal(a) {
            return Err(PcgError::BadDiagonal {
                row,
                value,
                precond: pre.kind_name().to_string(),
            });
        }
        let a_max = stats.max_abs;
        let rhs_exp_kept =
            ScaleFactors::from_maxima(self.a_max, 1.0) == ScaleFactors::from_maxima(a_max, 1.0);
        if !rhs_exp_kept {
            return Ok(false);
        }
        self.flush()?;
        let handle = self.dev.clone();
        let dev = &handle;
        let a = self.scale.scale_matrix(a);
        let pre = self.scale.scale_preconditioner(pre);
        self.choice.check(self.n, &*pre, dev.props())?;
        // Nothing queued may still read the buffers and graphs replaced below.
        dev.synchronize()?;
        // Values only where the operand allows (see DeviceOperator::refresh); the graphs are
        // captured again below, as a converted operand's buffers may be new.
        let mut times = BackendTimes::default();
        let padding = &self.choice.padding;
        self.a.refresh(dev, &a, padding, "A", Some(&mut times))?;
        self.pre.refresh(dev, &pre, padding, Some(&mut times))?;
        self.times = times;
        // Scaling by a power of two scales every row sum exactly.
        self.a_norm = Some(if self.scale.matrix_exp == 0 {
            stats.inf_norm
        } else {
            inf_norm(&a)
        });
        self.a_max = a_max;
        self.graph_one = None;
        self.graph_batch = None;
        self.poll.reset();
        Ok(true)
    }

    /// Whether new values of `A` can go to the device through
    /// [`GpuBackend::stage_matrix_values`]: the system is solved unscaled
    /// (`ScaleFactors::matrix_exp` is 0, so the device holds `A`'s own values) and `A`'s
    /// operand keeps CSR values of `nnz` entries on the device (a CSR operand, or a converted
    /// one after a first [`GpuBackend::update_matrix`]).
    pub fn can_stage_matrix_values(&mut self, nnz: usize) -> bool {
        self.scale.matrix_exp == 0 && self.a.can_stage(nnz)
    }

    /// Makes `A`'s operand keep CSR values on the device, so that new values can be staged
    /// ([`GpuBackend::can_stage_matrix_values`]): an ELL, DIA or HYB operand without a kept
    /// source gets `a`, the matrix it was made from, uploaded as one (device memory a caller
    /// pays only once it updates values). Returns whether values can now be staged: not for a
    /// scaled system or a COO operand.
    pub fn keep_matrix_source(&mut self, a: &CsrMatrix) -> Result<bool, PcgError> {
        if self.scale.matrix_exp != 0 || a.nrows() != self.n {
            return Ok(false);
        }
        if !self.a.can_stage(a.nnz()) {
            self.flush()?;
            let handle = self.dev.clone();
            if !self.a.keep_source(&handle, a)? {
                return Ok(false);
            }
        }
        Ok(self.can_stage_matrix_values(a.nnz()))
    }

    /// The first half of a value update that reads the new values once: `fill` (see
    /// `GpuDevice::upload_into_filled`) writes the new values of `A`'s entries, in CSR order,
    /// straight into the staging buffers of their copy to the device, where they replace the
    /// CSR values `A`'s operand is made from (the caller checks them on the way, as `fill`
    /// runs). Nothing else changes: [`GpuBackend::commit_matrix_values`] then makes the
    /// operand and the preconditioner from them, or, when the caller found a value it
    /// refuses, staging the old values again leaves the backend as it was.
    /// [`GpuBackend::can_stage_matrix_values`] must hold.
    pub fn stage_matrix_values(
        &mut self,
        fill: &(dyn Fn(usize, &mut [f64]) + Sync),
    ) -> Result<(), PcgError> {
        self.flush()?;
        // Nothing queued may still read the values overwritten below.
        self.dev.synchronize()?;
        let mut times = BackendTimes::default();
        self.a.stage_values(&self.dev, fill, Some(&mut times))?;
        self.times = times;
        Ok(())
    }

    /// The second half of a value update begun by [`GpuBackend::stage_matrix_values`]: `a`
    /// (the host matrix, holding the staged values) and `pre` (its preconditioner, refreshed
    /// on the host) take the place of the old, as [`GpuBackend::update_matrix_with`] does,
    /// except that `A`'s values are already on the device. The caller checked the staged
    /// values (finite; every diagonal entry positive) and found `max_abs` their largest
    /// magnitude; `||A||_inf` is computed from the device's copy if a solve asks for it. Returns
    /// `Ok(false)` when the new values need other scale factors: the caller then builds a new
    /// backend (this one holds the staged values but its old operand).
    pub fn commit_matrix_values(
        &mut self,
        a: &CsrMatrix,
        pre: &Preconditioner,
        max_abs: f64,
    ) -> Result<bool, PcgError> {
        if a.nrows() != self.n || pre.dim().is_some_and(|m| m != self.n) {
            return Err(PcgError::Dimension(format!(
                "new values for a {}-row matrix and a preconditioner of {:?} rows, the prepared \
                 matrix has {} rows",
                a.nrows(),
                pre.dim(),
                self.n
            )));
        }
        if ScaleFactors::from_maxima(max_abs, 1.0) != ScaleFactors::from_maxima(self.a_max, 1.0) {
            return Ok(false);
        }
        let handle = self.dev.clone();
        let dev = &handle;
        self.choice.check(self.n, pre, dev.props())?;
        let mut times = self.times;
        let padding = &self.choice.padding;
        self.a.convert_staged(dev, padding, "A", Some(&mut times))?;
        // The matrix is unscaled (see can_stage_matrix_values), so is its preconditioner.
        self.pre.refresh(dev, pre, padding, Some(&mut times))?;
        self.times = times;
        self.took_staged_values(max_abs);
        Ok(true)
    }

    /// [`GpuBackend::prepare_device_refresh`] for first-order factored SSOR-AI or Jacobi that
    /// this backend built on the device from `A` ([`PrecondRef::SsorK1FromA`],
    /// [`PrecondRef::JacobiFromA`]), with no host copy of the preconditioner: what the refresh
    /// needs is found on the device, from `A`'s CSR values kept there. Returns whether the
    /// device can do it: `false` for a backend whose preconditioner was not built on the
    /// device, a system solved scaled or without `A`'s CSR values on the device
    /// ([`GpuBackend::keep_matrix_source`] keeps them), or a factor kept in COO.
    pub fn prepare_device_refresh_from_a(&mut self) -> Result<bool, PcgError> {
        if self.device_refresh.is_some() {
            return Ok(true);
        }
        let Some(built) = self.built_from_a else {
            return Ok(false);
        };
        if self.scale.matrix_exp != 0 {
            return Ok(false);
        }
        self.flush()?;
        let handle = self.dev.clone();
        let Some(a) = self.a.device_csr_source() else {
            return Ok(false);
        };
        self.device_refresh = match built {
            BuiltFromA::SsorK1(omega) => DeviceRefresh::from_a(&handle, a, omega, &mut self.pre)?,
            BuiltFromA::SsorK1Explicit(omega) => {
                DeviceRefresh::explicit_from_a(&handle, a, omega, &mut self.pre)?
            }
            BuiltFromA::SsorK2(omega) => {
                DeviceRefresh::k2_from_a(&handle, a, omega, &mut self.pre)?
            }
            BuiltFromA::Jacobi => DeviceRefresh::jacobi_from_a(&handle, a, &self.pre)?,
        };
        Ok(self.device_refresh.is_some())
    }

    /// Prepares value updates that recompute the preconditioner on the device
    /// ([`GpuBackend::commit_matrix_values_on_device`]) from `refresh`, the host refresh of
    /// `pre`, the preconditioner of `a` this backend was made with (only their patterns are
    /// read: their values may be older). Uploads the patterns that needs once. Returns whether
    /// the device can do it: the system must be solved unscaled with `A`'s CSR values kept on
    /// the device ([`GpuBackend::can_stage_matrix_values`]), omega must be resolved, and no
    /// operand of the preconditioner may be kept in COO.
    pub fn prepare_device_refresh(
        &mut self,
        a: &CsrMatrix,
        refresh: &ValueRefresh,
        pre: &Preconditioner,
    ) -> Result<bool, PcgError> {
        if self.device_refresh.is_some() {
            return Ok(true);
        }
        if a.nrows() != self.n || !self.can_stage_matrix_values(a.nnz()) {
            return Ok(false);
        }
        self.flush()?;
        let handle = self.dev.clone();
        self.device_refresh = DeviceRefresh::new(&handle, a, refresh, pre, &mut self.pre)?;
        Ok(self.device_refresh.is_some())
    }

    /// The second half of a value update begun by [`GpuBackend::stage_matrix_values`], with
    /// the preconditioner recomputed on the device from the staged values (see
    /// [`GpuBackend::prepare_device_refresh`], which must have returned `true`): `A`'s operand
    /// and the preconditioner's are made from them, and nothing crosses the bus. The caller
    /// checked the staged values (finite; every diagonal entry positive) and found `max_abs`
    /// their largest magnitude. Returns the milliseconds of the preconditioner's kernels, or
    /// `None` when the new values need other scale factors: the caller then builds a new
    /// backend (this one holds the staged values but its old operands).
    pub fn commit_matrix_values_on_device(
        &mut self,
        n: usize,
        max_abs: f64,
    ) -> Result<Option<f64>, PcgError> {
        if n != self.n {
            return Err(PcgError::Dimension(format!(
                "new values for a {n}-row matrix, the prepared matrix has {} rows",
                self.n
            )));
        }
        if ScaleFactors::from_maxima(max_abs, 1.0) != ScaleFactors::from_maxima(self.a_max, 1.0) {
            return Ok(None);
        }
        let Some(refresh) = self.device_refresh.as_mut() else {
            return Err(PcgError::Backend(
                "a device refresh that was not prepared (internal error)".into(),
            ));
        };
        let handle = self.dev.clone();
        let dev = &handle;
        let mut times = self.times;
        let padding = &self.choice.padding;
        self.a.convert_staged(dev, padding, "A", Some(&mut times))?;
        let a = self.a.device_csr_source().ok_or_else(|| {
            PcgError::Backend("A keeps no CSR values on the device (internal error)".into())
        })?;
        let precond_ms = refresh.run(dev, a, &mut self.pre, padding, Some(&mut times))?;
        self.times = times;
        self.took_staged_values(max_abs);
        Ok(Some(precond_ms))
    }

    /// What follows a committed value update, whose values' largest magnitude is `max_abs`:
    /// `||A||_inf` is taken from the device when asked, and graphs are captured again (a
    /// converted operand's buffers may be new).
    fn took_staged_values(&mut self, max_abs: f64) {
        self.a_norm = None;
        self.a_max = max_abs;
        self.graph_one = None;
        self.graph_batch = None;
        self.poll.reset();
    }

    /// What each step runs.
    pub fn choice(&self) -> &GpuPlanChoice {
        &self.choice
    }

    /// Every step of one iteration (format, kernel, configuration), for reporting.
    pub fn plan(&self) -> Plan {
        self.choice.plan()
    }

    /// Makes room in the device history for a solve of up to `max_iter` iterations (at most
    /// [`MAX_RESERVED_HISTORY`]; beyond that it grows on demand), so that it does not grow
    /// during the solve. Waits for queued work when it grows.
    pub fn reserve_iterations(&mut self, max_iter: usize) -> Result<(), PcgError> {
        let want = u32::try_from(max_iter.saturating_add(1))
            .unwrap_or(u32::MAX)
            .min(MAX_RESERVED_HISTORY);
        if want > self.scalars.capacity() {
            self.grow_history(want)?;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ raw launches

    fn launch_update(&mut self) -> Result<(), GpuError> {
        let c = self.choice.update;
        let u = match (self.choice.update_op(), &self.pre) {
            (VectorOp::CgUpdateNoPre, _) => UpdateU::IsR,
            (VectorOp::CgUpdateJacobi, DevicePrecond::Jacobi { inv_diag, .. }) => UpdateU::Jacobi {
                inv_diag,
                u: &mut self.u,
            },
            _ => UpdateU::Separate(&self.u),
        };
        cg_update(
            &self.dev,
            c.variant,
            c.config,
            &self.scalars,
            CgVectors {
                u,
                w: &self.w,
                p: &mut self.p,
                s: &mut self.s,
                x: &mut self.x,
                r: &mut self.r,
            },
        )
    }

    /// The preconditioner step of an iteration: nothing when the update already made u (none:
    /// u is r; Jacobi: fused into the update).
    fn launch_precond(&mut self) -> Result<(), GpuError> {
        match self.choice.update_op() {
            VectorOp::CgUpdateNoPre | VectorOp::CgUpdateJacobi => Ok(()),
            _ => self.pre.apply(&self.dev, &self.r, &mut self.u, &mut self.t),
        }
    }

    /// u = M^-1 r from scratch (the start of a solve, a residual replacement): the
    /// preconditioner's own kernels, also for Jacobi; nothing without a preconditioner.
    fn launch_precond_from_r(&mut self) -> Result<(), GpuError> {
        match self.choice.update_op() {
            VectorOp::CgUpdateNoPre => Ok(()),
            _ => self.pre.apply(&self.dev, &self.r, &mut self.u, &mut self.t),
        }
    }

    fn launch_spmv_dots(&mut self) -> Result<(), GpuError> {
        let u_is_r = self.choice.update_op() == VectorOp::CgUpdateNoPre;
        let u = if u_is_r { &self.r } else { &self.u };
        if let Some(cfg) = self.choice.fused_dots {
            let e = Dot3Epilogue {
                r: &self.r,
                ws: &mut self.ws3,
                scalars: &mut self.scalars,
            };
            return self.a.apply_dot3_next(&self.dev, cfg, u, &mut self.w, e);
        }
        self.a.apply(&self.dev, u, &mut self.w)?;
        let c = self.choice.dot3;
        dot3_advance_next(
            &self.dev,
            c.kernel,
            c.config,
            &self.r,
            u,
            &self.w,
            &mut self.ws3,
            &mut self.scalars,
        )
    }

    fn launch_iteration(&mut self) -> Result<(), GpuError> {
        self.launch_update()?;
        self.launch_precond()?;
        self.launch_spmv_dots()
    }

    /// Captures `k` iterations into a graph.
    fn capture(&mut self, k: u32) -> Result<GpuGraph, GpuError> {
        let handle = self.dev.clone();
        let dev = &handle;
        dev.capture(|| {
            for _ in 0..k {
                self.launch_iteration()?;
            }
            Ok(())
        })
    }

    fn launch_graph_one(&mut self) -> Result<(), GpuError> {
        if self.graph_one.is_none() {
            self.graph_one = Some(self.capture(1)?);
        }
        match &self.graph_one {
            Some(g) => g.launch(),
            None => Ok(()),
        }
    }

    fn launch_graph_batch(&mut self) -> Result<(), GpuError> {
        if self.graph_batch.is_none() {
            let k = self.choice.graph_iters;
            self.graph_batch = Some(self.capture(k)?);
        }
        match &self.graph_batch {
            Some(g) => g.launch(),
            None => Ok(()),
        }
    }

    /// Launches whatever was asked for and deferred: whole iterations first (they came first),
    /// then the steps of the current one.
    fn flush(&mut self) -> Result<(), GpuError> {
        while self.pending_iters > 0 {
            self.launch_graph_one()?;
            self.pending_iters -= 1;
        }
        match std::mem::replace(&mut self.stage, Stage::Idle) {
            Stage::Idle => Ok(()),
            Stage::Updated => self.launch_update(),
            Stage::Preconditioned => {
                self.launch_update()?;
                self.launch_precond()
            }
        }
    }

    /// Replaces the history with one of `capacity` iterations, keeping the scalars and the
    /// entries not yet polled (downloaded into `carried`); graphs are captured anew.
    fn grow_history(&mut self, capacity: u32) -> Result<(), PcgError> {
        self.flush()?;
        let handle = self.dev.clone();
        let dev = &handle;
        let from = self.poll.polled + self.poll.carried.len() as u32;
        if self.poll.running && from < self.poll.queued {
            let (_, hist) = self.scalars.read_since(dev, from, self.poll.queued)?;
            self.poll.carried.extend(hist);
        }
        let raw = self.scalars.read_raw(dev)?;
        let mut fresh = CgScalars::new(dev, capacity)?;
        fresh.write_raw(dev, &raw)?;
        self.scalars = fresh;
        self.graph_one = None;
        self.graph_batch = None;
        Ok(())
    }

    /// Makes sure record `self.poll.queued` fits in the history.
    fn reserve_next(&mut self) -> Result<(), PcgError> {
        if self.poll.queued >= self.scalars.capacity() {
            let cap = self.scalars.capacity();
            let grown = cap
                .checked_mul(2)
                .filter(|&c| c > self.poll.queued)
                .ok_or_else(|| {
                    PcgError::Backend(format!(
                        "the device history cannot grow beyond {cap} iterations"
                    ))
                })?;
            self.grow_history(grown)?;
        }
        Ok(())
    }

    /// Consumes the backend, returning the current iterate.
    pub fn into_solution(mut self) -> Result<Vec<f64>, PcgError> {
        self.solution()
    }

    // ------------------------------------------------------------------ profiling

    /// Times each step kind and whole iterations, with CUDA events, and returns the medians.
    ///
    /// Each sample covers a batch of up to 32 back-to-back executions (fewer when `iters` is
    /// smaller), and about `iters` executions are timed per figure (at least 3 samples). Steps
    /// are timed alone, repeated on the current state: the update, the preconditioner, SpMV with
    /// the reduction. Whole iterations are timed from a fresh start, three ways: kernel by
    /// kernel, replayed from a one-iteration graph, and (when [`GpuPlanChoice::graph_iters`] is
    /// more than 1) from a graph of that many iterations. A sample in which the recurrence
    /// halted (it ran past convergence, where rounding can end it) is dropped and the batch
    /// halved.
    ///
    /// This restarts the solve: x is saved before and put back after, then
    /// [`PcgBackend::start`] runs again from it, so records not yet polled are lost. Call it
    /// before or after a solve, not in the middle of one.
    pub fn profile_steps(&mut self, iters: usize) -> Result<StepTimes, PcgError> {
        let handle = self.dev.clone();
        let dev = &handle;
        self.flush()?;
        let mut saved = dev.alloc_zeros(self.n)?;
        dev.copy(&self.x, &mut saved)?;
        let batch = iters.clamp(1, 32);
        let reps = iters.div_ceil(batch).max(3);
        self.reserve_iterations(batch + MAX_GRAPH_ITERS as usize)?;

        self.start()?;
        let update = time_step(dev, || self.launch_update(), batch, reps)?;
        self.start()?;
        let precond = time_step(dev, || self.launch_precond(), batch, reps)?;
        self.start()?;
        let spmv_dots = time_step(dev, || self.launch_spmv_dots(), batch, reps)?;

        let iteration = self.time_iterations(IterMode::Direct, batch, reps)?;
        let iteration_graph = self.time_iterations(IterMode::GraphOne, batch, reps)?;
        let k = self.choice.graph_iters as usize;
        let iteration_graph_batch = if k > 1 {
            Some(self.time_iterations(IterMode::GraphBatch, k.max(batch / k * k), reps)?)
        } else {
            None
        };

        dev.copy(&saved, &mut self.x)?;
        self.start()?;
        Ok(StepTimes {
            update,
            precond,
            spmv_dots,
            iteration,
            iteration_graph,
            iteration_graph_batch,
            graph_iters: self.choice.graph_iters,
            batch,
        })
    }

    /// Median time per iteration over samples of `batch` iterations from a fresh start.
    fn time_iterations(
        &mut self,
        mode: IterMode,
        mut batch: usize,
        reps: usize,
    ) -> Result<TimingStats, PcgError> {
        let handle = self.dev.clone();
        let dev = &handle;
        let k = self.choice.graph_iters as usize;
        let step = if mode == IterMode::GraphBatch { k } else { 1 };
        let timer = GpuTimer::new(dev)?;
        let mut samples = Vec::with_capacity(reps);
        let mut warm = false;
        let mut tries = 0;
        while samples.len() < reps {
            tries += 1;
            if tries > 8 * reps + 16 {
                return Err(PcgError::Backend(format!(
                    "profiling: the recurrence halted in every sample of {batch} iteration(s)"
                )));
            }
            self.start()?;
            timer.start()?;
            for _ in 0..batch / step {
                match mode {
                    IterMode::Direct => self.launch_iteration()?,
                    IterMode::GraphOne => self.launch_graph_one()?,
                    IterMode::GraphBatch => self.launch_graph_batch()?,
                }
            }
            let ms = timer.stop()?;
            let halted = self.scalars.read(dev)?.halt.is_some();
            if halted {
                if batch / 2 >= step {
                    batch = (batch / 2) / step * step;
                }
                continue;
            }
            if !warm {
                // The first sample absorbs graph capture and first-launch costs.
                warm = true;
                continue;
            }
            samples.push(ms / batch as f64);
        }
        // The loop above leaves the recurrence mid-run with the host counters of the start.
        self.poll.running = false;
        TimingStats::from_samples(&samples)
            .ok_or_else(|| PcgError::Backend("profiling: no sample was taken".into()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IterMode {
    Direct,
    GraphOne,
    GraphBatch,
}

/// `reps` samples of `batch` back-to-back calls of `launch` (after one untimed call), per call.
fn time_step(
    dev: &GpuDevice,
    launch: impl FnMut() -> Result<(), GpuError>,
    batch: usize,
    reps: usize,
) -> Result<TimingStats, PcgError> {
    Ok(autopcg_gpu::time_kernel_batched(
        dev, launch, batch, reps, 0.0,
    )?)
}

/// What [`GpuBackend::profile_steps`] measured: milliseconds per execution (median, min, max
/// over the samples).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTimes {
    /// The fused update.
    pub update: TimingStats,
    /// The preconditioner application (all its launches).
    pub precond: TimingStats,
    /// SpMV with A and the three-dot reduction with the recurrence.
    pub spmv_dots: TimingStats,
    /// One whole iteration, kernel by kernel.
    pub iteration: TimingStats,
    /// One whole iteration replayed from a one-iteration graph.
    pub iteration_graph: TimingStats,
    /// One iteration, replayed from graphs of `graph_iters` iterations (when more than 1).
    pub iteration_graph_batch: Option<TimingStats>,
    /// Iterations per batched graph.
    pub graph_iters: u32,
    /// Executions per timed sample.
    pub batch: usize,
}

impl PcgBackend for GpuBackend {
    fn n(&self) -> usize {
        self.n
    }

    fn rhs_norm(&mut self) -> Result<f64, PcgError> {
        let (k, cfg) = self.aux.dot;
        dot(&self.dev, k, cfg, &self.b, &self.b, &mut self.ws)?;
        Ok(self.ws.result(&self.dev)?.max(0.0).sqrt())
    }

    fn start(&mut self) -> Result<(), PcgError> {
        self.flush()?;
        let handle = self.dev.clone();
        let dev = &handle;
        // r = b - A x
        self.a.apply(dev, &self.x, &mut self.r)?;
        let (v, cfg) = self.aux.xpay;
        xpay(dev, v, cfg, -1.0, &self.b, &mut self.r)?;
        self.launch_precond_from_r()?;
        let u_is_r = self.choice.update_op() == VectorOp::CgUpdateNoPre;
        let u = if u_is_r { &self.r } else { &self.u };
        self.a.apply(dev, u, &mut self.w)?;
        dev.fill_zeros(&mut self.p)?;
        dev.fill_zeros(&mut self.s)?;
        let c = self.choice.dot3;
        dot3_advance(
            dev,
            c.kernel,
            c.config,
            &self.r,
            u,
            &self.w,
            &mut self.ws3,
            &mut self.scalars,
            0,
        )?;
        self.poll.running = true;
        self.poll.queued = 1;
        self.poll.polled = 0;
        self.poll.carried.clear();
        self.poll.host_scalars = None;
        Ok(())
    }

    fn update_vectors(&mut self) -> Result<(), PcgError> {
        if !self.poll.running {
            return Ok(());
        }
        if self.choice.use_graph {
            if self.stage != Stage::Idle {
                self.flush()?;
            }
            self.stage = Stage::Updated;
            return Ok(());
        }
        Ok(self.launch_update()?)
    }

    fn apply_preconditioner(&mut self) -> Result<(), PcgError> {
        if !self.poll.running {
            return Ok(());
        }
        if self.choice.use_graph && self.stage == Stage::Updated {
            self.stage = Stage::Preconditioned;
            return Ok(());
        }
        self.flush()?;
        Ok(self.launch_precond()?)
    }

    fn spmv_reduce_advance(&mut self) -> Result<(), PcgError> {
        if !self.poll.running {
            return Ok(());
        }
        // Growing the history launches everything deferred, so the stage is Idle after it.
        self.reserve_next()?;
        if self.choice.use_graph && self.stage == Stage::Preconditioned {
            self.stage = Stage::Idle;
            self.pending_iters += 1;
            self.poll.queued += 1;
            let k = self.choice.graph_iters;
            if k > 1 && self.pending_iters == k {
                self.launch_graph_batch()?;
                self.pending_iters = 0;
            } else if k == 1 {
                self.launch_graph_one()?;
                self.pending_iters = 0;
            }
            return Ok(());
        }
        self.flush()?;
        self.launch_spmv_dots()?;
        self.poll.queued += 1;
        Ok(())
    }

    fn poll(&mut self) -> Result<Vec<IterRecord>, PcgError> {
        self.flush()?;
        super::poll::poll_records(&self.dev, &mut self.scalars, &mut self.poll)
    }

    fn poll_growth(&self) -> usize {
        crate::gpu::GPU_POLL_GROWTH
    }

    fn true_residual_norm(&mut self) -> Result<f64, PcgError> {
        self.flush()?;
        let handle = self.dev.clone();
        let dev = &handle;
        self.a.apply(dev, &self.x, &mut self.t)?;
        let (v, cfg) = self.aux.xpay;
        xpay(dev, v, cfg, -1.0, &self.b, &mut self.t)?;
        let (k, cfg) = self.aux.dot;
        dot(dev, k, cfg, &self.t, &self.t, &mut self.ws)?;
        Ok(self.ws.result(dev)?.max(0.0).sqrt())
    }

    fn matrix_norm(&mut self) -> Result<f64, PcgError> {
        if let Some(v) = self.a_norm {
            return Ok(v);
        }
        self.flush()?;
        let v = self.a.csr_inf_norm(&self.dev)?;
        self.a_norm = Some(v);
        Ok(v)
    }

    fn solution_norm(&mut self) -> Result<f64, PcgError> {
        self.flush()?;
        let (k, cfg) = self.aux.dot;
        dot(&self.dev, k, cfg, &self.x, &self.x, &mut self.ws)?;
        Ok(self.ws.result(&self.dev)?.max(0.0).sqrt())
    }

    fn norm_factor(&self) -> f64 {
        self.scale.norm_factor()
    }

    fn solution(&mut self) -> Result<Vec<f64>, PcgError> {
        self.flush()?;
        let mut x = self.dev.download(&self.x)?;
        self.scale.unscale_solution(&mut x);
        Ok(x)
    }

    fn zero_solution(&mut self) -> Result<(), PcgError> {
        self.flush()?;
        self.dev.fill_zeros(&mut self.x)?;
        self.poll.reset();
        Ok(())
    }
}

/// Solves `A x = b` on `dev` from `x0` (zero when `None`) with the preconditioner `pre` as
/// `choice` says (the generator chooses plans: `autopcg_generator::plan`).
///
/// Returns the solution and what the solve did, or a [`SolveFailure`] that still carries the
/// last iterate when the solve ran out of iterations or stagnated.
pub fn solve_gpu(
    dev: &GpuDevice,
    a: &CsrMatrix,
    pre: &Preconditioner,
    b: &[f64],
    x0: Option<&[f64]>,
    params: &PcgParams,
    choice: &GpuPlanChoice,
) -> Result<(Vec<f64>, PcgInfo), SolveFailure> {
    let mut backend = GpuBackend::new(dev, a, pre, b, x0, choice)?;
    backend.reserve_iterations(params.max_iter)?;
    match pcg(&mut backend, params, |_| ControlFlow::Continue(())) {
        Ok(info) => Ok((backend.into_solution()?, info)),
        Err(error @ (PcgError::NotConverged { .. } | PcgError::Stagnated { .. })) => {
            Err(SolveFailure {
                error,
                x: backend.into_solution().ok(),
            })
        }
        Err(error) => Err(SolveFailure { error, x: None }),
    }
}
