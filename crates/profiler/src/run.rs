//! Running a sweep: every planned measurement that the profile does not already hold is
//! measured and appended to it as one flushed JSON line, so an interrupted tune keeps what it
//! measured and the next run with the same profile file measures only the rest.
//!
//! Resume rules:
//! - vector and dot measurements are skipped when their record's key is in the profile; the
//!   buffers of a length are allocated only when some measurement at that length is missing;
//! - a matrix is done when its [`MatrixRecord`] is in the profile: that record is written LAST,
//!   after every SpMV and conversion record of the matrix. A matrix without it is measured again
//!   as a whole (the benchmark measures all candidates of a matrix in one pass), and only the
//!   SpMV and conversion records the profile lacks are written, so nothing is duplicated. A
//!   reader therefore ignores SpMV records of a matrix that has no matrix record (an
//!   interrupted one);
//! - a profile started by a quick sweep is not continued by a full one, nor the reverse
//!   ([`open_profile`]).
//!
//! Memory: a length's buffers are allocated only when they fit both the budget (the plan's
//! memory fraction of the total) and the free memory; the stage buffers are released at the end
//! of every stage. The peak of the memory in use (as the driver reports it) is kept per stage;
//! for the SpMV stage, whose benchmark allocates internally, it is the memory in use before the
//! matrix plus an estimate of the benchmark's largest footprint.
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use autopcg_catalog::DeviceProps;
use autopcg_model::profile::{
    DotRecord, Header, MatrixRecord, ProfileWriter, Record, StageRecord, Timing, VectorRecord,
    PROFILE_SCHEMA,
};
use autopcg_model::work::{spmv_work, SpmvWork};
use autopcg_sparse::{CsrMatrix, PaddingLimits, SparseError};

use crate::measure::Measurer;
use crate::plan::{
    dot_stage_bytes, vector_stage_bytes, DotPoint, KernelTable, Sweep, SweepOptions, VectorPoint,
};
use crate::ProfilerError;

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
    /// Items measured in this run.
    pub fn measured(&self) -> usize {
        self.stages.iter().map(|s| s.measured).sum()
    }
    /// Items found in the profile.
    pub fn resumed(&self) -> usize {
        self.stages.iter().map(|s| s.resumed).sum()
    }
    /// Items skipped.
    pub fn skipped(&self) -> usize {
        self.stages.iter().map(|s| s.skipped).sum()
    }
    /// Records written in this run.
    pub fn records(&self) -> usize {
        self.stages.iter().map(|s| s.records).sum()
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

const NO_TIMING: Timing = Timing {
    median_ms: 0.0,
    min_ms: 0.0,
    max_ms: 0.0,
    reps: 0,
};

fn vector_record(n: u64, held_out: bool, p: &VectorPoint, timing: Timing) -> Record {
    Record::Vector(VectorRecord {
        kernel: p.kernel,
        op: p.kernel.op(),
        variant: p.kernel.variant(),
        n,
        threads: p.cfg.threads,
        blocks: p.cfg.blocks,
        nb_multiple: p.nb_multiple,
        elems_per_thread: p.kernel.variant().elements_per_thread(),
        held_out,
        timing,
    })
}

fn dot_record(n: u64, held_out: bool, p: &DotPoint, timing: Timing) -> Record {
    Record::Dot(DotRecord {
        kernel: p.op,
        n,
        threads: p.cfg.threads,
        blocks: p.cfg.blocks,
        nb_multiple: p.nb_multiple,
        elems_per_thread: p.op.elements_per_thread(),
        held_out,
        timing,
    })
}

fn key_of(r: &Record) -> String {
    r.key().unwrap_or_default()
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

/// Time bookkeeping for the estimates: measured cost so far against time spent measuring.
struct Clock {
    start: Instant,
    remaining_cost: f64,
    cost_done: f64,
    time_measuring: Duration,
}

impl Clock {
    fn eta(&self, remaining: f64) -> Option<Duration> {
        let rate = if self.cost_done > 0.0 && !self.time_measuring.is_zero() {
            self.time_measuring.as_secs_f64() / self.cost_done
        } else {
            1.0
        };
        let s = remaining * rate;
        (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s))
    }

    fn spent(&mut self, cost: f64, took: Duration) {
        self.cost_done += cost;
        self.remaining_cost = (self.remaining_cost - cost).max(0.0);
        self.time_measuring += took;
    }
}

/// State of one stage while it runs.
struct StageRun<'a> {
    name: &'a str,
    start: Instant,
    total: usize,
    done: usize,
    remaining_cost: f64,
    report: StageReport,
}

impl<'a> StageRun<'a> {
    fn new(name: &'a str, total: usize, remaining_cost: f64) -> StageRun<'a> {
        StageRun {
            name,
            start: Instant::now(),
            total,
            done: 0,
            remaining_cost,
            report: StageReport {
                stage: name.to_string(),
                planned: total,
                measured: 0,
                resumed: 0,
                skipped: 0,
                records: 0,
                elapsed: Duration::ZERO,
                peak_device_bytes: 0,
                peak_estimated: false,
            },
        }
    }

    fn show(&self, clock: &Clock, obs: &mut dyn Observer, current: &str) {
        obs.progress(&Progress {
            stage: self.name,
            current,
            done: self.done,
            total: self.total,
            stage_elapsed: self.start.elapsed(),
            stage_eta: clock.eta(self.remaining_cost),
            elapsed: clock.start.elapsed(),
            eta: clock.eta(clock.remaining_cost),
        });
    }

    fn measured(&mut self, clock: &mut Clock, cost: f64, took: Duration) {
        self.done += 1;
        self.report.measured += 1;
        self.remaining_cost = (self.remaining_cost - cost).max(0.0);
        clock.spent(cost, took);
    }

    fn skipped(&mut self, clock: &mut Clock, items: usize, cost: f64) {
        self.done += items;
        self.report.skipped += items;
        self.remaining_cost = (self.remaining_cost - cost).max(0.0);
        clock.remaining_cost = (clock.remaining_cost - cost).max(0.0);
    }

    fn peak(&mut self, used: u64, estimated: bool) {
        if used > self.report.peak_device_bytes {
            self.report.peak_device_bytes = used;
            self.report.peak_estimated = estimated;
        }
    }
}

fn write(
    writer: &mut ProfileWriter,
    st: &mut StageRun<'_>,
    r: &Record,
) -> Result<(), ProfilerError> {
    writer.write(r)?;
    st.report.records += 1;
    Ok(())
}

/// Ends a stage: releases the buffers, writes the stage record, tells the observer.
fn finish_stage(
    m: &mut dyn Measurer,
    writer: &mut ProfileWriter,
    mut st: StageRun<'_>,
    report: &mut SweepReport,
    obs: &mut dyn Observer,
) -> Result<(), ProfilerError> {
    m.free()?;
    st.report.elapsed = st.start.elapsed();
    let rec = Record::Stage(StageRecord {
        stage: st.name.to_string(),
        records: st.report.records,
        elapsed_s: st.report.elapsed.as_secs_f64(),
    });
    writer.write(&rec)?;
    report.peak_device_bytes = report.peak_device_bytes.max(st.report.peak_device_bytes);
    obs.stage_done(&st.report);
    report.stages.push(st.report);
    Ok(())
}

fn note(report: &mut SweepReport, obs: &mut dyn Observer, msg: String) {
    obs.note(&msg);
    report.notes.push(msg);
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

fn run_inner(
    m: &mut dyn Measurer,
    writer: &mut ProfileWriter,
    sweep: &Sweep,
    obs: &mut dyn Observer,
) -> Result<SweepReport, ProfilerError> {
    let bw = ASSUMED_BANDWIDTH;
    let mut report = SweepReport::default();
    let (free0, total0) = m.mem_info()?;
    report.baseline_device_bytes = total0.saturating_sub(free0);
    report.peak_device_bytes = report.baseline_device_bytes;

    // What is left to measure, and its estimated cost.
    let vec_todo: Vec<Vec<bool>> = sweep
        .vector
        .iter()
        .map(|s| {
            s.points
                .iter()
                .map(|p| !writer.has(&key_of(&vector_record(s.n, s.held_out, p, NO_TIMING))))
                .collect()
        })
        .collect();
    let dot_todo: Vec<Vec<bool>> = sweep
        .dot
        .iter()
        .map(|s| {
            s.points
                .iter()
                .map(|p| !writer.has(&key_of(&dot_record(s.n, s.held_out, p, NO_TIMING))))
                .collect()
        })
        .collect();
    let mat_todo: Vec<bool> = sweep
        .matrices
        .iter()
        .map(|mm| !writer.has(&matrix_key(&mm.id)))
        .collect();
    let vec_cost: f64 = sweep
        .vector
        .iter()
        .zip(&vec_todo)
        .flat_map(|(s, todo)| {
            s.points
                .iter()
                .zip(todo)
                .filter(|(_, t)| **t)
                .map(move |(p, _)| sweep.vector_point_s(s.n, p, bw))
        })
        .sum();
    let dot_cost: f64 = sweep
        .dot
        .iter()
        .zip(&dot_todo)
        .flat_map(|(s, todo)| {
            s.points
                .iter()
                .zip(todo)
                .filter(|(_, t)| **t)
                .map(move |(p, _)| sweep.dot_point_s(s.n, p, bw))
        })
        .sum();
    let mat_cost: f64 = sweep
        .matrices
        .iter()
        .zip(&mat_todo)
        .filter(|(_, t)| **t)
        .map(|(mm, _)| sweep.matrix_s(mm, bw))
        .sum();
    let mut clock = Clock {
        start: Instant::now(),
        remaining_cost: vec_cost + dot_cost + mat_cost,
        cost_done: 0.0,
        time_measuring: Duration::ZERO,
    };

    // Vector stage (the occupancy records of every stage come first: no timing, only the
    // compiled kernels' figures).
    if !sweep.vector.is_empty() || !sweep.occupancy.is_empty() {
        let total = sweep.vector.iter().map(|s| s.points.len()).sum();
        let mut st = StageRun::new("vector", total, vec_cost);
        for o in &sweep.occupancy {
            let r = Record::Occupancy(o.clone());
            if !writer.has(&key_of(&r)) {
                write(writer, &mut st, &r)?;
            }
        }
        for (s, todo) in sweep.vector.iter().zip(&vec_todo) {
            let current = format!("n = {}", s.n);
            let pending: Vec<&VectorPoint> = s
                .points
                .iter()
                .zip(todo)
                .filter(|(_, t)| **t)
                .map(|(p, _)| p)
                .collect();
            let found = s.points.len() - pending.len();
            st.done += found;
            st.report.resumed += found;
            if pending.is_empty() {
                st.show(&clock, obs, &current);
                continue;
            }
            let need = vector_stage_bytes(s.n);
            let (free, total_mem) = m.mem_info()?;
            if need > sweep.memory_budget || need > free {
                let cost = pending
                    .iter()
                    .map(|p| sweep.vector_point_s(s.n, p, bw))
                    .sum();
                st.skipped(&mut clock, pending.len(), cost);
                note(
                    &mut report,
                    obs,
                    format!(
                        "vector stage: length {} skipped: its buffers need {need} bytes, \
                         {free} are free and the budget is {}",
                        s.n, sweep.memory_budget
                    ),
                );
                continue;
            }
            m.alloc_vectors(s.n)?;
            let (free, _) = m.mem_info()?;
            st.peak(total_mem.saturating_sub(free), false);
            for p in pending {
                let t0 = Instant::now();
                let timing = m.time_vector(p, &sweep.vector_timing)?;
                write(writer, &mut st, &vector_record(s.n, s.held_out, p, timing))?;
                st.measured(&mut clock, sweep.vector_point_s(s.n, p, bw), t0.elapsed());
                st.show(&clock, obs, &current);
            }
        }
        finish_stage(m, writer, st, &mut report, obs)?;
    }

    // Dot stage.
    if !sweep.dot.is_empty() {
        let total = sweep.dot.iter().map(|s| s.points.len()).sum();
        let mut st = StageRun::new("dot", total, dot_cost);
        for (s, todo) in sweep.dot.iter().zip(&dot_todo) {
            let current = format!("n = {}", s.n);
            let pending: Vec<&DotPoint> = s
                .points
                .iter()
                .zip(todo)
                .filter(|(_, t)| **t)
                .map(|(p, _)| p)
                .collect();
            let found = s.points.len() - pending.len();
            st.done += found;
            st.report.resumed += found;
            if pending.is_empty() {
                st.show(&clock, obs, &current);
                continue;
            }
            let need = dot_stage_bytes(s.n, s.max_dot_blocks, s.max_dot3_blocks);
            let (free, total_mem) = m.mem_info()?;
            if need > sweep.memory_budget || need > free {
                let cost = pending.iter().map(|p| sweep.dot_point_s(s.n, p, bw)).sum();
                st.skipped(&mut clock, pending.len(), cost);
                note(
                    &mut report,
                    obs,
                    format!(
                        "dot stage: length {} skipped: its buffers need {need} bytes, \
                         {free} are free and the budget is {}",
                        s.n, sweep.memory_budget
                    ),
                );
                continue;
            }
            m.alloc_dots(s.n, s.max_dot_blocks, s.max_dot3_blocks)?;
            let (free, _) = m.mem_info()?;
            st.peak(total_mem.saturating_sub(free), false);
            for p in pending {
                let t0 = Instant::now();
                let timing = m.time_dot(p, &sweep.dot_timing)?;
                write(writer, &mut st, &dot_record(s.n, s.held_out, p, timing))?;
                st.measured(&mut clock, sweep.dot_point_s(s.n, p, bw), t0.elapsed());
                st.show(&clock, obs, &current);
            }
        }
        finish_stage(m, writer, st, &mut report, obs)?;
    }

    // Matrix stage.
    if !sweep.matrices.is_empty() {
        let st = StageRun::new(&sweep.matrix_stage, sweep.matrices.len(), mat_cost);
        matrix_stage(
            m,
            writer,
            sweep,
            &mat_todo,
            st,
            &mut clock,
            &mut report,
            obs,
        )?;
    }
    report.elapsed = clock.start.elapsed();
    Ok(report)
}

/// A matrix built on the host, with its work counts.
type Built = Result<(CsrMatrix, SpmvWork), SparseError>;

/// The SpMV stage. Matrices are built (and their work counted) on a second thread one matrix
/// ahead of the benchmark, so the host work of the next matrix overlaps the GPU work of this
/// one; at most two built matrices wait in memory.
#[allow(clippy::too_many_arguments)]
fn matrix_stage(
    m: &mut dyn Measurer,
    writer: &mut ProfileWriter,
    sweep: &Sweep,
    todo: &[bool],
    mut st: StageRun<'_>,
    clock: &mut Clock,
    report: &mut SweepReport,
    obs: &mut dyn Observer,
) -> Result<(), ProfilerError> {
    let bw = ASSUMED_BANDWIDTH;
    let to_build: Vec<usize> = (0..sweep.matrices.len()).filter(|&i| todo[i]).collect();
    std::thread::scope(|scope| -> Result<(), ProfilerError> {
        let (tx, rx) = sync_channel::<(usize, Built)>(1);
        let base = &sweep.options.base_dir;
        let specs = &sweep.matrices;
        scope.spawn(move || {
            for i in to_build {
                let built = specs[i].recipe.build(base).map(|a| {
                    let w = spmv_work(&a);
                    (a, w)
                });
                if tx.send((i, built)).is_err() {
                    // The stage stopped early.
                    break;
                }
            }
        });
        for (i, spec) in sweep.matrices.iter().enumerate() {
            if !todo[i] {
                st.done += 1;
                st.report.resumed += 1;
                st.show(clock, obs, &spec.id);
                continue;
            }
            let cost = sweep.matrix_s(spec, bw);
            st.show(clock, obs, &spec.id);
            let t0 = Instant::now();
            let (j, built) = rx.recv().map_err(|_| {
                ProfilerError::Measurement("the matrix builder stopped unexpectedly".into())
            })?;
            if j != i {
                return Err(ProfilerError::Measurement(format!(
                    "matrix builder out of order: got {}, expected {}",
                    specs[j].id, spec.id
                )));
            }
            let (a, work) = built.map_err(|source| ProfilerError::Matrix {
                id: spec.id.clone(),
                source,
            })?;
            let need = spmv_footprint(&work, &sweep.spmv.padding);
            let (free, total_mem) = m.mem_info()?;
            if need > sweep.memory_budget || need > free {
                st.skipped(clock, 1, cost);
                note(
                    report,
                    obs,
                    format!(
                        "{}: matrix {} skipped: its benchmark needs about {need} bytes, {free} \
                         are free and the budget is {}",
                        sweep.matrix_stage, spec.id, sweep.memory_budget
                    ),
                );
                continue;
            }
            let bench = m.bench_matrix(&spec.id, &a, &sweep.spmv)?;
            drop(a);
            st.peak(total_mem.saturating_sub(free) + need, true);
            for r in bench.spmv {
                let r = Record::Spmv(r);
                if !writer.has(&key_of(&r)) {
                    write(writer, &mut st, &r)?;
                }
            }
            for c in bench.conversions {
                let r = Record::Conversion(c);
                if !writer.has(&key_of(&r)) {
                    write(writer, &mut st, &r)?;
                }
            }
            // Last: the record that marks the matrix done.
            let rec = Record::Matrix(Box::new(MatrixRecord {
                id: spec.id.clone(),
                set: spec.set,
                recipe: spec.recipe.clone(),
                features: bench.features,
                work,
            }));
            write(writer, &mut st, &rec)?;
            st.measured(clock, cost, t0.elapsed());
            st.show(clock, obs, &spec.id);
        }
        Ok(())
    })?;
    finish_stage(m, writer, st, report, obs)
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
