//! The `autopcg` command: solve sparse SPD systems, inspect and generate matrices, benchmark.
//!
//! Thin by design: argument parsing, calls into the library crates, printing. Exit codes:
//! 0 converged (or the command succeeded), 1 the solver ran but did not converge or found the
//! matrix not SPD, 2 bad input or usage (one message on stderr, never a panic).
use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;

use autopcg::sparse::families::{self, Family, FamilyParams};
use autopcg::sparse::mm::{self, ReadOptions, SymmetryPolicy, WriteSymmetry};
use autopcg::sparse::{features, CsrMatrix};
use autopcg::{Device, Error, ModelChoice, PcgError, PcgParams, PrecondKind, Solver, SsorForm};

mod evalmodel;
mod tune;

#[derive(Parser)]
#[command(
    name = "autopcg",
    version,
    about = "Preconditioned conjugate gradients for sparse symmetric positive definite systems",
    long_about = "autopcg solves A x = b for sparse symmetric positive definite A with \
Chronopoulos-Gear PCG (one global reduction per iteration) and an SSOR approximate-inverse \
preconditioner. Matrices are read from Matrix Market files (.mtx or .mtx.gz).\n\n\
Exit codes: 0 success / converged, 1 ran but did not converge or the matrix is not SPD, \
2 bad input or usage."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Solve A x = b with PCG.
    #[command(long_about = "Solve A x = b with Chronopoulos-Gear PCG.\n\n\
Without --rhs, b = A * ones, so the exact solution is all ones and the error against it is \
reported. The matrix must be symmetric: a `general` file is checked (relative tolerance 1e-10) \
and refused when it is not symmetric, unless --assume-symmetric is given.")]
    Solve(SolveArgs),
    /// Print the matrix features the performance models use.
    Features(FeaturesArgs),
    /// Write a generated SPD benchmark matrix (`autopcg matgen --list` names the families).
    Matgen(MatgenArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Measure this GPU once (vector updates, reductions, SpMV) and fit its performance model.
    #[command(
        long_about = "Measure this GPU once and fit its performance model.\n\n\
The sweep times every vector-update and reduction kernel at every launch configuration over \
vector lengths up to 2^28 (or what 0.6 of the GPU memory holds), and every SpMV format, kernel \
and configuration (and cuSPARSE) on 34 generated benchmark matrices of 1e4 to 1e7 rows. \
Measurements are streamed to a profile file as they are taken: an interrupted tune loses \
nothing, and running it again with the same profile resumes where it stopped. A full tune \
takes a few minutes. Without a GPU it exits with status 2."
    )]
    Tune(tune::TuneArgs),
    /// Judge a fitted model on held-out matrices: prediction error and selection quality.
    #[command(long_about = "Judge a fitted model on data it was not fitted on.\n\n\
On a GPU, measures every SpMV candidate (and cuSPARSE) on the evaluation matrices (other seeds \
and sizes of the benchmark families, and the real fixtures in matrices/ scaled up by Kronecker \
products with Poisson matrices; never used for fitting) into an evaluation profile, then reports \
the model's prediction error, how close its choice comes to the measured best, the fixed rule \
`CSR scalar, 256 threads` and cuSPARSE, the classifier's agreement, and the decision trees' \
held-out figures. With --from it judges an existing evaluation profile and needs no GPU.")]
    EvalModel(evalmodel::EvalArgs),
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum PrecondArg {
    /// No preconditioner (plain CG).
    None,
    /// Jacobi: M = diag(A).
    Jacobi,
    /// SSOR approximate inverse, first-order Neumann series.
    SsorAi,
    /// SSOR approximate inverse, second-order Neumann series.
    SsorAi2,
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum FormArg {
    /// The performance model picks by predicted time when one chooses the GPU plan; factored
    /// otherwise.
    Auto,
    /// t = K r; t = D^-1 t; z = K^T t (three sparse passes, fewer nonzeros).
    Factored,
    /// One SpMV with the explicit product K^T D^-1 K.
    Explicit,
}

#[derive(Args)]
struct SolveArgs {
    /// Matrix Market file of A (.mtx or .mtx.gz).
    matrix: PathBuf,
    /// Right-hand side b (Matrix Market array or n x 1 coordinate). Default: b = A * ones.
    #[arg(long)]
    rhs: Option<PathBuf>,
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
    /// SSOR relaxation factor: a number in (0, 2), or `auto` = min(1, 1/||D^-1/2 L D^-1/2||_inf),
    /// which keeps the truncated Neumann series a useful inverse on strongly coupled matrices
    /// and is 1 on stencil matrices.
    #[arg(long, default_value = "auto")]
    omega: String,
    /// How SSOR-AI is applied.
    #[arg(long, value_enum, default_value_t = FormArg::Auto)]
    ssor_form: FormArg,
    /// Where to run: auto (a GPU when usable, else the CPU), cpu or gpu.
    #[arg(long, default_value = "auto")]
    device: Device,
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
    /// Use the lower triangle of a `general` file that is not symmetric, mirrored.
    #[arg(long)]
    assume_symmetric: bool,
    /// CPU threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Include the residual history in the JSON output.
    #[arg(long)]
    history: bool,
}

#[derive(Args)]
struct FeaturesArgs {
    /// Matrix Market file.
    matrix: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Performance model whose predicted SpMV time per candidate is shown: `auto` (the model
    /// of the GPU present, found by its name; nothing without a GPU), `none`, or a model file.
    #[arg(long, default_value = "auto")]
    model: String,
}

#[derive(Args)]
struct MatgenArgs {
    /// Family name (see --list).
    #[arg(required_unless_present = "list")]
    family: Option<String>,
    /// List the families and their parameters.
    #[arg(long)]
    list: bool,
    /// Size: grid points per side for stencil families, rows for banded/powerlaw, points for fem2d.
    #[arg(long, default_value_t = 32)]
    n: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Half bandwidth (banded).
    #[arg(long)]
    bandwidth: Option<usize>,
    /// Mean nonzeros per row (powerlaw).
    #[arg(long)]
    mean_row_len: Option<f64>,
    /// Power-law exponent (powerlaw).
    #[arg(long)]
    alpha: Option<f64>,
    /// Anisotropy ratio in (0, 1] (aniso2d).
    #[arg(long)]
    eps: Option<f64>,
    /// Anisotropy angle in radians (aniso2d).
    #[arg(long)]
    theta: Option<f64>,
    /// Write the full matrix (`general`) instead of the lower triangle (`symmetric`).
    #[arg(long)]
    general: bool,
    /// Output file (.mtx, or .mtx.gz to compress).
    #[arg(long, required_unless_present = "list")]
    out: Option<PathBuf>,
}

#[derive(Subcommand)]
enum BenchCmd {
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
}

#[derive(Args)]
struct PcgBenchArgs {
    /// Matrix Market file of an SPD matrix.
    matrix: PathBuf,
    /// Preconditioner.
    #[arg(long, value_enum, default_value_t = PrecondArg::SsorAi)]
    precond: PrecondArg,
    /// How SSOR-AI is applied.
    #[arg(long, value_enum, default_value_t = FormArg::Factored)]
    ssor_form: FormArg,
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
struct SpmvArgs {
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
    /// Which GPU (CUDA ordinal).
    #[arg(long, default_value_t = 0)]
    gpu: usize,
}

#[derive(Args)]
struct MmreadArgs {
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

/// An error with its exit code.
struct Fail {
    code: u8,
    err: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail {
            code: 2,
            err: e.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match try_main(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("autopcg: error: {}", error_chain(&f.err));
            ExitCode::from(f.code)
        }
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose text the message before it
/// already contains (library errors often print their source themselves).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn try_main(cli: Cli) -> Result<u8, Fail> {
    match cli.cmd {
        Cmd::Solve(a) => solve(a),
        Cmd::Features(a) => Ok(features_cmd(a).map(|_| 0)?),
        Cmd::Matgen(a) => Ok(matgen(a).map(|_| 0)?),
        Cmd::Bench(BenchCmd::Mmread(a)) => Ok(bench_mmread(a).map(|_| 0)?),
        Cmd::Bench(BenchCmd::Spmv(a)) => Ok(bench_spmv(a).map(|_| 0)?),
        Cmd::Bench(BenchCmd::Pcg(a)) => Ok(bench_pcg(a).map(|_| 0)?),
        Cmd::Tune(a) => Ok(tune::tune(a).map(|_| 0)?),
        Cmd::EvalModel(a) => Ok(evalmodel::eval_model(a).map(|_| 0)?),
    }
}

fn init_threads(threads: Option<usize>) -> Result<()> {
    if let Some(t) = threads {
        if t == 0 {
            bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .context("could not start the thread pool")?;
    }
    Ok(())
}

fn read_matrix(path: &Path, assume_symmetric: bool) -> Result<CsrMatrix> {
    let opts = ReadOptions {
        symmetry: if assume_symmetric {
            SymmetryPolicy::AssumeSymmetric
        } else {
            SymmetryPolicy::RequireSymmetric
        },
        require_square: true,
    };
    Ok(mm::read_matrix(path, &opts)?.matrix)
}

fn norm2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn precond_kind(p: PrecondArg, form: FormArg, omega: f64) -> PrecondKind {
    match p {
        PrecondArg::None => PrecondKind::None,
        PrecondArg::Jacobi => PrecondKind::Jacobi,
        PrecondArg::SsorAi | PrecondArg::SsorAi2 => PrecondKind::SsorAi {
            order: if p == PrecondArg::SsorAi { 1 } else { 2 },
            omega,
            form: match form {
                FormArg::Auto | FormArg::Factored => SsorForm::Factored,
                FormArg::Explicit => SsorForm::Explicit,
            },
        },
    }
}

fn solve(a: SolveArgs) -> Result<u8, Fail> {
    init_threads(a.threads)?;
    let omega_arg: Option<f64> = if a.omega.eq_ignore_ascii_case("auto") {
        None
    } else {
        let w: f64 = a.omega.parse().map_err(|_| {
            anyhow!(
                "--omega must be `auto` or a number in (0, 2), got '{}'",
                a.omega
            )
        })?;
        if !(w > 0.0 && w < 2.0) {
            return Err(anyhow!("--omega must be in (0, 2), got {w}").into());
        }
        Some(w)
    };

    let t_read = Instant::now();
    let m = read_matrix(&a.matrix, a.assume_symmetric)?;
    let n = m.nrows();
    let omega = omega_arg.unwrap_or_else(|| autopcg::solver::auto_omega(&m));
    let kind = precond_kind(a.precond, a.ssor_form, omega);
    let params = PcgParams::new()
        .with_tol(a.tol)?
        .with_max_iter(a.max_iter)?
        .with_history(a.history);
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
    let read_ms = t_read.elapsed().as_secs_f64() * 1e3;

    // Progress on a terminal for long solves: a line refreshed at most twice a second.
    let interactive = !a.json && std::io::stderr().is_terminal();
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

    let outcome = Solver::new(&m)
        .precond(kind)
        .params(params)
        .device(a.device)
        .model(model_choice(&a.model))
        .ssor_form_auto(a.ssor_form == FormArg::Auto)
        .solve_with(&b, None, progress);
    if shown {
        eprintln!();
    }
    let (sol, code, err) = match outcome {
        Ok(s) => (s, 0u8, None),
        Err(f) => match (f.partial, f.error) {
            (Some(p), e) => (*p, 1u8, Some(e)),
            (None, Error::Pcg(e @ (PcgError::NotSpd { .. } | PcgError::Breakdown { .. }))) => {
                return Err(Fail {
                    code: 1,
                    err: anyhow!(
                        "{}: {e}: the matrix (or the preconditioner built from it) is not \
                         symmetric positive definite",
                        a.matrix.display()
                    ),
                });
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
    if a.json {
        let mut j = json!({
            "matrix": a.matrix.display().to_string(),
            "n": n,
            "nnz": m.nnz(),
            "iterations": iters,
            "converged": sol.info.converged,
            "relative_residual": sol.info.true_relative_residual,
            "recurrence_relative_residual": sol.info.recurrence_relative_residual,
            "error_vs_ones": error_vs_ones,
            "read_ms": read_ms,
            "setup_ms": sol.setup_ms,
            "solve_ms": sol.solve_ms,
            "ms_per_iteration": ms_per_iter,
            "device": sol.device,
            "precond": kind.to_string(),
            "omega": matches!(kind, PrecondKind::SsorAi { .. }).then_some(omega),
            "tol": a.tol,
            "precond_applied": sol.precond_applied,
            "plan": sol.plan,
            "model": sol.model,
            "predicted_ms_per_iteration": sol.predicted_iteration_ms,
            "notes": sol.notes,
        });
        if a.explain {
            j["explain"] = json!(sol.explain);
        }
        if a.history {
            j["residual_history"] = json!(sol.info.residual_history);
        }
        if let Some(e) = &err {
            j["error"] = json!(e.to_string());
        }
        println!("{j}");
    } else {
        for note in &sol.notes {
            eprintln!("note: {note}");
        }
        let w = if matches!(kind, PrecondKind::SsorAi { .. }) {
            format!(" (omega {omega:.3})")
        } else {
            String::new()
        };
        println!(
            "{}: n = {n}, nnz = {}, precond = {kind}{w}, device = {}",
            a.matrix.display(),
            m.nnz(),
            sol.device
        );
        println!(
            "{} after {iters} iterations: relative residual {:.3e} (recurrence {:.3e})",
            if sol.info.converged {
                "converged"
            } else {
                "NOT converged"
            },
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
        if let Some(out) = &a.out {
            println!("solution written to {}", out.display());
        }
    }
    if let Some(e) = err {
        eprintln!("autopcg: {e}");
    }
    Ok(code)
}

/// `auto`, `none` or a file.
fn model_choice(s: &str) -> ModelChoice {
    match s {
        "auto" => ModelChoice::Auto,
        "none" => ModelChoice::Off,
        f => ModelChoice::File(PathBuf::from(f)),
    }
}

fn print_plan(sol: &autopcg::Solution, explain: bool) {
    let predicted = sol
        .predicted_iteration_ms
        .map(|p| format!(", predicted {p:.4} ms per iteration"))
        .unwrap_or_default();
    println!("plan ({}{predicted}):", sol.plan.source);
    for s in &sol.plan.steps {
        let p = s
            .predicted_ms
            .map(|p| format!("  predicted {p:.4} ms"))
            .unwrap_or_default();
        println!(
            "  {:<8} {:<8} {:<28} {}{p}",
            s.step, s.format, s.kernel, s.config
        );
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

fn features_cmd(a: FeaturesArgs) -> Result<()> {
    let opts = ReadOptions {
        symmetry: SymmetryPolicy::AsStored,
        require_square: false,
    };
    let m = mm::read_matrix(&a.matrix, &opts)?.matrix;
    let f = features::features(&m);
    let (model, note) = features_model(&a.model)?;
    let predictions = model.as_ref().map(|(mf, path)| {
        let w = autopcg::model::work::spmv_work(&m);
        let classifier = mf.classifier.as_ref().and_then(|c| c.predict(&f, &w));
        (path.clone(), mf.spmv.predict(&w), classifier)
    });
    if a.json {
        let mut j = serde_json::to_value(&f)?;
        if let Some((path, p, c)) = &predictions {
            j["model"] = json!(path);
            j["predicted_spmv"] = json!(p
                .iter()
                .map(
                    |p| json!({"candidate": p.name(), "predicted_ms": p.predicted_ms,
                                "conversion_ms": p.conversion_ms})
                )
                .collect::<Vec<_>>());
            j["classifier"] = json!(c);
        }
        println!("{j}");
    } else {
        let v = serde_json::to_value(&f)?;
        println!("{}", a.matrix.display());
        if let Some(obj) = v.as_object() {
            for (k, v) in obj {
                println!("  {k:<16} {v}");
            }
        }
        match &predictions {
            Some((path, p, c)) => {
                println!("predicted SpMV time per candidate (model {path}), fastest first:");
                for p in p {
                    let conv = p
                        .conversion_ms
                        .filter(|c| *c > 0.0)
                        .map(|c| format!("  (conversion {c:.3} ms)"))
                        .unwrap_or_default();
                    println!("  {:<44} {:>10.4} ms{conv}", p.name(), p.predicted_ms);
                }
                if let Some(c) = c {
                    println!("classifier's pick: {c}");
                }
            }
            None => {
                if let Some(n) = note {
                    eprintln!("note: {n}");
                }
            }
        }
    }
    Ok(())
}

/// The model `features` predicts with, or why there is none (`auto` without a GPU or without a
/// model file of the GPU is not an error).
/// A model file and the path it was read from.
type LoadedModel = (autopcg::model::ModelFile, String);

fn features_model(choice: &str) -> Result<(Option<LoadedModel>, Option<String>)> {
    use autopcg::model::{store, ModelFile};
    match model_choice(choice) {
        ModelChoice::Off => Ok((None, None)),
        ModelChoice::File(p) => Ok((Some((ModelFile::load(&p)?, p.display().to_string())), None)),
        ModelChoice::Auto => {
            if !autopcg::gpu::gpu_available() {
                return Ok((
                    None,
                    Some("no GPU: no predicted SpMV times (give --model FILE for a model)".into()),
                ));
            }
            let name = autopcg::gpu::GpuDevice::open(0)?.props().name.clone();
            match store::find_model(&name) {
                None => Ok((
                    None,
                    Some(format!(
                        "no model for {name}: run `autopcg tune` for predicted SpMV times"
                    )),
                )),
                Some(p) => match ModelFile::load_for_device(&p, &name) {
                    Ok(m) => Ok((Some((m, p.display().to_string())), None)),
                    Err(e) => Ok((None, Some(format!("model not used: {e}")))),
                },
            }
        }
    }
}

fn matgen(a: MatgenArgs) -> Result<()> {
    if a.list {
        for (f, desc) in families::list() {
            println!("{:<16} {desc}", f.to_string());
        }
        return Ok(());
    }
    let (Some(name), Some(out)) = (a.family.as_deref(), a.out.as_ref()) else {
        bail!("matgen needs a FAMILY and --out (see autopcg matgen --list)");
    };
    let family: Family = name
        .parse()
        .map_err(|e| anyhow!("{e} (see autopcg matgen --list)"))?;
    let p = FamilyParams {
        n: a.n,
        seed: a.seed,
        bandwidth: a.bandwidth,
        mean_row_len: a.mean_row_len,
        alpha: a.alpha,
        eps: a.eps,
        theta: a.theta,
    };
    let t0 = Instant::now();
    let m = families::generate(family, &p)?;
    let t_gen = t0.elapsed().as_secs_f64();
    let sym = if a.general {
        WriteSymmetry::General
    } else {
        WriteSymmetry::SymmetricLower
    };
    mm::write_matrix(out, &m, sym)?;
    eprintln!(
        "{}: {family} n = {}, nnz = {} (generated in {:.2} s, written in {:.2} s)",
        out.display(),
        m.nrows(),
        m.nnz(),
        t_gen,
        t0.elapsed().as_secs_f64() - t_gen
    );
    Ok(())
}

fn bench_mmread(a: MmreadArgs) -> Result<()> {
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

/// Opens GPU `ordinal`, or explains why there is none.
pub(crate) fn open_gpu(ordinal: usize) -> Result<autopcg::gpu::GpuDevice> {
    if !autopcg::gpu::gpu_available() {
        bail!("no usable NVIDIA GPU: the CUDA driver library was not found or reports no device");
    }
    Ok(autopcg::gpu::GpuDevice::open(ordinal)?)
}

fn bench_spmv(a: SpmvArgs) -> Result<()> {
    use autopcg::gpu::bench::{bench_spmv, SpmvBenchOptions};
    let opts = ReadOptions {
        symmetry: SymmetryPolicy::AsStored,
        require_square: false,
    };
    let m = mm::read_matrix(&a.matrix, &opts)?.matrix;
    let dev = open_gpu(a.gpu)?;
    let mut o = if a.quick {
        SpmvBenchOptions::quick()
    } else {
        SpmvBenchOptions::default()
    };
    o.cusparse = !a.no_cusparse;
    eprintln!(
        "timing SpMV on {} (n = {}, nnz = {}) on {} ...",
        a.matrix.display(),
        m.nrows(),
        m.nnz(),
        dev.props().name
    );
    let r = bench_spmv(&dev, &m, &o)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", r.table());
    }
    Ok(())
}

fn bench_pcg(a: PcgBenchArgs) -> Result<()> {
    use autopcg::solver::gpu::{GpuBackend, GpuPlanChoice};
    use autopcg::solver::{PcgBackend, Preconditioner};
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let m = read_matrix(&a.matrix, a.assume_symmetric)?;
    let kind = precond_kind(a.precond, a.ssor_form, autopcg::solver::auto_omega(&m));
    let dev = open_gpu(a.gpu)?;
    let pre = Preconditioner::build(&m, &kind).with_context(|| a.matrix.display().to_string())?;
    let b = m.mul_vec(&vec![1.0; m.nrows()]);
    let choice = GpuPlanChoice::default_for(&m, &pre, dev.props())
        .with_graph_iters(GpuPlanChoice::graph_iters_for(autopcg::GPU_CHECK_EVERY));
    let mut backend = GpuBackend::new(&dev, &m, &pre, &b, None, &choice)?;
    backend.start()?;
    let t = backend.profile_steps(a.iters)?;
    let plan = backend.plan();
    if a.json {
        println!(
            "{}",
            json!({"matrix": a.matrix.display().to_string(), "n": m.nrows(), "nnz": m.nnz(),
                   "device": dev.props().name, "precond": kind.to_string(), "plan": plan,
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
