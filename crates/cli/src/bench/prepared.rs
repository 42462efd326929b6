//! `autopcg bench prepared`: what a simulation code pays on a prepared solver — a fresh setup
//! (cold, then again in the same process), the first and later solves, the fixed cost of a
//! solve beyond its iterations, and a value-only re-setup (`update_values`) against a fresh
//! setup.
//!
//! The fixed cost of a solve is not read off one solve: every solve's wall time is
//! `c + t_it * iterations_run`, so solves to several tolerances (each the median of
//! `--repeat` solves) are fitted by least squares and `c` is the intercept — what a solve
//! costs beyond its iterations (copying b and x0 in, the start, the polls, the final true
//! residual, copying x out).
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use autopcg::{CsrMatrix, Device, PcgParams, Solution, SolveFailure, Solver};

use crate::common::{read_matrix, PrecondArg, SsorArgs};

#[derive(Args)]
pub(crate) struct PreparedBenchArgs {
    /// Matrix Market file of an SPD matrix.
    matrix: PathBuf,
    /// Preconditioner.
    #[arg(long, value_enum, default_value_t = PrecondArg::Jacobi)]
    precond: PrecondArg,
    #[command(flatten)]
    ssor: SsorArgs,
    /// Where to run: auto, cpu or gpu.
    #[arg(long, default_value = "auto")]
    device: Device,
    /// Timed repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// Relative tolerances of the fitted solves (comma-separated, at least two).
    #[arg(long, default_value = "1e-4,1e-6,1e-8,1e-10", value_delimiter = ',')]
    tols: Vec<f64>,
    /// Iteration limit of every solve.
    #[arg(long, default_value_t = 20000)]
    max_iter: usize,
    /// Use the lower triangle of a `general` file that is not symmetric, mirrored.
    #[arg(long)]
    assume_symmetric: bool,
    /// Split the matrix into N row blocks, as `solve --blocks N` (on the CPU, or all on GPU 0
    /// with --device gpu): what a prepared block solver pays.
    #[arg(long, value_name = "N", conflicts_with = "gpus")]
    blocks: Option<usize>,
    /// One row block per GPU on N GPUs (or auto), as `solve --gpus`.
    #[arg(long, value_name = "N|auto")]
    gpus: Option<autopcg::GpuCount>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One tolerance's solves.
#[derive(Serialize)]
struct TolPoint {
    tol: f64,
    iterations_run: usize,
    /// Median wall time of the whole `solve` call, ms.
    wall_ms: f64,
    /// Median of the solves' own right-hand-side setup (`setup.rhs_ms`), ms.
    rhs_ms: f64,
    true_relative_residual: f64,
}

#[derive(Serialize)]
struct Report {
    matrix: String,
    n: usize,
    nnz: usize,
    device: String,
    precond: String,
    precond_applied: String,
    repeat: u32,
    /// The first `prepare` of the process (opens the device, loads kernels), ms.
    setup_cold_ms: f64,
    /// Median of later `prepare` calls in the same process, ms.
    setup_warm_ms: f64,
    /// The parts of the last warm setup.
    setup_warm: autopcg::SetupTimes,
    /// The first solve on a fresh prepared solver and the median of later ones (the same b,
    /// tolerance 1e-8), ms, with their iterations.
    first_solve_ms: f64,
    later_solve_ms: f64,
    later_solve_iterations: usize,
    points: Vec<TolPoint>,
    /// Least-squares fit of wall_ms over iterations_run: ms per iteration and the intercept
    /// (the fixed cost of a solve), and the largest residual of the fit, ms.
    fit_ms_per_iteration: f64,
    fit_overhead_ms: f64,
    fit_max_residual_ms: f64,
    /// Median of `update_values` (new diagonal values, same pattern), ms, and its parts.
    update_values_ms: f64,
    update_values: autopcg::SetupTimes,
    /// The first `update_values` alone, ms (it also uploads what later ones keep: the CSR
    /// source of a converted operand, the preconditioner's patterns on a GPU).
    update_first_ms: f64,
    /// update_values_ms / setup_warm_ms.
    update_over_warm_setup: f64,
    /// After the last update: iterations and true residual of a solve to 1e-8, and those of a
    /// fresh prepared solver of the same values (they must agree).
    updated_iterations: usize,
    updated_true_relative_residual: f64,
    fresh_iterations: usize,
}

/// `s` split into row blocks as `--blocks` or `--gpus` say.
fn split_solver(
    s: Solver<'_>,
    blocks: Option<usize>,
    gpus: Option<autopcg::GpuCount>,
) -> Solver<'_> {
    let s = match blocks {
        Some(n) => s.blocks(n),
        None => s,
    };
    match gpus {
        Some(g) => s.gpus(g),
        None => s,
    }
}

/// The median (the mean of the middle two of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let (lo, hi) = ((v.len() - 1) / 2, v.len() / 2);
    0.5 * (v[lo] + v[hi])
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A solve's outcome, converged or stopped at the limit; any other failure is an error.
fn outcome(r: Result<Solution, SolveFailure>) -> Result<Solution> {
    match r {
        Ok(s) => Ok(s),
        Err(SolveFailure {
            partial: Some(s), ..
        }) => Ok(*s),
        Err(e) => Err(anyhow::Error::new(e).context("solve failed")),
    }
}

/// Least squares `y = c + k x`: `(k, c, max |residual|)`; `None` when the x are all equal.
fn fit_line(x: &[f64], y: &[f64]) -> Option<(f64, f64, f64)> {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxx: f64 = x.iter().map(|v| (v - mx) * (v - mx)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let k = sxy / sxx;
    let c = my - k * mx;
    let worst = x
        .iter()
        .zip(y)
        .map(|(a, b)| (b - (c + k * a)).abs())
        .fold(0.0, f64::max);
    Some((k, c, worst))
}

/// The values of `a` with every diagonal entry multiplied by `factor` (still SPD for
/// `factor >= 1`), in the CSR order `update_values` takes.
fn scaled_diagonal(a: &CsrMatrix, factor: f64) -> Vec<f64> {
    let mut v = a.data().to_vec();
    for i in 0..a.nrows() {
        let (lo, hi) = (a.indptr()[i] as usize, a.indptr()[i + 1] as usize);
        for (q, &j) in (lo..hi).zip(&a.indices()[lo..hi]) {
            if j as usize == i {
                v[q] *= factor;
            }
        }
    }
    v
}

pub(crate) fn bench_prepared(a: PreparedBenchArgs) -> Result<()> {
    if a.tols.len() < 2 {
        bail!("--tols needs at least two tolerances to fit the fixed cost of a solve");
    }
    if let Some(t) = a.tols.iter().find(|t| !(**t > 0.0 && **t < 1.0)) {
        bail!("--tols: every tolerance must be in (0, 1), got {t}");
    }
    let m = read_matrix(&a.matrix, a.assume_symmetric)?;
    let name = a.matrix.display().to_string();
    let kind = a.ssor.kind(a.precond)?;
    let params = PcgParams::new().with_tol(1e-8)?.with_max_iter(a.max_iter)?;
    let split = |s| split_solver(s, a.blocks, a.gpus);
    let builder = split(
        Solver::new(&m)
            .precond(kind)
            .ssor_form_auto(a.ssor.form_auto())
            .params(params)
            .device(a.device),
    );
    let reps = a.repeat as usize;
    eprintln!(
        "prepared solver on {name} (n = {}, nnz = {}): {} repetitions",
        m.nrows(),
        m.nnz(),
        reps
    );

    let t = Instant::now();
    let mut p = builder.prepare().with_context(|| name.clone())?;
    let setup_cold_ms = ms(t);
    let mut warm = Vec::with_capacity(reps);
    let mut setup_warm = p.setup();
    for _ in 0..reps {
        let t = Instant::now();
        let q = builder.prepare().with_context(|| name.clone())?;
        warm.push(ms(t));
        setup_warm = q.setup();
    }
    let setup_warm_ms = median(warm);

    let b = m.mul_vec(&vec![1.0; m.nrows()]);
    let t = Instant::now();
    outcome(p.solve(&b))?;
    let first_solve_ms = ms(t);
    let mut later = Vec::with_capacity(reps);
    let mut later_its = 0;
    for _ in 0..reps {
        let t = Instant::now();
        let s = outcome(p.solve(&b))?;
        later.push(ms(t));
        later_its = s.info.iterations_run;
    }
    let later_solve_ms = median(later);

    // Solves to each tolerance, with right-hand sides that change from solve to solve (as a
    // simulation's do): b_k = A (1 + k / n-ish ramp), the same set for every tolerance.
    let rhs: Vec<Vec<f64>> = (0..reps)
        .map(|k| {
            let x: Vec<f64> = (0..m.nrows())
                .map(|i| 1.0 + (k as f64 + 1.0) * ((i % 97) as f64) / 97.0)
                .collect();
            m.mul_vec(&x)
        })
        .collect();
    let mut points = Vec::with_capacity(a.tols.len());
    for &tol in &a.tols {
        p.set_tolerances(tol, 0.0)?;
        let (mut walls, mut rhs_ms, mut its, mut res) = (vec![], vec![], vec![], 0.0f64);
        for b in &rhs {
            let t = Instant::now();
            let s = outcome(p.solve(b))?;
            walls.push(ms(t));
            rhs_ms.push(s.setup.rhs_ms);
            its.push(s.info.iterations_run as f64);
            res = res.max(s.info.true_relative_residual);
        }
        points.push(TolPoint {
            tol,
            iterations_run: median(its).round() as usize,
            wall_ms: median(walls),
            rhs_ms: median(rhs_ms),
            true_relative_residual: res,
        });
    }
    let xs: Vec<f64> = points.iter().map(|q| q.iterations_run as f64).collect();
    let ys: Vec<f64> = points.iter().map(|q| q.wall_ms).collect();
    let (k, c, worst) = fit_line(&xs, &ys).with_context(|| {
        "every tolerance took the same number of iterations: choose --tols further apart"
    })?;
    p.set_tolerances(1e-8, 0.0)?;

    let mut upd = Vec::with_capacity(reps);
    let mut update_times = autopcg::SetupTimes::default();
    let mut last_values = Vec::new();
    for r in 0..reps {
        let values = scaled_diagonal(&m, 1.0 + 0.01 * (r as f64 + 1.0));
        let t = Instant::now();
        update_times = p.update_values(&values)?;
        upd.push(ms(t));
        last_values = values;
    }
    let update_first_ms = upd.first().copied().unwrap_or(0.0);
    let update_values_ms = median(upd);
    let updated = outcome(p.solve(&b))?;
    let mut fresh_m = m.clone();
    fresh_m.data_mut().copy_from_slice(&last_values);
    let fresh = outcome(
        split(
            Solver::new(&fresh_m)
                .precond(p.precond())
                .ssor_form_auto(false)
                .params(p.params().clone())
                .device(a.device),
        )
        .solve(&b),
    )?;

    let report = Report {
        matrix: name,
        n: m.nrows(),
        nnz: m.nnz(),
        device: p.device().to_string(),
        precond: kind.to_string(),
        precond_applied: updated.precond_applied.clone(),
        repeat: a.repeat,
        setup_cold_ms,
        setup_warm_ms,
        setup_warm,
        first_solve_ms,
        later_solve_ms,
        later_solve_iterations: later_its,
        points,
        fit_ms_per_iteration: k,
        fit_overhead_ms: c,
        fit_max_residual_ms: worst,
        update_values_ms,
        update_values: update_times,
        update_first_ms,
        update_over_warm_setup: update_values_ms / setup_warm_ms,
        updated_iterations: updated.info.iterations,
        updated_true_relative_residual: updated.info.true_relative_residual,
        fresh_iterations: fresh.info.iterations,
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(r: &Report) {
    println!(
        "{}: n = {}, nnz = {}, precond = {} ({}), {}",
        r.matrix, r.n, r.nnz, r.precond, r.precond_applied, r.device
    );
    let s = &r.setup_warm;
    println!(
        "setup: cold {:.2} ms, warm {:.2} ms (check {:.2}, device+model {:.2}, precond {:.2}, \
         select {:.2}, backend {:.2})",
        r.setup_cold_ms,
        r.setup_warm_ms,
        s.check_ms,
        s.device_ms,
        s.precond_ms,
        s.select_ms,
        s.backend_ms
    );
    println!(
        "solve to 1e-8: first {:.3} ms, later {:.3} ms ({} iterations run)",
        r.first_solve_ms, r.later_solve_ms, r.later_solve_iterations
    );
    println!("  tol       iterations   wall ms   rhs ms   true residual");
    for q in &r.points {
        println!(
            "  {:<9.0e} {:>10} {:>9.3} {:>8.3}   {:.2e}",
            q.tol, q.iterations_run, q.wall_ms, q.rhs_ms, q.true_relative_residual
        );
    }
    println!(
        "fit: {:.4} ms per iteration + {:.3} ms per solve (largest fit residual {:.3} ms)",
        r.fit_ms_per_iteration, r.fit_overhead_ms, r.fit_max_residual_ms
    );
    let u = &r.update_values;
    println!(
        "update_values: {:.2} ms (precond {:.2}, backend {:.2}) = {:.3} of a warm setup; \
         the first {:.2} ms",
        r.update_values_ms, u.precond_ms, u.backend_ms, r.update_over_warm_setup, r.update_first_ms
    );
    println!(
        "after the update: {} iterations, true residual {:.2e}; a fresh solver of the same \
         values: {} iterations",
        r.updated_iterations, r.updated_true_relative_residual, r.fresh_iterations
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_line_and_refuses_equal_x() {
        let (k, c, w) = fit_line(&[10.0, 20.0, 40.0], &[1.5, 2.5, 4.5]).unwrap();
        assert!((k - 0.1).abs() < 1e-12 && (c - 0.5).abs() < 1e-12 && w < 1e-12);
        assert!(fit_line(&[3.0, 3.0], &[1.0, 2.0]).is_none());
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn scaled_diagonal_touches_only_the_diagonal() {
        let a = autopcg::sparse::families::poisson2d_5pt(3, 3).unwrap();
        let v = scaled_diagonal(&a, 2.0);
        let d = a.diagonal();
        let mut q = 0;
        for (i, di) in d.iter().enumerate() {
            for &j in &a.indices()[a.indptr()[i] as usize..a.indptr()[i + 1] as usize] {
                let want = if j as usize == i {
                    2.0 * di
                } else {
                    a.data()[q]
                };
                assert_eq!(v[q], want);
                q += 1;
            }
        }
    }
}
