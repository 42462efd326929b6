//! Which performance model chooses a plan: the one model-resolution function every command
//! uses (`resolve_model`, with the `gpu` feature; without it there are no models and a named
//! model file is an error). A model file is parsed once per process: later resolutions of the
//! same file (same length and modification time) reuse it.
use std::path::PathBuf;

#[cfg(feature = "gpu")]
use autopcg_model::{store, ModelFile};

#[cfg(feature = "gpu")]
use crate::Error;

/// Which performance model chooses the GPU plan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModelChoice {
    /// The model file of the device found by name ([`store::find_model`]); the fallback rule,
    /// with a note, when there is none or it cannot be read.
    #[default]
    Auto,
    /// This model file; an error when it cannot be read or is for another device — on every
    /// device, the CPU included, so a mistyped path never passes silently.
    File(PathBuf),
    /// No model: the fallback rule.
    Off,
}

impl std::str::FromStr for ModelChoice {
    type Err = std::convert::Infallible;
    /// `auto`, `none`, or a file path.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "auto" => ModelChoice::Auto,
            "none" => ModelChoice::Off,
            f => ModelChoice::File(PathBuf::from(f)),
        })
    }
}

/// A model that was found and read, with the path it came from.
#[cfg(feature = "gpu")]
#[derive(Debug, Clone)]
pub struct LoadedModel {
    /// The model.
    pub file: ModelFile,
    /// Where it was read from.
    pub path: PathBuf,
}

#[cfg(feature = "gpu")]
impl LoadedModel {
    /// The path as plans and notes print it.
    pub fn label(&self) -> String {
        self.path.display().to_string()
    }
}

/// The result of [`resolve_model`]: the model, if any, and one-line notes on why there is none.
#[cfg(feature = "gpu")]
#[derive(Debug, Clone, Default)]
pub struct ResolvedModel {
    /// The model to choose with.
    pub model: Option<LoadedModel>,
    /// Why no model (or a note on the one found).
    pub notes: Vec<String>,
}

/// Resolves `choice` for a device called `device` (`None` when no GPU is in use):
/// - [`ModelChoice::Off`]: no model;
/// - [`ModelChoice::File`]: the file must load and validate (and be for `device` when one is
///   given), else an error — whatever the device;
/// - [`ModelChoice::Auto`]: with a device, its model file found by name, or none with a note
///   (none found, or found but unreadable); without a device, none with a note.
#[cfg(feature = "gpu")]
pub fn resolve_model(choice: &ModelChoice, device: Option<&str>) -> Result<ResolvedModel, Error> {
    match choice {
        ModelChoice::Off => Ok(ResolvedModel::default()),
        ModelChoice::File(p) => {
            let file = load_cached(p, device)?;
            Ok(ResolvedModel {
                model: Some(LoadedModel {
                    file,
                    path: p.clone(),
                }),
                notes: Vec::new(),
            })
        }
        ModelChoice::Auto => {
            let Some(name) = device else {
                return Ok(ResolvedModel::default());
            };
            match store::find_model(name) {
                None => Ok(ResolvedModel {
                    model: None,
                    notes: vec![format!(
                        "no model for {name} (looked for {} in {}): default rule; run \
                         `autopcg tune` to fit one",
                        store::model_file_name(name),
                        store::search_dirs_line()
                    )],
                }),
                Some(p) => match load_cached(&p, Some(name)) {
                    Ok(file) => Ok(ResolvedModel {
                        model: Some(LoadedModel { file, path: p }),
                        notes: Vec::new(),
                    }),
                    Err(e) => Ok(ResolvedModel {
                        model: None,
                        notes: vec![format!("model not used ({e}): default rule")],
                    }),
                },
            }
        }
    }
}

/// [`ModelFile::load`] (and the device check of [`ModelFile::load_for_device`] when `device` is
/// given), parsing a file only the first time this process sees it with its current length and
/// modification time: a model file is some hundred kilobytes of JSON, and parsing it again cost
/// a warm setup more than everything else on small matrices.
#[cfg(feature = "gpu")]
fn load_cached(
    path: &std::path::Path,
    device: Option<&str>,
) -> Result<ModelFile, autopcg_model::ModelError> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    use std::time::SystemTime;
    type Stamp = (u64, Option<SystemTime>);
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, (Stamp, ModelFile)>>> = OnceLock::new();
    let stamp: Option<Stamp> = std::fs::metadata(path)
        .ok()
        .map(|m| (m.len(), m.modified().ok()));
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let hit = stamp.and_then(|st| {
        let c = cache.lock().ok()?;
        c.get(path)
            .filter(|(s, _)| *s == st && st.1.is_some())
            .map(|(_, m)| m.clone())
    });
    let file = match hit {
        Some(m) => m,
        None => {
            let m = ModelFile::load(path)?;
            if let (Some(st), Ok(mut c)) = (stamp, cache.lock()) {
                c.insert(path.to_path_buf(), (st, m.clone()));
            }
            m
        }
    };
    if let Some(name) = device {
        file.check_device(path, name)?;
    }
    Ok(file)
}

#[cfg(all(test, feature = "gpu"))]
mod tests {
    use super::*;

    #[test]
    fn a_model_file_is_parsed_once_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        let shipped = std::fs::read_to_string("../../models/nvidia-h200.json").unwrap();
        std::fs::write(&p, &shipped).unwrap();
        let choice = ModelChoice::File(p.clone());
        let a = resolve_model(&choice, Some("NVIDIA H200")).unwrap();
        let b = resolve_model(&choice, None).unwrap();
        assert_eq!(
            a.model.unwrap().file.device.name,
            b.model.unwrap().file.device.name
        );
        // The device check still applies to a cached file.
        assert!(resolve_model(&choice, Some("NVIDIA H100 80GB HBM3")).is_err());
        // A changed file (another length) is read again: here it no longer parses.
        std::fs::write(&p, "{ not a model").unwrap();
        assert!(resolve_model(&choice, None).is_err());
        std::fs::write(&p, &shipped).unwrap();
        assert!(resolve_model(&choice, None).is_ok());
    }
}
