//! `autopcg eval-model`: judges a fitted model on data it was not fitted on.
//!
//! On a GPU it measures the evaluation set of matrices (other seeds and sizes of the benchmark
//! families, and the real fixtures scaled up by Kronecker products; never used for fitting)
//! into an evaluation profile, resumable like a tune; `--from` judges an existing evaluation
//! profile without a GPU (`--fit-set`: a tune profile's fit matrices, in-sample). It reports
//! the SpMV model's prediction error and selection quality (against the measured best, the
//! fixed rule "CSR scalar, 256 threads" and cuSPARSE), the classifier's agreement, and the
//! decision trees' held-out figures from the fit.
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::Args;

use autopcg_model::profile::{MatrixSet, Profile};
use autopcg_model::{evaluate_against, store, ModelFile, SpmvEvalReport};
use autopcg_profiler::{open_profile, run_eval_set, GpuMeasurer, Measurer, SweepOptions};

use crate::tune::{base_dir, Display};

#[derive(Args)]
pub(crate) struct EvalArgs {
    /// Model file to judge. Default: the model of the GPU found by its name (with --from, the
    /// model of the device named in the evaluation profile).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Evaluation profile to measure into (resumed when it exists). Default: beside the model
    /// file, <gpu>.eval.jsonl.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Judge this existing evaluation profile (plain or .gz) instead of measuring: no GPU needed.
    #[arg(long, conflicts_with = "profile")]
    from: Option<PathBuf>,
    /// Which GPU (CUDA ordinal) when measuring.
    #[arg(long, default_value_t = 0)]
    device_ordinal: usize,
    /// Print the whole report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Judge the fit matrices of a tune profile given with --from (the matrices the model was
    /// fitted on: in-sample figures, not a held-out test) instead of an evaluation profile's
    /// held-out matrices.
    #[arg(long, requires = "from")]
    fit_set: bool,
    /// Instead: compare two profiles of the same GPU (two tunes) and report the share of
    /// measurements above 20 microseconds whose medians agree within 5%.
    #[arg(long, num_args = 2, value_names = ["FIRST", "SECOND"], conflicts_with_all = ["from", "profile", "model"])]
    stability: Option<Vec<PathBuf>>,
}

/// Medians below this (ms) are left out of the stability figure.
const STABILITY_MIN_MS: f64 = 0.020;
/// Relative tolerance of the stability figure.
const STABILITY_TOL: f64 = 0.05;

fn stability(paths: &[PathBuf], json: bool) -> Result<()> {
    let [a, b] = paths else {
        return Err(anyhow!("--stability takes two profile files"));
    };
    let (pa, pb) = (Profile::read(a)?, Profile::read(b)?);
    if pa.device().map(|d| &d.name) != pb.device().map(|d| &d.name) {
        return Err(anyhow!(
            "{} and {} were measured on different GPUs",
            a.display(),
            b.display()
        ));
    }
    let r = autopcg_model::profile::stability(&pa, &pb, STABILITY_MIN_MS, STABILITY_TOL);
    if json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!(
        "run-to-run stability of {} against {}: {} of {} measurements above {:.0} us agree \
         within {:.0}% ({:.1}%) [target >= 90%]",
        a.display(),
        b.display(),
        r.within,
        r.compared,
        r.min_ms * 1e3,
        r.tolerance * 100.0,
        100.0 * r.share()
    );
    for (k, c, w) in &r.by_kind {
        println!(
            "  {k:<8} {w:>6} of {c:>6} ({:.1}%)",
            100.0 * *w as f64 / (*c).max(1) as f64
        );
    }
    if let Some(k) = &r.worst_key {
        println!("  largest difference {:.1}% at {k}", 100.0 * r.worst);
    }
    Ok(())
}

pub(crate) fn find_model_for(name: &str) -> Result<PathBuf> {
    store::find_model(name).ok_or_else(|| {
        anyhow!(
            "no model for {name} ({} in none of {}); give --model FILE or run `autopcg tune`",
            store::model_file_name(name),
            store::search_dirs_line()
        )
    })
}

pub(crate) fn eval_model(a: EvalArgs) -> Result<()> {
    if let Some(p) = &a.stability {
        return stability(p, a.json);
    }
    let (model_path, eval_path) = match &a.from {
        Some(from) => {
            let model_path = match &a.model {
                Some(p) => p.clone(),
                None => {
                    let p = Profile::read(from)?;
                    let name = p
                        .device()
                        .map(|d| d.name.clone())
                        .ok_or_else(|| anyhow!("{}: the profile has no header", from.display()))?;
                    find_model_for(&name)?
                }
            };
            (model_path, from.clone())
        }
        None => {
            let dev = crate::common::open_gpu(a.device_ordinal)?;
            let mut m = GpuMeasurer::new(&dev);
            let spec = m.device().clone();
            let model_path = match &a.model {
                Some(p) => p.clone(),
                None => find_model_for(&spec.name)?,
            };
            let eval_path = match &a.profile {
                Some(p) => p.clone(),
                None => model_path.with_file_name(format!("{}.eval.jsonl", spec.slug())),
            };
            // Fail before measuring if the model is unusable. The held-out matrices are
            // timed by the protocol the model's products were timed with.
            let model = ModelFile::load_for_device(&model_path, &spec.name)?;
            let mut opts = SweepOptions::new(false, base_dir());
            opts.spmv_l2_cold = model.spmv.alone_l2_cold;
            let mut writer = open_profile(&eval_path, &spec, false)?;
            eprintln!(
                "measuring the evaluation matrices on {} into {}{}",
                spec.name,
                eval_path.display(),
                if writer.resumed() > 0 {
                    format!(" (resuming {} records)", writer.resumed())
                } else {
                    String::new()
                }
            );
            let mut display = Display::new();
            let r = run_eval_set(&mut m, &mut writer, &opts, &mut display);
            display.finish();
            r.with_context(|| {
                format!(
                    "the evaluation stopped; what it measured is kept in {} and a new run resumes it",
                    eval_path.display()
                )
            })?;
            (model_path, eval_path)
        }
    };
    let model = ModelFile::load(&model_path)?;
    let eval = Profile::read(&eval_path)?;
    let set = if a.fit_set {
        MatrixSet::Fit
    } else {
        MatrixSet::Eval
    };
    let rep = judge_set(&model, &model_path, &eval, &eval_path, set)?;
    if a.json {
        let j = serde_json::json!({
            "model": model_path.display().to_string(),
            "eval_profile": eval_path.display().to_string(),
            "set": set_name(set),
            "device": model.device.name,
            "spmv": rep,
            "vector_held_out": model.quality.vector_held_out,
            "dot_held_out": model.quality.dot_held_out,
        });
        println!("{j}");
    } else {
        print_report(&model, &model_path, &eval_path, &rep, set);
    }
    Ok(())
}

/// Judges `model` on the held-out matrices of the evaluation profile `eval` (which must be of
/// the model's device), with the shipped fallback rule beside it: what `eval-model` prints and
/// `report` plots.
pub(crate) fn judge(
    model: &ModelFile,
    model_path: &Path,
    eval: &Profile,
    eval_path: &Path,
) -> Result<SpmvEvalReport> {
    judge_set(model, model_path, eval, eval_path, MatrixSet::Eval)
}

/// [`judge`] on the matrices of `set` of the profile `eval` (`MatrixSet::Fit`: a tune
/// profile's, the model's own fit matrices).
fn judge_set(
    model: &ModelFile,
    model_path: &Path,
    eval: &Profile,
    eval_path: &Path,
    set: MatrixSet,
) -> Result<SpmvEvalReport> {
    if let Some(d) = eval.device() {
        if d.name != model.device.name {
            return Err(anyhow!(
                "{} was measured on {:?} but the model {} is for {:?}",
                eval_path.display(),
                d.name,
                model_path.display(),
                model.device.name
            ));
        }
    }
    // The shipped fallback rule, judged on the same matrices as the model.
    let fallback = |w: &autopcg_model::work::SpmvWork| {
        autopcg::generator::fallback::spmv_candidate(w.n, w.nnz, w.ndiag)
    };
    evaluate_against(
        &model.spmv,
        model.classifier.as_ref(),
        eval,
        Some(set),
        Some(&fallback),
    )
    .with_context(|| {
        let hint = if set == MatrixSet::Eval && !eval.matrices.is_empty() {
            " (a tune profile holds the fit matrices: --fit-set judges those, in-sample)"
        } else {
            ""
        };
        format!(
            "evaluating {} on {}{hint}",
            model_path.display(),
            eval_path.display()
        )
    })
}

/// The `set` field of the JSON report.
fn set_name(set: MatrixSet) -> &'static str {
    match set {
        MatrixSet::Fit => "fit",
        MatrixSet::Eval => "eval",
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn print_report(
    model: &ModelFile,
    model_path: &std::path::Path,
    eval: &std::path::Path,
    r: &SpmvEvalReport,
    set: MatrixSet,
) {
    println!(
        "model {} ({}) judged on {}: {} {}, {} predictions",
        model_path.display(),
        model.device.name,
        eval.display(),
        r.matrices,
        match set {
            MatrixSet::Fit => "fit matrices (in-sample: the model was fitted on them)",
            MatrixSet::Eval => "held-out matrices",
        },
        r.predictions
    );
    println!("{}", r.table());
    println!("summary (targets in brackets):");
    println!(
        "  SpMV prediction error: median {:.1}% [<= 5%], p90 {:.1}% [<= 15%]: {}",
        100.0 * r.median_rel_err,
        100.0 * r.p90_rel_err,
        verdict(r.accuracy_target_met)
    );
    println!(
        "  selection: {:.0}% of matrices within 5% of the measured best [>= 95%], geomean slowdown \
         {:.3} [<= 1.03], worst {:.3}: {}",
        100.0 * r.model.near_best_share,
        r.model.geomean_slowdown,
        r.model.max_slowdown,
        verdict(r.selection_target_met)
    );
    println!(
        "  fixed rule csr scalar 256 threads: geomean slowdown {:.3} ({} matrices)",
        r.fixed_rule.geomean_slowdown, r.fixed_rule.matrices
    );
    if let (Some(b), Some(c)) = (r.best_over_cusparse, r.chosen_over_cusparse) {
        println!(
            "  against cuSPARSE's best algorithm (geomean time ratio, below 1 is faster): chosen {c:.3}, \
             best measured {b:.3} ({} matrices)",
            r.cusparse_matrices
        );
    }
    if let Some(c) = &r.classifier {
        println!(
            "  classifier: agrees with the model on {:.0}%, picks the measured best on {:.0}%, \
             geomean slowdown {:.3}",
            100.0 * c.agrees_with_model,
            100.0 * c.agrees_with_best,
            c.selection.geomean_slowdown
        );
    }
    for (what, t) in [
        ("vector-update trees", &model.quality.vector_held_out),
        ("reduction trees", &model.quality.dot_held_out),
    ] {
        println!(
            "  {what}: {:.0}% of {} held-out sizes within 3% of the best [>= 95%], worst {:.3}: {}",
            100.0 * t.share_within,
            t.count,
            t.worst_ratio,
            verdict(t.meets_target())
        );
    }
}
