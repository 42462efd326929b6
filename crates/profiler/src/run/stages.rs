//! The stages of a sweep. The vector and the dot stage are one runner over lengths
//! ([`StageSize`]: a length's measurements, its buffers, how to time one and the record it
//! gives); the matrix stage benchmarks whole matrices, built one ahead on a second thread.
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use autopcg_model::profile::{
    DotRecord, EpilogueRecord, LaunchSample, MatrixRecord, ProfileWriter, Record, StageRecord,
    Timing, VectorRecord,
};
use autopcg_model::work::{spmv_work, SpmvWork};
use autopcg_sparse::{CsrMatrix, SparseError};

use super::progress::{Clock, StageRun};
use super::{
    matrix_key, spmv_footprint, Observer, SweepReport, ASSUMED_BANDWIDTH, MAX_RETIMES, MAX_WAITS,
    RETIME_PAUSE, SENTINEL_EVERY, SENTINEL_FLOOR_MS, SENTINEL_TOLERANCE,
};
use crate::measure::Measurer;
use crate::plan::{
    dot_stage_bytes, epilogue_stage_bytes, vector_stage_bytes, DotPoint, DotSize, EpiloguePoint,
    EpilogueSize, Sweep, VectorPoint, VectorSize,
};
use crate::ProfilerError;

/// A timing for records whose key alone is needed.
const NO_TIMING: Timing = Timing {
    median_ms: 0.0,
    min_ms: 0.0,
    max_ms: 0.0,
    reps: 0,
};

fn key_of(r: &Record) -> String {
    r.key().unwrap_or_default()
}

/// One length of the vector or the dot stage, as the stage runner sees it.
pub(super) trait StageSize {
    /// One measurement at this length.
    type Point;
    /// The stage's name in the profile and in notes.
    const STAGE: &'static str;
    /// The length.
    fn n(&self) -> u64;
    /// The measurements.
    fn points(&self) -> &[Self::Point];
    /// Device bytes of the length's buffers.
    fn need_bytes(&self) -> u64;
    /// Allocates the length's buffers.
    fn alloc(&self, m: &mut dyn Measurer) -> Result<(), ProfilerError>;
    /// Estimated seconds of one measurement (at [`ASSUMED_BANDWIDTH`]).
    fn cost(&self, sweep: &Sweep, p: &Self::Point) -> f64;
    /// Times one measurement.
    fn time(m: &mut dyn Measurer, sweep: &Sweep, p: &Self::Point) -> Result<Timing, ProfilerError>;
    /// The record of a measurement.
    fn record(&self, p: &Self::Point, timing: Timing) -> Record;
}

impl StageSize for VectorSize {
    type Point = VectorPoint;
    const STAGE: &'static str = "vector";

    fn n(&self) -> u64 {
        self.n
    }

    fn points(&self) -> &[VectorPoint] {
        &self.points
    }

    fn need_bytes(&self) -> u64 {
        vector_stage_bytes(self.n)
    }

    fn alloc(&self, m: &mut dyn Measurer) -> Result<(), ProfilerError> {
        m.alloc_vectors(self.n)
    }

    fn cost(&self, sweep: &Sweep, p: &VectorPoint) -> f64 {
        sweep.vector_point_s(self.n, p, ASSUMED_BANDWIDTH)
    }

    fn time(m: &mut dyn Measurer, sweep: &Sweep, p: &VectorPoint) -> Result<Timing, ProfilerError> {
        m.time_vector(p, &sweep.vector_timing)
    }

    /// The record of `p`, with the elements per thread of its kernel (the catalogue's
    /// property, which the planner's covering block counts used).
    fn record(&self, p: &VectorPoint, timing: Timing) -> Record {
        Record::Vector(VectorRecord {
            kernel: p.kernel,
            op: p.kernel.op(),
            variant: p.kernel.variant(),
            sample: LaunchSample {
                n: self.n,
                threads: p.cfg.threads,
                blocks: p.cfg.blocks,
                nb_multiple: p.nb_multiple,
                elems_per_thread: p.kernel.variant().elements_per_thread(),
                held_out: self.held_out,
                timing,
            },
        })
    }
}

impl StageSize for DotSize {
    type Point = DotPoint;
    const STAGE: &'static str = "dot";

    fn n(&self) -> u64 {
        self.n
    }

    fn points(&self) -> &[DotPoint] {
        &self.points
    }

    fn need_bytes(&self) -> u64 {
        dot_stage_bytes(self.n, self.max_dot_blocks, self.max_dot3_blocks)
    }

    fn alloc(&self, m: &mut dyn Measurer) -> Result<(), ProfilerError> {
        m.alloc_dots(self.n, self.max_dot_blocks, self.max_dot3_blocks)
    }

    fn cost(&self, sweep: &Sweep, p: &DotPoint) -> f64 {
        sweep.dot_point_s(self.n, p, ASSUMED_BANDWIDTH)
    }

    fn time(m: &mut dyn Measurer, sweep: &Sweep, p: &DotPoint) -> Result<Timing, ProfilerError> {
        m.time_dot(p, &sweep.dot_timing)
    }

    /// The record of `p`, with the elements per thread of its reduction (the catalogue's
    /// property, which the planner's covering block counts used).
    fn record(&self, p: &DotPoint, timing: Timing) -> Record {
        Record::Dot(DotRecord {
            kernel: p.op,
            sample: LaunchSample {
                n: self.n,
                threads: p.cfg.threads,
                blocks: p.cfg.blocks,
                nb_multiple: p.nb_multiple,
                elems_per_thread: p.op.elements_per_thread(),
                held_out: self.held_out,
                timing,
            },
        })
    }
}

impl StageSize for EpilogueSize {
    type Point = EpiloguePoint;
    const STAGE: &'static str = "epilogue";

    fn n(&self) -> u64 {
        self.n
    }

    fn points(&self) -> &[EpiloguePoint] {
        &self.points
    }

    fn need_bytes(&self) -> u64 {
        epilogue_stage_bytes(self.n, self.row_entries, self.max_fused_blocks)
    }

    fn alloc(&self, m: &mut dyn Measurer) -> Result<(), ProfilerError> {
        m.alloc_epilogue(self.n, self.row_entries, self.max_fused_blocks)
    }

    fn cost(&self, sweep: &Sweep, p: &EpiloguePoint) -> f64 {
        sweep.epilogue_point_s(self.n, self.row_entries, p, ASSUMED_BANDWIDTH)
    }

    fn time(
        m: &mut dyn Measurer,
        sweep: &Sweep,
        p: &EpiloguePoint,
    ) -> Result<Timing, ProfilerError> {
        m.time_epilogue(p, &sweep.dot_timing)
    }

    fn record(&self, p: &EpiloguePoint, timing: Timing) -> Record {
        Record::Epilogue(EpilogueRecord {
            kernel: p.kernel,
            variant: p.variant,
            row_entries: self.row_entries,
            blocks_per_sm: p.blocks_per_sm,
            sample: LaunchSample {
                n: self.n,
                threads: p.cfg.threads,
                blocks: p.cfg.blocks,
                nb_multiple: None,
                elems_per_thread: None,
                held_out: self.held_out,
                timing,
            },
        })
    }
}

/// Per length, which measurements the profile does not hold yet.
fn pending<S: StageSize>(sizes: &[S], writer: &ProfileWriter) -> Vec<Vec<bool>> {
    sizes
        .iter()
        .map(|s| {
            s.points()
                .iter()
                .map(|p| !writer.has(&key_of(&s.record(p, NO_TIMING))))
                .collect()
        })
        .collect()
}

/// Estimated seconds of the pending measurements.
fn pending_cost<S: StageSize>(sweep: &Sweep, sizes: &[S], todo: &[Vec<bool>]) -> f64 {
    sizes
        .iter()
        .zip(todo)
        .flat_map(|(s, todo)| {
            s.points()
                .iter()
                .zip(todo)
                .filter(|(_, t)| **t)
                .map(move |(p, _)| s.cost(sweep, p))
        })
        .sum()
}

/// What a sweep has left to measure (what the profile does not hold), and its estimated cost.
pub(super) struct Todo {
    vector: Vec<Vec<bool>>,
    dot: Vec<Vec<bool>>,
    epilogue: Vec<Vec<bool>>,
    matrices: Vec<bool>,
    vector_cost: f64,
    dot_cost: f64,
    epilogue_cost: f64,
    matrix_cost: f64,
}

/// Whether the profile holds a product of matrix `id` timed with L2 cold (its key ends in
/// `/flushed`, [`autopcg_model::profile::Record::key`]).
fn has_flushed_spmv(writer: &ProfileWriter, id: &str) -> bool {
    let prefix = format!("spmv/{id}/");
    writer.has_any(|k| k.starts_with(&prefix) && k.ends_with("/flushed"))
}

impl Todo {
    /// What `sweep` has left to measure into `writer`'s profile.
    pub(super) fn of(sweep: &Sweep, writer: &ProfileWriter) -> Todo {
        let vector = pending(&sweep.vector, writer);
        let dot = pending(&sweep.dot, writer);
        let epilogue = pending(&sweep.epilogue, writer);
        // A matrix is measured again when the profile holds it timed by another protocol
        // than the sweep's: without a product timed with L2 cold where the sweep flushes
        // (a profile written before the protocol changed; its reader then keeps the new
        // records only).
        let matrices: Vec<bool> = sweep
            .matrices
            .iter()
            .map(|mm| {
                !writer.has(&matrix_key(&mm.id))
                    || (sweep.spmv.flush_l2 && !has_flushed_spmv(writer, &mm.id))
            })
            .collect();
        Todo {
            vector_cost: pending_cost(sweep, &sweep.vector, &vector),
            dot_cost: pending_cost(sweep, &sweep.dot, &dot),
            epilogue_cost: pending_cost(sweep, &sweep.epilogue, &epilogue),
            matrix_cost: sweep
                .matrices
                .iter()
                .zip(&matrices)
                .filter(|(_, t)| **t)
                .map(|(mm, _)| sweep.matrix_s(mm, ASSUMED_BANDWIDTH))
                .sum(),
            vector,
            dot,
            epilogue,
            matrices,
        }
    }

    /// Estimated seconds of everything left.
    pub(super) fn cost(&self) -> f64 {
        self.vector_cost + self.dot_cost + self.epilogue_cost + self.matrix_cost
    }
}

/// A sweep while it runs: the measurement source, the profile, the plan, the observer, the
/// clock of the estimates and the report so far.
pub(super) struct Run<'a> {
    pub(super) m: &'a mut dyn Measurer,
    pub(super) writer: &'a mut ProfileWriter,
    pub(super) sweep: &'a Sweep,
    pub(super) obs: &'a mut dyn Observer,
    pub(super) clock: Clock,
    pub(super) report: SweepReport,
}

/// A matrix built on the host, with its work counts.
type Built = Result<(CsrMatrix, SpmvWork), SparseError>;

impl Run<'_> {
    fn write(&mut self, st: &mut StageRun<'_>, r: &Record) -> Result<(), ProfilerError> {
        self.writer.write(r)?;
        st.report.records += 1;
        Ok(())
    }

    /// Writes `r` unless the profile holds it already.
    fn write_new(&mut self, st: &mut StageRun<'_>, r: &Record) -> Result<(), ProfilerError> {
        if self.writer.has(&key_of(r)) {
            return Ok(());
        }
        self.write(st, r)
    }

    fn note(&mut self, msg: String) {
        self.obs.note(&msg);
        self.report.notes.push(msg);
    }

    /// Ends a stage: releases the buffers, writes the stage record, tells the observer.
    fn finish_stage(&mut self, mut st: StageRun<'_>) -> Result<(), ProfilerError> {
        self.m.free()?;
        st.report.elapsed = st.start.elapsed();
        let rec = Record::Stage(StageRecord {
            stage: st.name.to_string(),
            records: st.report.records,
            elapsed_s: st.report.elapsed.as_secs_f64(),
        });
        self.writer.write(&rec)?;
        self.report.peak_device_bytes = self
            .report
            .peak_device_bytes
            .max(st.report.peak_device_bytes);
        self.obs.stage_done(&st.report);
        self.report.stages.push(st.report);
        Ok(())
    }

    /// The vector stage; the occupancy records of every stage come first (no timing, only the
    /// compiled kernels' figures).
    pub(super) fn vector_stage(&mut self, todo: &Todo) -> Result<(), ProfilerError> {
        let sweep = self.sweep;
        let prelude: Vec<Record> = sweep
            .occupancy
            .iter()
            .map(|o| Record::Occupancy(o.clone()))
            .collect();
        self.length_stage(&sweep.vector, &todo.vector, todo.vector_cost, &prelude)
    }

    /// The dot stage.
    pub(super) fn dot_stage(&mut self, todo: &Todo) -> Result<(), ProfilerError> {
        let sweep = self.sweep;
        self.length_stage(&sweep.dot, &todo.dot, todo.dot_cost, &[])
    }

    /// The epilogue stage.
    pub(super) fn epilogue_stage(&mut self, todo: &Todo) -> Result<(), ProfilerError> {
        let sweep = self.sweep;
        self.length_stage(&sweep.epilogue, &todo.epilogue, todo.epilogue_cost, &[])
    }

    /// A stage over lengths, skipped when it has neither lengths nor `prelude` records: the
    /// `prelude` the profile lacks, then at every length the measurements it lacks, on buffers
    /// allocated only when some are left and they fit the budget and the free memory.
    fn length_stage<S: StageSize>(
        &mut self,
        sizes: &[S],
        todo: &[Vec<bool>],
        cost: f64,
        prelude: &[Record],
    ) -> Result<(), ProfilerError> {
        if sizes.is_empty() && prelude.is_empty() {
            return Ok(());
        }
        let total = sizes.iter().map(|s| s.points().len()).sum();
        let mut st = StageRun::new(S::STAGE, total, cost);
        for r in prelude {
            self.write_new(&mut st, r)?;
        }
        for (s, todo) in sizes.iter().zip(todo) {
            self.length(s, todo, &mut st)?;
        }
        self.finish_stage(st)
    }

    /// The measurements of one length that the profile lacks.
    fn length<S: StageSize>(
        &mut self,
        s: &S,
        todo: &[bool],
        st: &mut StageRun<'_>,
    ) -> Result<(), ProfilerError> {
        let sweep = self.sweep;
        let current = format!("n = {}", s.n());
        let pending: Vec<&S::Point> = s
            .points()
            .iter()
            .zip(todo)
            .filter(|(_, t)| **t)
            .map(|(p, _)| p)
            .collect();
        let found = s.points().len() - pending.len();
        st.done += found;
        st.report.resumed += found;
        if pending.is_empty() {
            st.show(&self.clock, self.obs, &current);
            return Ok(());
        }
        let need = s.need_bytes();
        let (free, total_mem) = self.m.mem_info()?;
        if need > sweep.memory_budget || need > free {
            let cost = pending.iter().map(|p| s.cost(sweep, p)).sum();
            st.skipped(&mut self.clock, pending.len(), cost);
            self.note(format!(
                "{} stage: length {} skipped: its buffers need {need} bytes, {free} are free \
                 and the budget is {}",
                S::STAGE,
                s.n(),
                sweep.memory_budget
            ));
            return Ok(());
        }
        s.alloc(self.m)?;
        let (free, _) = self.m.mem_info()?;
        st.peak(total_mem.saturating_sub(free), false);
        let timings = self.timed_with_sentinel(s, &pending, st, &current)?;
        for (p, timing) in pending.into_iter().zip(timings) {
            self.write(st, &s.record(p, timing))?;
        }
        Ok(())
    }

    /// Times `pending` (points of the length `s`) in chunks of [`SENTINEL_EVERY`], each
    /// followed by a timing of the length's sentinel, its cheapest point; returns one timing
    /// per point, in order.
    ///
    /// The reference is the least sentinel time read at this length. A chunk is kept when the
    /// sentinel readings on both sides of it are clean: not slower than [`SENTINEL_TOLERANCE`]
    /// times the reference by more than [`SENTINEL_FLOOR_MS`]. After a slow reading the
    /// sentinel is read again after growing pauses ([`RETIME_PAUSE`], up to [`MAX_WAITS`]
    /// times) until it is clean, and the chunk is timed again, up to [`MAX_RETIMES`] times
    /// (then its timings are kept with a note). A sentinel that stays slow through the pauses is
    /// a lasting change: its level becomes the reference, the chunk is timed again at it, and
    /// the rest of the length is judged against it (counted in
    /// [`crate::StageReport::disturbed_kept`], with a note). A reading faster than the reference
    /// by the same margin means the reference itself was read while disturbed: every chunk of
    /// the length is timed again, once per length. A disturbance that starts and ends inside
    /// one chunk is not seen.
    fn timed_with_sentinel<S: StageSize>(
        &mut self,
        s: &S,
        pending: &[&S::Point],
        st: &mut StageRun<'_>,
        current: &str,
    ) -> Result<Vec<Timing>, ProfilerError> {
        let sweep = self.sweep;
        let points = s.points();
        let sentinel = (0..points.len())
            .min_by(|&a, &b| {
                s.cost(sweep, &points[a])
                    .total_cmp(&s.cost(sweep, &points[b]))
            })
            .map(|i| &points[i]);
        let Some(sentinel) = sentinel else {
            return Ok(Vec::new());
        };
        let sentinel_ms = |run: &mut Self, st: &mut StageRun<'_>| {
            st.report.sentinel_timings += 1;
            S::time(run.m, sweep, sentinel).map(|t| t.median_ms)
        };
        let slower = |now: f64, reference: f64| {
            now > reference * SENTINEL_TOLERANCE && now - reference > SENTINEL_FLOOR_MS
        };
        let us = |ms: f64| 1e3 * ms;
        let mut reference = sentinel_ms(self, st)?;
        let mut restarted = false;
        // Where the reference last moved to a lasting slower level (a chunk start).
        let mut lasting_from: Option<usize> = None;
        // Points kept from a chunk still disturbed after its new tries.
        let mut kept = vec![false; pending.len()];
        let mut out: Vec<Timing> = Vec::with_capacity(pending.len());
        let (mut chunk_start, mut counted) = (0, 0);
        while chunk_start < pending.len() {
            let chunk = &pending[chunk_start..(chunk_start + SENTINEL_EVERY).min(pending.len())];
            let mut retimes = 0;
            let accepted = loop {
                let t0 = Instant::now();
                let mut timings = Vec::with_capacity(chunk.len());
                for p in chunk {
                    timings.push(S::time(self.m, sweep, p)?);
                }
                let mut now = sentinel_ms(self, st)?;
                let took = t0.elapsed();
                if slower(now, reference) {
                    let mut waits = 0;
                    while waits < MAX_WAITS && slower(now, reference) {
                        waits += 1;
                        std::thread::sleep(RETIME_PAUSE * waits as u32);
                        now = sentinel_ms(self, st)?;
                    }
                    if slower(now, reference) {
                        self.note(format!(
                            "{} stage: length {}: the sentinel stayed at {:.2} us against \
                             {:.2}; the rest of the length is timed and judged at that level",
                            S::STAGE,
                            s.n(),
                            us(now),
                            us(reference)
                        ));
                        reference = now;
                        lasting_from = Some(chunk_start);
                    }
                    if retimes < MAX_RETIMES {
                        retimes += 1;
                        st.report.retimed += chunk.len();
                        continue;
                    }
                    kept[chunk_start..chunk_start + chunk.len()].fill(true);
                    self.note(format!(
                        "{} stage: length {}: {} timings kept, the sentinel read slow after \
                         each of {MAX_RETIMES} new tries (last {:.2} us against {:.2})",
                        S::STAGE,
                        s.n(),
                        chunk.len(),
                        us(now),
                        us(reference)
                    ));
                } else if slower(reference, now) && !restarted {
                    // The reference was read while disturbed: every chunk so far again.
                    restarted = true;
                    lasting_from = None;
                    kept.fill(false);
                    reference = now;
                    st.report.retimed += out.len() + chunk.len();
                    out.clear();
                    chunk_start = 0;
                    break None;
                }
                reference = reference.min(now);
                // Progress counts each point once, however often it was timed.
                let end = chunk_start + chunk.len();
                let share = took / chunk.len() as u32;
                for p in &pending[counted.max(chunk_start)..end] {
                    st.measured(&mut self.clock, s.cost(sweep, p), share);
                }
                counted = counted.max(end);
                st.show(&self.clock, self.obs, current);
                break Some(timings);
            };
            if let Some(t) = accepted {
                out.extend(t);
                chunk_start += chunk.len();
            }
        }
        if let Some(from) = lasting_from {
            kept[from..].fill(true);
        }
        st.report.disturbed_kept += kept.iter().filter(|&&k| k).count();
        Ok(out)
    }

    /// The SpMV stage. Matrices are built (and their work counted) on a second thread one
    /// matrix ahead of the benchmark, so the host work of the next matrix overlaps the GPU work
    /// of this one; at most two built matrices wait in memory.
    pub(super) fn matrix_stage(&mut self, todo: &Todo) -> Result<(), ProfilerError> {
        let sweep = self.sweep;
        if sweep.matrices.is_empty() {
            return Ok(());
        }
        let mut st = StageRun::new(&sweep.matrix_stage, sweep.matrices.len(), todo.matrix_cost);
        let todo = &todo.matrices;
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
            for (i, spec) in specs.iter().enumerate() {
                if !todo[i] {
                    st.done += 1;
                    st.report.resumed += 1;
                    st.show(&self.clock, self.obs, &spec.id);
                    continue;
                }
                st.show(&self.clock, self.obs, &spec.id);
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
                let built = built.map_err(|source| ProfilerError::Matrix {
                    id: spec.id.clone(),
                    source,
                })?;
                self.matrix(i, built, &mut st, t0)?;
            }
            Ok(())
        })?;
        self.finish_stage(st)
    }

    /// The benchmark of matrix `i` of the plan, built, unless it does not fit the memory: its
    /// SpMV and conversion records the profile lacks, then the record that marks it done.
    fn matrix(
        &mut self,
        i: usize,
        (a, work): (CsrMatrix, SpmvWork),
        st: &mut StageRun<'_>,
        t0: Instant,
    ) -> Result<(), ProfilerError> {
        let sweep = self.sweep;
        let spec = &sweep.matrices[i];
        let cost = sweep.matrix_s(spec, ASSUMED_BANDWIDTH);
        let need = spmv_footprint(&work, &sweep.spmv.padding);
        let (free, total_mem) = self.m.mem_info()?;
        if need > sweep.memory_budget || need > free {
            st.skipped(&mut self.clock, 1, cost);
            self.note(format!(
                "{}: matrix {} skipped: its benchmark needs about {need} bytes, {free} are free \
                 and the budget is {}",
                sweep.matrix_stage, spec.id, sweep.memory_budget
            ));
            return Ok(());
        }
        let bench = self.m.bench_matrix(&spec.id, &a, &sweep.spmv)?;
        drop(a);
        st.peak(total_mem.saturating_sub(free) + need, true);
        for r in bench.spmv {
            self.write_new(st, &Record::Spmv(r))?;
        }
        for c in bench.conversions {
            self.write_new(st, &Record::Conversion(c))?;
        }
        // Last: the record that marks the matrix done (already there when a matrix timed by
        // another protocol was measured again).
        let rec = Record::Matrix(Box::new(MatrixRecord {
            id: spec.id.clone(),
            set: spec.set,
            recipe: spec.recipe.clone(),
            features: bench.features,
            work,
        }));
        self.write_new(st, &rec)?;
        st.measured(&mut self.clock, cost, t0.elapsed());
        st.show(&self.clock, self.obs, &spec.id);
        Ok(())
    }
}
