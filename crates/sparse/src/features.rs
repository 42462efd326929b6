//! Matrix features: the structural statistics the performance models and the format selection
//! read (row-length distribution, diagonals, padding each format would need, bandwidth,
//! symmetry). Computed in parallel in time linear in the nonzeros (plus a symmetry check that
//! looks each mirror entry up by binary search), without allocating any padded format.
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::build::{fill_ratio, ROW_BLOCK};
use crate::dia::DiagonalSet;
use crate::CsrMatrix;

/// Relative tolerance of the symmetry feature (see [`CsrMatrix::first_asymmetry`]).
pub const SYMMETRY_TOLERANCE: f64 = 1e-10;

/// Structural statistics of a sparse matrix.
///
/// Ratios whose denominator is zero: a matrix without nonzeros has `dia_fill_ratio` and
/// `ell_fill_ratio` 1.0 (nothing stored, nothing padded) and `hyb_coo_share` 0.0; a matrix
/// without rows has row-length mean and standard deviation 0.0 and minimum 0.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MatrixFeatures {
    /// Number of rows.
    pub n: usize,
    /// Number of columns.
    pub ncols: usize,
    /// Number of stored entries (explicit zeros included).
    pub nnz: usize,
    /// Mean stored entries per row.
    pub row_len_mean: f64,
    /// Longest row.
    pub row_len_max: usize,
    /// Shortest row.
    pub row_len_min: usize,
    /// Standard deviation of the row lengths (over all rows, not a sample estimate).
    pub row_len_std: f64,
    /// Number of distinct diagonals (offsets column - row) holding a stored entry.
    pub ndiag: usize,
    /// DIA fill: `ndiag * n / nnz`.
    pub dia_fill_ratio: f64,
    /// ELL width: the longest row.
    pub ell_width: usize,
    /// ELL fill: `ell_width * n / nnz`.
    pub ell_fill_ratio: f64,
    /// HYB split by the one-third rule (see [`crate::hyb::one_third_split`]).
    pub hyb_split: usize,
    /// Share of the nonzeros that fall past `hyb_split` in their row (the HYB COO part).
    pub hyb_coo_share: f64,
    /// Largest `|i - j|` over stored entries (0 without any).
    pub bandwidth: usize,
    /// Square and symmetric to a relative tolerance of [`SYMMETRY_TOLERANCE`].
    pub symmetric: bool,
    /// Number of rows without any stored entry.
    pub empty_rows: usize,
    /// Every diagonal entry (of the leading `min(n, ncols)` square) is stored and positive;
    /// true for a matrix without rows or columns.
    pub diag_positive: bool,
}

/// Row lengths below this are counted in a fixed-size local histogram per worker; longer rows
/// are listed and added at the end, so a single very long row costs no per-worker memory.
const HIST_LOCAL: usize = 1024;

/// `h[l]` = number of rows with exactly `l` stored entries, for `l` up to the longest row
/// (length `row_len_max + 1`; empty for a matrix without rows).
pub fn row_length_histogram(a: &CsrMatrix) -> Vec<u64> {
    let ptr = a.indptr();
    let nrows = a.nrows();
    let (local, long) = (0..nrows.div_ceil(ROW_BLOCK))
        .into_par_iter()
        .fold(
            || (vec![0u64; HIST_LOCAL], Vec::new()),
            |(mut h, mut long), b| {
                let r0 = b * ROW_BLOCK;
                let r1 = (r0 + ROW_BLOCK).min(nrows);
                for w in ptr[r0..=r1].windows(2) {
                    let l = (w[1] - w[0]) as usize;
                    match h.get_mut(l) {
                        Some(c) => *c += 1,
                        None => long.push(l),
                    }
                }
                (h, long)
            },
        )
        .reduce(
            || (vec![0u64; HIST_LOCAL], Vec::new()),
            |(mut h1, mut l1), (h2, l2)| {
                h1.iter_mut().zip(&h2).for_each(|(a, b)| *a += b);
                l1.extend(l2);
                (h1, l1)
            },
        );
    histogram_from(local, long)
}

/// The histogram from the counts of the short rows (`local[l]` rows of length `l`) and the
/// lengths of the long rows, listed one per row.
fn histogram_from(local: Vec<u64>, long: Vec<usize>) -> Vec<u64> {
    let max_short = local.iter().rposition(|&c| c != 0);
    let max_long = long.iter().copied().max();
    let len = match (max_short, max_long) {
        (_, Some(l)) => l + 1,
        (Some(l), None) => l + 1,
        (None, None) => return Vec::new(),
    };
    let mut h = local;
    h.resize(len.max(HIST_LOCAL), 0);
    for l in long {
        h[l] += 1;
    }
    h.truncate(len);
    h
}

/// The one-third split from a row-length histogram: the largest `h` such that at least
/// `ceil(n / 3)` rows have `h` or more entries (0 for a matrix without rows).
pub(crate) fn one_third_from_histogram(hist: &[u64], nrows: usize) -> usize {
    let need = (nrows as u64).div_ceil(3);
    let mut at_least = 0u64;
    for h in (1..hist.len()).rev() {
        at_least += hist[h];
        if at_least >= need {
            return h;
        }
    }
    0
}

/// What the caller already knows of a matrix's symmetry, so that [`features_knowing`] need
/// not search for an asymmetric pair (a pass with a lookup per entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KnownSymmetry {
    /// Nothing: the features search.
    #[default]
    Unknown,
    /// Checked symmetric to [`SYMMETRY_TOLERANCE`] (as `CsrMatrix::check_symmetric` with the
    /// same tolerance does), or symmetric by construction.
    Symmetric,
    /// Triangular (every stored entry on one side of the diagonal or on it), as SSOR-AI's
    /// factors are: the transposed entry of an off-diagonal one is never stored, so the matrix
    /// is symmetric exactly when every off-diagonal value passes the tolerance against 0.
    Triangular,
}

impl KnownSymmetry {
    /// Whether `a` is symmetric to [`SYMMETRY_TOLERANCE`], as
    /// `a.first_asymmetry(SYMMETRY_TOLERANCE).is_none()` finds it, using what is known.
    pub fn symmetric(self, a: &CsrMatrix) -> bool {
        match self {
            KnownSymmetry::Unknown => a.first_asymmetry(SYMMETRY_TOLERANCE).is_none(),
            KnownSymmetry::Symmetric => true,
            KnownSymmetry::Triangular => {
                a.is_square()
                    && (0..a.nrows())
                        .into_par_iter()
                        .with_min_len(ROW_BLOCK)
                        .all(|i| {
                            let (c, v) = a.row(i);
                            c.iter().zip(v).all(|(&j, &x)| {
                                // first_asymmetry's test with the absent transposed entry, 0.
                                j as usize == i
                                    || x.abs() <= SYMMETRY_TOLERANCE * x.abs()
                                    || x.is_nan()
                            })
                        })
            }
        }
    }
}

/// Computes every feature of `a` (see [`MatrixFeatures`]).
pub fn features(a: &CsrMatrix) -> MatrixFeatures {
    features_knowing(a, KnownSymmetry::Unknown)
}

/// [`features`] with what is known of `a`'s symmetry (the same features, without the search
/// for an asymmetric pair when `known` settles it).
pub fn features_knowing(a: &CsrMatrix, known: KnownSymmetry) -> MatrixFeatures {
    let (n, m) = (a.nrows(), a.ncols());
    let ((hist, (set, symmetric)), diag_positive) = rayon::join(
        || {
            rayon::join(
                || row_length_histogram(a),
                || rayon::join(|| DiagonalSet::of(a), || known.symmetric(a)),
            )
        },
        || {
            (0..n.min(m))
                .into_par_iter()
                .with_min_len(ROW_BLOCK)
                .all(|i| a.get(i, i) > 0.0)
        },
    );
    from_parts(n, m, &hist, &set, symmetric, diag_positive)
}

/// Every feature from the row-length histogram, the set of diagonals and the two flags: the
/// one place the derived features are computed, for a stored matrix ([`features`]) and for a
/// counted one ([`FeatureCounter`]) alike.
fn from_parts(
    n: usize,
    m: usize,
    hist: &[u64],
    set: &DiagonalSet,
    symmetric: bool,
    diag_positive: bool,
) -> MatrixFeatures {
    // Row-length moments from the histogram, in exact integer arithmetic.
    let (mut sum, mut sumsq) = (0u128, 0u128);
    for (l, &c) in hist.iter().enumerate() {
        sum += l as u128 * c as u128;
        sumsq += (l as u128) * (l as u128) * c as u128;
    }
    let (row_len_mean, row_len_std) = if n == 0 {
        (0.0, 0.0)
    } else {
        let nn = n as u128;
        // n^2 var = n * sum(l^2) - (sum l)^2 >= 0 exactly.
        let var_n2 = nn * sumsq - sum * sum;
        (sum as f64 / n as f64, (var_n2 as f64).sqrt() / n as f64)
    };
    let nnz = sum as usize;
    let row_len_max = hist.len().saturating_sub(1);
    let row_len_min = hist.iter().position(|&c| c != 0).unwrap_or(0);
    let empty_rows = hist.first().copied().unwrap_or(0) as usize;

    let hyb_split = one_third_from_histogram(hist, n);
    let past: u128 = hist
        .iter()
        .enumerate()
        .skip(hyb_split + 1)
        .map(|(l, &c)| (l - hyb_split) as u128 * c as u128)
        .sum();
    let hyb_coo_share = if nnz == 0 {
        0.0
    } else {
        past as f64 / nnz as f64
    };

    let ndiag = set.count();
    let bandwidth = set.extreme_offsets().map_or(0, |(lo, hi)| {
        lo.unsigned_abs().max(hi.unsigned_abs()) as usize
    });

    MatrixFeatures {
        n,
        ncols: m,
        nnz,
        row_len_mean,
        row_len_max,
        row_len_min,
        row_len_std,
        ndiag,
        dia_fill_ratio: fill_ratio(ndiag as u128 * n as u128, nnz),
        ell_width: row_len_max,
        ell_fill_ratio: fill_ratio(row_len_max as u128 * n as u128, nnz),
        hyb_split,
        hyb_coo_share,
        bandwidth,
        symmetric,
        empty_rows,
        diag_positive,
    }
}

/// What a count of a matrix that is never stored, made elsewhere than a [`FeatureCounter`] (a
/// GPU kernel), gives of its structure: enough for the features ([`FeatureCounter::with_diagonals`],
/// [`RowTally::from_histogram`]) and the SpMV work counts the model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructureTotals {
    /// `hist[l]`: rows with `l` entries (any length covering the longest row).
    pub hist: Vec<u64>,
    /// The diagonals holding an entry, as a [`FeatureCounter`] marks them: bit `j + n - 1 - i`
    /// of `(2n - 1).div_ceil(64)` words for an `n x n` matrix.
    pub diagonals: Vec<u64>,
    /// 128-byte lines of `x` read (16 columns each), counted along each row's ascending
    /// columns.
    pub x_lines: u64,
    /// The sum of `|i - j|` over the entries.
    pub dist: u64,
    /// 32 times the longest row of each warp of 32 consecutive rows, summed.
    pub warp_slots: u64,
    /// Rows that store their diagonal entry.
    pub diag_stored: u64,
}

/// What the selection reads of a square matrix `A` before first-order SSOR-AI's factors exist
/// (the factors' views need a positive, finite diagonal and as many entries below the
/// diagonal as above; the automatic relaxation needs the coupling), read where `A` was
/// uploaded (a GPU kernel) instead of by host passes over it. Beside `bad_diagonal` the
/// fields count only rows that store their diagonal entry, and mean what they say only when
/// `bad_diagonal` is `None`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct K1Checks {
    /// The first row (0-based) whose diagonal entry is not stored, or is not positive and
    /// finite.
    pub bad_diagonal: Option<usize>,
    /// Entries of `K`: each row's entries up to and with its diagonal.
    pub nnz_k: u64,
    /// The squares of `K`'s row lengths, summed (the explicit product's bound on its entries).
    pub k_len_squares: u64,
    /// `max_i sum_{j<i} |a_ij| / sqrt(a_ii a_jj)`, each row summed in column order, rows whose
    /// sum is NaN skipped (what the automatic relaxation factor is computed from).
    pub coupling: f64,
}

/// What a count made elsewhere than the host (a GPU kernel) finds of a square matrix `A` with
/// every diagonal entry stored and of its first-order SSOR-AI factors `K` (row `i`: `A`'s
/// columns up to `i`) and `K^T diag(s)` (row `i`: `A`'s columns from `i` on), with what their
/// values are: what one host pass over the factors' views reads of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K1Totals {
    /// `A`'s structure.
    pub a: StructureTotals,
    /// `K`'s structure.
    pub k: StructureTotals,
    /// `K^T diag(s)`'s structure.
    pub kt: StructureTotals,
    /// Every off-diagonal value of `K` and every scale `s_i` is finite.
    pub values_finite: bool,
    /// Every off-diagonal value of `K` is zero, or not finite (what the factors' symmetry
    /// feature tests).
    pub off_diagonal_zero: bool,
}

/// Counts the features of a matrix that is never stored, from its rows as a symbolic pass
/// finds them (sorted, distinct column indices per row), so that the pass can drop each row
/// once it is counted. The result equals [`features`] of the matrix whose rows were given,
/// with every stored value taken as positive (a pattern with unit values, or a matrix known to
/// have a positive diagonal wherever it stores one).
///
/// Every row must be given exactly once, to any [`RowTally`] of this counter, from any
/// thread, in any order; the tallies are then merged ([`RowTally::merge`]) and passed to
/// [`FeatureCounter::finish`]. Symmetry cannot be seen one row at a time: the caller states it.
pub struct FeatureCounter {
    nrows: usize,
    ncols: usize,
    /// The diagonals seen so far, as the bitmap of [`DiagonalSet`], shared by all tallies.
    diagonals: Vec<AtomicU64>,
}

/// The counts of the rows given to a [`FeatureCounter`] through this tally.
#[derive(Debug, Clone, Default)]
pub struct RowTally {
    /// `short[l]`: rows of length `l < HIST_LOCAL` (only as long as the longest such row).
    short: Vec<u64>,
    /// Lengths of the longer rows, one per row.
    long: Vec<usize>,
    /// Rows counted.
    rows: usize,
    /// Rows `i` that store their diagonal entry `(i, i)`.
    diag_stored: usize,
}

impl RowTally {
    /// The tally of rows counted elsewhere (on a GPU): `hist[l]` rows of length `l`, of which
    /// `diag_stored` store their diagonal entry.
    pub fn from_histogram(hist: Vec<u64>, diag_stored: usize) -> RowTally {
        RowTally {
            rows: hist.iter().sum::<u64>() as usize,
            short: hist,
            long: Vec::new(),
            diag_stored,
        }
    }

    /// The counts of both tallies' rows together.
    pub fn merge(mut self, other: RowTally) -> RowTally {
        if self.short.len() < other.short.len() {
            self.short.resize(other.short.len(), 0);
        }
        self.short
            .iter_mut()
            .zip(&other.short)
            .for_each(|(a, b)| *a += b);
        self.long.extend(other.long);
        self.rows += other.rows;
        self.diag_stored += other.diag_stored;
        self
    }
}

impl FeatureCounter {
    /// A counter for an `nrows x ncols` matrix.
    pub fn new(nrows: usize, ncols: usize) -> Self {
        let nbits = if nrows == 0 || ncols == 0 {
            0
        } else {
            nrows + ncols - 1
        };
        FeatureCounter {
            nrows,
            ncols,
            diagonals: (0..nbits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A counter for an `nrows x ncols` matrix whose diagonals were marked elsewhere (on a
    /// GPU): bit `j + nrows - 1 - i` of `words` for an entry `(i, j)`, the layout this counter
    /// keeps. `None` unless `words` has the counter's length.
    pub fn with_diagonals(nrows: usize, ncols: usize, words: Vec<u64>) -> Option<Self> {
        let c = FeatureCounter::new(nrows, ncols);
        (words.len() == c.diagonals.len()).then(|| FeatureCounter {
            diagonals: words.into_iter().map(AtomicU64::new).collect(),
            ..c
        })
    }

    /// The diagonals marked so far, in the layout [`FeatureCounter::with_diagonals`] takes.
    pub fn into_diagonal_words(self) -> Vec<u64> {
        self.diagonals
            .into_iter()
            .map(AtomicU64::into_inner)
            .collect()
    }

    /// Counts row `i`, whose stored columns are `cols` (ascending, distinct, below `ncols`),
    /// into `tally`.
    #[inline]
    pub fn add_row(&self, tally: &mut RowTally, i: usize, cols: &[u32]) {
        debug_assert!(i < self.nrows);
        debug_assert!(cols.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(cols.last().is_none_or(|&j| (j as usize) < self.ncols));
        let l = cols.len();
        if l < HIST_LOCAL {
            if tally.short.len() <= l {
                tally.short.resize(l + 1, 0);
            }
            tally.short[l] += 1;
        } else {
            tally.long.push(l);
        }
        tally.rows += 1;
        if i < self.ncols && cols.binary_search(&(i as u32)).is_ok() {
            tally.diag_stored += 1;
        }
        let shift = self.nrows - 1 - i;
        for &j in cols {
            let bit = j as usize + shift;
            let w = &self.diagonals[bit >> 6];
            let mask = 1u64 << (bit & 63);
            // Test before setting, as `DiagonalSet::of` does: most diagonals are seen again
            // and again, and a load keeps the cache line shared.
            if w.load(Ordering::Relaxed) & mask == 0 {
                w.fetch_or(mask, Ordering::Relaxed);
            }
        }
    }

    /// The features of the counted matrix, with `symmetric` as the caller knows it, and its
    /// row-length histogram (as [`row_length_histogram`] gives it).
    ///
    /// Panics unless `tally` counted as many rows as the matrix has (a programming error).
    pub fn finish(self, tally: RowTally, symmetric: bool) -> (MatrixFeatures, Vec<u64>) {
        assert_eq!(
            tally.rows, self.nrows,
            "feature counter: every row must be counted once"
        );
        let hist = histogram_from(tally.short, tally.long);
        let words = self
            .diagonals
            .into_iter()
            .map(AtomicU64::into_inner)
            .collect();
        let set = DiagonalSet::from_words(words, self.nrows);
        let diag_positive = tally.diag_stored == self.nrows.min(self.ncols);
        let f = from_parts(
            self.nrows,
            self.ncols,
            &hist,
            &set,
            symmetric,
            diag_positive,
        );
        (f, hist)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_and_split_of_known_lengths() {
        // Row lengths [1, 1, 1, 2, 5, 9]: ceil(6/3) = 2 rows have >= 5 entries, only 1 has >= 6.
        let lens = [1usize, 1, 1, 2, 5, 9];
        let (mut r, mut c) = (Vec::new(), Vec::new());
        for (i, &l) in lens.iter().enumerate() {
            for j in 0..l {
                r.push(i as u32);
                c.push(j as u32);
            }
        }
        let v = vec![1.0; r.len()];
        let a = CsrMatrix::from_triplets(6, 10, &r, &c, &v).unwrap();
        let h = row_length_histogram(&a);
        assert_eq!(h, vec![0, 3, 1, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(one_third_from_histogram(&h, 6), 5);
    }

    #[test]
    fn histogram_with_a_row_longer_than_the_local_table() {
        let n = HIST_LOCAL + 10;
        let r: Vec<u32> = std::iter::repeat_n(0u32, n).chain([1]).collect();
        let c: Vec<u32> = (0..n as u32).chain([0]).collect();
        let v = vec![1.0; r.len()];
        let a = CsrMatrix::from_triplets(3, n, &r, &c, &v).unwrap();
        let h = row_length_histogram(&a);
        assert_eq!(h.len(), n + 1);
        assert_eq!((h[0], h[1], h[n]), (1, 1, 1));
        assert_eq!(h.iter().sum::<u64>(), 3);
    }

    /// The features counted from `a`'s rows, given backwards into three tallies.
    fn counted(a: &CsrMatrix, symmetric: bool) -> (MatrixFeatures, Vec<u64>) {
        let c = FeatureCounter::new(a.nrows(), a.ncols());
        let mut t = [
            RowTally::default(),
            RowTally::default(),
            RowTally::default(),
        ];
        for i in (0..a.nrows()).rev() {
            c.add_row(&mut t[i % 3], i, a.row(i).0);
        }
        let [t0, t1, t2] = t;
        c.finish(t2.merge(t0).merge(t1), symmetric)
    }

    /// `a`'s pattern with every stored value 1.0.
    fn unit(a: &CsrMatrix) -> CsrMatrix {
        let v = vec![1.0; a.nnz()];
        CsrMatrix::try_from_parts(
            a.nrows(),
            a.ncols(),
            a.indptr().to_vec(),
            a.indices().to_vec(),
            v,
        )
        .unwrap()
    }

    #[test]
    fn counted_features_equal_the_stored_matrix_features() {
        let mut cases = vec![
            crate::families::poisson2d_5pt(9, 7).unwrap(),
            crate::families::poisson3d_7pt(5, 4, 3).unwrap(),
            crate::families::random_powerlaw_spd(500, 6.0, 1.4, 7).unwrap(),
            CsrMatrix::from_triplets(0, 0, &[], &[], &[]).unwrap(),
            CsrMatrix::from_triplets(1, 1, &[0], &[0], &[3.0]).unwrap(),
            CsrMatrix::from_triplets(4, 4, &[], &[], &[]).unwrap(),
        ];
        // Irregular: empty rows, a missing diagonal, rectangular, and one row longer than the
        // local histogram.
        let (mut r, mut c) = (vec![0u32, 0, 3, 3, 5], vec![0u32, 4, 1, 3, 2]);
        let n = HIST_LOCAL + 40;
        for j in 0..n as u32 {
            r.push(6);
            c.push(j);
        }
        let v = vec![2.0; r.len()];
        cases.push(CsrMatrix::from_triplets(8, n, &r, &c, &v).unwrap());
        cases.push(CsrMatrix::from_triplets(3, 2, &[0, 2], &[1, 0], &[1.0, 1.0]).unwrap());
        for a in cases {
            let a = unit(&a);
            let want = features(&a);
            let (got, hist) = counted(&a, want.symmetric);
            assert_eq!(got, want, "{} x {}", a.nrows(), a.ncols());
            assert_eq!(hist, row_length_histogram(&a));
        }
    }

    #[test]
    #[should_panic(expected = "every row")]
    fn a_row_left_out_is_caught() {
        let a = crate::families::poisson2d_5pt(3, 3).unwrap();
        let c = FeatureCounter::new(a.nrows(), a.ncols());
        let mut t = RowTally::default();
        for i in 1..a.nrows() {
            c.add_row(&mut t, i, a.row(i).0);
        }
        c.finish(t, true);
    }

    #[test]
    fn known_symmetry_gives_the_features_the_search_finds() {
        let a = crate::families::poisson2d_5pt(30, 20).unwrap();
        assert_eq!(features_knowing(&a, KnownSymmetry::Symmetric), features(&a));
        // Triangular matrices: a lower triangle; one whose off-diagonal entries are stored
        // zeros (symmetric after all); a diagonal one; an upper one; a non-square one.
        let lower = a.lower_triangle();
        let mut zeros = lower.clone();
        let pos = zeros.diagonal_positions();
        for (k, v) in zeros.data_mut().iter_mut().enumerate() {
            if !pos.contains(&(k as u32)) {
                *v = 0.0;
            }
        }
        let diagonal = a.filter(|i, j| i == j);
        let upper = lower.transpose();
        let wide = CsrMatrix::from_triplets(2, 3, &[0, 1], &[0, 0], &[1.0, 2.0]).unwrap();
        for (name, t, symmetric) in [
            ("lower", &lower, false),
            ("stored zeros", &zeros, true),
            ("diagonal", &diagonal, true),
            ("upper", &upper, false),
            ("wide", &wide, false),
        ] {
            let f = features_knowing(t, KnownSymmetry::Triangular);
            assert_eq!(f, features(t), "{name}");
            assert_eq!(f.symmetric, symmetric, "{name}");
        }
    }

    #[test]
    fn features_of_empty_matrices_have_no_nan() {
        for (n, m) in [(0, 0), (3, 3), (2, 5)] {
            let a = CsrMatrix::from_triplets(n, m, &[], &[], &[]).unwrap();
            let f = features(&a);
            assert_eq!(f.nnz, 0);
            assert_eq!(f.ndiag, 0);
            assert_eq!(f.empty_rows, n);
            assert_eq!((f.dia_fill_ratio, f.ell_fill_ratio), (1.0, 1.0));
            assert_eq!(f.hyb_coo_share, 0.0);
            assert_eq!((f.row_len_mean, f.row_len_std), (0.0, 0.0));
            assert_eq!(f.diag_positive, n == 0);
        }
    }
}
