//! Times the parts of a warm first-order SSOR-AI setup on the GPU, one at a time, in one
//! process, on a Matrix Market file: the plan chosen by the committed H200 model with the form
//! left to it (the device's checks and counts of `A`, the factors and the explicit product
//! through the closures a prepared solver hands the plan), then each device step of the build
//! the backend makes from `A`'s uploaded arrays (the factors, the explicit product's count and
//! the explicit product itself, also from the pattern its count kept), each synchronised, and
//! a whole prepared setup with the parts
//! it reports, and the host's symmetry check alone. Every step runs
//! once first (module loads, the memory pool's growth), then `REPEATS` times; the median is
//! printed.
//!
//! `cargo run --release -p autopcg --example ssor_setup_timing -- M.mtx [REPEATS]` (GPU host).
use std::path::Path;
use std::time::Instant;

use autopcg::generator::factors::{GramCounter, K1Checker, K1Factors};
use autopcg::generator::{plan, ModelRef, PlanRequest, Target};
use autopcg::gpu::kernels::ssor::{
    ssor_k1_checks, ssor_k1_explicit, ssor_k1_explicit_counted, ssor_k1_factors,
    ssor_k1_gram_count_kept, ssor_k1_gram_count_on, SsorK1Explicit,
};
use autopcg::gpu::DeviceCsr;
use autopcg::model::file::ModelFile;
use autopcg::{PrecondKind, SsorForm};

/// The median of `repeats` timed calls of `f` after one untimed call, ms.
fn median_ms(repeats: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: ssor_setup_timing M.mtx [REPEATS]");
    let repeats: usize = args.next().map_or(5, |r| r.parse().expect("REPEATS"));
    let a = autopcg::sparse::mm::read_matrix(&path, &Default::default())
        .expect("matrix")
        .matrix;
    let dev = autopcg::open_gpu(0).expect("a GPU");
    autopcg::gpu::kernels::ssor::preload(&dev).expect("kernels");
    let v = K1Factors::of(&a).expect("a symmetric pattern with a positive diagonal");
    let omega = v.auto_omega();
    let longest = (0..a.nrows()).map(|i| v.kt_row(i).len()).max().unwrap_or(0);
    let up = DeviceCsr::upload(&dev, &a).expect("upload");
    let sync = || dev.synchronize().expect("synchronize");

    let checks = median_ms(repeats, || {
        ssor_k1_checks(&dev, &up).expect("checks");
        sync();
    });
    let count = median_ms(repeats, || {
        ssor_k1_gram_count_on(&dev, &up, Some(longest)).expect("count");
        sync();
    });
    let factors = median_ms(repeats, || {
        ssor_k1_factors(&dev, &up, omega).expect("factors");
        sync();
    });
    let mut formed = "refused".to_string();
    let explicit = median_ms(repeats, || {
        if let SsorK1Explicit::Built(p) = ssor_k1_explicit(&dev, &up, omega).expect("explicit") {
            formed = format!("{} entries", p.m.nnz());
        }
        sync();
    });
    // The product from the pattern its count kept, as the backend forms it after the plan's
    // count (the count itself not timed here: it is the plan's).
    let mut kept_formed = "not kept".to_string();
    let mut times = Vec::with_capacity(repeats + 1);
    for _ in 0..=repeats {
        let kept = ssor_k1_gram_count_kept(&dev, &up, Some(longest)).expect("count");
        sync();
        let t = Instant::now();
        if let Some((_, pattern)) = kept {
            if let SsorK1Explicit::Built(p) =
                ssor_k1_explicit_counted(&dev, &up, omega, Some(pattern)).expect("explicit")
            {
                kept_formed = format!("{} entries", p.m.nnz());
            }
        }
        sync();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut times = times.split_off(1);
    times.sort_by(f64::total_cmp);
    let explicit_kept = times[times.len() / 2];

    // The plan as a warm prepared setup makes it: the model, the form left to it, the checks
    // and the product's count on the device from the uploaded arrays.
    let model_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
    let model = ModelFile::load(&model_path).expect("the committed H200 model");
    let checker = |m: &autopcg::CsrMatrix| {
        assert_eq!(m.nnz(), up.nnz());
        ssor_k1_checks(&dev, &up).map_err(|e| e.to_string())
    };
    let counter = |m: &autopcg::CsrMatrix, kt_longest: usize| {
        assert_eq!(m.nnz(), up.nnz());
        ssor_k1_gram_count_on(&dev, &up, Some(kt_longest)).map_err(|e| e.to_string())
    };
    let kind = PrecondKind::ssor_ai().with_form(SsorForm::Factored);
    let mut parts = (0.0, 0.0, String::new());
    let planned = median_ms(repeats, || {
        let mut r = PlanRequest::new(&a, kind, Target::Gpu(dev.props().clone()));
        r.model = Some(ModelRef {
            file: &model,
            label: "h200",
        });
        r.ssor_form_auto = true;
        r.symmetry = autopcg::generator::KnownSymmetry::Symmetric;
        r.k1_checker = Some(K1Checker(&checker));
        r.gram_counter = Some(GramCounter(&counter));
        let p = plan(&r).expect("plan");
        parts = (p.precond_ms, p.select_ms, p.kind.to_string());
    });

    // A whole prepared setup, warm (the same process), and the parts it reports (each the
    // median over the timed setups, so they need not add up to the median total).
    let mut reported: Vec<autopcg::SetupTimes> = Vec::new();
    let setup = median_ms(repeats, || {
        let p = autopcg::Solver::new(&a)
            .precond(PrecondKind::ssor_ai())
            .device(autopcg::Device::Gpu)
            .ssor_form_auto(true)
            .prepare()
            .expect("prepare");
        reported.push(p.setup());
    });
    let part = |f: fn(&autopcg::SetupTimes) -> f64| {
        let mut v: Vec<f64> = reported[1..].iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let symmetry = median_ms(repeats, || {
        a.check_symmetric(1e-10).expect("symmetric");
    });
    println!(
        "{path}: n {} nnz {} longest K^T row {longest} omega {omega:.3}; device ms (median of \
         {repeats}): checks {checks:.3}, product count {count:.3}, factors {factors:.3}, \
         explicit product {explicit:.3} ({formed}), from the kept count {explicit_kept:.3} \
         ({kept_formed}); plan {planned:.3} (precond {:.3}, select \
         {:.3}, {}); warm prepared setup {setup:.3} (check {:.3}, device {:.3}, precond {:.3}, \
         select {:.3}, backend {:.3}: upload {:.3}, convert {:.3}, load {:.3}); host symmetry \
         check {symmetry:.3}",
        a.nrows(),
        a.nnz(),
        parts.0,
        parts.1,
        parts.2,
        part(|t| t.check_ms),
        part(|t| t.device_ms),
        part(|t| t.precond_ms),
        part(|t| t.select_ms),
        part(|t| t.backend_ms),
        part(|t| t.upload_ms),
        part(|t| t.convert_ms),
        part(|t| t.load_ms),
    );
}
