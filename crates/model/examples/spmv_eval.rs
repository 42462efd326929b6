//! Fits the SpMV model and classifier on the fit set of a tune profile and evaluates them on
//! the held-out matrices of an evaluation profile.
//!
//! `cargo run --release -p autopcg-model --example spmv_eval -- PROFILE EVAL_PROFILE [--verbose] [--json=REPORT.json] [--se=SE_MULTIPLE] [--l2-only] [--depth-only]`
use std::process::ExitCode;

use autopcg_model::profile::{MatrixSet, Profile};
use autopcg_model::spmv::FeatureSet;
use autopcg_model::{evaluate_spmv, ClassifierOptions, SpmvClassifier, SpmvFitOptions, SpmvModel};

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "--verbose");
    let json = args
        .iter()
        .find_map(|a| a.strip_prefix("--json="))
        .map(str::to_string);
    let json = json.as_deref();
    let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [fit_path, eval_path] = paths.as_slice() else {
        return Err("usage: spmv_eval PROFILE EVAL_PROFILE [--verbose] [--json=REPORT.json] [--se=SE_MULTIPLE] [--l2-only] [--depth-only]".into());
    };
    let fit = Profile::read(fit_path).map_err(|e| e.to_string())?;
    let eval = Profile::read(eval_path).map_err(|e| e.to_string())?;
    let mut opts = SpmvFitOptions::default();
    if let Some(se) = args.iter().find_map(|a| a.strip_prefix("--se=")) {
        opts.se_multiple = se.parse().map_err(|e| format!("--se: {e}"))?;
    }
    if args.iter().any(|a| a == "--l2-only") {
        opts.feature_sets = FeatureSet::with_l2();
    }
    if args.iter().any(|a| a == "--depth-only") {
        opts.feature_sets.retain(|f| f.depth);
    }
    let model = SpmvModel::fit(&fit, &opts).map_err(|e| e.to_string())?;
    let classifier = SpmvClassifier::fit(&fit, &ClassifierOptions::default()).ok();
    if verbose {
        println!("{}", model.table());
    }
    let report = evaluate_spmv(&model, classifier.as_ref(), &eval, Some(MatrixSet::Eval))
        .map_err(|e| e.to_string())?;
    println!("{}", report.table());
    if verbose {
        for m in &report.per_matrix {
            println!(
                "{:<32} model {:<44} classifier {}",
                m.matrix,
                m.chosen.as_deref().unwrap_or("-"),
                m.classifier.as_deref().unwrap_or("-")
            );
        }
    }
    if let Some(path) = json {
        let text = serde_json::to_string(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spmv_eval: {e}");
            ExitCode::FAILURE
        }
    }
}
