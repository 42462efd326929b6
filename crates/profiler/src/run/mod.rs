//! Running a sweep: every planned measurement that the profile does not already hold is
//! measured and appended to it as one flushed JSON line, so an interrupted tune keeps what it
//! measured and the next run with the same profile file measures only the rest.
//!
//! Resume rules:
//! - vector, dot and epilogue measurements are skipped when their record's key is in the
//!   profile (a profile written before the epilogue stage existed gets it on resume); the
//!   buffers of a length are allocated only when some measurement at that length is missing.
//!   A length's records are written together once all of them are timed (an interruption loses
//!   at most that length's timings, a second or two), because a disturbance found late in a
//!   length can send every timing of it back to be timed again;
//! - a matrix is done when its [`MatrixRecord`] is in the profile: that record is written LAST,
//!   after every SpMV and conversion record of the matrix. A matrix without it is measured again
//!   as a whole (the benchmark measures all candidates of a matrix in one pass), and only the
//!   SpMV and conversion records the profile lacks are written, so nothing is duplicated. A
//!   reader therefore ignores SpMV records of a matrix that has no matrix record (an
//!   interrupted one);
//! - a profile started by a quick sweep is not continued by a full one, nor the reverse
//!   ([`open_profile`]).
//!
//! Disturbances: a stretch of timings made while something else slowed the GPU (another
//! process, a clock change) reads every configuration of a kernel slower at one length, which
//! the trees then fit as a real difference (a stretch of the H100's dot stage read 18-30 us
//! where a second timing gave 6-8). Every length of the vector, dot and epilogue stages is
//! therefore timed in chunks of [`SENTINEL_EVERY`] points, each followed by a timing of the
//! length's sentinel (its cheapest point); a chunk whose sentinel reads more than
//! [`SENTINEL_TOLERANCE`] times the least sentinel time of the length is timed again (see
//! [`StageReport::retimed`]). The SpMV stage's benchmark times a matrix's candidates in one
//! call and has no such check.
//!
//! Memory: a length's buffers are allocated only when they fit both the budget (the plan's
//! memory fraction of the total) and the free memory; the stage buffers are released at the end
//! of every stage. The peak of the memory in use (as the driver reports it) is kept per stage;
//! for the SpMV stage, whose benchmark allocates internally, it is the memory in use before the
//! matrix plus an estimate of the benchmark's largest footprint.

mod progress;
mod stages;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use autopcg_catalog::DeviceProps;
use autopcg_model::profile::{Header, ProfileWriter, Record, PROFILE_SCHEMA};
use autopcg_model::work::SpmvWork;
use autopcg_sparse::PaddingLimits;

use crate::measure::Measurer;
use crate::plan::{KernelTable, Sweep, SweepOptions};
use crate::ProfilerError;
use progress::Clock;
use stages::{Run, Todo};

/// Points of a vector, dot or epilogue length timed between two timings of the length's
/// sentinel (see [`StageReport::retimed`]).
pub const SENTINEL_EVERY: usize = 12;
/// A sentinel time this many times the least one read at the length marks the chunk before it
/// as disturbed.
pub const SENTINEL_TOLERANCE: f64 = 1.25;
/// ... and only when it is also slower by more than this, milliseconds: the launch-bound
/// lengths' times of 3-6 us move by a few percent between runs.
pub const SENTINEL_FLOOR_MS: f64 = 5e-4;
/// Times a disturbed chunk is timed again before its timings are kept with a note.
pub const MAX_RETIMES: usize = 3;
/// Readings of the sentinel, after a slow one, waiting for a clean one (the k-th after a pause
/// of k [`RETIME_PAUSE`]): 0.75 s in all before a slowdown is taken as lasting.
pub const MAX_WAITS: usize = 5;
/// The first pause of [`MAX_WAITS`].
pub const RETIME_PAUSE: Duration = Duration::from_millis(50);

/// Bandwidth the progress estimate starts from before any measurement calibrates it, bytes per
/// second.
pub const ASSUMED_BANDWIDTH: f64 = 3e12;

/// Where a sweep stands, for a progress display.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress<'a> {
    /// Stage name (`vector`, `dot`, `spmv`, `spmv_eval`).
    pub stage: &'a str,
    /// What is being measured now (a length or a matrix).
    pub current: &'a str,
    /// Items of the stage done (measured, found in the profile or skipped).
    pub done: usize,
    /// Items of the stage.
    pub total: usize,
    /// Time since the stage started.
    pub stage_elapsed: Duration,
    /// Estimated time left in the stage.
    pub stage_eta: Option<Duration>,
    /// Time since the sweep started.
    pub elapsed: Duration,
    /// Estimated time left in the whole sweep.
    pub eta: Option<Duration>,
}

/// What a finished stage did.
#[derive(Debug, Clone, PartialEq)]
pub struct StageReport {
    /// Stage name.
    pub stage: String,
    /// Items planned.
    pub planned: usize,
    /// Items measured in this run.
    pub measured: usize,
    /// Items found in the profile.
    pub resumed: usize,
    /// Items left out (their buffers or matrix did not fit the memory).
    pub skipped: usize,
    /// Records written in this run.
    pub records: usize,
    /// Time the stage took.
    pub elapsed: Duration,
    /// Largest device memory in use during the stage, bytes (all users of the device).
    pub peak_device_bytes: u64,
    /// The peak includes an estimate (the SpMV benchmark allocates internally).
    pub peak_estimated: bool,
    /// Timings of the lengths' sentinels (vector, dot and epilogue stages: one at the start
    /// of a length with points to time and one after every [`SENTINEL_EVERY`] points).
    pub sentinel_timings: usize,
    /// Point timings made again because a sentinel read the GPU as disturbed (another process,
    /// a clock change) while they were timed: the profile holds the later timing.
    pub retimed: usize,
    /// Points whose timings were kept although the sentinel read the GPU as disturbed: those
    /// of a chunk still disturbed after [`MAX_RETIMES`] new tries, and those timed after a
    /// lasting slowdown became a length's reference (the sweep's notes name the lengths).
    pub disturbed_kept: usize,
}

/// What a sweep did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SweepReport {
    /// Per stage, in order.
    pub stages: Vec<StageReport>,
    /// Time the sweep took.
    pub elapsed: Duration,
    /// Device memory in use when the sweep started, bytes.
    pub baseline_device_bytes: u64,
    /// Largest device memory in use, bytes.
    pub peak_device_bytes: u64,
    /// Notes (items skipped and why).
    pub notes: Vec<String>,
}

impl SweepReport {
    fn total(&self, of: impl Fn(&StageReport) -> usize) -> usize {
        self.stages.iter().map(of).sum()
    }
    /// Items measured in this run.
    pub fn measured(&self) -> usize {
        self.total(|s| s.measured)
    }
    /// Items found in the profile.
    pub fn resumed(&self) -> usize {
        self.total(|s| s.resumed)
    }
    /// Items skipped.
    pub fn skipped(&self) -> usize {
        self.total(|s| s.skipped)
    }
    /// Records written in this run.
    pub fn records(&self) -> usize {
        self.total(|s| s.records)
    }
    /// Timings of the lengths' sentinels ([`StageReport::sentinel_timings`]).
    pub fn sentinel_timings(&self) -> usize {
        self.total(|s| s.sentinel_timings)
    }
    /// Point timings made again after a disturbance ([`StageReport::retimed`]).
    pub fn retimed(&self) -> usize {
        self.total(|s| s.retimed)
    }
    /// Points kept although timed while disturbed ([`StageReport::disturbed_kept`]).
    pub fn disturbed_kept(&self) -> usize {
        self.total(|s| s.disturbed_kept)
    }
}

/// Receives progress while a sweep runs. Every method has an empty default.
pub trait Observer {
    /// After every item.
    fn progress(&mut self, _p: &Progress<'_>) {}
    /// Something worth telling (an item skipped and why).
    fn note(&mut self, _msg: &str) {}
    /// After every stage.
    fn stage_done(&mut self, _r: &StageReport) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Observer for Silent {}

/// The header of a new profile of `device`.
pub fn header(device: &DeviceProps, quick: bool) -> Header {
    Header {
        schema: PROFILE_SCHEMA,
        device: device.clone(),
        quick,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        started_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    }
}

/// Opens (or starts) the profile at `path` for a sweep of `device`; an existing profile must be
/// of the same device (checked by [`ProfileWriter::open`]) and of the same kind of sweep (quick
/// or full).
pub fn open_profile(
    path: &Path,
    device: &DeviceProps,
    quick: bool,
) -> Result<ProfileWriter, ProfilerError> {
    if let Some(h) = existing_header(path) {
        if h.quick != quick {
            let kind = |q: bool| if q { "a quick" } else { "a full" };
            return Err(ProfilerError::ProfileMismatch {
                path: path.to_path_buf(),
                reason: format!(
                    "the profile holds {} sweep and this is {} one",
                    kind(h.quick),
                    kind(quick)
                ),
            });
        }
    }
    Ok(ProfileWriter::open(path, &header(device, quick))?)
}

/// The header on the first line of an existing profile, when there is one that parses.
fn existing_header(path: &Path) -> Option<Header> {
    let f = File::open(path).ok()?;
    let mut line = String::new();
    BufReader::new(f).read_line(&mut line).ok()?;
    match serde_json::from_str::<Record>(line.trim()).ok()? {
        Record::Header(h) => Some(h),
        _ => None,
    }
}

/// The profile key of a matrix (the key of its [`MatrixRecord`]).
pub fn matrix_key(id: &str) -> String {
    format!("matrix/{id}")
}

/// Device bytes the SpMV benchmark of a matrix needs at most: the largest of its formats (one
/// is on the device at a time; padded formats only when the padding limits accept them), `x`
/// and `y`, and as much again as `y` for cuSPARSE's work buffer.
pub fn spmv_footprint(w: &SpmvWork, padding: &PaddingLimits) -> u64 {
    let nnz = w.nnz.max(1);
    let accepted = |slots: u64, bytes: u64| {
        slots as f64 <= padding.max_fill_ratio * nnz as f64 && bytes <= padding.max_bytes
    };
    let csr = 12 * w.nnz + 4 * (w.n + 1);
    let coo = 16 * w.nnz;
    let ell = 12 * w.ell_slots;
    let dia = 8 * w.dia_slots + 4 * w.ndiag;
    let hyb = 12 * w.hyb_ell_slots + 16 * w.hyb_coo_nnz;
    let mut m = csr.max(coo);
    if accepted(w.ell_slots, ell) {
        m = m.max(ell);
    }
    if accepted(w.dia_slots, dia) {
        m = m.max(dia);
    }
    if accepted(w.hyb_ell_slots, 12 * w.hyb_ell_slots) {
        m = m.max(hyb);
    }
    m + 8 * w.ncols + 16 * w.n
}

/// Runs `sweep`: writes the occupancy records, then the vector, dot and matrix stages, skipping
/// everything the profile already holds (see the module documentation). On error the stage
/// buffers are released and what was written stays in the profile.
pub fn run_sweep(
    m: &mut dyn Measurer,
    writer: &mut ProfileWriter,
    sweep: &Sweep,
    obs: &mut dyn Observer,
) -> Result<SweepReport, ProfilerError> {
    let r = run_inner(m, writer, sweep, obs);
    if r.is_err() {
        let _ = m.free();
    }
    r
}

/// The steps of a sweep: what is left to measure, then the vector stage (with the occupancy
/// records), the dot stage, the epilogue stage and the matrix stage.
fn run_inner(
    m: &mut dyn Measurer,
    writer: &mut ProfileWriter,
    sweep: &Sweep,
    obs: &mut dyn Observer,
) -> Result<SweepReport, ProfilerError> {
    let mut report = SweepReport::default();
    let (free0, total0) = m.mem_info()?;
    report.baseline_device_bytes = total0.saturating_sub(free0);
    report.peak_device_bytes = report.baseline_device_bytes;
    let todo = Todo::of(sweep, writer);
    let mut run = Run {
        m,
        writer,
        sweep,
        obs,
        clock: Clock::new(todo.cost()),
        report,
    };
    run.vector_stage(&todo)?;
    run.dot_stage(&todo)?;
    run.epilogue_stage(&todo)?;
    run.matrix_stage(&todo)?;
    run.report.elapsed = run.clock.start.elapsed();
    Ok(run.report)
}

/// The resources of every kernel the plan of `opts` launches, from the measurement source.
pub fn kernel_table(
    m: &mut dyn Measurer,
    opts: &SweepOptions,
) -> Result<KernelTable, ProfilerError> {
    let device = m.device().clone();
    let mut t = KernelTable::new();
    for k in Sweep::kernel_refs(&device, opts) {
        let r = m.resources(k)?;
        t.insert(k, r);
    }
    Ok(t)
}

/// The tune's sweep: compiles every kernel, reads their resources, plans the sweep for the
/// device and runs it into `writer`. Returns the plan with the report.
pub fn tune(
    m: &mut dyn Measurer,
    writer: &mut ProfileWriter,
    opts: &SweepOptions,
    obs: &mut dyn Observer,
) -> Result<(Sweep, SweepReport), ProfilerError> {
    m.prepare()?;
    let table = kernel_table(m, opts)?;
    let sweep = Sweep::plan(m.device(), opts, &table)?;
    let report = run_sweep(m, writer, &sweep, obs)?;
    Ok((sweep, report))
}

/// Measures the evaluation set of matrices ([`crate::matrices::eval_matrices`], never used for
/// fitting) into `writer`, with the same resume rules.
pub fn run_eval_set(
    m: &mut dyn Measurer,
    writer: &mut ProfileWriter,
    opts: &SweepOptions,
    obs: &mut dyn Observer,
) -> Result<SweepReport, ProfilerError> {
    m.prepare()?;
    let sweep = Sweep::eval_plan(m.device(), opts)?;
    run_sweep(m, writer, &sweep, obs)
}
