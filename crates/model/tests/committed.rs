//! The committed models and profiles (`models/`) load with this build, and re-fitting a
//! committed profile reproduces its committed model: the typed identities read the strings the
//! files have always held.
use std::path::{Path, PathBuf};

use autopcg_catalog::{KernelId, LaunchConfig};
use autopcg_model::profile::Profile;
use autopcg_model::ModelFile;

const GPUS: [&str; 2] = ["nvidia-h100", "nvidia-h200"];

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

#[test]
fn committed_model_files_load() {
    for gpu in GPUS {
        let m = ModelFile::load(models_dir().join(format!("{gpu}.json"))).unwrap();
        assert_eq!(m.device.slug(), gpu);
        assert_eq!(m.spmv.device, m.device);
        assert!(m.vector.pick("cg_update", 1 << 20).is_some());
        assert!(m.dot.pick("dot3", 1 << 20).is_some());
    }
}

#[test]
fn committed_profiles_load_and_their_records_agree_with_the_catalogue() {
    for gpu in GPUS {
        for kind in ["profile", "eval"] {
            let p = Profile::read(models_dir().join(format!("{gpu}.{kind}.jsonl.gz"))).unwrap();
            let dev = p.device().unwrap().clone();
            assert_eq!(dev.slug(), gpu);
            assert!(!p.spmv.is_empty() && !p.matrices.is_empty());
            if kind == "eval" {
                continue;
            }
            // Eq. 3-2 of the catalogue gives every recorded block count.
            assert!(!p.occupancy.is_empty());
            for o in &p.occupancy {
                o.check(&dev).unwrap();
            }
            // The covering block counts are those of the kernels' elements per thread.
            let covers = |k: KernelId, n: u64, threads: u32, blocks: u32| {
                let e = k.elements_per_thread().unwrap();
                LaunchConfig::per_item(n.div_ceil(u64::from(e)), threads).blocks == blocks
            };
            for v in p.vector.iter().filter(|v| v.sample.nb_multiple.is_none()) {
                assert!(
                    covers(v.kernel_id(), v.sample.n, v.sample.threads, v.sample.blocks),
                    "{v:?}"
                );
            }
            for d in p.dot.iter().filter(|d| d.sample.nb_multiple.is_none()) {
                let k = KernelId::Reduction(d.kernel);
                assert!(
                    covers(k, d.sample.n, d.sample.threads, d.sample.blocks),
                    "{d:?}"
                );
            }
        }
    }
}

/// `v` with every number replaced by 0, and its numbers in document order: two documents
/// agree to rounding when their skeletons are equal and their numbers close.
fn skeleton(v: &serde_json::Value, numbers: &mut Vec<f64>) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(x) => {
            numbers.push(x.as_f64().unwrap_or(f64::NAN));
            Value::from(0)
        }
        Value::Array(items) => items.iter().map(|x| skeleton(x, numbers)).collect(),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, x)| (k.clone(), skeleton(x, numbers)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Asserts that `fitted` is `committed` up to rounding (parallel sums may add in another order
/// on another machine).
fn assert_reproduces(fitted: &serde_json::Value, committed: &serde_json::Value, what: &str) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    assert_eq!(
        skeleton(fitted, &mut a),
        skeleton(committed, &mut b),
        "{what}"
    );
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let tol = 1e-9 * x.abs().max(y.abs()) + 1e-300;
        assert!((x - y).abs() <= tol, "{what}: number {i}: {x} vs {y}");
    }
}

#[test]
fn refitting_the_committed_profiles_reproduces_their_models() {
    for gpu in GPUS {
        let file = format!("{gpu}.profile.jsonl.gz");
        let p = Profile::read(models_dir().join(&file)).unwrap();
        let fitted = ModelFile::fit(&p, &file).unwrap();
        let fitted = serde_json::to_value(&fitted).unwrap();
        let text = std::fs::read_to_string(models_dir().join(format!("{gpu}.json"))).unwrap();
        let committed: serde_json::Value = serde_json::from_str(&text).unwrap();
        for part in [
            "spmv",
            "vector",
            "dot",
            "classifier",
            "epilogue",
            "quality",
            "profile",
            "ssor_form",
        ] {
            assert_reproduces(&fitted[part], &committed[part], &format!("{gpu} {part}"));
        }
        assert_eq!(fitted["device"]["name"], committed["device"]["name"]);
    }
}

/// The H100's form tree, fitted on its form stage, picks SSOR-AI's form as measured there: 3D
/// Poisson explicit while its iteration stays in L2 (54^3) and factored past it (57^3 on), the
/// 2D grids and FEM meshes explicit at every size, the high-fill matrices factored past L2.
#[test]
fn the_h100_form_tree_picks_the_measured_forms() {
    use autopcg_model::form::FormPick::{Explicit, Factored};
    let m = ModelFile::load(models_dir().join("nvidia-h100.json")).unwrap();
    let f = m
        .ssor_form
        .as_ref()
        .expect("the H100 model has a form tree");
    let pick = |name: &str| {
        let p = f.points.iter().find(|p| p.matrix == name).unwrap();
        f.pick(&p.features)
    };
    for (name, form) in [
        ("poisson3d-n54", Explicit),
        ("poisson3d-n57", Factored),
        ("poisson3d-n100", Factored),
        ("poisson2d-n1000", Explicit),
        ("poisson2d-n3162", Explicit),
        ("fem2d-n600000-s21", Explicit),
        ("poisson3d-27pt-n80", Factored),
        ("1138_bus-kron-poisson2d30", Factored),
    ] {
        assert_eq!(pick(name), form, "{name} under {}", f.tree.describe());
    }
    assert!(
        f.held_out.right * 10 >= f.held_out.matrices * 9,
        "{:?}",
        f.held_out
    );
}

/// The form stage timed again on the same H100 (`tune --forms-only` on the committed profile
/// with its form records taken out, 2026-12-07; the 75 form records it wrote are
/// `tests/data/nvidia-h100.form-rerun.jsonl`): every matrix's ratio of the two forms moved by a
/// few percent at most, and the least leave-one-out cost moved from depth 2 to depth 3. The
/// one-standard-error rule takes depth 2 on both runs, and the same tree: fitted on the re-run,
/// the form model is the committed one's.
#[test]
fn the_form_tree_is_the_same_fitted_on_a_rerun_of_the_form_stage() {
    use autopcg_model::form::FormModel;
    use autopcg_model::profile::FormRecord;
    let m = ModelFile::load(models_dir().join("nvidia-h100.json")).unwrap();
    let committed = m.ssor_form.as_ref().unwrap();
    let mut p = Profile::read(models_dir().join("nvidia-h100.profile.jsonl.gz")).unwrap();
    let rerun =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nvidia-h100.form-rerun.jsonl");
    let text = std::fs::read_to_string(&rerun).unwrap();
    p.forms = text
        .lines()
        .map(|l| serde_json::from_str::<FormRecord>(l).unwrap())
        .collect();
    assert_eq!(p.forms.len(), 75);
    let l2 = u64::from(p.header.as_ref().unwrap().device.l2_bytes);
    let f = FormModel::fit(&p, l2).unwrap();
    let least = (0..f.cross_validated.len())
        .min_by(|&a, &b| f.cross_validated[a].total_cmp(&f.cross_validated[b]))
        .unwrap();
    assert_eq!(least + 1, 3, "{:?}", f.cross_validated);
    assert_eq!(committed.depth, 2);
    assert_eq!(
        f.depth, 2,
        "{:?} +- {:?}",
        f.cross_validated, f.cross_validated_error
    );
    assert_eq!(f.tree, committed.tree, "{}", f.tree.describe());
}
