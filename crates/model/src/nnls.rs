//! Non-negative least squares: `min ||A x - b||_2` subject to `x >= 0`, by the active-set
//! algorithm of Lawson and Hanson ("Solving Least Squares Problems", Prentice-Hall 1974,
//! chapter 23, algorithm NNLS).
//!
//! The SpMV time models are sums of non-negative costs (a launch constant, a cost per row, per
//! nonzero, per gathered cache line...), so their coefficients are fitted with `x >= 0`: a
//! negative cost per unit of work is physically meaningless and, on a small benchmark set,
//! the usual symptom of over-fitting.
//!
//! Every unconstrained sub-problem is solved on the columns of the passive set with a
//! Householder QR factorisation (never the normal equations, which square the condition
//! number). The problems here are small (tens of columns, hundreds of rows), so each step
//! refactorises from scratch.

/// A dense matrix stored row by row.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseMatrix {
    rows: usize,
    cols: usize,
    data: Vec<f64>,
}

impl DenseMatrix {
    /// A `rows x cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        DenseMatrix {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// A matrix from its rows; `None` when the rows differ in length.
    pub fn from_rows(rows: &[Vec<f64>]) -> Option<Self> {
        let cols = rows.first().map_or(0, Vec::len);
        if rows.iter().any(|r| r.len() != cols) {
            return None;
        }
        Some(DenseMatrix {
            rows: rows.len(),
            cols,
            data: rows.iter().flatten().copied().collect(),
        })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Entry `(i, j)`.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.cols + j]
    }

    /// Sets entry `(i, j)`.
    pub fn set(&mut self, i: usize, j: usize, v: f64) {
        self.data[i * self.cols + j] = v;
    }

    /// `A x`.
    pub fn mul_vec(&self, x: &[f64]) -> Vec<f64> {
        (0..self.rows)
            .map(|i| {
                let row = &self.data[i * self.cols..(i + 1) * self.cols];
                row.iter().zip(x).map(|(a, b)| a * b).sum()
            })
            .collect()
    }

    /// `A^T y`.
    pub fn tmul_vec(&self, y: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.cols];
        for (i, &yi) in y.iter().enumerate().take(self.rows) {
            let row = &self.data[i * self.cols..(i + 1) * self.cols];
            for (o, a) in out.iter_mut().zip(row) {
                *o += a * yi;
            }
        }
        out
    }

    /// The Euclidean norm of column `j`.
    pub fn col_norm(&self, j: usize) -> f64 {
        (0..self.rows)
            .map(|i| self.get(i, j).powi(2))
            .sum::<f64>()
            .sqrt()
    }
}

/// Why a least-squares problem could not be solved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NnlsError {
    /// `b` does not have one entry per row of `A`.
    #[error("right-hand side has {got} entries, the matrix {rows} rows")]
    Shape {
        /// Rows of the matrix.
        rows: usize,
        /// Entries of `b`.
        got: usize,
    },
    /// An entry of `A` or `b` is NaN or infinite.
    #[error("the problem holds a NaN or infinite entry")]
    NotFinite,
}

/// Result of [`nnls`].
#[derive(Debug, Clone, PartialEq)]
pub struct NnlsSolution {
    /// The minimiser, every entry `>= 0`.
    pub x: Vec<f64>,
    /// `||A x - b||_2`.
    pub residual_norm: f64,
    /// Outer iterations (columns moved into the passive set).
    pub iterations: usize,
    /// False when the iteration cap stopped the algorithm before its optimality test passed;
    /// `x` is then feasible but possibly not optimal. The test skips columns whose
    /// least-squares coefficient came out non-positive on entering (linearly dependent on the
    /// passive columns to rounding): they cannot lower the residual.
    pub converged: bool,
}

/// Least squares on the columns `cols` of `a`: the minimiser of `||A_cols z - b||`, by
/// Householder QR. A column whose pivot is negligible against the largest (linearly dependent
/// on the earlier ones, to rounding) gets 0.
pub fn least_squares_on(a: &DenseMatrix, cols: &[usize], b: &[f64]) -> Vec<f64> {
    let m = a.rows();
    let k = cols.len();
    // Column-major copy of the chosen columns, with b appended as the last column.
    let mut q: Vec<Vec<f64>> = cols
        .iter()
        .map(|&j| (0..m).map(|i| a.get(i, j)).collect())
        .collect();
    let mut rhs = b.to_vec();
    let scale = q
        .iter()
        .map(|c| c.iter().map(|v| v * v).sum::<f64>().sqrt())
        .fold(0.0f64, f64::max);
    let tiny = scale * 1e-12;
    let mut usable = vec![false; k];
    let mut row = 0usize; // next pivot row
    let mut pivot_row = vec![usize::MAX; k];
    for j in 0..k {
        if row >= m {
            break;
        }
        let norm = q[j][row..].iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm <= tiny || norm == 0.0 {
            continue;
        }
        // Householder vector v = x + sign(x0) |x| e0, applied to the remaining columns and b.
        let alpha = if q[j][row] >= 0.0 { -norm } else { norm };
        let mut v: Vec<f64> = q[j][row..].to_vec();
        v[0] -= alpha;
        let vnorm2: f64 = v.iter().map(|x| x * x).sum();
        if vnorm2 == 0.0 {
            continue;
        }
        let reflect = |c: &mut [f64]| {
            let dot: f64 = c.iter().zip(&v).map(|(a, b)| a * b).sum();
            let f = 2.0 * dot / vnorm2;
            for (ci, vi) in c.iter_mut().zip(&v) {
                *ci -= f * vi;
            }
        };
        for col in q.iter_mut().skip(j) {
            reflect(&mut col[row..]);
        }
        reflect(&mut rhs[row..]);
        usable[j] = true;
        pivot_row[j] = row;
        row += 1;
    }
    // Back substitution on the usable columns (upper triangular in their pivot rows).
    let mut z = vec![0.0; k];
    for j in (0..k).rev() {
        if !usable[j] {
            continue;
        }
        let r = pivot_row[j];
        let mut s = rhs[r];
        for (jj, zj) in z.iter().enumerate().skip(j + 1) {
            if usable[jj] {
                s -= q[jj][r] * zj;
            }
        }
        z[j] = s / q[j][r];
    }
    z
}

/// Solves `min ||A x - b||_2` subject to `x >= 0` (Lawson–Hanson active set).
///
/// Terminates when the gradient `w = A^T (b - A x)` has no entry above a rounding tolerance on
/// the active (zero) set, or after `3 * cols + 30` outer iterations (then `converged` is false).
/// Columns of zeros get 0.
pub fn nnls(a: &DenseMatrix, b: &[f64]) -> Result<NnlsSolution, NnlsError> {
    let (m, n) = (a.rows(), a.cols());
    if b.len() != m {
        return Err(NnlsError::Shape {
            rows: m,
            got: b.len(),
        });
    }
    if a.data.iter().chain(b).any(|v| !v.is_finite()) {
        return Err(NnlsError::NotFinite);
    }
    let mut x = vec![0.0; n];
    let mut passive = vec![false; n];
    let anorm = (0..n).map(|j| a.col_norm(j)).fold(0.0f64, f64::max);
    let bnorm = b.iter().map(|v| v * v).sum::<f64>().sqrt();
    let tol = 1e-12 * anorm * bnorm * (m.max(n).max(1) as f64);
    let max_outer = 3 * n + 30;
    let mut iterations = 0;
    let mut converged = false;
    // Columns refused since x last changed: dependent (to rounding) on the passive ones, so
    // their least-squares coefficient came out non-positive although their gradient is
    // positive. Retried once x moves.
    let mut refused = vec![false; n];
    let residual = |x: &[f64]| -> Vec<f64> {
        let ax = a.mul_vec(x);
        b.iter().zip(&ax).map(|(bi, ai)| bi - ai).collect()
    };
    while iterations < max_outer {
        let w = a.tmul_vec(&residual(&x));
        let entering = (0..n)
            .filter(|&j| !passive[j] && !refused[j] && w[j] > tol)
            .max_by(|&i, &j| w[i].total_cmp(&w[j]));
        let Some(t) = entering else {
            converged = true;
            break;
        };
        iterations += 1;
        passive[t] = true;
        let mut first = true;
        loop {
            let cols: Vec<usize> = (0..n).filter(|&j| passive[j]).collect();
            let zc = least_squares_on(a, &cols, b);
            let mut z = vec![0.0; n];
            for (&j, &v) in cols.iter().zip(&zc) {
                z[j] = v;
            }
            if cols.iter().all(|&j| z[j] > 0.0) {
                x = z;
                refused.iter_mut().for_each(|r| *r = false);
                break;
            }
            if first && z[t] <= 0.0 {
                passive[t] = false;
                refused[t] = true;
                break;
            }
            first = false;
            // Move from x towards z until the first passive variable reaches zero.
            let mut alpha = 1.0;
            let mut hit = None;
            for &j in &cols {
                if z[j] <= 0.0 {
                    let d = x[j] - z[j];
                    let aj = if d > 0.0 { x[j] / d } else { 0.0 };
                    if aj < alpha || hit.is_none() {
                        alpha = aj.min(alpha);
                        hit = Some(j);
                    }
                }
            }
            for j in 0..n {
                x[j] += alpha * (z[j] - x[j]);
            }
            if let Some(h) = hit {
                x[h] = 0.0;
            }
            let xmax = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for &j in &cols {
                if x[j] <= 1e-15 * xmax {
                    x[j] = 0.0;
                    passive[j] = false;
                }
            }
            if !passive.iter().any(|&p| p) {
                break;
            }
        }
    }
    for v in &mut x {
        if *v < 0.0 {
            *v = 0.0;
        }
    }
    let r = residual(&x);
    Ok(NnlsSolution {
        residual_norm: r.iter().map(|v| v * v).sum::<f64>().sqrt(),
        x,
        iterations,
        converged,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mat(rows: &[&[f64]]) -> DenseMatrix {
        DenseMatrix::from_rows(&rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>()).unwrap()
    }

    /// Asserts the KKT conditions of the NNLS solution `x`: x >= 0, and the gradient
    /// A^T (b - A x) is 0 (within `tol`) where x > 0 and at most `tol` where x = 0. Returns the
    /// number of active constraints.
    fn assert_kkt(a: &DenseMatrix, b: &[f64], x: &[f64], tol: f64) -> usize {
        let r: Vec<f64> = b.iter().zip(a.mul_vec(x)).map(|(b, ax)| b - ax).collect();
        let w = a.tmul_vec(&r);
        let mut active = 0;
        for (j, &xj) in x.iter().enumerate() {
            assert!(xj >= 0.0);
            if xj > 0.0 {
                assert!(w[j].abs() < tol, "gradient {w:?} at passive {j}");
            } else {
                active += 1;
                assert!(w[j] <= tol, "gradient {w:?} at active {j}");
            }
        }
        active
    }

    #[test]
    fn unconstrained_solution_when_it_is_positive() {
        // Exact fit b = A [1, 2].
        let a = mat(&[&[1.0, 0.0], &[1.0, 1.0], &[1.0, 2.0], &[1.0, 3.0]]);
        let b = a.mul_vec(&[1.0, 2.0]);
        let s = nnls(&a, &b).unwrap();
        assert!(s.converged);
        assert!(
            (s.x[0] - 1.0).abs() < 1e-12 && (s.x[1] - 2.0).abs() < 1e-12,
            "{s:?}"
        );
        assert!(s.residual_norm < 1e-12);
    }

    #[test]
    fn active_constraint_clamps_a_negative_coefficient() {
        // Unconstrained: b = 3 - 1 * t exactly; with x >= 0 the slope is clamped to 0 and the
        // intercept is the mean of b.
        let a = mat(&[&[1.0, 0.0], &[1.0, 1.0], &[1.0, 2.0]]);
        let b = [3.0, 2.0, 1.0];
        let s = nnls(&a, &b).unwrap();
        assert!(s.converged);
        assert_eq!(s.x[1], 0.0);
        assert!((s.x[0] - 2.0).abs() < 1e-12, "{s:?}");
        // KKT: the gradient on the active set is <= 0.
        assert_eq!(assert_kkt(&a, &b, &s.x, 1e-12), 1);
    }

    #[test]
    fn classic_problem_matches_the_kkt_conditions() {
        // A 5 x 4 problem whose solution has two active constraints.
        let a = mat(&[
            &[1.0, 2.0, 3.0, 4.0],
            &[2.0, 1.0, 0.5, 1.0],
            &[0.0, 1.0, 2.0, 0.5],
            &[3.0, 0.0, 1.0, 2.0],
            &[1.0, 1.0, 1.0, 1.0],
        ]);
        let b = [1.0, -2.0, 3.0, -1.0, 0.5];
        let s = nnls(&a, &b).unwrap();
        assert!(s.converged);
        let active = assert_kkt(&a, &b, &s.x, 1e-10);
        assert!(active >= 1, "{s:?}");
        // No feasible point on a grid does better.
        let f = |x: &[f64]| -> f64 {
            b.iter()
                .zip(a.mul_vec(x))
                .map(|(b, ax)| (b - ax).powi(2))
                .sum()
        };
        let best = f(&s.x);
        for i in 0..=10 {
            for j in 0..=10 {
                let mut y = s.x.clone();
                y[0] = (y[0] + 0.05 * (i as f64 - 5.0)).max(0.0);
                y[2] = (y[2] + 0.05 * (j as f64 - 5.0)).max(0.0);
                assert!(f(&y) >= best - 1e-12);
            }
        }
    }

    #[test]
    fn dependent_and_zero_columns_do_not_break_it() {
        // Column 1 = 2 * column 0, column 2 is zero.
        let rows: Vec<Vec<f64>> = (1..=4)
            .map(|i| vec![f64::from(i), 2.0 * f64::from(i), 0.0, f64::from(i % 2)])
            .collect();
        let a = DenseMatrix::from_rows(&rows).unwrap();
        let b = a.mul_vec(&[0.0, 1.0, 0.0, 0.5]);
        let s = nnls(&a, &b).unwrap();
        assert!(s.converged);
        assert!(s.residual_norm < 1e-10, "{s:?}");
        assert_eq!(s.x[2], 0.0);
        assert!((s.x[0] + 2.0 * s.x[1] - 2.0).abs() < 1e-10);
    }

    #[test]
    fn all_negative_gives_zero_and_bad_input_is_an_error() {
        let a = mat(&[&[1.0], &[1.0]]);
        let s = nnls(&a, &[-1.0, -2.0]).unwrap();
        assert_eq!(s.x, vec![0.0]);
        assert!(matches!(
            nnls(&a, &[1.0]),
            Err(NnlsError::Shape { rows: 2, got: 1 })
        ));
        assert_eq!(nnls(&a, &[1.0, f64::NAN]), Err(NnlsError::NotFinite));
        let empty = DenseMatrix::zeros(0, 3);
        assert_eq!(nnls(&empty, &[]).unwrap().x, vec![0.0; 3]);
    }

    #[test]
    fn random_problems_satisfy_kkt() {
        // Deterministic pseudo-random problems of the size the SpMV fits use.
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for _ in 0..30 {
            let (m, n) = (40, 9);
            let rows: Vec<Vec<f64>> = (0..m).map(|_| (0..n).map(|_| rnd()).collect()).collect();
            let a = DenseMatrix::from_rows(&rows).unwrap();
            let b: Vec<f64> = (0..m).map(|_| rnd()).collect();
            let sol = nnls(&a, &b).unwrap();
            assert!(sol.converged);
            assert_kkt(&a, &b, &sol.x, 1e-9);
        }
    }
}
