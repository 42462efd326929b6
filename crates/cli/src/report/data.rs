//! The report's inputs: the model file, the profile it was fitted from, the held-out
//! evaluation profile and the matrices, with their defaults; every error names its file.
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};

use autopcg::model::profile::Profile;
use autopcg::model::ModelFile;
use autopcg::CsrMatrix;

/// What the command line asked for.
pub(crate) struct Request {
    pub(crate) model: Option<PathBuf>,
    pub(crate) profile: Option<PathBuf>,
    pub(crate) eval: Option<PathBuf>,
    pub(crate) matrices: Vec<PathBuf>,
}

/// A profile and where it was read from.
pub(crate) struct LoadedProfile {
    pub(crate) path: PathBuf,
    pub(crate) profile: Profile,
}

/// A matrix and where it was read from.
pub(crate) struct LoadedMatrix {
    pub(crate) path: PathBuf,
    pub(crate) matrix: CsrMatrix,
}

/// Everything the report shows.
pub(crate) struct Inputs {
    pub(crate) model_path: PathBuf,
    pub(crate) model: ModelFile,
    /// The fit profile (`None`: not given and none beside the model).
    pub(crate) profile: Option<LoadedProfile>,
    /// The held-out evaluation profile (`None`: not given and none beside the model).
    pub(crate) eval: Option<LoadedProfile>,
    pub(crate) matrices: Vec<LoadedMatrix>,
}

impl Inputs {
    /// Reads every input; the model first, so a bad model fails before the slower reads.
    pub(crate) fn load(r: &Request) -> Result<Inputs> {
        let model_path = match &r.model {
            Some(p) => p.clone(),
            None => default_model()?,
        };
        let model = ModelFile::load(&model_path)?;
        let profile = match &r.profile {
            Some(p) => Some(p.clone()),
            None => beside(&model_path, "profile"),
        }
        .map(|p| read_profile(&p, &model, &model_path))
        .transpose()?;
        let eval = match &r.eval {
            Some(p) => Some(p.clone()),
            None => beside(&model_path, "eval"),
        }
        .map(|p| read_profile(&p, &model, &model_path))
        .transpose()?;
        let matrices = r
            .matrices
            .iter()
            .map(|p| {
                Ok(LoadedMatrix {
                    path: p.clone(),
                    matrix: crate::common::read_matrix(p, false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Inputs {
            model_path,
            model,
            profile,
            eval,
            matrices,
        })
    }

    /// Every file read (the output must be none of them).
    pub(crate) fn paths(&self) -> Vec<&Path> {
        let mut v = vec![self.model_path.as_path()];
        v.extend(self.profile.iter().map(|p| p.path.as_path()));
        v.extend(self.eval.iter().map(|p| p.path.as_path()));
        v.extend(self.matrices.iter().map(|m| m.path.as_path()));
        v
    }
}

/// The model of the GPU found here, by its name.
fn default_model() -> Result<PathBuf> {
    let dev = autopcg::open_gpu(0).map_err(|why| {
        anyhow!(
            "no --model given and no GPU here to find one by its name ({why}): give --model \
             FILE, e.g. models/nvidia-h200.json"
        )
    })?;
    crate::evalmodel::find_model_for(&dev.props().name)
}

/// `<stem>.<kind>.jsonl.gz` (else `.jsonl`) beside the model file, when one exists.
fn beside(model: &Path, kind: &str) -> Option<PathBuf> {
    let stem = model.file_stem()?.to_string_lossy().into_owned();
    [".jsonl.gz", ".jsonl"]
        .iter()
        .map(|ext| model.with_file_name(format!("{stem}.{kind}{ext}")))
        .find(|p| p.is_file())
}

/// Reads a profile that must be of the model's device.
fn read_profile(path: &Path, model: &ModelFile, model_path: &Path) -> Result<LoadedProfile> {
    let profile =
        Profile::read(path).with_context(|| format!("reading the profile {}", path.display()))?;
    match profile.device() {
        Some(d) if d.name != model.device.name => Err(anyhow!(
            "{} was measured on {:?} but the model {} is for {:?}",
            path.display(),
            d.name,
            model_path.display(),
            model.device.name
        )),
        Some(_) => Ok(LoadedProfile {
            path: path.to_path_buf(),
            profile,
        }),
        None => Err(anyhow!("{}: the profile has no header", path.display())),
    }
}
