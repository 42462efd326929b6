//! `autopcg solve`: read, plan, solve, report (text or one JSON object).
use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::anyhow;
use clap::Args;
use serde::Serialize;

use autopcg::generator::saved::{SavedPlan, SavedPlanError};
use autopcg::generator::StepExplain;
use autopcg::solver::{HistoryNorm, StopReason};
use autopcg::sparse::mm;
use autopcg::{Device, Error, ModelChoice, PcgError, PcgParams, PrecondKind, SetupTimes, Solver};

use crate::common::{
    init_threads, norm2, plan_step_line, read_matrix, PrecondArg, RunArgs, SsorArgs,
};
use crate::Fail;

#[derive(Args)]
pub(crate) struct SolveArgs {
    /// Matrix Market file of A (.mtx or .mtx.gz).
    matrix: PathBuf,
    /// Right-hand side b (Matrix Market array or n x 1 coordinate). Default: b = A * ones.
    #[arg(long)]
    rhs: Option<PathBuf>,
    /// Initial guess x0 (Matrix Market array or n x 1 coordinate). Default: x0 = 0.
    #[arg(long)]
    x0: Option<PathBuf>,
    /// Write the solution x here (Matrix Market array).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Relative tolerance: stop when ||r|| <= tol * ||b||.
    #[arg(long, default_value_t = 1e-8)]
    tol: f64,
    /// Iteration limit.
    #[arg(long, default_value_t = 10_000)]
    max_iter: usize,
    /// Preconditioner.
    #[arg(long, value_enum, default_value_t = PrecondArg::SsorAi)]
    precond: PrecondArg,
    #[command(flatten)]
    ssor: SsorArgs,
    /// Where to run: auto (a GPU when usable, else the CPU), cpu or gpu.
    #[arg(long, default_value = "auto")]
    device: Device,
    /// Split the matrix into N contiguous row blocks that iterate on their own rows and
    /// exchange halos, as N GPUs would; on the CPU, or with `--device gpu` all N blocks on GPU 0
    /// (each block by its own plan from the GPU's model, else the fixed rule; kernels launched
    /// one by one). Blocks are balanced by rows and nonzeros, then by the model's predicted
    /// time per block when it predicted every block.
    /// None and Jacobi are unchanged by the split; SSOR-AI is built per block (couplings
    /// between blocks dropped). The JSON report then holds the partition. Not with --plan (a
    /// saved plan says its blocks).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with = "plan")]
    blocks: Option<u32>,
    /// Split the matrix into one row block per GPU and run block k on GPU k (halos and the
    /// dots copied between the GPUs, peer to peer): N GPUs (fewer present is an error), or
    /// `auto`: the count, up to the GPUs present, with the least predicted time per iteration
    /// (each count's blocks planned with the GPU's model, else their bandwidth bound; the link
    /// figures tune measured on this host, else NVLink 4 defaults; the predictions are in
    /// --json and --explain). The preconditioner is split as with --blocks. Not with --blocks (--gpus N
    /// already makes N blocks), --plan or --device cpu.
    #[arg(long, value_name = "N|auto", conflicts_with_all = ["plan", "blocks"])]
    gpus: Option<autopcg::GpuCount>,
    /// Performance model choosing the GPU plan: `auto` (the model file of the GPU, found by its
    /// name in $AUTOPCG_MODEL_DIR, ./models or a parent's, the install's models/, then
    /// ~/.local/share/autopcg/models; the default rule with a note when there is none), `none`
    /// (the default rule), or a model file.
    #[arg(long, default_value = "auto")]
    model: String,
    /// Also show, for every step the model chose, the runners-up with their predicted times
    /// and why the choice won.
    #[arg(long)]
    explain: bool,
    #[command(flatten)]
    run: RunArgs,
    /// Include the residual history in the JSON output (`residual_history_norm` says which
    /// norm it holds).
    #[arg(long)]
    history: bool,
    /// Also replace the residual (r = b - A x, restarting the recurrence) every K iterations.
    /// Off by default: the solver already replaces it whenever the recurrence meets the
    /// tolerance and the true residual does not, and a restart loses the Krylov space.
    #[arg(long, value_name = "K")]
    replace_every: Option<usize>,
    /// Run the plan saved by `autopcg generate` (its plan.json) instead of choosing one: no
    /// model is read, the plan's preconditioner, omega, formats, kernels and launches are used.
    /// The plan must be for this GPU and this matrix (n, nnz and sparsity pattern). A plan of
    /// several row blocks (`generate --gpus N`) runs one block per GPU, block i on the GPU the
    /// plan names (its rows, halo exchanges and sub-plans as saved): every one of them must be
    /// present and of the plan's kind.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["precond", "omega", "ssor_form", "model"])]
    plan: Option<PathBuf>,
    /// With --plan: run it even when the matrix's fingerprint differs from the plan's.
    #[arg(long, requires = "plan")]
    force: bool,
}

/// What `solve --json` prints: one object, the JSON contract of the README.
#[derive(Serialize)]
struct SolveReport<'a> {
    matrix: String,
    n: usize,
    nnz: usize,
    iterations: usize,
    converged: bool,
    /// Why the solve stopped: converged, max_iter, stagnated (and, without a solution,
    /// not_spd or breakdown).
    reason: StopReason,
    /// Residual replacements made.
    replacements: usize,
    /// True ||b - A x|| / ||b||, recomputed at the end.
    relative_residual: f64,
    recurrence_relative_residual: f64,
    error_vs_ones: Option<f64>,
    read_ms: f64,
    setup_ms: f64,
    setup: &'a SetupTimes,
    solve_ms: f64,
    ms_per_iteration: f64,
    device: &'a str,
    precond: String,
    omega: Option<f64>,
    tol: f64,
    precond_applied: &'a str,
    check_every: usize,
    plan: &'a autopcg::Plan,
    model: Option<&'a str>,
    predicted_ms_per_iteration: Option<f64>,
    notes: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    explain: Option<&'a [StepExplain]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    residual_history: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    residual_history_norm: Option<HistoryNorm>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The row blocks (`--blocks`, `--gpus`, a saved plan of several blocks): rows, nonzeros
    /// and halo sizes per block, halo entries exchanged per iteration.
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<&'a autopcg::solver::blocks::BlockReport>,
}

pub(crate) fn solve(a: SolveArgs) -> Result<u8, Fail> {
    if let Some(out) = &a.out {
        // Before any work: never overwrite an input with the solution.
        let mut inputs = vec![a.matrix.as_path()];
        inputs.extend(a.rhs.as_deref());
        inputs.extend(a.x0.as_deref());
        autopcg::sparse::io::check_output(out, inputs)?;
    }
    init_threads(a.run.threads)?;
    let asked = a.ssor.kind(a.precond)?;
    let model: ModelChoice = match a.model.parse() {
        Ok(m) => m,
        Err(e) => match e {},
    };

    let saved = match &a.plan {
        Some(p) => Some(SavedPlan::load(p)?),
        None => None,
    };
    // Creating a GPU context takes a quarter of a second in a new process: it runs while the
    // matrix is read, and setup counts only what is left of it. So do the device's other
    // first-use costs of the upload (staging buffers, the memory pool's growth), sized by the
    // file's size line (a header that cannot be read is reported by the read below). A saved
    // plan of several blocks opens the GPUs it names, each prepared for its share of the rows.
    if a.device != Device::Cpu {
        let opened = match (a.gpus, &saved) {
            (Some(autopcg::GpuCount::Count(k)), _) => k,
            (_, Some(s)) => s.blocks.iter().map(|b| b.gpu + 1).max().unwrap_or(1),
            _ => 1,
        };
        let size = mm::read_header(&a.matrix).ok().map(|h| stored_entries(&h));
        for ordinal in 0..opened {
            match size {
                Some((rows, entries)) => autopcg::open_gpu_ahead_for(
                    ordinal,
                    rows.div_ceil(opened.max(1)),
                    entries.div_ceil(opened.max(1)),
                ),
                None => autopcg::open_gpu_ahead(ordinal),
            }
        }
    }
    let t_read = Instant::now();
    let m = read_matrix(&a.matrix, a.run.assume_symmetric)?;
    let n = m.nrows();
    // The preconditioner as asked (an automatic omega is resolved in the setup, and reported
    // from the solution), or the plan's.
    let (kind, precond_text) = match &saved {
        Some(s) => (s.precond.kind()?, s.precond.kind.clone()),
        None => (asked, asked.to_string()),
    };
    let params = PcgParams::new()
        .with_tol(a.tol)?
        .with_max_iter(a.max_iter)?
        .with_history(a.history)
        .with_replace_every(a.replace_every)?;
    let (b, generated) = match &a.rhs {
        Some(p) => {
            let b = mm::read_vector(p)?;
            if b.len() != n {
                return Err(anyhow!(
                    "{}: right-hand side has {} entries but the matrix {} has {} rows",
                    p.display(),
                    b.len(),
                    a.matrix.display(),
                    n
                )
                .into());
            }
            (b, false)
        }
        None => (m.mul_vec(&vec![1.0; n]), true),
    };
    let x0 = match &a.x0 {
        Some(p) => {
            let x0 = mm::read_vector(p)?;
            if x0.len() != n {
                return Err(anyhow!(
                    "{}: initial guess has {} entries but the matrix {} has {} rows",
                    p.display(),
                    x0.len(),
                    a.matrix.display(),
                    n
                )
                .into());
            }
            Some(x0)
        }
        None => None,
    };
    let read_ms = t_read.elapsed().as_secs_f64() * 1e3;

    // Progress on a terminal for long solves: a line refreshed at most twice a second.
    let interactive = !a.run.json && std::io::stderr().is_terminal();
    let bnorm = norm2(&b).max(f64::MIN_POSITIVE);
    let mut last = Instant::now();
    let mut shown = false;
    let progress = |r: &autopcg::IterRecord| {
        if interactive && last.elapsed().as_millis() >= 500 {
            eprint!(
                "\r  iteration {:>7}  relative residual {:.3e}   ",
                r.iteration,
                r.dots.rr.max(0.0).sqrt() / bnorm
            );
            let _ = std::io::stderr().flush();
            last = Instant::now();
            shown = true;
        }
        ControlFlow::Continue(())
    };

    // read_matrix has checked the symmetry (a general file) or built it (a symmetric one).
    let mut solver = Solver::new(&m);
    if let Some(nb) = a.blocks {
        if nb as usize > n {
            return Err(anyhow!(
                "--blocks {nb}: {} has only {n} rows (each block needs at least one)",
                a.matrix.display()
            )
            .into());
        }
        solver = solver.blocks(nb as usize);
    }
    if let Some(g) = a.gpus {
        if let autopcg::GpuCount::Count(k) = g {
            if k > n {
                return Err(anyhow!(
                    "--gpus {k}: {} has only {n} rows (each GPU's block needs at least one)",
                    a.matrix.display()
                )
                .into());
            }
        }
        if a.device == Device::Cpu {
            return Err(anyhow!("--gpus runs on GPUs: not with --device cpu").into());
        }
        solver = solver.gpus(g);
    }
    let solver = solver
        .check_symmetry(false)
        .precond(kind)
        .params(params)
        .device(a.device)
        .model(model)
        .ssor_form_auto(a.ssor.form_auto());
    let outcome = match (&saved, &a.plan) {
        (Some(s), Some(p)) => solver.solve_saved_plan(
            s,
            &p.display().to_string(),
            a.force,
            &b,
            x0.as_deref(),
            progress,
        ),
        _ => solver.solve_with(&b, x0.as_deref(), progress),
    };
    if shown {
        eprintln!();
    }
    let (sol, code, err) = match outcome {
        Ok(s) => (s, 0u8, None),
        Err(f) => match (f.partial, f.error) {
            (Some(p), e) => (*p, 1u8, Some(e)),
            (None, Error::Pcg(e @ (PcgError::NotSpd { .. } | PcgError::Breakdown { .. }))) => {
                if a.run.json {
                    let j = serde_json::json!({
                        "matrix": a.matrix.display().to_string(),
                        "n": n,
                        "nnz": m.nnz(),
                        "converged": false,
                        "reason": e.reason(),
                        "error": e.to_string(),
                    });
                    println!("{j}");
                }
                return Err(Fail {
                    code: 1,
                    err: anyhow!(
                        "{}: {e}: the matrix (or the preconditioner built from it) is not \
                         symmetric positive definite",
                        a.matrix.display()
                    ),
                });
            }
            (None, Error::Pcg(PcgError::BadDiagonal { row, value, .. })) => {
                return Err(anyhow::Error::new(mm::diagonal_error(&a.matrix, row, value)).into())
            }
            (None, e @ Error::Model(_)) => {
                return Err(anyhow::Error::new(e).context("--model").into())
            }
            (None, Error::SavedPlan(e)) => {
                let plan = a.plan.as_deref().unwrap_or(&a.matrix);
                let hint = match e {
                    SavedPlanError::Fingerprint { .. } => "; --force runs the plan anyway",
                    _ => "",
                };
                return Err(
                    anyhow!("{} ({}): {e}{hint}", plan.display(), a.matrix.display()).into(),
                );
            }
            (None, e) => {
                return Err(anyhow::Error::new(e)
                    .context(a.matrix.display().to_string())
                    .into())
            }
        },
    };

    if let Some(out) = &a.out {
        mm::write_vector(out, &sol.x)?;
    }
    let error_vs_ones =
        generated.then(|| sol.x.iter().map(|v| (v - 1.0).abs()).fold(0.0f64, f64::max));
    let iters = sol.info.iterations;
    let ms_per_iter = if iters > 0 {
        sol.solve_ms / iters as f64
    } else {
        0.0
    };
    let is_ssor = matches!(kind, PrecondKind::SsorAi { .. });
    let omega = sol.precond.omega().unwrap_or(1.0);
    if a.run.json {
        let report = SolveReport {
            matrix: a.matrix.display().to_string(),
            n,
            nnz: m.nnz(),
            iterations: iters,
            converged: sol.info.converged,
            reason: sol.info.reason,
            replacements: sol.info.replacements,
            relative_residual: sol.info.true_relative_residual,
            recurrence_relative_residual: sol.info.recurrence_relative_residual,
            error_vs_ones,
            read_ms,
            setup_ms: sol.setup_ms,
            setup: &sol.setup,
            solve_ms: sol.solve_ms,
            ms_per_iteration: ms_per_iter,
            device: &sol.device,
            precond: precond_text.clone(),
            omega: is_ssor.then_some(omega),
            tol: a.tol,
            precond_applied: &sol.precond_applied,
            check_every: sol.check_every,
            plan: &sol.plan,
            model: sol.model.as_deref(),
            predicted_ms_per_iteration: sol.predicted_iteration_ms,
            notes: &sol.notes,
            explain: a.explain.then_some(sol.explain.as_slice()),
            residual_history: a.history.then_some(sol.info.residual_history.as_slice()),
            residual_history_norm: a.history.then_some(sol.info.history_norm),
            error: err.as_ref().map(|e| e.to_string()),
            partition: sol.blocks.as_ref(),
        };
        println!(
            "{}",
            serde_json::to_string(&report).map_err(anyhow::Error::from)?
        );
    } else {
        for note in &sol.notes {
            eprintln!("note: {note}");
        }
        let w = if is_ssor {
            format!(" (omega {omega:.3})")
        } else {
            String::new()
        };
        println!(
            "{}: n = {n}, nnz = {}, precond = {precond_text}{w}, device = {}",
            a.matrix.display(),
            m.nnz(),
            sol.device
        );
        let verdict = match sol.info.reason {
            StopReason::Converged => "converged",
            StopReason::Stagnated => "NOT converged (stagnated)",
            StopReason::MaxIter => "NOT converged (iteration limit)",
            _ => "NOT converged",
        };
        let replaced = match sol.info.replacements {
            0 => String::new(),
            1 => ", 1 residual replacement".to_string(),
            k => format!(", {k} residual replacements"),
        };
        println!(
            "{verdict} after {iters} iterations{replaced}: relative residual {:.3e} (recurrence {:.3e})",
            sol.info.true_relative_residual,
            sol.info.recurrence_relative_residual
        );
        if let Some(e) = error_vs_ones {
            println!("max |x - 1| = {e:.3e} (b = A * ones)");
        }
        println!(
            "time: read {read_ms:.1} ms, setup {:.1} ms, solve {:.1} ms ({ms_per_iter:.4} ms per iteration)",
            sol.setup_ms, sol.solve_ms
        );
        print_plan(&sol, a.explain);
        if let Some(r) = &sol.blocks {
            print_partition(r, a.explain);
        }
        if let Some(out) = &a.out {
            println!("solution written to {}", out.display());
        }
    }
    if let Some(e) = err {
        eprintln!("autopcg: {e}");
    }
    Ok(code)
}

fn print_partition(r: &autopcg::solver::blocks::BlockReport, explain: bool) {
    println!(
        "row blocks: {} ({} halo entries and {} messages per iteration, 1 all-reduce)",
        r.nblocks, r.halo_entries_per_iteration, r.messages_per_iteration
    );
    for (k, b) in r.blocks.iter().enumerate() {
        let on = r
            .devices
            .get(k)
            .map(|d| format!(" on GPU {d}"))
            .unwrap_or_default();
        println!(
            "  block {k}{on}: rows {}..{} ({}), nnz {} (local {}, halo {}), halo {} entries \
             from {:?}",
            b.start,
            b.start + b.rows,
            b.rows,
            b.nnz,
            b.local_nnz,
            b.halo_nnz,
            b.halo_len,
            b.neighbours
        );
    }
    if let Some(b) = &r.balance {
        match &b.kept_because {
            None => println!(
                "rows balanced by {}: slowest block predicted {:.1} us per iteration (split by \
                 rows and nonzeros: {:.1} us)",
                b.by, b.final_us, b.initial_us
            ),
            Some(why) => println!(
                "rows balanced by {} ({why}); slowest block predicted {:.1} us per iteration",
                b.by, b.final_us
            ),
        }
    }
    if let Some(c) = &r.gpu_count {
        println!(
            "GPU count: {} of {} found, by predicted time per iteration ({}):",
            c.chosen, c.found, c.link
        );
        for o in &c.options {
            println!(
                "  {} {:>2} GPUs: {:>10.1} us (compute {:.1}, halo {:.1}, all-reduce {:.1})",
                if o.gpus == c.chosen { "*" } else { " " },
                o.gpus,
                o.predicted_us,
                o.compute_us,
                o.halo_us,
                o.allreduce_us
            );
        }
    }
    if explain {
        for (k, p) in r.block_plans.iter().enumerate() {
            println!("block {k} sub-plan ({}):", p.source);
            // The local part's steps, then the halo part's multiply: kernel and launch as
            // chosen, with the predicted time where a model chose them.
            for s in &p.steps {
                let fields = [&s.step, &s.format, &s.kernel, &s.config];
                println!("{}", plan_step_line(10, fields, s.predicted_ms));
            }
        }
    }
}

fn print_plan(sol: &autopcg::Solution, explain: bool) {
    let predicted = sol
        .predicted_iteration_ms
        .map(|p| format!(", predicted {p:.4} ms per iteration"))
        .unwrap_or_default();
    println!("plan ({}{predicted}):", sol.plan.source);
    for s in &sol.plan.steps {
        let fields = [&s.step, &s.format, &s.kernel, &s.config];
        println!("{}", plan_step_line(8, fields, s.predicted_ms));
    }
    if explain {
        if sol.explain.is_empty() {
            println!("no model chose this plan: nothing to explain");
        }
        for e in &sol.explain {
            println!("{}: {}", e.step, e.why);
            for (i, o) in e.options.iter().enumerate() {
                let conv = o
                    .conversion_ms
                    .filter(|c| *c > 0.0)
                    .map(|c| format!(" + conversion {c:.3} ms"))
                    .unwrap_or_default();
                println!(
                    "  {} {:<44} {:.4} ms{conv}",
                    if i == 0 { "*" } else { " " },
                    o.name,
                    o.predicted_ms
                );
            }
            if let Some(c) = &e.classifier {
                println!("  classifier's pick: {c}");
            }
        }
    }
}

/// Rows and stored entries of the matrix a file's header describes, once read: a symmetric
/// file stores one triangle, mirrored on reading (its diagonal taken as stored in full).
fn stored_entries(h: &mm::Header) -> (usize, usize) {
    let entries = match h.symmetry {
        mm::Symmetry::General => h.entries,
        mm::Symmetry::Symmetric => h
            .entries
            .saturating_mul(2)
            .saturating_sub(h.entries.min(h.nrows)),
    };
    (h.nrows, entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(symmetry: mm::Symmetry, nrows: usize, entries: usize) -> mm::Header {
        mm::Header {
            field: mm::Field::Real,
            symmetry,
            nrows,
            ncols: nrows,
            entries,
        }
    }

    /// A symmetric file's triangle is counted twice less its diagonal; a general one as stored.
    #[test]
    fn the_open_ahead_is_sized_by_the_matrix_as_read() {
        // 2D Poisson 3x3: 9 diagonal entries and 12 below it.
        assert_eq!(
            stored_entries(&header(mm::Symmetry::Symmetric, 9, 21)),
            (9, 33)
        );
        assert_eq!(
            stored_entries(&header(mm::Symmetry::General, 9, 33)),
            (9, 33)
        );
        // Fewer entries than rows (a diagonal not stored in full): no underflow.
        assert_eq!(
            stored_entries(&header(mm::Symmetry::Symmetric, 9, 4)),
            (9, 4)
        );
        assert_eq!(
            stored_entries(&header(mm::Symmetry::Symmetric, 2, usize::MAX)).1,
            usize::MAX - 2
        );
    }
}
