//! Helpers shared by the prepared-solver tests on the CPU and on a GPU.
use autopcg::CsrMatrix;

/// A right-hand side `b = A x` for a known, smoothly varying `x` picked by `seed`.
pub fn rhs(a: &CsrMatrix, seed: u64) -> Vec<f64> {
    let x: Vec<f64> = (0..a.nrows())
        .map(|i| 1.0 + ((i as u64 * 2654435761 + seed) % 97) as f64 / 97.0)
        .collect();
    a.mul_vec(&x)
}

/// The relative true residual `||b - A x|| / ||b||`.
pub fn true_residual(a: &CsrMatrix, x: &[f64], b: &[f64]) -> f64 {
    let ax = a.mul_vec(x);
    let r: f64 = ax
        .iter()
        .zip(b)
        .map(|(p, q)| (p - q).powi(2))
        .sum::<f64>()
        .sqrt();
    r / b.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// A prepared solver split into row blocks on `device` (3 blocks of a 3D Poisson, Jacobi):
/// three right-hand sides, each solved like a one-shot block solve with the true residual below
/// the tolerance, the later ones with no backend setup where the backend is kept (GPU); then
/// new values (the matrix times 2) and a solve of the new system; a bad diagonal refused; then
/// two more updates, which on GPUs are taken on the devices, each solving as a one-shot block
/// solve of its values does (on GPUs bit for bit).
#[allow(dead_code)]
pub fn prepared_blocks_solve_many_and_take_new_values(device: autopcg::Device) {
    use autopcg::sparse::families::poisson3d_7pt;
    use autopcg::{PrecondKind, Solver};
    let a = poisson3d_7pt(14, 14, 14).unwrap();
    let solver = Solver::new(&a)
        .device(device)
        .precond(PrecondKind::Jacobi)
        .blocks(3);
    let mut p = solver.prepare().unwrap();
    assert_eq!(p.n(), a.nrows());
    assert!(p.device().contains("3 row blocks"), "{}", p.device());
    if device == autopcg::Device::Gpu {
        // The block backend's setup is timed in parts: its uploads are among them.
        let s = p.setup();
        assert!(s.upload_ms > 0.0 && s.upload_ms <= s.backend_ms, "{s:?}");
    }
    for seed in 0..3 {
        let b = rhs(&a, seed);
        let s = p.solve(&b).unwrap();
        assert!(s.info.converged, "{:?}", s.info);
        assert!(true_residual(&a, &s.x, &b) <= 1e-8);
        let once = solver.solve(&b).unwrap();
        assert_eq!(s.info.iterations, once.info.iterations, "seed {seed}");
        assert_eq!(s.blocks.as_ref().unwrap().nblocks, 3);
        if device == autopcg::Device::Gpu {
            // The backend built by prepare serves every right-hand side.
            assert_eq!(s.setup.backend_ms, 0.0, "{:?}", s.setup);
        }
    }
    let doubled: Vec<f64> = a.data().iter().map(|v| 2.0 * v).collect();
    let u = p.update_values(&doubled).unwrap();
    let mut a2 = a.clone();
    a2.data_mut().copy_from_slice(&doubled);
    let b = rhs(&a2, 7);
    let s = p.solve(&b).unwrap();
    assert!(true_residual(&a2, &s.x, &b) <= 1e-8);
    if device == autopcg::Device::Gpu {
        // The first update builds the block backend again, made to take later values on
        // the device.
        assert_eq!(u.precond_ms, 0.0, "{u:?}");
    }
    // A bad diagonal is refused and changes nothing.
    let mut bad = doubled.clone();
    let d = a.indptr()[0] as usize
        + a.row(0)
            .0
            .iter()
            .position(|&c| c == 0)
            .expect("a diagonal entry");
    bad[d] = -1.0;
    assert!(p.update_values(&bad).is_err());
    assert!(true_residual(&a2, &p.solve(&b).unwrap().x, &b) <= 1e-8);
    // Later updates (the diagonal times 1.5, then 2.5): on GPUs values only, the blocks'
    // operands and preconditioners made again on their devices; each solve is that of a
    // solver prepared for the values.
    for f in [1.5, 2.5] {
        let mut next = doubled.clone();
        for &q in &a.diagonal_positions() {
            next[q as usize] *= f;
        }
        let u = p.update_values(&next).unwrap();
        if device == autopcg::Device::Gpu {
            assert!(
                u.precond_ms > 0.0 && u.upload_ms > 0.0,
                "diagonal x {f}: {u:?}"
            );
            assert_eq!(u.load_ms, 0.0, "diagonal x {f}: {u:?}");
        }
        let mut an = a.clone();
        an.data_mut().copy_from_slice(&next);
        let s = p.solve(&b).unwrap();
        assert!(true_residual(&an, &s.x, &b) <= 1e-8, "diagonal x {f}");
        let once = Solver::new(&an)
            .device(device)
            .precond(PrecondKind::Jacobi)
            .blocks(3)
            .solve(&b)
            .unwrap();
        assert_eq!(s.info.iterations, once.info.iterations, "diagonal x {f}");
        if device == autopcg::Device::Gpu {
            assert!(s.x == once.x, "diagonal x {f}: the solutions differ");
        }
    }
}
