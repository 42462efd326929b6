//! The one-shot solve ([`Solver`]): a builder whose `solve` prepares a [`PreparedSolver`]
//! (see [`crate::prepared`]) and solves once.
use std::fmt;
use std::ops::ControlFlow;

use autopcg_generator::StepExplain;
use autopcg_solver::{IterRecord, PcgInfo, PcgParams, Plan, PrecondKind};
use autopcg_sparse::CsrMatrix;
use serde::Serialize;

use crate::models::ModelChoice;
use crate::prepared::{PreparedSolver, Settings};
use crate::{Device, Error};

#[cfg(feature = "gpu")]
mod saved;

/// Where setup time went, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SetupTimes {
    /// Checking the matrix (its symmetry, unless [`Solver::check_symmetry`] turned it off).
    pub check_ms: f64,
    /// Opening the device and finding and reading the model file. Where the device was opened
    /// ahead ([`crate::open_gpu_ahead`]: `autopcg solve` does so while it reads the matrix),
    /// only the wait for what was left of the open is counted.
    pub device_ms: f64,
    /// Building the preconditioner (both SSOR-AI forms when the model compared them): on the
    /// host, or on the device for first-order factored SSOR-AI on a GPU (built there from the
    /// uploaded matrix; that part is not in `backend_ms`).
    pub precond_ms: f64,
    /// Choosing the plan.
    pub select_ms: f64,
    /// Conversions, uploads, allocation and kernel loading of the backend, and the host work
    /// around them (scaling, checks): `upload_ms`, `convert_ms` and `load_ms` are parts of it.
    pub backend_ms: f64,
    /// Part of `backend_ms`: host-to-device copies of the operands and vectors, device
    /// allocations and the fills that initialise them, and the wait for what was left of `A`'s
    /// upload ahead (see `ahead_ms`; 0 on the CPU).
    pub upload_ms: f64,
    /// Part of `backend_ms`: format conversions of the operands (ELL, DIA and HYB built on the
    /// device from the uploaded CSR arrays, COO on the host; 0 on the CPU).
    pub convert_ms: f64,
    /// Part of `backend_ms`: compiling (or reading from the kernel cache) and loading the
    /// kernel modules the plan runs (0 on the CPU).
    pub load_ms: f64,
    /// Putting this solve's right-hand side and initial guess in place (the only setup a
    /// solve on a prepared solver pays).
    pub rhs_ms: f64,
    /// On a single GPU, `A`'s CSR arrays are uploaded and checked (largest magnitude,
    /// diagonal, `||A||_inf`) on a thread of their own from the moment the device is open,
    /// while the model is read and the plan chosen: how long that took. It overlaps
    /// `device_ms` and `select_ms` (and `precond_ms`), so it is not added to the total; the
    /// backend's wait for what was left of it is in `upload_ms`.
    pub ahead_ms: f64,
}

impl SetupTimes {
    /// The total (`upload_ms`, `convert_ms` and `load_ms` are counted in `backend_ms`).
    pub fn total_ms(&self) -> f64 {
        self.check_ms
            + self.device_ms
            + self.precond_ms
            + self.select_ms
            + self.backend_ms
            + self.rhs_ms
    }

    /// The times with the backend's parts (uploads, conversions, kernel loading) set.
    pub(crate) fn with_backend_parts(mut self, parts: autopcg_solver::gpu::BackendTimes) -> Self {
        self.upload_ms = parts.upload_ms;
        self.convert_ms = parts.convert_ms;
        self.load_ms = parts.load_ms;
        self.ahead_ms = parts.ahead_ms;
        self
    }
}

/// A finished solve (converged or not).
#[derive(Debug, Clone)]
pub struct Solution {
    /// The last iterate.
    pub x: Vec<f64>,
    /// Iterations, residuals, convergence.
    pub info: PcgInfo,
    /// Where it ran, in words ("cpu (8 threads)", "gpu 0 (NVIDIA H200)").
    pub device: String,
    /// Preconditioner construction, selection, conversions, uploads and kernel loading, in ms
    /// (the sum of `setup`).
    pub setup_ms: f64,
    /// The parts of `setup_ms`.
    pub setup: SetupTimes,
    /// The iterations and the final true residual, in ms.
    pub solve_ms: f64,
    /// What each step ran.
    pub plan: Plan,
    /// One-line notes for the user (fallbacks, defaults taken).
    pub notes: Vec<String>,
    /// The preconditioner as applied (`ssor-ai-factored` or `ssor-ai-explicit` once the form is
    /// settled).
    pub precond_applied: String,
    /// The preconditioner as applied: SSOR-AI's omega resolved for the matrix (when it was
    /// left automatic) and its form settled.
    pub precond: PrecondKind,
    /// The model file that chose the plan, when one did.
    pub model: Option<String>,
    /// How a model chose each step (empty without a model).
    pub explain: Vec<StepExplain>,
    /// Predicted milliseconds per iteration, when a model chose the plan.
    pub predicted_iteration_ms: Option<f64>,
    /// The polling interval the solve used.
    pub check_every: usize,
    /// How the matrix was split into row blocks ([`Solver::blocks`]); `None` for an unsplit
    /// solve.
    pub blocks: Option<autopcg_solver::blocks::BlockReport>,
}

/// A solve that ended in an error; `partial` holds the last iterate when there is one
/// (the iteration limit was reached, or the solve stagnated at the attainable accuracy).
#[derive(Debug)]
pub struct SolveFailure {
    /// What went wrong.
    pub error: Error,
    /// The state at the end, when the solve ran to its limit.
    pub partial: Option<Box<Solution>>,
}

impl fmt::Display for SolveFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for SolveFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<Error> for SolveFailure {
    fn from(error: Error) -> Self {
        SolveFailure {
            error,
            partial: None,
        }
    }
}

/// Builder for one solve of `A x = b`.
pub struct Solver<'a> {
    a: &'a CsrMatrix,
    precond: PrecondKind,
    params: PcgParams,
    device: Device,
    model: ModelChoice,
    ssor_form_auto: bool,
    expected_iterations: f64,
    check_every: Option<usize>,
    check_symmetry: bool,
    blocks: Option<usize>,
    gpus: Option<crate::blocks::GpuCount>,
}

impl<'a> Solver<'a> {
    /// A solver for `a` with SSOR-AI (first order, factored form, omega from
    /// [`autopcg_solver::auto_omega`] unless set), tol 1e-8 and the automatic device choice.
    pub fn new(a: &'a CsrMatrix) -> Self {
        Solver {
            a,
            precond: PrecondKind::ssor_ai(),
            params: PcgParams::default(),
            device: Device::Auto,
            model: ModelChoice::Auto,
            ssor_form_auto: false,
            expected_iterations: autopcg_generator::EXPECTED_ITERATIONS,
            check_every: None,
            check_symmetry: true,
            blocks: None,
            gpus: None,
        }
    }
    /// Whether the matrix is checked to be symmetric before anything else (default: yes).
    /// A matrix holding only one triangle is then refused with a hint at
    /// [`CsrMatrix::from_lower_triangle`] instead of failing later as not SPD. Turn it off
    /// for a matrix known to be symmetric (one read from a `symmetric` Matrix Market file, or
    /// built by a family) to save the check, which costs about one SpMV with a binary search
    /// per entry. Either way the plan then takes the matrix as symmetric (its features are
    /// not searched for an asymmetric pair again). A prepared solver checks the new values of
    /// each [`PreparedSolver::update_values`] the same way, unless this turned the check off.
    pub fn check_symmetry(mut self, on: bool) -> Self {
        self.check_symmetry = on;
        self
    }
    /// Sets which performance model chooses the GPU plan (default: the device's model file).
    pub fn model(mut self, model: ModelChoice) -> Self {
        self.model = model;
        self
    }
    /// Lets the model choose SSOR-AI's application form (factored or explicit) on a GPU, by
    /// predicted time per iteration; the form of [`Solver::precond`] is then only the fallback
    /// when no model is used.
    pub fn ssor_form_auto(mut self, on: bool) -> Self {
        self.ssor_form_auto = on;
        self
    }
    /// Iterations a format conversion, and the one-time setup of a step run by cuSPARSE, are
    /// amortised over when the model chooses formats (default
    /// [`autopcg_generator::EXPECTED_ITERATIONS`]); a prepared solver that will solve many
    /// times may pass the iterations of all its solves.
    pub fn expected_iterations(mut self, iters: f64) -> Self {
        self.expected_iterations = iters;
        self
    }
    /// Sets the preconditioner.
    pub fn precond(mut self, kind: PrecondKind) -> Self {
        self.precond = kind;
        self
    }
    /// Sets tolerance, iteration limit, history, replacement and polling. A polling interval
    /// left unset ([`PcgParams::check_every`] `None`) is chosen by the generator for the device
    /// (every iteration on the CPU, every 16 on a GPU); one that is set is kept.
    pub fn params(mut self, params: PcgParams) -> Self {
        self.params = params;
        self
    }
    /// Polls (synchronises with the device, checks convergence) every `k` iterations (at least
    /// 1), overriding the interval of [`Solver::params`].
    pub fn check_every(mut self, k: usize) -> Self {
        self.check_every = Some(k.max(1));
        self
    }
    /// Sets the device.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }
    /// Splits the matrix into `n` contiguous row blocks balanced by rows and nonzeros, each
    /// iterating on its own rows and exchanging halos ([`autopcg_solver::blocks`]); runs on the
    /// CPU. None and Jacobi are the unsplit operators; SSOR-AI is built per block on its local
    /// part (couplings between blocks dropped). `n` must be between 1 and the number of rows
    /// (checked when solving). The solution's [`Solution::blocks`] describes the split.
    pub fn blocks(mut self, n: usize) -> Self {
        self.blocks = Some(n);
        self
    }
    /// Splits the matrix into one row block per GPU and runs each block on its own GPU
    /// (ordinals 0..N), halos copied between the GPUs; [`crate::GpuCount::Auto`] takes the count
    /// with the least predicted time per iteration, up to the GPUs present
    /// ([`crate::GpuCount`] says how). An error when fewer GPUs are present than asked
    /// for, and with [`Solver::blocks`] or [`Device::Cpu`]. The preconditioner is split as with
    /// [`Solver::blocks`].
    pub fn gpus(mut self, gpus: crate::GpuCount) -> Self {
        self.gpus = Some(gpus);
        self
    }

    /// Prepares the solve (device, model, plan, preconditioner, uploads) without solving:
    /// the [`PreparedSolver`] then solves as many right-hand sides as needed, and takes new
    /// values of the same pattern ([`PreparedSolver::update_values`]).
    pub fn prepare(&self) -> Result<PreparedSolver<'a>, Error> {
        let settings = self.settings();
        // The setup runs on a thread of the pool, so that its many parallel passes start
        // there instead of each being handed over from the caller's thread (a hand-over cost
        // tenths of a millisecond on the GPU host, where a small matrix's whole warm setup
        // takes about two).
        on_pool(|| PreparedSolver::prepare(std::borrow::Cow::Borrowed(self.a), &settings))
    }

    /// What the builder was configured with.
    pub(crate) fn settings(&self) -> Settings {
        Settings {
            precond: self.precond,
            params: self.params.clone(),
            device: self.device,
            model: self.model.clone(),
            ssor_form_auto: self.ssor_form_auto,
            expected_iterations: self.expected_iterations,
            check_every: self.check_every,
            check_symmetry: self.check_symmetry,
            nblocks: self.blocks,
            gpus: self.gpus,
        }
    }

    /// Solves from x0 = 0.
    pub fn solve(&self, b: &[f64]) -> Result<Solution, SolveFailure> {
        self.solve_with(b, None, |_| ControlFlow::Continue(()))
    }

    /// Solves from `x0` (zero when `None`), calling `progress` with every iteration's record
    /// (returning `Break` stops the solve early; it then reports not converged). On a GPU the
    /// records arrive in batches, each time the solver polls the device. The setup times of
    /// the solution include preparing.
    pub fn solve_with(
        &self,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    ) -> Result<Solution, SolveFailure> {
        solve_prepared(self.prepare()?, b, x0, progress)
    }
}

/// Solves once with `p`, the setup times of the solution including preparing's.
pub(crate) fn solve_prepared(
    mut p: PreparedSolver<'_>,
    b: &[f64],
    x0: Option<&[f64]>,
    progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
) -> Result<Solution, SolveFailure> {
    let prep = p.setup();
    let add = |s: &mut Solution| {
        s.setup.check_ms += prep.check_ms;
        s.setup.device_ms += prep.device_ms;
        s.setup.precond_ms += prep.precond_ms;
        s.setup.select_ms += prep.select_ms;
        s.setup.backend_ms += prep.backend_ms;
        s.setup.upload_ms += prep.upload_ms;
        s.setup.convert_ms += prep.convert_ms;
        s.setup.load_ms += prep.load_ms;
        s.setup.ahead_ms += prep.ahead_ms;
        s.setup_ms = s.setup.total_ms();
    };
    match p.solve_with(b, x0, progress) {
        Ok(mut s) => {
            add(&mut s);
            Ok(s)
        }
        Err(mut f) => {
            if let Some(s) = f.partial.as_deref_mut() {
                add(s);
            }
            Err(f)
        }
    }
}

/// Runs `op` on a thread of the current rayon pool (at once when this is one), so that the
/// parallel passes inside it are not each handed over from outside the pool.
pub(crate) fn on_pool<R: Send>(op: impl FnOnce() -> R + Send) -> R {
    let mut out = None;
    rayon::scope(|_| out = Some(op()));
    out.expect("rayon::scope runs its closure before returning")
}
