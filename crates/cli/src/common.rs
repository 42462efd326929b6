//! What several subcommands share: the preconditioner and form arguments, reading a matrix for
//! solving, the thread pool.
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};

use autopcg::sparse::mm::{self, ReadChecks, ReadOptions, SymmetryPolicy};
use autopcg::{CsrMatrix, PrecondKind, SsorForm};

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
pub(crate) enum PrecondArg {
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
pub(crate) enum FormArg {
    /// The performance model picks by predicted time when one chooses the GPU plan; factored
    /// otherwise.
    Auto,
    /// t = K r; z = (K^T D^-1) t: two products, the diagonal folded into K^T (fewer nonzeros).
    Factored,
    /// One SpMV with the explicit product K^T D^-1 K.
    Explicit,
}

/// The options `solve` and `generate` share beside their own: how a file that is not
/// symmetric is read, the CPU threads, and JSON output.
#[derive(Args)]
pub(crate) struct RunArgs {
    /// Use the lower triangle of a `general` file that is not symmetric, mirrored.
    #[arg(long)]
    pub(crate) assume_symmetric: bool,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// How SSOR-AI is set up: the arguments every subcommand that takes `--precond` shares.
#[derive(Args)]
pub(crate) struct SsorArgs {
    /// SSOR relaxation factor: a number in (0, 2), or `auto` = min(1, 1/||D^-1/2 L D^-1/2||_inf),
    /// which keeps the truncated Neumann series a useful inverse on strongly coupled matrices
    /// and is 1 on stencil matrices.
    #[arg(long, default_value = "auto")]
    omega: String,
    /// How SSOR-AI is applied (`auto`: the model picks by predicted time when one chooses the
    /// GPU plan; factored otherwise).
    #[arg(long, value_enum, default_value_t = FormArg::Auto)]
    ssor_form: FormArg,
}

impl SsorArgs {
    /// The preconditioner `p` with this form and omega (still automatic where `--omega
    /// auto`); an error for an omega that is neither `auto` nor in (0, 2).
    pub(crate) fn kind(&self, p: PrecondArg) -> Result<PrecondKind> {
        Ok(precond_kind(p, self.ssor_form, parse_omega(&self.omega)?))
    }

    /// Whether the SSOR-AI form is left to the plan (`--ssor-form auto`).
    pub(crate) fn form_auto(&self) -> bool {
        self.ssor_form == FormArg::Auto
    }
}

/// One step of a printed plan: the step's name (padded to `step_width`), format, kernel and
/// launch configuration, then the predicted time when there is one.
pub(crate) fn plan_step_line(
    step_width: usize,
    [step, format, kernel, config]: [&String; 4],
    predicted_ms: Option<f64>,
) -> String {
    let p = predicted_ms
        .map(|p| format!("  predicted {p:.4} ms"))
        .unwrap_or_default();
    format!("  {step:<step_width$} {format:<8} {kernel:<28} {config}{p}")
}

/// Starts the thread pool with `threads` workers. More threads than the machine has logical
/// CPUs only add contention (1024 threads on a 100-row matrix took 15-20 s), so a larger count
/// is clamped to the CPU count with a note on stderr.
pub(crate) fn init_threads(threads: Option<usize>) -> Result<()> {
    if let Some(t) = threads {
        if t == 0 {
            bail!("--threads must be at least 1");
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let t = if t > cpus {
            eprintln!(
                "note: --threads {t} is more than the {cpus} logical CPUs here: using {cpus}"
            );
            cpus
        } else {
            t
        };
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .context("could not start the thread pool")?;
    }
    Ok(())
}

/// Reads the matrix of a solve: square, symmetric (or its lower triangle mirrored with
/// `assume_symmetric`), and with a positive diagonal — a zero or negative diagonal entry means
/// the matrix is not SPD whatever the preconditioner, and the error names its line.
pub(crate) fn read_matrix(path: &Path, assume_symmetric: bool) -> Result<CsrMatrix> {
    let opts = ReadOptions {
        symmetry: if assume_symmetric {
            SymmetryPolicy::AssumeSymmetric
        } else {
            SymmetryPolicy::RequireSymmetric
        },
        require_square: true,
    };
    let checks = ReadChecks {
        positive_diagonal: true,
        ..ReadChecks::default()
    };
    Ok(mm::read_matrix_checked(path, &opts, &checks)?.matrix)
}

pub(crate) fn norm2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// The preconditioner of the arguments; `omega` `None` leaves it automatic ([`autopcg::solver::auto_omega`]).
fn precond_kind(p: PrecondArg, form: FormArg, omega: Option<f64>) -> PrecondKind {
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

/// `--omega`: `auto` (None) or a number in (0, 2).
fn parse_omega(text: &str) -> Result<Option<f64>> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    let w: f64 = text
        .parse()
        .map_err(|_| anyhow!("--omega must be `auto` or a number in (0, 2), got '{text}'"))?;
    if !(w > 0.0 && w < 2.0) {
        bail!("--omega must be in (0, 2), got {w}");
    }
    Ok(Some(w))
}

/// Opens GPU `ordinal`, or explains why there is none.
pub(crate) fn open_gpu(ordinal: usize) -> Result<autopcg::gpu::GpuDevice> {
    autopcg::open_gpu(ordinal).map_err(|why| anyhow!(why))
}
