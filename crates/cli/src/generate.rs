//! `autopcg generate`: plan a solve (as `solve` would on the target GPU) and write the plan
//! (`plan.json`) with a standalone CUDA solver emitted from it.
//!
//! The target is the GPU of the model named with `--model` (no GPU needed: the plan is a
//! function of the model and the matrix), or else GPU 0 with its model found as `solve` finds
//! it (the fallback rule when there is none). With `--plan`, a saved plan (one edited by hand
//! or by a tool, say) is emitted as it is: nothing is chosen and no GPU is needed.
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use clap::Args;
use serde::Serialize;

use autopcg::generator::blocks::plan_blocks_balanced;
use autopcg::generator::emit;
use autopcg::generator::saved::{SavedModel, SavedPlan};
use autopcg::generator::{model_device_props, plan, ModelRef, PlanError, PlanRequest, Target};
use autopcg::model::ModelFile;
use autopcg::{resolve_model, ModelChoice};

use crate::common::{init_threads, plan_step_line, read_matrix, PrecondArg, RunArgs, SsorArgs};
use crate::Fail;

#[derive(Args)]
pub(crate) struct GenerateArgs {
    /// Matrix Market file of A (.mtx or .mtx.gz).
    matrix: PathBuf,
    /// Folder to write plan.json and the solver's sources to (created if missing; files of
    /// the same names are replaced).
    #[arg(long)]
    out: PathBuf,
    /// Model file of the target GPU. The plan is made for that GPU, without a GPU here.
    /// Without it, GPU 0 is the target and its model is found as `solve` finds it.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Emit the solver of this saved plan (a plan.json) instead of choosing one: its device,
    /// preconditioner and steps are kept as they are (its step list is rewritten from what the
    /// steps run). The matrix must match the plan's fingerprint, as for `solve --plan`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["precond", "omega", "ssor_form", "model", "check_every"])]
    plan: Option<PathBuf>,
    /// With --plan: emit it even when the matrix's fingerprint differs from the plan's (the
    /// emitted solver still refuses another matrix unless told to run it anyway).
    #[arg(long, requires = "plan")]
    force: bool,
    /// Preconditioner.
    #[arg(long, value_enum, default_value_t = PrecondArg::SsorAi)]
    precond: PrecondArg,
    #[command(flatten)]
    ssor: SsorArgs,
    /// GPUs to plan for. With N > 1 the matrix is split into N row blocks, one per GPU, as
    /// `solve --gpus N` splits it (rows balanced by the model's predicted time per block), each
    /// block planned on its own; the emitted solver runs block i on GPU i with halo exchanges
    /// and one all-reduce of the three dots per iteration.
    #[arg(long, default_value_t = 1, conflicts_with = "plan")]
    gpus: usize,
    /// Poll (synchronise, check convergence) every this many iterations (default: 16).
    #[arg(long)]
    check_every: Option<usize>,
    #[command(flatten)]
    run: RunArgs,
}

/// What `generate --json` prints.
#[derive(Serialize)]
struct GenerateReport<'a> {
    out: String,
    files: Vec<&'a str>,
    device: String,
    model: Option<&'a str>,
    precond: &'a str,
    precond_applied: &'a str,
    omega: Option<f64>,
    steps: &'a [autopcg::generator::saved::SavedStep],
    /// Per row block of a plan for several GPUs: its rows, GPU and steps (empty for one GPU,
    /// whose steps are `steps`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    blocks: Vec<BlockReport<'a>>,
    predicted_ms_per_iteration: Option<f64>,
    notes: &'a [String],
    build: String,
}

/// One row block of a plan for several GPUs, in `generate --json`.
#[derive(Serialize)]
struct BlockReport<'a> {
    rows: (usize, usize),
    gpu: usize,
    steps: &'a [autopcg::generator::saved::SavedStep],
}

pub(crate) fn generate(a: GenerateArgs) -> Result<u8, Fail> {
    init_threads(a.run.threads)?;
    if a.gpus == 0 {
        return Err(anyhow!("--gpus must be at least 1").into());
    }
    if a.check_every == Some(0) {
        return Err(anyhow!("--check-every must be at least 1").into());
    }
    // An automatic omega is resolved for the matrix by the plan and recorded in plan.json.
    let kind = a.ssor.kind(a.precond)?;
    let m = read_matrix(&a.matrix, a.run.assume_symmetric)?;
    if let Some(path) = &a.plan {
        let saved = saved_plan_for(path, &a.matrix, &m, a.force)?;
        return write_and_report(&a, saved);
    }

    // The target GPU and the model that chooses for it.
    let mut notes = Vec::new();
    let (props, model, label) = match &a.model {
        Some(path) => {
            let file = ModelFile::load(path).context("--model")?;
            (
                model_device_props(&file),
                Some(file),
                Some(path.display().to_string()),
            )
        }
        None => {
            let dev = autopcg::open_gpu(0).map_err(|why| {
                anyhow!("no GPU to plan for ({why}): name the target's model file with --model")
            })?;
            let props = dev.props().clone();
            let resolved = resolve_model(&ModelChoice::Auto, Some(&props.name))?;
            notes.extend(resolved.notes);
            match resolved.model {
                Some(l) => {
                    let label = l.label();
                    (props, Some(l.file), Some(label))
                }
                None => (props, None, None),
            }
        }
    };
    let saved_model = match (&a.model, &label) {
        (Some(p), Some(l)) => Some(SavedModel::of_file(p, l)?),
        (None, Some(l)) => Some(SavedModel::of_file(std::path::Path::new(l), l)?),
        _ => None,
    };

    let mut req = PlanRequest::new(&m, kind, Target::Gpu(props.clone()));
    req.ssor_form_auto = a.ssor.form_auto();
    req.check_every = a.check_every;
    req.model = match (&model, &label) {
        (Some(f), Some(l)) => Some(ModelRef { file: f, label: l }),
        _ => None,
    };
    let plan_error = |e: PlanError| match e {
        PlanError::Solver(p) => anyhow!("{}: {p}", a.matrix.display()),
        other => anyhow!("{}: {other}", a.matrix.display()),
    };
    let matrix_file = Some(a.matrix.display().to_string());
    let mut saved = if a.gpus > 1 {
        if a.gpus > m.nrows() {
            return Err(anyhow!(
                "--gpus {}: {} has only {} rows (one block per GPU needs a row each)",
                a.gpus,
                a.matrix.display(),
                m.nrows()
            )
            .into());
        }
        let blocks = plan_blocks_balanced(&req, a.gpus).map_err(plan_error)?;
        if blocks.balance.kept_because.is_none() {
            notes.push(format!(
                "rows moved between blocks by the model's predicted time: slowest block {:.1} -> \
                 {:.1} us per iteration",
                blocks.balance.initial_us, blocks.balance.final_us
            ));
        }
        SavedPlan::from_blocks(&blocks, &m, &props, saved_model, matrix_file)?
    } else {
        let solve_plan = plan(&req).map_err(plan_error)?;
        SavedPlan::from_plan(&solve_plan, &m, &props, saved_model, matrix_file)?
    };
    notes.append(&mut saved.notes);
    saved.notes = notes;
    write_and_report(&a, saved)
}

/// The saved plan at `path` for the matrix `m` (read from `matrix`): validated, its
/// fingerprint checked (with `force` a mismatch becomes a note), and its step list rewritten
/// from its choice, so that a plan whose steps were edited reports what they now run.
fn saved_plan_for(
    path: &std::path::Path,
    matrix: &std::path::Path,
    m: &autopcg::CsrMatrix,
    force: bool,
) -> Result<SavedPlan, Fail> {
    let fail = |e: &dyn std::fmt::Display, hint: &str| {
        Fail::from(anyhow!(
            "{} ({}): {e}{hint}",
            path.display(),
            matrix.display()
        ))
    };
    let mut saved = SavedPlan::load(path)?;
    saved.validate().map_err(|e| fail(&e, ""))?;
    match saved.check_matrix(m, force) {
        Ok(note) => saved.notes.extend(note),
        Err(e) => return Err(fail(&e, "; --force emits the plan anyway")),
    }
    for i in 0..saved.blocks.len() {
        let choice = saved.blocks[i].choice.clone();
        saved
            .set_block_choice(i, choice)
            .map_err(|e| fail(&e, ""))?;
    }
    saved.notes.push(format!(
        "plan read from {}: nothing chosen again",
        path.display()
    ));
    Ok(saved)
}

/// Emits `saved`'s solver into `--out` and reports it (text or `--json`).
fn write_and_report(a: &GenerateArgs, saved: SavedPlan) -> Result<u8, Fail> {
    let files = emit::emit(&saved)?;
    emit::write(&a.out, &files)?;

    let out = a.out.display().to_string();
    let build = format!("cmake -S {out} -B {out}/build && cmake --build {out}/build -j");
    if a.run.json {
        let report = GenerateReport {
            out: out.clone(),
            files: files.iter().map(|f| f.path.as_str()).collect(),
            device: saved.device.words(),
            model: saved.model.as_ref().map(|m| m.file.as_str()),
            precond: &saved.precond.kind,
            precond_applied: &saved.precond.applied,
            omega: saved.precond.omega,
            steps: &saved.block().steps,
            blocks: if saved.is_split() {
                saved
                    .blocks
                    .iter()
                    .map(|b| BlockReport {
                        rows: b.rows,
                        gpu: b.gpu,
                        steps: &b.steps,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            predicted_ms_per_iteration: saved.predicted_ms_per_iteration,
            notes: &saved.notes,
            build,
        };
        println!(
            "{}",
            serde_json::to_string(&report).map_err(anyhow::Error::from)?
        );
        return Ok(0);
    }
    for note in &saved.notes {
        eprintln!("note: {note}");
    }
    println!(
        "{}: plan for {} ({}), precond {}{}",
        a.matrix.display(),
        saved.device.words(),
        saved
            .model
            .as_ref()
            .map_or("fallback rule", |m| m.file.as_str()),
        saved.precond.applied,
        saved
            .precond
            .omega
            .map(|w| format!(" (omega {w:.3})"))
            .unwrap_or_default()
    );
    let split = saved.is_split();
    for b in &saved.blocks {
        if split {
            println!("block on GPU {}, rows {}..{}:", b.gpu, b.rows.0, b.rows.1);
        }
        for s in &b.steps {
            let fields = [&s.step, &s.format, &s.kernel, &s.config];
            println!("{}", plan_step_line(16, fields, s.predicted_ms));
        }
    }
    println!(
        "wrote {} files to {out} (plan: {out}/plan.json)",
        files.len()
    );
    println!("build: {build}");
    println!(
        "run:   {out}/build/autopcg_gen_solve {}",
        a.matrix.display()
    );
    Ok(0)
}
