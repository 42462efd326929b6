//! Solving with a saved plan ([`SavedPlan`], the `plan.json` of `autopcg generate`): the
//! generator turns it back into a plan for this matrix and this device after checking both
//! (nothing is chosen again, no model is read), and the GPU backend runs it (the multi-block
//! GPU solver for a plan of several row blocks, one per GPU). Needs the `gpu` feature.
use std::borrow::Cow;
use std::ops::ControlFlow;

use autopcg_generator::saved::SavedPlan;
use autopcg_solver::IterRecord;

use super::{solve_prepared, Solution, SolveFailure, Solver};
use crate::prepared::PreparedSolver;
use crate::Error;

impl<'a> Solver<'a> {
    /// Prepares a solve that runs the saved plan `saved`, named `label` in reports (usually
    /// its path): the [`PreparedSolver`] then solves as many right-hand sides as needed and
    /// takes new values of the same pattern, keeping the plan.
    ///
    /// The matrix must match the plan's fingerprint (n, nnz and the hash of the pattern; with
    /// `force`, a mismatch is only a note) and the GPU the plan's device (name and
    /// architecture): otherwise [`Error::SavedPlan`]. The fingerprint is checked first, so
    /// that a wrong matrix is reported even where no GPU is present. The plan's preconditioner
    /// (kind, order, omega, form), steps and polling interval are used; the builder's
    /// preconditioner, model, SSOR-form and polling settings are not. Tolerance, iteration
    /// limit, history and residual replacement come from [`Solver::params`], and the symmetry
    /// check from [`Solver::check_symmetry`]. A plan runs on a GPU only: [`crate::Device::Cpu`]
    /// is refused.
    ///
    /// A plan of several row blocks (`autopcg generate --gpus N`) runs on the multi-block
    /// solver: block `i` on GPU `saved.blocks[i].gpu` with its saved rows, local plan and halo
    /// multiply; every GPU it names must be present (fewer is [`Error::SavedPlan`], naming how
    /// many it needs and how many were found) and be the plan's device. The builder's
    /// [`Solver::blocks`] and [`Solver::gpus`] are not used: the plan says the blocks.
    pub fn prepare_saved(
        &self,
        saved: &SavedPlan,
        label: &str,
        force: bool,
    ) -> Result<PreparedSolver<'a>, Error> {
        PreparedSolver::prepare_saved(Cow::Borrowed(self.a), &self.settings(), saved, label, force)
    }

    /// Solves once from `x0` (zero when `None`) with the saved plan `saved`
    /// ([`Solver::prepare_saved`], then [`PreparedSolver::solve_with`]); the setup times of
    /// the solution include preparing.
    pub fn solve_saved_plan(
        &self,
        saved: &SavedPlan,
        label: &str,
        force: bool,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    ) -> Result<Solution, SolveFailure> {
        solve_prepared(self.prepare_saved(saved, label, force)?, b, x0, progress)
    }
}
