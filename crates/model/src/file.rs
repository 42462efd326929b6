//! Model files: everything `tune` fits for one GPU, as one schema-versioned JSON document that
//! every later solve reads.
//!
//! A file holds the device identity, where its profile came from, the vector-update and
//! reduction decision trees, the SpMV performance model with conversion costs, the SpMV
//! classifier, and the quality of each fit (held-out evaluation of the trees, in-sample errors
//! of the SpMV fits). [`ModelFile::load`] checks the schema version before anything else and
//! validates the content (trees ordered, coefficients finite, the classifier's labels known),
//! so a corrupted or foreign file is an error naming the file, never a panic.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::classifier::{ClassifierOptions, SpmvClassifier};
use crate::epilogue::EpilogueModel;
use crate::form::FormModel;
use crate::link::MeasuredLink;
use crate::profile::{Profile, EPILOGUE_WIDE_ENTRIES};
use crate::spmv::{SpmvFitOptions, SpmvModel, StoredLimits};
use crate::vecdot::{evaluate, DotModels, TreeEvalReport, VectorModels};
use autopcg_catalog::{device_slug, DeviceProps};

use crate::ModelError;

/// Schema version of model files this build reads and writes.
pub const MODEL_SCHEMA: u32 = 1;

/// Where the fitted data came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileInfo {
    /// File name of the profile (no folder).
    pub file: String,
    /// A reduced (`--quick`) sweep.
    pub quick: bool,
    /// Seconds since the Unix epoch when the profile was started.
    pub started_unix_s: u64,
    /// Records by kind: vector, dot, matrices, spmv, conversions.
    pub records: Vec<(String, usize)>,
}

/// How well each part fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitQuality {
    /// The vector-update trees on the held-out sizes of the profile.
    pub vector_held_out: TreeEvalReport,
    /// The reduction trees on the held-out sizes of the profile.
    pub dot_held_out: TreeEvalReport,
    /// In-sample median relative error of the SpMV candidate fits (median over candidates;
    /// `None` without candidates).
    pub spmv_in_sample_median: Option<f64>,
    /// In-sample 90th-percentile relative error of the SpMV candidate fits (median over
    /// candidates).
    pub spmv_in_sample_p90: Option<f64>,
}

/// Everything fitted for one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// [`MODEL_SCHEMA`] of the writer.
    pub schema: u32,
    /// Version of autopcg that fitted it.
    pub fitted_by: String,
    /// The device profiled.
    pub device: DeviceProps,
    /// The profile fitted.
    pub profile: ProfileInfo,
    /// Vector-update decision trees (per operation).
    pub vector: VectorModels,
    /// Reduction decision trees (`dot`, `dot3`).
    pub dot: DotModels,
    /// SpMV performance model and conversion costs.
    pub spmv: SpmvModel,
    /// SpMV format classifier (second opinion); `None` when it could not be fitted.
    pub classifier: Option<SpmvClassifier>,
    /// Fit quality.
    pub quality: FitQuality,
    /// Notes of the fit (parts left out and why).
    pub notes: Vec<String>,
    /// The link between the host's GPUs, when `tune` found several and measured it; absent
    /// from files written before it was measured and from files of one-GPU hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<MeasuredLink>,
    /// The cost of the three dots in the epilogue of A's SpMV, from the tune's epilogue stage;
    /// absent from files fitted on profiles without that stage (the plan then fuses by the
    /// fallback rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilogue: Option<EpilogueModel>,
    /// SSOR-AI's application form from the iterations of both forms that tune's form stage
    /// timed ([`FormModel`]); absent from files fitted on profiles without that stage (the plan
    /// then compares the forms by the SpMV model's predicted times).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssor_form: Option<FormModel>,
}

#[derive(Deserialize)]
struct SchemaOnly {
    schema: u32,
}

impl ModelFile {
    /// Fits every model from `profile` (named `profile_file` in the result).
    pub fn fit(profile: &Profile, profile_file: &str) -> Result<ModelFile, ModelError> {
        let header = profile.header.as_ref().ok_or_else(|| ModelError::Fit {
            what: "model".into(),
            reason: "the profile has no header".into(),
        })?;
        // The header must describe the device the records were measured on: every eq. 3-2
        // record is recomputed on the header's limits (a profile whose header was edited to
        // another GPU, or whose records came from one, fails here rather than giving a model
        // labelled with the wrong device).
        for o in &profile.occupancy {
            o.check(&header.device).map_err(|e| ModelError::Fit {
                what: "model".into(),
                reason: format!(
                    "the profile's records do not match the device of its header ({}): {e}",
                    header.device.name
                ),
            })?;
        }
        let vector = VectorModels::fit(profile)?;
        let dot = DotModels::fit(profile)?;
        let spmv = SpmvModel::fit(profile, &SpmvFitOptions::for_tune())?;
        let mut notes = spmv.notes.clone();
        let classifier = match SpmvClassifier::fit(profile, &ClassifierOptions::default()) {
            Ok(c) => Some(c),
            Err(e) => {
                notes.push(format!("no SpMV classifier: {e}"));
                None
            }
        };
        let epilogue = EpilogueModel::fit(profile)?.map(|mut e| {
            let red = |n| dot.pick("dot3", n).map(|p| p.predicted_ms);
            e.held_out = e.evaluate(profile, None, red);
            e.held_out_wide = e.evaluate(profile, Some(EPILOGUE_WIDE_ENTRIES), red);
            e
        });
        if epilogue.is_none() {
            notes.push(
                "no epilogue model: the profile has no epilogue stage (plans fuse the dots into \
                 the SpMV by the fallback rule)"
                    .into(),
            );
        }
        let mut med: Vec<f64> = spmv
            .candidates
            .iter()
            .map(|c| c.stats.median_rel_err)
            .collect();
        let mut p90: Vec<f64> = spmv
            .candidates
            .iter()
            .map(|c| c.stats.p90_rel_err)
            .collect();
        let quality = FitQuality {
            vector_held_out: evaluate(&vector, profile),
            dot_held_out: evaluate(&dot, profile),
            spmv_in_sample_median: median(&mut med),
            spmv_in_sample_p90: median(&mut p90),
        };
        let mut records = vec![
            ("vector".to_string(), profile.vector.len()),
            ("dot".to_string(), profile.dot.len()),
            ("matrices".to_string(), profile.matrices.len()),
            ("spmv".to_string(), profile.spmv.len()),
            ("conversions".to_string(), profile.conversions.len()),
        ];
        if !profile.spmv_replayed.is_empty() {
            records.push(("spmv_replayed".to_string(), profile.spmv_replayed.len()));
        }
        if !profile.epilogue.is_empty() {
            records.push(("epilogue".to_string(), profile.epilogue.len()));
        }
        if !profile.forms.is_empty() {
            records.push(("forms".to_string(), profile.forms.len()));
        }
        let ssor_form = FormModel::fit(profile, u64::from(header.device.l2_bytes));
        if ssor_form.is_none() && !profile.forms.is_empty() {
            notes.push(format!(
                "no SSOR-AI form model: fewer than {} fit matrices have both forms timed (plans \
                 compare the forms by predicted SpMV times)",
                crate::form::MIN_MATRICES
            ));
        }
        Ok(ModelFile {
            schema: MODEL_SCHEMA,
            fitted_by: format!("autopcg {}", env!("CARGO_PKG_VERSION")),
            device: header.device.clone(),
            profile: ProfileInfo {
                file: profile_file.to_string(),
                quick: header.quick,
                started_unix_s: header.started_unix_s,
                records,
            },
            vector,
            dot,
            spmv,
            classifier,
            quality,
            notes,
            link: None,
            epilogue,
            ssor_form,
        })
    }

    /// Checks what deserialisation alone cannot: the parts are non-empty and their numbers
    /// finite, and the SpMV model is for the same device as the file.
    pub fn validate(&self) -> Result<(), String> {
        if self.vector.ops.is_empty() {
            return Err("no vector-update tree".into());
        }
        if self.dot.families.is_empty() {
            return Err("no reduction tree".into());
        }
        for (name, t) in self.vector.ops.iter().chain(self.dot.families.iter()) {
            if t.tree.is_empty() {
                return Err(format!("the tree of {name} has no leaf"));
            }
            if let Some(l) = t.tree.leaves().iter().find(|l| !l.line.is_finite()) {
                return Err(format!(
                    "the tree of {name} has a line with a non-finite coefficient on ({}, {}]",
                    l.lo, l.hi
                ));
            }
        }
        if self.spmv.candidates.is_empty() {
            return Err("the SpMV model has no candidate".into());
        }
        self.spmv.validate().map_err(|e| e.to_string())?;
        if let Some(e) = &self.epilogue {
            e.validate()?;
        }
        if self.spmv.device.name != self.device.name {
            return Err(format!(
                "the SpMV model is for {:?}, the file for {:?}",
                self.spmv.device.name, self.device.name
            ));
        }
        let (ls, lf) = (
            StoredLimits::of(&self.spmv.device),
            StoredLimits::of(&self.device),
        );
        if ls != lf {
            return Err(format!(
                "the SpMV model's launch limits {ls:?} are not the device's {lf:?}"
            ));
        }
        if let Some(c) = &self.classifier {
            c.validate().map_err(|e| e.to_string())?;
        }
        if let Some(l) = &self.link {
            l.validate()?;
        }
        Ok(())
    }

    /// Writes the file (through a temporary file and a rename, so a reader never sees half a
    /// model).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ModelError> {
        let path = path.as_ref();
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| {
            ModelError::InvalidParameter(format!("model cannot be written as JSON: {e}"))
        })?;
        let tmp = tmp_path(path);
        std::fs::write(&tmp, text + "\n").map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads and validates a model file.
    pub fn load(path: impl AsRef<Path>) -> Result<ModelFile, ModelError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ModelFile::parse(&text, path)
    }

    /// Parses and validates model text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<ModelFile, ModelError> {
        let parse_err = |e: serde_json::Error| ModelError::Parse {
            path: path.to_path_buf(),
            line: e.line().max(1),
            reason: e.to_string(),
        };
        let s: SchemaOnly = serde_json::from_str(text).map_err(parse_err)?;
        if s.schema != MODEL_SCHEMA {
            return Err(ModelError::Schema {
                path: path.to_path_buf(),
                found: s.schema,
                expected: MODEL_SCHEMA,
            });
        }
        let mut m: ModelFile = serde_json::from_str(text).map_err(parse_err)?;
        m.validate().map_err(|reason| ModelError::Invalid {
            path: path.to_path_buf(),
            reason,
        })?;
        // The SpMV model stores only the limits its terms read; they are the device's (checked
        // above), so it gets the device's whole record.
        m.spmv.device = m.device.clone();
        Ok(m)
    }

    /// [`ModelFile::load`], and the file must be for the device called `device_name` (same
    /// name, or same [`device_slug`]).
    pub fn load_for_device(
        path: impl AsRef<Path>,
        device_name: &str,
    ) -> Result<ModelFile, ModelError> {
        let path = path.as_ref();
        let m = ModelFile::load(path)?;
        m.check_device(path, device_name)?;
        Ok(m)
    }

    /// Whether this model (read from `path`) is for the device called `device_name` (the same
    /// name, or same [`device_slug`]); [`ModelError::WrongDevice`] if not.
    pub fn check_device(&self, path: &Path, device_name: &str) -> Result<(), ModelError> {
        if self.device.name != device_name && self.device.slug() != device_slug(device_name) {
            return Err(ModelError::WrongDevice {
                path: path.to_path_buf(),
                file_device: self.device.name.clone(),
                device: device_name.to_string(),
            });
        }
        Ok(())
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn median(v: &mut Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::{domains, held_out_sizes, sample_sizes};
    use crate::profile::{DotRecord, LaunchSample, Timing, VectorRecord};
    use autopcg_catalog::{Dot3Kernel, KernelId, Reduction, VectorKernel, VectorOp, VectorVariant};

    fn timing(ms: f64) -> Timing {
        Timing {
            median_ms: ms,
            min_ms: ms,
            max_ms: ms,
            reps: 5,
        }
    }

    /// The synthetic SpMV profile plus vector and reduction records from known lines: two
    /// update configurations crossing at n = 2e6 and two reduction kernels, one always faster.
    fn full_profile() -> Profile {
        let mut p = crate::spmv_synth::profile(7);
        for d in domains(1 << 24) {
            let sizes = sample_sizes(&d, 4)
                .into_iter()
                .map(|n| (n, false))
                .chain(held_out_sizes(&d, 4).into_iter().map(|n| (n, true)));
            for (n, held_out) in sizes {
                let x = n as f64;
                for (variant, threads, blocks, nb, ms) in [
                    (VectorVariant::GridV2, 256, 264, Some(1), 0.004 + 2.0e-9 * x),
                    (VectorVariant::Grid, 512, 528, Some(2), 0.008 + 1.0e-9 * x),
                ] {
                    p.vector.push(VectorRecord {
                        kernel: VectorKernel::CgUpdate(variant),
                        op: VectorOp::CgUpdate,
                        variant,
                        sample: LaunchSample {
                            n,
                            threads,
                            blocks,
                            nb_multiple: nb,
                            elems_per_thread: None,
                            held_out,
                            timing: timing(ms),
                        },
                    });
                }
                for (kernel, ms) in [
                    (Dot3Kernel::LastBlock, 0.003 + 1.0e-9 * x),
                    (Dot3Kernel::TwoPass, 0.006 + 1.1e-9 * x),
                ] {
                    p.dot.push(DotRecord {
                        kernel: Reduction::Dot3(kernel),
                        sample: LaunchSample {
                            n,
                            threads: 256,
                            blocks: 528,
                            nb_multiple: Some(2),
                            elems_per_thread: None,
                            held_out,
                            timing: timing(ms),
                        },
                    });
                }
            }
        }
        p
    }

    #[test]
    fn fit_save_load_round_trip_and_picks() {
        let p = full_profile();
        let m = ModelFile::fit(&p, "synthetic.profile.jsonl").unwrap();
        assert_eq!(m.schema, MODEL_SCHEMA);
        assert!(m.quality.vector_held_out.meets_target());
        assert!(m.quality.dot_held_out.meets_target());
        // The two update lines cross at 0.004 / 1e-9 = 4e6.
        let update = |n: u64| m.vector.pick("cg_update", n).unwrap().kernel;
        let cg = |v: VectorVariant| KernelId::Vector(VectorKernel::CgUpdate(v));
        assert_eq!(update(100_000), cg(VectorVariant::GridV2));
        assert_eq!(update(10_000_000), cg(VectorVariant::Grid));
        assert_eq!(
            m.dot.pick("dot3", 5_000).unwrap().kernel,
            KernelId::Reduction(Reduction::Dot3(Dot3Kernel::LastBlock))
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/gpu.json");
        m.save(&path).unwrap();
        let back = ModelFile::load(&path).unwrap();
        assert_eq!(back, m);
        let back = ModelFile::load_for_device(&path, &m.device.name).unwrap();
        assert_eq!(back.device, m.device);
        let e = ModelFile::load_for_device(&path, "Another GPU").unwrap_err();
        assert!(matches!(e, ModelError::WrongDevice { .. }), "{e}");
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let p = full_profile();
        let m = ModelFile::fit(&p, "synthetic.profile.jsonl").unwrap();
        let good = serde_json::to_string_pretty(&m).unwrap();
        let path = Path::new("models/x.json");

        let e = ModelFile::parse("{ not json", path)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("models/x.json:1:"), "{e}");

        let e = ModelFile::parse(&good[..good.len() / 2], path).unwrap_err();
        assert!(matches!(e, ModelError::Parse { .. }), "{e}");

        let other = good.replacen(
            &format!("\"schema\": {MODEL_SCHEMA}"),
            &format!("\"schema\": {}", MODEL_SCHEMA + 1),
            1,
        );
        let e = ModelFile::parse(&other, path).unwrap_err();
        assert!(matches!(e, ModelError::Schema { .. }), "{e}");

        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["spmv"]["device"] = serde_json::Value::String("Elsewhere".into());
        let e = ModelFile::parse(&v.to_string(), path).unwrap_err();
        assert!(matches!(e, ModelError::Invalid { .. }), "{e}");

        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["vector"]["ops"] = serde_json::json!({});
        let e = ModelFile::parse(&v.to_string(), path).unwrap_err();
        assert!(e.to_string().contains("no vector-update tree"), "{e}");

        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["spmv"]["candidates"] = serde_json::json!([]);
        let e = ModelFile::parse(&v.to_string(), path).unwrap_err();
        assert!(e.to_string().contains("no candidate"), "{e}");

        let e = ModelFile::load("does/not/exist.json").unwrap_err();
        assert!(matches!(e, ModelError::Io { .. }), "{e}");
    }

    #[test]
    fn the_measured_link_is_optional_round_trips_and_is_validated() {
        let p = full_profile();
        let mut m = ModelFile::fit(&p, "synthetic.profile.jsonl").unwrap();
        // Without a link the file has no such field, as files written before it.
        let plain = serde_json::to_string_pretty(&m).unwrap();
        assert!(!plain.contains("\"link\""));
        let path = Path::new("models/x.json");
        assert_eq!(ModelFile::parse(&plain, path).unwrap().link, None);
        m.link = Some(MeasuredLink::synthetic(4, 200.0, 3.0, 11.0, &[8, 65536]));
        let text = serde_json::to_string_pretty(&m).unwrap();
        assert_eq!(ModelFile::parse(&text, path).unwrap(), m);
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["link"]["bandwidth_gbs"] = serde_json::json!(0.0);
        let e = ModelFile::parse(&v.to_string(), path).unwrap_err();
        assert!(matches!(e, ModelError::Invalid { .. }), "{e}");
    }

    #[test]
    fn a_profile_without_vector_records_cannot_be_fitted() {
        let p = crate::spmv_synth::profile(7);
        let e = ModelFile::fit(&p, "x").unwrap_err();
        assert!(matches!(e, ModelError::Fit { .. }), "{e}");
    }
}
