//! autopcg: a preconditioned conjugate gradient solver for sparse symmetric positive definite
//! systems, with Chronopoulos–Gear PCG and an SSOR approximate-inverse preconditioner.
//!
//! This crate is the facade simulation codes call: [`Solver`] picks the backend and runs the
//! solve; the building blocks are re-exported as [`sparse`], [`solver`], [`gpu`], [`model`]
//! (the performance models `autopcg tune` fits) and [`generator`] (the selection of a GPU plan
//! from a model).
//!
//! ```
//! use autopcg::{Solver, PrecondKind, sparse::families};
//! let a = families::poisson2d_5pt(20, 20).unwrap();
//! let b = a.mul_vec(&vec![1.0; a.nrows()]);
//! let sol = Solver::new(&a).precond(PrecondKind::ssor_ai()).solve(&b).unwrap();
//! assert!(sol.info.true_relative_residual < 1e-8);
//! ```
#![warn(missing_docs)]

use std::fmt;
use std::ops::ControlFlow;
use std::str::FromStr;
use std::time::Instant;

pub use autopcg_generator as generator;
pub use autopcg_gpu as gpu;
pub use autopcg_model as model;
pub use autopcg_solver as solver;
pub use autopcg_sparse as sparse;

pub use autopcg_solver::{IterRecord, PcgError, PcgInfo, PcgParams, Plan, PrecondKind, SsorForm};
pub use autopcg_sparse::{CsrMatrix, SparseError};

use autopcg_solver::cpu::CpuBackend;
use autopcg_solver::Preconditioner;

/// Where a solve runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// A GPU when one is usable, else the CPU.
    #[default]
    Auto,
    /// The CPU (rayon threads).
    Cpu,
    /// A GPU; an error if none is usable.
    Gpu,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        })
    }
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            _ => Err(format!("unknown device '{s}' (expected auto, cpu or gpu)")),
        }
    }
}

/// Errors of the facade.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad matrix or vector input.
    #[error(transparent)]
    Sparse(#[from] SparseError),
    /// The solver failed (see [`PcgError`]).
    #[error(transparent)]
    Pcg(#[from] PcgError),
    /// The requested device cannot be used.
    #[error("device unavailable: {0}")]
    DeviceUnavailable(String),
    /// A model file named explicitly cannot be used.
    #[error(transparent)]
    Model(#[from] autopcg_model::ModelError),
}

/// Which performance model chooses the GPU plan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModelChoice {
    /// The model file of the device found by name ([`autopcg_model::store::find_model`]); the
    /// default rule, with a note, when there is none or it cannot be read.
    #[default]
    Auto,
    /// This model file; an error when it cannot be read or is for another device.
    File(std::path::PathBuf),
    /// No model: the default rule.
    Off,
}

/// A finished solve (converged or not).
#[derive(Debug, Clone)]
pub struct Solution {
    /// The last iterate.
    pub x: Vec<f64>,
    /// Iterations, residuals, convergence.
    pub info: PcgInfo,
    /// Where it ran, in words ("cpu (8 threads)").
    pub device: String,
    /// Preconditioner construction, conversions and uploads, in ms.
    pub setup_ms: f64,
    /// The iterations and the final true residual, in ms.
    pub solve_ms: f64,
    /// What each step ran.
    pub plan: Plan,
    /// One-line notes for the user (fallbacks, defaults taken).
    pub notes: Vec<String>,
    /// The preconditioner as applied ([`Preconditioner::kind_name`]: `ssor-ai-factored` or
    /// `ssor-ai-explicit` once the form is settled).
    pub precond_applied: String,
    /// The model file that chose the plan, when one did.
    pub model: Option<String>,
    /// How a model chose each step (empty without a model).
    pub explain: Vec<autopcg_generator::StepExplain>,
    /// Predicted milliseconds per iteration, when a model chose the plan.
    pub predicted_iteration_ms: Option<f64>,
}

/// A solve that ended in an error; `partial` holds the last iterate when there is one
/// (the iteration limit was reached, or the solve stagnated at the attainable accuracy).
#[derive(Debug)]
pub struct SolveFailure {
    /// What went wrong.
    pub error: Error,
    /// The state at the end, when the solve ran to its limit or stagnated.
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
}

impl<'a> Solver<'a> {
    /// A solver for `a` with SSOR-AI (first order, factored form, omega from
    /// [`solver::auto_omega`]), tol 1e-8 and the automatic device choice.
    pub fn new(a: &'a CsrMatrix) -> Self {
        Solver {
            a,
            precond: PrecondKind::ssor_ai().with_omega(autopcg_solver::auto_omega(a)),
            params: PcgParams::default(),
            device: Device::Auto,
            model: ModelChoice::Auto,
            ssor_form_auto: false,
            expected_iterations: autopcg_generator::EXPECTED_ITERATIONS,
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
    /// Sets tolerance, iteration limit and polling.
    pub fn params(mut self, params: PcgParams) -> Self {
        self.params = params;
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
        mut progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    ) -> Result<Solution, SolveFailure> {
        let mut notes = Vec::new();
        match self.device {
            Device::Cpu => self.solve_cpu(b, x0, progress, notes),
            Device::Gpu => {
                let dev = open_gpu().map_err(Error::DeviceUnavailable)?;
                self.solve_gpu(&dev, b, x0, progress, notes)
            }
            Device::Auto => match open_gpu() {
                Ok(dev) => self.solve_gpu(&dev, b, x0, &mut progress, notes),
                Err(why) => {
                    notes.push(format!("{why}: running on the CPU"));
                    self.solve_cpu(b, x0, progress, notes)
                }
            },
        }
    }

    fn solve_gpu(
        &self,
        dev: &gpu::GpuDevice,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
        mut notes: Vec<String>,
    ) -> Result<Solution, SolveFailure> {
        use autopcg_solver::gpu::{GpuBackend, GpuPlanChoice};
        let t0 = Instant::now();
        let props = dev.props();
        let model = self.load_model(&props.name, &mut notes)?;
        let mut pre = Preconditioner::build(self.a, &self.precond).map_err(Error::from)?;
        let mut explain = Vec::new();
        let mut form_choice = None;
        if let (Some((m, _)), true, Preconditioner::SsorFactored { k, kt, .. }) =
            (&model, self.ssor_form_auto, &pre)
        {
            // nnz(K^T D K) <= sum over rows of K of len^2 (each row adds the outer product of
            // its pattern). Past a few times nnz(A) the explicit form reads more than the
            // factored one and forming it (a CPU SpGEMM) could take longer than the solve.
            let bound: f64 = k
                .indptr()
                .windows(2)
                .map(|w| f64::from(w[1] - w[0]).powi(2))
                .sum();
            let too_big =
                bound > EXPLICIT_BOUND_FACTOR * self.a.nnz() as f64 && bound > EXPLICIT_BOUND_MIN;
            if too_big {
                notes.push(format!(
                    "SSOR-AI kept factored: the explicit product could hold up to {bound:.3e} \
                     entries ({:.1} times nnz(A))",
                    bound / self.a.nnz().max(1) as f64
                ));
            }
            if let Some(expl) = (!too_big)
                .then(|| pre.to_explicit())
                .transpose()
                .map_err(Error::from)?
                .flatten()
            {
                let Preconditioner::SsorExplicit { m: mm } = &expl else {
                    unreachable!("to_explicit gives the explicit form")
                };
                match autopcg_generator::choose_ssor_form(
                    m,
                    k,
                    kt,
                    mm,
                    props,
                    self.expected_iterations,
                ) {
                    Ok(f) => {
                        explain.push(f.explain.clone());
                        if f.form == SsorForm::Explicit {
                            pre = expl;
                        }
                        form_choice = Some(f);
                    }
                    Err(e) => notes.push(format!("SSOR-AI form left factored: {e}")),
                }
            }
        }
        // Poll (synchronise) every GPU_CHECK_EVERY iterations unless the caller asked otherwise.
        let mut params = self.params.clone();
        if params.check_every == 1 {
            params.check_every = GPU_CHECK_EVERY;
        }
        let graph_iters = GpuPlanChoice::graph_iters_for(params.check_every);
        let mut model_used = None;
        let mut predicted = None;
        let choice = match &model {
            Some((m, path)) => {
                match autopcg_generator::select_plan(
                    m,
                    self.a,
                    &pre,
                    props,
                    self.expected_iterations,
                    form_choice.as_ref(),
                ) {
                    Ok(sel) => {
                        model_used = Some(path.clone());
                        predicted = Some(sel.predicted_iteration_ms);
                        explain.extend(sel.explain);
                        let mut c = sel.choice;
                        c.source = format!("model {path}");
                        c.with_graph_iters(graph_iters)
                    }
                    Err(e) => {
                        notes.push(format!("model {path} not used ({e}): default rule"));
                        GpuPlanChoice::default_for(self.a, &pre, props)
                            .with_graph_iters(graph_iters)
                    }
                }
            }
            None => GpuPlanChoice::default_for(self.a, &pre, props).with_graph_iters(graph_iters),
        };
        let mut backend =
            GpuBackend::new(dev, self.a, &pre, b, x0, &choice).map_err(Error::from)?;
        backend
            .reserve_iterations(params.max_iter)
            .map_err(Error::from)?;
        let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
        let plan = backend.plan();
        let device = format!("gpu {} ({})", dev.ordinal(), props.name);
        let t1 = Instant::now();
        let result = autopcg_solver::pcg(&mut backend, &params, progress);
        let x = backend.into_solution();
        let solve_ms = t1.elapsed().as_secs_f64() * 1e3;
        let mut out = finish(result, x, device, setup_ms, solve_ms, plan, notes);
        let applied = pre.kind_name().to_string();
        let fill = |s: &mut Solution| {
            s.precond_applied = applied.clone();
            s.model = model_used.clone();
            s.explain = explain.clone();
            s.predicted_iteration_ms = predicted;
        };
        match &mut out {
            Ok(s) => fill(s),
            Err(f) => {
                if let Some(s) = f.partial.as_deref_mut() {
                    fill(s);
                }
            }
        }
        out
    }

    /// The model to use on a device called `name`, with the path it came from: an explicit
    /// file must load (else an error); the automatic lookup falls back to the default rule
    /// with a note.
    fn load_model(
        &self,
        name: &str,
        notes: &mut Vec<String>,
    ) -> Result<Option<(autopcg_model::ModelFile, String)>, Error> {
        use autopcg_model::{store, ModelFile};
        match &self.model {
            ModelChoice::Off => Ok(None),
            ModelChoice::File(p) => Ok(Some((
                ModelFile::load_for_device(p, name)?,
                p.display().to_string(),
            ))),
            ModelChoice::Auto => match store::find_model(name) {
                None => {
                    notes.push(format!(
                        "no model for {name} (looked for {} in {}): default rule; run `autopcg tune` to fit one",
                        store::model_file_name(name),
                        store::search_dirs()
                            .iter()
                            .map(|d| d.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    Ok(None)
                }
                Some(p) => match ModelFile::load_for_device(&p, name) {
                    Ok(m) => Ok(Some((m, p.display().to_string()))),
                    Err(e) => {
                        notes.push(format!("model not used ({e}): default rule"));
                        Ok(None)
                    }
                },
            },
        }
    }

    fn solve_cpu(
        &self,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
        notes: Vec<String>,
    ) -> Result<Solution, SolveFailure> {
        let t0 = Instant::now();
        let pre = Preconditioner::build(self.a, &self.precond).map_err(Error::from)?;
        let mut backend = CpuBackend::new(self.a, &pre, b, x0).map_err(Error::from)?;
        let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
        let threads = rayon::current_num_threads();
        let mut plan = Plan {
            steps: Vec::new(),
            source: "fixed CPU kernels".into(),
        };
        let cfg = format!("{threads} CPU threads");
        plan.push("update", "-", "cpu_cg_update_fused", cfg.clone(), None);
        let pformat = match &pre {
            Preconditioner::None => "-",
            Preconditioner::Jacobi { .. } => "diagonal",
            Preconditioner::SsorFactored { .. } => "csr (K, K^T)",
            Preconditioner::SsorExplicit { .. } => "csr (K^T D^-1 K)",
        };
        plan.push("precond", pformat, pre.kind_name(), cfg.clone(), None);
        plan.push("spmv+dots", "csr", "cpu_csr_spmv_dots_fused", cfg, None);

        let t1 = Instant::now();
        let result = autopcg_solver::pcg(&mut backend, &self.params, progress);
        let x = Ok(backend.into_solution());
        let solve_ms = t1.elapsed().as_secs_f64() * 1e3;
        let device = format!("cpu ({threads} threads)");
        let applied = pre.kind_name().to_string();
        let mut out = finish(result, x, device, setup_ms, solve_ms, plan, notes);
        match &mut out {
            Ok(s) => s.precond_applied = applied,
            Err(f) => {
                if let Some(s) = f.partial.as_deref_mut() {
                    s.precond_applied = applied;
                }
            }
        }
        out
    }
}

/// The explicit SSOR-AI form is not considered when the bound on its nonzeros exceeds this
/// many times nnz(A) (and [`EXPLICIT_BOUND_MIN`]).
pub const EXPLICIT_BOUND_FACTOR: f64 = 8.0;
/// Below this many entries the explicit form is always considered (small matrices, where one
/// launch instead of three matters most).
pub const EXPLICIT_BOUND_MIN: f64 = 4e6;

/// Iterations between two polls of a GPU (each poll synchronises with the device).
pub const GPU_CHECK_EVERY: usize = 16;

/// Opens GPU 0, or says why there is none.
fn open_gpu() -> Result<gpu::GpuDevice, String> {
    if !gpu::gpu_available() {
        return Err("no usable NVIDIA GPU (CUDA driver not found or no device)".into());
    }
    gpu::GpuDevice::open(0).map_err(|e| format!("GPU 0 could not be opened: {e}"))
}

/// Turns a driver result and the final iterate into a [`Solution`] or a [`SolveFailure`].
fn finish(
    result: Result<PcgInfo, PcgError>,
    x: Result<Vec<f64>, PcgError>,
    device: String,
    setup_ms: f64,
    solve_ms: f64,
    plan: Plan,
    notes: Vec<String>,
) -> Result<Solution, SolveFailure> {
    let make = |x: Vec<f64>, info: PcgInfo| Solution {
        x,
        info,
        device: device.clone(),
        setup_ms,
        solve_ms,
        plan: plan.clone(),
        notes: notes.clone(),
        precond_applied: String::new(),
        model: None,
        explain: Vec::new(),
        predicted_iteration_ms: None,
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
