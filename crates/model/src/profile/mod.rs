//! Profile records: what `autopcg tune` measures, one JSON object per line (JSON Lines), so a
//! profile is streamed to disk as it is measured and an interrupted tune keeps every finished
//! record.
//!
//! The first line is a [`Header`] (schema version, device). Every measurement record has a
//! [`Record::key`] that names the measurement without its result; [`ProfileWriter::open`] on an
//! existing file reads the keys back so a resumed sweep skips what is already there. A last
//! line cut short by an interruption is dropped (and truncated away) on resume; any other bad
//! line is an error naming the file and line.
//!
//! A profile may be gzip-compressed (`.gz`) for committing; [`Profile::read`] reads both.

mod records;
mod stability;
#[cfg(test)]
mod tests;
mod writer;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use autopcg_catalog::DeviceProps;

pub use records::{
    ConversionRecord, DotRecord, EpilogueRecord, EpilogueVariant, FormRecord, Header, LaunchSample,
    MatrixRecord, MatrixSet, OccupancyRecord, Record, SessionRecord, SpmvRecord, StageRecord,
    Status, Timing, VectorRecord, EPILOGUE_NARROW_ENTRIES, EPILOGUE_WIDE_ENTRIES,
};
pub use stability::{medians_by_key, stability, StabilityReport};
pub use writer::ProfileWriter;

use crate::ModelError;

/// Schema version of profile files this build reads and writes.
pub const PROFILE_SCHEMA: u32 = 1;

/// A whole profile, records sorted by kind.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Profile {
    /// The header (`None` only for an empty profile).
    pub header: Option<Header>,
    /// Eq. 3-2 records.
    pub occupancy: Vec<OccupancyRecord>,
    /// Vector-update records.
    pub vector: Vec<VectorRecord>,
    /// Reduction records.
    pub dot: Vec<DotRecord>,
    /// Benchmark matrices.
    pub matrices: Vec<MatrixRecord>,
    /// SpMV records of calls launched alone.
    pub spmv: Vec<SpmvRecord>,
    /// SpMV records timed from graph replays ([`SpmvRecord::replayed`]), on the matrices
    /// whose iteration fits in half of L2.
    pub spmv_replayed: Vec<SpmvRecord>,
    /// Conversion records.
    pub conversions: Vec<ConversionRecord>,
    /// Epilogue-stage records.
    pub epilogue: Vec<EpilogueRecord>,
    /// Form-stage records (SSOR-AI's two forms per matrix).
    pub forms: Vec<FormRecord>,
    /// Stage marks.
    pub stages: Vec<StageRecord>,
    /// Writing sessions stamped (0 in profiles from before sessions were recorded).
    pub sessions: usize,
    /// SpMV records launched alone that [`Profile::read`] set aside because the profile also
    /// holds records timed with L2 cold ([`SpmvRecord::l2_flushed`]): a profile resumed after
    /// the protocol changed keeps its old lines, and the models read one protocol.
    pub superseded_spmv: usize,
}

impl Profile {
    /// Adds one record (a second header must name the same device and schema).
    pub fn push(&mut self, r: Record) -> Result<(), String> {
        match r {
            Record::Header(h) => {
                if let Some(old) = &self.header {
                    if old.device.name != h.device.name || old.schema != h.schema {
                        return Err(format!(
                            "a second header for {:?} (schema {}) in a profile of {:?} (schema {})",
                            h.device.name, h.schema, old.device.name, old.schema
                        ));
                    }
                } else {
                    self.header = Some(h);
                }
            }
            Record::Occupancy(o) => self.occupancy.push(o),
            Record::Vector(v) => {
                v.check()?;
                self.vector.push(v)
            }
            Record::Dot(d) => self.dot.push(d),
            Record::Matrix(m) => self.matrices.push(*m),
            Record::Spmv(s) if s.replayed => self.spmv_replayed.push(s),
            Record::Spmv(s) => self.spmv.push(s),
            Record::Conversion(c) => self.conversions.push(c),
            Record::Stage(s) => self.stages.push(s),
            Record::Epilogue(e) => self.epilogue.push(e),
            Record::Form(f) => self.forms.push(f),
            Record::Session(s) => {
                let header = self.header.as_ref().map(|h| h.device.name.as_str());
                if header != Some(s.device.as_str()) {
                    return Err(format!(
                        "records measured on {:?} in a profile of {:?}: a profile holds one \
                         device's measurements",
                        s.device,
                        header.unwrap_or("-")
                    ));
                }
                self.sessions += 1;
            }
        }
        Ok(())
    }

    /// Reads a profile (plain or `.gz`). Every line must parse; the header must come first and
    /// carry [`PROFILE_SCHEMA`].
    pub fn read(path: impl AsRef<Path>) -> Result<Profile, ModelError> {
        let path = path.as_ref();
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(flate2::read::MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        Profile::from_reader(BufReader::new(reader), path)
    }

    /// Reads a profile from JSON lines; `path` only names the source in errors.
    pub fn from_reader(reader: impl BufRead, path: &Path) -> Result<Profile, ModelError> {
        let mut p = Profile::default();
        for (i, line) in reader.lines().enumerate() {
            let line = line.map_err(|source| ModelError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            if line.trim().is_empty() {
                continue;
            }
            let rec = parse_line(&line, path, i + 1)?;
            check_order(&p, &rec, path, i + 1)?;
            p.push(rec).map_err(|reason| ModelError::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                reason,
            })?;
        }
        p.keep_one_spmv_protocol();
        Ok(p)
    }

    /// Where any SpMV record launched alone was timed with L2 cold, sets aside those that were
    /// not (counted in [`Profile::superseded_spmv`]).
    pub fn keep_one_spmv_protocol(&mut self) {
        if self.spmv.iter().any(|r| r.l2_flushed) {
            let before = self.spmv.len();
            self.spmv.retain(|r| r.l2_flushed);
            self.superseded_spmv += before - self.spmv.len();
        }
    }

    /// Whether the SpMV records launched alone were timed with L2 cold (every one, after
    /// [`Profile::read`]); false for an older profile, or one without SpMV records.
    pub fn spmv_l2_flushed(&self) -> bool {
        !self.spmv.is_empty() && self.spmv.iter().all(|r| r.l2_flushed)
    }

    /// The device of the header.
    pub fn device(&self) -> Option<&DeviceProps> {
        self.header.as_ref().map(|h| &h.device)
    }

    /// The matrix record with this id.
    pub fn matrix(&self, id: &str) -> Option<&MatrixRecord> {
        self.matrices.iter().find(|m| m.id == id)
    }
}

fn parse_line(line: &str, path: &Path, lineno: usize) -> Result<Record, ModelError> {
    let rec: Record = serde_json::from_str(line).map_err(|e| ModelError::Parse {
        path: path.to_path_buf(),
        line: lineno,
        reason: e.to_string(),
    })?;
    if let Record::Header(h) = &rec {
        if h.schema != PROFILE_SCHEMA {
            return Err(ModelError::Schema {
                path: path.to_path_buf(),
                found: h.schema,
                expected: PROFILE_SCHEMA,
            });
        }
    }
    Ok(rec)
}

fn check_order(p: &Profile, rec: &Record, path: &Path, lineno: usize) -> Result<(), ModelError> {
    if p.header.is_none() && !matches!(rec, Record::Header(_)) {
        return Err(ModelError::Parse {
            path: path.to_path_buf(),
            line: lineno,
            reason: "a profile must start with a header record".into(),
        });
    }
    Ok(())
}
