//! Which performance model chooses a plan: the one model-resolution function every command
//! uses (`resolve_model`, with the `gpu` feature; without it there are no models and a named
//! model file is an error).
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
            let file = match device {
                Some(name) => ModelFile::load_for_device(p, name)?,
                None => ModelFile::load(p)?,
            };
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
                Some(p) => match ModelFile::load_for_device(&p, name) {
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
