//! The solve: ask the generator for a plan, build the backend it names, run Chronopoulos–Gear
//! PCG, and report.
use std::fmt;
use std::ops::ControlFlow;
use std::time::Instant;

use autopcg_generator::{ModelRef, PlanRequest, SolvePlan, StepExplain, Target};
use autopcg_gpu::GpuDevice;
use autopcg_solver::cpu::CpuBackend;
use autopcg_solver::gpu::GpuBackend;
use autopcg_solver::{IterRecord, PcgError, PcgInfo, PcgParams, Plan, PrecondKind};
use autopcg_sparse::CsrMatrix;
use serde::Serialize;

use crate::device::open_gpu;
use crate::models::{resolve_model, ModelChoice, ResolvedModel};
use crate::{Device, Error};

mod saved;

/// Where setup time went, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SetupTimes {
    /// Opening the device and finding and reading the model file.
    pub device_ms: f64,
    /// Building the preconditioner (both SSOR-AI forms when the model compared them).
    pub precond_ms: f64,
    /// Choosing the plan.
    pub select_ms: f64,
    /// Conversions, uploads, allocation and kernel loading of the backend.
    pub backend_ms: f64,
}

impl SetupTimes {
    /// The total.
    pub fn total_ms(&self) -> f64 {
        self.device_ms + self.precond_ms + self.select_ms + self.backend_ms
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
    /// The model file that chose the plan, when one did.
    pub model: Option<String>,
    /// How a model chose each step (empty without a model).
    pub explain: Vec<StepExplain>,
    /// Predicted milliseconds per iteration, when a model chose the plan.
    pub predicted_iteration_ms: Option<f64>,
    /// The polling interval the solve used.
    pub check_every: usize,
}

/// A solve that ended in an error; `partial` holds the last iterate when there is one
/// (the iteration limit was reached).
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
}

impl<'a> Solver<'a> {
    /// A solver for `a` with SSOR-AI (first order, factored form, omega from
    /// [`autopcg_solver::auto_omega`]), tol 1e-8 and the automatic device choice.
    pub fn new(a: &'a CsrMatrix) -> Self {
        Solver {
            a,
            precond: PrecondKind::ssor_ai().with_omega(autopcg_solver::auto_omega(a)),
            params: PcgParams::default(),
            device: Device::Auto,
            model: ModelChoice::Auto,
            ssor_form_auto: false,
            expected_iterations: autopcg_generator::EXPECTED_ITERATIONS,
            check_every: None,
        }
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
    /// Iterations a format conversion is amortised over when the model chooses formats
    /// (default [`autopcg_generator::EXPECTED_ITERATIONS`]).
    pub fn expected_iterations(mut self, iters: f64) -> Self {
        self.expected_iterations = iters;
        self
    }
    /// Sets the preconditioner.
    pub fn precond(mut self, kind: PrecondKind) -> Self {
        self.precond = kind;
        self
    }
    /// Sets tolerance, iteration limit and history. The polling interval of `params` is used
    /// only if set with [`Solver::check_every`]; otherwise the generator's default for the
    /// device applies (every iteration on the CPU, every 16 on a GPU).
    pub fn params(mut self, params: PcgParams) -> Self {
        self.params = params;
        self
    }
    /// Polls (synchronises with the device, checks convergence) every `k` iterations.
    pub fn check_every(mut self, k: usize) -> Self {
        self.check_every = Some(k);
        self
    }
    /// Sets the device.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Solves from x0 = 0.
    pub fn solve(&self, b: &[f64]) -> Result<Solution, SolveFailure> {
        self.solve_with(b, None, |_| ControlFlow::Continue(()))
    }

    /// Solves from `x0` (zero when `None`), calling `progress` with every iteration's record
    /// (returning `Break` stops the solve early; it then reports not converged). On a GPU the
    /// records arrive in batches, each time the solver polls the device.
    pub fn solve_with(
        &self,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    ) -> Result<Solution, SolveFailure> {
        let t0 = Instant::now();
        let mut notes = Vec::new();
        let gpu = match self.device {
            Device::Cpu => None,
            Device::Gpu => Some(open_gpu(0).map_err(Error::DeviceUnavailable)?),
            Device::Auto => match open_gpu(0) {
                Ok(d) => Some(d),
                Err(why) => {
                    notes.push(format!("{why}: running on the CPU"));
                    None
                }
            },
        };
        let device_name = gpu.as_ref().map(|d| d.props().name.clone());
        let ResolvedModel {
            model,
            notes: model_notes,
        } = resolve_model(&self.model, device_name.as_deref())?;
        notes.extend(model_notes);
        let label = model.as_ref().map(|m| m.label());
        let target = match &gpu {
            Some(d) => Target::Gpu(d.props().clone()),
            None => Target::Cpu {
                threads: rayon::current_num_threads(),
            },
        };
        let mut req = PlanRequest::new(self.a, self.precond, target);
        req.ssor_form_auto = self.ssor_form_auto;
        req.expected_iterations = self.expected_iterations;
        req.check_every = self.check_every;
        req.model = match (&model, &label) {
            (Some(m), Some(l)) => Some(ModelRef {
                file: &m.file,
                label: l,
            }),
            _ => None,
        };
        let device_ms = t0.elapsed().as_secs_f64() * 1e3;
        let plan = autopcg_generator::plan(&req).map_err(|e| match e {
            autopcg_generator::PlanError::Solver(p) => Error::Pcg(p),
            other => Error::Plan(other.to_string()),
        })?;
        notes.extend(plan.notes.iter().cloned());
        let mut setup = SetupTimes {
            device_ms,
            precond_ms: plan.precond_ms,
            select_ms: plan.select_ms,
            backend_ms: 0.0,
        };
        let mut params = self.params.clone();
        params.check_every = plan.check_every;
        match &gpu {
            Some(dev) => self.run_gpu(dev, &plan, b, x0, &params, progress, &mut setup, notes),
            None => self.run_cpu(&plan, b, x0, &params, progress, &mut setup, notes),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_gpu(
        &self,
        dev: &GpuDevice,
        plan: &SolvePlan,
        b: &[f64],
        x0: Option<&[f64]>,
        params: &PcgParams,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
        setup: &mut SetupTimes,
        notes: Vec<String>,
    ) -> Result<Solution, SolveFailure> {
        let choice = plan.gpu.as_ref().ok_or_else(|| {
            Error::Plan("the plan for a GPU has no GPU steps (internal error)".into())
        })?;
        let t = Instant::now();
        let mut backend = GpuBackend::new(dev, self.a, &plan.preconditioner, b, x0, choice)
            .map_err(Error::from)?;
        backend
            .reserve_iterations(params.max_iter)
            .map_err(Error::from)?;
        setup.backend_ms = t.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let result = autopcg_solver::pcg(&mut backend, params, progress);
        let x = backend.into_solution();
        let solve_ms = t1.elapsed().as_secs_f64() * 1e3;
        let device = format!("gpu {} ({})", dev.ordinal(), dev.props().name);
        finish(result, x, device, *setup, solve_ms, plan, notes)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_cpu(
        &self,
        plan: &SolvePlan,
        b: &[f64],
        x0: Option<&[f64]>,
        params: &PcgParams,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
        setup: &mut SetupTimes,
        notes: Vec<String>,
    ) -> Result<Solution, SolveFailure> {
        let t = Instant::now();
        let mut backend =
            CpuBackend::new(self.a, &plan.preconditioner, b, x0).map_err(Error::from)?;
        setup.backend_ms = t.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let result = autopcg_solver::pcg(&mut backend, params, progress);
        let x = Ok(backend.into_solution());
        let solve_ms = t1.elapsed().as_secs_f64() * 1e3;
        let device = format!("cpu ({} threads)", rayon::current_num_threads());
        finish(result, x, device, *setup, solve_ms, plan, notes)
    }
}

/// Turns a driver result and the final iterate into a [`Solution`] or a [`SolveFailure`].
fn finish(
    result: Result<PcgInfo, PcgError>,
    x: Result<Vec<f64>, PcgError>,
    device: String,
    setup: SetupTimes,
    solve_ms: f64,
    plan: &SolvePlan,
    notes: Vec<String>,
) -> Result<Solution, SolveFailure> {
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
        model: plan.model.clone(),
        explain: plan.explain.clone(),
        predicted_iteration_ms: plan.predicted_iteration_ms,
        check_every: plan.check_every,
    };
    match result {
        Ok(info) => Ok(make(x.map_err(Error::from)?, info)),
        Err(PcgError::NotConverged { info }) => {
            let partial = x.ok().map(|x| Box::new(make(x, (*info).clone())));
            Err(SolveFailure {
                error: Error::Pcg(PcgError::NotConverged { info }),
                partial,
            })
        }
        Err(e) => Err(Error::Pcg(e).into()),
    }
}
