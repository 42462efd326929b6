//! tune's form stage: SSOR-AI's two application forms timed on every benchmark matrix of the
//! profile, as `autopcg bench pcg --precond ssor-ai --ssor-form factored|explicit` times the
//! iteration (the solver's backend, graphs replayed), each operand's kernel chosen by the model
//! fitted from the profile's records before the stage. The records ([`FormRecord`]) are what
//! the model's form tree is fitted on ([`autopcg_model::form`]).
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Result};

use autopcg::generator::{ModelRef, PlanRequest, Target};
use autopcg::gpu::GpuDevice;
use autopcg::sparse::families::Recipe;
use autopcg::{CsrMatrix, PrecondKind, SsorForm};
use autopcg_model::file::ModelFile;
use autopcg_model::profile::{FormRecord, MatrixSet, Profile, Record, StageRecord, Status, Timing};
use autopcg_model::ModelError;
use autopcg_profiler::{eval_matrices, form_matrices, open_profile};

/// Iterations per timed figure, as `bench pcg`'s default.
const ITERS: usize = 200;

/// What the stage did.
pub(crate) struct FormStage {
    /// Matrices measured now.
    pub measured: usize,
    /// Matrices already in the profile.
    pub resumed: usize,
    /// Matrices without both forms (the explicit product past its bound, or a failure).
    pub skipped: usize,
    /// Seconds.
    pub elapsed_s: f64,
}

/// Entries of K and K^T together for first-order SSOR-AI: twice A's lower triangle with its
/// diagonal (K's pattern is it).
fn factor_entries(a: &CsrMatrix) -> u64 {
    let (ptr, idx) = (a.indptr(), a.indices());
    let lower: usize = (0..a.nrows())
        .map(|i| {
            idx[ptr[i] as usize..ptr[i + 1] as usize]
                .iter()
                .filter(|&&j| j as usize <= i)
                .count()
        })
        .sum();
    2 * lower as u64
}

/// The iteration of SSOR-AI applied as `form` on `a`, the model's kernels, milliseconds.
fn time_form(dev: &GpuDevice, a: &CsrMatrix, form: SsorForm, model: &ModelFile) -> Result<Timing> {
    let kind = PrecondKind::ssor_ai().with_form(form).resolved_for(a);
    let mut req = PlanRequest::new(a, kind, Target::Gpu(dev.props().clone()));
    req.ssor_form_auto = false;
    req.model = Some(ModelRef {
        file: model,
        label: "the model fitted before the form stage",
    });
    let t = crate::bench::time_plan_steps(dev, &req, ITERS)?.times;
    let s = t.iteration_graph_batch.unwrap_or(t.iteration_graph);
    Ok(Timing {
        median_ms: s.median_ms,
        min_ms: s.min_ms,
        max_ms: s.max_ms,
        reps: s.reps,
    })
}

/// Runs the stage on the profile at `profile_path` (of the device `dev` is; `quick` as the
/// sweep), with `model` fitted from it: every matrix of the profile, of the stage's own ladder
/// ([`form_matrices`]) and of the evaluation set ([`eval_matrices`], held out), but only the
/// profile's for a quick tune, without a form record gets one.
/// `base` is the folder the matrices' recipes name files under. Progress goes to stderr, one
/// line a matrix.
pub(crate) fn form_stage(
    dev: &GpuDevice,
    profile_path: &Path,
    quick: bool,
    model: &ModelFile,
    base: &Path,
) -> Result<FormStage> {
    let t0 = Instant::now();
    let profile = Profile::read(profile_path)?;
    let mut writer = open_profile(profile_path, dev.props(), quick)?;
    let mut st = FormStage {
        measured: 0,
        resumed: 0,
        skipped: 0,
        elapsed_s: 0.0,
    };
    // The profile's matrices, the stage's ladder of its own, and (held out, to judge the
    // tree) the evaluation set; a quick tune's matrices only.
    let mut items: Vec<(String, MatrixSet, Recipe)> = profile
        .matrices
        .iter()
        .map(|m| (m.id.clone(), m.set, m.recipe.clone()))
        .collect();
    if !quick {
        for spec in form_matrices().into_iter().chain(eval_matrices()) {
            if !items.iter().any(|(id, _, _)| *id == spec.id) {
                items.push((spec.id, spec.set, spec.recipe));
            }
        }
    }
    let total = items.len();
    let write = |w: &mut autopcg_model::profile::ProfileWriter, r: FormRecord| -> Result<()> {
        w.write(&Record::Form(r))
            .map_err(|e: ModelError| anyhow!("writing {}: {e}", profile_path.display()))
    };
    for (i, (id, set, recipe)) in items.iter().enumerate() {
        if writer.has(&format!("form/{id}")) {
            st.resumed += 1;
            continue;
        }
        let tm = Instant::now();
        let mut rec = FormRecord {
            matrix: id.clone(),
            set: *set,
            rows: 0,
            nnz_a: 0,
            nnz_factors: 0,
            nnz_explicit: 0,
            status: Status::Ok,
            factored: None,
            explicit: None,
        };
        let outcome = (|| -> Result<Status> {
            let a = recipe.build(base)?;
            rec.rows = a.nrows() as u64;
            rec.nnz_a = a.nnz() as u64;
            rec.nnz_factors = factor_entries(&a);
            let Some(views) = autopcg::generator::factors::K1Factors::of(&a) else {
                return Ok(Status::Skipped(
                    "SSOR-AI's factors do not apply (a diagonal entry missing or not positive)"
                        .into(),
                ));
            };
            let bound = views.explicit_nnz_bound();
            if !autopcg::generator::ssor::explicit_within_bound(bound, a.nnz()) {
                return Ok(Status::Skipped(format!(
                    "the explicit product could hold up to {bound:.3e} entries, past its bound: \
                     the plan never compares the forms here"
                )));
            }
            rec.nnz_explicit = views.explicit_counts().work.nnz;
            rec.factored = Some(time_form(dev, &a, SsorForm::Factored, model)?);
            rec.explicit = Some(time_form(dev, &a, SsorForm::Explicit, model)?);
            Ok(Status::Ok)
        })();
        rec.status = match outcome {
            Ok(s) => s,
            Err(e) => Status::Failed(format!("{e:#}")),
        };
        match (&rec.status, rec.factored, rec.explicit) {
            (Status::Ok, Some(f), Some(e)) => {
                st.measured += 1;
                eprintln!(
                    "form stage: {}/{total} {}: factored {:.2} us, explicit {:.2} us per \
                     iteration ({:.1} s)",
                    i + 1,
                    id,
                    f.median_ms * 1e3,
                    e.median_ms * 1e3,
                    tm.elapsed().as_secs_f64()
                );
            }
            (s, _, _) => {
                st.skipped += 1;
                let why = match s {
                    Status::Skipped(r) | Status::Failed(r) => r.as_str(),
                    Status::Ok => "a form not timed",
                };
                eprintln!("form stage: {}/{total} {id}: skipped: {why}", i + 1);
            }
        }
        write(&mut writer, rec)?;
    }
    st.elapsed_s = t0.elapsed().as_secs_f64();
    if st.measured + st.skipped > 0 {
        writer
            .write(&Record::Stage(StageRecord {
                stage: "form".into(),
                records: st.measured + st.skipped,
                elapsed_s: st.elapsed_s,
            }))
            .map_err(|e| anyhow!("writing {}: {e}", profile_path.display()))?;
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factors_hold_twice_the_lower_triangle() {
        let a = autopcg::sparse::families::poisson2d_5pt(6, 5).unwrap();
        // K's pattern is A's lower triangle with the diagonal; K^T's the same count.
        assert_eq!(factor_entries(&a), (a.nnz() + a.nrows()) as u64);
    }
}
