//! The sweep logic on the fake measurement source: records written, resume after an
//! interruption, plan sizes, the memory budget and the block counts of eq. 3-2.
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use autopcg_catalog::{DeviceProps, KernelId, LaunchConfig};
use autopcg_gpu::kernels::vector::{VectorKernel, VectorVariant};
use autopcg_model::profile::{EpilogueVariant, Profile, ProfileWriter, Record};
use autopcg_profiler::plan::{dot_stage_bytes, vector_stage_bytes, DEFAULT_MAX_VECTOR_LEN};
use autopcg_profiler::testing::{hopper_like_props, hopper_like_props_with_memory, FakeMeasurer};
use autopcg_profiler::{
    kernel_table, open_profile, run_sweep, tune, Measurer, Observer, ProfilerError, Progress,
    Silent, StageReport, Sweep, SweepOptions, SweepReport, SENTINEL_EVERY,
};

fn base() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A small plan: lengths up to 2e5, two small matrices.
fn small_sweep(spec: &DeviceProps, quick: bool) -> Sweep {
    small_sweep_with(spec, quick, false)
}

/// [`small_sweep`], its products launched alone timed with L2 cold where `l2_cold`.
fn small_sweep_with(spec: &DeviceProps, quick: bool, l2_cold: bool) -> Sweep {
    let mut opts = SweepOptions::new(quick, base());
    opts.max_vector_len = 200_000;
    opts.spmv_l2_cold = l2_cold;
    let mut m = FakeMeasurer::new(spec.clone());
    let table = kernel_table(&mut m, &opts).unwrap();
    let mut s = Sweep::plan(spec, &opts, &table).unwrap();
    s.matrices = autopcg_profiler::quick_matrices()[..2].to_vec();
    s
}

fn run(sweep: &Sweep, path: &Path, fake: &mut FakeMeasurer) -> Result<usize, ProfilerError> {
    run_report(sweep, path, fake).map(|r| r.resumed())
}

fn run_report(
    sweep: &Sweep,
    path: &Path,
    fake: &mut FakeMeasurer,
) -> Result<SweepReport, ProfilerError> {
    let mut w = open_profile(path, fake.device(), sweep.options.quick)?;
    fake.prepare()?;
    run_sweep(fake, &mut w, sweep, &mut Silent)
}

/// The sentinel timings of a sweep that saw no disturbance: per length with points to time,
/// one first and one after every chunk of [`SENTINEL_EVERY`].
fn undisturbed_sentinels(pending_per_length: impl IntoIterator<Item = usize>) -> usize {
    pending_per_length
        .into_iter()
        .filter(|&p| p > 0)
        .map(|p| 1 + p.div_ceil(SENTINEL_EVERY))
        .sum()
}

/// Points per length of the vector, dot and epilogue stages of `sweep`.
fn length_points(sweep: &Sweep) -> Vec<usize> {
    let v = sweep.vector.iter().map(|s| s.points.len());
    let d = sweep.dot.iter().map(|s| s.points.len());
    let e = sweep.epilogue.iter().map(|s| s.points.len());
    v.chain(d).chain(e).collect()
}

/// Every measurement key of a profile file, in order (with repeats).
fn keys(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter_map(|r| r.key())
        .collect()
}

fn assert_unique(k: &[String]) {
    let set: HashSet<&String> = k.iter().collect();
    assert_eq!(set.len(), k.len(), "duplicate keys in the profile");
}

#[test]
fn a_sweep_writes_every_planned_record_once() {
    let spec = hopper_like_props();
    let sweep = small_sweep(&spec, false);
    let c = sweep.counts();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    let mut fake = FakeMeasurer::new(spec.clone());
    let r = run_report(&sweep, &path, &mut fake).unwrap();
    assert_eq!(r.resumed(), 0);
    assert!(c.epilogue > 0);
    // Every point timed once, with the lengths' sentinels beside them.
    let sentinels = undisturbed_sentinels(length_points(&sweep));
    assert_eq!(r.sentinel_timings(), sentinels);
    assert_eq!((r.retimed(), r.disturbed_kept()), (0, 0));
    assert_eq!(
        fake.measured,
        c.vector + c.dot + c.epilogue + c.matrices + sentinels
    );
    let p = Profile::read(&path).unwrap();
    let h = p.header.as_ref().unwrap();
    assert!(!h.quick);
    assert_eq!(h.device, spec);
    assert_eq!(p.occupancy.len(), c.occupancy);
    assert_eq!(p.vector.len(), c.vector);
    assert_eq!(p.dot.len(), c.dot);
    assert_eq!(p.epilogue.len(), c.epilogue);
    assert_eq!(p.matrices.len(), 2);
    assert!(!p.spmv.is_empty() && !p.conversions.is_empty());
    let stages: Vec<&str> = p.stages.iter().map(|s| s.stage.as_str()).collect();
    assert_eq!(stages, ["vector", "dot", "epilogue", "spmv"]);
    assert_unique(&keys(&path));

    // Lengths: 4 fitted and 2 held out per domain.
    let lengths: HashSet<(u64, bool)> = p
        .vector
        .iter()
        .map(|v| (v.sample.n, v.sample.held_out))
        .collect();
    assert_eq!(lengths.len(), 12);
    assert_eq!(lengths.iter().filter(|(_, h)| *h).count(), 4);
    assert!(lengths.contains(&(200_000, false)));

    // Grid-stride blocks are NB_nt * i with NB_nt from the occupancy records.
    let nb: HashMap<(KernelId, u32), u32> = p
        .occupancy
        .iter()
        .map(|o| ((o.kernel, o.threads), o.nb_nt))
        .collect();
    for v in &p.vector {
        assert!(v.sample.timing.is_valid());
        match v.sample.nb_multiple {
            Some(i) => {
                assert_eq!(v.sample.blocks, nb[&(v.kernel_id(), v.sample.threads)] * i);
                assert_eq!(v.sample.elems_per_thread, None);
            }
            None => {
                // The records say how many elements a thread handles.
                let per = v.sample.elems_per_thread.unwrap();
                assert_eq!(
                    per,
                    if v.variant == VectorVariant::ElemV2 {
                        2
                    } else {
                        1
                    }
                );
                assert_eq!(
                    u64::from(v.sample.blocks),
                    v.sample
                        .n
                        .div_ceil(u64::from(per))
                        .div_ceil(u64::from(v.sample.threads))
                );
            }
        }
        v.check().unwrap();
    }
    let mult: HashSet<u32> = p.dot.iter().filter_map(|d| d.sample.nb_multiple).collect();
    assert_eq!(mult, (1..=20).collect());
    for d in p.dot.iter().filter(|d| d.sample.nb_multiple.is_some()) {
        assert_eq!(
            d.sample.blocks,
            nb[&(KernelId::Reduction(d.kernel), d.sample.threads)] * d.sample.nb_multiple.unwrap()
        );
    }
    let dot_threads: HashSet<u32> = p.dot.iter().map(|d| d.sample.threads).collect();
    assert_eq!(dot_threads, [64, 128, 256, 512, 1024].into());
    // Every SpMV record belongs to a matrix record written after it.
    let ids: HashSet<&str> = p.matrices.iter().map(|m| m.id.as_str()).collect();
    assert!(p.spmv.iter().all(|s| ids.contains(s.matrix.as_str())));
}

#[test]
fn an_interrupted_sweep_resumes_without_loss_or_duplicates() {
    let spec = hopper_like_props();
    let sweep = small_sweep(&spec, true);
    let c = sweep.counts();
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.jsonl");
    run(&sweep, &whole, &mut FakeMeasurer::new(spec.clone())).unwrap();
    let want: HashSet<String> = keys(&whole).into_iter().collect();
    let items = c.vector + c.dot + c.epilogue + c.matrices;
    // Cut in the vector stage, in the dot stage, in the epilogue stage, and between the two
    // matrices.
    for k in [
        7,
        c.vector + 5,
        c.vector + c.dot + 4,
        c.vector + c.dot + c.epilogue + 1,
    ] {
        let path = dir.path().join(format!("cut{k}.jsonl"));
        let mut fake = FakeMeasurer::new(spec.clone());
        fake.fail_after = Some(k);
        let e = run(&sweep, &path, &mut fake).unwrap_err();
        assert!(e.to_string().contains("injected failure"), "{e}");
        // What was kept: the lengths timed whole before the cut (a length's records are
        // written together), and the matrices done.
        let cut = Profile::read(&path).unwrap();
        let kept = cut.vector.len() + cut.dot.len() + cut.epilogue.len() + cut.matrices.len();
        assert!(kept <= k, "cut at {k}");
        // The process died in the middle of a line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"record":"dot","kernel":"dot_v"#).unwrap();
        drop(f);
        let mut fresh = FakeMeasurer::new(spec.clone());
        let r = run_report(&sweep, &path, &mut fresh).unwrap();
        assert_eq!(r.resumed(), kept, "cut at {k}");
        assert_eq!(
            fresh.measured,
            items - kept + r.sentinel_timings(),
            "cut at {k}"
        );
        let got = keys(&path);
        assert_unique(&got);
        let got: HashSet<String> = got.into_iter().collect();
        assert_eq!(got, want, "cut at {k}");
        Profile::read(&path).unwrap();
        // A third run measures nothing.
        let mut idle = FakeMeasurer::new(spec.clone());
        assert_eq!(run(&sweep, &path, &mut idle).unwrap(), items);
        assert_eq!(idle.measured, 0);
    }
}

#[test]
fn spmv_records_without_their_matrix_record_are_completed_not_duplicated() {
    let spec = hopper_like_props();
    let mut sweep = small_sweep(&spec, true);
    sweep.vector.clear();
    sweep.dot.clear();
    sweep.occupancy.clear();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    // A run that wrote half of the first matrix's records and died before its matrix record.
    let mut fake = FakeMeasurer::new(spec.clone());
    fake.prepare().unwrap();
    let m0 = &sweep.matrices[0];
    let a = m0.recipe.build(&base()).unwrap();
    let b = fake.bench_matrix(&m0.id, &a, &sweep.spmv).unwrap();
    let mut w = open_profile(&path, &spec, true).unwrap();
    for r in &b.spmv[..b.spmv.len() / 2] {
        w.write(&Record::Spmv(r.clone())).unwrap();
    }
    drop(w);
    let mut fresh = FakeMeasurer::new(spec.clone());
    assert_eq!(run(&sweep, &path, &mut fresh).unwrap(), 0);
    let k = keys(&path);
    assert_unique(&k);
    let p = Profile::read(&path).unwrap();
    assert_eq!(p.matrices.len(), 2);
    let first = p
        .spmv
        .iter()
        .chain(&p.spmv_replayed)
        .filter(|s| s.matrix == m0.id)
        .count();
    assert_eq!(first, b.spmv.len());
}

#[test]
fn quick_sweeps_are_small_and_a_full_sweep_fits_the_time_budget() {
    let spec = hopper_like_props();
    let plan = |quick: bool| {
        let opts = SweepOptions::new(quick, base());
        let mut m = FakeMeasurer::new(spec.clone());
        let table = kernel_table(&mut m, &opts).unwrap();
        Sweep::plan(&spec, &opts, &table).unwrap()
    };
    // An H200 streams about 4 TB/s.
    let bw = 4e12;
    let quick = plan(true);
    let full = plan(false);
    let (qc, fc) = (quick.counts(), full.counts());
    let (qe, fe) = (quick.estimate(bw), full.estimate(bw));
    println!("quick: {qc:?}\n  estimate {qe:?} = {:.1} s", qe.total_s());
    println!("full: {fc:?}\n  estimate {fe:?} = {:.1} s", fe.total_s());
    println!("full at 3 TB/s: {:.1} s", full.estimate(3e12).total_s());
    println!(
        "full: vector lengths up to {}, dot lengths up to {}",
        full.vector_max_n, full.dot_max_n
    );
    assert!(
        qc.vector < 1_000 && qc.dot < 2_000 && qc.matrices <= 8,
        "{qc:?}"
    );
    assert!(qe.total_s() < 20.0, "{qe:?}");
    assert!(fc.matrices >= 30);
    assert!(fe.total_s() < 300.0, "{fe:?}");
    assert_eq!(full.vector_max_n, DEFAULT_MAX_VECTOR_LEN);
    // Lengths of a quick sweep stop at 2^22, with 2 fitted and 1 held out per domain.
    assert!(quick.vector.iter().all(|s| s.n <= 1 << 22));
    assert_eq!(
        quick.vector.len(),
        3 * quick.vector.iter().filter(|s| s.held_out).count()
    );
}

#[test]
fn the_memory_budget_bounds_the_largest_length_and_the_allocations() {
    let opts = SweepOptions::new(false, base());
    for total in [1u64 << 30, 3 << 30, 24 << 30] {
        let spec = hopper_like_props_with_memory(total);
        let mut m = FakeMeasurer::new(spec.clone());
        let table = kernel_table(&mut m, &opts).unwrap();
        let s = Sweep::plan(&spec, &opts, &table).unwrap();
        let budget = (total as f64 * 0.6) as u64;
        assert_eq!(s.memory_budget, budget);
        let v = s.vector_max_n;
        assert!(vector_stage_bytes(v) <= budget);
        assert!(v == DEFAULT_MAX_VECTOR_LEN || vector_stage_bytes(v + 1) > budget);
        assert_eq!(s.vector.last().unwrap().n, v);
        let d = s.dot_max_n;
        assert!(d >= v);
        for size in &s.dot {
            assert!(dot_stage_bytes(size.n, size.max_dot_blocks, size.max_dot3_blocks) <= budget);
        }
        assert!(d == DEFAULT_MAX_VECTOR_LEN || 24 * (d + 1) > budget - (budget >> 4));
    }
    // What the sweep allocates stays inside the budget.
    let spec = hopper_like_props_with_memory(64 << 20);
    let mut opts = SweepOptions::new(true, base());
    opts.memory_fraction = 0.5;
    let mut fake = FakeMeasurer::new(spec.clone());
    let table = kernel_table(&mut fake, &opts).unwrap();
    let mut s = Sweep::plan(&spec, &opts, &table).unwrap();
    s.matrices.clear();
    assert!(s.vector_max_n < 1 << 22 && s.vector_max_n > 100_000);
    let dir = tempfile::tempdir().unwrap();
    run(&s, &dir.path().join("p.jsonl"), &mut fake).unwrap();
    assert!(fake.peak_allocated > 0 && fake.peak_allocated <= 32 << 20);
    assert!(SweepOptions {
        memory_fraction: 1.5,
        ..opts
    }
    .validate()
    .is_err());
}

#[test]
fn thread_counts_are_capped_by_the_compiled_kernel() {
    let spec = hopper_like_props();
    let mut opts = SweepOptions::new(false, base());
    opts.max_vector_len = 50_000;
    let mut fake = FakeMeasurer::new(spec.clone());
    fake.axpy_max_threads = 256;
    let table = kernel_table(&mut fake, &opts).unwrap();
    let s = Sweep::plan(&spec, &opts, &table).unwrap();
    let pts: Vec<_> = s.vector.iter().flat_map(|v| &v.points).collect();
    assert!(pts
        .iter()
        .filter(|p| matches!(p.kernel, VectorKernel::Axpy(_)))
        .all(|p| p.cfg.threads <= 256));
    assert!(pts
        .iter()
        .any(|p| p.kernel == VectorKernel::CgUpdate(VectorVariant::Grid) && p.cfg.threads == 1024));
    // Kernel, threads and blocks are unique at every length.
    for v in &s.vector {
        let set: HashSet<_> = v.points.iter().map(|p| (p.kernel, p.cfg)).collect();
        assert_eq!(set.len(), v.points.len());
    }
}

#[test]
fn a_quick_profile_is_not_continued_by_a_full_sweep() {
    let spec = hopper_like_props();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    drop(open_profile(&path, &spec, true).unwrap());
    let e = open_profile(&path, &spec, false).err().unwrap();
    assert!(matches!(e, ProfilerError::ProfileMismatch { .. }), "{e}");
    assert!(e.to_string().contains("quick"), "{e}");
    open_profile(&path, &spec, true).unwrap();
    let mut other = spec.clone();
    other.name = "Another GPU".into();
    assert!(open_profile(&path, &other, true).is_err());
}

#[derive(Default)]
struct Log {
    last: HashMap<String, (usize, usize)>,
    etas: usize,
    stages: Vec<StageReport>,
}

impl Observer for Log {
    fn progress(&mut self, p: &Progress<'_>) {
        assert!(p.done <= p.total);
        self.last.insert(p.stage.to_string(), (p.done, p.total));
        if p.eta.is_some() && p.stage_eta.is_some() {
            self.etas += 1;
        }
    }
    fn stage_done(&mut self, r: &StageReport) {
        self.stages.push(r.clone());
    }
}

#[test]
fn tune_reports_progress_stage_by_stage() {
    let spec = hopper_like_props_with_memory(256 << 20);
    let mut opts = SweepOptions::new(true, base());
    opts.max_vector_len = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    let mut fake = FakeMeasurer::new(spec.clone());
    let mut w: ProfileWriter = open_profile(&path, &spec, true).unwrap();
    let mut log = Log::default();
    let (sweep, report) = tune(&mut fake, &mut w, &opts, &mut log).unwrap();
    let c = sweep.counts();
    assert_eq!(log.last["vector"], (c.vector, c.vector));
    assert_eq!(log.last["dot"], (c.dot, c.dot));
    assert_eq!(log.last["epilogue"], (c.epilogue, c.epilogue));
    assert_eq!(log.last["spmv"], (c.matrices, c.matrices));
    assert!(log.etas > 0);
    let names: Vec<&str> = log.stages.iter().map(|s| s.stage.as_str()).collect();
    assert_eq!(names, ["vector", "dot", "epilogue", "spmv"]);
    assert_eq!(
        report.measured(),
        c.vector + c.dot + c.epilogue + c.matrices
    );
    assert_eq!(report.resumed(), 0);
    assert!(report.peak_device_bytes > 0 && report.peak_device_bytes <= spec.total_mem);
    // Written beside the records: the header, the session stamp and four stage marks.
    assert_eq!(report.records(), w.written() - 2 - 4);
}

#[test]
fn the_eval_plan_measures_only_its_matrices_and_labels_them() {
    use autopcg_model::profile::MatrixSet;
    use autopcg_sparse::families::Recipe;
    let spec = hopper_like_props();
    let opts = SweepOptions::new(false, base());
    let mut s = Sweep::eval_plan(&spec, &opts).unwrap();
    assert_eq!(s.matrix_stage, "spmv_eval");
    assert!(s.vector.is_empty() && s.dot.is_empty() && s.occupancy.is_empty());
    assert!(s.matrices.iter().all(|m| m.set == MatrixSet::Eval));
    // Run it on a small file-based matrix of the same kind.
    let mut small = s
        .matrices
        .iter()
        .find(|m| matches!(m.recipe, Recipe::FileKron { .. }))
        .unwrap()
        .clone();
    small.recipe = Recipe::FileKron {
        path: "matrices/1138_bus.mtx".into(),
        poisson2d: 2,
    };
    small.id = "small-kron".into();
    s.matrices = vec![small];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    run(&s, &path, &mut FakeMeasurer::new(spec.clone())).unwrap();
    let p = Profile::read(&path).unwrap();
    assert_eq!(p.matrices.len(), 1);
    assert_eq!(p.matrices[0].set, MatrixSet::Eval);
    assert_eq!(p.matrices[0].work.n, 1138 * 4);
    assert_eq!(p.stages[0].stage, "spmv_eval");
    assert_eq!(
        autopcg_profiler::run::matrix_key(&p.matrices[0].id),
        Record::Matrix(Box::new(p.matrices[0].clone()))
            .key()
            .unwrap()
    );

    // A matrix that cannot be built stops the stage with its id; the ones before it stay.
    let mut bad = s.matrices[0].clone();
    bad.id = "missing-file".into();
    bad.recipe = Recipe::FileKron {
        path: "matrices/no-such-file.mtx".into(),
        poisson2d: 2,
    };
    let mut ok2 = s.matrices[0].clone();
    ok2.id = "small-kron-2".into();
    s.matrices = vec![ok2, bad];
    let e = run(&s, &path, &mut FakeMeasurer::new(spec.clone())).unwrap_err();
    assert!(e.to_string().contains("missing-file"), "{e}");
    let p = Profile::read(&path).unwrap();
    assert_eq!(p.matrices.len(), 2);
}

/// Runs `sweep` into a fresh profile, removes the lines `older` drops from it (the profile an
/// older tune wrote), resumes it, and checks that the resumed profile holds every key of the
/// full one, each once. Returns the measurements the resume made and the resumed profile.
fn resume_from_older(
    sweep: &Sweep,
    spec: &DeviceProps,
    older: impl Fn(&str) -> bool,
) -> (usize, Profile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    run(sweep, &path, &mut FakeMeasurer::new(spec.clone())).unwrap();
    let want: HashSet<String> = keys(&path).into_iter().collect();
    let full = std::fs::read_to_string(&path).unwrap();
    let old: Vec<String> = full
        .lines()
        .filter(|l| !older(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(old.len() < full.lines().count(), "nothing was dropped");
    std::fs::write(&path, old.concat()).unwrap();
    let mut fake = FakeMeasurer::new(spec.clone());
    let r = run_report(sweep, &path, &mut fake).unwrap();
    let got = keys(&path);
    assert_unique(&got);
    assert_eq!(got.into_iter().collect::<HashSet<_>>(), want);
    (
        fake.measured - r.sentinel_timings(),
        Profile::read(&path).unwrap(),
    )
}

#[test]
fn a_profile_from_before_the_epilogue_stage_gets_only_that_stage_on_resume() {
    let spec = hopper_like_props();
    let sweep = small_sweep(&spec, true);
    let c = sweep.counts();
    let (measured, p) = resume_from_older(&sweep, &spec, |l| {
        l.contains(r#""record":"epilogue""#) || l.contains(r#""stage":"epilogue""#)
    });
    assert_eq!(measured, c.epilogue);
    assert_eq!(p.epilogue.len(), c.epilogue);
}

#[test]
fn the_epilogue_stage_measures_the_tridiagonal_and_the_wide_band() {
    use autopcg_profiler::plan::{EPILOGUE_NARROW_ENTRIES, EPILOGUE_WIDE_ENTRIES};
    let spec = hopper_like_props();
    let sweep = small_sweep(&spec, false);
    let lengths = |entries: u32| -> Vec<u64> {
        sweep
            .epilogue
            .iter()
            .filter(|s| s.row_entries == entries)
            .map(|s| s.n)
            .collect()
    };
    let (narrow, wide) = (
        lengths(EPILOGUE_NARROW_ENTRIES),
        lengths(EPILOGUE_WIDE_ENTRIES),
    );
    assert_eq!(narrow.len() + wide.len(), sweep.epilogue.len());
    // Below the wide band's cap the two matrices are measured at the same lengths, so that
    // the wide band's excess is compared with the tridiagonal's at its own length.
    assert_eq!(wide, narrow);
    assert_eq!(sweep.epilogue_wide_max_n, sweep.epilogue_max_n);
    assert!(!wide.is_empty());

    // The fake's fused loops cost 2 bytes an entry, at its 3e9 bytes per millisecond: the
    // fitted cost per entry.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    run(&sweep, &path, &mut FakeMeasurer::new(spec.clone())).unwrap();
    let p = Profile::read(&path).unwrap();
    assert!(p
        .epilogue
        .iter()
        .any(|e| e.row_entries == EPILOGUE_WIDE_ENTRIES));
    let m = autopcg_model::EpilogueModel::fit(&p).unwrap().unwrap();
    assert!(!m.per_entry.is_empty());
    for s in &m.per_entry {
        assert!(
            (s.ms_per_entry - 2.0 / 3e9).abs() < 1e-15,
            "{s:?}: {}",
            s.ms_per_entry
        );
    }
}

#[test]
fn a_profile_from_before_the_wide_band_gets_only_the_wide_band_on_resume() {
    let spec = hopper_like_props();
    let sweep = small_sweep(&spec, true);
    let wide: usize = sweep
        .epilogue
        .iter()
        .filter(|s| s.row_entries == autopcg_profiler::plan::EPILOGUE_WIDE_ENTRIES)
        .map(|s| s.points.len())
        .sum();
    assert!(wide > 0);
    let (measured, _) = resume_from_older(&sweep, &spec, |l| l.contains(r#""row_entries":27"#));
    assert_eq!(measured, wide);
}

#[test]
fn the_fused_launches_are_capped_at_the_blocks_the_variant_keeps_resident() {
    let spec = hopper_like_props();
    let sweep = small_sweep(&spec, false);
    let mut fused = 0;
    for s in &sweep.epilogue {
        for p in &s.points {
            match p.variant {
                EpilogueVariant::Plain => {
                    assert_eq!(p.blocks_per_sm, None);
                    let items = p.kernel.work_items(s.n, u64::from(s.row_entries) * s.n);
                    assert_eq!(p.cfg, LaunchConfig::per_item(items, p.cfg.threads));
                }
                _ => {
                    // The fake's variants hold 40 registers: 6 blocks of 256 threads per SM.
                    let per_sm = p.blocks_per_sm.unwrap();
                    if p.cfg.threads == 256 {
                        assert_eq!(per_sm, 6);
                    }
                    assert!(p.cfg.blocks <= spec.sm_count * per_sm, "{p:?}");
                    fused += 1;
                }
            }
        }
    }
    assert!(fused > 0);
}

/// A matrix whose iteration fits in half of L2 gets each timed product twice, launched alone
/// and replayed (keyed apart, so a resumed tune keeps both); a larger one only launched alone.
#[test]
fn small_matrices_are_also_timed_replayed() {
    let spec = hopper_like_props();
    let mut sweep = small_sweep(&spec, true);
    assert!(sweep.spmv.replay_within_l2);
    // One matrix of the quick set and one too large for half of the fake's 60 MiB of L2
    // (2D Poisson 600^2: 29 MB of CSR and 23 MB of vectors).
    let large = autopcg_profiler::eval_matrices()
        .into_iter()
        .find(|m| m.id == "poisson2d-n600")
        .expect("the evaluation set has 2D Poisson 600^2");
    sweep.matrices = vec![sweep.matrices[0].clone(), large];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    run(&sweep, &path, &mut FakeMeasurer::new(spec.clone())).unwrap();
    let p = Profile::read(&path).unwrap();
    assert_eq!(p.matrices.len(), 2);
    let (small, large) = (&p.matrices[0], &p.matrices[1]);
    let fits = |m: &autopcg_model::profile::MatrixRecord| {
        autopcg_catalog::replays_spmv_at(
            spec.l2_bytes,
            m.work.n,
            autopcg_catalog::square_csr_bytes(m.work.n, m.work.nnz),
        )
    };
    assert!(fits(small) && !fits(large));
    let timed = |id: &str| {
        p.spmv
            .iter()
            .filter(|r| r.matrix == id && r.timing.is_some())
            .count()
    };
    assert!(timed(&small.id) > 0 && timed(&large.id) > 0);
    assert_eq!(p.spmv_replayed.len(), timed(&small.id));
    for r in &p.spmv_replayed {
        assert_eq!(r.matrix, small.id);
        let alone = p
            .spmv
            .iter()
            .find(|a| a.launch == r.launch && a.matrix == r.matrix)
            .unwrap();
        assert!(r.timing.as_ref().unwrap().median_ms < alone.timing.as_ref().unwrap().median_ms);
    }
    assert_unique(&keys(&path));
}

/// A profile whose products were timed as repeated calls (before the SpMV stage timed them
/// with L2 cold) gets its matrices measured again on resume, once each; its reader then keeps
/// the L2-cold records and sets the old ones aside, and a second resume measures nothing.
#[test]
fn a_profile_of_repeated_calls_gets_its_matrices_timed_with_l2_cold_on_resume() {
    let spec = hopper_like_props();
    assert!(
        !small_sweep(&spec, true).spmv.flush_l2,
        "repeated calls are the default"
    );
    let mut sweep = small_sweep_with(&spec, true, true);
    assert!(sweep.spmv.flush_l2, "spmv_l2_cold reaches the SpMV stage");
    let mut opts = SweepOptions::new(true, base());
    assert!(!Sweep::eval_plan(&spec, &opts).unwrap().spmv.flush_l2);
    opts.spmv_l2_cold = true;
    let eval = Sweep::eval_plan(&spec, &opts).unwrap();
    assert!(eval.spmv.flush_l2, "and the evaluation set's");
    assert_eq!(eval.spmv.threads, Sweep::spmv_options(true).threads);
    sweep.vector.clear();
    sweep.dot.clear();
    sweep.epilogue.clear();
    sweep.occupancy.clear();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    let mut old = sweep.clone();
    old.spmv.flush_l2 = false;
    run(&old, &path, &mut FakeMeasurer::new(spec.clone())).unwrap();
    let before = Profile::read(&path).unwrap();
    assert!(!before.spmv_l2_flushed() && !before.spmv.is_empty());
    let mut fake = FakeMeasurer::new(spec.clone());
    run(&sweep, &path, &mut fake).unwrap();
    assert_eq!(fake.measured, sweep.matrices.len());
    let p = Profile::read(&path).unwrap();
    assert!(p.spmv_l2_flushed());
    assert_eq!(p.spmv.len(), before.spmv.len());
    assert_eq!(p.superseded_spmv, before.spmv.len());
    // The replayed records and the matrix records keep their keys: written once.
    assert_eq!(p.spmv_replayed.len(), before.spmv_replayed.len());
    assert_eq!(p.matrices.len(), sweep.matrices.len());
    assert_unique(&keys(&path));
    let mut again = FakeMeasurer::new(spec.clone());
    run(&sweep, &path, &mut again).unwrap();
    assert_eq!(again.measured, 0);
}

/// A clean sweep and the same sweep with the measurements in `window` slowed by `factor`: the
/// two profiles and the disturbed run's report and notes.
fn clean_and_disturbed(
    window: std::ops::Range<usize>,
    factor: f64,
) -> (Profile, Profile, SweepReport) {
    let spec = hopper_like_props();
    let mut sweep = small_sweep(&spec, true);
    sweep.matrices.clear();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        dir.path().join("clean.jsonl"),
        dir.path().join("disturbed.jsonl"),
    );
    run(&sweep, &a, &mut FakeMeasurer::new(spec.clone())).unwrap();
    let mut fake = FakeMeasurer::new(spec.clone());
    fake.disturbed = Some((window, factor));
    let r = run_report(&sweep, &b, &mut fake).unwrap();
    (Profile::read(&a).unwrap(), Profile::read(&b).unwrap(), r)
}

/// Measurements of the vector stage of [`clean_and_disturbed`]'s sweep, sentinels included:
/// the dot stage's first measurement (its first length's sentinel) has this number.
fn dot_stage_start() -> usize {
    let spec = hopper_like_props();
    let sweep = small_sweep(&spec, true);
    sweep.counts().vector + undisturbed_sentinels(sweep.vector.iter().map(|s| s.points.len()))
}

#[test]
fn a_disturbed_stretch_of_timings_is_timed_again() {
    // The dot stage's first length: its reference sentinel at `d`, then chunks of 12 points
    // each closed by a sentinel (at d + 13, d + 26, d + 39). Nine measurements three times
    // slower from d + 33: the last six points of the third chunk, its closing sentinel and
    // the next two readings; the third reading after the pauses is clean, and the chunk is
    // timed again.
    let d = dot_stage_start();
    let (clean, disturbed, r) = clean_and_disturbed(d + 33..d + 42, 3.0);
    let dot = r.stages.iter().find(|s| s.stage == "dot").unwrap();
    assert_eq!((dot.retimed, dot.disturbed_kept), (SENTINEL_EVERY, 0));
    assert_eq!(r.retimed(), SENTINEL_EVERY);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    // The profile holds the timings the undisturbed run made, every one.
    assert_eq!(disturbed.vector, clean.vector);
    assert_eq!(disturbed.dot, clean.dot);
    assert_eq!(disturbed.epilogue, clean.epilogue);
}

#[test]
fn a_reference_read_while_disturbed_sends_its_length_back() {
    // The dot stage's first sentinel and first two points slowed: the first chunk's closing
    // sentinel reads faster than the reference, and the length is timed again.
    let start = dot_stage_start();
    let (clean, disturbed, r) = clean_and_disturbed(start..start + 3, 3.0);
    let dot = r.stages.iter().find(|s| s.stage == "dot").unwrap();
    assert_eq!(dot.retimed, SENTINEL_EVERY);
    assert_eq!(disturbed.dot, clean.dot);
    assert_eq!(disturbed.vector, clean.vector);
}

#[test]
fn a_lasting_slowdown_is_kept_with_a_note_after_a_bounded_number_of_tries() {
    // From the middle of the dot stage's first length on, every timing twice as long: the
    // chunk where it starts is tried MAX_RETIMES more times, then kept; the rest of that
    // length is judged against the new level and the later lengths start from it.
    let d = dot_stage_start();
    let (clean, disturbed, r) = clean_and_disturbed(d + 33..usize::MAX, 2.0);
    let spec = hopper_like_props();
    let first = small_sweep(&spec, true).dot[0].points.len();
    let dot = r.stages.iter().find(|s| s.stage == "dot").unwrap();
    // The third chunk timed again at the new level, and it and the rest of the length kept
    // at that level; the later lengths start from it and see no change.
    assert_eq!(dot.retimed, SENTINEL_EVERY);
    assert_eq!(dot.disturbed_kept, first - 2 * SENTINEL_EVERY);
    assert_eq!(r.retimed(), dot.retimed);
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    assert!(r.notes[0].starts_with("dot stage: length") && r.notes[0].contains("stayed"));
    assert_eq!(disturbed.dot.len(), clean.dot.len());
    assert_eq!(disturbed.vector, clean.vector);
    // A lasting slowdown is not taken back: the later timings are twice the clean ones.
    let last = disturbed.dot.last().unwrap().sample.timing.median_ms;
    let want = 2.0 * clean.dot.last().unwrap().sample.timing.median_ms;
    assert!((last - want).abs() < 1e-12);
}
