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
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use autopcg_sparse::families::Recipe;
use autopcg_sparse::features::MatrixFeatures;
use serde::{Deserialize, Serialize};

use crate::work::SpmvWork;
use autopcg_catalog::{occupancy, DeviceProps, KernelId, Occupancy};

use crate::ModelError;

/// Schema version of profile files this build reads and writes.
pub const PROFILE_SCHEMA: u32 = 1;

/// Summary of repeated event timings of one measurement, milliseconds per call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Median.
    pub median_ms: f64,
    /// Fastest repetition.
    pub min_ms: f64,
    /// Slowest repetition.
    pub max_ms: f64,
    /// Timed repetitions.
    pub reps: usize,
}

impl Timing {
    /// `(max - min) / median`: the relative spread of the repetitions.
    pub fn spread(&self) -> f64 {
        if self.median_ms > 0.0 {
            (self.max_ms - self.min_ms) / self.median_ms
        } else {
            0.0
        }
    }

    /// True when every figure is finite, non-negative and ordered `min <= median <= max`, with
    /// at least one repetition.
    pub fn is_valid(&self) -> bool {
        let f = [self.median_ms, self.min_ms, self.max_ms];
        f.iter().all(|v| v.is_finite() && *v >= 0.0)
            && self.min_ms <= self.median_ms
            && self.median_ms <= self.max_ms
            && self.reps > 0
    }
}

/// First line of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`PROFILE_SCHEMA`] of the writer.
    pub schema: u32,
    /// The device measured.
    pub device: DeviceProps,
    /// A reduced (`--quick`) sweep.
    pub quick: bool,
    /// Version of autopcg that measured it.
    pub tool_version: String,
    /// Seconds since the Unix epoch when the profile was started.
    pub started_unix_s: u64,
}

/// The inputs and result of eq. 3-2 for one reduction kernel at one block size, so the block
/// counts of the dot-product sweep can be audited:
/// `NB_nt = N_sm * min(N_reg / N_reg_per_block, N_smem / N_smem_per_block, N_threads_per_sm / nt,
/// N_blocks_per_sm)`, the device limits being those of the [`Header`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OccupancyRecord {
    /// Kernel entry point.
    pub kernel: KernelId,
    /// Threads per block nt.
    pub threads: u32,
    /// Registers per thread of the compiled kernel.
    pub regs_per_thread: u32,
    /// Static shared memory per block of the compiled kernel, bytes.
    pub static_smem_bytes: u32,
    /// Dynamic shared memory per block at launch, bytes.
    pub dynamic_smem_bytes: u32,
    /// Resident blocks per SM by eq. 3-2's minimum.
    pub blocks_per_sm: u32,
    /// `NB_nt`: `sm_count * blocks_per_sm`.
    pub nb_nt: u32,
}

impl OccupancyRecord {
    /// Audits the record: recomputes eq. 3-2 ([`autopcg_catalog::occupancy`]) from the inputs
    /// it holds on `dev` (the device of the profile's header) and checks its `blocks_per_sm`
    /// and `nb_nt` against the result. Errors on a mismatch, and when the inputs give no valid
    /// count (for such a kernel the profiler records one block per SM, see the profiler's
    /// `occupancy` module).
    pub fn check(&self, dev: &DeviceProps) -> Result<Occupancy, ModelError> {
        let smem = self
            .static_smem_bytes
            .saturating_add(self.dynamic_smem_bytes);
        let o = occupancy(dev, self.threads, self.regs_per_thread, smem)
            .map_err(|e| ModelError::InvalidParameter(format!("{}: {e}", self.kernel)))?;
        if o.blocks_per_sm != self.blocks_per_sm || o.nb_nt != self.nb_nt {
            return Err(ModelError::InvalidParameter(format!(
                "occupancy record of {} at {} threads says {} blocks/SM and NB_nt = {}; eq. 3-2 \
                 on its inputs gives {} and {}",
                self.kernel, self.threads, self.blocks_per_sm, self.nb_nt, o.blocks_per_sm, o.nb_nt
            )));
        }
        Ok(o)
    }
}

/// One vector-update measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorRecord {
    /// Kernel entry point, e.g. `cg_update_grid_v2`.
    pub kernel: String,
    /// Operation: `axpy`, `xpay`, `cg_update`...
    pub op: String,
    /// Thread mapping: `elem`, `elem_v2`, `grid`, `grid_v2`.
    pub variant: String,
    /// Vector length.
    pub n: u64,
    /// Threads per block.
    pub threads: u32,
    /// Blocks.
    pub blocks: u32,
    /// For grid-stride variants, `i` in `blocks = NB_nt * i`; `None` when the block count
    /// covers the vector one item per thread.
    pub nb_multiple: Option<u32>,
    /// A size held out of the fit, measured only to evaluate the decision trees.
    #[serde(default)]
    pub held_out: bool,
    /// The timing.
    pub timing: Timing,
}

/// One dot-product (or fused three-dot) measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DotRecord {
    /// Kernel entry point of the first stage, e.g. `dot_vec2` or `dot3_last_block`.
    pub kernel: String,
    /// Vector length.
    pub n: u64,
    /// Threads per block.
    pub threads: u32,
    /// Blocks of the first stage.
    pub blocks: u32,
    /// `i` in `blocks = NB_nt * i`; `None` for rungs whose block count is fixed by n.
    pub nb_multiple: Option<u32>,
    /// A size held out of the fit, measured only to evaluate the decision trees.
    #[serde(default)]
    pub held_out: bool,
    /// The timing of the whole reduction (every stage, result left on the device).
    pub timing: Timing,
}

/// Which use a benchmark matrix is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatrixSet {
    /// Fitting the models.
    Fit,
    /// Held out: only for evaluating them.
    Eval,
}

/// A benchmark matrix: how to rebuild it and what it looks like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRecord {
    /// Identifier the SpMV and conversion records refer to.
    pub id: String,
    /// Fit or evaluation set.
    pub set: MatrixSet,
    /// How to rebuild it exactly.
    pub recipe: Recipe,
    /// Structural statistics.
    pub features: MatrixFeatures,
    /// Work counts of every kernel.
    pub work: SpmvWork,
}

/// Outcome of a measurement that may not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum Status {
    /// Measured.
    Ok,
    /// Not applicable (padding too large, configuration not allowed): not a time.
    Skipped(String),
    /// Ran but failed (wrong result, launch error).
    Failed(String),
}

/// One SpMV candidate on one matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpmvRecord {
    /// [`MatrixRecord::id`].
    pub matrix: String,
    /// Format name: `csr`, `ell`, `dia`, `coo`, `hyb`.
    pub format: String,
    /// Kernel name (`+`-joined for HYB's two launches), or a cuSPARSE algorithm.
    pub kernel: String,
    /// Threads per block (`None` for cuSPARSE and whole-format skips).
    pub threads: Option<u32>,
    /// Blocks (of the ELL launch for HYB).
    pub blocks: Option<u32>,
    /// Blocks of HYB's COO launch.
    pub coo_blocks: Option<u32>,
    /// Grid policy: `wave` or `cover`.
    pub grid: Option<String>,
    /// Outcome.
    pub status: Status,
    /// Timing when measured.
    pub timing: Option<Timing>,
}

impl SpmvRecord {
    /// The candidate this record measures, without the matrix: `format/kernel/threads/grid`.
    pub fn candidate(&self) -> String {
        candidate_name(
            &self.format,
            &self.kernel,
            self.threads,
            self.grid.as_deref(),
        )
    }
}

/// The name of a SpMV candidate: `format/kernel/t<threads>/<grid>` (`-` for an absent part).
pub fn candidate_name(
    format: &str,
    kernel: &str,
    threads: Option<u32>,
    grid: Option<&str>,
) -> String {
    let t = threads.map_or_else(|| "-".to_string(), |t| format!("t{t}"));
    format!("{format}/{kernel}/{t}/{}", grid.unwrap_or("-"))
}

/// Converting a matrix from CSR to a format and uploading it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversionRecord {
    /// [`MatrixRecord::id`].
    pub matrix: String,
    /// Target format.
    pub format: String,
    /// Outcome (skipped: padding refused).
    pub status: Status,
    /// Host conversion, milliseconds.
    pub host_ms: f64,
    /// Upload, milliseconds.
    pub upload_ms: f64,
    /// Conversion on the device from an uploaded CSR matrix, milliseconds, where a GPU
    /// conversion kernel exists for the format.
    pub device_ms: Option<f64>,
    /// Bytes of the format on the device.
    pub device_bytes: u64,
}

/// A stage of the sweep finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    /// Stage name (`vector`, `dot`, `spmv`...).
    pub stage: String,
    /// Records written by the stage in this run.
    pub records: usize,
    /// Seconds the stage took in this run.
    pub elapsed_s: f64,
}

/// One line of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// The first line.
    Header(Header),
    /// Eq. 3-2 for one kernel and block size.
    Occupancy(OccupancyRecord),
    /// A vector update.
    Vector(VectorRecord),
    /// A reduction.
    Dot(DotRecord),
    /// A benchmark matrix (boxed: it is several times larger than the other records).
    Matrix(Box<MatrixRecord>),
    /// A SpMV candidate.
    Spmv(SpmvRecord),
    /// A format conversion.
    Conversion(ConversionRecord),
    /// End of a stage.
    Stage(StageRecord),
}

impl Record {
    /// The identity of the measurement (what was measured, not the result), used to skip it
    /// on resume; `None` for the header and stage marks.
    pub fn key(&self) -> Option<String> {
        let opt = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        match self {
            Record::Header(_) | Record::Stage(_) => None,
            Record::Occupancy(o) => Some(format!("occupancy/{}/{}", o.kernel, o.threads)),
            Record::Vector(v) => Some(format!(
                "vector/{}/{}/{}/{}",
                v.kernel, v.n, v.threads, v.blocks
            )),
            Record::Dot(d) => Some(format!(
                "dot/{}/{}/{}/{}",
                d.kernel, d.n, d.threads, d.blocks
            )),
            Record::Matrix(m) => Some(format!("matrix/{}", m.id)),
            Record::Spmv(s) => Some(format!(
                "spmv/{}/{}/{}/{}",
                s.matrix,
                s.candidate(),
                opt(s.blocks),
                opt(s.coo_blocks)
            )),
            Record::Conversion(c) => Some(format!("conversion/{}/{}", c.matrix, c.format)),
        }
    }
}

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
    /// SpMV records.
    pub spmv: Vec<SpmvRecord>,
    /// Conversion records.
    pub conversions: Vec<ConversionRecord>,
    /// Stage marks.
    pub stages: Vec<StageRecord>,
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
            Record::Vector(v) => self.vector.push(v),
            Record::Dot(d) => self.dot.push(d),
            Record::Matrix(m) => self.matrices.push(*m),
            Record::Spmv(s) => self.spmv.push(s),
            Record::Conversion(c) => self.conversions.push(c),
            Record::Stage(s) => self.stages.push(s),
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
        Ok(p)
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

/// Run-to-run agreement of two profiles of the same device (see [`stability`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StabilityReport {
    /// Measurements present in both profiles with a median of at least `min_ms` in either.
    pub compared: usize,
    /// Of those, the ones whose medians differ by at most `tolerance` (relative to the smaller).
    pub within: usize,
    /// The threshold on the median, ms.
    pub min_ms: f64,
    /// The relative tolerance.
    pub tolerance: f64,
    /// Largest relative difference seen.
    pub worst: f64,
    /// The key of the largest difference.
    pub worst_key: Option<String>,
    /// `within / compared` by record kind (`vector`, `dot`, `spmv`).
    pub by_kind: Vec<(String, usize, usize)>,
}

impl StabilityReport {
    /// `within / compared` (1 when nothing was compared).
    pub fn share(&self) -> f64 {
        if self.compared == 0 {
            1.0
        } else {
            self.within as f64 / self.compared as f64
        }
    }
}

/// The timed measurements of a profile by key, with their medians.
pub fn medians_by_key(p: &Profile) -> std::collections::BTreeMap<String, f64> {
    let mut m = std::collections::BTreeMap::new();
    for v in &p.vector {
        if let Some(k) = Record::Vector(v.clone()).key() {
            m.insert(k, v.timing.median_ms);
        }
    }
    for d in &p.dot {
        if let Some(k) = Record::Dot(d.clone()).key() {
            m.insert(k, d.timing.median_ms);
        }
    }
    for s in &p.spmv {
        if let (Some(k), Some(t)) = (Record::Spmv(s.clone()).key(), s.timing) {
            m.insert(k, t.median_ms);
        }
    }
    m
}

/// Compares the medians of the measurements two runs have in common, counting those at or
/// above `min_ms` (in either run) and how many agree within `tolerance` (relative to the
/// smaller median): the run-to-run stability of a tune.
pub fn stability(a: &Profile, b: &Profile, min_ms: f64, tolerance: f64) -> StabilityReport {
    let (ma, mb) = (medians_by_key(a), medians_by_key(b));
    let mut rep = StabilityReport {
        compared: 0,
        within: 0,
        min_ms,
        tolerance,
        worst: 0.0,
        worst_key: None,
        by_kind: Vec::new(),
    };
    let mut kinds: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for (k, &ta) in &ma {
        let Some(&tb) = mb.get(k) else { continue };
        if ta.max(tb) < min_ms || ta.min(tb) <= 0.0 {
            continue;
        }
        let rel = (ta - tb).abs() / ta.min(tb);
        let ok = rel <= tolerance;
        rep.compared += 1;
        rep.within += usize::from(ok);
        let kind = k.split('/').next().unwrap_or("").to_string();
        let e = kinds.entry(kind).or_default();
        e.0 += 1;
        e.1 += usize::from(ok);
        if rel > rep.worst {
            rep.worst = rel;
            rep.worst_key = Some(k.clone());
        }
    }
    rep.by_kind = kinds.into_iter().map(|(k, (c, w))| (k, c, w)).collect();
    rep
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

/// Appends records to a profile file, one flushed line each, remembering the keys present so a
/// resumed sweep can skip them.
pub struct ProfileWriter {
    path: PathBuf,
    file: File,
    keys: HashSet<String>,
    resumed: usize,
    written: usize,
}

impl ProfileWriter {
    /// Opens `path` for appending. A new (or empty) file gets `header` as its first line. An
    /// existing file must be a profile of the same schema and device (else an error: use
    /// another file); its keys are loaded, and a last line cut short by an interruption is
    /// truncated away.
    pub fn open(path: impl AsRef<Path>, header: &Header) -> Result<ProfileWriter, ModelError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| ModelError::Io {
            path: path.clone(),
            source,
        };
        if path.extension().is_some_and(|e| e == "gz") {
            return Err(ModelError::InvalidParameter(format!(
                "{}: profiles are written uncompressed; compress a finished profile afterwards",
                path.display()
            )));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(io)?;
        let mut keys = HashSet::new();
        let mut good_len = 0usize;
        let mut seen_header = false;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            let complete = line.ends_with('\n');
            let body = line.trim_end();
            if body.is_empty() {
                good_len += line.len();
                continue;
            }
            match parse_line(body, &path, i + 1) {
                Ok(rec) => {
                    if let Record::Header(h) = &rec {
                        if h.device.name != header.device.name {
                            return Err(ModelError::WrongDevice {
                                path: path.clone(),
                                file_device: h.device.name.clone(),
                                device: header.device.name.clone(),
                            });
                        }
                        seen_header = true;
                    } else if !seen_header {
                        return Err(ModelError::Parse {
                            path: path.clone(),
                            line: i + 1,
                            reason: "a profile must start with a header record".into(),
                        });
                    }
                    if let Some(k) = rec.key() {
                        keys.insert(k);
                    }
                    if complete {
                        good_len += line.len();
                    } else {
                        // A whole record without its newline: keep it, add the newline.
                        good_len += line.len();
                        file.write_all(b"\n").map_err(io)?;
                        good_len += 1;
                    }
                }
                Err(e) if i + 1 == lines.len() && !complete => {
                    // The interrupted last write.
                    let _ = e;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if good_len < text.len() {
            file.set_len(good_len as u64).map_err(io)?;
            file.seek(SeekFrom::End(0)).map_err(io)?;
        }
        let resumed = keys.len();
        let mut w = ProfileWriter {
            path,
            file,
            keys,
            resumed,
            written: 0,
        };
        if !seen_header {
            w.write(&Record::Header(header.clone()))?;
        }
        Ok(w)
    }

    /// True when a record with this key is already in the file.
    pub fn has(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// Measurement records found in the file when it was opened.
    pub fn resumed(&self) -> usize {
        self.resumed
    }

    /// Records written since it was opened.
    pub fn written(&self) -> usize {
        self.written
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as a line and flushes it.
    pub fn write(&mut self, rec: &Record) -> Result<(), ModelError> {
        let mut line = serde_json::to_string(rec).map_err(|e| {
            ModelError::InvalidParameter(format!("record cannot be written as JSON: {e}"))
        })?;
        line.push('\n');
        let path = self.path.clone();
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|source| ModelError::Io { path, source })?;
        if let Some(k) = rec.key() {
            self.keys.insert(k);
        }
        self.written += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn device(name: &str) -> DeviceProps {
        DeviceProps {
            name: name.into(),
            total_mem: 150 << 30,
            l2_bytes: 60 << 20,
            driver_version: Some(13000),
            nvrtc_version: Some((13, 0)),
            ..DeviceProps::hopper_like()
        }
    }

    fn header(name: &str) -> Header {
        Header {
            schema: PROFILE_SCHEMA,
            device: device(name),
            quick: false,
            tool_version: "test".into(),
            started_unix_s: 0,
        }
    }

    fn vec_rec(n: u64) -> Record {
        Record::Vector(VectorRecord {
            kernel: "cg_update_grid_v2".into(),
            op: "cg_update".into(),
            variant: "grid_v2".into(),
            n,
            threads: 256,
            blocks: 264,
            nb_multiple: Some(1),
            held_out: false,
            timing: Timing {
                median_ms: 0.01,
                min_ms: 0.009,
                max_ms: 0.02,
                reps: 10,
            },
        })
    }

    #[test]
    fn write_resume_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
        w.write(&vec_rec(1000)).unwrap();
        w.write(&vec_rec(2000)).unwrap();
        drop(w);
        // An interrupted write: half a record, no newline.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"record":"vector","kernel":"cg_upd"#)
            .unwrap();
        drop(f);
        let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
        assert_eq!(w.resumed(), 2);
        assert!(w.has(&vec_rec(1000).key().unwrap()));
        assert!(!w.has(&vec_rec(3000).key().unwrap()));
        w.write(&vec_rec(3000)).unwrap();
        drop(w);
        let p = Profile::read(&path).unwrap();
        assert_eq!(p.header.unwrap().device.name, "GPU A");
        assert_eq!(p.vector.len(), 3);
        assert_eq!(p.vector[2].n, 3000);
    }

    #[test]
    fn resume_refuses_another_device_and_bad_lines_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
        w.write(&vec_rec(1000)).unwrap();
        drop(w);
        let e = ProfileWriter::open(&path, &header("GPU B")).err().unwrap();
        assert!(matches!(e, ModelError::WrongDevice { .. }), "{e}");

        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"record\":\"nope\"}\n").unwrap();
        f.write_all(b"\n").unwrap();
        drop(f);
        let e = Profile::read(&path).err().unwrap().to_string();
        assert!(e.contains("p.jsonl:3:"), "{e}");
        let e = ProfileWriter::open(&path, &header("GPU A"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(":3:"), "{e}");
    }

    #[test]
    fn header_must_come_first_and_schema_must_match() {
        let body = serde_json::to_string(&vec_rec(10)).unwrap();
        let e = Profile::from_reader(body.as_bytes(), Path::new("x"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("start with a header"), "{e}");
        let mut h = header("GPU A");
        h.schema = PROFILE_SCHEMA + 1;
        let body = serde_json::to_string(&Record::Header(h)).unwrap();
        let e = Profile::from_reader(body.as_bytes(), Path::new("x"))
            .err()
            .unwrap();
        assert!(matches!(e, ModelError::Schema { .. }), "{e}");
    }

    #[test]
    fn stability_counts_agreeing_medians_above_the_threshold() {
        let mk = |times: &[(u64, f64)]| {
            let mut p = Profile::default();
            p.push(Record::Header(header("GPU A"))).unwrap();
            for &(n, t) in times {
                let Record::Vector(mut v) = vec_rec(n) else {
                    unreachable!()
                };
                v.timing = Timing {
                    median_ms: t,
                    min_ms: t,
                    max_ms: t,
                    reps: 5,
                };
                p.push(Record::Vector(v)).unwrap();
            }
            p
        };
        let a = mk(&[(1, 0.001), (2, 1.0), (3, 2.0), (4, 3.0)]);
        let b = mk(&[(1, 0.005), (2, 1.04), (3, 2.5), (5, 3.0)]);
        let r = stability(&a, &b, 0.02, 0.05);
        assert_eq!(r.compared, 2);
        assert_eq!(r.within, 1);
        assert!((r.worst - 0.25).abs() < 1e-12);
        assert_eq!(r.by_kind, vec![("vector".to_string(), 2, 1)]);
        assert!((r.share() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn occupancy_records_are_audited() {
        let h = device("GPU A");
        let mut rec = OccupancyRecord {
            kernel: "dot_vec2".parse().unwrap(),
            threads: 256,
            regs_per_thread: 40,
            static_smem_bytes: 2048,
            dynamic_smem_bytes: 0,
            blocks_per_sm: 6,
            nb_nt: 792,
        };
        assert_eq!(rec.check(&h).unwrap().nb_nt, 792);
        rec.nb_nt = 1056;
        assert!(rec.check(&h).is_err());
        // 255 registers x 1024 threads fit no SM: no valid count.
        rec.threads = 1024;
        rec.regs_per_thread = 255;
        let e = rec.check(&h).unwrap_err().to_string();
        assert!(e.contains("registers"), "{e}");
    }

    #[test]
    fn gz_profiles_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let mut w = ProfileWriter::open(&path, &header("GPU A")).unwrap();
        w.write(&vec_rec(5)).unwrap();
        drop(w);
        let gz = dir.path().join("p.jsonl.gz");
        let mut enc = flate2::write::GzEncoder::new(
            File::create(&gz).unwrap(),
            flate2::Compression::default(),
        );
        enc.write_all(&std::fs::read(&path).unwrap()).unwrap();
        enc.finish().unwrap();
        assert_eq!(Profile::read(&gz).unwrap(), Profile::read(&path).unwrap());
    }
}
