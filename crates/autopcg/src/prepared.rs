//! The prepared solver: setup once (device, model, plan, preconditioner, conversions, uploads,
//! kernel loading), then solve many right-hand sides and take new values of the same sparsity
//! pattern — the time steps and Newton steps of a simulation code.
//!
//! What each operation costs:
//! - [`PreparedSolver::solve`]: the right-hand side and initial guess are copied in place (on a
//!   GPU into the buffers the captured graphs already use), then the iterations run.
//! - [`PreparedSolver::update_values`]: the plan is kept (formats, kernels, launches, SSOR-AI
//!   form and omega, polling), and so is every sparsity pattern: only the preconditioner's
//!   values are recomputed ([`ValueRefresh`]). On a GPU only values cross the bus, and they
//!   are read once: they are checked (finite, positive diagonal, largest magnitude) as they are
//!   copied into the page-locked staging buffers of their upload and into a spare host array,
//!   which then becomes the matrix's (one more array of values on the host, kept); a refused
//!   value puts the old values back on the device. A CSR operand's values are overwritten in
//!   place; an ELL, DIA or HYB operand is converted again on the device from its CSR source,
//!   which the first update uploads whole and keeps (device memory a caller pays only if it
//!   updates). The preconditioner's values are recomputed on the device from the values the
//!   upload put there (Jacobi's inverse diagonal; SSOR-AI's K, K^T, scale and explicit product
//!   on their kept patterns, uploaded by the first update: the diagonal's positions, the
//!   position of each K^T entry in K, the CSR sources of converted operands, and for the
//!   explicit form K and K^T themselves, device memory a caller pays only if it updates) and
//!   its operands converted again there; the host copy of the preconditioner is brought up to
//!   date only when something builds from it (a right-hand side or new values that need other
//!   scale factors). The
//!   backend's vectors, scalars, workspaces and loaded kernels stay, and its graphs are
//!   captured again at the next solve. A system solved scaled (entries beyond the safe range of
//!   exponents) or an operand kept in COO takes the host path instead: values checked, the
//!   preconditioner recomputed on the host and its values uploaded.
//! - [`PreparedSolver::solve_many`]: one solve after another. A block variant (several
//!   right-hand sides per SpMV) would read the matrix once for all of them; with the one or two
//!   SpMVs of an iteration reading A and the preconditioner, and about ten vector passes per
//!   right-hand side, the gain is the matrix traffic only (a third to a half of an iteration
//!   for stencils), and it is not built.
//! - Split into row blocks ([`crate::Solver::blocks`], [`crate::Solver::gpus`]): on GPUs the
//!   block backend is built once and a solve copies the right-hand side and initial guess into
//!   it; on the CPU the blocks are built at every solve. On GPUs the first `update_values`
//!   builds the block backend again from the new values (the split, sub-plans and placement
//!   are kept), made to take later values on the devices: each block's local and halo values
//!   are split from the new values on the host and copied to its device, where its operand is
//!   converted again and its preconditioner recomputed
//!   ([`autopcg_solver::blocks::gpu::BlockGpuBackend::update_values`]).
use std::borrow::Cow;
use std::ops::ControlFlow;
use std::time::Instant;

use rayon::prelude::*;

#[cfg(feature = "gpu")]
use autopcg_generator::saved::{SavedPlan, SavedPlanError};
#[cfg(feature = "gpu")]
use autopcg_generator::ModelRef;
use autopcg_generator::{PlanRequest, SolvePlan, Target};
#[cfg(feature = "gpu")]
use autopcg_gpu::GpuDevice;
use autopcg_solver::cpu::CpuBackend;
use autopcg_solver::gpu::BackendTimes;
#[cfg(feature = "gpu")]
use autopcg_solver::gpu::{AheadUpload, GpuBackend, UploadedA};
#[cfg(feature = "gpu")]
use autopcg_solver::ValueStatsSink;
use autopcg_solver::{
    IterRecord, PcgBackend, PcgError, PcgInfo, PcgParams, Plan, PrecondKind, Preconditioner,
    ValueRefresh, ValueStats,
};
use autopcg_sparse::CsrMatrix;

#[cfg(feature = "gpu")]
use crate::device::open_gpu;
use crate::models::ModelChoice;
#[cfg(feature = "gpu")]
use crate::models::{resolve_model, ResolvedModel};
use crate::solve::{SetupTimes, Solution, SolveFailure};
use crate::{Device, Error};

/// Relative tolerance of the symmetry check a solver makes of its matrix (see
/// [`CsrMatrix::check_symmetric`]): the Matrix Market reader's.
pub const SYMMETRY_TOLERANCE: f64 = autopcg_sparse::mm::SYM_TOL;

/// What a [`crate::Solver`] was configured with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) precond: PrecondKind,
    pub(crate) params: PcgParams,
    pub(crate) device: Device,
    pub(crate) model: ModelChoice,
    pub(crate) ssor_form_auto: bool,
    pub(crate) expected_iterations: f64,
    pub(crate) check_every: Option<usize>,
    pub(crate) check_symmetry: bool,
    /// Row blocks ([`crate::Solver::blocks`]).
    pub(crate) nblocks: Option<usize>,
    /// One row block per GPU ([`crate::Solver::gpus`]).
    pub(crate) gpus: Option<crate::GpuCount>,
}

/// Where the prepared solve runs.
enum Exec {
    /// The CPU: a backend is made per solve (it only allocates the work vectors).
    Cpu,
    /// A GPU: the backend lives as long as the prepared solver.
    #[cfg(feature = "gpu")]
    Gpu {
        dev: GpuDevice,
        backend: Box<GpuBackend>,
    },
    /// Row blocks (on the CPU, one GPU or one GPU per block): see [`crate::blocks`].
    Blocks(Box<crate::blocks::BlockExec>),
}

/// A solve prepared for one matrix (and its sparsity pattern): see the module documentation.
///
/// Not `Sync`: one thread at a time may use a prepared solver (the C interface documents the
/// same); different prepared solvers may be used from different threads.
pub struct PreparedSolver<'a> {
    a: Cow<'a, CsrMatrix>,
    plan: SolvePlan,
    params: PcgParams,
    exec: Exec,
    device: String,
    notes: Vec<String>,
    setup: SetupTimes,
    /// What value-only refreshes of the preconditioner keep (made by the first
    /// [`PreparedSolver::update_values`]).
    refresh: Option<ValueRefresh>,
    /// What a GPU value update that reads the new values once keeps (made by the first
    /// such update).
    staged: Option<StagedUpdate>,
    /// Whether the host copy of the preconditioner (`plan.preconditioner`) is older than the
    /// matrix: a GPU value update recomputed it on the device only. Whatever builds from the
    /// host copy brings it up to date first ([`host_precond_current`]).
    host_precond_stale: bool,
    /// Whether new values are checked to be symmetric ([`crate::Solver::check_symmetry`], as
    /// the matrix was at preparation).
    check_symmetry: bool,
}

/// Kept between GPU value updates that read the new values once (see
/// [`PreparedSolver::update_values`]).
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
struct StagedUpdate {
    /// Where the new values are copied on their way to the device, to become the matrix's
    /// values once they are found good (the old ones come back here): one more array of
    /// values on the host, so that a refused update changes nothing.
    spare: Vec<f64>,
    /// Position of each row's diagonal entry.
    diag: Vec<u32>,
    /// The diagonal entries of the last values staged.
    diagonal: Vec<f64>,
}

impl std::fmt::Debug for PreparedSolver<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSolver")
            .field("n", &self.a.nrows())
            .field("nnz", &self.a.nnz())
            .field("device", &self.device)
            .field("precond", &self.plan.precond_applied())
            .finish()
    }
}

impl<'a> PreparedSolver<'a> {
    /// The prepared solve the settings `s` describe; its value updates check the symmetry of
    /// new values where `s` checks the matrix's.
    pub(crate) fn prepare(a: Cow<'a, CsrMatrix>, s: &Settings) -> Result<Self, Error> {
        let mut p = Self::prepare_plan(a, s)?;
        p.check_symmetry = s.check_symmetry;
        Ok(p)
    }

    fn prepare_plan(a: Cow<'a, CsrMatrix>, s: &Settings) -> Result<Self, Error> {
        if s.nblocks.is_some() || s.gpus.is_some() {
            return Self::prepare_blocks(a, s);
        }
        let t0 = Instant::now();
        let mut notes = Vec::new();
        #[cfg(feature = "gpu")]
        let gpu = match s.device {
            Device::Cpu => None,
            // A matrix that is not symmetric is the error before a missing device.
            Device::Gpu => match open_gpu(0) {
                Ok(d) => Some(d),
                Err(why) => {
                    symmetry_check_ms(&a, s)?;
                    return Err(Error::DeviceUnavailable(why));
                }
            },
            Device::Auto => match open_gpu(0) {
                Ok(d) => Some(d),
                Err(why) => {
                    notes.push(format!("{why}: running on the CPU"));
                    None
                }
            },
        };
        // With the device open, A's arrays go to it on a thread of their own while the plan is
        // chosen (every format is made from them on the device): the backend then waits only
        // for what is left of the copies.
        #[cfg(feature = "gpu")]
        let ahead = gpu.as_ref().map(|_| AheadUpload::new());
        // Whether this device has loaded the counting kernels before (an earlier setup in this
        // process, or an open ahead told the matrix's size): then the plan's counts and checks
        // are made on it at every size, else only from DEVICE_GRAM_COUNT_MIN_NNZ entries (read
        // before the upload ahead loads them).
        #[cfg(feature = "gpu")]
        let warm = gpu.as_ref().is_some_and(autopcg_gpu::kernels::ssor::loaded);
        let m: &CsrMatrix = &a;
        let (plan, params, exec, device, setup) = std::thread::scope(|scope| {
            #[cfg(feature = "gpu")]
            let ahead = match (&gpu, &ahead) {
                (Some(dev), Some(up)) => std::thread::Builder::new()
                    .name("upload A ahead".into())
                    .spawn_scoped(scope, move || up.run(dev, m))
                    .ok()
                    .map(|_| up),
                _ => None,
            };
            #[cfg(not(feature = "gpu"))]
            let _ = scope;
            // The symmetry check runs while A's arrays travel to the device (the upload and
            // its checks only read them): nothing else reads A before it is done.
            let check_ms = symmetry_check_ms(m, s)?;
            #[cfg(feature = "gpu")]
            let (model, label) = {
                let device_name = gpu.as_ref().map(|d| d.props().name.clone());
                let ResolvedModel {
                    model,
                    notes: model_notes,
                } = resolve_model(&s.model, device_name.as_deref())?;
                notes.extend(model_notes);
                let label = model.as_ref().map(|m| m.label());
                (model, label)
            };
            #[cfg(not(feature = "gpu"))]
            cpu_only(s, &mut notes)?;
            #[cfg(feature = "gpu")]
            let gpu_props = gpu.as_ref().map(|d| d.props().clone());
            #[cfg(not(feature = "gpu"))]
            let gpu_props: Option<autopcg_catalog::DeviceProps> = None;
            let target = match gpu_props {
                Some(p) => Target::Gpu(p),
                None => Target::Cpu {
                    threads: rayon::current_num_threads(),
                },
            };
            let mut req = PlanRequest::new(m, s.precond, target);
            // Checked above, to the tolerance of the features (a test pins that they agree), or
            // known to the caller, who turned the check off for a matrix it knows to be
            // symmetric (`Solver::check_symmetry`): the SpMV choice need not search for an
            // asymmetric pair again, a pass over the whole matrix.
            req.symmetry = autopcg_generator::KnownSymmetry::Symmetric;
            req.ssor_form_auto = s.ssor_form_auto;
            req.expected_iterations = s.expected_iterations;
            req.check_every = s.check_every.or(s.params.check_every);
            // The upload ahead checks the diagonal on the device, and the backend reports a bad
            // entry as the host's check would (a GPU test pins it): Jacobi's plan skips its
            // host pass then.
            #[cfg(feature = "gpu")]
            {
                req.diagonal_checked = ahead.is_some();
            }
            // The explicit SSOR-AI product's structure, when the model compares the forms, is
            // counted on the device the solve runs on (the host's pass takes tens of ms on
            // millions of rows), from the arrays uploaded ahead when they are there.
            #[cfg(feature = "gpu")]
            let gram_counter = gpu.as_ref().map(|d| {
                move |m: &CsrMatrix, longest: usize| device_gram_count(d, m, longest, ahead, warm)
            });
            // So are the structure of A and of the factors of first-order factored SSOR-AI,
            // from the arrays uploaded ahead.
            #[cfg(feature = "gpu")]
            let factor_counter = gpu.as_ref().map(|d| {
                move |m: &CsrMatrix, omega: f64| device_factor_totals(d, m, omega, ahead, warm)
            });
            // So are SSOR-AI's checks of A that precede them (its diagonal, the views' counts, the
            // automatic relaxation factor's coupling): no host pass over A precedes the choice.
            #[cfg(feature = "gpu")]
            let k1_checker = gpu
                .as_ref()
                .map(|d| move |m: &CsrMatrix| device_k1_checks(d, m, ahead, warm));
            // So are second-order factored SSOR-AI's factors, which the backend then builds on
            // the device.
            #[cfg(feature = "gpu")]
            let k2_counter = gpu
                .as_ref()
                .map(|d| move |m: &CsrMatrix| device_k2_totals(d, m, ahead, warm));
            // And A's structure where no count of the factors counts it (no preconditioner,
            // Jacobi).
            #[cfg(feature = "gpu")]
            let a_counter = gpu
                .as_ref()
                .map(|d| move |m: &CsrMatrix| device_a_totals(d, m, ahead, warm));
            #[cfg(feature = "gpu")]
            {
                req.model = match (&model, &label) {
                    (Some(m), Some(l)) => Some(ModelRef {
                        file: &m.file,
                        label: l,
                    }),
                    _ => None,
                };
                req.gram_counter = gram_counter
                    .as_ref()
                    .map(|c| autopcg_generator::factors::GramCounter(c));
                req.factor_counter = factor_counter
                    .as_ref()
                    .map(|c| autopcg_generator::factors::FactorCounter(c));
                req.a_counter = a_counter
                    .as_ref()
                    .map(|c| autopcg_generator::factors::ACounter(c));
                req.k1_checker = k1_checker
                    .as_ref()
                    .map(|c| autopcg_generator::factors::K1Checker(c));
                req.k2_counter = k2_counter
                    .as_ref()
                    .map(|c| autopcg_generator::factors::K2Counter(c));
            }
            let device_ms = (t0.elapsed().as_secs_f64() * 1e3 - check_ms).max(0.0);
            let mut plan = autopcg_generator::plan(&req).map_err(|e| match e {
                autopcg_generator::PlanError::Solver(p) => Error::Pcg(p),
                other => Error::Plan(other.to_string()),
            })?;
            notes.extend(plan.notes.iter().cloned());
            let mut params = s.params.clone();
            params.check_every = Some(plan.check_every);
            let t1 = Instant::now();
            #[cfg(feature = "gpu")]
            let on_gpu = match &gpu {
                Some(dev) => Some(gpu_exec(dev.clone(), m, &plan, &params, ahead, &mut notes)?),
                None => None,
            };
            #[cfg(not(feature = "gpu"))]
            let on_gpu = None;
            let (exec, device, parts) = match on_gpu {
                Some(e) => e,
                None => {
                    // Checks what a solve would check (sizes, the diagonal) now, not at the
                    // first solve.
                    CpuBackend::new(m, plan.preconditioner.host(m)?, &vec![0.0; m.nrows()], None)?;
                    (
                        Exec::Cpu,
                        format!("cpu ({} threads)", rayon::current_num_threads()),
                        BackendTimes::default(),
                    )
                }
            };
            let select_ms = plan.select_ms;
            let setup = prepare_times(check_ms, device_ms, &plan, select_ms, t1, parts);
            Ok::<_, Error>((plan, params, exec, device, setup))
        })?;
        Ok(Self::assemble(
            a,
            plan,
            params,
            (exec, device),
            notes,
            setup,
        ))
    }

    /// A prepared solve of the saved plan `saved` (named `label` in reports) on GPU 0: the
    /// fingerprint is checked first (before the device is opened, so that a wrong matrix is
    /// the error even where no GPU is present; with `force` a mismatch is only a note), then
    /// the device; the plan's preconditioner, steps and polling interval are used as they are.
    /// Hashing the pattern counts as selection time. A plan of several row blocks runs on the
    /// multi-block solver, block `i` on GPU `saved.blocks[i].gpu`, split and sub-plans as saved
    /// ([`crate::blocks::BlockExec::from_saved`]).
    #[cfg(feature = "gpu")]
    pub(crate) fn prepare_saved(
        a: Cow<'a, CsrMatrix>,
        s: &Settings,
        saved: &SavedPlan,
        label: &str,
        force: bool,
    ) -> Result<Self, Error> {
        let mut p = Self::prepare_saved_plan(a, s, saved, label, force)?;
        p.check_symmetry = s.check_symmetry;
        Ok(p)
    }

    #[cfg(feature = "gpu")]
    fn prepare_saved_plan(
        a: Cow<'a, CsrMatrix>,
        s: &Settings,
        saved: &SavedPlan,
        label: &str,
        force: bool,
    ) -> Result<Self, Error> {
        if saved.is_split() {
            let exec =
                crate::blocks::BlockExec::from_saved(&block_settings(&a, s), saved, label, force)?;
            return Ok(Self::with_blocks(a, exec));
        }
        let check_ms = symmetry_check_ms(&a, s)?;
        let t0 = Instant::now();
        let gpu = match s.device {
            Device::Cpu => Err("the solve was asked to run on the CPU".to_string()),
            Device::Gpu | Device::Auto => open_gpu(0).map_err(|why| format!("here: {why}")),
        };
        let dev = match gpu {
            Ok(d) => d,
            Err(why) => {
                // The matrix first: a wrong matrix is the more useful message.
                saved.check_matrix(&a, force).map_err(saved_error)?;
                return Err(saved_error(saved.no_device(&why)));
            }
        };
        let device_ms = t0.elapsed().as_secs_f64() * 1e3;
        // A's arrays go to the device while the saved plan is checked and made (see
        // `prepare`).
        let ahead = AheadUpload::new();
        let m: &CsrMatrix = &a;
        let (plan, params, exec, device, notes, setup) = std::thread::scope(|scope| {
            let ahead = std::thread::Builder::new()
                .name("upload A ahead".into())
                .spawn_scoped(scope, || ahead.run(&dev, m))
                .ok()
                .map(|_| &ahead);
            let t1 = Instant::now();
            let plan = saved
                .to_solve_plan(m, dev.props(), force, label)
                .map_err(saved_error)?;
            let select_ms = (t1.elapsed().as_secs_f64() * 1e3 - plan.precond_ms).max(0.0);
            let mut notes = plan.notes.clone();
            let mut params = s.params.clone();
            params.check_every = Some(plan.check_every);
            let t2 = Instant::now();
            let (exec, device, parts) =
                gpu_exec(dev.clone(), m, &plan, &params, ahead, &mut notes)?;
            let setup = prepare_times(check_ms, device_ms, &plan, select_ms, t2, parts);
            Ok::<_, Error>((plan, params, exec, device, notes, setup))
        })?;
        Ok(Self::assemble(
            a,
            plan,
            params,
            (exec, device),
            notes,
            setup,
        ))
    }

    /// A prepared solve split into row blocks ([`crate::blocks::BlockExec`]).
    fn prepare_blocks(a: Cow<'a, CsrMatrix>, s: &Settings) -> Result<Self, Error> {
        let exec =
            crate::blocks::BlockExec::prepare(&block_settings(&a, s)).map_err(|f| f.error)?;
        Ok(Self::with_blocks(a, exec))
    }

    /// The prepared solver of the block solve `exec`. Its plan holds the steps of a block
    /// iteration; each block's preconditioner lives in the block backend.
    fn with_blocks(a: Cow<'a, CsrMatrix>, exec: crate::blocks::BlockExec) -> Self {
        let params = exec.params().clone();
        let plan = SolvePlan {
            preconditioner: autopcg_solver::Preconditioner::None.into(),
            kind: exec.kind(),
            gpu: None,
            check_every: params.check_every.unwrap_or(1),
            steps: exec.plan(),
            model: None,
            explain: Vec::new(),
            predicted_iteration_ms: None,
            notes: Vec::new(),
            precond_ms: 0.0,
            select_ms: 0.0,
        };
        let device = exec.device();
        let notes = exec.notes().to_vec();
        let setup = exec.setup();
        Self::assemble(
            a,
            plan,
            params,
            (Exec::Blocks(Box::new(exec)), device),
            notes,
            setup,
        )
    }

    /// The prepared solver of `plan` running on `exec` (and the device in words).
    fn assemble(
        a: Cow<'a, CsrMatrix>,
        plan: SolvePlan,
        params: PcgParams,
        (exec, device): (Exec, String),
        notes: Vec<String>,
        setup: SetupTimes,
    ) -> Self {
        PreparedSolver {
            a,
            plan,
            params,
            exec,
            device,
            notes,
            setup,
            refresh: None,
            host_precond_stale: false,
            staged: None,
            check_symmetry: true,
        }
    }

    /// Rows of the matrix.
    pub fn n(&self) -> usize {
        self.a.nrows()
    }

    /// Stored entries of the matrix: the length [`PreparedSolver::update_values`] takes.
    pub fn nnz(&self) -> usize {
        self.a.nnz()
    }

    /// The matrix as prepared (its values are the last ones given).
    pub fn matrix(&self) -> &CsrMatrix {
        &self.a
    }

    /// What each step of an iteration runs.
    pub fn plan(&self) -> &Plan {
        &self.plan.steps
    }

    /// The preconditioner as applied (omega resolved, SSOR-AI form chosen).
    pub fn precond(&self) -> PrecondKind {
        self.plan.kind
    }

    /// Where it runs, in words.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// What preparing cost (`rhs_ms` is 0: that belongs to each solve).
    pub fn setup(&self) -> SetupTimes {
        self.setup
    }

    /// Notes of the preparation (fallbacks taken).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The solver parameters of later solves.
    pub fn params(&self) -> &PcgParams {
        &self.params
    }

    /// Sets the relative and absolute tolerances of later solves (`rtol` in (0, 1),
    /// `atol >= 0`; converged when `||b - A x|| <= max(rtol ||b||, atol)`).
    pub fn set_tolerances(&mut self, rtol: f64, atol: f64) -> Result<(), Error> {
        self.params = self.params.clone().with_tol(rtol)?.with_atol(atol)?;
        if let Exec::Blocks(e) = &mut self.exec {
            e.set_params(self.params.clone())?;
        }
        Ok(())
    }

    /// Sets the iteration limit of later solves (at least 1).
    pub fn set_max_iter(&mut self, max_iter: usize) -> Result<(), Error> {
        self.params = self.params.clone().with_max_iter(max_iter)?;
        match &mut self.exec {
            #[cfg(feature = "gpu")]
            Exec::Gpu { backend, .. } => backend.reserve_iterations(max_iter)?,
            Exec::Blocks(e) => e.set_params(self.params.clone())?,
            Exec::Cpu => {}
        }
        Ok(())
    }

    /// Solves `A x = b` from x0 = 0.
    pub fn solve(&mut self, b: &[f64]) -> Result<Solution, SolveFailure> {
        self.solve_with(b, None, |_| ControlFlow::Continue(()))
    }

    /// Solves `A x = b` from `x0` (zero when `None`), calling `progress` with every record the
    /// solver examines (on a GPU in batches, at each poll); `Break` stops the solve.
    pub fn solve_with(
        &mut self,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    ) -> Result<Solution, SolveFailure> {
        let n = self.a.nrows();
        if b.len() != n || x0.is_some_and(|x| x.len() != n) {
            return Err(Error::Pcg(PcgError::Dimension(format!(
                "right-hand side of length {} and initial guess of length {:?} for a matrix of {n} \
                 rows",
                b.len(),
                x0.map(<[f64]>::len)
            )))
            .into());
        }
        if let Exec::Blocks(e) = &mut self.exec {
            return e.solve(&self.a, b, x0, progress);
        }
        let t0 = Instant::now();
        let (result, x, rhs_ms, solve_ms) = match &mut self.exec {
            #[cfg(feature = "gpu")]
            Exec::Gpu { dev, backend } => {
                if !backend.set_problem(b, x0).map_err(Error::from)? {
                    // A right-hand side of another magnitude: the system is scaled anew.
                    host_precond_current(
                        &mut self.host_precond_stale,
                        &mut self.refresh,
                        &self.a,
                        &mut self.plan,
                    )?;
                    let mut fresh = new_gpu_backend(dev, &self.a, &self.plan, b, x0)?;
                    fresh
                        .reserve_iterations(self.params.max_iter)
                        .map_err(Error::from)?;
                    **backend = fresh;
                }
                let (result, rhs_ms, solve_ms) =
                    timed_pcg(backend.as_mut(), &self.params, progress, t0);
                (result, backend.solution(), rhs_ms, solve_ms)
            }
            Exec::Cpu => {
                let pre = self
                    .plan
                    .preconditioner
                    .host(&self.a)
                    .map_err(Error::from)?;
                let mut backend = CpuBackend::new(&self.a, pre, b, x0).map_err(Error::from)?;
                let (result, rhs_ms, solve_ms) =
                    timed_pcg(&mut backend, &self.params, progress, t0);
                (result, Ok(backend.into_solution()), rhs_ms, solve_ms)
            }
            Exec::Blocks(_) => unreachable!("block solves returned above"),
        };
        finish(
            result,
            x,
            self.device.clone(),
            rhs_ms,
            solve_ms,
            &self.plan,
            self.notes.clone(),
        )
    }

    /// Solves for each right-hand side in turn (from x0 = 0), returning each outcome.
    pub fn solve_many(&mut self, rhs: &[&[f64]]) -> Vec<Result<Solution, SolveFailure>> {
        rhs.iter().map(|b| self.solve(b)).collect()
    }

    /// Takes new values for the same sparsity pattern: `values[k]` is the new value of the
    /// `k`-th stored entry in the prepared matrix's CSR order (`matrix().indices()`), both
    /// triangles. The plan is kept; the preconditioner's values are recomputed on its kept
    /// patterns with the same form and omega (the values a new build from these values gives,
    /// on the host bit for bit; on a GPU, up to the sign of a zero), and the device operands
    /// take the new values (see the module documentation: on a GPU the values alone cross the
    /// bus, and the preconditioner is recomputed there). The first call also
    /// prepares the refresh (the position of each entry of K^T in K; for the explicit SSOR-AI
    /// form, K and K^T themselves), which its `precond_ms` includes. A preconditioner the
    /// device built at preparation (first-order SSOR-AI in either form, Jacobi) is refreshed
    /// from A on the device with no host copy (what the refresh needs is found there); where
    /// the device cannot (an operand kept in COO, a system solved scaled), its host copy is
    /// built here the first time.
    ///
    /// Errors (and nothing changes): a length other than [`PreparedSolver::nnz`], values that
    /// are not symmetric (to [`SYMMETRY_TOLERANCE`], the first entry at fault named as at
    /// preparation; checked unless [`crate::Solver::check_symmetry`] turned the check off), a
    /// non-finite value, or values that make a diagonal entry non-positive.
    pub fn update_values(&mut self, values: &[f64]) -> Result<SetupTimes, Error> {
        // On a pool thread, as the setup (see `Solver::prepare`).
        crate::solve::on_pool(|| self.update_values_here(values))
    }

    fn update_values_here(&mut self, values: &[f64]) -> Result<SetupTimes, Error> {
        if values.len() != self.a.nnz() {
            return Err(Error::Pcg(PcgError::Dimension(format!(
                "{} new values for a matrix with {} stored entries",
                values.len(),
                self.a.nnz()
            ))));
        }
        // The check of the matrix at preparation, on the new values, before anything reads
        // them (counted in the update's check_ms).
        let check_ms = match self.check_symmetry {
            true => {
                let tc = Instant::now();
                self.a.check_symmetric_values(values, SYMMETRY_TOLERANCE)?;
                tc.elapsed().as_secs_f64() * 1e3
            }
            false => 0.0,
        };
        let times = self.update_checked_values(values)?;
        Ok(SetupTimes { check_ms, ..times })
    }

    /// [`PreparedSolver::update_values`] of values of the right length, checked symmetric
    /// where asked.
    fn update_checked_values(&mut self, values: &[f64]) -> Result<SetupTimes, Error> {
        #[cfg(feature = "gpu")]
        if let Exec::Gpu { backend, .. } = &mut self.exec {
            // A converted operand keeps its CSR source from the first update on (uploaded
            // with the values it was made from), so every update is staged.
            if backend.can_stage_matrix_values(values.len())
                || backend.keep_matrix_source(&self.a)?
            {
                return self.update_values_staged(values);
            }
        }
        // One pass over the new values: finiteness, and the magnitudes the GPU backend's
        // scaling and true-residual check need.
        let stats = ValueStats::of(self.a.indptr(), values);
        if let Some(k) = stats.first_non_finite {
            return Err(non_finite(self.a.indptr(), k, values[k]));
        }
        if let Exec::Blocks(e) = &mut self.exec {
            let precond = match e.kind() {
                PrecondKind::None => "none",
                PrecondKind::Jacobi => "jacobi",
                PrecondKind::SsorAi { .. } => "ssor-ai",
            };
            if let Some((row, value)) = first_bad_diagonal_of(&self.a, values) {
                return Err(Error::Pcg(PcgError::BadDiagonal {
                    row,
                    value,
                    precond: precond.to_string(),
                }));
            }
            copy_values(&mut self.a, values)?;
            return e.refresh(&self.a, &stats);
        }
        let t0 = Instant::now();
        let refresh = value_refresh(&mut self.refresh, &self.a, &mut self.plan)?;
        // Every diagonal entry positive (what every preconditioner and the backend require) is
        // checked on the new values before anything changes; then the matrix takes them in
        // place (a borrowed one is copied the first time).
        if let Some((row, value)) = first_bad_diagonal_of(&self.a, values) {
            return Err(Error::Pcg(PcgError::BadDiagonal {
                row,
                value,
                precond: self.plan.precond_applied().to_string(),
            }));
        }
        copy_values(&mut self.a, values)?;
        // Values only: every pattern is kept. With the diagonal checked, a refresh fails only
        // on an internal error.
        let pre = self.plan.preconditioner.host(&self.a)?;
        refresh.refresh(&self.a, pre)?;
        self.host_precond_stale = false;
        let a: &CsrMatrix = &self.a;
        let pre: &Preconditioner = pre;
        let precond_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let parts = match &mut self.exec {
            #[cfg(feature = "gpu")]
            Exec::Gpu { dev, backend } => {
                if backend.update_matrix_with(a, pre, &stats)? {
                    backend.setup_times()
                } else {
                    let (fresh, parts) = reserved_gpu_backend(
                        dev,
                        a,
                        &self.plan,
                        &self.params,
                        None,
                        &mut Vec::new(),
                    )?;
                    **backend = fresh;
                    parts
                }
            }
            Exec::Cpu => {
                CpuBackend::new(a, pre, &vec![0.0; a.nrows()], None)?;
                BackendTimes::default()
            }
            Exec::Blocks(_) => unreachable!("block solvers refreshed above"),
        };
        Ok(SetupTimes {
            precond_ms,
            backend_ms: t1.elapsed().as_secs_f64() * 1e3,
            ..SetupTimes::default()
        }
        .with_backend_parts(parts))
    }

    /// [`PreparedSolver::update_values`] on a GPU whose operand keeps its CSR values on the
    /// device: the new values are read once, as they are copied into the staging buffers of
    /// their upload and into a spare host array, and checked on the way (finite; every
    /// diagonal entry positive; the largest magnitude, which the scaling needs). A refused
    /// value puts the old values back on the device; accepted ones become the matrix's by
    /// exchanging arrays.
    #[cfg(feature = "gpu")]
    fn update_values_staged(&mut self, values: &[f64]) -> Result<SetupTimes, Error> {
        let t0 = Instant::now();
        let Exec::Gpu { dev, backend } = &mut self.exec else {
            unreachable!("staged updates are for a single GPU")
        };
        // Whether the preconditioner's values can be recomputed on the device, decided (and
        // what that needs found or uploaded, the first time) before anything changes. Factors
        // the device built from A are refreshed from A there, with no host copy; otherwise
        // the host refresh's patterns are uploaded, and a preconditioner the device built
        // gets its host copy here, the first time (counted as the preconditioner's time).
        let from_a = self.plan.preconditioner.built_by_backend();
        let mut on_device = from_a && backend.prepare_device_refresh_from_a()?;
        let mut host_build_ms = 0.0;
        let mut refresh = None;
        if !on_device {
            let r = value_refresh(&mut self.refresh, &self.a, &mut self.plan)?;
            if from_a {
                host_build_ms = t0.elapsed().as_secs_f64() * 1e3;
            }
            on_device = backend.prepare_device_refresh(
                &self.a,
                r,
                self.plan.preconditioner.host(&self.a)?,
            )?;
            refresh = Some(r);
        }
        let staged = self.staged.get_or_insert_with(|| {
            let diag = self.a.diagonal_positions();
            StagedUpdate {
                spare: vec![0.0; values.len()],
                diagonal: vec![0.0; diag.len()],
                diag,
            }
        });
        if staged.spare.len() != values.len() {
            staged.spare = vec![0.0; values.len()];
        }
        let a: &CsrMatrix = &self.a;
        let (stats, bad_value) = {
            let mut sink = ValueStatsSink::new(
                a.indptr(),
                &staged.diag,
                values,
                &mut staged.spare,
                &mut staged.diagonal,
            )
            .ok_or_else(|| {
                Error::Pcg(PcgError::Dimension(format!(
                    "{} new values for a matrix with {} stored entries",
                    values.len(),
                    a.nnz()
                )))
            })?;
            // SAFETY: the staging calls `fill` on pieces that do not overlap.
            backend.stage_matrix_values(&|off, piece| unsafe { sink.copy_piece(off, piece) })?;
            let stats = sink.finish();
            (stats, stats.first_bad_diagonal.map(|r| sink.diagonal(r)))
        };
        let refused = match (stats.first_non_finite, stats.first_bad_diagonal, bad_value) {
            (Some(k), _, _) => Some(non_finite(a.indptr(), k, values[k])),
            (None, Some(row), Some(value)) => Some(Error::Pcg(PcgError::BadDiagonal {
                row: row + 1,
                value,
                precond: self.plan.precond_applied().to_string(),
            })),
            _ => None,
        };
        if let Some(e) = refused {
            let old = a.data();
            backend.stage_matrix_values(&|off, piece| {
                piece.copy_from_slice(&old[off..off + piece.len()])
            })?;
            return Err(e);
        }
        let upload_ms = t0.elapsed().as_secs_f64() * 1e3 - host_build_ms;
        let dimension =
            |e: autopcg_sparse::SparseError| Error::Pcg(PcgError::Dimension(e.to_string()));
        match &mut self.a {
            Cow::Owned(m) => m.swap_values(&mut staged.spare).map_err(dimension)?,
            // The caller's matrix keeps its values: the copy takes its pattern and the new
            // values (the next update makes a new spare array).
            Cow::Borrowed(m) => {
                self.a = Cow::Owned(
                    m.with_values(std::mem::take(&mut staged.spare))
                        .map_err(dimension)?,
                );
            }
        }
        let t1 = Instant::now();
        // The preconditioner recomputed on the device from the staged values, when it can be:
        // the host copy is then left stale until something on the host needs it.
        if on_device {
            if let Some(kernels_ms) =
                backend.commit_matrix_values_on_device(self.a.nrows(), stats.max_abs)?
            {
                // A host copy, where there is one, is now older than the matrix (factors the
                // device builds have none: one made later is made from the new values).
                self.host_precond_stale = self.plan.preconditioner.built().is_some();
                let parts = backend.setup_times();
                let backend_ms = t1.elapsed().as_secs_f64() * 1e3 - kernels_ms;
                return Ok(SetupTimes {
                    precond_ms: host_build_ms + kernels_ms,
                    backend_ms: upload_ms + backend_ms.max(0.0),
                    ..SetupTimes::default()
                }
                .with_backend_parts(parts));
            }
        }
        // Values only: every pattern is kept. With the diagonal checked, a refresh fails only
        // on an internal error.
        let refresh = match refresh {
            Some(r) => r,
            None => value_refresh(&mut self.refresh, &self.a, &mut self.plan)?,
        };
        let pre = self.plan.preconditioner.host(&self.a)?;
        refresh.refresh_with_diagonal(&self.a, &staged.diagonal, pre)?;
        self.host_precond_stale = false;
        let precond_ms = t1.elapsed().as_secs_f64() * 1e3;
        let t2 = Instant::now();
        let a: &CsrMatrix = &self.a;
        let pre: &Preconditioner = pre;
        let parts = if backend.commit_matrix_values(a, pre, stats.max_abs)? {
            backend.setup_times()
        } else {
            let (fresh, parts) =
                reserved_gpu_backend(dev, a, &self.plan, &self.params, None, &mut Vec::new())?;
            **backend = fresh;
            parts
        };
        Ok(SetupTimes {
            precond_ms: host_build_ms + precond_ms,
            backend_ms: upload_ms + t2.elapsed().as_secs_f64() * 1e3,
            ..SetupTimes::default()
        }
        .with_backend_parts(parts))
    }

    /// The same prepared solver owning its matrix, free of the caller's borrow.
    pub fn into_owned(self) -> PreparedSolver<'static> {
        PreparedSolver {
            a: Cow::Owned(self.a.into_owned()),
            plan: self.plan,
            params: self.params,
            exec: self.exec,
            device: self.device,
            notes: self.notes,
            setup: self.setup,
            refresh: self.refresh,
            staged: self.staged,
            host_precond_stale: self.host_precond_stale,
            check_symmetry: self.check_symmetry,
        }
    }
}

/// Runs the solve on `backend`, set up since `t0`: the driver's result, the milliseconds from
/// `t0` to the start of the iterations (putting the right-hand side in place) and those of the
/// iterations.
fn timed_pcg<B: PcgBackend + ?Sized>(
    backend: &mut B,
    params: &PcgParams,
    progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    t0: Instant,
) -> (Result<PcgInfo, PcgError>, f64, f64) {
    let rhs_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let result = autopcg_solver::pcg(backend, params, progress);
    (result, rhs_ms, t1.elapsed().as_secs_f64() * 1e3)
}

/// Milliseconds spent checking that `a` is symmetric, when the settings ask for the check.
fn symmetry_check_ms(a: &CsrMatrix, s: &Settings) -> Result<f64, Error> {
    if !s.check_symmetry {
        return Ok(0.0);
    }
    let tc = Instant::now();
    a.check_symmetric(SYMMETRY_TOLERANCE)?;
    Ok(tc.elapsed().as_secs_f64() * 1e3)
}

/// What preparing cost: the backend from `backend_start` until now, of which `parts` went to
/// uploads, conversions and kernel loading.
fn prepare_times(
    check_ms: f64,
    device_ms: f64,
    plan: &SolvePlan,
    select_ms: f64,
    backend_start: Instant,
    parts: BackendTimes,
) -> SetupTimes {
    // A preconditioner built on the device is counted as the preconditioner's, not the
    // backend's.
    let backend_ms = backend_start.elapsed().as_secs_f64() * 1e3;
    SetupTimes {
        check_ms,
        device_ms,
        precond_ms: plan.precond_ms + parts.precond_ms,
        select_ms,
        backend_ms: (backend_ms - parts.precond_ms).max(0.0),
        rhs_ms: 0.0,
        ..SetupTimes::default()
    }
    .with_backend_parts(parts)
}

/// The first row (1-based) whose diagonal entry in `values` (new values of `a`'s pattern) is not
/// positive and finite, with that value (0 for a row without a stored diagonal entry).
fn first_bad_diagonal_of(a: &CsrMatrix, values: &[f64]) -> Option<(usize, f64)> {
    let (ptr, idx) = (a.indptr(), a.indices());
    let diag = |i: usize| {
        let (lo, hi) = (ptr[i] as usize, ptr[i + 1] as usize);
        idx[lo..hi]
            .binary_search(&(i as u32))
            .map_or(0.0, |k| values[lo + k])
    };
    let i = autopcg_sparse::scan::first_index_where(a.nrows().min(a.ncols()), |i| {
        let d = diag(i);
        !(d > 0.0 && d.is_finite())
    })?;
    Some((i + 1, diag(i)))
}

/// The value refresh kept in `slot`, made first (for `a` and `plan`) if there is none yet.
fn value_refresh<'r>(
    slot: &'r mut Option<ValueRefresh>,
    a: &CsrMatrix,
    plan: &mut SolvePlan,
) -> Result<&'r mut ValueRefresh, Error> {
    Ok(match slot {
        Some(r) => r,
        none => {
            // A preconditioner the device built is built on the host here, the first time.
            let host = plan.preconditioner.host(a)?;
            none.insert(ValueRefresh::new(a, &plan.kind, host)?)
        }
    })
}

#[cfg(feature = "gpu")]
/// Brings the host copy of the preconditioner up to date with `a` when a device refresh left
/// it `stale`.
fn host_precond_current(
    stale: &mut bool,
    slot: &mut Option<ValueRefresh>,
    a: &CsrMatrix,
    plan: &mut SolvePlan,
) -> Result<(), Error> {
    if *stale {
        let refresh = value_refresh(slot, a, plan)?;
        refresh.refresh(a, plan.preconditioner.host(a)?)?;
        *stale = false;
    }
    Ok(())
}

/// The error for new value `k`, `value`, which is not finite.
fn non_finite(indptr: &[u32], k: usize, value: f64) -> Error {
    Error::Pcg(PcgError::InvalidParameter(format!(
        "new value {k} (row {}) is {value}",
        row_of(indptr, k) + 1
    )))
}

/// The row of stored entry `k`.
fn row_of(indptr: &[u32], k: usize) -> usize {
    indptr
        .partition_point(|&p| p as usize <= k)
        .saturating_sub(1)
}

/// What the block solver takes of the builder's settings `s`, for the matrix `a`.
fn block_settings<'s>(a: &'s CsrMatrix, s: &'s Settings) -> crate::blocks::BlockSettings<'s> {
    crate::blocks::BlockSettings {
        a,
        precond: s.precond,
        params: &s.params,
        device: s.device,
        check_symmetry: s.check_symmetry,
        check_every: s.check_every,
        nblocks: s.nblocks,
        gpus: s.gpus,
        model: s.model.clone(),
        expected_iterations: s.expected_iterations,
    }
}

/// A saved plan's error as the facade's: one that is the solver's (a preconditioner that
/// cannot be built, a launch that does not fit) is [`Error::Pcg`].
#[cfg(feature = "gpu")]
pub(crate) fn saved_error(e: SavedPlanError) -> Error {
    match e {
        SavedPlanError::Solver(p) => Error::Pcg(p),
        e => Error::SavedPlan(e),
    }
}

/// The GPU backend of `plan` on `dev` (uploaded with a zero right-hand side; each solve puts
/// its own in place), with room for `params.max_iter` iterations, the device in words, and
/// where the backend's time went.
#[cfg(feature = "gpu")]
fn gpu_exec(
    dev: GpuDevice,
    a: &CsrMatrix,
    plan: &SolvePlan,
    params: &PcgParams,
    ahead: Option<&AheadUpload>,
    notes: &mut Vec<String>,
) -> Result<(Exec, String, BackendTimes), Error> {
    let (backend, parts) = reserved_gpu_backend(&dev, a, plan, params, ahead, notes)?;
    let device = format!("gpu {} ({})", dev.ordinal(), dev.props().name);
    let backend = Box::new(backend);
    Ok((Exec::Gpu { dev, backend }, device, parts))
}

/// A new GPU backend of `plan` with room for `params.max_iter` iterations, and where its time
/// went: the construction's parts, and the history's allocation and copy as an upload. With
/// `ahead`, A's arrays are those it uploaded (waiting for the copies left counts as upload
/// time); where that upload failed, A is uploaded again here, with a note.
#[cfg(feature = "gpu")]
fn reserved_gpu_backend(
    dev: &GpuDevice,
    a: &CsrMatrix,
    plan: &SolvePlan,
    params: &PcgParams,
    ahead: Option<&AheadUpload>,
    notes: &mut Vec<String>,
) -> Result<(GpuBackend, BackendTimes), Error> {
    let tw = Instant::now();
    let uploaded = match ahead.map(AheadUpload::take) {
        Some(Ok(u)) => Some(u),
        Some(Err(e)) => {
            notes.push(format!(
                "A was uploaded after the plan was chosen: its upload ahead failed ({e})"
            ));
            None
        }
        None => None,
    };
    let wait_ms = tw.elapsed().as_secs_f64() * 1e3;
    let ahead_ms = uploaded.as_ref().map_or(0.0, UploadedA::ms);
    let mut backend = match uploaded {
        Some(u) => {
            let choice = gpu_choice(plan)?;
            GpuBackend::with_uploaded(dev, a, u, &plan.preconditioner, choice)?
        }
        None => new_gpu_backend(dev, a, plan, &vec![0.0; a.nrows()], None)?,
    };
    let mut parts = backend.setup_times();
    parts.upload_ms += wait_ms;
    parts.ahead_ms = ahead_ms;
    let t = Instant::now();
    backend.reserve_iterations(params.max_iter)?;
    // The grown history's copy may still be under way: wait for it (a few microseconds when
    // nothing is queued), so that it is counted here.
    dev.synchronize().map_err(PcgError::from)?;
    parts.upload_ms += t.elapsed().as_secs_f64() * 1e3;
    Ok((backend, parts))
}

/// Stored entries of `A` below which the plan's counts and checks are made on the host in a
/// process whose device has not yet loaded the counting kernels (the first setup): there the
/// device's first use (the module's load, the memory pool's first allocation) makes a count
/// that waits for it slower than the host's pass beside it (on the GPU host, matrices of 5e4
/// to 2.1e5 entries took 0.3-3.3 ms longer to set up with the explicit product's count on the
/// device, in a fresh process; with the checks and counts made there, 8e4 entries with SSOR-AI
/// 16 ms longer). Once the kernels are loaded ([`autopcg_gpu::kernels::ssor::loaded`]: an
/// earlier setup, or `crate::open_gpu_ahead_for`, which also grows the memory pool) every
/// count is made on the device from the arrays uploaded ahead: a warm setup of 1e4 rows with
/// SSOR-AI took 1.64-1.73 ms counted there against 2.12 ms on the host, of 1.1e5 rows
/// 2.77-3.12 against 6.61-6.97 ms (docs/performance.md, "SSOR-AI's checks of A on the device").
#[cfg(feature = "gpu")]
pub const DEVICE_GRAM_COUNT_MIN_NNZ: usize = 1_000_000;

/// Whether the plan's counts and checks of a matrix of `nnz` entries are made on the device,
/// `warm` when the device had loaded the counting kernels before the setup began (see
/// [`DEVICE_GRAM_COUNT_MIN_NNZ`]).
#[cfg(feature = "gpu")]
pub(crate) fn counts_on_device(nnz: usize, warm: bool) -> bool {
    warm || nnz >= DEVICE_GRAM_COUNT_MIN_NNZ
}

/// [`autopcg_gpu::kernels::ssor::ssor_k1_gram_count`] of `a` on `dev`, as the plan takes it
/// (`longest`: the longest row of `K^T`; `warm` as for [`counts_on_device`]). `Ok(None)`, for
/// the host to count, where a row of `K^T` is longer than the span a block takes in for a row,
/// where [`counts_on_device`] says the host, or without an upload ahead below
/// [`DEVICE_GRAM_COUNT_MIN_NNZ`] entries (nothing is copied then).
#[cfg(feature = "gpu")]
pub(crate) fn device_gram_count(
    dev: &GpuDevice,
    a: &CsrMatrix,
    longest: usize,
    ahead: Option<&AheadUpload>,
    warm: bool,
) -> Result<Option<autopcg_sparse::features::StructureTotals>, String> {
    use autopcg_gpu::kernels::ssor::{ssor_k1_gram_count, ssor_k1_gram_count_kept, GRAM_LONG_SPAN};
    if longest > GRAM_LONG_SPAN || !counts_on_device(a.nnz(), warm) {
        return Ok(None);
    }
    // The pattern uploaded ahead, once its upload is done (it is `a`'s: the same matrix the
    // plan reads), the product's pattern the count finds kept with it for the build of the
    // explicit form; without it, `a`'s pattern is uploaded for the count where that pays.
    let on_device = |u: Option<&UploadedA>| {
        u.map(|u| {
            let counted = ssor_k1_gram_count_kept(dev, u.matrix(), Some(longest))?;
            Ok(counted.map(|(totals, pattern)| {
                u.keep_gram_pattern(pattern);
                totals
            }))
        })
    };
    match ahead.and_then(|up| up.with(on_device)) {
        Some(r) => r,
        None if a.nnz() >= DEVICE_GRAM_COUNT_MIN_NNZ => ssor_k1_gram_count(dev, a, Some(longest)),
        None => Ok(None),
    }
    .map_err(|e| e.to_string())
}

/// The GPU steps of `plan`.
#[cfg(feature = "gpu")]
fn gpu_choice(plan: &SolvePlan) -> Result<&autopcg_solver::gpu::GpuPlanChoice, Error> {
    plan.gpu
        .as_ref()
        .ok_or_else(|| Error::Plan("the plan for a GPU has no GPU steps (internal error)".into()))
}

/// [`autopcg_gpu::kernels::ssor::ssor_k1_totals`] of `a` with relaxation `omega`, from the
/// arrays `ahead` uploaded (waiting for them), as the plan takes it (`warm` as for
/// [`counts_on_device`]). `Ok(None)`, for the host to count, where [`counts_on_device`] says
/// the host, without an upload ahead, or where the device does not count the matrix.
#[cfg(feature = "gpu")]
pub(crate) fn device_factor_totals(
    dev: &GpuDevice,
    a: &CsrMatrix,
    omega: f64,
    ahead: Option<&AheadUpload>,
    warm: bool,
) -> Result<Option<autopcg_sparse::features::K1Totals>, String> {
    use autopcg_gpu::kernels::ssor::ssor_k1_totals;
    on_uploaded(ahead, a, warm, |u| ssor_k1_totals(dev, u.matrix(), omega))
}

/// [`autopcg_gpu::kernels::ssor::ssor_k2_totals`] of `a`, from the arrays `ahead` uploaded
/// (waiting for them), as the plan takes them (`warm` as for [`counts_on_device`]). `Ok(None)`,
/// for the host to build the factors, where [`counts_on_device`] says the host, without an
/// upload ahead, or where the device does not count the matrix.
#[cfg(feature = "gpu")]
pub(crate) fn device_k2_totals(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<&AheadUpload>,
    warm: bool,
) -> Result<Option<autopcg_generator::factors::K2Totals>, String> {
    use autopcg_gpu::kernels::ssor::ssor_k2_totals_kept;
    // The factors' patterns the count finds are kept with the arrays for the backend's build.
    on_uploaded(ahead, a, warm, |u| {
        ssor_k2_totals_kept(dev, u.matrix()).map(|t| {
            t.map(|((k, kt), pattern)| {
                u.keep_k2_pattern(pattern);
                autopcg_generator::factors::K2Totals { k, kt }
            })
        })
    })
}

/// [`autopcg_gpu::kernels::ssor::ssor_k1_checks`] of `a`, from the arrays `ahead` uploaded
/// (waiting for them), as the plan takes them (`warm` as for [`counts_on_device`]).
/// `Ok(None)`, for the host to read them, where [`counts_on_device`] says the host, without an
/// upload ahead, or where the device does not read the matrix.
#[cfg(feature = "gpu")]
pub(crate) fn device_k1_checks(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<&AheadUpload>,
    warm: bool,
) -> Result<Option<autopcg_sparse::features::K1Checks>, String> {
    use autopcg_gpu::kernels::ssor::ssor_k1_checks;
    on_uploaded(ahead, a, warm, |u| ssor_k1_checks(dev, u.matrix()))
}

/// [`autopcg_gpu::kernels::ssor::csr_totals`] of `a`, from the arrays `ahead` uploaded
/// (waiting for them), as the plan takes it (`warm` as for [`counts_on_device`]). `Ok(None)`,
/// for the host to count, where [`counts_on_device`] says the host, without an upload ahead,
/// or where the device does not count the matrix.
#[cfg(feature = "gpu")]
pub(crate) fn device_a_totals(
    dev: &GpuDevice,
    a: &CsrMatrix,
    ahead: Option<&AheadUpload>,
    warm: bool,
) -> Result<Option<autopcg_sparse::features::StructureTotals>, String> {
    use autopcg_gpu::kernels::ssor::csr_totals;
    on_uploaded(ahead, a, warm, |u| csr_totals(dev, u.matrix()))
}

/// `f` of the arrays `ahead` uploaded (waiting for them; `f` may keep what it found with
/// them), which are `a`'s (a shape or a count of entries that differs is an internal error); `Ok(None)` where [`counts_on_device`] says
/// the host (`warm` as there), without an upload ahead, or where it failed (the backend
/// reports that).
#[cfg(feature = "gpu")]
fn on_uploaded<T>(
    ahead: Option<&AheadUpload>,
    a: &CsrMatrix,
    warm: bool,
    f: impl FnOnce(&UploadedA) -> Result<Option<T>, autopcg_gpu::GpuError>,
) -> Result<Option<T>, String> {
    if !counts_on_device(a.nnz(), warm) {
        return Ok(None);
    }
    let run = |u: Option<&UploadedA>| {
        u.map(|u| {
            if !u.fits(a) {
                return Err("the matrix uploaded ahead is not the plan's (internal error)".into());
            }
            f(u).map_err(|e| e.to_string())
        })
    };
    ahead.and_then(|up| up.with(run)).unwrap_or(Ok(None))
}

#[cfg(feature = "gpu")]
fn new_gpu_backend(
    dev: &GpuDevice,
    a: &CsrMatrix,
    plan: &SolvePlan,
    b: &[f64],
    x0: Option<&[f64]>,
) -> Result<GpuBackend, Error> {
    let choice = gpu_choice(plan)?;
    Ok(GpuBackend::new(
        dev,
        a,
        &plan.preconditioner,
        b,
        x0,
        choice,
    )?)
}

/// Without GPU support: [`Device::Gpu`] and a named model file are errors, [`Device::Auto`]
/// runs on the CPU with a note.
#[cfg(not(feature = "gpu"))]
fn cpu_only(s: &Settings, notes: &mut Vec<String>) -> Result<(), Error> {
    const WHY: &str = "this build of autopcg has no GPU support (its `gpu` feature is off)";
    match s.device {
        Device::Gpu => return Err(Error::DeviceUnavailable(WHY.into())),
        Device::Auto => notes.push(format!("{WHY}: running on the CPU")),
        Device::Cpu => {}
    }
    if let ModelChoice::File(p) = &s.model {
        return Err(Error::Unsupported(format!(
            "model file {}: models choose GPU plans, and {WHY}",
            p.display()
        )));
    }
    Ok(())
}

/// Writes `values` over the stored values of `a` (same length), in parallel; a borrowed
/// matrix is first copied (its pattern in parallel, see [`CsrMatrix::with_values`]), so the
/// caller's keeps its values.
fn copy_values(a: &mut Cow<'_, CsrMatrix>, values: &[f64]) -> Result<(), Error> {
    if values.len() != a.nnz() {
        return Err(Error::Pcg(PcgError::Dimension(format!(
            "{} new values for a matrix with {} stored entries",
            values.len(),
            a.nnz()
        ))));
    }
    let copy = |dst: &mut [f64]| {
        dst.par_chunks_mut(1 << 16)
            .zip(values.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s))
    };
    match a {
        Cow::Owned(m) => copy(m.data_mut()),
        Cow::Borrowed(m) => {
            let mut v = vec![0.0; values.len()];
            copy(&mut v);
            let owned = m
                .with_values(v)
                .map_err(|e| Error::Pcg(PcgError::Dimension(e.to_string())))?;
            *a = Cow::Owned(owned);
        }
    }
    Ok(())
}

/// Turns a driver result and the final iterate into a [`Solution`] or a [`SolveFailure`].
fn finish(
    result: Result<PcgInfo, PcgError>,
    x: Result<Vec<f64>, PcgError>,
    device: String,
    rhs_ms: f64,
    solve_ms: f64,
    plan: &SolvePlan,
    notes: Vec<String>,
) -> Result<Solution, SolveFailure> {
    let setup = SetupTimes {
        rhs_ms,
        ..SetupTimes::default()
    };
    let make = |x: Vec<f64>, info: PcgInfo| Solution {
        x,
        info,
        device: device.clone(),
        setup_ms: setup.total_ms(),
        setup,
        solve_ms,
        plan: plan.steps.clone(),
        notes: notes.clone(),
        precond_applied: plan.precond_applied().to_string(),
        precond: plan.kind,
        model: plan.model.clone(),
        explain: plan.explain.clone(),
        predicted_iteration_ms: plan.predicted_iteration_ms,
        check_every: plan.check_every,
        blocks: None,
    };
    match result {
        Ok(info) => Ok(make(x.map_err(Error::from)?, info)),
        // The iteration limit, or stagnation at the attainable accuracy: x is still usable.
        Err(e) if e.info().is_some() => {
            let partial = match (x, e.info()) {
                (Ok(x), Some(info)) => Some(Box::new(make(x, info.clone()))),
                _ => None,
            };
            Err(SolveFailure {
                error: Error::Pcg(e),
                partial,
            })
        }
        Err(e) => Err(Error::Pcg(e).into()),
    }
}

#[cfg(test)]
mod tests {
    /// The prepared solver tells the plan the matrix is symmetric after its own check: that
    /// stands for the features' own search only while both use one tolerance.
    #[test]
    fn the_symmetry_check_uses_the_features_tolerance() {
        assert_eq!(
            super::SYMMETRY_TOLERANCE,
            autopcg_sparse::features::SYMMETRY_TOLERANCE
        );
    }

    /// The plan's counts run on the device at every size once the device has loaded the
    /// counting kernels, and only from DEVICE_GRAM_COUNT_MIN_NNZ entries before (the first
    /// setup of a process).
    #[test]
    #[cfg(feature = "gpu")]
    fn counts_go_to_a_warm_device_at_every_size() {
        use super::{counts_on_device, DEVICE_GRAM_COUNT_MIN_NNZ};
        assert_eq!(DEVICE_GRAM_COUNT_MIN_NNZ, 1_000_000);
        for nnz in [1, 49_600, 999_999] {
            assert!(counts_on_device(nnz, true), "{nnz}");
            assert!(!counts_on_device(nnz, false), "{nnz}");
        }
        for nnz in [1_000_000, 49_324_032] {
            assert!(counts_on_device(nnz, true) && counts_on_device(nnz, false));
        }
    }
}
