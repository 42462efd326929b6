//! The facade on the CPU: it runs the generator's plan, reports what it ran, and treats a named
//! model file the same on every device.
use std::path::PathBuf;

use autopcg::sparse::families;
use autopcg::{Device, Error, ModelChoice, PcgParams, PrecondKind, Solver, SsorForm};

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
