//! `Solver::gpus` on a GPU machine: one row block per GPU through the facade, with the report
//! of the blocks' GPUs, the GPU count chosen by `auto` with its predictions, and one sub-plan
//! per block. On a machine with one GPU, `auto` can only choose 1. And the halo kernel a model
//! chooses is the one the blocks run.
//!
//! Without a CUDA device the runner reports each test as ignored (with AUTOPCG_REQUIRE_GPU=1 it
//! fails instead); see autopcg_gpu::testing.
use autopcg::catalog::{GridPolicy, SpmvCandidate, SpmvImpl, SpmvKernel, CSR_LANES};
use autopcg::gpu::GpuDevice;
use autopcg::model::file::ModelFile;
use autopcg::model::spmv::{CandidateModel, Term};
use autopcg::sparse::families::{poisson3d_7pt, random_powerlaw_spd};
use autopcg::{Device, GpuCount, ModelChoice, PrecondKind, Solver};

mod common;

fn prepared_blocks_on_gpu_0(_dev: GpuDevice) {
    common::prepared_blocks_solve_many_and_take_new_values(Device::Gpu);
}

fn gpus_auto_reports_its_choice_and_the_sub_plans(_dev: GpuDevice) {
    let found = GpuDevice::discover().unwrap().len();
    let a = poisson3d_7pt(24, 24, 24).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let s = Solver::new(&a)
        .check_symmetry(false)
        .precond(PrecondKind::Jacobi)
        .gpus(GpuCount::Auto)
        .solve(&b)
        .unwrap();
    assert!(s.info.converged, "{:?}", s.info);
    assert!(s.info.true_relative_residual <= 1e-8, "{:?}", s.info);
    let r = s.blocks.expect("a block report");
    let c = r.gpu_count.as_ref().expect("the GPU count choice");
    assert_eq!(c.found, found);
    assert_eq!(c.options.len(), found.min(a.nrows()));
    assert!((1..=found).contains(&c.chosen), "{c:?}");
    assert_eq!(r.nblocks, c.chosen);
    assert_eq!(r.devices, (0..c.chosen).collect::<Vec<_>>());
    assert_eq!(r.block_plans.len(), c.chosen);
    for o in &c.options {
        let sum = o.compute_us + o.halo_us + o.allreduce_us;
        assert!((o.predicted_us - sum).abs() <= 1e-9 * sum.max(1.0), "{o:?}");
    }
    let best = c
        .options
        .iter()
        .map(|o| o.predicted_us)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(c.options[c.chosen - 1].predicted_us, best);
}

/// One block per GPU iterates like the same blocks on GPU 0, and both poll every
/// `GPU_CHECK_EVERY` iterations by default.
fn one_gpu_per_block_iterates_like_the_blocks_on_gpu_0(_dev: GpuDevice) {
    let n = GpuDevice::discover().unwrap().len().min(2);
    let a = poisson3d_7pt(20, 20, 20).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let on_gpus = Solver::new(&a)
        .check_symmetry(false)
        .precond(PrecondKind::Jacobi)
        .gpus(GpuCount::Count(n))
        .solve(&b)
        .unwrap();
    let on_gpu0 = Solver::new(&a)
        .check_symmetry(false)
        .precond(PrecondKind::Jacobi)
        .device(Device::Gpu)
        .blocks(n)
        .solve(&b)
        .unwrap();
    assert!(on_gpus.info.true_relative_residual <= 1e-8);
    // Blocks on GPUs poll as an unsplit GPU solve does, not after every iteration.
    assert_eq!(on_gpus.check_every, autopcg::generator::GPU_CHECK_EVERY);
    assert_eq!(on_gpu0.check_every, autopcg::generator::GPU_CHECK_EVERY);
    let (i, j) = (on_gpus.info.iterations, on_gpu0.info.iterations);
    assert!(
        i.abs_diff(j) as f64 <= (0.01 * j as f64).max(1.0),
        "{i} vs {j}"
    );
    let r = on_gpus.blocks.unwrap();
    assert_eq!(r.devices, (0..n).collect::<Vec<_>>());
    assert!(r.gpu_count.is_none());
    assert_eq!(on_gpu0.blocks.unwrap().devices, vec![0; n]);
}

/// The committed H200 model renamed for `dev`, its SpMV candidates replaced by the CSR row
/// kernels at 128 and 256 threads, the scalar kernel priced a thousand times dearer per thread
/// slot than the vector kernels per step: every halo part with entries gets a vector kernel.
fn vector_favouring_model(dev: &GpuDevice) -> ModelFile {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/nvidia-h200.json");
    let mut m = ModelFile::load(&p).expect("the committed H200 model");
    m.device.name = dev.props().name.clone();
    m.spmv.device.name = dev.props().name.clone();
    let mut kernels = vec![SpmvKernel::CsrScalar];
    kernels.extend(CSR_LANES.map(SpmvKernel::CsrVector));
    m.spmv.candidates = kernels
        .into_iter()
        .flat_map(|k| {
            [128, 256].map(|t| {
                let slot_ms = if k == SpmvKernel::CsrScalar {
                    1e-3
                } else {
                    1e-6
                };
                CandidateModel::with_coefficients(
                    SpmvCandidate::own(SpmvImpl::Kernel(k), t, GridPolicy::Cover),
                    |term| match term {
                        Term::Launch => 2e-3,
                        Term::Slots => slot_ms,
                        _ => 0.0,
                    },
                )
            })
        })
        .collect();
    // One regime: these candidates price the blocks whether or not they are replayed.
    m.spmv.replayed.clear();
    m
}

/// With a model that prices CSR vector far below CSR scalar, every block's halo step names a
/// vector add kernel (the plan the backend is built from), and the solve converges with the
/// iterations of the same blocks without a model (the scalar halo kernel) within 1%.
fn a_models_halo_choice_is_what_the_blocks_run(dev: GpuDevice) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.json");
    vector_favouring_model(&dev).save(&path).unwrap();
    let a = random_powerlaw_spd(6000, 24.0, 1.4, 7).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let solve = |model: ModelChoice| {
        Solver::new(&a)
            .check_symmetry(false)
            .precond(PrecondKind::Jacobi)
            .device(Device::Gpu)
            .blocks(3)
            .model(model)
            .solve(&b)
            .unwrap()
    };
    let with = solve(ModelChoice::File(path.clone()));
    let without = solve(ModelChoice::Off);
    let halo_kernels = |s: &autopcg::Solution| -> Vec<String> {
        let r = s.blocks.as_ref().expect("a block report");
        r.block_plans
            .iter()
            .map(|p| {
                let h = p.steps.last().unwrap();
                assert_eq!(h.step, "spmv halo");
                h.kernel.clone()
            })
            .collect()
    };
    let (kv, ks) = (halo_kernels(&with), halo_kernels(&without));
    println!("halo kernels with the model {kv:?}, without {ks:?}");
    assert_eq!(kv.len(), 3);
    assert!(
        kv.iter().all(|k| k.starts_with("spmv_csr_vector_add_")),
        "{kv:?}"
    );
    assert!(ks.iter().all(|k| k == "spmv_csr_scalar_add"), "{ks:?}");
    for s in [&with, &without] {
        assert!(s.info.converged, "{:?}", s.info);
        assert!(s.info.true_relative_residual <= 1e-8, "{:?}", s.info);
    }
    let (i, j) = (with.info.iterations, without.info.iterations);
    assert!(
        i.abs_diff(j) as f64 <= (0.01 * j as f64).max(1.0),
        "{i} vs {j}"
    );
}

autopcg_gpu::test_main! {
    gpu: [
        gpus_auto_reports_its_choice_and_the_sub_plans,
        a_models_halo_choice_is_what_the_blocks_run,
        one_gpu_per_block_iterates_like_the_blocks_on_gpu_0,
        prepared_blocks_on_gpu_0,
    ],
}
