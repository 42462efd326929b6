//! Shared helpers of the GPU tests: seeded random data, CPU reference
//! conversions of CSR to the other formats, and tolerant comparisons.
#![allow(dead_code)]

use autopcg_sparse::ell::ELL_PAD;
use autopcg_sparse::CsrMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// sum_j |a_ij x_j| per row: the scale of each row's rounding error.
pub fn abs_spmv(a: &CsrMatrix, x: &[f64]) -> Vec<f64> {
    autopcg_gpu::bench::abs_row_sums(a, x)
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// n values uniform in [lo, hi).
pub fn uniform(rng: &mut ChaCha8Rng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// Asserts |got - want| <= rel * scale + 1e-300 elementwise, naming the first bad index.
pub fn assert_close(got: &[f64], want: &[f64], scale: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for i in 0..got.len() {
        let tol = rel * scale[i] + 1e-300;
        assert!(
            (got[i] - want[i]).abs() <= tol,
            "{what}: element {i} is {} but the CPU gives {} (tolerance {tol:e})",
            got[i],
            want[i]
        );
    }
}

/// A random sparse matrix with a mix of row lengths: about a tenth of the rows empty, most
/// with 1..=8 entries, and (when ncols allows) a few rows longer than a warp (40..=200
/// entries), at random distinct columns. Values in [-1, 1).
pub fn random_csr(seed: u64, nrows: usize, ncols: usize) -> CsrMatrix {
    let mut r = rng(seed);
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..nrows {
        let kind: f64 = r.random();
        let len = if ncols == 0 || kind < 0.1 {
            0
        } else if kind < 0.95 || ncols < 40 {
            r.random_range(1..=8usize.min(ncols))
        } else {
            r.random_range(40..=200usize.min(ncols))
        };
        let mut picked = std::collections::BTreeSet::new();
        while picked.len() < len {
            picked.insert(r.random_range(0..ncols));
        }
        for j in picked {
            rows.push(i as u32);
            cols.push(j as u32);
            vals.push(r.random_range(-1.0..1.0));
        }
    }
    CsrMatrix::from_triplets(nrows, ncols, &rows, &cols, &vals).unwrap()
}

/// A 1000 x 1000 matrix whose row 7 is dense (1000 entries, far longer than a warp) among
/// rows of one entry (every third row) or none.
pub fn one_long_row() -> CsrMatrix {
    let n = 1000;
    let (mut r, mut c, mut x) = (vec![], vec![], vec![]);
    for j in 0..n {
        r.push(7u32);
        c.push(j as u32);
        x.push(1.0 / (j as f64 + 1.0));
    }
    for i in (0..n).step_by(3) {
        r.push(i as u32);
        c.push(((i * 7) % n) as u32);
        x.push(1.5);
    }
    CsrMatrix::from_triplets(n, n, &r, &c, &x).unwrap()
}

/// A 1 x 1 matrix holding `value`, then a 1 x 1 matrix and a 5 x 3 matrix without entries,
/// labelled.
pub fn tiny_matrices(value: f64) -> Vec<(String, CsrMatrix)> {
    let empty = |m, n| CsrMatrix::from_triplets(m, n, &[], &[], &[]).unwrap();
    vec![
        (
            "1x1".to_string(),
            CsrMatrix::from_triplets(1, 1, &[0], &[0], &[value]).unwrap(),
        ),
        ("1x1 empty".to_string(), empty(1, 1)),
        ("5x3 all rows empty".to_string(), empty(5, 3)),
    ]
}

/// The 5-point Laplacian on an m x m grid (banded: good for DIA).
pub fn poisson2d(m: usize) -> CsrMatrix {
    let n = m * m;
    let (mut rows, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
    let mut push = |i: usize, j: usize, v: f64| {
        rows.push(i as u32);
        cols.push(j as u32);
        vals.push(v);
    };
    for gy in 0..m {
        for gx in 0..m {
            let i = gy * m + gx;
            push(i, i, 4.0);
            if gx > 0 {
                push(i, i - 1, -1.0);
            }
            if gx + 1 < m {
                push(i, i + 1, -1.0);
            }
            if gy > 0 {
                push(i, i - m, -1.0);
            }
            if gy + 1 < m {
                push(i, i + m, -1.0);
            }
        }
    }
    CsrMatrix::from_triplets(n, n, &rows, &cols, &vals).unwrap()
}

/// Column-major ELL arrays (width = longest row, or `width` when given, then rows must fit).
pub struct EllParts {
    pub width: usize,
    pub cols: Vec<u32>,
    pub vals: Vec<f64>,
}

pub fn to_ell(a: &CsrMatrix) -> EllParts {
    let n = a.nrows();
    let width = (0..n).map(|i| a.row_len(i)).max().unwrap_or(0);
    let mut cols = vec![ELL_PAD; width * n];
    let mut vals = vec![0.0; width * n];
    for i in 0..n {
        let (c, v) = a.row(i);
        for k in 0..c.len() {
            cols[k * n + i] = c[k];
            vals[k * n + i] = v[k];
        }
    }
    EllParts { width, cols, vals }
}

/// DIA arrays: every diagonal holding an entry; data[d * nrows + i] = A[i][i + off[d]].
pub fn to_dia(a: &CsrMatrix) -> (Vec<i32>, Vec<f64>) {
    let n = a.nrows();
    let mut offs = std::collections::BTreeSet::new();
    for i in 0..n {
        for &j in a.row(i).0 {
            offs.insert(j as i64 - i as i64);
        }
    }
    let offsets: Vec<i32> = offs.iter().map(|&o| o as i32).collect();
    let mut data = vec![0.0; offsets.len() * n];
    for i in 0..n {
        let (c, v) = a.row(i);
        for k in 0..c.len() {
            let o = c[k] as i64 - i as i64;
            let d = offsets.binary_search(&(o as i32)).unwrap();
            data[d * n + i] = v[k];
        }
    }
    (offsets, data)
}

/// COO arrays: rows, columns, values.
pub type CooParts = (Vec<u32>, Vec<u32>, Vec<f64>);

/// Row-sorted COO arrays.
pub fn to_coo(a: &CsrMatrix) -> CooParts {
    let mut rows = Vec::with_capacity(a.nnz());
    for i in 0..a.nrows() {
        rows.extend(std::iter::repeat_n(i as u32, a.row_len(i)));
    }
    (rows, a.indices().to_vec(), a.data().to_vec())
}

/// HYB split at `h`: the first h entries of every row as ELL (width h), the rest as COO.
pub fn to_hyb(a: &CsrMatrix, h: usize) -> (EllParts, CooParts) {
    let n = a.nrows();
    let mut cols = vec![ELL_PAD; h * n];
    let mut vals = vec![0.0; h * n];
    let (mut cr, mut cc, mut cv) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let (c, v) = a.row(i);
        for k in 0..c.len() {
            if k < h {
                cols[k * n + i] = c[k];
                vals[k * n + i] = v[k];
            } else {
                cr.push(i as u32);
                cc.push(c[k]);
                cv.push(v[k]);
            }
        }
    }
    (
        EllParts {
            width: h,
            cols,
            vals,
        },
        (cr, cc, cv),
    )
}
