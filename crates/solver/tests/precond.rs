//! SSOR-AI construction checked against dense computations, and preconditioner input checks.
// Dense linear algebra reads best with explicit indices.
#![allow(clippy::needless_range_loop)]
mod common;

use autopcg_solver::{PcgError, PrecondKind, Preconditioner, SsorForm};
use common::*;

fn ssor(order: u8, omega: f64, form: SsorForm) -> PrecondKind {
    PrecondKind::SsorAi {
        order,
        omega: Some(omega),
        form,
    }
}

/// Dense split A = L + D + L^T: returns (L, D as a vector).
fn split(a: &Dense) -> (Dense, Vec<f64>) {
    let n = a.n;
    let mut l = Dense::zeros(n);
    for i in 0..n {
        for j in 0..i {
            l.set(i, j, a.get(i, j));
        }
    }
    (l, (0..n).map(|i| a.get(i, i)).collect())
}

fn diag(d: &[f64]) -> Dense {
    let mut m = Dense::zeros(d.len());
    for (i, &v) in d.iter().enumerate() {
        m.set(i, i, v);
    }
    m
}

/// Dense M^-1 of a built preconditioner, by applying it to every unit vector.
fn apply_dense(p: &Preconditioner, n: usize) -> Dense {
    let mut m = Dense::zeros(n);
    let mut work = vec![0.0; p.work_len()];
    let mut z = vec![0.0; n];
    for j in 0..n {
        let mut e = vec![0.0; n];
        e[j] = 1.0;
        p.apply(&e, &mut z, &mut work);
        for i in 0..n {
            m.set(i, j, z[i]);
        }
    }
    m
}

#[test]
fn ssor_ai_matches_the_dense_truncated_neumann_series() {
    for (seed, dominant) in [(1u64, true), (2, false), (3, true)] {
        let n = 14;
        let a = random_spd(n, 4, dominant, seed);
        let ad = Dense::from_csr(&a);
        let (l, d) = split(&ad);
        for omega in [1.0, 0.7, 1.4] {
            let dinv: Vec<f64> = d.iter().map(|v| 1.0 / v).collect();
            let x = l.mul(&diag(&dinv)).scale(omega);
            let i = Dense::identity(n);
            let k1 = i.add(&x, -1.0);
            let k2 = k1.add(&x.mul(&x), 1.0);
            let c = omega * (2.0 - omega);
            for (order, k) in [(1u8, &k1), (2, &k2)] {
                let want = k.transpose().mul(&diag(&dinv)).mul(k).scale(c);
                let f = Preconditioner::build(&a, &ssor(order, omega, SsorForm::Factored)).unwrap();
                let e = Preconditioner::build(&a, &ssor(order, omega, SsorForm::Explicit)).unwrap();
                match &f {
                    Preconditioner::SsorFactored {
                        k: ks,
                        kt,
                        inv_diag,
                    } => {
                        assert!(Dense::from_csr(ks).rel_diff(k) < 1e-14, "K order {order}");
                        for (s, dv) in inv_diag.iter().zip(&d) {
                            assert!((s - c / dv).abs() <= 1e-15 * s.abs());
                        }
                        // K^T with its columns scaled by the diagonal factor.
                        let kts = k.transpose().mul(&diag(&dinv)).scale(c);
                        assert!(Dense::from_csr(kt).rel_diff(&kts) < 1e-14, "K^T S");
                    }
                    other => panic!("expected the factored form, got {}", other.kind_name()),
                }
                let Preconditioner::SsorExplicit { m } = &e else {
                    panic!("expected the explicit form")
                };
                let md = Dense::from_csr(m);
                assert!(
                    md.rel_diff(&want) < 1e-13,
                    "explicit order {order} omega {omega}"
                );
                assert!(
                    apply_dense(&f, n).rel_diff(&want) < 1e-13,
                    "factored order {order}"
                );
                assert!(apply_dense(&e, n).rel_diff(&want) < 1e-13);
                // Exactly symmetric, and positive definite.
                assert_eq!(
                    md.a,
                    md.transpose().a,
                    "explicit M^-1 is not exactly symmetric"
                );
                assert!(md.cholesky().is_some(), "M^-1 is not positive definite");
                let fd = apply_dense(&f, n);
                assert!(fd.rel_diff(&fd.transpose()) < 1e-14);
                assert!(fd.cholesky().is_some());
            }
        }
    }
}

#[test]
fn full_neumann_series_reproduces_the_ssor_inverse() {
    // The derivation: M = (D + wL) D^-1 (D + wL^T) / (w(2-w)) has the inverse
    // w(2-w) (I+X)^-T D^-1 (I+X)^-1 with X = w L D^-1, and (I+X)^-1 is the finite Neumann
    // series sum_{k<n} (-X)^k because X is strictly lower triangular.
    let n = 10;
    let a = Dense::from_csr(&random_spd(n, 4, false, 9));
    let (l, d) = split(&a);
    let omega = 1.3;
    let dinv: Vec<f64> = d.iter().map(|v| 1.0 / v).collect();
    let x = l.mul(&diag(&dinv)).scale(omega);
    let i = Dense::identity(n);
    let mut series = i.clone();
    let mut term = i.clone();
    for _ in 1..n {
        term = term.mul(&x).scale(-1.0);
        series = series.add(&term, 1.0);
    }
    assert!(term.mul(&x).max_abs() == 0.0, "X must be nilpotent");
    assert!(series.mul(&i.add(&x, 1.0)).rel_diff(&i) < 1e-12);
    let c = omega * (2.0 - omega);
    let dm = diag(&d);
    let m_ssor = dm
        .add(&l, omega)
        .mul(&diag(&dinv))
        .mul(&dm.add(&l.transpose(), omega))
        .scale(1.0 / c);
    let m_inv = series.transpose().mul(&diag(&dinv)).mul(&series).scale(c);
    assert!(m_inv.mul(&m_ssor).rel_diff(&i) < 1e-10);
}

#[test]
fn second_order_is_a_better_approximate_inverse_than_first() {
    // On a diagonally dominant matrix the truncation error shrinks with the order: measured as
    // || I - M^-1 M_ssor || in max norm.
    let n = 30;
    let a = random_spd(n, 6, true, 5);
    let ad = Dense::from_csr(&a);
    let (l, d) = split(&ad);
    let dinv: Vec<f64> = d.iter().map(|v| 1.0 / v).collect();
    let dm = diag(&d);
    let m_ssor = dm
        .add(&l, 1.0)
        .mul(&diag(&dinv))
        .mul(&dm.add(&l.transpose(), 1.0));
    let i = Dense::identity(n);
    let err = |order| {
        let p = Preconditioner::build(&a, &ssor(order, 1.0, SsorForm::Explicit)).unwrap();
        apply_dense(&p, n).mul(&m_ssor).add(&i, -1.0).max_abs()
    };
    let (e1, e2) = (err(1), err(2));
    assert!(e2 < e1, "first order {e1}, second order {e2}");
}

#[test]
fn jacobi_is_the_inverse_diagonal_and_none_copies() {
    let a = random_spd(20, 4, true, 11);
    let d = a.diagonal();
    let p = Preconditioner::build(&a, &PrecondKind::Jacobi).unwrap();
    let r: Vec<f64> = (0..20).map(|i| i as f64 - 3.5).collect();
    let mut z = vec![0.0; 20];
    p.apply(&r, &mut z, &mut []);
    for i in 0..20 {
        assert_eq!(z[i], r[i] * (1.0 / d[i]));
    }
    assert_eq!(p.nnz(), 20);
    let none = Preconditioner::build(&a, &PrecondKind::None).unwrap();
    none.apply(&r, &mut z, &mut []);
    assert_eq!(z, r);
    assert_eq!(none.nnz(), 0);
}

#[test]
fn bad_diagonals_are_reported_with_row_and_value() {
    // Row 2 (1-based) has no diagonal entry; row 3 a negative one.
    let a = csr(3, &[(0, 0, 2.0), (0, 1, -1.0), (1, 0, -1.0), (2, 2, -4.0)]);
    for kind in ["jacobi", "ssor-ai", "ssor-ai2-explicit"] {
        let k: PrecondKind = kind.parse().unwrap();
        match Preconditioner::build(&a, &k) {
            Err(PcgError::BadDiagonal {
                row,
                value,
                precond,
            }) => {
                assert_eq!((row, value), (2, 0.0));
                assert_eq!(precond, kind);
            }
            other => panic!("{kind}: expected BadDiagonal, got {other:?}"),
        }
    }
    let neg = csr(2, &[(0, 0, 1.0), (1, 1, -4.0)]);
    assert!(matches!(
        Preconditioner::build(&neg, &PrecondKind::Jacobi),
        Err(PcgError::BadDiagonal { row: 2, value, .. }) if value == -4.0
    ));
    let zero = csr(2, &[(0, 0, 0.0), (1, 1, 1.0)]);
    assert!(matches!(
        Preconditioner::build(&zero, &PrecondKind::Jacobi),
        Err(PcgError::BadDiagonal { row: 1, .. })
    ));
    let nan = csr(2, &[(0, 0, 1.0), (1, 1, f64::NAN)]);
    assert!(matches!(
        Preconditioner::build(&nan, &PrecondKind::ssor_ai()),
        Err(PcgError::BadDiagonal { row: 2, .. })
    ));
    // "none" does not look at the diagonal.
    assert!(Preconditioner::build(&a, &PrecondKind::None).is_ok());
    // Parameters are checked before anything is built.
    assert!(matches!(
        Preconditioner::build(&a, &PrecondKind::ssor_ai().with_omega(2.5)),
        Err(PcgError::InvalidParameter(_))
    ));
}

#[test]
fn explicit_and_factored_agree_on_a_poisson_problem_and_nnz_is_as_expected() {
    let a = poisson3d(6, 5, 4);
    let n = a.nrows();
    let r: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
    for order in [1u8, 2] {
        let f = Preconditioner::build(&a, &ssor(order, 1.2, SsorForm::Factored)).unwrap();
        let e = Preconditioner::build(&a, &ssor(order, 1.2, SsorForm::Explicit)).unwrap();
        let (mut zf, mut ze) = (vec![0.0; n], vec![0.0; n]);
        let mut work = vec![0.0; f.work_len()];
        f.apply(&r, &mut zf, &mut work);
        e.apply(&r, &mut ze, &mut []);
        let diff = zf
            .iter()
            .zip(&ze)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max);
        assert!(diff < 1e-12 * norm(&zf), "order {order}: {diff}");
        // First order on a 7-point stencil: K has the diagonal plus the 3 lower neighbours.
        if order == 1 {
            let Preconditioner::SsorFactored { k, .. } = &f else {
                panic!()
            };
            assert_eq!(k.nnz(), n + (a.nnz() - n) / 2);
        }
    }
}
