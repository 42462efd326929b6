//! `autopcg bench prepared` on the CPU: the report is complete and self-consistent, whole and
//! split into row blocks.
mod common;
use common::{json, run, stderr};

#[test]
fn prepared_bench_reports_setup_fit_and_a_correct_update() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("p.mtx");
    let m = m.to_str().unwrap();
    let o = run(&["matgen", "poisson2d", "--n", "40", "--out", m]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (precond, blocks) in [("jacobi", None), ("ssor-ai", None), ("ssor-ai", Some("3"))] {
        let mut args = vec![
            "bench",
            "prepared",
            m,
            "--device",
            "cpu",
            "--precond",
            precond,
            "--repeat",
            "2",
            "--tols",
            "1e-3,1e-6,1e-9",
            "--json",
        ];
        if let Some(n) = blocks {
            args.extend(["--blocks", n]);
        }
        let o = run(&args);
        assert!(o.status.success(), "{precond}: {}", stderr(&o));
        let r = json(&o);
        assert_eq!(r["n"], 1600);
        let device = r["device"].as_str().unwrap();
        assert!(device.starts_with("cpu"), "{device}");
        assert_eq!(
            device.contains("3 row blocks"),
            blocks.is_some(),
            "{device}"
        );
        let points = r["points"].as_array().unwrap();
        assert_eq!(points.len(), 3);
        // Tighter tolerances take more iterations and meet their tolerance.
        let its: Vec<u64> = points
            .iter()
            .map(|p| p["iterations_run"].as_u64().unwrap())
            .collect();
        assert!(its.windows(2).all(|w| w[0] < w[1]), "{its:?}");
        for p in points {
            assert!(p["true_relative_residual"].as_f64().unwrap() <= p["tol"].as_f64().unwrap());
        }
        assert!(r["fit_ms_per_iteration"].as_f64().unwrap().is_finite());
        assert!(r["fit_overhead_ms"].as_f64().unwrap().is_finite());
        // The value-only update gives the solver a fresh one of the same values would.
        assert_eq!(r["updated_iterations"], r["fresh_iterations"], "{precond}");
        assert!(r["updated_true_relative_residual"].as_f64().unwrap() <= 1e-8);
        assert!(r["update_values_ms"].as_f64().unwrap() > 0.0);
        assert!(r["update_first_ms"].as_f64().unwrap() > 0.0);
        assert!(r["setup_warm_ms"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn prepared_bench_refuses_a_single_tolerance() {
    let o = run(&[
        "bench",
        "prepared",
        "../../matrices/bcsstk13.mtx",
        "--tols",
        "1e-8",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("at least two tolerances"),
        "{}",
        stderr(&o)
    );
}
