//! `autopcg bench`: the Matrix Market reader, every SpMV candidate on a GPU, and the PCG
//! iteration of the plan `solve` would run, step by step.
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use autopcg::sparse::mm::{self, ReadOptions, SymmetryPolicy};

mod prepared;
pub(crate) use prepared::{bench_prepared, PreparedBenchArgs};

use crate::common::{init_threads, open_gpu, read_matrix, PrecondArg, SsorArgs};

#[derive(Subcommand)]
pub(crate) enum BenchCmd {
    /// Time the Matrix Market reader (median of repeated reads).
    Mmread(MmreadArgs),
    /// Time every SpMV format x kernel x launch configuration on a GPU, and cuSPARSE.
    #[command(
        long_about = "Time every SpMV format x kernel x launch configuration that applies \
to the matrix on the first GPU, plus cuSPARSE's generic CSR SpMV, each as the median of repeated \
runs timed with CUDA events after a warm-up, every result checked against the CPU first. \
Formats whose padding would be too large (ELL, DIA, HYB's ELL part; fill ratio above 3) are \
listed as skipped. GB/s counts the same bytes for every candidate: the CSR minimum traffic \
12 nnz + 20 n (f64 values and i32 column indices per nonzero; x read, y written and an i32 row \
pointer per row); each format's own byte count is in the JSON."
    )]
    Spmv(SpmvArgs),
    /// Time one PCG iteration on the GPU, step by step (update, preconditioner, SpMV + dots),
    /// kernel by kernel and replayed from CUDA graphs.
    Pcg(PcgBenchArgs),
    /// What a prepared solver costs a simulation code: setup (cold and warm), first and later
    /// solves, the fixed cost of a solve beyond its iterations, and a value-only re-setup.
    #[command(
        long_about = "What a prepared solver (the library's PreparedSolver, the C ABI's handle) \
costs: a fresh setup (the first of the process, then the median of later ones), the first solve \
and later ones, solves to several tolerances with changing right-hand sides fitted as \
wall = overhead + ms per iteration x iterations (the overhead is the fixed cost of a solve beyond \
its iterations), and update_values (new diagonal values, same pattern; the median of --repeat \
updates, and the first alone, which also uploads what later ones keep) against a warm fresh \
setup, checked by the iterations of a solve after it against a fresh solver of the same values."
    )]
    Prepared(PreparedBenchArgs),
}

#[derive(Args)]
pub(crate) struct PcgBenchArgs {
    /// Matrix Market file of an SPD matrix.
    matrix: PathBuf,
    /// Preconditioner.
    #[arg(long, value_enum, default_value_t = PrecondArg::SsorAi)]
    precond: PrecondArg,
    #[command(flatten)]
    ssor: SsorArgs,
    /// Performance model choosing the plan: `auto`, `none` or a file, as for `solve`.
    #[arg(long, default_value = "auto")]
    model: String,
    /// Iterations per timed sample.
    #[arg(long, default_value_t = 200)]
    iters: usize,
    /// Use the lower triangle of a `general` file that is not symmetric, mirrored.
    #[arg(long)]
    assume_symmetric: bool,
    /// Which GPU (CUDA ordinal).
    #[arg(long, default_value_t = 0)]
    gpu: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub(crate) struct SpmvArgs {
    /// Matrix Market file.
    matrix: PathBuf,
    /// Print one JSON object with every record.
    #[arg(long)]
    json: bool,
    /// A short run (two thread counts, few repetitions): for a quick look, not for figures.
    #[arg(long)]
    quick: bool,
    /// Leave cuSPARSE out.
    #[arg(long)]
    no_cusparse: bool,
    /// Time every call with L2 cold, as `tune` does: a read pass over twice the L2 is queued
    /// ahead of every sample (so the launch latency is hidden too). Without it each sample is
    /// one call of a repeated sequence, and a matrix that fits in L2 is read from there.
    #[arg(long)]
    flush_l2: bool,
    /// Which GPU (CUDA ordinal).
    #[arg(long, default_value_t = 0)]
    gpu: usize,
    /// Which operand of the solver to time: `a`, the matrix as stored in the file; or an
    /// operand of the SSOR-AI preconditioner that `solve --precond ssor-ai` builds from it (first
    /// order, automatic omega): `k`, the factor K; `kt`, K^T diag(s), the second product of the
    /// factored form; `m`, the explicit product K^T diag(s) K; `k2` and `kt2`, the factors of
    /// the second order (`--precond ssor-ai2`: K = I - X + X^2). The preconditioner's operands
    /// need a symmetric matrix with a positive diagonal.
    #[arg(long, value_enum, default_value = "a")]
    operand: SpmvOperand,
}

/// The operand `bench spmv` times.
#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
pub(crate) enum SpmvOperand {
    /// The matrix of the file.
    A,
    /// SSOR-AI's factor K.
    K,
    /// K^T diag(s).
    Kt,
    /// The explicit product K^T diag(s) K.
    M,
    /// Second-order SSOR-AI's factor K = I - X + X^2.
    K2,
    /// Its K^T diag(s).
    Kt2,
}

impl SpmvOperand {
    fn name(self) -> &'static str {
        match self {
            SpmvOperand::A => "A",
            SpmvOperand::K => "SSOR-AI's K",
            SpmvOperand::Kt => "SSOR-AI's K^T diag(s)",
            SpmvOperand::M => "SSOR-AI's explicit M",
            SpmvOperand::K2 => "second-order SSOR-AI's K",
            SpmvOperand::Kt2 => "second-order SSOR-AI's K^T diag(s)",
        }
    }
}

/// The matrix of `path` or the SSOR-AI operand `op` built from it.
fn spmv_operand(path: &std::path::Path, op: SpmvOperand) -> Result<autopcg::CsrMatrix> {
    use autopcg::solver::Preconditioner;
    use autopcg::{PrecondKind, SsorForm};
    if op == SpmvOperand::A {
        let opts = ReadOptions {
            symmetry: SymmetryPolicy::AsStored,
            require_square: false,
        };
        return Ok(mm::read_matrix(path, &opts)?.matrix);
    }
    let a = read_matrix(path, false)?;
    let form = match op {
        SpmvOperand::M => SsorForm::Explicit,
        _ => SsorForm::Factored,
    };
    let kind = match op {
        SpmvOperand::K2 | SpmvOperand::Kt2 => PrecondKind::ssor_ai2(),
        _ => PrecondKind::ssor_ai(),
    };
    let kind = kind.resolved_for(&a).with_form(form);
    let pre = Preconditioner::build(&a, &kind)
        .with_context(|| format!("building SSOR-AI from {}", path.display()))?;
    Ok(match (pre, op) {
        (Preconditioner::SsorFactored { k, .. }, SpmvOperand::K | SpmvOperand::K2) => k,
        (Preconditioner::SsorFactored { kt, .. }, SpmvOperand::Kt | SpmvOperand::Kt2) => kt,
        (Preconditioner::SsorExplicit { m }, SpmvOperand::M) => m,
        (p, _) => bail!(
            "SSOR-AI of {} came out as {}, not the asked form",
            path.display(),
            p.kind_name()
        ),
    })
}

#[derive(Args)]
pub(crate) struct MmreadArgs {
    /// Matrix Market file.
    file: PathBuf,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Timed reads after one warm-up read.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn bench_mmread(a: MmreadArgs) -> Result<()> {
    init_threads(a.threads)?;
    if a.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let opts = ReadOptions {
        symmetry: SymmetryPolicy::AsStored,
        require_square: false,
    };
    let warm = mm::read_matrix(&a.file, &opts)?;
    let (n, nnz) = (warm.matrix.nrows(), warm.matrix.nnz());
    drop(warm);
    let mut times = Vec::with_capacity(a.repeat);
    for _ in 0..a.repeat {
        let t = Instant::now();
        let m = mm::read_matrix(&a.file, &opts)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        drop(m);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let bytes = std::fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0);
    let threads = rayon::current_num_threads();
    if a.json {
        println!(
            "{}",
            json!({"file": a.file.display().to_string(), "bytes": bytes, "n": n, "nnz": nnz,
                   "threads": threads, "repeat": a.repeat, "median_ms": median,
                   "min_ms": times[0], "max_ms": times[times.len() - 1],
                   "mb_per_s": bytes as f64 / 1e6 / (median / 1e3)})
        );
    } else {
        println!(
            "{}: {:.1} MB, n = {n}, nnz = {nnz}: median {median:.1} ms over {} reads ({threads} threads, {:.0} MB/s)",
            a.file.display(),
            bytes as f64 / 1e6,
            a.repeat,
            bytes as f64 / 1e6 / (median / 1e3)
        );
    }
    Ok(())
}

pub(crate) fn bench_spmv(a: SpmvArgs) -> Result<()> {
    use autopcg::gpu::bench::{bench_spmv, SpmvBenchOptions};
    let m = spmv_operand(&a.matrix, a.operand)?;
    let dev = open_gpu(a.gpu)?;
    let mut o = if a.quick {
        SpmvBenchOptions::quick()
    } else {
        SpmvBenchOptions::default()
    };
    o.cusparse = !a.no_cusparse;
    o.flush_l2 = a.flush_l2;
    eprintln!(
        "timing SpMV with {} of {} (n = {}, nnz = {}) on {}{} ...",
        a.operand.name(),
        a.matrix.display(),
        m.nrows(),
        m.nnz(),
        dev.props().name,
        if a.flush_l2 { ", L2 cold" } else { "" }
    );
    let r = bench_spmv(&dev, &m, &o)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", r.table());
    }
    Ok(())
}

/// A plan and its steps' times on the GPU ([`time_plan_steps`]).
pub(crate) struct TimedPlan {
    /// The plan as the generator made it (notes, the form applied, the predicted times).
    pub planned: autopcg::generator::SolvePlan,
    /// The plan as the backend runs it.
    pub plan: autopcg::solver::Plan,
    /// The steps' and the iteration's times.
    pub times: autopcg::solver::gpu::StepTimes,
}

/// Makes the plan of `req` (a GPU target) and times its steps on `dev` the way the solver runs
/// them: the solver's own backend on b = A 1, started, then `iters`-iteration graphs replayed
/// ([`autopcg::solver::gpu::GpuBackend::profile_steps`]). What `bench pcg` reports and tune's
/// form stage records.
pub(crate) fn time_plan_steps(
    dev: &autopcg::gpu::GpuDevice,
    req: &autopcg::generator::PlanRequest,
    iters: usize,
) -> Result<TimedPlan> {
    use autopcg::solver::gpu::GpuBackend;
    use autopcg::solver::PcgBackend;
    let planned = autopcg::generator::plan(req)?;
    let Some(gpu_plan) = planned.gpu.as_ref() else {
        bail!("the plan has no GPU steps");
    };
    let a = req.matrix;
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let mut backend = GpuBackend::new(dev, a, &planned.preconditioner, &b, None, gpu_plan)?;
    backend.start()?;
    let times = backend.profile_steps(iters)?;
    let plan = backend.plan();
    Ok(TimedPlan {
        planned,
        plan,
        times,
    })
}

pub(crate) fn bench_pcg(a: PcgBenchArgs) -> Result<()> {
    use autopcg::generator::{ModelRef, PlanRequest, Target};
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let m = read_matrix(&a.matrix, a.assume_symmetric)?;
    let kind = a.ssor.kind(a.precond)?.resolved_for(&m);
    let dev = open_gpu(a.gpu)?;
    let choice: autopcg::ModelChoice = match a.model.parse() {
        Ok(c) => c,
        Err(e) => match e {},
    };
    // The plan `solve` would run: the same model, form choice and polling interval.
    let resolved = autopcg::resolve_model(&choice, Some(&dev.props().name))?;
    for n in &resolved.notes {
        eprintln!("note: {n}");
    }
    let label = resolved.model.as_ref().map(|m| m.label());
    let mut req = PlanRequest::new(&m, kind, Target::Gpu(dev.props().clone()));
    req.ssor_form_auto = a.ssor.form_auto();
    req.model = match (&resolved.model, &label) {
        (Some(lm), Some(l)) => Some(ModelRef {
            file: &lm.file,
            label: l,
        }),
        _ => None,
    };
    let TimedPlan {
        planned,
        plan,
        times: t,
    } = time_plan_steps(&dev, &req, a.iters).with_context(|| a.matrix.display().to_string())?;
    for n in &planned.notes {
        eprintln!("note: {n}");
    }
    if a.json {
        println!(
            "{}",
            json!({"matrix": a.matrix.display().to_string(), "n": m.nrows(), "nnz": m.nnz(),
                   "device": dev.props().name, "precond": kind.to_string(), "plan": plan,
                   "precond_applied": planned.precond_applied(), "model": planned.model,
                   "predicted_ms_per_iteration": planned.predicted_iteration_ms,
                   "times_ms": t})
        );
        return Ok(());
    }
    println!(
        "{}: n = {}, nnz = {}, precond = {kind}, {}",
        a.matrix.display(),
        m.nrows(),
        m.nnz(),
        dev.props().name
    );
    for s in &plan.steps {
        println!(
            "  {:<10} {:<18} {:<28} {}",
            s.step, s.format, s.kernel, s.config
        );
    }
    println!(
        "median microseconds per execution ({} per sample):",
        t.batch
    );
    let row = |name: &str, v: &autopcg::gpu::TimingStats| {
        println!(
            "  {name:<34} {:>10.2}   (min {:.2}, max {:.2})",
            v.median_ms * 1e3,
            v.min_ms * 1e3,
            v.max_ms * 1e3
        )
    };
    row("update (p, s, x, r)", &t.update);
    row("preconditioner", &t.precond);
    row("spmv + three dots + recurrence", &t.spmv_dots);
    row("iteration, kernel by kernel", &t.iteration);
    row("iteration, one-iteration graph", &t.iteration_graph);
    if let Some(g) = &t.iteration_graph_batch {
        row(&format!("iteration, {}-iteration graph", t.graph_iters), g);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use autopcg::sparse::mm::{write_matrix, WriteSymmetry};

    #[test]
    fn spmv_operands_are_the_ssor_ai_factors_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = autopcg::sparse::families::poisson2d_5pt(6, 5).unwrap();
        let path = dir.path().join("p.mtx");
        write_matrix(&path, &a, WriteSymmetry::SymmetricLower).unwrap();
        let full = spmv_operand(&path, SpmvOperand::A).unwrap();
        // The file stores the lower triangle; `a` is what the file holds.
        assert_eq!(full.nrows(), 30);
        let k = spmv_operand(&path, SpmvOperand::K).unwrap();
        let kt = spmv_operand(&path, SpmvOperand::Kt).unwrap();
        let m = spmv_operand(&path, SpmvOperand::M).unwrap();
        // Second order: K = I - X + X^2 holds X^2's entries too (two below the diagonal on a
        // 5-point stencil), and K^T diag(s) is its transpose.
        let k2 = spmv_operand(&path, SpmvOperand::K2).unwrap();
        let kt2 = spmv_operand(&path, SpmvOperand::Kt2).unwrap();
        assert!(k2.nnz() > k.nnz());
        assert_eq!(kt2.nnz(), k2.nnz());
        assert_eq!(k2.transpose().indices(), kt2.indices());
        let n = a.nrows();
        for i in 0..n {
            let (c, v) = k.row(i);
            assert!(c.iter().all(|&j| j as usize <= i), "K is lower triangular");
            let d = c.iter().position(|&j| j as usize == i).unwrap();
            assert_eq!(v[d], 1.0, "K has a unit diagonal");
            assert!(
                kt.row(i).0.iter().all(|&j| j as usize >= i),
                "K^T S is upper"
            );
        }
        // One below-diagonal entry per neighbour below: K has A's lower pattern.
        assert_eq!(k.nnz(), (a.nnz() + n) / 2);
        assert_eq!(kt.nnz(), k.nnz());
        // M = K^T S K is symmetric and wider than A.
        assert!(m.nnz() > a.nnz());
        for i in 0..n {
            let (c, v) = m.row(i);
            for (&j, &x) in c.iter().zip(v) {
                let (cj, vj) = m.row(j as usize);
                let p = cj.iter().position(|&t| t as usize == i).unwrap();
                assert!(
                    (vj[p] - x).abs() <= 1e-14 * x.abs(),
                    "M symmetric at {i},{j}"
                );
            }
        }
    }

    #[test]
    fn ssor_operands_of_a_nonsymmetric_file_are_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.mtx");
        std::fs::write(
            &path,
            "%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 4\n1 2 1\n2 2 4\n",
        )
        .unwrap();
        // The matrix itself is timed as stored.
        assert_eq!(spmv_operand(&path, SpmvOperand::A).unwrap().nnz(), 3);
        let e = format!("{:#}", spmv_operand(&path, SpmvOperand::K).unwrap_err());
        assert!(e.contains("g.mtx"), "{e}");
        assert!(e.contains("symmetric"), "{e}");
    }
}
