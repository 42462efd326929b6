//! Fits the SpMV model and classifier on the fit set of a tune profile and evaluates them on
//! the held-out matrices of an evaluation profile.
//!
//! `cargo run --release -p autopcg-model --example spmv_eval -- PROFILE EVAL_PROFILE [--verbose]`
use std::process::ExitCode;

use autopcg_model::profile::{MatrixSet, Profile};
use autopcg_model::{evaluate_spmv, ClassifierOptions, SpmvClassifier, SpmvFitOptions, SpmvModel};

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "--verbose");
    let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [fit_path, eval_path] = paths.as_slice() else {
        return Err("usage: spmv_eval PROFILE EVAL_PROFILE [--verbose]".into());
    };
    let fit = Profile::read(fit_path).map_err(|e| e.to_string())?;
    let eval = Profile::read(eval_path).map_err(|e| e.to_string())?;
    let model = SpmvModel::fit(&fit, &SpmvFitOptions::default()).map_err(|e| e.to_string())?;
    let classifier = SpmvClassifier::fit(&fit, &ClassifierOptions::default()).ok();
    if verbose {
        println!("{}", model.table());
    }
    let report = evaluate_spmv(&model, classifier.as_ref(), &eval, Some(MatrixSet::Eval))
        .map_err(|e| e.to_string())?;
    println!("{}", report.table());
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
