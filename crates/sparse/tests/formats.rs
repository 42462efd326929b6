//! Storage formats and features against hand-built layouts, CSR SpMV and naive computations.
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use autopcg_sparse::ell::ELL_PAD;
use autopcg_sparse::features::{features, row_length_histogram, MatrixFeatures};
use autopcg_sparse::hyb::one_third_split;
use autopcg_sparse::kernels;
use autopcg_sparse::{
    CooMatrix, CsrMatrix, DiaMatrix, EllMatrix, HybMatrix, PaddingLimits, SparseError,
};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Records the largest single allocation this test binary asks for, so that a refused
/// conversion can be shown not to have tried to allocate its padded arrays.
struct TrackingAlloc;

static LARGEST_ALLOC: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for TrackingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_size(layout.size());
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_size(layout.size());
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_size(new_size);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn note_size(size: usize) {
    if size > (1 << 26) {
        LARGEST_ALLOC.fetch_max(size, Ordering::Relaxed);
    }
}

#[global_allocator]
static GLOBAL: TrackingAlloc = TrackingAlloc;

const UNLIMITED: PaddingLimits = PaddingLimits {
    max_fill_ratio: f64::INFINITY,
    max_bytes: u64::MAX,
};

fn csr(n: usize, m: usize, t: &[(u32, u32, f64)]) -> CsrMatrix {
    let r: Vec<u32> = t.iter().map(|e| e.0).collect();
    let c: Vec<u32> = t.iter().map(|e| e.1).collect();
    let v: Vec<f64> = t.iter().map(|e| e.2).collect();
    CsrMatrix::from_triplets(n, m, &r, &c, &v).unwrap()
}

/// `a` without its entries that equal 0.0: what DIA gives back.
fn without_zeros(a: &CsrMatrix) -> CsrMatrix {
    a.filter(|i, j| a.get(i, j) != 0.0)
}

/// Random n x m matrix with about `per_row` entries per row, some rows empty, some explicit
/// zeros.
fn random_matrix(rng: &mut ChaCha8Rng, n: usize, m: usize, per_row: usize) -> CsrMatrix {
    let mut t = Vec::new();
    for i in 0..n {
        if rng.random_bool(0.1) {
            continue;
        }
        let len = rng.random_range(0..=2 * per_row);
        for _ in 0..len {
            let v = if rng.random_bool(0.05) {
                0.0
            } else {
                rng.random_range(-1.0..1.0)
            };
            t.push((i as u32, rng.random_range(0..m) as u32, v));
        }
    }
    csr(n, m, &t)
}

fn random_vec(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Checks every format's round trip and SpMV against `a`.
fn check_all_formats(a: &CsrMatrix, x: &[f64], hyb_split: Option<usize>) {
    let y = a.mul_vec(x);
    let bits = |v: &[f64]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let mut z = vec![f64::NAN; a.nrows()];

    let coo = CooMatrix::from_csr(a);
    assert_eq!(&coo.to_csr().unwrap(), a);
    coo.spmv(x, &mut z);
    assert_eq!(bits(&z), bits(&y), "COO spmv");

    let ell = EllMatrix::from_csr(a, &UNLIMITED).unwrap();
    assert_eq!(&ell.to_csr().unwrap(), a);
    assert_eq!(ell.nnz(), a.nnz());
    z.fill(f64::NAN);
    ell.spmv(x, &mut z);
    assert_eq!(bits(&z), bits(&y), "ELL spmv");

    let hyb = HybMatrix::from_csr(a, hyb_split, &UNLIMITED).unwrap();
    assert_eq!(&hyb.to_csr().unwrap(), a);
    assert_eq!(hyb.nnz(), a.nnz());
    z.fill(f64::NAN);
    hyb.spmv(x, &mut z);
    assert_eq!(bits(&z), bits(&y), "HYB spmv");

    let dia = DiaMatrix::from_csr(a, &UNLIMITED).unwrap();
    assert_eq!(dia.to_csr().unwrap(), without_zeros(a));
    z.fill(f64::NAN);
    dia.spmv(x, &mut z);
    // Padding adds exact zeros: equal values, at most the sign of a zero differs.
    assert_eq!(z, y, "DIA spmv");
}

#[test]
fn coo_layout_and_validation() {
    let a = csr(3, 4, &[(2, 3, 5.0), (0, 1, 1.0), (0, 0, 0.0), (2, 0, 2.0)]);
    let coo = CooMatrix::from_csr(&a);
    assert_eq!(coo.rows(), &[0, 0, 2, 2]);
    assert_eq!(coo.cols(), &[0, 1, 0, 3]);
    assert_eq!(coo.vals(), &[0.0, 1.0, 2.0, 5.0]);
    assert_eq!((coo.nrows(), coo.ncols(), coo.nnz()), (3, 4, 4));
    assert_eq!(coo.to_csr().unwrap(), a);

    let ok = CooMatrix::try_new(2, 2, vec![0, 1], vec![1, 0], vec![1.0, 2.0]).unwrap();
    assert_eq!(ok.to_csr().unwrap().get(1, 0), 2.0);
    let unsorted = CooMatrix::try_new(2, 2, vec![1, 0], vec![0, 1], vec![1.0, 2.0]);
    assert!(matches!(unsorted, Err(SparseError::Structure(_))));
    let dup = CooMatrix::try_new(2, 2, vec![0, 0], vec![1, 1], vec![1.0, 2.0]);
    assert!(matches!(dup, Err(SparseError::Structure(_))));
    let outside = CooMatrix::try_new(2, 2, vec![0], vec![2], vec![1.0]);
    assert!(matches!(outside, Err(SparseError::Structure(_))));
    let lengths = CooMatrix::try_new(2, 2, vec![0], vec![], vec![1.0]);
    assert!(matches!(lengths, Err(SparseError::Dimension(_))));
}

#[test]
fn ell_layout_is_column_major_with_padding() {
    // Row 0: (0, 1.0), (2, 2.0); row 1: explicit zero at column 1; row 2 empty.
    let a = csr(3, 4, &[(0, 2, 2.0), (1, 1, 0.0), (0, 0, 1.0)]);
    let ell = EllMatrix::from_csr(&a, &PaddingLimits::default()).unwrap();
    assert_eq!(ell.width(), 2);
    assert_eq!(ell.cols(), &[0, 1, ELL_PAD, 2, ELL_PAD, ELL_PAD]);
    assert_eq!(ell.vals(), &[1.0, 0.0, 0.0, 2.0, 0.0, 0.0]);
    assert_eq!(ell.nnz(), 3);
    assert_eq!(ell.fill_ratio(), 2.0);
    let back = ell.to_csr().unwrap();
    assert_eq!(back, a);
    assert_eq!(back.row(1), (&[1u32][..], &[0.0][..]));

    // A narrower width keeps the first entries of each row only.
    let part = EllMatrix::from_csr_width(&a, 1).unwrap();
    assert_eq!(part.cols(), &[0, 1, ELL_PAD]);
    assert_eq!(
        part.to_csr().unwrap(),
        csr(3, 4, &[(0, 0, 1.0), (1, 1, 0.0)])
    );
}

#[test]
fn dia_layout_offsets_and_band() {
    // [[4, -1, 5], [-1, 4, -2], [0, -2, 4]]
    let a = csr(
        3,
        3,
        &[
            (0, 0, 4.0),
            (0, 1, -1.0),
            (0, 2, 5.0),
            (1, 0, -1.0),
            (1, 1, 4.0),
            (1, 2, -2.0),
            (2, 1, -2.0),
            (2, 2, 4.0),
        ],
    );
    let dia = DiaMatrix::from_csr(&a, &PaddingLimits::default()).unwrap();
    assert_eq!(dia.offsets(), &[-1, 0, 1, 2]);
    #[rustfmt::skip]
    let band = [
        0.0, -1.0, -2.0,
        4.0, 4.0, 4.0,
        -1.0, -2.0, 0.0,
        5.0, 0.0, 0.0,
    ];
    assert_eq!(dia.data(), &band);
    assert_eq!(dia.ndiag(), 4);
    assert_eq!(dia.nnz(), 8);
    assert_eq!(dia.fill_ratio(), 12.0 / 8.0);
    assert_eq!(dia.to_csr().unwrap(), a);

    // Rectangular 2 x 4: offsets up to ncols - 1.
    let r = csr(2, 4, &[(0, 3, 1.0), (1, 0, 2.0), (1, 1, 3.0)]);
    let d = DiaMatrix::from_csr(&r, &UNLIMITED).unwrap();
    assert_eq!(d.offsets(), &[-1, 0, 3]);
    assert_eq!(d.data(), &[0.0, 2.0, 0.0, 3.0, 1.0, 0.0]);
    assert_eq!(d.to_csr().unwrap(), r);
    let mut y = [0.0; 2];
    d.spmv(&[1.0, 10.0, 100.0, 1000.0], &mut y);
    assert_eq!(y, [1000.0, 32.0]);
}

#[test]
fn dia_drops_explicit_zeros_other_formats_keep_them() {
    let a = csr(3, 3, &[(0, 0, 1.0), (0, 1, 0.0), (1, 1, 2.0), (2, 0, 0.0)]);
    assert_eq!(a.nnz(), 4);
    let dia = DiaMatrix::from_csr(&a, &UNLIMITED).unwrap();
    let back = dia.to_csr().unwrap();
    assert_eq!(back.nnz(), 2);
    assert_eq!(back, without_zeros(&a));
    assert_eq!(CooMatrix::from_csr(&a).to_csr().unwrap(), a);
    assert_eq!(
        EllMatrix::from_csr(&a, &UNLIMITED)
            .unwrap()
            .to_csr()
            .unwrap(),
        a
    );
    for split in [None, Some(0), Some(1), Some(3)] {
        let h = HybMatrix::from_csr(&a, split, &UNLIMITED).unwrap();
        assert_eq!(h.to_csr().unwrap(), a, "split {split:?}");
    }
}

/// Rows of the given lengths, entries at columns 0, 1, ...
fn with_row_lengths(lens: &[usize], ncols: usize) -> CsrMatrix {
    let mut t = Vec::new();
    for (i, &l) in lens.iter().enumerate() {
        for j in 0..l {
            t.push((i as u32, j as u32, (10 * i + j) as f64 + 1.0));
        }
    }
    csr(lens.len(), ncols, &t)
}

#[test]
fn hyb_one_third_split_on_known_lengths() {
    let a = with_row_lengths(&[1, 1, 1, 2, 5, 9], 10);
    assert_eq!(one_third_split(&a), 5);
    let h = HybMatrix::from_csr(&a, None, &PaddingLimits::default()).unwrap();
    assert_eq!(h.split(), 5);
    assert_eq!(h.ell().width(), 5);
    assert_eq!(h.coo().rows(), &[5, 5, 5, 5]);
    assert_eq!(h.coo().cols(), &[5, 6, 7, 8]);
    assert_eq!(h.coo().vals(), &[56.0, 57.0, 58.0, 59.0]);
    // Row 4 fills the ELL part exactly; row 0 has one entry and four padded slots.
    let n = 6;
    assert_eq!(h.ell().cols()[4 * n + 4], 4);
    assert_eq!(h.ell().cols()[n], ELL_PAD);
    assert_eq!(h.to_csr().unwrap(), a);

    // Explicit override.
    let h1 = HybMatrix::from_csr(&a, Some(1), &PaddingLimits::default()).unwrap();
    assert_eq!(h1.split(), 1);
    assert_eq!(h1.coo().nnz(), 13); // (1-1) * 3 + (2-1) + (5-1) + (9-1)
    assert_eq!(h1.to_csr().unwrap(), a);

    // ceil(n / 3): 4 rows need 2 rows at >= h.
    assert_eq!(one_third_split(&with_row_lengths(&[0, 0, 3, 7], 8)), 3);
    // 7 rows need 3.
    assert_eq!(
        one_third_split(&with_row_lengths(&[4, 4, 0, 0, 0, 0, 9], 10)),
        4
    );
    assert_eq!(one_third_split(&with_row_lengths(&[], 0)), 0);
    assert_eq!(one_third_split(&with_row_lengths(&[0, 0, 0], 1)), 0);
}

#[test]
fn ell_refused_on_one_dense_row_hyb_fine() {
    let n = 20_000;
    let mut t: Vec<(u32, u32, f64)> = (0..n as u32).map(|i| (i, i, 2.0)).collect();
    t.extend((1..n as u32).map(|j| (0, j, -1.0)));
    let a = csr(n, n, &t);
    let lim = PaddingLimits::default();
    match EllMatrix::from_csr(&a, &lim) {
        Err(SparseError::TooMuchPadding {
            format, fill_ratio, ..
        }) => {
            assert_eq!(format, "ELL");
            assert!(fill_ratio > 1000.0, "{fill_ratio}");
        }
        other => panic!("expected refusal, got {other:?}"),
    }
    let h = HybMatrix::from_csr(&a, None, &lim).unwrap();
    assert_eq!(h.split(), 1);
    assert_eq!(h.coo().nnz(), n - 1);
    assert_eq!(h.to_csr().unwrap(), a);
    let x: Vec<f64> = (0..n).map(|i| 1.0 / (1.0 + i as f64)).collect();
    let mut y = vec![0.0; n];
    h.spmv(&x, &mut y);
    assert_eq!(y, a.mul_vec(&x));
    // An explicit split that pads too much is refused as HYB.
    let e = HybMatrix::from_csr(&a, Some(50), &lim).unwrap_err();
    assert!(
        matches!(e, SparseError::TooMuchPadding { format: "HYB", .. }),
        "{e}"
    );
}

#[test]
fn dia_refused_on_anti_diagonal_and_random() {
    let n = 2000;
    let anti: Vec<(u32, u32, f64)> = (0..n as u32).map(|i| (i, n as u32 - 1 - i, 1.0)).collect();
    let a = csr(n, n, &anti);
    match DiaMatrix::from_csr(&a, &PaddingLimits::default()) {
        Err(SparseError::TooMuchPadding {
            format,
            fill_ratio,
            bytes,
            ..
        }) => {
            assert_eq!(format, "DIA");
            assert_eq!(fill_ratio, n as f64);
            assert_eq!(bytes, (n * n * 8 + n * 4) as u64);
        }
        other => panic!("expected refusal, got {other:?}"),
    }
    // ELL is a perfect fit for the same matrix.
    assert_eq!(
        EllMatrix::from_csr(&a, &PaddingLimits::default())
            .unwrap()
            .fill_ratio(),
        1.0
    );
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let r = random_matrix(&mut rng, 1000, 1000, 5);
    assert!(matches!(
        DiaMatrix::from_csr(&r, &PaddingLimits::default()),
        Err(SparseError::TooMuchPadding { format: "DIA", .. })
    ));
}

#[test]
fn byte_limit_refuses_even_without_padding() {
    let a = CsrMatrix::identity(1000).unwrap();
    let tight = PaddingLimits {
        max_fill_ratio: 3.0,
        max_bytes: 1000 * 12 - 1,
    };
    assert!(EllMatrix::from_csr(&a, &tight).is_err());
    assert!(HybMatrix::from_csr(&a, None, &tight).is_err());
    assert!(DiaMatrix::from_csr(&a, &tight).is_ok()); // 8004 bytes
    let tighter = PaddingLimits {
        max_bytes: 8003,
        ..tight
    };
    assert!(DiaMatrix::from_csr(&a, &tighter).is_err());
}

/// n = 10M with a sparse arrow (every 2000th entry of row 0 and column 0): ELL would need
/// 600 GB, DIA 800 GB. Both must be refused without asking for anything near that, while
/// features and HYB (all in its COO part) stay cheap.
#[test]
fn refusal_happens_before_allocation() {
    let n: usize = 10_000_000;
    let step = 2000;
    let k = n / step;
    // Row 0: columns 0, step, 2 step, ...; rows step, 2 step, ...: column 0.
    let mut indptr = Vec::with_capacity(n + 1);
    let mut nnz = 0u32;
    indptr.push(0u32);
    for i in 0..n {
        if i == 0 {
            nnz += k as u32;
        } else if i % step == 0 {
            nnz += 1;
        }
        indptr.push(nnz);
    }
    let mut indices: Vec<u32> = (0..k as u32).map(|t| t * step as u32).collect();
    indices.extend(std::iter::repeat_n(0u32, k - 1));
    let data = vec![1.0; indices.len()];
    let a = CsrMatrix::try_from_parts(n, n, indptr, indices, data).unwrap();
    let lim = PaddingLimits::default();

    let e = EllMatrix::from_csr(&a, &lim).unwrap_err();
    assert!(
        matches!(e, SparseError::TooMuchPadding { format: "ELL", bytes, .. } if bytes == (k * n * 12) as u64),
        "{e}"
    );
    let e = DiaMatrix::from_csr(&a, &lim).unwrap_err();
    assert!(
        matches!(e, SparseError::TooMuchPadding { format: "DIA", .. }),
        "{e}"
    );
    let f = features(&a);
    assert_eq!(f.ndiag, 2 * k - 1);
    assert_eq!(f.ell_width, k);
    assert_eq!(f.bandwidth, (k - 1) * step);
    assert_eq!(f.empty_rows, n - k);
    assert_eq!(f.hyb_split, 0);
    assert_eq!(f.hyb_coo_share, 1.0);
    assert!(f.symmetric);
    assert!(!f.diag_positive);
    // HYB puts everything in its COO part.
    let h = HybMatrix::from_csr(&a, None, &lim).unwrap();
    assert_eq!((h.split(), h.coo().nnz()), (0, a.nnz()));
    assert_eq!(h.coo().cols(), a.indices());
    let largest = LARGEST_ALLOC.load(Ordering::Relaxed);
    assert!(
        largest < 1 << 30,
        "some allocation asked for {largest} bytes"
    );
}

#[test]
fn empty_and_single_row_matrices() {
    for (n, m) in [(0, 0), (0, 3), (3, 0), (1, 1), (4, 4)] {
        let a = csr(n, m, &[]);
        check_all_formats(&a, &vec![1.0; m], None);
        let e = EllMatrix::from_csr(&a, &PaddingLimits::default()).unwrap();
        assert_eq!((e.width(), e.cols().len(), e.fill_ratio()), (0, 0, 1.0));
        let d = DiaMatrix::from_csr(&a, &PaddingLimits::default()).unwrap();
        assert_eq!((d.ndiag(), d.fill_ratio()), (0, 1.0));
        let h = HybMatrix::from_csr(&a, None, &PaddingLimits::default()).unwrap();
        assert_eq!(h.split(), 0);
    }
    let one = csr(1, 1, &[(0, 0, 3.0)]);
    check_all_formats(&one, &[2.0], None);
    let f = features(&one);
    assert_eq!(
        (
            f.ndiag,
            f.bandwidth,
            f.hyb_split,
            f.symmetric,
            f.diag_positive
        ),
        (1, 0, 1, true, true)
    );
    // A HYB with slots but no stored entry is infinitely padded.
    let empty = csr(4, 4, &[]);
    assert!(HybMatrix::from_csr(&empty, Some(2), &PaddingLimits::default()).is_err());
}

#[test]
fn spmv_of_every_format_equals_csr_on_random_matrices() {
    let mut rng = ChaCha8Rng::seed_from_u64(2024);
    for &(n, m, per_row) in &[
        (1, 1, 1),
        (500, 500, 4),
        (300, 700, 6),
        (700, 300, 3),
        (9000, 9000, 2), // more than two row blocks
    ] {
        let a = random_matrix(&mut rng, n, m, per_row);
        let x = random_vec(&mut rng, m);
        check_all_formats(&a, &x, None);
        check_all_formats(&a, &x, Some(per_row));
    }
}

#[test]
fn vector_kernels_match_naive_sums() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let a = random_vec(&mut rng, 10_001);
    let b = random_vec(&mut rng, 10_001);
    let naive: f64 = a.iter().zip(&b).map(|(p, q)| p * q).sum();
    assert!((kernels::dot(&a, &b) - naive).abs() < 1e-10);
    let mut y = b.clone();
    kernels::axpy(-2.0, &a, &mut y);
    assert!(y
        .iter()
        .zip(&a)
        .zip(&b)
        .all(|((y, a), b)| *y == b - 2.0 * a));
}

// ---------------------------------------------------------------------------------------------
// Property tests.

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => Just(0.0),
        4 => (-3i32..=3).prop_map(f64::from),
        2 => -1e3f64..1e3,
    ]
}

/// (matrix, x, symmetric by construction)
fn arb_matrix() -> impl Strategy<Value = (CsrMatrix, Vec<f64>)> {
    (1usize..14, 1usize..14, any::<bool>())
        .prop_flat_map(|(n, m, sym)| {
            (
                Just(n),
                Just(m),
                Just(sym && n == m),
                prop::collection::vec((0..n as u32, 0..m as u32, value()), 0..=n * m + 4),
                prop::collection::vec(-2.0f64..2.0, m),
            )
        })
        .prop_map(|(n, m, sym, mut t, x)| {
            if sym {
                let mirror: Vec<_> = t.iter().map(|&(i, j, v)| (j, i, v)).collect();
                t.extend(mirror);
            }
            (csr(n, m, &t), x)
        })
}

fn naive_features(a: &CsrMatrix) -> MatrixFeatures {
    let (n, m, nnz) = (a.nrows(), a.ncols(), a.nnz());
    let lens: Vec<usize> = (0..n).map(|i| a.row_len(i)).collect();
    let mean = lens.iter().sum::<usize>() as f64 / n as f64;
    let var = lens.iter().map(|&l| (l as f64 - mean).powi(2)).sum::<f64>() / n as f64;
    let max = *lens.iter().max().unwrap();
    let mut offs = HashSet::new();
    let mut bandwidth = 0;
    for i in 0..n {
        for &j in a.row(i).0 {
            offs.insert(j as i64 - i as i64);
            bandwidth = bandwidth.max((j as i64 - i as i64).unsigned_abs() as usize);
        }
    }
    let split = (0..=max)
        .rev()
        .find(|&h| 3 * lens.iter().filter(|&&l| l >= h).count() >= n)
        .unwrap();
    let past: usize = lens.iter().map(|&l| l.saturating_sub(split)).sum();
    let ratio = |s: usize| if nnz == 0 { 1.0 } else { s as f64 / nnz as f64 };
    let mut symmetric = n == m;
    if symmetric {
        for i in 0..n {
            for j in 0..n {
                let (p, q) = (a.get(i, j), a.get(j, i));
                if (p - q).abs() > 1e-10 * p.abs().max(q.abs()) {
                    symmetric = false;
                }
            }
        }
    }
    MatrixFeatures {
        n,
        ncols: m,
        nnz,
        row_len_mean: mean,
        row_len_max: max,
        row_len_min: *lens.iter().min().unwrap(),
        row_len_std: var.sqrt(),
        ndiag: offs.len(),
        dia_fill_ratio: ratio(offs.len() * n),
        ell_width: max,
        ell_fill_ratio: ratio(max * n),
        hyb_split: split,
        hyb_coo_share: if nnz == 0 {
            0.0
        } else {
            past as f64 / nnz as f64
        },
        bandwidth,
        symmetric,
        empty_rows: lens.iter().filter(|&&l| l == 0).count(),
        diag_positive: (0..n.min(m)).all(|i| a.get(i, i) > 0.0),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_format_round_trips_and_multiplies((a, x) in arb_matrix(), split in 0usize..6) {
        check_all_formats(&a, &x, None);
        check_all_formats(&a, &x, Some(split));
    }

    #[test]
    fn features_match_a_naive_computation((a, _x) in arb_matrix()) {
        let f = features(&a);
        let g = naive_features(&a);
        prop_assert!(close(f.row_len_mean, g.row_len_mean), "{f:?} vs {g:?}");
        prop_assert!(close(f.row_len_std, g.row_len_std), "{f:?} vs {g:?}");
        let strip = |mut h: MatrixFeatures| {
            h.row_len_mean = 0.0;
            h.row_len_std = 0.0;
            h
        };
        prop_assert_eq!(strip(f.clone()), strip(g));
        let hist = row_length_histogram(&a);
        prop_assert_eq!(hist.len(), f.row_len_max + 1);
        prop_assert_eq!(hist.iter().sum::<u64>(), a.nrows() as u64);
        prop_assert_eq!(one_third_split(&a), f.hyb_split);
        // Serialisable and back. serde_json's default float parser may be off by an ulp (exact
        // round trips need its `float_roundtrip` feature), so floats are compared closely.
        let json = serde_json::to_string(&f).unwrap();
        let back: MatrixFeatures = serde_json::from_str(&json).unwrap();
        for (p, q) in [
            (back.row_len_mean, f.row_len_mean),
            (back.row_len_std, f.row_len_std),
            (back.dia_fill_ratio, f.dia_fill_ratio),
            (back.ell_fill_ratio, f.ell_fill_ratio),
            (back.hyb_coo_share, f.hyb_coo_share),
        ] {
            prop_assert!(close(p, q), "{p} vs {q}");
        }
        let ints = |h: &MatrixFeatures| {
            (h.n, h.ncols, h.nnz, h.row_len_max, h.row_len_min, h.ndiag, h.ell_width,
             h.hyb_split, h.bandwidth, h.symmetric, h.empty_rows, h.diag_positive)
        };
        prop_assert_eq!(ints(&back), ints(&f));
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement (release build): cargo test --release -p autopcg-sparse --test formats -- --ignored --nocapture

fn poisson_3d(k: usize) -> CsrMatrix {
    autopcg_sparse::families::poisson3d_7pt(k, k, k).unwrap()
}

fn best_of<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..reps {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        out = Some(r);
    }
    (best, out.unwrap())
}

#[test]
#[ignore = "timing; run in release with --ignored --nocapture"]
fn measure_features_and_conversions_on_poisson_160() {
    let k: usize = std::env::var("POISSON_K")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(160);
    let (t_build, a) = best_of(1, || poisson_3d(k));
    let lim = PaddingLimits::default();
    println!(
        "7-point Poisson {k}^3: n = {}, nnz = {}, threads = {}",
        a.nrows(),
        a.nnz(),
        rayon::current_num_threads()
    );
    println!("  from_triplets      {t_build:9.1} ms");
    let (t, _) = best_of(3, || a.data().to_vec());
    println!("  copy of the values {t:9.1} ms  (fresh memory: the first-touch cost)");
    let (t, f) = best_of(3, || features(&a));
    println!("  features()         {t:9.1} ms  ({f:?})");
    let (t, _) = best_of(3, || a.first_asymmetry(1e-10));
    println!("    of which symmetry check alone {t:9.1} ms");
    let (t, _) = best_of(3, || row_length_histogram(&a));
    println!("    of which row-length histogram {t:9.1} ms");
    let (t, _) = best_of(3, || CooMatrix::from_csr(&a));
    println!("  CSR -> COO         {t:9.1} ms");
    let (t, ell) = best_of(3, || EllMatrix::from_csr(&a, &lim).unwrap());
    println!("  CSR -> ELL         {t:9.1} ms  (K = {})", ell.width());
    let (t, dia) = best_of(3, || DiaMatrix::from_csr(&a, &lim).unwrap());
    println!("  CSR -> DIA         {t:9.1} ms  (ndiag = {})", dia.ndiag());
    let (t, hyb) = best_of(3, || HybMatrix::from_csr(&a, None, &lim).unwrap());
    println!(
        "  CSR -> HYB         {t:9.1} ms  (H = {}, COO nnz = {})",
        hyb.split(),
        hyb.coo().nnz()
    );
    let (t, _) = best_of(3, || ell.to_csr().unwrap());
    println!("  ELL -> CSR         {t:9.1} ms");
    let (t, _) = best_of(3, || dia.to_csr().unwrap());
    println!("  DIA -> CSR         {t:9.1} ms");
    let (t, _) = best_of(3, || hyb.to_csr().unwrap());
    println!("  HYB -> CSR         {t:9.1} ms");
    let x = vec![1.0; a.ncols()];
    let mut y = vec![0.0; a.nrows()];
    let (t, _) = best_of(5, || a.spmv(&x, &mut y));
    println!("  spmv CSR           {t:9.1} ms");
    let (t, _) = best_of(5, || ell.spmv(&x, &mut y));
    println!("  spmv ELL           {t:9.1} ms");
    let (t, _) = best_of(5, || dia.spmv(&x, &mut y));
    println!("  spmv DIA           {t:9.1} ms");
    let (t, _) = best_of(5, || hyb.spmv(&x, &mut y));
    println!("  spmv HYB           {t:9.1} ms");
}
