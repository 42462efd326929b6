//! Parameters, results and errors of a PCG solve (the Params / Info / Error trio), and why a
//! solve stopped ([`StopReason`]).
use serde::Serialize;

/// Solver parameters. Build with [`PcgParams::new`] and the `with_*` methods, which validate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcgParams {
    /// Relative tolerance: the solve converges when the true residual of its iterate meets
    /// `||b - A x|| <= tol * ||b||` (checked whenever the recurrence residual meets it; see
    /// [`crate::pcg()`]).
    pub tol: f64,
    /// Absolute tolerance: the solve also converges when `||b - A x|| <= atol` (in the units
    /// of b), whichever of the two is met first. 0 (the default) leaves only the relative test.
    pub atol: f64,
    /// Iteration limit.
    pub max_iter: usize,
    /// Poll the backend (host synchronisation, convergence and breakdown checks) every this many
    /// iterations; `None` (the default) leaves it to whoever plans the solve (the generator
    /// polls every iteration on the CPU and every 16 on a GPU); [`crate::pcg()`] itself takes 1.
    /// Where a poll costs the backend a synchronisation (a GPU's,
    /// [`crate::PcgBackend::poll_growth`]) the driver lets up to that many intervals pass
    /// between polls while the residual is far from the tolerance; the solve still stops at a
    /// multiple of this interval, and the records are the same.
    pub check_every: Option<usize>,
    /// Keep the residual norm of every iteration in [`PcgInfo::residual_history`].
    pub record_history: bool,
    /// Periodic residual replacement: also recompute `r = b - A x` and restart the recurrence
    /// every this many iterations (at the first poll at or after that many iterations since
    /// the last start). `None` (the default): replace only when the recurrence meets the
    /// tolerance and the true residual does not. Off by default because a replacement restarts
    /// CG and loses its Krylov space: on a 20k-point FEM system with Jacobi (tol 1e-10, 823
    /// iterations and one replacement without it), replacing every 200 iterations took 5568
    /// iterations and every 50 took 25711, for the same final residual.
    pub replace_every: Option<usize>,
}

impl Default for PcgParams {
    fn default() -> Self {
        PcgParams {
            tol: 1e-8,
            atol: 0.0,
            max_iter: 10_000,
            check_every: None,
            record_history: true,
            replace_every: None,
        }
    }
}

impl PcgParams {
    /// Defaults: tol 1e-8, 10 000 iterations, the polling interval left to the plan, history
    /// on.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the relative tolerance; must be finite and in (0, 1).
    pub fn with_tol(mut self, tol: f64) -> Result<Self, PcgError> {
        if !(tol.is_finite() && tol > 0.0 && tol < 1.0) {
            return Err(PcgError::InvalidParameter(format!(
                "tolerance must be in (0, 1), got {tol}"
            )));
        }
        self.tol = tol;
        Ok(self)
    }
    /// Sets the absolute tolerance; must be finite and non-negative (0: none).
    pub fn with_atol(mut self, atol: f64) -> Result<Self, PcgError> {
        if !(atol.is_finite() && atol >= 0.0) {
            return Err(PcgError::InvalidParameter(format!(
                "absolute tolerance must be finite and non-negative, got {atol}"
            )));
        }
        self.atol = atol;
        Ok(self)
    }
    /// Sets the iteration limit; must be at least 1.
    pub fn with_max_iter(mut self, max_iter: usize) -> Result<Self, PcgError> {
        if max_iter == 0 {
            return Err(PcgError::InvalidParameter(
                "max_iter must be at least 1".into(),
            ));
        }
        self.max_iter = max_iter;
        Ok(self)
    }
    /// Sets the polling interval; must be at least 1.
    pub fn with_check_every(mut self, k: usize) -> Result<Self, PcgError> {
        if k == 0 {
            return Err(PcgError::InvalidParameter(
                "check_every must be at least 1".into(),
            ));
        }
        self.check_every = Some(k);
        Ok(self)
    }
    /// The polling interval: the one set, else 1.
    pub fn poll_interval(&self) -> usize {
        self.check_every.unwrap_or(1)
    }
    /// Turns residual history recording on or off.
    pub fn with_history(mut self, on: bool) -> Self {
        self.record_history = on;
        self
    }
    /// Sets periodic residual replacement (see [`PcgParams::replace_every`]); `Some(0)` is
    /// refused.
    pub fn with_replace_every(mut self, k: Option<usize>) -> Result<Self, PcgError> {
        if k == Some(0) {
            return Err(PcgError::InvalidParameter(
                "replace_every must be at least 1 (or off)".into(),
            ));
        }
        self.replace_every = k;
        Ok(self)
    }
}

/// Why a solve stopped. Serialised in snake_case (`converged`, `max_iter`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The true residual of the iterate met the tolerance.
    Converged,
    /// The iteration limit was reached first.
    MaxIter,
    /// The true residual stopped decreasing above the tolerance: the tolerance is below the
    /// accuracy double precision allows for this system ([`PcgError::Stagnated`]).
    Stagnated,
    /// The matrix or the preconditioner is not symmetric positive definite
    /// ([`PcgError::NotSpd`], [`PcgError::BadDiagonal`]).
    NotSpd,
    /// A non-finite value, or an inner product that left the range of `f64`
    /// ([`PcgError::Breakdown`]).
    Breakdown,
    /// The callback stopped the solve.
    Stopped,
}

/// Which norm [`PcgInfo::residual_history`] holds. Serialised in snake_case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HistoryNorm {
    /// Absolute norms `||r||`, in the units of `b`, of the residual the recurrence carries:
    /// one entry per record the driver examined. The first entry, and the first after each
    /// residual replacement, is a true residual `||b - A x||` (a start computes `r` that way);
    /// the others are recurrence residuals, which can drift below the true residual.
    Recurrence,
}

/// What a solve did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcgInfo {
    /// Iterations performed (SpMV-preconditioner-reduction rounds after each start), counted
    /// over every residual replacement, up to the record that ended the solve: the one whose
    /// residual met the tolerance, or the last one examined.
    pub iterations: usize,
    /// Iterations the backend actually ran, i.e. the iterate x holds, counted the same way.
    /// Equal to `iterations` when the backend is polled every iteration; up to
    /// `check_every - 1` more otherwise (a backend cannot undo them; after a replacement the
    /// next round starts from this iterate). `true_relative_residual` is measured on it.
    pub iterations_run: usize,
    /// Whether the true residual of the iterate met the tolerance (`reason` is then
    /// [`StopReason::Converged`]).
    pub converged: bool,
    /// Why the solve stopped.
    pub reason: StopReason,
    /// Residual norms, one per record examined: `iterations + 1 + replacements` entries when
    /// polled every iteration (empty if history was off). [`PcgInfo::history_norm`] says which
    /// norm.
    pub residual_history: Vec<f64>,
    /// Which norm `residual_history` holds.
    pub history_norm: HistoryNorm,
    /// Residual replacements: restarts of the recurrence from `r = b - A x` because the
    /// recurrence residual met the tolerance while the true residual did not (or, with
    /// [`PcgParams::replace_every`], periodically).
    pub replacements: usize,
    /// ||b||.
    pub rhs_norm: f64,
    /// Recurrence residual norm at the end, divided by ||b||.
    pub recurrence_relative_residual: f64,
    /// True residual ||b - A x|| / ||b|| of the final iterate (the value the convergence
    /// decision used, or recomputed at the end).
    pub true_relative_residual: f64,
}

/// Why a solve failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PcgError {
    /// The iteration limit was reached (or the callback stopped the solve first:
    /// `info.reason` says which); `info` describes the last state (the backend still holds the
    /// last iterate).
    #[error(
        "did not converge in {} iterations: relative residual {:.3e} (true {:.3e})",
        info.iterations, info.recurrence_relative_residual, info.true_relative_residual
    )]
    NotConverged {
        /// State at the end.
        info: Box<PcgInfo>,
    },
    /// The true residual stopped decreasing above the tolerance: the recurrence met it again
    /// and again, but residual replacement (restarting from `r = b - A x`) no longer brought
    /// `||b - A x||` down. The tolerance is below the accuracy that double precision allows for
    /// this system; `attainable` estimates it. The backend holds the last iterate, which is
    /// about as accurate as the system allows.
    #[error(
        "stagnated after {} iterations ({} residual replacements): the true relative residual \
         {:.3e} stopped decreasing above tol {tol:.1e}; about {attainable:.1e} is attainable in \
         double precision for this system (eps ||A|| ||x|| / ||b||): ask for a tolerance above it",
        info.iterations, info.replacements, info.true_relative_residual
    )]
    Stagnated {
        /// State at the end.
        info: Box<PcgInfo>,
        /// The tolerance asked for.
        tol: f64,
        /// Estimated attainable relative residual `eps ||A||_inf ||x||_2 / ||b||_2`.
        attainable: f64,
    },
    /// A quantity that is positive for an SPD matrix and SPD preconditioner was not:
    /// `quantity` names it ("gamma = (r,u)", "delta - beta*gamma/alpha = (Ap,p)", or a diagonal
    /// entry), with its value and the iteration.
    #[error("not SPD: {quantity} = {value:e} at iteration {iteration}")]
    NotSpd {
        /// Which quantity.
        quantity: String,
        /// Its value.
        value: f64,
        /// Iteration (0 = initial).
        iteration: usize,
    },
    /// A non-finite value or a zero division that SPD-ness does not explain.
    #[error("breakdown at iteration {iteration}: {reason}")]
    Breakdown {
        /// Iteration (0 = initial).
        iteration: usize,
        /// What happened.
        reason: String,
    },
    /// A diagonal entry that is not positive (or not finite): the matrix is not SPD, whatever
    /// the preconditioner (checked before iterating); row is 1-based.
    #[error(
        "diagonal entry A[{row}][{row}] = {value:e} is not positive, so the matrix is not \
         symmetric positive definite (checked before iterating, precond {precond})"
    )]
    BadDiagonal {
        /// 1-based row.
        row: usize,
        /// The diagonal value (0 when absent).
        value: f64,
        /// Preconditioner name.
        precond: String,
    },
    /// Operands of the wrong size.
    #[error("dimension mismatch: {0}")]
    Dimension(String),
    /// A parameter out of range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// The backend failed in a way it describes in words (an internal inconsistency).
    #[error("backend error: {0}")]
    Backend(String),
    /// The GPU failed (driver, compiler, out of memory, a launch it refused); the GPU crate's
    /// error is the source. (With the `gpu` feature only.)
    #[cfg(feature = "gpu")]
    #[error("GPU error: {0}")]
    Gpu(#[source] std::sync::Arc<autopcg_gpu::GpuError>),
}

impl PcgError {
    /// The solve's final state, for [`PcgError::NotConverged`] and [`PcgError::Stagnated`]
    /// (where the backend still holds a usable iterate); `None` for other errors.
    pub fn info(&self) -> Option<&PcgInfo> {
        match self {
            PcgError::NotConverged { info } | PcgError::Stagnated { info, .. } => Some(info),
            _ => None,
        }
    }

    /// Why the solve stopped, for the errors that end a solve; `None` for bad input
    /// (dimensions, parameters) and backend failures.
    pub fn reason(&self) -> Option<StopReason> {
        match self {
            PcgError::NotConverged { info } | PcgError::Stagnated { info, .. } => Some(info.reason),
            PcgError::NotSpd { .. } | PcgError::BadDiagonal { .. } => Some(StopReason::NotSpd),
            PcgError::Breakdown { .. } => Some(StopReason::Breakdown),
            _ => None,
        }
    }
}
