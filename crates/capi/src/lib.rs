//! The C ABI of autopcg: `libautopcg` (shared and static) and `include/autopcg.h`, generated
//! from this file by cbindgen (`cbindgen.toml`; the test `header_is_current` regenerates it and
//! compares). The Fortran module `fortran/autopcg.f90` binds the same calls.
//!
//! A handle (`autopcg_solver`) is a prepared solver ([`autopcg::PreparedSolver`]): created
//! from CSR arrays (32- or 64-bit indices, 0- or 1-based, both triangles or one), which is the
//! setup (device, model, plan, preconditioner, uploads); then any number of solves, new values
//! of the same pattern, new tolerances; then destroyed.
//!
//! Every entry point returns a status code (`AUTOPCG_OK` or an `AUTOPCG_ERR_*`), sets the
//! calling thread's last error message (`autopcg_last_error`), checks its pointers for null,
//! and runs its body under `catch_unwind`: no panic crosses the boundary.
//!
//! Threads: a handle may be used from any thread, by one thread at a time; different handles
//! may be used from different threads at the same time.
#![warn(missing_docs)]
// Every entry point checks its pointers for null; the lengths behind them are the caller's
// promise, as in any C interface, and are documented on each function.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::ops::ControlFlow;
use std::path::PathBuf;

use autopcg::solver::StopReason;
use autopcg::{
    Device, EntryMap, IndexBase, ModelChoice, PcgParams, PrecondKind, PreparedSolver, Solver,
    Triangle,
};

mod status;
#[cfg(test)]
mod tests;

use status::{guard, Failure};
pub use status::{
    AUTOPCG_ERR_BAD_INPUT, AUTOPCG_ERR_DEVICE, AUTOPCG_ERR_INTERNAL, AUTOPCG_ERR_NOT_CONVERGED,
    AUTOPCG_ERR_NOT_SPD, AUTOPCG_OK,
};

/// No preconditioner.
pub const AUTOPCG_PRECOND_NONE: c_int = 0;
/// Jacobi (diagonal) preconditioner.
pub const AUTOPCG_PRECOND_JACOBI: c_int = 1;
/// First-order SSOR approximate inverse (the default).
pub const AUTOPCG_PRECOND_SSOR_AI: c_int = 2;
/// Second-order SSOR approximate inverse.
pub const AUTOPCG_PRECOND_SSOR_AI2: c_int = 3;

/// A GPU when one is usable, else the CPU (the default).
pub const AUTOPCG_DEVICE_AUTO: c_int = 0;
/// The CPU.
pub const AUTOPCG_DEVICE_CPU: c_int = 1;
/// GPU 0; `AUTOPCG_ERR_DEVICE` when there is none.
pub const AUTOPCG_DEVICE_GPU: c_int = 2;

/// The arrays hold the whole matrix (the default; its symmetry is checked unless
/// `check_symmetry` is 0).
pub const AUTOPCG_STORAGE_FULL: c_int = 0;
/// The arrays hold the lower triangle (column <= row), mirrored by the library.
pub const AUTOPCG_STORAGE_LOWER: c_int = 1;
/// The arrays hold the upper triangle (column >= row), mirrored by the library.
pub const AUTOPCG_STORAGE_UPPER: c_int = 2;

/// No solve yet.
pub const AUTOPCG_REASON_NONE: c_int = -1;
/// The true residual met the tolerance.
pub const AUTOPCG_REASON_CONVERGED: c_int = 0;
/// The iteration limit was reached.
pub const AUTOPCG_REASON_MAX_ITER: c_int = 1;
/// The residual stopped decreasing above the tolerance (below the attainable accuracy).
pub const AUTOPCG_REASON_STAGNATED: c_int = 2;
/// The matrix or the preconditioner is not symmetric positive definite.
pub const AUTOPCG_REASON_NOT_SPD: c_int = 3;
/// A non-finite value appeared.
pub const AUTOPCG_REASON_BREAKDOWN: c_int = 4;
/// The solve was stopped.
pub const AUTOPCG_REASON_STOPPED: c_int = 5;

/// Options of a handle. Fill with `autopcg_options_init`, then change what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AutopcgOptions {
    /// `AUTOPCG_PRECOND_*` (default `AUTOPCG_PRECOND_SSOR_AI`).
    pub precond: c_int,
    /// `AUTOPCG_DEVICE_*` (default `AUTOPCG_DEVICE_AUTO`).
    pub device: c_int,
    /// `AUTOPCG_STORAGE_*`: what the arrays hold (default `AUTOPCG_STORAGE_FULL`).
    pub storage: c_int,
    /// Nonzero: check that a full matrix is symmetric before the setup (default 1).
    pub check_symmetry: c_int,
    /// Relative tolerance: converged when `||b - A x|| <= max(rtol ||b||, atol)` (default 1e-8).
    pub rtol: f64,
    /// Absolute tolerance (default 0).
    pub atol: f64,
    /// SSOR-AI relaxation factor in (0, 2); 0 chooses it from the matrix (default 0).
    pub omega: f64,
    /// Iteration limit (default 10000).
    pub max_iter: i64,
    /// NULL or "auto": the GPU's model file, found by the GPU's name; "none": the fixed rule;
    /// else the path of a model file (default NULL).
    pub model: *const c_char,
    /// Row blocks: 0 solves the matrix whole (default); N >= 1 splits it into N contiguous row
    /// blocks that exchange halos every iteration, on the CPU (`AUTOPCG_DEVICE_CPU` or
    /// `_AUTO`) or on GPU 0 (`AUTOPCG_DEVICE_GPU`). SSOR-AI is then built per block.
    pub blocks: c_int,
    /// GPUs, one row block on each: 0 (default) uses one GPU or the CPU as `device` says;
    /// N >= 1 uses GPUs 0..N (an error when fewer are present); -1 takes the count predicted
    /// fastest per iteration. Not with `blocks` nor with `AUTOPCG_DEVICE_CPU`.
    pub gpus: c_int,
}

/// What a solve did.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutopcgInfo {
    /// Iterations run.
    pub iterations: i64,
    /// 1 when the true residual met the tolerance, else 0.
    pub converged: c_int,
    /// `AUTOPCG_REASON_*`.
    pub reason: c_int,
    /// The true relative residual `||b - A x|| / ||b||` of the returned x (NaN when the solve
    /// ended without one).
    pub relative_residual: f64,
    /// Milliseconds of the iterations and the final residual.
    pub solve_ms: f64,
    /// Milliseconds spent putting b and x0 in place.
    pub setup_ms: f64,
}

impl AutopcgInfo {
    const NONE: AutopcgInfo = AutopcgInfo {
        iterations: 0,
        converged: 0,
        reason: AUTOPCG_REASON_NONE,
        relative_residual: f64::NAN,
        solve_ms: 0.0,
        setup_ms: 0.0,
    };
}

/// Where the setup time of a handle went, in milliseconds.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutopcgSetup {
    /// Checking the matrix's symmetry (0 when not checked).
    pub check_ms: f64,
    /// Opening the device and finding and reading the model file.
    pub device_ms: f64,
    /// Building the preconditioner.
    pub precond_ms: f64,
    /// Choosing the plan.
    pub select_ms: f64,
    /// Conversions, uploads, allocation and kernel loading.
    pub backend_ms: f64,
    /// The sum of the above: what `autopcg_create_*` spent setting up.
    pub total_ms: f64,
    /// The last `autopcg_update_values` (preconditioner and uploads; 0 before any).
    pub update_ms: f64,
    /// Of `backend_ms`: host-to-device copies and allocations (0 on the CPU).
    pub upload_ms: f64,
    /// Of `backend_ms`: format conversions on the device.
    pub convert_ms: f64,
    /// Of `backend_ms`: compiling and loading kernels.
    pub load_ms: f64,
}

/// A prepared solver: see the crate documentation. Opaque to C.
pub struct AutopcgSolver {
    inner: PreparedSolver<'static>,
    /// Where each of the caller's entries went (their order, their triangle).
    map: EntryMap,
    device: CString,
    precond: CString,
    last: AutopcgInfo,
    /// Milliseconds of the last update_values.
    update_ms: f64,
    /// Set when a call panicked: the handle's state is unknown.
    poisoned: bool,
}

// A handle moves between threads (used by one at a time).
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<AutopcgSolver>();
};

fn reason_code(r: StopReason) -> c_int {
    match r {
        StopReason::Converged => AUTOPCG_REASON_CONVERGED,
        StopReason::MaxIter => AUTOPCG_REASON_MAX_ITER,
        StopReason::Stagnated => AUTOPCG_REASON_STAGNATED,
        StopReason::NotSpd => AUTOPCG_REASON_NOT_SPD,
        StopReason::Breakdown => AUTOPCG_REASON_BREAKDOWN,
        _ => AUTOPCG_REASON_STOPPED,
    }
}

fn defaults() -> AutopcgOptions {
    AutopcgOptions {
        precond: AUTOPCG_PRECOND_SSOR_AI,
        device: AUTOPCG_DEVICE_AUTO,
        storage: AUTOPCG_STORAGE_FULL,
        check_symmetry: 1,
        rtol: 1e-8,
        atol: 0.0,
        omega: 0.0,
        max_iter: 10_000,
        model: std::ptr::null(),
        blocks: 0,
        gpus: 0,
    }
}

/// Fills `opts` with the defaults. Returns `AUTOPCG_ERR_BAD_INPUT` when `opts` is NULL.
#[no_mangle]
pub unsafe extern "C" fn autopcg_options_init(opts: *mut AutopcgOptions) -> c_int {
    guard(|| {
        if opts.is_null() {
            return Err(Failure::bad_input("autopcg_options_init: opts is NULL"));
        }
        // SAFETY: non-null, and the caller gives a pointer to an autopcg_options.
        unsafe { opts.write(defaults()) };
        Ok(())
    })
}

fn with_omega(k: PrecondKind, omega: Option<f64>) -> PrecondKind {
    omega.map_or(k, |w| k.with_omega(w))
}

/// The solver settings of `o`, checked.
fn solver_settings(o: &AutopcgOptions) -> Result<(PrecondKind, Device, ModelChoice), Failure> {
    let omega = if o.omega == 0.0 {
        None
    } else if o.omega > 0.0 && o.omega < 2.0 {
        Some(o.omega)
    } else {
        return Err(Failure::bad_input(format!(
            "options.omega = {}: SSOR-AI's relaxation factor lies in (0, 2), or 0 for automatic",
            o.omega
        )));
    };
    let precond = match o.precond {
        AUTOPCG_PRECOND_NONE => PrecondKind::None,
        AUTOPCG_PRECOND_JACOBI => PrecondKind::Jacobi,
        AUTOPCG_PRECOND_SSOR_AI => with_omega(PrecondKind::ssor_ai(), omega),
        AUTOPCG_PRECOND_SSOR_AI2 => with_omega(PrecondKind::ssor_ai2(), omega),
        p => {
            return Err(Failure::bad_input(format!(
                "options.precond = {p}: expected AUTOPCG_PRECOND_NONE (0), _JACOBI (1), \
                 _SSOR_AI (2) or _SSOR_AI2 (3)"
            )))
        }
    };
    let device = match o.device {
        AUTOPCG_DEVICE_AUTO => Device::Auto,
        AUTOPCG_DEVICE_CPU => Device::Cpu,
        AUTOPCG_DEVICE_GPU => Device::Gpu,
        d => {
            return Err(Failure::bad_input(format!(
                "options.device = {d}: expected AUTOPCG_DEVICE_AUTO (0), _CPU (1) or _GPU (2)"
            )))
        }
    };
    let model = if o.model.is_null() {
        ModelChoice::Auto
    } else {
        // SAFETY: non-null; the caller gives a NUL-terminated string.
        let s = unsafe { CStr::from_ptr(o.model) };
        let s = s.to_str().map_err(|_| {
            Failure::bad_input(format!(
                "options.model = {:?} is not UTF-8",
                s.to_string_lossy()
            ))
        })?;
        match s {
            "" | "auto" => ModelChoice::Auto,
            "none" => ModelChoice::Off,
            path => ModelChoice::File(PathBuf::from(path)),
        }
    };
    Ok((precond, device, model))
}

/// Creates a handle from CSR arrays and sets it up; the arrays are copied.
fn create<P: autopcg::CsrIndex, I: autopcg::CsrIndex>(
    what: &str,
    n: usize,
    indptr: &[P],
    indices: &[I],
    values: &[f64],
    base: c_int,
    opts: Option<&AutopcgOptions>,
) -> Result<Box<AutopcgSolver>, Failure> {
    let o = opts.copied().unwrap_or_else(defaults);
    let base = match base {
        0 => IndexBase::Zero,
        1 => IndexBase::One,
        b => {
            return Err(Failure::bad_input(format!(
                "{what}: base = {b}: indices start at 0 (C) or 1 (Fortran)"
            )))
        }
    };
    let triangle = match o.storage {
        AUTOPCG_STORAGE_FULL => None,
        AUTOPCG_STORAGE_LOWER => Some(Triangle::Lower),
        AUTOPCG_STORAGE_UPPER => Some(Triangle::Upper),
        s => {
            return Err(Failure::bad_input(format!(
                "options.storage = {s}: expected AUTOPCG_STORAGE_FULL (0), _LOWER (1) or \
                 _UPPER (2)"
            )))
        }
    };
    let (precond, device, model) = solver_settings(&o)?;
    let blocks = match o.blocks {
        0 => None,
        b if b > 0 => Some(b as usize),
        b => {
            return Err(Failure::bad_input(format!(
                "options.blocks = {b}: expected 0 (no split) or a number of row blocks >= 1"
            )))
        }
    };
    let gpus = match o.gpus {
        0 => None,
        -1 => Some(autopcg::GpuCount::Auto),
        g if g > 0 => Some(autopcg::GpuCount::Count(g as usize)),
        g => {
            return Err(Failure::bad_input(format!(
                "options.gpus = {g}: expected 0 (no split), a number of GPUs >= 1 or -1 (auto)"
            )))
        }
    };
    let max_iter = usize::try_from(o.max_iter).unwrap_or(0);
    let params = PcgParams::new()
        .with_tol(o.rtol)
        .and_then(|p| p.with_atol(o.atol))
        .and_then(|p| p.with_max_iter(max_iter))
        .map_err(|e| Failure::bad_input(format!("options: {e}")))?;
    let (a, map) =
        autopcg::CsrMatrix::from_csr_arrays_mapped(n, n, indptr, indices, values, base, triangle)?;
    let mut solver = Solver::new(&a)
        .precond(precond)
        .params(params)
        .device(device)
        .model(model)
        .ssor_form_auto(true)
        .check_symmetry(triangle.is_none() && o.check_symmetry != 0);
    if let Some(n) = blocks {
        solver = solver.blocks(n);
    }
    if let Some(g) = gpus {
        solver = solver.gpus(g);
    }
    let inner = solver.prepare()?.into_owned();
    let device = CString::new(inner.device()).unwrap_or_default();
    let precond = CString::new(precond_name(&inner)).unwrap_or_default();
    Ok(Box::new(AutopcgSolver {
        inner,
        map,
        device,
        precond,
        last: AutopcgInfo::NONE,
        update_ms: 0.0,
        poisoned: false,
    }))
}

/// The preconditioner a prepared solver applies, in words ("ssor-ai-explicit (omega 0.2420)").
fn precond_name(p: &PreparedSolver) -> String {
    let kind = p.precond();
    match kind.omega() {
        Some(w) => format!("{kind} (omega {w:.4})"),
        None => kind.to_string(),
    }
}

/// The body of `autopcg_create_i32` and `autopcg_create_i64`.
///
/// # Safety
/// As documented on those functions.
#[allow(clippy::too_many_arguments)]
unsafe fn create_raw<T>(
    label: &str,
    n: T,
    indptr: *const T,
    indices: *const T,
    values: *const f64,
    base: c_int,
    opts: *const AutopcgOptions,
    out: *mut *mut AutopcgSolver,
) -> c_int
where
    T: autopcg::CsrIndex + Copy + std::fmt::Display + Into<i128> + TryInto<usize>,
{
    guard(|| {
        if out.is_null() {
            return Err(Failure::bad_input(format!("{label}: out is NULL")));
        }
        // SAFETY: non-null; the caller gives a pointer to a handle pointer.
        unsafe { out.write(std::ptr::null_mut()) };
        // At most what a slice of 8-byte entries can span.
        let limit = isize::MAX as usize / 8;
        let n: usize = n
            .try_into()
            .ok()
            .filter(|&n| n < limit)
            .ok_or_else(|| Failure::bad_input(format!("{label}: n = {n} is out of range")))?;
        if indptr.is_null() {
            return Err(Failure::bad_input(format!("{label}: indptr is NULL")));
        }
        // SAFETY: non-null; the caller gives n + 1 row pointers.
        let ptr = unsafe { std::slice::from_raw_parts(indptr, n + 1) };
        let last: i128 = ptr[n].into();
        let nnz = usize::try_from(last - i128::from(base))
            .ok()
            .filter(|&k| k < limit)
            .ok_or_else(|| {
                Failure::bad_input(format!(
                    "{label}: indptr[{n}] = {} is out of range for base {base}",
                    ptr[n]
                ))
            })?;
        if nnz > 0 && (indices.is_null() || values.is_null()) {
            return Err(Failure::bad_input(format!(
                "{label}: indices or values is NULL"
            )));
        }
        let (idx, val): (&[T], &[f64]) = if nnz == 0 {
            (&[], &[])
        } else {
            // SAFETY: non-null; the caller gives indptr[n] - base entries of each.
            unsafe {
                (
                    std::slice::from_raw_parts(indices, nnz),
                    std::slice::from_raw_parts(values, nnz),
                )
            }
        };
        // SAFETY: NULL or the caller's options.
        let opts = unsafe { opts.as_ref() };
        let h = create(label, n, ptr, idx, val, base, opts)?;
        // SAFETY: checked non-null above.
        unsafe { out.write(Box::into_raw(h)) };
        Ok(())
    })
}

/// Creates a handle for the n x n matrix in CSR arrays with 32-bit indices and sets it up
/// (device, model, plan, preconditioner, uploads). `indptr` has n + 1 entries starting at
/// `base`; `indices` and `values` have `indptr[n] - base` entries; `base` is 0 (C) or 1
/// (Fortran). Columns may be unsorted inside a row and may repeat (summed). The arrays are
/// copied; `opts` may be NULL for the defaults. On success `*out` is the handle (destroy it
/// with `autopcg_destroy`); on failure `*out` is NULL.
#[no_mangle]
pub unsafe extern "C" fn autopcg_create_i32(
    n: i32,
    indptr: *const i32,
    indices: *const i32,
    values: *const f64,
    base: c_int,
    opts: *const AutopcgOptions,
    out: *mut *mut AutopcgSolver,
) -> c_int {
    // SAFETY: the caller's pointers, as documented.
    unsafe {
        create_raw(
            "autopcg_create_i32",
            n,
            indptr,
            indices,
            values,
            base,
            opts,
            out,
        )
    }
}

/// As `autopcg_create_i32`, with 64-bit indices.
#[no_mangle]
pub unsafe extern "C" fn autopcg_create_i64(
    n: i64,
    indptr: *const i64,
    indices: *const i64,
    values: *const f64,
    base: c_int,
    opts: *const AutopcgOptions,
    out: *mut *mut AutopcgSolver,
) -> c_int {
    // SAFETY: the caller's pointers, as documented.
    unsafe {
        create_raw(
            "autopcg_create_i64",
            n,
            indptr,
            indices,
            values,
            base,
            opts,
            out,
        )
    }
}

/// The handle behind `s`, refusing NULL and a handle poisoned by an internal error.
unsafe fn handle<'a>(s: *mut AutopcgSolver, what: &str) -> Result<&'a mut AutopcgSolver, Failure> {
    // SAFETY: NULL or a handle from autopcg_create_*, used by one thread at a time.
    let h =
        unsafe { s.as_mut() }.ok_or_else(|| Failure::bad_input(format!("{what}: NULL handle")))?;
    if h.poisoned {
        return Err(Failure {
            status: AUTOPCG_ERR_INTERNAL,
            message: format!(
                "{what}: an earlier call on this handle failed internally; destroy it and create \
                 a new one"
            ),
        });
    }
    Ok(h)
}

/// Runs `body` on the handle, poisoning it if the body panics.
fn with_handle(
    s: *mut AutopcgSolver,
    what: &str,
    body: impl FnOnce(&mut AutopcgSolver) -> Result<(), Failure>,
) -> c_int {
    let status = guard(|| {
        // SAFETY: see `handle`.
        let h = unsafe { handle(s, what) }?;
        body(h)
    });
    if status == AUTOPCG_ERR_INTERNAL {
        // SAFETY: NULL or a live handle (the body could not free it).
        if let Some(h) = unsafe { s.as_mut() } {
            h.poisoned = true;
        }
    }
    status
}

/// A getter: writes what `value` reads from the handle to `*out`; a NULL `out` (called `arg`
/// in messages) is refused as bad input.
///
/// # Safety
/// `s` is NULL or a live handle; `out` is NULL or valid for writes.
unsafe fn get<T>(
    s: *mut AutopcgSolver,
    what: &str,
    arg: &str,
    out: *mut T,
    value: impl FnOnce(&AutopcgSolver) -> T,
) -> c_int {
    with_handle(s, what, |h| {
        // SAFETY: NULL-checked; valid for writes otherwise, as the caller promises.
        let out = unsafe { out.as_mut() }
            .ok_or_else(|| Failure::bad_input(format!("{what}: {arg} is NULL")))?;
        *out = value(h);
        Ok(())
    })
}

/// Solves for one right-hand side: `b` and `x0` are copies, `x` receives the iterate when
/// there is one. Records what the solve did in `h.last`.
fn solve_into(
    h: &mut AutopcgSolver,
    b: &[f64],
    x0: Option<&[f64]>,
    x: &mut [f64],
) -> Result<(), Failure> {
    let outcome = h.inner.solve_with(b, x0, |_| ControlFlow::Continue(()));
    let (sol, err) = match outcome {
        Ok(sol) => (sol, None),
        Err(f) => match f.partial {
            Some(p) => (*p, Some(Failure::from(f.error))),
            None => {
                h.last = AutopcgInfo {
                    reason: error_reason(&f),
                    ..AutopcgInfo::NONE
                };
                return Err(f.into());
            }
        },
    };
    x.copy_from_slice(&sol.x);
    h.last = AutopcgInfo {
        iterations: sol.info.iterations as i64,
        converged: c_int::from(sol.info.converged),
        reason: reason_code(sol.info.reason),
        relative_residual: sol.info.true_relative_residual,
        solve_ms: sol.solve_ms,
        setup_ms: sol.setup_ms,
    };
    err.map_or(Ok(()), Err)
}

/// `n * count` entries at `p` (checked non-null by the caller), as a slice.
///
/// # Safety
/// The caller gives `n * count` entries at `p`.
unsafe fn entries<'a>(p: *const f64, n: usize, count: usize) -> Result<&'a [f64], Failure> {
    let len = n
        .checked_mul(count)
        .filter(|&l| l <= isize::MAX as usize / 8)
        .ok_or_else(|| Failure::bad_input(format!("{count} vectors of {n} entries: too long")))?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-null, and the caller gives len entries.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Solves A x = b. `b` and `x` have n entries; `x0` is NULL (start from zero) or the initial
/// guess (n entries; it may be `x` itself); `info` is NULL or receives what the solve did.
/// Returns `AUTOPCG_OK` when converged; `AUTOPCG_ERR_NOT_CONVERGED` with the last iterate in
/// `x` when the iteration limit or the attainable accuracy was reached first; `x` is left as it
/// was on other errors.
#[no_mangle]
pub unsafe extern "C" fn autopcg_solve(
    s: *mut AutopcgSolver,
    b: *const f64,
    x: *mut f64,
    x0: *const f64,
    info: *mut AutopcgInfo,
) -> c_int {
    // SAFETY: the caller's pointers, as documented.
    unsafe { solve_many("autopcg_solve", s, 1, b, x, x0, info) }
}

/// Solves A x = b for `nrhs` right-hand sides in turn, one after the other on this handle.
/// `b` and `x` hold `nrhs` vectors of n entries each, one after the other (column-major, as a
/// Fortran array `b(n, nrhs)`); `x0` is NULL (start every solve from zero) or `nrhs` initial
/// guesses laid out the same way (it may be `x` itself); `info` is NULL or receives `nrhs`
/// records. Every right-hand side is solved; returns `AUTOPCG_OK` when all converged, else the
/// status of the first that did not (the message names it), after solving the others.
/// `autopcg_get_info` then describes the last right-hand side.
#[no_mangle]
pub unsafe extern "C" fn autopcg_solve_many(
    s: *mut AutopcgSolver,
    nrhs: i64,
    b: *const f64,
    x: *mut f64,
    x0: *const f64,
    info: *mut AutopcgInfo,
) -> c_int {
    // SAFETY: the caller's pointers, as documented.
    unsafe { solve_many("autopcg_solve_many", s, nrhs, b, x, x0, info) }
}

/// `autopcg_solve_many`, reporting as `what`.
///
/// # Safety
/// As documented on `autopcg_solve_many`.
unsafe fn solve_many(
    what: &str,
    s: *mut AutopcgSolver,
    nrhs: i64,
    b: *const f64,
    x: *mut f64,
    x0: *const f64,
    info: *mut AutopcgInfo,
) -> c_int {
    let count = usize::try_from(nrhs).unwrap_or(0);
    let infos: &mut [AutopcgInfo] = if info.is_null() || count == 0 {
        &mut []
    } else {
        // SAFETY: non-null; the caller gives nrhs records (written first, so that a failure
        // before any solve leaves them saying "no solve").
        unsafe { std::slice::from_raw_parts_mut(info, count) }
    };
    infos.fill(AutopcgInfo::NONE);
    with_handle(s, what, |h| {
        if nrhs < 0 {
            return Err(Failure::bad_input(format!(
                "{what}: nrhs = {nrhs} is negative"
            )));
        }
        if b.is_null() || x.is_null() {
            return Err(Failure::bad_input(format!("{what}: b or x is NULL")));
        }
        let n = h.inner.n();
        // SAFETY: non-null; the caller gives n * nrhs entries each. b and x0 are copied before
        // x is written, so x0 may alias x.
        let b = unsafe { entries(b, n, count) }?.to_vec();
        let x0 = if x0.is_null() {
            None
        } else {
            Some(unsafe { entries(x0, n, count) }?.to_vec())
        };
        // SAFETY: non-null; the caller gives n * nrhs entries.
        let xs = unsafe { std::slice::from_raw_parts_mut(x, b.len()) };
        let mut first: Option<Failure> = None;
        for k in 0..count {
            let cols = k * n..(k + 1) * n;
            let start = x0.as_ref().map(|v| &v[cols.clone()]);
            let outcome = solve_into(h, &b[cols.clone()], start, &mut xs[cols]);
            if let Some(i) = infos.get_mut(k) {
                *i = h.last;
            }
            if let Err(mut f) = outcome {
                if f.status == AUTOPCG_ERR_INTERNAL {
                    return Err(f);
                }
                if first.is_none() {
                    if count > 1 {
                        f.message = format!("right-hand side {} of {count}: {}", k + 1, f.message);
                    }
                    first = Some(f);
                }
            }
        }
        first.map_or(Ok(()), Err)
    })
}

/// The reason code of a failed solve without an iterate.
fn error_reason(f: &autopcg::SolveFailure) -> c_int {
    match &f.error {
        autopcg::Error::Pcg(p) => p.reason().map_or(AUTOPCG_REASON_NONE, reason_code),
        _ => AUTOPCG_REASON_NONE,
    }
}

/// Takes new values for the same sparsity pattern: `values` has as many entries as the arrays
/// given to `autopcg_create_*` (`autopcg_get_nnz`), in the same order and the same storage
/// (full or one triangle). The plan is kept; the preconditioner is rebuilt. On an error
/// (a non-finite value, a non-positive diagonal) nothing changes.
#[no_mangle]
pub unsafe extern "C" fn autopcg_update_values(s: *mut AutopcgSolver, values: *const f64) -> c_int {
    with_handle(s, "autopcg_update_values", |h| {
        if values.is_null() {
            return Err(Failure::bad_input("autopcg_update_values: values is NULL"));
        }
        let len = h.map.input_len();
        // SAFETY: non-null; the caller gives as many values as at creation.
        let given = unsafe { std::slice::from_raw_parts(values, len) };
        if let Some(k) = given.iter().position(|v| !v.is_finite()) {
            return Err(Failure::bad_input(format!(
                "autopcg_update_values: values[{k}] = {} is not finite",
                given[k]
            )));
        }
        let v = h.map.values(given)?;
        let t = h.inner.update_values(&v)?;
        h.update_ms = t.total_ms();
        h.precond = CString::new(precond_name(&h.inner)).unwrap_or_default();
        Ok(())
    })
}

/// Sets the relative and absolute tolerances of later solves (`rtol` in (0, 1), `atol >= 0`).
#[no_mangle]
pub unsafe extern "C" fn autopcg_set_tolerances(
    s: *mut AutopcgSolver,
    rtol: f64,
    atol: f64,
) -> c_int {
    with_handle(s, "autopcg_set_tolerances", |h| {
        h.inner.set_tolerances(rtol, atol)?;
        Ok(())
    })
}

/// Sets the iteration limit of later solves (at least 1).
#[no_mangle]
pub unsafe extern "C" fn autopcg_set_max_iter(s: *mut AutopcgSolver, max_iter: i64) -> c_int {
    with_handle(s, "autopcg_set_max_iter", |h| {
        let m = usize::try_from(max_iter).unwrap_or(0);
        h.inner.set_max_iter(m)?;
        Ok(())
    })
}

/// Writes the number of rows to `*n`.
#[no_mangle]
pub unsafe extern "C" fn autopcg_get_n(s: *mut AutopcgSolver, n: *mut i64) -> c_int {
    // SAFETY: `n` is NULL (refused) or points to writable memory, as the caller promises.
    unsafe { get(s, "autopcg_get_n", "n", n, |h| h.inner.n() as i64) }
}

/// Writes the number of entries of the arrays given at creation (the length
/// `autopcg_update_values` takes) to `*nnz`.
#[no_mangle]
pub unsafe extern "C" fn autopcg_get_nnz(s: *mut AutopcgSolver, nnz: *mut i64) -> c_int {
    // SAFETY: `nnz` is NULL (refused) or points to writable memory, as the caller promises.
    unsafe {
        get(s, "autopcg_get_nnz", "nnz", nnz, |h| {
            h.map.input_len() as i64
        })
    }
}

/// Writes what the last solve did to `*info` (reason `AUTOPCG_REASON_NONE` before any).
#[no_mangle]
pub unsafe extern "C" fn autopcg_get_info(s: *mut AutopcgSolver, info: *mut AutopcgInfo) -> c_int {
    // SAFETY: `info` is NULL (refused) or points to writable memory, as the caller promises.
    unsafe { get(s, "autopcg_get_info", "info", info, |h| h.last) }
}

/// Writes the iterations of the last solve to `*iterations` (0 before any).
#[no_mangle]
pub unsafe extern "C" fn autopcg_get_iterations(
    s: *mut AutopcgSolver,
    iterations: *mut i64,
) -> c_int {
    // SAFETY: `iterations` is NULL (refused) or points to writable memory, as the caller promises.
    unsafe {
        get(s, "autopcg_get_iterations", "iterations", iterations, |h| {
            h.last.iterations
        })
    }
}

/// Writes the true relative residual `||b - A x|| / ||b||` of the last solve to `*residual`
/// (NaN before any, or when the last solve ended without an iterate).
#[no_mangle]
pub unsafe extern "C" fn autopcg_get_residual(s: *mut AutopcgSolver, residual: *mut f64) -> c_int {
    // SAFETY: `residual` is NULL (refused) or points to writable memory, as the caller promises.
    unsafe {
        get(s, "autopcg_get_residual", "residual", residual, |h| {
            h.last.relative_residual
        })
    }
}

/// Writes where the setup time went to `*setup`.
#[no_mangle]
pub unsafe extern "C" fn autopcg_get_setup(
    s: *mut AutopcgSolver,
    setup: *mut AutopcgSetup,
) -> c_int {
    // SAFETY: `setup` is NULL (refused) or points to writable memory, as the caller promises.
    unsafe {
        get(s, "autopcg_get_setup", "setup", setup, |h| {
            let t = h.inner.setup();
            AutopcgSetup {
                check_ms: t.check_ms,
                device_ms: t.device_ms,
                precond_ms: t.precond_ms,
                select_ms: t.select_ms,
                backend_ms: t.backend_ms,
                total_ms: t.total_ms(),
                update_ms: h.update_ms,
                upload_ms: t.upload_ms,
                convert_ms: t.convert_ms,
                load_ms: t.load_ms,
            }
        })
    }
}

/// Where the handle solves, in words ("cpu (8 threads)", "gpu 0 (NVIDIA H200)"); valid until
/// the handle is destroyed. NULL for a NULL handle.
#[no_mangle]
pub unsafe extern "C" fn autopcg_device(s: *const AutopcgSolver) -> *const c_char {
    // SAFETY: NULL or a live handle.
    unsafe { s.as_ref() }.map_or(std::ptr::null(), |h| h.device.as_ptr())
}

/// The preconditioner as applied ("ssor-ai-explicit (omega 0.2420)"); valid until the next
/// call on the handle. NULL for a NULL handle.
#[no_mangle]
pub unsafe extern "C" fn autopcg_precond(s: *const AutopcgSolver) -> *const c_char {
    // SAFETY: NULL or a live handle.
    unsafe { s.as_ref() }.map_or(std::ptr::null(), |h| h.precond.as_ptr())
}

/// Destroys a handle (NULL is accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn autopcg_destroy(s: *mut AutopcgSolver) {
    if s.is_null() {
        return;
    }
    // A panic while dropping (a GPU driver failing at release) must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: a handle from autopcg_create_*, not used after this call.
        drop(unsafe { Box::from_raw(s) });
    }));
}

/// Starts opening GPU `ordinal` (0 for the first) on a thread of its own and returns at once,
/// so that creating its context (about a quarter of a second in a new process) overlaps the
/// caller's own work, such as assembling the matrix: the next handle set up on that GPU takes
/// the opened device and waits only for what is left of the open. Without a usable GPU
/// nothing happens here (a handle asked to use one then says why). A program that may exit
/// before it creates that handle calls `autopcg_finish_opens_ahead` first: the driver's exit
/// handlers must not run while a context is being created. `AUTOPCG_ERR_BAD_INPUT` for a
/// negative ordinal.
#[no_mangle]
pub extern "C" fn autopcg_open_gpu_ahead(ordinal: c_int) -> c_int {
    status::guard(|| {
        let ordinal = usize::try_from(ordinal).map_err(|_| {
            Failure::bad_input(format!(
                "autopcg_open_gpu_ahead: ordinal = {ordinal}: expected 0 or more"
            ))
        })?;
        autopcg::open_gpu_ahead(ordinal);
        Ok(())
    })
}

/// `autopcg_open_gpu_ahead` for a matrix of `rows` rows and `entries` stored entries (both
/// triangles) that the first handle on that GPU will set up: once the context exists, the
/// same thread also pays the device's other first-use costs of that setup's upload
/// (page-locked staging buffers, the growth of the device's memory pool, the load of the
/// upload's checks), so that a program's first setup runs as a later one would, as far as
/// the caller's own work lasts (what is not begun when a handle's setup waits for the device
/// is left to that setup). Nothing stays allocated past that. `AUTOPCG_ERR_BAD_INPUT` for a
/// negative ordinal, rows or entries.
#[no_mangle]
pub extern "C" fn autopcg_open_gpu_ahead_for(ordinal: c_int, rows: i64, entries: i64) -> c_int {
    status::guard(|| {
        let name = "autopcg_open_gpu_ahead_for";
        let count = |what: &str, v: i64| {
            usize::try_from(v).map_err(|_| {
                Failure::bad_input(format!("{name}: {what} = {v}: expected 0 or more"))
            })
        };
        let ordinal = count("ordinal", i64::from(ordinal))?;
        let rows = count("rows", rows)?;
        let entries = count("entries", entries)?;
        autopcg::open_gpu_ahead_for(ordinal, rows, entries);
        Ok(())
    })
}

/// Waits for the opens `autopcg_open_gpu_ahead` started that no handle has taken yet (the
/// opened devices stay for later handles). Always `AUTOPCG_OK`.
#[no_mangle]
pub extern "C" fn autopcg_finish_opens_ahead() -> c_int {
    status::guard(|| {
        autopcg::finish_gpu_opens_ahead();
        Ok(())
    })
}

/// The calling thread's message for the last call that failed, or "" when the last call
/// succeeded. Valid until the next autopcg call on this thread.
#[no_mangle]
pub extern "C" fn autopcg_last_error() -> *const c_char {
    status::last_error_ptr()
}

/// The name of a status code ("ok", "bad input", ...), static.
#[no_mangle]
pub extern "C" fn autopcg_status_string(status: c_int) -> *const c_char {
    status::status_name(status).as_ptr()
}

/// The library version ("0.1.0"), static.
#[no_mangle]
pub extern "C" fn autopcg_version() -> *const c_char {
    const V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    V.as_ptr()
}
