//! Golden plans: for the shipped fixtures and a few generated families, with the committed H200
//! and H100 models and without a model (the fallback rule), the plan chosen for every
//! preconditioner — format, kernel and launch of every step, the SSOR-AI form, the predicted
//! times — equals the one recorded in `tests/golden_plans.json`.
//!
//! The file pins selection behaviour: a change that alters a plan fails here and must either be
//! fixed or regenerate the file on purpose (`AUTOPCG_UPDATE_GOLDEN=1 cargo test -p
//! autopcg-generator --test golden`) with the reason in the commit message.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use autopcg_catalog::DeviceProps;
use autopcg_generator::{plan, ModelRef, PlanRequest, Target};
use autopcg_model::file::ModelFile;
use autopcg_solver::{auto_omega, PrecondKind, SsorForm};
use autopcg_sparse::mm::{read_matrix, ReadOptions};
use autopcg_sparse::{families, CsrMatrix};
use serde::{Deserialize, Serialize};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One recorded plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct GoldenPlan {
    /// The preconditioner as applied (`ssor-ai-factored`, `ssor-ai-explicit`, ...).
    precond_applied: String,
    /// `step | format | kernel | config` per step, in execution order.
    steps: Vec<String>,
    /// Predicted ms per step (`None` where no model predicted it).
    predicted_ms: Vec<Option<f64>>,
    /// Predicted ms per iteration, when a model chose.
    predicted_iteration_ms: Option<f64>,
}

fn matrices() -> Vec<(String, CsrMatrix)> {
    let mut v = Vec::new();
    for f in [
        "bcsstk01",
        "1138_bus",
        "bcsstk13",
        "s3rmt3m3",
        "poisson3d_16",
        "fem2d_3000",
    ] {
        let p = root().join("matrices").join(format!("{f}.mtx"));
        let m = read_matrix(&p, &ReadOptions::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .matrix;
        v.push((f.to_string(), m));
    }
    let gen = |name: &str, m: Result<CsrMatrix, autopcg_sparse::SparseError>| {
        (
            name.to_string(),
            m.unwrap_or_else(|e| panic!("{name}: {e}")),
        )
    };
    v.push(gen("poisson3d_7pt_40", families::poisson3d_7pt(40, 40, 40)));
    v.push(gen("poisson2d_9pt_300", families::poisson2d_9pt(300, 300)));
    v.push(gen("fem2d_50000", families::fem_p1_2d(50_000, 1)));
    v.push(gen(
        "powerlaw_30000",
        families::random_powerlaw_spd(30_000, 12.0, 1.4, 3),
    ));
    v.push(gen("banded_50000_8", families::banded_spd(50_000, 8, 1)));
    v
}

/// The props a GPU of the model's device would report (the fields selection reads come from
/// the model's device record; the rest are those of a Hopper GPU).
fn props_of(m: &ModelFile) -> DeviceProps {
    let d = &m.device;
    let mut p = DeviceProps::hopper_like();
    p.name = d.name.clone();
    p.compute_capability = d.compute_capability;
    p.sm_count = d.sm_count;
    p.max_threads_per_block = d.max_threads_per_block;
    p.max_threads_per_sm = d.max_threads_per_sm;
    p.max_blocks_per_sm = d.max_blocks_per_sm;
    p.regs_per_sm = d.regs_per_sm;
    p.smem_per_sm = d.smem_per_sm;
    p.total_mem = d.total_mem;
    p.l2_bytes = d.l2_bytes;
    p.warp_size = d.warp_size;
    p.max_grid_x = d.max_grid_x;
    p
}

/// The preconditioner variants `solve` offers, as the CLI builds them (omega auto; `auto`
/// lets the model choose SSOR-AI's form).
fn kinds(a: &CsrMatrix) -> Vec<(&'static str, PrecondKind, bool)> {
    let w = auto_omega(a);
    let ssor = |order: u8, form: SsorForm| PrecondKind::SsorAi {
        order,
        omega: Some(w),
        form,
    };
    vec![
        ("none", PrecondKind::None, false),
        ("jacobi", PrecondKind::Jacobi, false),
        ("ssor-ai", ssor(1, SsorForm::Factored), true),
        ("ssor-ai2", ssor(2, SsorForm::Factored), true),
        ("ssor-ai-factored", ssor(1, SsorForm::Factored), false),
        ("ssor-ai-explicit", ssor(1, SsorForm::Explicit), false),
    ]
}

/// The plan the entry point chooses, as `solve --device gpu` asks for it: omega auto, the
/// model's form choice for `auto`, polling every 16 iterations.
fn plan_now(
    a: &CsrMatrix,
    kind: &PrecondKind,
    form_auto: bool,
    model: Option<&ModelFile>,
    props: &DeviceProps,
) -> GoldenPlan {
    let mut req = PlanRequest::new(a, *kind, Target::Gpu(props.clone()));
    req.ssor_form_auto = form_auto;
    req.model = model.map(|file| ModelRef {
        file,
        label: "golden",
    });
    let p = plan(&req).expect("plan");
    GoldenPlan {
        precond_applied: p.precond_applied().to_string(),
        steps: p
            .steps
            .steps
            .iter()
            .map(|s| format!("{} | {} | {} | {}", s.step, s.format, s.kernel, s.config))
            .collect(),
        predicted_ms: p.steps.steps.iter().map(|s| s.predicted_ms).collect(),
        predicted_iteration_ms: p.predicted_iteration_ms,
    }
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
        _ => false,
    }
}

#[test]
fn plans_match_the_recorded_ones() {
    let models: Vec<(&str, Option<ModelFile>)> = vec![
        (
            "nvidia-h200",
            Some(ModelFile::load(root().join("models/nvidia-h200.json")).expect("H200 model")),
        ),
        (
            "nvidia-h100",
            Some(ModelFile::load(root().join("models/nvidia-h100.json")).expect("H100 model")),
        ),
        ("fallback", None),
    ];
    let h200 = models[0].1.as_ref().map(props_of).expect("H200 props");
    let mut got: BTreeMap<String, GoldenPlan> = BTreeMap::new();
    for (mname, a) in matrices() {
        for (kname, kind, auto) in kinds(&a) {
            for (model_name, model) in &models {
                let props = model.as_ref().map_or_else(|| h200.clone(), props_of);
                let key = format!("{mname} / {kname} / {model_name}");
                got.insert(key, plan_now(&a, &kind, auto, model.as_ref(), &props));
            }
        }
    }
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden_plans.json");
    if std::env::var("AUTOPCG_UPDATE_GOLDEN").as_deref() == Ok("1") {
        let text = serde_json::to_string_pretty(&got).expect("serialise") + "\n";
        std::fs::write(&file, text).expect("write golden file");
        eprintln!("wrote {} plans to {}", got.len(), file.display());
        return;
    }
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (regenerate with AUTOPCG_UPDATE_GOLDEN=1)",
            file.display()
        )
    });
    let want: BTreeMap<String, GoldenPlan> =
        serde_json::from_str(&text).expect("golden file parses");
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>(),
        "the cases differ"
    );
    let mut bad = Vec::new();
    for (k, w) in &want {
        let g = &got[k];
        let same = w.precond_applied == g.precond_applied
            && w.steps == g.steps
            && w.predicted_ms.len() == g.predicted_ms.len()
            && w.predicted_ms
                .iter()
                .zip(&g.predicted_ms)
                .all(|(a, b)| close(*a, *b))
            && close(w.predicted_iteration_ms, g.predicted_iteration_ms);
        if !same {
            bad.push(format!("{k}:\n  recorded {w:?}\n  now      {g:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} plans changed:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
