//! The `autopcg` command: solve sparse SPD systems, inspect and generate matrices, benchmark.
//!
//! Thin by design: argument parsing, calls into the library crates, printing. Exit codes:
//! 0 converged (or the command succeeded), 1 the solver ran but did not converge or found the
//! matrix not SPD, 2 bad input or usage (one message on stderr, never a panic).
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod common;
mod evalmodel;
mod features;
mod forms;
mod generate;
mod matgen;
mod report;
mod solve;
mod tune;

use bench::BenchCmd;

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
    Solve(solve::SolveArgs),
    /// Plan a solve for a GPU and write the plan (plan.json) and a standalone CUDA solver
    /// emitted from it.
    #[command(
        long_about = "Plan a solve for a GPU and write the plan and a standalone solver.\n\n\
The plan is the one `solve` would run on the target GPU: the model named with --model chooses \
for its GPU (no GPU is needed here), or else GPU 0's model, found as `solve` finds it. --out \
receives plan.json (device, model and its hash, the matrix fingerprint, the preconditioner and \
every step's format, kernel, launch and predicted time; `autopcg solve --plan` runs it) and the \
CUDA C++ sources of a solver that runs exactly that plan: the chosen kernels, a host driver, a C \
API (autopcg_generated.h), a Fortran module, a command that prints the JSON of `solve --json`, \
CMakeLists.txt and a README."
    )]
    Generate(generate::GenerateArgs),
    /// Print the matrix features the performance models use.
    Features(features::FeaturesArgs),
    /// Write a generated SPD benchmark matrix (`autopcg matgen --list` names the families).
    Matgen(matgen::MatgenArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Measure this GPU once (vector updates, reductions, the dots in the SpMV's epilogue, SpMV,
    /// SSOR-AI's two forms) and fit its performance model.
    #[command(
        long_about = "Measure this GPU once and fit its performance model.\n\n\
The sweep times every vector-update and reduction kernel at every launch configuration over \
vector lengths up to 2^28 (or what 0.6 of the GPU memory holds), the SpMV row kernels plain and \
with the three dots of the iteration in their epilogue on a tridiagonal matrix of up to 2^24 \
rows and a band of 27 entries a row of up to 2^22 rows (the model weighs the two against the \
separate reduction, by the rows and the entries of A), and every SpMV format, kernel \
and configuration (and cuSPARSE) on 34 generated benchmark matrices of 1e4 to 1e7 rows. \
Then the form stage times the PCG iteration with SSOR-AI applied factored and explicit on each \
of those matrices, a ladder of stencil and mesh sizes of its own, and the held-out evaluation \
matrices (the kernels of the model fitted so far); the model's form tree is fitted on the first \
two and judged on the third. Every 12 timings of a length the length's cheapest configuration \
is timed again as a sentinel: a stretch read while it ran 1.25x slower (another process on the \
GPU, a clock change) is timed again, and the stage's summary line says how many were. \
Measurements are streamed to a profile file as they are taken (a length's together): an \
interrupted tune loses at most the length it was timing, and running it again with the same \
profile resumes where it stopped. A full tune takes a few minutes. Without a GPU it exits with \
status 2."
    )]
    Tune(tune::TuneArgs),
    /// Judge a fitted model on held-out matrices: prediction error and selection quality.
    #[command(long_about = "Judge a fitted model on data it was not fitted on.\n\n\
On a GPU, measures every SpMV candidate (and cuSPARSE) on the evaluation matrices (other seeds \
and sizes of the benchmark families, and the real fixtures in matrices/ scaled up by Kronecker \
products with Poisson matrices; never used for fitting) into an evaluation profile, then reports \
the model's prediction error, how close its choice comes to the measured best, the fixed rule \
`CSR scalar, 256 threads` and cuSPARSE, the classifier's agreement, and the decision trees' \
held-out figures. With --from it judges an existing evaluation profile and needs no GPU; with \
--from TUNE_PROFILE --fit-set, the tune profile's fit matrices (in-sample figures: the model \
was fitted on them).")]
    EvalModel(evalmodel::EvalArgs),
    /// Write one self-contained HTML file showing a model: its fits, choices and plans.
    Report(report::ReportArgs),
}

/// An error with its exit code.
pub(crate) struct Fail {
    pub(crate) code: u8,
    pub(crate) err: anyhow::Error,
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
    let outcome = try_main(cli);
    // A GPU opened ahead and never used (the input was refused) is still being opened: the
    // process must not exit under it.
    autopcg::finish_gpu_opens_ahead();
    match outcome {
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
        Cmd::Solve(a) => solve::solve(a),
        Cmd::Generate(a) => generate::generate(a),
        Cmd::Features(a) => Ok(features::features_cmd(a).map(|_| 0)?),
        Cmd::Matgen(a) => Ok(matgen::matgen(a).map(|_| 0)?),
        Cmd::Bench(BenchCmd::Mmread(a)) => Ok(bench::bench_mmread(a).map(|_| 0)?),
        Cmd::Bench(BenchCmd::Spmv(a)) => Ok(bench::bench_spmv(a).map(|_| 0)?),
        Cmd::Bench(BenchCmd::Pcg(a)) => Ok(bench::bench_pcg(a).map(|_| 0)?),
        Cmd::Bench(BenchCmd::Prepared(a)) => Ok(bench::bench_prepared(a).map(|_| 0)?),
        Cmd::Tune(a) => Ok(tune::tune(a).map(|_| 0)?),
        Cmd::EvalModel(a) => Ok(evalmodel::eval_model(a).map(|_| 0)?),
        Cmd::Report(a) => Ok(report::report(a).map(|_| 0)?),
    }
}
