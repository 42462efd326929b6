//! The Chronopoulos–Gear driver and the CPU backend: against dense solves and textbook PCG,
//! exact-arithmetic corner cases, error reporting, determinism and polling.
// Dense linear algebra reads best with explicit indices.
#![allow(clippy::needless_range_loop)]
mod common;

use std::ops::ControlFlow;

use autopcg_solver::backend::Halt;
use autopcg_solver::{
    pcg, solve_cpu, CpuBackend, IterRecord, PcgBackend, PcgError, PrecondKind, Preconditioner,
};
use common::*;

#[test]
fn matches_a_dense_cholesky_solve_for_every_preconditioner() {
    for (seed, dominant, n) in [(21u64, true, 60), (22, false, 40), (23, true, 150)] {
        let a = random_spd(n, 6, dominant, seed);
        let ad = Dense::from_csr(&a);
        let b: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64 - 6.0).collect();
        let exact = ad.solve_spd(&b);
        for kind in all_kinds() {
            let (x, info) = solve_cpu(&a, &b, None, &kind, &params(1e-12, 10 * n))
                .unwrap_or_else(|f| panic!("{kind} seed {seed}: {f}"));
            let err = x
                .iter()
                .zip(&exact)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0, f64::max);
            let scale = exact.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert!(err < 1e-8 * scale, "{kind} seed {seed}: error {err:e}");
            assert!(info.converged);
            let tr = rel_residual(&a, &x, &b);
            assert!(tr < 1e-8, "{kind} seed {seed}: true residual {tr:e}");
            assert!((info.true_relative_residual - tr).abs() < 1e-12);
            assert_eq!(info.residual_history.len(), info.iterations + 1);
        }
    }
}

#[test]
fn gear_recurrence_tracks_textbook_pcg() {
    // Well conditioned: the two recurrences agree to rounding all the way.
    gear_vs_textbook(&random_spd(300, 8, true, 31), f64::INFINITY, 1);
    // Harder (B^T B + 0.05 I): rounding errors grow with the condition number, and both
    // recurrences drift apart once the residual has fallen far (each to its own few percent),
    // so histories are compared tightly only over the first three orders of magnitude.
    gear_vs_textbook(&random_spd(120, 8, false, 32), 1e3, 1);
}

/// Solves with both recurrences (tol 1e-10) and compares iteration counts (within `slack`) and
/// the residual histories while the residual is above `||r0|| / reduction`.
fn gear_vs_textbook(a: &autopcg_sparse::CsrMatrix, reduction: f64, slack: usize) {
    let b: Vec<f64> = (0..a.nrows()).map(|i| (i as f64 * 0.37).sin()).collect();
    for kind in all_kinds() {
        let m = Preconditioner::build(a, &kind).unwrap();
        let (_, it_ref, hist_ref) = textbook_pcg(a, &m, &b, 1e-10, 2000);
        let mut be = CpuBackend::new(a, &m, &b, None).unwrap();
        let info = pcg(&mut be, &params(1e-10, 2000), |_| ControlFlow::Continue(())).unwrap();
        let floor = hist_ref[0] / reduction;
        let worst = info
            .residual_history
            .iter()
            .zip(&hist_ref)
            .take_while(|(_, &t)| t > floor)
            .map(|(g, t)| (g - t).abs() / t)
            .fold(0.0, f64::max);
        println!(
            "n {} {kind}: {} iterations (textbook {it_ref}), max rel. history diff {worst:.1e}",
            a.nrows(),
            info.iterations
        );
        assert!(
            info.iterations.abs_diff(it_ref) <= slack,
            "{kind}: Gear {} vs textbook {it_ref} iterations",
            info.iterations
        );
        assert!(
            worst < 1e-8,
            "{kind}: residual histories differ by {worst:e} (relative)"
        );
        assert!(info.true_relative_residual < 1e-9);
    }
}

#[test]
fn one_by_one_system() {
    let a = csr(1, &[(0, 0, 4.0)]);
    for kind in all_kinds() {
        let (x, info) = solve_cpu(&a, &[2.0], None, &kind, &params(1e-12, 10)).unwrap();
        assert_eq!(info.iterations, 1, "{kind}");
        assert!((x[0] - 0.5).abs() < 1e-15, "{kind}: {}", x[0]);
    }
}

#[test]
fn zero_rhs_gives_exactly_zero() {
    let a = random_spd(10, 4, true, 3);
    let x0 = [3.0; 10];
    for x0 in [None, Some(&x0[..])] {
        let (x, info) =
            solve_cpu(&a, &[0.0; 10], x0, &PrecondKind::Jacobi, &params(1e-8, 5)).unwrap();
        assert!(info.converged);
        assert_eq!(info.iterations, 0);
        assert_eq!(info.true_relative_residual, 0.0);
        assert!(x.iter().all(|&v| v == 0.0));
    }
}

#[test]
fn exact_initial_guess_converges_at_iteration_zero() {
    let a = csr(
        3,
        &[
            (0, 0, 2.0),
            (1, 1, 4.0),
            (2, 2, 8.0),
            (0, 2, 1.0),
            (2, 0, 1.0),
        ],
    );
    let x_exact = [1.0, 0.5, 0.25];
    let b = a.mul_vec(&x_exact);
    for kind in all_kinds() {
        let (x, info) = solve_cpu(&a, &b, Some(&x_exact), &kind, &params(1e-10, 10)).unwrap();
        assert_eq!(info.iterations, 0, "{kind}");
        assert_eq!(x, x_exact.to_vec());
    }
}

#[test]
fn identity_converges_in_one_iteration() {
    let a = autopcg_sparse::CsrMatrix::identity(50).unwrap();
    let b: Vec<f64> = (0..50).map(|i| i as f64 + 1.0).collect();
    for kind in all_kinds() {
        let (x, info) = solve_cpu(&a, &b, None, &kind, &params(1e-14, 10)).unwrap();
        assert_eq!(info.iterations, 1, "{kind}");
        assert_eq!(x, b, "{kind}");
        assert_eq!(*info.residual_history.last().unwrap(), 0.0);
    }
}

#[test]
fn indefinite_matrix_is_reported_not_spd() {
    // A negative diagonal entry proves that A is not SPD: refused before iterating, also
    // without a preconditioner.
    let n = 6;
    let d = [3.0, -1.0, 2.0, -2.0, 4.0, 1.0];
    let a = csr(
        n,
        &d.iter()
            .enumerate()
            .map(|(i, &v)| (i, i, v))
            .collect::<Vec<_>>(),
    );
    let b = vec![1.0; n];
    let f = solve_cpu(&a, &b, None, &PrecondKind::None, &params(1e-10, 100)).unwrap_err();
    assert!(f.x.is_none());
    assert!(
        matches!(f.error, PcgError::BadDiagonal { row: 2, value, .. } if value == -1.0),
        "{}",
        f.error
    );
    // Symmetric indefinite with a positive diagonal and a positive first curvature, no
    // preconditioner: [[1, 2], [2, 1]], b = e1 gives alpha0 = 1, then the curvature
    // 4 - 4 * 4 / 1 = -12 at iteration 1 (all exact).
    let a = csr(2, &[(0, 0, 1.0), (0, 1, 2.0), (1, 0, 2.0), (1, 1, 1.0)]);
    let f = solve_cpu(
        &a,
        &[1.0, 0.0],
        None,
        &PrecondKind::None,
        &params(1e-10, 100),
    )
    .unwrap_err();
    assert!(f.x.is_none());
    match f.error {
        PcgError::NotSpd {
            value,
            iteration,
            ref quantity,
        } => {
            assert_eq!((value, iteration), (-12.0, 1), "{quantity}");
        }
        e => panic!("expected NotSpd, got {e}"),
    }
    // Positive diagonal but indefinite ([[1,2],[2,1]] has eigenvalue -1), with Jacobi.
    let a = csr(2, &[(0, 0, 1.0), (0, 1, 2.0), (1, 0, 2.0), (1, 1, 1.0)]);
    let f = solve_cpu(
        &a,
        &[1.0, -1.0],
        None,
        &PrecondKind::Jacobi,
        &params(1e-10, 100),
    )
    .unwrap_err();
    assert!(
        matches!(f.error, PcgError::NotSpd { iteration: 0, value, .. } if value == -2.0),
        "{}",
        f.error
    );
    // Negative diagonal with Jacobi or SSOR: refused before iterating.
    let a = csr(2, &[(0, 0, 1.0), (1, 1, -1.0)]);
    for k in ["jacobi", "ssor-ai2"] {
        let f = solve_cpu(
            &a,
            &[1.0, 1.0],
            None,
            &k.parse().unwrap(),
            &params(1e-10, 10),
        )
        .unwrap_err();
        assert!(
            matches!(f.error, PcgError::BadDiagonal { row: 2, .. }),
            "{}",
            f.error
        );
    }
}

#[test]
fn zero_diagonal_with_jacobi_is_a_bad_diagonal() {
    let a = csr(
        3,
        &[
            (0, 0, 1.0),
            (1, 1, 0.0),
            (2, 2, 1.0),
            (1, 2, 1.0),
            (2, 1, 1.0),
        ],
    );
    let f = solve_cpu(
        &a,
        &[1.0; 3],
        None,
        &PrecondKind::Jacobi,
        &params(1e-10, 10),
    )
    .unwrap_err();
    match f.error {
        PcgError::BadDiagonal {
            row,
            value,
            precond,
        } => {
            assert_eq!((row, value, precond.as_str()), (2, 0.0, "jacobi"));
        }
        e => panic!("{e}"),
    }
}

#[test]
fn nan_in_the_input_is_a_breakdown() {
    let a = random_spd(8, 4, true, 4);
    let mut b = vec![1.0; 8];
    b[5] = f64::NAN;
    let f = solve_cpu(&a, &b, None, &PrecondKind::Jacobi, &params(1e-10, 10)).unwrap_err();
    assert!(
        matches!(f.error, PcgError::Breakdown { iteration: 0, .. }),
        "{}",
        f.error
    );
    // NaN in an off-diagonal entry of A.
    let a = csr(
        3,
        &[
            (0, 0, 2.0),
            (1, 1, 2.0),
            (2, 2, 2.0),
            (0, 2, f64::NAN),
            (2, 0, f64::NAN),
        ],
    );
    for kind in all_kinds() {
        let f = solve_cpu(&a, &[1.0; 3], None, &kind, &params(1e-10, 10)).unwrap_err();
        assert!(
            matches!(f.error, PcgError::Breakdown { .. }),
            "{kind}: {}",
            f.error
        );
    }
}

/// The CPU backend, wrapped: it may report a non-finite reduction at iteration `poison_at` (as a
/// NaN produced mid-solve would) and freeze there, and may claim a poll that costs what a GPU's
/// does (the driver may then stretch the polls up to `growth` intervals). Counts the polls.
struct Wrapped<'a> {
    inner: CpuBackend<'a>,
    poison_at: Option<usize>,
    frozen: bool,
    growth: usize,
    polls: usize,
}

impl<'a> Wrapped<'a> {
    fn new(inner: CpuBackend<'a>) -> Self {
        Wrapped {
            inner,
            poison_at: None,
            frozen: false,
            growth: 1,
            polls: 0,
        }
    }
}

impl PcgBackend for Wrapped<'_> {
    fn n(&self) -> usize {
        self.inner.n()
    }
    fn rhs_norm(&mut self) -> Result<f64, PcgError> {
        self.inner.rhs_norm()
    }
    fn start(&mut self) -> Result<(), PcgError> {
        self.inner.start()
    }
    fn update_vectors(&mut self) -> Result<(), PcgError> {
        if self.frozen {
            return Ok(());
        }
        self.inner.update_vectors()
    }
    fn apply_preconditioner(&mut self) -> Result<(), PcgError> {
        if self.frozen {
            return Ok(());
        }
        self.inner.apply_preconditioner()
    }
    fn spmv_reduce_advance(&mut self) -> Result<(), PcgError> {
        if self.frozen {
            return Ok(());
        }
        self.inner.spmv_reduce_advance()
    }
    fn poll(&mut self) -> Result<Vec<IterRecord>, PcgError> {
        self.polls += 1;
        let mut recs = self.inner.poll()?;
        if let Some(k) = recs
            .iter()
            .position(|r| Some(r.iteration) == self.poison_at)
        {
            recs[k].dots.rr = f64::NAN;
            recs[k].outcome = Err(Halt::NotFinite);
            recs.truncate(k + 1);
            self.frozen = true;
        }
        Ok(recs)
    }
    fn poll_growth(&self) -> usize {
        self.growth
    }
    fn true_residual_norm(&mut self) -> Result<f64, PcgError> {
        self.inner.true_residual_norm()
    }
    fn matrix_norm(&mut self) -> Result<f64, PcgError> {
        self.inner.matrix_norm()
    }
    fn solution_norm(&mut self) -> Result<f64, PcgError> {
        self.inner.solution_norm()
    }
    fn norm_factor(&self) -> f64 {
        self.inner.norm_factor()
    }
    fn solution(&mut self) -> Result<Vec<f64>, PcgError> {
        self.inner.solution()
    }
    fn zero_solution(&mut self) -> Result<(), PcgError> {
        self.inner.zero_solution()
    }
}

#[test]
fn a_nan_mid_solve_is_a_breakdown_at_its_iteration() {
    let a = poisson3d(8, 8, 8);
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let m = Preconditioner::None;
    for check_every in [1, 4] {
        let mut be = Wrapped {
            poison_at: Some(5),
            ..Wrapped::new(CpuBackend::new(&a, &m, &b, None).unwrap())
        };
        let p = params(1e-10, 1000).with_check_every(check_every).unwrap();
        let mut seen = vec![];
        let e = pcg(&mut be, &p, |r| {
            seen.push(r.iteration);
            ControlFlow::Continue(())
        })
        .unwrap_err();
        assert!(matches!(e, PcgError::Breakdown { iteration: 5, .. }), "{e}");
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5]);
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    // Large enough for several reduction chunks.
    let a = poisson3d(25, 25, 20);
    let n = a.nrows();
    assert!(n > 3 * autopcg_solver::cpu::CHUNK);
    let b: Vec<f64> = (0..n).map(|i| ((i * 31) % 17) as f64 - 8.0).collect();
    let run = |threads: usize, kind: &PrecondKind| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| solve_cpu(&a, &b, None, kind, &params(1e-9, 500)).unwrap())
    };
    for kind in ["none", "ssor-ai2", "ssor-ai-explicit"] {
        let kind: PrecondKind = kind.parse().unwrap();
        let (x1, i1) = run(1, &kind);
        let (x3, i3) = run(3, &kind);
        assert_eq!(i1, i3, "{kind}");
        assert!(x1 == x3, "{kind}: solutions differ between 1 and 3 threads");
    }
}

#[test]
fn polling_less_often_finds_the_same_convergence_iteration() {
    let a = poisson3d(10, 10, 10);
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let m = Preconditioner::build(&a, &PrecondKind::ssor_ai()).unwrap();
    let solve = |k: usize| {
        let mut be = CpuBackend::new(&a, &m, &b, None).unwrap();
        let p = params(1e-9, 1000).with_check_every(k).unwrap();
        let mut polled = 0;
        let info = pcg(&mut be, &p, |_| {
            polled += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        (info, polled)
    };
    let (i1, _) = solve(1);
    let (i7, polled) = solve(7);
    assert_eq!(i1.iterations, i7.iterations);
    assert_eq!(i1.residual_history, i7.residual_history);
    assert_eq!(polled, i7.iterations + 1);
    assert_eq!(i1.iterations_run, i1.iterations);
    assert!(i7.iterations_run >= i7.iterations && i7.iterations_run < i7.iterations + 7);
    assert_eq!(i7.iterations_run % 7, 0);
    assert!(i7.true_relative_residual < 1e-8);
}

#[test]
fn stretched_polls_see_the_same_records_and_stop_near_the_same_iterate() {
    // Plain CG on 3D Poisson 30^3 with a random right-hand side: a few hundred iterations
    // at 1e-10, at a steady rate.
    let a = poisson3d(30, 30, 30);
    let b = random_rhs(a.nrows(), 5);
    let m = Preconditioner::None;
    let solve = |growth: usize| {
        let mut be = Wrapped {
            growth,
            ..Wrapped::new(CpuBackend::new(&a, &m, &b, None).unwrap())
        };
        let p = params(1e-10, 5000).with_check_every(8).unwrap();
        let info = pcg(&mut be, &p, |_| ControlFlow::Continue(())).unwrap();
        (info, be.polls)
    };
    let (i1, polls1) = solve(1);
    let (i4, polls4) = solve(4);
    assert!(i1.iterations > 100, "{}", i1.iterations);
    // The records do not depend on when they are read.
    assert_eq!(i1.iterations, i4.iterations);
    assert_eq!(i1.residual_history, i4.residual_history);
    assert_eq!(i1.replacements, i4.replacements);
    // Half the polls (the pacing pinned: 135 iterations to the tolerance, a poll every 8 of
    // them is 18 polls with record 0's), and the same iterate at the end: the spans shrink
    // back to one interval before the tolerance is met.
    assert_eq!((i1.iterations, polls1, polls4), (135, 18, 9));
    assert_eq!(i4.iterations_run, i1.iterations_run);
    assert!(i4.converged && i4.true_relative_residual <= 1e-10);
}

#[test]
fn not_converged_keeps_the_iterate_and_the_info() {
    let a = poisson3d(10, 10, 10);
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let f = solve_cpu(&a, &b, None, &PrecondKind::Jacobi, &params(1e-12, 5)).unwrap_err();
    let info = f.error.info().expect("NotConverged carries its info");
    assert_eq!((info.iterations, info.converged), (5, false));
    assert_eq!(info.reason, autopcg_solver::StopReason::MaxIter);
    assert_eq!(info.replacements, 0);
    assert_eq!(info.residual_history.len(), 6);
    let x = f.x.expect("the last iterate is returned");
    assert!((rel_residual(&a, &x, &b) - info.true_relative_residual).abs() < 1e-12);
    assert!(info.true_relative_residual < 1.0);
}

#[test]
fn callback_can_stop_the_solve() {
    let a = poisson3d(10, 10, 10);
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let m = Preconditioner::None;
    let mut be = CpuBackend::new(&a, &m, &b, None).unwrap();
    let e = pcg(&mut be, &params(1e-12, 1000), |r| {
        if r.iteration == 3 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap_err();
    assert_eq!(e.info().map(|i| i.iterations), Some(3));
    assert_eq!(e.reason(), Some(autopcg_solver::StopReason::Stopped));
}

#[test]
fn dimensions_are_checked() {
    let a = random_spd(5, 2, true, 1);
    let m = Preconditioner::None;
    assert!(matches!(
        CpuBackend::new(&a, &m, &[1.0; 4], None),
        Err(PcgError::Dimension(_))
    ));
    assert!(matches!(
        CpuBackend::new(&a, &m, &[1.0; 5], Some(&[0.0; 6])),
        Err(PcgError::Dimension(_))
    ));
    let other = random_spd(6, 2, true, 1);
    let m6 = Preconditioner::build(&other, &PrecondKind::Jacobi).unwrap();
    assert!(matches!(
        CpuBackend::new(&a, &m6, &[1.0; 5], None),
        Err(PcgError::Dimension(_))
    ));
}

#[test]
fn ssor_ai_needs_fewer_iterations_than_jacobi_on_3d_poisson() {
    let a = poisson3d(20, 20, 20);
    let b = a.mul_vec(&vec![1.0; a.nrows()]);
    let mut counts = vec![];
    for kind in all_kinds() {
        let (x, info) = solve_cpu(&a, &b, None, &kind, &params(1e-8, 2000)).unwrap();
        assert!(rel_residual(&a, &x, &b) < 1e-7);
        counts.push((kind.to_string(), info.iterations));
    }
    println!("3D Poisson 20^3 iterations (tol 1e-8): {counts:?}");
    let get = |s: &str| counts.iter().find(|c| c.0 == s).unwrap().1;
    assert!(get("ssor-ai") < get("jacobi"));
    assert!(get("ssor-ai2") < get("ssor-ai"));
    // The two forms are the same operator up to rounding.
    assert!(get("ssor-ai").abs_diff(get("ssor-ai-explicit")) <= 1);
    assert!(get("ssor-ai2").abs_diff(get("ssor-ai2-explicit")) <= 1);
}
