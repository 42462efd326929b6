//! The facade's row-block option: `Solver::blocks(n)` solves split on the CPU and reports the
//! partition.
use autopcg::sparse::families::poisson3d_7pt;
use autopcg::{Device, Error, PrecondKind, Solver};

mod common;

#[test]
fn blocks_solve_like_unsplit_and_report_the_split() {
    let a = poisson3d_7pt(12, 12, 12).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let solver = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::Jacobi);
    let u = solver.solve(&b).unwrap();
    assert!(u.blocks.is_none());
    let s = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::Jacobi)
        .blocks(4)
        .solve(&b)
        .unwrap();
    assert_eq!(u.info.iterations, s.info.iterations);
    assert!(s.info.true_relative_residual <= 1e-8);
    let r = s.blocks.expect("a block report");
    assert_eq!(r.nblocks, 4);
    assert_eq!(r.blocks.iter().map(|b| b.rows).sum::<usize>(), a.nrows());
    // Three interfaces of 12 x 12 points, entries received from both sides.
    assert!(r.halo_entries_per_iteration >= 6 * 144);
    assert!(s.device.contains("4 row blocks"), "{}", s.device);
}

#[test]
fn bad_block_counts_are_errors() {
    let a = poisson3d_7pt(2, 2, 2).unwrap();
    let b = vec![1.0; 8];
    for n in [0, 9] {
        let e = Solver::new(&a)
            .device(Device::Cpu)
            .blocks(n)
            .solve(&b)
            .unwrap_err();
        assert!(matches!(e.error, Error::Pcg(_)), "{n}: {}", e.error);
    }
}

#[test]
fn gpu_counts_parse_as_numbers_or_auto() {
    use autopcg::GpuCount;
    assert_eq!("3".parse::<GpuCount>(), Ok(GpuCount::Count(3)));
    assert_eq!("AUTO".parse::<GpuCount>(), Ok(GpuCount::Auto));
    for bad in ["0", "-1", "two", ""] {
        let e = bad.parse::<GpuCount>().unwrap_err();
        assert!(e.contains("not a GPU count"), "{bad}: {e}");
    }
    assert_eq!(GpuCount::Count(2).to_string(), "2");
    assert_eq!(GpuCount::Auto.to_string(), "auto");
}

#[test]
fn gpus_refuses_blocks_the_cpu_and_missing_gpus() {
    use autopcg::GpuCount;
    let a = poisson3d_7pt(4, 4, 4).unwrap();
    let b = vec![1.0; a.nrows()];
    let e = Solver::new(&a)
        .blocks(2)
        .gpus(GpuCount::Count(2))
        .solve(&b)
        .unwrap_err();
    assert!(matches!(e.error, Error::Pcg(_)), "{e}");
    assert!(e.to_string().contains("cannot both be given"), "{e}");
    let e = Solver::new(&a)
        .device(Device::Cpu)
        .gpus(GpuCount::Count(1))
        .solve(&b)
        .unwrap_err();
    assert!(e.to_string().contains("CPU device"), "{e}");
    // More GPUs than any machine running these tests has.
    let e = Solver::new(&a)
        .gpus(GpuCount::Count(64))
        .solve(&b)
        .unwrap_err();
    assert!(matches!(e.error, Error::DeviceUnavailable(_)), "{e}");
    assert!(e.to_string().contains("--gpus 64 needs 64 GPUs but"), "{e}");
    assert!(e.to_string().contains("found"), "{e}");
}

#[test]
fn prepared_blocks_solve_many_and_take_new_values_on_the_cpu() {
    common::prepared_blocks_solve_many_and_take_new_values(Device::Cpu);
}
