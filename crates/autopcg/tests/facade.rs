//! The facade on the CPU: it runs the generator's plan, reports what it ran, and treats a named
//! model file the same on every device.
use std::path::PathBuf;

use autopcg::sparse::families;
use autopcg::{
    CsrMatrix, Device, Error, ModelChoice, PcgParams, PrecondKind, Solver, SparseError, SsorForm,
    Triangle,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn a_cpu_solve_reports_the_plan_it_ran() {
    let a = families::poisson2d_5pt(30, 30).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let sol = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::ssor_ai().with_form(SsorForm::Explicit))
        .solve(&b)
        .unwrap();
    assert!(sol.info.converged);
    assert!(sol.info.true_relative_residual <= 1e-8);
    assert_eq!(sol.precond_applied, "ssor-ai-explicit");
    assert_eq!(sol.plan.source, "fixed CPU kernels");
    assert_eq!(sol.check_every, 1);
    assert!(sol.device.starts_with("cpu"));
    assert!(sol.model.is_none() && sol.explain.is_empty());
    assert!((sol.setup_ms - sol.setup.total_ms()).abs() < 1e-9);
    assert!(sol.x.iter().all(|v| (v - 1.0).abs() < 1e-6));
}

#[test]
fn a_caller_polling_interval_is_honoured() {
    let a = families::poisson2d_5pt(20, 20).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let sol = Solver::new(&a)
        .device(Device::Cpu)
        .check_every(5)
        .solve(&b)
        .unwrap();
    assert_eq!(sol.check_every, 5);
    // Converged at a polling point: iterations run is a multiple of 5.
    assert_eq!(sol.info.iterations_run % 5, 0);
}

#[cfg(feature = "gpu")]
#[test]
fn a_named_model_that_cannot_be_read_is_an_error_on_the_cpu_too() {
    let a = families::poisson2d_5pt(10, 10).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let corrupt = dir.path().join("corrupt.json");
    std::fs::write(&corrupt, "{\"schema\": 1, \"device\"").unwrap();
    for bad in [dir.path().join("missing.json"), empty, corrupt] {
        let e = Solver::new(&a)
            .device(Device::Cpu)
            .model(ModelChoice::File(bad.clone()))
            .solve(&b)
            .unwrap_err();
        assert!(matches!(e.error, Error::Model(_)), "{}: {e}", bad.display());
        assert!(
            e.to_string()
                .contains(bad.file_name().unwrap().to_str().unwrap()),
            "{e}"
        );
    }
    // A good model file is accepted (and noted as unused on the CPU).
    let good = root().join("models/nvidia-h200.json");
    let sol = Solver::new(&a)
        .device(Device::Cpu)
        .model(ModelChoice::File(good))
        .solve(&b)
        .unwrap();
    assert!(sol.notes.iter().any(|n| n.contains("not used on the CPU")));
}

#[test]
fn not_converged_keeps_the_last_iterate() {
    let a = families::poisson2d_5pt(30, 30).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let f = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::None)
        .params(PcgParams::new().with_max_iter(3).unwrap())
        .solve(&b)
        .unwrap_err();
    let p = f.partial.expect("the last iterate");
    assert_eq!(p.info.iterations, 3);
    assert_eq!(p.x.len(), a.nrows());
}

#[test]
fn a_polling_interval_in_the_params_is_kept() {
    let a = families::poisson2d_5pt(20, 20).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let sol = Solver::new(&a)
        .device(Device::Cpu)
        .params(PcgParams::new().with_check_every(3).unwrap())
        .solve(&b)
        .unwrap();
    assert_eq!(sol.check_every, 3);
}

/// `PrecondKind::ssor_ai()` leaves omega to the matrix: on s3rmt3m3, where omega = 1 stalls
/// near a 1e-2 residual, the default converges.
#[test]
fn ssor_ai_without_an_omega_uses_the_automatic_one() {
    let p = root().join("matrices/s3rmt3m3.mtx");
    let a = autopcg::sparse::mm::read_matrix(&p, &Default::default())
        .unwrap()
        .matrix;
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let sol = Solver::new(&a)
        .device(Device::Cpu)
        .precond(PrecondKind::ssor_ai())
        .solve(&b)
        .unwrap();
    assert!(sol.info.converged);
    assert!(sol.info.true_relative_residual <= 1e-8);
}

#[test]
fn a_one_triangle_matrix_is_refused_with_a_hint_and_an_asymmetric_one_named() {
    let a = families::poisson2d_5pt(8, 8).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let l = a.lower_triangle();
    let e = Solver::new(&l).device(Device::Cpu).solve(&b).unwrap_err();
    match &e.error {
        Error::Sparse(SparseError::OneTriangle { part, .. }) => assert_eq!(*part, Triangle::Lower),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("from_lower_triangle"), "{e}");
    // Mirrored, it solves.
    let full = CsrMatrix::from_lower_triangle(&l).unwrap();
    assert_eq!(full, a);
    assert!(Solver::new(&full).solve(&b).unwrap().info.converged);
    // An asymmetric matrix names its first entry without a matching mirror.
    let mut c = a.clone();
    c.data_mut()[1] *= 2.0;
    let e = Solver::new(&c).device(Device::Cpu).prepare().unwrap_err();
    assert!(
        matches!(
            e,
            Error::Sparse(SparseError::NotSymmetric { row: 1, col: 2, .. })
        ),
        "{e}"
    );
    // The check can be skipped for a matrix known to be symmetric; it is timed apart.
    let p = Solver::new(&a)
        .device(Device::Cpu)
        .check_symmetry(false)
        .prepare()
        .unwrap();
    assert_eq!(p.setup().check_ms, 0.0);
}

#[cfg(not(feature = "gpu"))]
#[test]
fn without_the_gpu_feature_auto_runs_on_the_cpu_and_gpu_is_refused() {
    let a = families::poisson2d_5pt(10, 10).unwrap();
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let sol = Solver::new(&a).solve(&b).unwrap();
    assert!(sol.device.starts_with("cpu"));
    assert!(
        sol.notes.iter().any(|n| n.contains("`gpu` feature")),
        "{:?}",
        sol.notes
    );
    let e = Solver::new(&a).device(Device::Gpu).prepare().unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable(_)), "{e}");
    assert!(e.to_string().contains("`gpu` feature"), "{e}");
    let e = Solver::new(&a)
        .model(ModelChoice::File(root().join("models/nvidia-h200.json")))
        .prepare()
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
}
