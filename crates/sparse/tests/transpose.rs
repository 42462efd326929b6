//! The parallel transpose against the serial counting transpose of the underlying CSR library:
//! the same arrays, bit for bit, whatever the thread count, and a source map that carries
//! values of the same pattern over.
use autopcg_sparse::families::{
    banded_spd, fem_p1_2d, kron, poisson2d_5pt, poisson3d_27pt, poisson3d_7pt,
};
use autopcg_sparse::CsrMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The serial reference: the CSR library's own transpose.
fn serial_transpose(a: &CsrMatrix) -> CsrMatrix {
    CsrMatrix::from_sprs(a.as_sprs().transpose_view().to_other_storage()).unwrap()
}

/// A random rectangular matrix with empty rows and columns, long rows and signed zeros.
fn random_matrix(nrows: usize, ncols: usize, seed: u64) -> CsrMatrix {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut r, mut c, mut v) = (vec![], vec![], vec![]);
    for i in 0..nrows {
        let len = match rng.random_range(0..10) {
            0 => 0,
            1 => rng.random_range(0..ncols.max(1)),
            _ => rng.random_range(0..6),
        };
        for _ in 0..len {
            r.push(i as u32);
            c.push(rng.random_range(0..ncols) as u32);
            v.push(match rng.random_range(0..8) {
                0 => -0.0,
                _ => rng.random_range(-1.0..1.0),
            });
        }
    }
    CsrMatrix::from_triplets(nrows, ncols, &r, &c, &v).unwrap()
}

fn with_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

fn assert_bitwise_equal(got: &CsrMatrix, want: &CsrMatrix, what: &str) {
    assert_eq!(
        (got.nrows(), got.ncols()),
        (want.nrows(), want.ncols()),
        "{what}"
    );
    assert_eq!(got.indptr(), want.indptr(), "{what}: row pointers");
    assert_eq!(got.indices(), want.indices(), "{what}: column indices");
    let bits = |m: &CsrMatrix| m.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(got), bits(want), "{what}: values");
}

fn check(a: &CsrMatrix, what: &str) {
    let want = serial_transpose(a);
    for threads in [1, 3, 4] {
        let (t, sources) = with_threads(threads, || a.transpose_with_sources());
        assert_bitwise_equal(&t, &want, &format!("{what}, {threads} threads"));
        assert_eq!(sources.len(), a.nnz());
        // Entry p of the transpose is entry sources[p] of a, mirrored.
        for (i, w) in t.indptr().windows(2).enumerate() {
            let entries = w[0] as usize..w[1] as usize;
            for (&e, &col) in sources[entries.clone()].iter().zip(&t.indices()[entries]) {
                let e = e as usize;
                let row = a.indptr().partition_point(|&q| q as usize <= e) - 1;
                assert_eq!((row, a.indices()[e] as usize), (col as usize, i));
            }
        }
        let plain = with_threads(threads, || a.transpose());
        assert_bitwise_equal(
            &plain,
            &want,
            &format!("{what}, transpose, {threads} threads"),
        );
    }
}

#[test]
fn random_matrices_transpose_as_the_serial_transpose() {
    for (seed, (m, n)) in [
        (0, 0),
        (1, 7),
        (7, 1),
        (50, 50),
        (300, 40),
        (40, 300),
        (2000, 2000),
    ]
    .into_iter()
    .enumerate()
    {
        check(
            &random_matrix(m, n, seed as u64),
            &format!("random {m} x {n}"),
        );
    }
}

#[test]
fn family_matrices_transpose_as_the_serial_transpose() {
    check(&poisson2d_5pt(31, 17).unwrap(), "poisson2d");
    check(&poisson3d_7pt(12, 11, 10).unwrap(), "poisson3d 7pt");
    check(&poisson3d_27pt(9, 8, 7).unwrap(), "poisson3d 27pt");
    check(&banded_spd(3000, 40, 3).unwrap(), "banded");
    check(&fem_p1_2d(2000, 5).unwrap(), "fem");
    let small = poisson2d_5pt(4, 3).unwrap();
    check(
        &kron(&small, &poisson2d_5pt(9, 9).unwrap()).unwrap(),
        "kron",
    );
    // The lower triangle is not symmetric: the transpose differs from it.
    let l = poisson3d_7pt(10, 10, 10).unwrap().lower_triangle();
    check(&l, "lower triangle");
}

#[test]
fn new_values_transpose_through_the_sources() {
    let mut a = random_matrix(500, 400, 11);
    let (_, sources) = a.transpose_with_sources();
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for v in a.data_mut() {
        *v = rng.random_range(-5.0..5.0);
    }
    let want = serial_transpose(&a);
    let refreshed: Vec<f64> = sources.iter().map(|&e| a.data()[e as usize]).collect();
    assert_eq!(refreshed, want.data());
}
