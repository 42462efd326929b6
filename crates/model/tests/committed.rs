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
            for v in p.vector.iter().filter(|v| v.nb_multiple.is_none()) {
                assert!(covers(v.kernel_id(), v.n, v.threads, v.blocks), "{v:?}");
            }
            for d in p.dot.iter().filter(|d| d.nb_multiple.is_none()) {
                let k = KernelId::Reduction(d.kernel);
                assert!(covers(k, d.n, d.threads, d.blocks), "{d:?}");
            }
        }
    }
}

/// `a` and `b` agree to rounding (parallel sums may add in another order).
fn close(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs()) + 1e-300,
                "{at}: {x} vs {y}"
            );
        }
        (V::Array(x), V::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                close(x, y, &format!("{at}[{i}]"));
            }
        }
        (V::Object(x), V::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}: keys"
            );
            for (k, v) in x {
                close(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
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
        for part in ["spmv", "vector", "dot", "classifier", "quality", "profile"] {
            close(&fitted[part], &committed[part], &format!("{gpu} {part}"));
        }
        assert_eq!(fitted["device"]["name"], committed["device"]["name"]);
    }
}
