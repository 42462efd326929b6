//! `autopcg features`: the matrix features the models read, and with a model the predicted
//! SpMV time of every candidate.
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde_json::json;

use autopcg::sparse::features;
use autopcg::sparse::mm::{self, ReadOptions, SymmetryPolicy};
use autopcg::{resolve_model, ModelChoice};

#[derive(Args)]
pub(crate) struct FeaturesArgs {
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

pub(crate) fn features_cmd(a: FeaturesArgs) -> Result<()> {
    let opts = ReadOptions {
        symmetry: SymmetryPolicy::AsStored,
        require_square: false,
    };
    let m = mm::read_matrix(&a.matrix, &opts)?.matrix;
    let f = features::features(&m);
    let (model, note) = features_model(&a.model)?;
    let predictions = model.as_ref().map(|lm| {
        let w = autopcg::model::work::spmv_work(&m);
        let classifier = lm.file.classifier.as_ref().and_then(|c| c.predict(&f, &w));
        (lm.label(), lm.file.spmv.predict(&w), classifier)
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

/// The model `features` predicts with, or why there is none: a named file must load (on any
/// machine); `auto` takes the model of the GPU present, and without a GPU there is none.
fn features_model(choice: &str) -> Result<(Option<autopcg::LoadedModel>, Option<String>)> {
    let choice: ModelChoice = match choice.parse() {
        Ok(c) => c,
        Err(e) => match e {},
    };
    let device = match (&choice, autopcg::open_gpu(0)) {
        (ModelChoice::Auto, Ok(d)) => Some(d.props().name.clone()),
        (ModelChoice::Auto, Err(_)) => {
            return Ok((
                None,
                Some("no GPU: no predicted SpMV times (give --model FILE for a model)".into()),
            ))
        }
        _ => None,
    };
    let r = resolve_model(&choice, device.as_deref())?;
    Ok((r.model, r.notes.into_iter().next()))
}
