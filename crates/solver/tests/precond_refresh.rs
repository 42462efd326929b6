//! Value-only refreshes of a preconditioner against a fresh build from the new values (bit for
//! bit, every kind and form, orders 1 and 2), and the explicit product's symbolic pattern
//! against the product.
use autopcg_solver::{PcgError, PrecondKind, Preconditioner, SsorForm, ValueRefresh};
use autopcg_sparse::families::{fem_p1_2d, poisson2d_5pt, poisson3d_7pt, random_powerlaw_spd};
use autopcg_sparse::CsrMatrix;

/// Every kind: none, Jacobi, and SSOR-AI of both orders and forms, with omega automatic and
/// fixed.
fn kinds() -> Vec<PrecondKind> {
    let mut v = vec![PrecondKind::None, PrecondKind::Jacobi];
    for order in [1, 2] {
        for form in [SsorForm::Factored, SsorForm::Explicit] {
            for omega in [None, Some(1.3)] {
                v.push(PrecondKind::SsorAi { order, omega, form });
            }
        }
    }
    v
}

/// New values of the same pattern, still symmetric with a dominant diagonal: each entry is
/// scaled by a factor that depends on its unordered (row, column) pair; the diagonal is raised.
fn new_values(a: &CsrMatrix, seed: u64) -> CsrMatrix {
    let mut b = a.clone();
    let ptr = a.indptr();
    let vals = b.data_mut();
    for (i, w) in ptr.windows(2).enumerate() {
        let entries = w[0] as usize..w[1] as usize;
        for (v, &j) in vals[entries.clone()].iter_mut().zip(&a.indices()[entries]) {
            let j = j as usize;
            let (lo, hi) = (i.min(j) as u64, i.max(j) as u64);
            let h = (lo * 7919 + hi * 104_729 + seed * 31).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let f = 0.5 + (h >> 11) as f64 / (1u64 << 53) as f64;
            *v *= if i == j { 1.0 + f } else { f };
        }
    }
    b
}

fn bits(p: &Preconditioner) -> Vec<u64> {
    let all: Vec<f64> = match p {
        Preconditioner::None => vec![],
        Preconditioner::Jacobi { inv_diag } => inv_diag.clone(),
        Preconditioner::SsorFactored { k, kt, inv_diag } => {
            [k.data(), kt.data(), inv_diag].concat()
        }
        Preconditioner::SsorExplicit { m } => m.data().to_vec(),
    };
    all.iter().map(|x| x.to_bits()).collect()
}

fn matrices() -> Vec<(&'static str, CsrMatrix)> {
    vec![
        ("poisson2d", poisson2d_5pt(23, 19).unwrap()),
        ("poisson3d", poisson3d_7pt(9, 8, 7).unwrap()),
        ("fem", fem_p1_2d(3000, 2).unwrap()),
        ("powerlaw", random_powerlaw_spd(2000, 8.0, 1.6, 4).unwrap()),
    ]
}

#[test]
fn a_refresh_equals_a_fresh_build_bit_for_bit() {
    for (name, a) in matrices() {
        for kind in kinds() {
            let mut pre = Preconditioner::build(&a, &kind).unwrap();
            let mut refresh = ValueRefresh::new(&a, &kind, &pre).unwrap();
            // Twice: the kept factors of the explicit form carry over from one refresh to the
            // next.
            for seed in [1, 2] {
                let b = new_values(&a, seed);
                refresh.refresh(&b, &mut pre).unwrap();
                let fresh = Preconditioner::build(&b, &kind).unwrap();
                assert_eq!(pre.kind_name(), fresh.kind_name(), "{name} {kind}");
                if let (
                    Preconditioner::SsorFactored { k, kt, .. },
                    Preconditioner::SsorFactored { k: fk, kt: fkt, .. },
                ) = (&pre, &fresh)
                {
                    assert_eq!((k.indptr(), k.indices()), (fk.indptr(), fk.indices()));
                    assert_eq!((kt.indptr(), kt.indices()), (fkt.indptr(), fkt.indices()));
                }
                if let (
                    Preconditioner::SsorExplicit { m },
                    Preconditioner::SsorExplicit { m: fm },
                ) = (&pre, &fresh)
                {
                    assert_eq!((m.indptr(), m.indices()), (fm.indptr(), fm.indices()));
                }
                assert_eq!(bits(&pre), bits(&fresh), "{name} {kind} seed {seed}");
                // The values did change (the test would pass trivially otherwise).
                if !matches!(kind, PrecondKind::None) {
                    let old = Preconditioner::build(&a, &kind).unwrap();
                    assert_ne!(bits(&old), bits(&fresh), "{name} {kind}");
                }
            }
        }
    }
}

#[test]
fn a_refresh_of_the_explicit_form_of_a_factored_build_equals_the_explicit_build() {
    // The plan may switch a factored build to its explicit form ([`Preconditioner::to_explicit`]).
    let a = poisson3d_7pt(8, 8, 8).unwrap();
    for order in [1, 2] {
        let fact = PrecondKind::SsorAi {
            order,
            omega: Some(1.1),
            form: SsorForm::Factored,
        };
        let expl = fact.with_form(SsorForm::Explicit);
        let mut pre = Preconditioner::build(&a, &fact)
            .unwrap()
            .to_explicit()
            .unwrap()
            .unwrap();
        let mut refresh = ValueRefresh::new(&a, &expl, &pre).unwrap();
        let b = new_values(&a, 5);
        refresh.refresh(&b, &mut pre).unwrap();
        assert_eq!(bits(&pre), bits(&Preconditioner::build(&b, &expl).unwrap()));
    }
}

#[test]
fn a_bad_diagonal_is_refused_and_changes_nothing() {
    let a = poisson2d_5pt(6, 5).unwrap();
    for kind in kinds().into_iter().skip(1) {
        let mut pre = Preconditioner::build(&a, &kind).unwrap();
        let before = pre.clone();
        let mut refresh = ValueRefresh::new(&a, &kind, &pre).unwrap();
        let mut b = a.clone();
        // Row 4 (1-based)'s diagonal entry becomes negative.
        let p = (b.indptr()[3]..b.indptr()[4])
            .find(|&p| b.indices()[p as usize] == 3)
            .unwrap() as usize;
        b.data_mut()[p] = -1.0;
        let e = refresh.refresh(&b, &mut pre).unwrap_err();
        assert!(
            matches!(e, PcgError::BadDiagonal { row: 4, .. }),
            "{kind}: {e}"
        );
        assert_eq!(pre, before, "{kind}");
    }
}

#[test]
fn a_refresh_for_another_kind_is_refused() {
    let a = poisson2d_5pt(5, 5).unwrap();
    let jacobi = Preconditioner::build(&a, &PrecondKind::Jacobi).unwrap();
    assert!(ValueRefresh::new(&a, &PrecondKind::ssor_ai(), &jacobi).is_err());
    let mut refresh = ValueRefresh::new(&a, &PrecondKind::Jacobi, &jacobi).unwrap();
    let mut ssor = Preconditioner::build(&a, &PrecondKind::ssor_ai()).unwrap();
    assert!(refresh.refresh(&a, &mut ssor).is_err());
}

#[test]
fn the_symbolic_pattern_is_the_product_pattern() {
    for (name, a) in matrices() {
        for kind in [PrecondKind::ssor_ai(), PrecondKind::ssor_ai2()] {
            let pre = Preconditioner::build(&a, &kind).unwrap();
            let pattern = pre.explicit_pattern().unwrap().unwrap();
            assert!(pattern.data().iter().all(|&v| v == 1.0));
            // The product as an explicit build forms it (values and pattern in one pass).
            let Preconditioner::SsorExplicit { m } =
                Preconditioner::build(&a, &kind.with_form(SsorForm::Explicit)).unwrap()
            else {
                panic!("{name} {kind}: no explicit form");
            };
            assert_eq!(pattern.indptr(), m.indptr(), "{name} {kind}");
            assert_eq!(pattern.indices(), m.indices(), "{name} {kind}");
            // The statistics a model reads are the same on the pattern and the product.
            assert_eq!(
                autopcg_sparse::features::features(&pattern),
                autopcg_sparse::features::features(&m),
                "{name} {kind}"
            );
            assert!(pre.values_finite());
        }
    }
    assert_eq!(Preconditioner::None.explicit_pattern().unwrap(), None);
}

#[test]
fn the_symbolic_pattern_of_rows_spanning_many_columns_is_the_product_pattern() {
    // An arrow matrix: row 0 couples to every row, so row 0 of K^T diag(s) K spans all n
    // columns (past the window the symbolic pass marks columns in, on to its hash table) and
    // every other row spans from column 0 to itself.
    let n = 300_000u32;
    let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
    for i in 0..n {
        r.push(i);
        c.push(i);
        v.push(4.0 + f64::from(i % 3));
        if i > 0 {
            r.extend([i, 0]);
            c.extend([0, i]);
            v.extend([-1.0 / f64::from(n), -1.0 / f64::from(n)]);
        }
    }
    let a = CsrMatrix::from_triplets(n as usize, n as usize, &r, &c, &v).unwrap();
    let pre = Preconditioner::build(&a, &PrecondKind::ssor_ai()).unwrap();
    let pattern = pre.explicit_pattern().unwrap().unwrap();
    let explicit = PrecondKind::ssor_ai().with_form(SsorForm::Explicit);
    let Preconditioner::SsorExplicit { m } = Preconditioner::build(&a, &explicit).unwrap() else {
        panic!("no explicit form");
    };
    assert_eq!(pattern.row_len(0), n as usize);
    assert_eq!(pattern.indptr(), m.indptr());
    assert_eq!(pattern.indices(), m.indices());
}
