//! A tiny sweep on the GPU: every stage runs, every record is written once with a valid
//! timing, and a second run resumes everything. Without a CUDA device the runner reports the
//! test as ignored (with AUTOPCG_REQUIRE_GPU=1 it fails instead); see autopcg_gpu::testing.
use std::collections::HashSet;
use std::path::Path;

use autopcg_gpu::GpuDevice;
use autopcg_model::profile::{EpilogueVariant, Profile, Record, Status};
use autopcg_profiler::{
    kernel_table, open_profile, run_sweep, GpuMeasurer, Measurer, Silent, Sweep, SweepOptions,
};

fn a_tiny_sweep_runs_on_the_gpu_and_resumes(dev: GpuDevice) {
    let mut m = GpuMeasurer::new(&dev);
    m.prepare().unwrap();
    let mut opts = SweepOptions::new(true, Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    opts.max_vector_len = 150_000;
    let table = kernel_table(&mut m, &opts).unwrap();
    let mut sweep = Sweep::plan(m.device(), &opts, &table).unwrap();
    sweep.matrices = autopcg_profiler::quick_matrices()[..2].to_vec();
    let c = sweep.counts();
    assert!(c.vector > 0 && c.dot > 0 && c.epilogue > 0);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.jsonl");
    let mut w = open_profile(&path, m.device(), true).unwrap();
    let report = run_sweep(&mut m, &mut w, &sweep, &mut Silent).unwrap();
    drop(w);
    assert_eq!(
        report.measured(),
        c.vector + c.dot + c.epilogue + c.matrices
    );
    // Every length was watched by its sentinel: one reading first and one after every chunk
    // (more where a reading came out slow).
    let lengths = sweep.vector.len() + sweep.dot.len() + sweep.epilogue.len();
    assert!(report.sentinel_timings() >= 2 * lengths, "{report:?}");
    println!(
        "sentinel: {} readings, {} timings made again, {} kept disturbed, notes {:?}",
        report.sentinel_timings(),
        report.retimed(),
        report.disturbed_kept(),
        report.notes
    );
    assert!(report.peak_device_bytes >= report.baseline_device_bytes);
    let budget_end = report.baseline_device_bytes + sweep.memory_budget;
    assert!(report.peak_device_bytes <= budget_end);

    let p = Profile::read(&path).unwrap();
    assert_eq!(p.header.as_ref().unwrap().device.name, dev.props().name);
    assert_eq!(p.vector.len(), c.vector);
    assert_eq!(p.dot.len(), c.dot);
    assert_eq!(p.epilogue.len(), c.epilogue);
    assert_eq!(p.occupancy.len(), c.occupancy);
    assert!(p
        .occupancy
        .iter()
        .all(|o| o.regs_per_thread > 0 && o.nb_nt > 0));
    assert!(p
        .vector
        .iter()
        .all(|v| v.sample.timing.is_valid() && v.sample.timing.median_ms > 0.0));
    assert!(p
        .dot
        .iter()
        .all(|d| d.sample.timing.is_valid() && d.sample.timing.median_ms > 0.0));
    assert!(p
        .epilogue
        .iter()
        .all(|e| e.sample.timing.is_valid() && e.sample.timing.median_ms > 0.0));
    // The fused launches name the residency that capped their grid.
    assert!(p.epilogue.iter().all(|e| {
        (e.variant == EpilogueVariant::Plain) == e.blocks_per_sm.is_none()
            && e.blocks_per_sm != Some(0)
            && e.sample.blocks <= dev.props().sm_count * e.blocks_per_sm.unwrap_or(u32::MAX / 1024)
    }));
    // Every row kernel with a dot3 variant, plain and both fused ways, on both matrices.
    let kinds: HashSet<(String, &str, u32)> = p
        .epilogue
        .iter()
        .map(|e| (e.kernel.to_string(), e.variant.name(), e.row_entries))
        .collect();
    assert_eq!(
        kinds.len(),
        2 * 3 * autopcg_catalog::SpmvKernel::with_dot3_variant().len()
    );
    assert_eq!(p.matrices.len(), 2);
    let ok: Vec<_> = p.spmv.iter().filter(|s| s.status == Status::Ok).collect();
    assert!(!ok.is_empty());
    assert!(ok.iter().all(|s| s.timing.is_some_and(|t| t.is_valid())));
    assert!(
        p.spmv
            .iter()
            .all(|s| !matches!(s.status, Status::Failed(_))),
        "a SpMV kernel failed its check"
    );
    assert!(p.spmv.iter().any(|s| s.launch.kernel.is_cusparse()));
    // Every timing is a valid measurement, checked above (no comparison of times: at the tiny
    // sizes of this sweep, launch latency hides the length, and timings are benchmarks, not
    // tests).

    // Everything is there: a second run measures nothing and writes no measurement.
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    let mut w = open_profile(&path, m.device(), true).unwrap();
    let again = run_sweep(&mut m, &mut w, &sweep, &mut Silent).unwrap();
    drop(w);
    assert_eq!(again.measured(), 0);
    assert_eq!(again.resumed(), report.measured());
    let text = std::fs::read_to_string(&path).unwrap();
    // Only the session stamp of the second writer and the four stage marks were added.
    assert_eq!(text.lines().count(), lines + 5);
    let keys: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter_map(|r| r.key())
        .collect();
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), keys.len());
}

autopcg_gpu::test_main! {
    gpu: [
        a_tiny_sweep_runs_on_the_gpu_and_resumes,
    ],
}
