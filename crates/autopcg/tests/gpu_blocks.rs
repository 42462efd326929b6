//! `Solver::gpus` on a GPU machine: one row block per GPU through the facade, with the report
//! of the blocks' GPUs, the GPU count chosen by `auto` with its predictions, and one sub-plan
//! per block. On a machine with one GPU, `auto` can only choose 1.
//!
//! Without a CUDA device the runner reports each test as ignored (with AUTOPCG_REQUIRE_GPU=1 it
//! fails instead); see autopcg_gpu::testing.
use autopcg::gpu::GpuDevice;
use autopcg::sparse::families::poisson3d_7pt;
use autopcg::{Device, GpuCount, PrecondKind, Solver};

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

autopcg_gpu::test_main! {
    gpu: [
        gpus_auto_reports_its_choice_and_the_sub_plans,
        one_gpu_per_block_iterates_like_the_blocks_on_gpu_0,
        prepared_blocks_on_gpu_0,
    ],
}
