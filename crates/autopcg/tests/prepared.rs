//! The prepared solver on the CPU: several right-hand sides, x0, tolerances, new values of the
//! same pattern, and what is refused. (The same API runs on a GPU: crates/autopcg/tests/
//! gpu_prepared.rs.)
use autopcg::sparse::families;
use autopcg::{CsrMatrix, Device, PrecondKind, Solver};

mod common;
use common::{rhs, true_residual};

#[test]
fn one_setup_many_right_hand_sides_and_new_values() {
    let a = families::poisson2d_5pt(40, 40).unwrap();
    let mut p = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::ssor_ai())
        .prepare()
        .unwrap();
    assert_eq!((p.n(), p.nnz()), (a.nrows(), a.nnz()));
    let omega = p.precond().omega().expect("omega resolved at setup");
    let bs: Vec<Vec<f64>> = (0..3).map(|s| rhs(&a, s)).collect();
    let refs: Vec<&[f64]> = bs.iter().map(Vec::as_slice).collect();
    for (s, b) in p.solve_many(&refs).into_iter().zip(&bs) {
        let s = s.unwrap();
        assert!(s.info.converged);
        assert!(true_residual(&a, &s.x, b) <= 1e-8);
        // No setup beyond putting b in place.
        assert_eq!(
            s.setup.precond_ms + s.setup.select_ms + s.setup.backend_ms,
            0.0
        );
    }
    // A good initial guess converges at once.
    let first = p.solve(&bs[0]).unwrap();
    let again = p
        .solve_with(&bs[0], Some(&first.x), |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert!(again.info.iterations <= 1, "{}", again.info.iterations);

    // New values of the same pattern: A + 2 I (still SPD, better conditioned).
    let mut values = a.data().to_vec();
    for i in 0..a.nrows() {
        let (ptr, idx) = (a.indptr(), a.indices());
        for k in ptr[i] as usize..ptr[i + 1] as usize {
            if idx[k] as usize == i {
                values[k] += 2.0;
            }
        }
    }
    p.update_values(&values).unwrap();
    assert_eq!(p.precond().omega(), Some(omega), "the plan's omega is kept");
    let mut a2 = a.clone();
    a2.data_mut().copy_from_slice(&values);
    let b2 = rhs(&a2, 7);
    let s2 = p.solve(&b2).unwrap();
    assert!(true_residual(&a2, &s2.x, &b2) <= 1e-8);
    assert!(s2.info.iterations < first.info.iterations);
}

#[test]
fn absolute_and_relative_tolerances() {
    let a = families::poisson2d_5pt(30, 30).unwrap();
    let b = rhs(&a, 1);
    let mut p = Solver::new(&a).device(Device::Cpu).prepare().unwrap();
    p.set_tolerances(1e-12, 0.0).unwrap();
    let tight = p.solve(&b).unwrap();
    // An absolute floor far above the relative target stops much earlier.
    p.set_tolerances(1e-12, 1e-3).unwrap();
    let loose = p.solve(&b).unwrap();
    assert!(loose.info.converged);
    assert!(loose.info.iterations < tight.info.iterations);
    let abs = true_residual(&a, &loose.x, &b) * b.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(abs <= 1e-3, "{abs}");
    assert!(p.set_tolerances(0.0, 0.0).is_err());
    assert!(p.set_tolerances(1e-8, -1.0).is_err());
}

#[test]
fn bad_values_and_sizes_are_refused_and_change_nothing() {
    let a = families::poisson2d_5pt(10, 10).unwrap();
    let b = rhs(&a, 2);
    let mut p = Solver::new(&a).device(Device::Cpu).prepare().unwrap();
    assert!(p.update_values(&a.data()[1..]).is_err());
    let mut v = a.data().to_vec();
    v[3] = f64::NAN;
    assert!(p.update_values(&v).unwrap_err().to_string().contains("NaN"));
    let mut v = a.data().to_vec();
    v[0] = -1.0; // the first entry of row 1 is its diagonal
    assert!(p.update_values(&v).is_err());
    assert!(p.solve(&b[1..]).is_err());
    let s = p.solve(&b).unwrap();
    assert!(true_residual(&a, &s.x, &b) <= 1e-8);
}

/// New values that are not symmetric are refused as the matrix would be at preparation (the
/// first entry at fault named, 1-based), and change nothing; with the check turned off
/// (`Solver::check_symmetry(false)`) they are taken.
#[test]
fn asymmetric_new_values_are_refused_unless_the_check_is_off() {
    let a = families::poisson2d_5pt(10, 10).unwrap();
    let b = rhs(&a, 4);
    // Entry (row 7, column 17), 0-based (6, 16), doubled without its mirror (16, 6).
    let (c, _) = a.row(6);
    let k = a.indptr()[6] as usize + c.iter().position(|&j| j == 16).unwrap();
    let mut v = a.data().to_vec();
    v[k] *= 2.0;
    let mut p = Solver::new(&a).device(Device::Cpu).prepare().unwrap();
    let e = p.update_values(&v).unwrap_err().to_string();
    assert!(e.contains("A[7][17]"), "{e}");
    let s = p.solve(&b).unwrap();
    assert!(
        true_residual(&a, &s.x, &b) <= 1e-8,
        "the old values changed"
    );
    // Within the tolerance: taken.
    let mut w = a.data().to_vec();
    w[k] *= 1.0 + 1e-14;
    p.update_values(&w).unwrap();
    let mut q = Solver::new(&a)
        .device(Device::Cpu)
        .check_symmetry(false)
        .prepare()
        .unwrap();
    let t = q.update_values(&v).unwrap();
    assert_eq!(t.check_ms, 0.0);
}

#[test]
fn a_prepared_solver_can_own_its_matrix() {
    let p = {
        let a = families::poisson2d_5pt(12, 12).unwrap();
        Solver::new(&a)
            .device(Device::Cpu)
            .prepare()
            .unwrap()
            .into_owned()
    };
    let mut p = p;
    let b = vec![1.0; p.n()];
    assert!(p.solve(&b).unwrap().info.converged);
}

/// New values with the same pattern: each entry scaled by a factor of its unordered (row,
/// column) pair (so still symmetric), the diagonal raised (still SPD).
fn scaled_values(a: &CsrMatrix, seed: u64) -> Vec<f64> {
    let mut values = a.data().to_vec();
    for (i, w) in a.indptr().windows(2).enumerate() {
        let entries = w[0] as usize..w[1] as usize;
        for (v, &j) in values[entries.clone()]
            .iter_mut()
            .zip(&a.indices()[entries])
        {
            let (lo, hi) = (i.min(j as usize) as u64, i.max(j as usize) as u64);
            let f = 0.6 + ((lo * 31 + hi * 17 + seed) % 11) as f64 / 20.0;
            *v *= if lo == hi { 1.0 + f } else { f };
        }
    }
    values
}

#[test]
fn new_values_solve_as_a_solver_prepared_for_them() {
    let a = families::poisson3d_7pt(12, 11, 10).unwrap();
    for kind in [
        "jacobi",
        "ssor-ai",
        "ssor-ai2",
        "ssor-ai-explicit",
        "ssor-ai2-explicit",
    ] {
        let kind: PrecondKind = kind.parse().unwrap();
        let mut p = Solver::new(&a)
            .device(Device::Cpu)
            .precond(kind)
            .prepare()
            .unwrap();
        // Twice: the second update reuses what the first prepared.
        let mut a2 = a.clone();
        for seed in [3, 4] {
            let values = scaled_values(&a, seed);
            p.update_values(&values).unwrap();
            a2.data_mut().copy_from_slice(&values);
        }
        let b = rhs(&a2, 1);
        let got = p.solve(&b).unwrap();
        let fresh = Solver::new(&a2)
            .device(Device::Cpu)
            .precond(p.precond())
            .prepare()
            .unwrap()
            .solve(&b)
            .unwrap();
        assert_eq!(got.info.iterations, fresh.info.iterations, "{kind}");
        let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got.x), bits(&fresh.x), "{kind}");
        assert_eq!(got.precond_applied, fresh.precond_applied, "{kind}");
    }
}

#[test]
fn the_setup_json_carries_the_backend_parts_zero_on_the_cpu() {
    let a = families::poisson2d_5pt(20, 20).unwrap();
    let b = rhs(&a, 1);
    let s = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::ssor_ai())
        .solve(&b)
        .unwrap();
    // The command line's JSON writes the setup times as they serialise here.
    let json = serde_json::to_value(s.setup).unwrap();
    let obj = json.as_object().unwrap();
    for key in ["backend_ms", "upload_ms", "convert_ms", "load_ms"] {
        assert!(obj.get(key).is_some_and(|v| v.is_f64()), "{key} in {json}");
    }
    for key in ["upload_ms", "convert_ms", "load_ms"] {
        assert_eq!(obj[key].as_f64(), Some(0.0), "{key} on the CPU");
    }
    // The parts are inside backend_ms, not added to the total again.
    let t = &s.setup;
    let sum = t.check_ms + t.device_ms + t.precond_ms + t.select_ms + t.backend_ms + t.rhs_ms;
    assert_eq!(t.total_ms(), sum);
}
