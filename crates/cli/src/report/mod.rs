//! `autopcg report`: one self-contained HTML file that shows what a fitted model knows.
//!
//! - [`data`]: the inputs (model, fit profile, held-out evaluation profile, matrices) and
//!   their defaults;
//! - [`vecdot`]: vector updates and reductions, per operation or family and test domain: the
//!   measured points, the decision tree's lines and intervals, and the eq. 3-2 block counts;
//! - [`spmv`]: predicted against measured SpMV times per kernel family, and the selection on
//!   the held-out matrices against the measured best and cuSPARSE;
//! - [`matrix`]: per matrix, its sparsity pattern, row-length histogram and plan;
//! - [`plot`]: what every plot shares (the SVG canvas, colours, number formats);
//! - [`html`]: the page: header, fit statistics, sections.
//!
//! Every plot is an inline `<svg>` with an `id`, inside a `<section>` with an `id`: the file
//! refers to nothing outside itself (no script, style sheet, font or image is loaded), so it
//! opens from disk anywhere.
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

mod data;
mod html;
mod matrix;
mod plot;
mod spmv;
mod vecdot;

#[derive(Args)]
pub(crate) struct ReportArgs {
    /// Model file to show. Default: the model of the GPU found here, by its name; without a
    /// GPU, give it (the committed ones are models/<gpu>.json, e.g. models/nvidia-h200.json).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Profile the model was fitted from (plain or .gz). Default: <stem>.profile.jsonl.gz (or
    /// .jsonl) beside the model file, when it exists.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Held-out evaluation profile (plain or .gz), as `eval-model --from` reads. Default:
    /// <stem>.eval.jsonl.gz (or .jsonl) beside the model file, when it exists.
    #[arg(long)]
    eval: Option<PathBuf>,
    /// Matrix Market files whose sparsity pattern, row lengths and plan to show (repeatable).
    #[arg(long = "matrix", value_name = "A.mtx", num_args = 1..)]
    matrices: Vec<PathBuf>,
    /// The HTML file to write (never one of the inputs).
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn report(a: ReportArgs) -> Result<()> {
    let inputs = data::Inputs::load(&data::Request {
        model: a.model,
        profile: a.profile,
        eval: a.eval,
        matrices: a.matrices,
    })?;
    autopcg::sparse::io::check_output(&a.out, inputs.paths())?;
    let page = html::page(&inputs)?;
    autopcg::sparse::io::write_atomic(&a.out, |w| w.write_all(page.as_bytes()))
        .with_context(|| format!("writing the report {}", a.out.display()))?;
    eprintln!(
        "wrote {} ({} KiB): model {}{}{}, {} matri{}",
        a.out.display(),
        page.len().div_ceil(1024),
        inputs.model_path.display(),
        inputs
            .profile
            .as_ref()
            .map_or_else(String::new, |p| format!(", profile {}", p.path.display())),
        inputs.eval.as_ref().map_or_else(String::new, |p| format!(
            ", evaluation {}",
            p.path.display()
        )),
        inputs.matrices.len(),
        if inputs.matrices.len() == 1 {
            "x"
        } else {
            "ces"
        }
    );
    Ok(())
}
