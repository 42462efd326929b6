//! GPU tests of cuSPARSE's SpMV wrapper, the SpMV benchmark and the triad measurement. Without
//! a CUDA device (or cuSPARSE, or NVRTC for the compile test) the runner reports the tests as
//! ignored (with AUTOPCG_REQUIRE_GPU=1 they fail instead); see autopcg_gpu::testing.
mod common;

use autopcg_catalog::SpmvImpl;
use autopcg_gpu::bench::{
    bench_spmv, csr_min_bytes, measure_triad, GridPolicy, RecordStatus, SpmvBenchOptions,
};
use autopcg_gpu::cusparse::{cusparse_available, CusparseAlg, CusparseSpmv};
use autopcg_gpu::kernels::spmv::SpmvKernel;
use autopcg_gpu::{DeviceCsr, Format, GpuDevice, GpuError};
use autopcg_sparse::{CsrMatrix, PaddingLimits};
use common::{abs_spmv, assert_close, poisson2d, random_csr, rng, uniform};

fn cusparse_matches_cpu(dev: GpuDevice) {
    let mats = [
        ("random 700x700", random_csr(41, 700, 700)),
        ("random 300x500", random_csr(42, 300, 500)),
        ("poisson 31x31", poisson2d(31)),
        (
            "1x1",
            CsrMatrix::from_triplets(1, 1, &[0], &[0], &[2.5]).unwrap(),
        ),
    ];
    let mut r = rng(43);
    for (label, a) in &mats {
        let x = uniform(&mut r, a.ncols(), -1.0, 1.0);
        let want = a.mul_vec(&x);
        let scale = abs_spmv(a, &x);
        let da = DeviceCsr::upload(&dev, a).unwrap();
        let dx = dev.upload(&x).unwrap();
        for alg in CusparseAlg::ALL {
            let mut sp =
                CusparseSpmv::new(&dev, &da, alg).unwrap_or_else(|e| panic!("{label} {alg}: {e}"));
            assert!(sp.preprocessed());
            // Twice, with y poisoned: beta = 0 must not read y, and a second call must agree.
            for round in 0..2 {
                let mut dy = dev.upload(&vec![f64::NAN; a.nrows()]).unwrap();
                sp.run(&dx, &mut dy).unwrap();
                let got = dev.download(&dy).unwrap();
                assert_close(
                    &got,
                    &want,
                    &scale,
                    1e-13,
                    &format!("{label} {alg} round {round}"),
                );
            }
            // Wrong lengths are refused before anything is queued.
            let short = dev.alloc_zeros::<f64>(a.ncols() + 1).unwrap();
            let mut dy = dev.alloc_zeros::<f64>(a.nrows()).unwrap();
            assert!(matches!(
                sp.run(&short, &mut dy),
                Err(GpuError::Launch { .. })
            ));
        }
    }
}

fn bench_measures_every_format_and_marks_the_fastest(dev: GpuDevice) {
    let a = poisson2d(60);
    let opts = SpmvBenchOptions::quick();
    let b = bench_spmv(&dev, &a, &opts).unwrap();
    assert_eq!(
        b.bytes_csr_min,
        csr_min_bytes(a.nrows(), a.ncols(), a.nnz())
    );
    assert_eq!(b.matrix.nnz, a.nnz());
    for r in &b.records {
        assert!(
            !matches!(r.status, RecordStatus::Failed(_)),
            "{} {} {:?} failed: {:?}",
            r.launch.format,
            r.launch.kernel,
            r.launch.threads,
            r.status
        );
        if r.status.is_ok() {
            let (med, min, max) = (r.median_ms.unwrap(), r.min_ms.unwrap(), r.max_ms.unwrap());
            assert!(min > 0.0 && min <= med && med <= max, "{r:?}");
            assert!(r.reps.unwrap() >= opts.min_reps);
            assert!(r.max_rel_err.unwrap() < opts.tolerance);
            assert!(r.gbps.unwrap() > 0.0);
        }
    }
    // The banded Poisson matrix fits every format: each has timed records.
    for f in [
        Format::Csr,
        Format::Ell,
        Format::Dia,
        Format::Coo,
        Format::Hyb,
    ] {
        assert!(
            b.records
                .iter()
                .any(|r| r.launch.format == f && r.status.is_ok()),
            "no timed {f} record"
        );
    }
    // Every CSR kernel at every thread count (one policy in the quick options).
    let csr_ours = b
        .records
        .iter()
        .filter(|r| r.launch.format == Format::Csr && !r.is_cusparse())
        .count();
    assert_eq!(csr_ours, 7 * opts.threads.len());
    assert!(
        b.records
            .iter()
            .any(|r| r.launch.kernel == SpmvImpl::Kernel(SpmvKernel::CsrMerge) && r.status.is_ok()),
        "no timed merge-path record"
    );
    // The padded formats were also built on the device, and timed.
    for c in &b.conversions {
        let padded = matches!(c.format, Format::Ell | Format::Dia | Format::Hyb);
        assert_eq!(c.device_ms.is_some(), padded, "{c:?}");
        assert!(c.device_error.is_none(), "{c:?}");
        if let Some(ms) = c.device_ms {
            assert!(ms > 0.0, "{c:?}");
        }
    }
    if cusparse_available().is_ok() {
        assert!(b.cusparse_version.is_some());
        for alg in CusparseAlg::ALL {
            assert!(
                b.records
                    .iter()
                    .any(|r| r.launch.kernel == SpmvImpl::Cusparse(alg)),
                "no record for {alg}"
            );
        }
    }
    let best = b.fastest().expect("a fastest candidate");
    let min = b
        .records
        .iter()
        .filter_map(|r| r.median_ms)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(best.median_ms, Some(min));
    let own = &b.records[b.best_own.expect("a fastest own kernel")];
    assert!(!own.is_cusparse() && own.status.is_ok());
    assert!(own.median_ms >= best.median_ms);
    let table = b.table();
    assert_eq!(table.matches("<- fastest").count(), 1, "{table}");
    println!("{table}");
    let json = serde_json::to_string(&b).unwrap();
    assert!(json.contains("\"records\""));
}

fn bench_skips_refused_formats(dev: GpuDevice) {
    // Rows of very different lengths and scattered columns: ELL and DIA exceed a fill of 3.
    let a = random_csr(44, 2000, 2000);
    let opts = SpmvBenchOptions {
        grids: vec![GridPolicy::Cover],
        threads: vec![256],
        cusparse: false,
        padding: PaddingLimits::default(),
        ..SpmvBenchOptions::quick()
    };
    let b = bench_spmv(&dev, &a, &opts).unwrap();
    for f in [Format::Ell, Format::Dia] {
        let recs: Vec<_> = b.records.iter().filter(|r| r.launch.format == f).collect();
        assert!(!recs.is_empty(), "no {f} record");
        for r in recs {
            match &r.status {
                RecordStatus::Skipped(why) => assert!(why.contains("refused"), "{why}"),
                s => panic!("{f} should be skipped, got {s:?}"),
            }
            assert!(r.median_ms.is_none());
        }
        let conv = b.conversions.iter().find(|c| c.format == f).unwrap();
        assert!(matches!(conv.status, RecordStatus::Skipped(_)));
        // Refused on the device too, by the same rule: no time and no error.
        assert_eq!(
            (conv.device_ms, &conv.device_error),
            (None, &None),
            "{conv:?}"
        );
    }
    assert!(b.records.iter().all(|r| !r.is_cusparse()));
    assert!(b
        .records
        .iter()
        .any(|r| r.launch.format == Format::Csr && r.status.is_ok()));
}

/// With `flush_l2` every timed candidate is marked L2-cold and still checked against the CPU's
/// product; without, none is. The timer behind it flushes before every sample and takes at
/// least `min_reps` and at most `MAX_FLUSHED_REPS` of them.
fn bench_times_calls_with_l2_cold_when_asked(dev: GpuDevice) {
    use autopcg_gpu::timer::MAX_FLUSHED_REPS;
    use std::cell::Cell;
    let a = poisson2d(120);
    for flush_l2 in [true, false] {
        let opts = SpmvBenchOptions {
            threads: vec![256],
            cusparse: cusparse_available().is_ok(),
            flush_l2,
            ..SpmvBenchOptions::quick()
        };
        let b = bench_spmv(&dev, &a, &opts).unwrap();
        let timed: Vec<_> = b.records.iter().filter(|r| r.median_ms.is_some()).collect();
        assert!(timed.len() >= 3, "{} timed records", timed.len());
        for r in timed {
            assert!(r.status.is_ok(), "{r:?}");
            assert_eq!(r.l2_flushed, flush_l2, "{r:?}");
            assert!(r.reps.unwrap() >= opts.min_reps, "{r:?}");
        }
    }
    let x = dev.upload(&vec![1.0; 1000]).unwrap();
    let mut y = dev.alloc_zeros::<f64>(1000).unwrap();
    let (flushes, calls) = (Cell::new(0usize), Cell::new(0usize));
    let cfg = autopcg_gpu::LaunchConfig::new(256, 4);
    let variant = autopcg_catalog::VectorVariant::Elem;
    for (min_reps, min_ms, most) in [(4, 0.0, 4), (2, 1e9, MAX_FLUSHED_REPS), (300, 0.0, 300)] {
        flushes.set(0);
        calls.set(0);
        let s = autopcg_gpu::time_kernel_flushed(
            &dev,
            || {
                flushes.set(flushes.get() + 1);
                Ok(())
            },
            || {
                calls.set(calls.get() + 1);
                autopcg_gpu::kernels::vector::axpy(&dev, variant, cfg, 0.5, &x, &mut y)
            },
            min_reps,
            min_ms,
        )
        .unwrap();
        assert_eq!((s.reps, flushes.get(), calls.get()), (most, most, most + 1));
        assert!(s.median_ms > 0.0 && s.min_ms <= s.max_ms, "{s:?}");
    }
}

fn triad_bandwidth_is_plausible(dev: GpuDevice) {
    let t = measure_triad(&dev, 1 << 24).unwrap();
    assert_eq!(t.bytes, 24 << 24);
    // Any CUDA GPU streams faster than 10 GB/s and slower than 100 TB/s.
    assert!(t.gbps > 10.0 && t.gbps < 1e5, "{t:?}");
    assert!(measure_triad(&dev, 0).is_err());
}

fn triad_kernel_compiles() {
    use autopcg_gpu::bench::TRIAD_KERNEL;
    use autopcg_gpu::compile::{compile_module, image_has_entry, Target};
    use autopcg_gpu::{KernelSource, ModuleSpec};
    let spec = ModuleSpec::plain(KernelSource::Vector);
    for target in [Target::Ptx(90), Target::Cubin(90)] {
        let image = compile_module(&spec, target).unwrap();
        assert!(
            image_has_entry(&image, target, TRIAD_KERNEL),
            "{TRIAD_KERNEL} missing from {spec} for {target:?}"
        );
    }
}

/// The full benchmark on one large matrix, printing the table: a way to get figures before the
/// command-line tool is at hand. Ignored by default (it takes tens of seconds). The matrix is
/// the 7-point Poisson matrix on an N^3 grid (N from AUTOPCG_BENCH_N, default 192), or the
/// Matrix Market file named by AUTOPCG_BENCH_MTX; AUTOPCG_BENCH_JSON names a file for the JSON.
///
///     AUTOPCG_REQUIRE_GPU=1 cargo test -p autopcg-gpu --release --test gpu_bench \
///         -- --ignored --nocapture bench_full_table
fn bench_full_table(dev: GpuDevice) {
    let a = match std::env::var("AUTOPCG_BENCH_MTX") {
        Ok(path) => {
            autopcg_sparse::mm::read_matrix(&path, &Default::default())
                .unwrap_or_else(|e| panic!("{path}: {e}"))
                .matrix
        }
        Err(_) => {
            let n: usize = std::env::var("AUTOPCG_BENCH_N")
                .ok()
                .map(|s| s.parse().expect("AUTOPCG_BENCH_N must be an integer"))
                .unwrap_or(192);
            autopcg_sparse::families::poisson3d_7pt(n, n, n).unwrap()
        }
    };
    let b = bench_spmv(&dev, &a, &SpmvBenchOptions::default()).unwrap();
    if let Ok(path) = std::env::var("AUTOPCG_BENCH_JSON") {
        std::fs::write(&path, serde_json::to_string_pretty(&b).unwrap()).unwrap();
        println!("wrote {path}");
    }
    println!("{}", b.table());
    assert!(b
        .records
        .iter()
        .all(|r| !matches!(r.status, RecordStatus::Failed(_))));
}

autopcg_gpu::test_main! {
    nvrtc: [
        triad_kernel_compiles,
    ],
    gpu: [
        bench_measures_every_format_and_marks_the_fastest,
        bench_skips_refused_formats,
        bench_times_calls_with_l2_cold_when_asked,
        triad_bandwidth_is_plausible,
    ],
    gpu_cusparse: [
        cusparse_matches_cpu,
    ],
    gpu_ignored: [
        bench_full_table,
    ],
}
