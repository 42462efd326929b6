//! Solving with a saved plan ([`SavedPlan`], the `plan.json` of `autopcg generate`): the
//! generator turns it back into a plan for this matrix and this device after checking both
//! (nothing is chosen again, no model is read), and the GPU backend runs it.
use std::ops::ControlFlow;
use std::time::Instant;

use autopcg_generator::saved::SavedPlan;
use autopcg_solver::IterRecord;

use super::{SetupTimes, Solution, SolveFailure, Solver};
use crate::device::open_gpu;
use crate::{Device, Error};

impl Solver<'_> {
    /// Solves from `x0` (zero when `None`) with the saved plan `saved`, named `label` in the
    /// report (usually its path).
    ///
    /// The matrix must match the plan's fingerprint (n, nnz and the hash of the pattern; with
    /// `force`, a mismatch is only a note) and the GPU the plan's device (name and
    /// architecture): otherwise [`Error::SavedPlan`]. The fingerprint is checked first, so
    /// that a wrong matrix is reported even where no GPU is present. The plan's preconditioner
    /// (kind, order, omega, form), steps and polling interval are used; the builder's
    /// preconditioner, model, SSOR-form and polling settings are not. Tolerance, iteration
    /// limit and history come from [`Solver::params`]. A plan runs on a GPU only:
    /// [`Device::Cpu`] is refused.
    pub fn solve_saved_plan(
        &self,
        saved: &SavedPlan,
        label: &str,
        force: bool,
        b: &[f64],
        x0: Option<&[f64]>,
        progress: impl FnMut(&IterRecord) -> ControlFlow<()>,
    ) -> Result<Solution, SolveFailure> {
        let t0 = Instant::now();
        let gpu = match self.device {
            Device::Cpu => Err("the solve was asked to run on the CPU".to_string()),
            Device::Gpu | Device::Auto => open_gpu(0).map_err(|why| format!("here: {why}")),
        };
        let dev = match gpu {
            Ok(d) => d,
            Err(why) => {
                // The matrix first: a wrong matrix is the more useful message.
                saved.check_matrix(self.a, force).map_err(Error::from)?;
                return Err(Error::from(saved.no_device(&why)).into());
            }
        };
        let device_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let plan = saved
            .to_solve_plan(self.a, dev.props(), force, label)
            .map_err(Error::from)?;
        // The checks (hashing the pattern) count as selection time.
        let checks_ms = (t1.elapsed().as_secs_f64() * 1e3 - plan.precond_ms).max(0.0);
        let mut setup = SetupTimes {
            device_ms,
            precond_ms: plan.precond_ms,
            select_ms: checks_ms,
            backend_ms: 0.0,
        };
        let mut params = self.params.clone();
        params.check_every = plan.check_every;
        let notes = plan.notes.clone();
        self.run_gpu(&dev, &plan, b, x0, &params, progress, &mut setup, notes)
    }
}
