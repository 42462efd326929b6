//! Power-of-two scaling of a linear system, so that no inner product or norm of a solve can
//! overflow or underflow for finite data.
//!
//! PCG works with sums of squares: `(r, r)`, `(r, M^-1 r)`, `(A u, u)`. For a system whose
//! entries are far from 1 (`A = 1e-170 T`, `b = 1e-170 ones`, or entries near `1e308`) these
//! squares leave the range of `f64` although every entry, and the solution, is representable:
//! `(b, b)` underflows to 0 (the solve claims `x = 0` converged) or overflows to infinity (the
//! curvature turns infinite and the matrix is called not SPD).
//!
//! The remedy here is exact: when the largest `|a_ij|` or the largest `|b_i|` lies outside
//! `[2^-SAFE_EXPONENT, 2^SAFE_EXPONENT)` ([`SAFE_EXPONENT`]), the backend solves
//! `(2^ea A) x' = 2^eb b` instead, with `ea` and `eb` bringing those two maxima into `[1, 2)`;
//! then `x = 2^(ea - eb) x'`. Multiplying by a power of two is exact (unless a value leaves the
//! normal range, which only happens to entries more than about `2^1000` below the largest), so
//! the scaled solve is the same solve, with every relative residual unchanged. The
//! preconditioner scales with `A` (`M^-1` by `2^-ea`; the SSOR-AI factor `K` depends only on
//! ratios of entries and does not change), so scaling a built preconditioner gives bit for bit
//! the one built from the scaled matrix.
//!
//! Systems whose maxima already lie in the safe range are not touched ([`ScaleFactors::is_identity`]),
//! so ordinary solves stay bit-identical. Inside the range the squares a solve forms stay far
//! from the limits of `f64` (which are `2^-1022` and `2^1024`): with both maxima between
//! `2^-128` and `2^128`, `(b, b)` lies within `2^±(256 + log2 n)`, and even at a relative
//! residual of `1e-17` (`2^-113` in the squares) and an amplification `||x|| / ||b||` or
//! `1 / min a_ii` of `2^53` on top, the dots stay inside about `2^±600`.
//!
//! [`ScaleFactors`] is used by both backends ([`crate::CpuBackend::new`],
//! `GpuBackend::new`) on the host copies they are given.
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use autopcg_sparse::copy::copy_streaming;
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;
use serde::Serialize;

use crate::Preconditioner;

/// Largest magnitudes (of `A`'s entries and of `b`) left unscaled lie in
/// `[2^-SAFE_EXPONENT, 2^SAFE_EXPONENT)`.
pub const SAFE_EXPONENT: i32 = 128;

/// The powers of two a system is scaled by: `A' = 2^matrix_exp A`, `b' = 2^rhs_exp b`, so that
/// `x = 2^(matrix_exp - rhs_exp) x'`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ScaleFactors {
    /// `A` is multiplied by `2^matrix_exp`.
    pub matrix_exp: i32,
    /// `b` is multiplied by `2^rhs_exp`.
    pub rhs_exp: i32,
}

impl Default for ScaleFactors {
    fn default() -> Self {
        ScaleFactors::IDENTITY
    }
}

/// `floor(log2 v)` for a finite positive `v` (subnormals included).
fn exponent(v: f64) -> i32 {
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // Subnormal: bring it into the normal range first (exact).
        exponent(v * 2f64.powi(64)) - 64
    } else {
        biased - 1023
    }
}

/// The exponent that brings `v` into `[1, 2)` when it lies outside the safe range; 0 otherwise
/// (and for 0, NaN and infinities, which scaling cannot help).
fn exponent_to_unit(v: f64) -> i32 {
    if !(v.is_finite() && v > 0.0) {
        return 0;
    }
    let e = exponent(v);
    if (-SAFE_EXPONENT..SAFE_EXPONENT).contains(&e) {
        0
    } else {
        -e
    }
}

/// `x * 2^e`, exactly when the result is a normal number (correctly rounded otherwise), for any
/// `e` (split into steps whose factors are representable).
pub fn ldexp(x: f64, e: i32) -> f64 {
    let mut x = x;
    let mut e = e;
    while e != 0 {
        let step = e.clamp(-1000, 1000);
        x *= 2f64.powi(step);
        e -= step;
    }
    x
}

/// Multiplies every element of `v` by `2^e` (see [`ldexp`]).
pub fn scale_slice(v: &mut [f64], e: i32) {
    if e == 0 {
        return;
    }
    if (-1000..=1000).contains(&e) {
        let f = 2f64.powi(e);
        v.par_iter_mut().with_min_len(4096).for_each(|x| *x *= f);
    } else {
        v.par_iter_mut()
            .with_min_len(4096)
            .for_each(|x| *x = ldexp(*x, e));
    }
}

/// The largest `|v_i|` (NaNs ignored; 0 for an empty slice).
pub fn max_abs(v: &[f64]) -> f64 {
    v.par_iter()
        .with_min_len(4096)
        .map(|x| x.abs())
        .reduce(|| 0.0, f64::max)
}

/// What one pass over a matrix's values (in CSR order, rows given by `indptr`) finds: the
/// first non-finite value, the largest magnitude ([`max_abs`]) and the largest row sum of
/// magnitudes ([`inf_norm`]), computed together so a value-only update reads the values once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValueStats {
    /// Index of the first value that is NaN or infinite.
    pub first_non_finite: Option<usize>,
    /// The largest `|v|` (NaNs ignored).
    pub max_abs: f64,
    /// The largest row sum of `|v|`.
    pub inf_norm: f64,
}

impl ValueStats {
    /// The statistics of `values`, whose row `i` is `values[indptr[i]..indptr[i + 1]]`.
    pub fn of(indptr: &[u32], values: &[f64]) -> ValueStats {
        let rows = indptr.len().saturating_sub(1);
        let row_stats = |i: usize| {
            let (lo, hi) = (indptr[i] as usize, indptr[i + 1] as usize);
            let (mut sum, mut max, mut bad) = (0.0f64, 0.0f64, None);
            for (k, v) in values[lo..hi].iter().enumerate() {
                if bad.is_none() && !v.is_finite() {
                    bad = Some(lo + k);
                }
                sum += v.abs();
                max = max.max(v.abs());
            }
            (bad, max, sum)
        };
        let join = |(b1, m1, s1): (Option<usize>, f64, f64), (b2, m2, s2)| {
            (b1.or(b2), f64::max(m1, m2), f64::max(s1, s2))
        };
        let (first_non_finite, max_abs, inf_norm) =
            if values.len() <= autopcg_sparse::scan::SEQUENTIAL_SCAN {
                // Cheaper on the calling thread than handed to the pool.
                (0..rows).map(row_stats).fold((None, 0.0, 0.0), join)
            } else {
                (0..rows)
                    .into_par_iter()
                    .with_min_len(1024)
                    .map(row_stats)
                    .reduce(|| (None, 0.0, 0.0), join)
            };
        ValueStats {
            first_non_finite,
            max_abs,
            inf_norm,
        }
    }
}

/// What [`ValueStatsSink`] finds in new values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SinkStats {
    /// Index of the first value that is NaN or infinite.
    pub first_non_finite: Option<usize>,
    /// The largest `|v|` (NaNs ignored).
    pub max_abs: f64,
    /// The first row (0-based) whose diagonal entry is not positive and finite.
    pub first_bad_diagonal: Option<usize>,
}

/// The checks of new values of a matrix a value update needs (finite, the largest magnitude,
/// every diagonal entry positive), and the new diagonal, taken while the values are copied
/// piece by piece to two places (a staging buffer on their way to the device, and the host
/// array that will replace the matrix's values): the update then reads the new values once.
/// Unlike [`ValueStats`] it does not sum rows (`||A||_inf` serves only an error's estimate;
/// the GPU backend computes it when asked). See [`ValueStatsSink::copy_piece`].
pub struct ValueStatsSink<'a> {
    indptr: &'a [u32],
    /// Position of each row's diagonal entry (`autopcg_sparse::csr::NO_ENTRY`: none).
    diag: &'a [u32],
    values: &'a [f64],
    /// Where `copy_piece` also writes: `values.len()` elements borrowed exclusively for `'a`.
    mirror: *mut f64,
    /// Where each row's new diagonal entry goes: `diag.len()` elements, borrowed likewise.
    diag_out: *mut f64,
    _out: std::marker::PhantomData<&'a mut [f64]>,
    first_non_finite: AtomicUsize,
    /// Bits of the largest `|v|` (bits of non-negative doubles order as the values do).
    max_abs: AtomicU64,
    first_bad_row: AtomicUsize,
}

// SAFETY: `mirror` and `diag_out` are written only by `copy_piece`, whose callers guarantee
// that concurrent calls are given disjoint ranges (and so visit disjoint rows: a row is
// visited by the call whose range holds its start), and by `finish`, which runs after them;
// everything else is read-only or atomic.
unsafe impl Sync for ValueStatsSink<'_> {}

impl<'a> ValueStatsSink<'a> {
    /// A sink for `values`, new values of a matrix with row pointers `indptr` whose row `i`
    /// keeps its diagonal entry at `diag[i]` (from `CsrMatrix::diagonal_positions`); the
    /// copies go to `mirror` as well as to each piece's destination, and each row's new
    /// diagonal entry (0 where the row stores none) to `diag_out`. `None` when the lengths
    /// disagree.
    pub fn new(
        indptr: &'a [u32],
        diag: &'a [u32],
        values: &'a [f64],
        mirror: &'a mut [f64],
        diag_out: &'a mut [f64],
    ) -> Option<Self> {
        let rows = indptr.len().checked_sub(1)?;
        let nnz = *indptr.last()? as usize;
        if values.len() != nnz || mirror.len() != nnz || diag.len() > rows {
            return None;
        }
        if diag_out.len() != diag.len() {
            return None;
        }
        Some(ValueStatsSink {
            indptr,
            diag,
            values,
            mirror: mirror.as_mut_ptr(),
            diag_out: diag_out.as_mut_ptr(),
            _out: std::marker::PhantomData,
            first_non_finite: AtomicUsize::new(usize::MAX),
            max_abs: AtomicU64::new(0),
            first_bad_row: AtomicUsize::new(usize::MAX),
        })
    }

    /// Copies `values[off..off + out.len()]` into `out` and into the same range of the
    /// mirror, and records the first non-finite value and the largest magnitude among them,
    /// and the diagonal entry of every row that starts in the range. Once pieces covering all
    /// values have been copied, [`ValueStatsSink::finish`] gives what [`ValueStats::of`] and
    /// a diagonal check would.
    ///
    /// # Safety
    /// Calls that may run at the same time must be given ranges that do not overlap (each
    /// writes its range of the mirror).
    pub unsafe fn copy_piece(&self, off: usize, out: &mut [f64]) {
        let hi = off + out.len();
        let src = &self.values[off..hi];
        copy_streaming(src, out);
        // SAFETY: `off..hi` lies within the values (the slice above would have panicked), so
        // within the mirror of the same length; the caller keeps concurrent ranges disjoint.
        let mirror = unsafe { std::slice::from_raw_parts_mut(self.mirror.add(off), src.len()) };
        copy_streaming(src, mirror);
        let (max, finite) = max_abs_and_finite(src);
        if !finite {
            if let Some(k) = src.iter().position(|v| !v.is_finite()) {
                self.first_non_finite.fetch_min(off + k, Ordering::Relaxed);
            }
        }
        self.max_abs.fetch_max(max.to_bits(), Ordering::Relaxed);
        // The rows starting in the piece: row_lo..row_hi.
        let ptr = &self.indptr[..self.indptr.len() - 1];
        let row_lo = ptr.partition_point(|&p| (p as usize) < off);
        let row_hi = row_lo + ptr[row_lo..].partition_point(|&p| (p as usize) < hi);
        let diag_hi = row_hi.min(self.diag.len());
        let mut bad = usize::MAX;
        for row in row_lo.min(diag_hi)..diag_hi {
            let d = self.diagonal(row);
            // SAFETY: `row < diag.len()`, the length of `diag_out`; only this call visits `row`
            // (see the Sync impl).
            unsafe { *self.diag_out.add(row) = d };
            if !(d > 0.0 && d.is_finite()) && bad == usize::MAX {
                bad = row;
            }
        }
        if bad != usize::MAX {
            self.first_bad_row.fetch_min(bad, Ordering::Relaxed);
        }
    }

    /// The diagonal entry of `row` in the new values (0 when the row stores none).
    pub fn diagonal(&self, row: usize) -> f64 {
        match self.diag[row] {
            autopcg_sparse::csr::NO_ENTRY => 0.0,
            p => self.values[p as usize],
        }
    }

    fn diagonal_ok(&self, row: usize) -> bool {
        let d = self.diagonal(row);
        d > 0.0 && d.is_finite()
    }

    /// What the copied pieces (which must have covered all the values, every call of
    /// `copy_piece` returned) found.
    pub fn finish(&mut self) -> SinkStats {
        let ptr = self.indptr;
        let nnz = self.values.len();
        // Rows starting at the very end are empty: no piece saw them.
        let tail = ptr[..ptr.len() - 1].partition_point(|&p| (p as usize) < nnz);
        for r in tail..self.diag.len() {
            // SAFETY: `r < diag.len()`, the length of `diag_out`; `&mut self` excludes copies.
            unsafe { *self.diag_out.add(r) = self.diagonal(r) };
        }
        let tail_bad = (tail..self.diag.len()).find(|&r| !self.diagonal_ok(r));
        let first = |a: &AtomicUsize| match a.load(Ordering::Relaxed) {
            usize::MAX => None,
            k => Some(k),
        };
        SinkStats {
            first_non_finite: first(&self.first_non_finite),
            max_abs: f64::from_bits(self.max_abs.load(Ordering::Relaxed)),
            first_bad_diagonal: first(&self.first_bad_row).or(tail_bad),
        }
    }
}

/// The largest `|v|` in `src` (NaNs ignored) and whether every value is finite, in four
/// independent lanes so that the loop vectorises (`v * 0` is 0 for a finite `v` and NaN
/// otherwise).
fn max_abs_and_finite(src: &[f64]) -> (f64, bool) {
    let (mut mx, mut z) = ([0.0f64; 4], [0.0f64; 4]);
    let chunks = src.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..4 {
            let a = c[l].abs();
            mx[l] = if a > mx[l] { a } else { mx[l] };
            z[l] += c[l] * 0.0;
        }
    }
    for &v in rest {
        let a = v.abs();
        mx[0] = if a > mx[0] { a } else { mx[0] };
        z[0] += v * 0.0;
    }
    let m = mx.iter().fold(0.0f64, |m, &a| if a > m { a } else { m });
    (m, z.iter().all(|&x| x == 0.0))
}

/// `||A||_inf`, the largest row sum of `|a_ij|` (for a symmetric matrix also `||A||_1`, and an
/// upper bound of `||A||_2`).
pub fn inf_norm(a: &CsrMatrix) -> f64 {
    (0..a.nrows())
        .into_par_iter()
        .with_min_len(1024)
        .map(|i| a.row(i).1.iter().map(|v| v.abs()).sum::<f64>())
        .reduce(|| 0.0, f64::max)
}

impl ScaleFactors {
    /// No scaling.
    pub const IDENTITY: ScaleFactors = ScaleFactors {
        matrix_exp: 0,
        rhs_exp: 0,
    };

    /// The factors for `A x = b`: each of `max |a_ij|` and `max |b_i|` that lies outside
    /// `[2^-SAFE_EXPONENT, 2^SAFE_EXPONENT)` is brought into `[1, 2)`; the other is left alone.
    /// A zero or non-finite maximum is left alone (there is nothing to gain: the solve reports
    /// it).
    pub fn for_system(a: &CsrMatrix, b: &[f64]) -> ScaleFactors {
        ScaleFactors::from_maxima(max_abs(a.data()), max_abs(b))
    }

    /// The factors from `max |a_ij|` and `max |b_i|` (see [`ScaleFactors::for_system`]).
    pub fn from_maxima(max_a: f64, max_b: f64) -> ScaleFactors {
        ScaleFactors {
            matrix_exp: exponent_to_unit(max_a),
            rhs_exp: exponent_to_unit(max_b),
        }
    }

    /// True when nothing is scaled.
    pub fn is_identity(&self) -> bool {
        *self == ScaleFactors::IDENTITY
    }

    /// The exponent of the solution: `x' = 2^solution_exp x`.
    pub fn solution_exp(&self) -> i32 {
        self.rhs_exp - self.matrix_exp
    }

    /// `2^matrix_exp A` (borrowed when the exponent is 0).
    pub fn scale_matrix<'a>(&self, a: &'a CsrMatrix) -> Cow<'a, CsrMatrix> {
        if self.matrix_exp == 0 {
            return Cow::Borrowed(a);
        }
        let mut s = a.clone();
        scale_slice(s.data_mut(), self.matrix_exp);
        Cow::Owned(s)
    }

    /// `2^rhs_exp b` (borrowed when the exponent is 0).
    pub fn scale_rhs<'a>(&self, b: &'a [f64]) -> Cow<'a, [f64]> {
        if self.rhs_exp == 0 {
            return Cow::Borrowed(b);
        }
        let mut s = b.to_vec();
        scale_slice(&mut s, self.rhs_exp);
        Cow::Owned(s)
    }

    /// An iterate of the original system in the scaled one: `x' = 2^(rhs_exp - matrix_exp) x`
    /// (for an initial guess).
    pub fn scale_solution<'a>(&self, x: &'a [f64]) -> Cow<'a, [f64]> {
        if self.solution_exp() == 0 {
            return Cow::Borrowed(x);
        }
        let mut s = x.to_vec();
        scale_slice(&mut s, self.solution_exp());
        Cow::Owned(s)
    }

    /// Back to the original system, in place: `x = 2^(matrix_exp - rhs_exp) x'`. Entries of a
    /// solution beyond the range of `f64` become infinite (or flush towards 0).
    pub fn unscale_solution(&self, x: &mut [f64]) {
        scale_slice(x, -self.solution_exp());
    }

    /// The preconditioner of the scaled matrix from the one built for the original:
    /// `M^-1` times `2^-matrix_exp` (the Jacobi and SSOR-AI diagonal factors with the factored
    /// form's `K^T diag(s)`, or the explicit product's entries; `K` is unchanged). Borrowed when the exponent is 0 or
    /// there is no preconditioner.
    pub fn scale_preconditioner<'a>(&self, p: &'a Preconditioner) -> Cow<'a, Preconditioner> {
        let e = -self.matrix_exp;
        if e == 0 || matches!(p, Preconditioner::None) {
            return Cow::Borrowed(p);
        }
        let mut s = p.clone();
        match &mut s {
            Preconditioner::None => {}
            Preconditioner::Jacobi { inv_diag } => scale_slice(inv_diag, e),
            // K does not change; K^T diag(s) scales with s.
            Preconditioner::SsorFactored { kt, inv_diag, .. } => {
                scale_slice(inv_diag, e);
                scale_slice(kt.data_mut(), e);
            }
            Preconditioner::SsorExplicit { m } => scale_slice(m.data_mut(), e),
        }
        Cow::Owned(s)
    }

    /// The factor that turns a norm of the scaled right-hand side or residual into the user's
    /// units: `2^-rhs_exp`. (The product can leave the range of `f64` where the user's norm
    /// itself does, e.g. `||b||_2` of a vector of entries near `1e308`.)
    pub fn norm_factor(&self) -> f64 {
        ldexp(1.0, -self.rhs_exp)
    }
}

/// The first row (1-based) whose diagonal entry is not positive and finite, with its value
/// (0 when the entry is not stored); `None` when every diagonal entry is positive. A symmetric
/// positive definite matrix has a positive diagonal (`a_ii = e_i^T A e_i`), so such a row
/// proves that `A` is not SPD, whatever the preconditioner. O(nnz) in the worst case, usually
/// O(n log(row length)).
pub fn first_bad_diagonal(a: &CsrMatrix) -> Option<(usize, f64)> {
    let m = a.nrows().min(a.ncols());
    let diag = |i: usize| {
        let (c, v) = a.row(i);
        match c.binary_search(&(i as u32)) {
            Ok(k) => v[k],
            Err(_) => 0.0,
        }
    };
    autopcg_sparse::scan::first_index_where(m, |i| {
        let d = diag(i);
        !(d > 0.0 && d.is_finite())
    })
    .map(|i| (i + 1, diag(i)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_stats_equal_the_separate_passes() {
        // Enough values for the parallel reduction (split in pieces of 1024 rows).
        let n = 50_000usize;
        assert!(3 * n > autopcg_sparse::scan::SEQUENTIAL_SCAN);
        let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            let x = ((i * 7919) % 1000) as f64 / 37.0 - 13.0;
            for (j, val) in [(i, 4.0 + x.abs()), ((i + 1) % n, x), ((i * 3) % n, -0.5)] {
                r.push(i as u32);
                c.push(j as u32);
                v.push(val);
            }
        }
        let a = CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap();
        let s = ValueStats::of(a.indptr(), a.data());
        assert_eq!(s.first_non_finite, None);
        assert_eq!(s.max_abs, max_abs(a.data()));
        assert_eq!(s.inf_norm, inf_norm(&a));
        // The first non-finite value is found wherever the reduction splits.
        let mut v = a.data().to_vec();
        let (late, early) = (v.len() - 2, a.indptr()[30_000] as usize + 1);
        v[late] = f64::NAN;
        assert_eq!(ValueStats::of(a.indptr(), &v).first_non_finite, Some(late));
        v[early] = f64::NEG_INFINITY;
        assert_eq!(ValueStats::of(a.indptr(), &v).first_non_finite, Some(early));
        // The sequential path of small inputs agrees.
        let small = &a.indptr()[..101];
        let head = &a.data()[..small[100] as usize];
        let s = ValueStats::of(small, head);
        assert_eq!(s.max_abs, max_abs(head));
        let row_max = (0..100)
            .map(|i| a.row(i).1.iter().map(|v| v.abs()).sum::<f64>())
            .fold(0.0, f64::max);
        assert_eq!(s.inf_norm, row_max);
        assert_eq!(
            ValueStats::of(&[0], &[]),
            ValueStats {
                first_non_finite: None,
                max_abs: 0.0,
                inf_norm: 0.0
            }
        );
    }

    /// Copies every piece of `sink`'s values, of `piece` elements, in reverse order (any
    /// order must do), into `out`.
    fn copy_all(sink: &ValueStatsSink, piece: usize, out: &mut [f64]) {
        let mut pieces: Vec<(usize, &mut [f64])> = out
            .chunks_mut(piece)
            .enumerate()
            .map(|(i, c)| (i * piece, c))
            .collect();
        pieces.reverse();
        for (off, c) in pieces {
            // SAFETY: one piece at a time.
            unsafe { sink.copy_piece(off, c) };
        }
    }

    #[test]
    fn the_sink_copies_and_finds_what_the_separate_passes_find() {
        let n = 3000usize;
        let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            // Rows of 1 to 9 entries, so pieces cut rows anywhere.
            for k in 0..(1 + i % 9) {
                let j = (i + k * 17) % n;
                r.push(i as u32);
                c.push(j as u32);
                v.push(if j == i {
                    10.0 + (i % 5) as f64
                } else {
                    -0.25 * (k as f64) - 0.5
                });
            }
        }
        let a = CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap();
        let diag = a.diagonal_positions();
        let new: Vec<f64> = a.data().iter().map(|x| 1.5 * x).collect();
        for piece in [1, 7, 64, 1000, new.len()] {
            let mut mirror = vec![0.0; new.len()];
            let mut out = vec![0.0; new.len()];
            let mut d = vec![f64::NAN; n];
            let mut sink =
                ValueStatsSink::new(a.indptr(), &diag, &new, &mut mirror, &mut d).unwrap();
            copy_all(&sink, piece, &mut out);
            let got = sink.finish();
            let want = ValueStats::of(a.indptr(), &new);
            assert_eq!(
                got.first_non_finite, want.first_non_finite,
                "pieces of {piece}"
            );
            assert_eq!(got.max_abs, want.max_abs, "pieces of {piece}");
            assert_eq!(got.first_bad_diagonal, None);
            assert_eq!(out, new);
            assert_eq!(mirror, new);
            let mut a_new = a.clone();
            a_new.data_mut().copy_from_slice(&new);
            assert_eq!(d, a_new.diagonal());
        }
        // A non-finite value and a bad diagonal are found wherever the pieces fall, the
        // earliest of each.
        let mut bad_values = new.clone();
        let (d1, d2) = (diag[2500] as usize, diag[1234] as usize);
        bad_values[d1] = -1.0;
        bad_values[d2] = 0.0;
        bad_values[100] = f64::INFINITY;
        bad_values[7] = f64::NAN;
        let mut mirror = vec![0.0; new.len()];
        let mut out = vec![0.0; new.len()];
        let mut d = vec![0.0; n];
        let mut sink =
            ValueStatsSink::new(a.indptr(), &diag, &bad_values, &mut mirror, &mut d).unwrap();
        copy_all(&sink, 13, &mut out);
        let got = sink.finish();
        assert_eq!(got.first_non_finite, Some(7));
        assert_eq!(got.max_abs, f64::INFINITY);
        let bad = got.first_bad_diagonal;
        let mut b = a.clone();
        b.data_mut().copy_from_slice(&bad_values);
        let (row, value) = first_bad_diagonal(&b).unwrap();
        assert!(row <= 1235, "{row}");
        assert_eq!(bad, Some(row - 1));
        assert_eq!(sink.diagonal(row - 1).to_bits(), value.to_bits());
        assert_eq!(sink.diagonal(1234), 0.0);
        // Lengths that disagree are refused.
        let mut short = vec![0.0; 3];
        let mut d = vec![0.0; n];
        assert!(ValueStatsSink::new(a.indptr(), &diag, &new, &mut short, &mut d).is_none());
        let mut mirror = vec![0.0; new.len()];
        let mut d_short = vec![0.0; 2];
        assert!(ValueStatsSink::new(a.indptr(), &diag, &new, &mut mirror, &mut d_short).is_none());
    }

    #[test]
    fn the_sink_checks_rows_no_piece_starts() {
        // The last two rows are empty (so without a diagonal): no piece starts them.
        let a = CsrMatrix::from_triplets(4, 4, &[0, 1], &[0, 1], &[2.0, 3.0]).unwrap();
        let diag = a.diagonal_positions();
        let mut mirror = vec![0.0; 2];
        let mut d = vec![f64::NAN; 4];
        let mut sink =
            ValueStatsSink::new(a.indptr(), &diag, a.data(), &mut mirror, &mut d).unwrap();
        let mut out = vec![0.0; 2];
        copy_all(&sink, 1, &mut out);
        let got = sink.finish();
        assert_eq!((got.max_abs, got.first_bad_diagonal), (3.0, Some(2)));
        assert_eq!(d, vec![2.0, 3.0, 0.0, 0.0]);
        // No values at all: every row is one no piece starts.
        let e = CsrMatrix::from_triplets(2, 2, &[], &[], &[]).unwrap();
        let d = e.diagonal_positions();
        let mut m: Vec<f64> = Vec::new();
        let mut dd = vec![0.0; 2];
        let mut sink = ValueStatsSink::new(e.indptr(), &d, &[], &mut m, &mut dd).unwrap();
        assert_eq!(sink.finish().first_bad_diagonal, Some(0));
    }

    #[test]
    fn exponent_is_floor_log2_including_subnormals() {
        for (v, e) in [
            (1.0, 0),
            (1.5, 0),
            (2.0, 1),
            (0.75, -1),
            (f64::MAX, 1023),
            (f64::MIN_POSITIVE, -1022),
            (f64::MIN_POSITIVE / 2.0, -1023),
            (5e-324, -1074),
        ] {
            assert_eq!(exponent(v), e, "{v:e}");
        }
    }

    #[test]
    fn factors_only_outside_the_safe_range() {
        assert!(ScaleFactors::from_maxima(1e30, 1e-30).is_identity());
        assert!(ScaleFactors::from_maxima(0.0, f64::NAN).is_identity());
        assert!(ScaleFactors::from_maxima(f64::INFINITY, 1.0).is_identity());
        let f = ScaleFactors::from_maxima(2e-170, 1e308);
        let a = ldexp(2e-170, f.matrix_exp);
        let b = ldexp(1e308, f.rhs_exp);
        assert!(
            (1.0..2.0).contains(&a) && (1.0..2.0).contains(&b),
            "{a} {b}"
        );
        let f = ScaleFactors::from_maxima(5e-324, 1.0);
        assert_eq!((f.matrix_exp, f.rhs_exp), (1074, 0));
        assert_eq!(ldexp(5e-324, 1074), 1.0);
    }

    #[test]
    fn scaling_is_exact_and_round_trips() {
        let f = ScaleFactors {
            matrix_exp: 600,
            rhs_exp: -300,
        };
        let x = [1.0 / 3.0, -7e100, 3e250];
        let mut y = f.scale_solution(&x).into_owned();
        assert_eq!(y[0], ldexp(1.0 / 3.0, -900));
        assert_eq!(y[0] * 2f64.powi(450) * 2f64.powi(450), 1.0 / 3.0);
        f.unscale_solution(&mut y);
        assert_eq!(y, x);
        assert_eq!(f.norm_factor(), 2f64.powi(300));
        // Steps beyond the exponent range of one factor.
        assert_eq!(ldexp(ldexp(1.5, -1070), 1070), 1.5);
        assert_eq!(
            ldexp(1e-300, 1500),
            1e-300 * 2f64.powi(750) * 2f64.powi(750)
        );
    }

    #[test]
    fn bad_diagonal_is_found_first() {
        let a = CsrMatrix::from_triplets(
            4,
            4,
            &[0, 1, 1, 2, 3, 3],
            &[0, 1, 3, 3, 1, 3],
            &[1.0, 2.0, 1.0, 5.0, 1.0, -1.0],
        )
        .unwrap();
        // Row 3 has no diagonal entry (0), row 4 a negative one.
        assert_eq!(first_bad_diagonal(&a), Some((3, 0.0)));
        let id = CsrMatrix::identity(10).unwrap();
        assert_eq!(first_bad_diagonal(&id), None);
    }
}
