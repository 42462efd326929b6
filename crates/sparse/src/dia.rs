//! DIA: the matrix as a set of diagonals. `offsets[d]` is the offset j - i of diagonal d
//! (ascending); `data[d * nrows + i]` holds `A[i][i + offsets[d]]` (0 where that column falls
//! outside the matrix or the entry is not stored). DIA keeps values, not structure: an explicit
//! zero stored in the source matrix becomes indistinguishable from padding.
//!
//! The diagonals are counted first, with a bitmap over the `nrows + ncols - 1` possible offsets
//! (one bit each), so a matrix with too many diagonals is refused before the band is allocated.
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::build::{
    assemble_csr, check_padding, row_lengths_by_block, segments_by_block, ROW_BLOCK,
};
use crate::{CsrMatrix, PaddingLimits, SparseError};

/// The diagonals of a matrix that hold at least one stored entry, as a bitmap over every
/// possible offset: bit `b` stands for offset `b - (nrows - 1)`.
pub(crate) struct DiagonalSet {
    words: Vec<u64>,
    nrows: usize,
}

impl DiagonalSet {
    /// Marks the diagonal of every stored entry of `a` (explicit zeros included), in parallel.
    pub(crate) fn of(a: &CsrMatrix) -> Self {
        let (n, m) = (a.nrows(), a.ncols());
        if n == 0 || m == 0 {
            return DiagonalSet {
                words: Vec::new(),
                nrows: n,
            };
        }
        let nbits = n + m - 1;
        let words: Vec<AtomicU64> = (0..nbits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        (0..n.div_ceil(ROW_BLOCK)).into_par_iter().for_each(|b| {
            let r0 = b * ROW_BLOCK;
            for i in r0..(r0 + ROW_BLOCK).min(n) {
                let (cols, _) = a.row(i);
                for &j in cols {
                    let bit = j as usize + (n - 1) - i;
                    let w = &words[bit >> 6];
                    let mask = 1u64 << (bit & 63);
                    // Test before setting: on banded matrices nearly every bit is already set,
                    // and a plain load keeps the cache line shared between threads.
                    if w.load(Ordering::Relaxed) & mask == 0 {
                        w.fetch_or(mask, Ordering::Relaxed);
                    }
                }
            }
        });
        DiagonalSet {
            words: words.into_iter().map(AtomicU64::into_inner).collect(),
            nrows: n,
        }
    }

    /// The set whose bitmap is `words` (bit `b` for offset `b - (nrows - 1)`, as [`Self::of`]
    /// builds it).
    pub(crate) fn from_words(words: Vec<u64>, nrows: usize) -> Self {
        DiagonalSet { words, nrows }
    }

    /// Number of diagonals.
    pub(crate) fn count(&self) -> usize {
        self.words
            .par_iter()
            .with_min_len(ROW_BLOCK)
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// The offsets (column - row), ascending.
    pub(crate) fn offsets(&self) -> Vec<i64> {
        let shift = self.nrows as i64 - 1;
        let mut out = Vec::new();
        for (wi, &w) in self.words.iter().enumerate() {
            let mut bits = w;
            while bits != 0 {
                let t = bits.trailing_zeros() as i64;
                out.push(wi as i64 * 64 + t - shift);
                bits &= bits - 1;
            }
        }
        out
    }

    /// Smallest and largest offset, `None` without any stored entry.
    pub(crate) fn extreme_offsets(&self) -> Option<(i64, i64)> {
        let shift = self.nrows as i64 - 1;
        let first = self.words.iter().position(|&w| w != 0)?;
        let last = self.words.iter().rposition(|&w| w != 0)?;
        let lo = first as i64 * 64 + self.words[first].trailing_zeros() as i64;
        let hi = last as i64 * 64 + 63 - self.words[last].leading_zeros() as i64;
        Some((lo - shift, hi - shift))
    }

    /// Number of set bits before each word, for constant-time ranks.
    fn word_ranks(&self) -> Vec<u32> {
        let mut acc = 0u32;
        self.words
            .iter()
            .map(|w| {
                let r = acc;
                acc += w.count_ones();
                r
            })
            .collect()
    }
}

/// Number of distinct diagonals (offsets j - i) holding a stored entry of `a`, counted with a
/// bitmap over the possible offsets, without building the DIA band: O(nnz) time,
/// (nrows + ncols) / 8 bytes.
pub fn count_diagonals(a: &CsrMatrix) -> usize {
    DiagonalSet::of(a).count()
}

/// Index (rank among the stored diagonals) of the diagonal at bit `bit`.
#[inline]
fn rank(words: &[u64], ranks: &[u32], bit: usize) -> usize {
    let below = words[bit >> 6] & ((1u64 << (bit & 63)) - 1);
    ranks[bit >> 6] as usize + below.count_ones() as usize
}

/// Diagonal storage format.
#[derive(Debug, Clone, PartialEq)]
pub struct DiaMatrix {
    pub(crate) nrows: usize,
    pub(crate) ncols: usize,
    pub(crate) offsets: Vec<i32>,
    pub(crate) data: Vec<f64>,
}

impl DiaMatrix {
    /// Converts `a`, storing every diagonal that holds a stored entry. Refused with
    /// [`SparseError::TooMuchPadding`] (format `"DIA"`), before the band is allocated, when
    /// `ndiag * nrows / nnz` exceeds `limits.max_fill_ratio` or the band and offsets
    /// (`ndiag * nrows * 8 + ndiag * 4` bytes) exceed `limits.max_bytes`. A matrix whose
    /// offsets do not fit `i32` is refused with [`SparseError::TooLarge`]. A matrix without
    /// rows, columns or entries gives no diagonals. Rectangular matrices are supported.
    pub fn from_csr(a: &CsrMatrix, limits: &PaddingLimits) -> Result<Self, SparseError> {
        let n = a.nrows();
        let set = DiagonalSet::of(a);
        let ndiag = set.count();
        let slots = ndiag as u128 * n as u128;
        check_padding("DIA", slots, a.nnz(), slots * 8 + ndiag as u128 * 4, limits)?;
        if let Some((lo, hi)) = set.extreme_offsets() {
            if lo < i64::from(i32::MIN) || hi > i64::from(i32::MAX) {
                return Err(SparseError::TooLarge(format!(
                    "diagonal offsets {lo} .. {hi} do not fit 32-bit signed integers"
                )));
            }
        }
        let offsets: Vec<i32> = set.offsets().into_iter().map(|o| o as i32).collect();
        let mut data = vec![0.0f64; ndiag * n];
        if ndiag > 0 {
            let ranks = set.word_ranks();
            // Hand each row block its part of every diagonal, then scatter row by row.
            segments_by_block(&mut data, n)
                .into_par_iter()
                .enumerate()
                .for_each(|(b, mut seg)| {
                    let r0 = b * ROW_BLOCK;
                    for i in r0..(r0 + ROW_BLOCK).min(n) {
                        let (cols, vals) = a.row(i);
                        for (&j, &v) in cols.iter().zip(vals) {
                            let d = rank(&set.words, &ranks, j as usize + (n - 1) - i);
                            seg[d][i - r0] = v;
                        }
                    }
                });
        }
        Ok(DiaMatrix {
            nrows: n,
            ncols: a.ncols(),
            offsets,
            data,
        })
    }

    /// Rows `i` for which column `i + off` lies inside the matrix, clipped to `r0 .. r1`.
    #[inline]
    fn rows_of(&self, off: i32, r0: usize, r1: usize) -> std::ops::Range<usize> {
        let off = off as i64;
        let lo = (-off).max(0).max(r0 as i64);
        let hi = (self.ncols as i64 - off).min(r1 as i64);
        if hi <= lo {
            0..0
        } else {
            lo as usize..hi as usize
        }
    }

    /// Number of nonzero values in the band (explicit zeros of the source are not counted:
    /// DIA cannot tell them from padding).
    pub fn nnz(&self) -> usize {
        self.data
            .par_iter()
            .with_min_len(ROW_BLOCK)
            .filter(|&&v| v != 0.0)
            .count()
    }

    /// Stored slots (`ndiag * nrows`) divided by the nonzero values of the band: 1.0 without
    /// padding (also for an empty matrix), infinite when the band holds only zeros.
    pub fn fill_ratio(&self) -> f64 {
        crate::build::fill_ratio(self.data.len() as u128, self.nnz())
    }

    /// Converts back to CSR, keeping only the values that are not exactly 0.0: DIA keeps
    /// values, not structure, so explicit zeros of the source matrix (and -0.0) are dropped and
    /// the result equals the source with its zero entries removed.
    pub fn to_csr(&self) -> Result<CsrMatrix, SparseError> {
        let n = self.nrows;
        let lens = row_lengths_by_block(n, |r0, out| {
            for (d, &off) in self.offsets.iter().enumerate() {
                for i in self.rows_of(off, r0, r0 + out.len()) {
                    out[i - r0] += u32::from(self.data[d * n + i] != 0.0);
                }
            }
        });
        assemble_csr(n, self.ncols, &lens, |r0, ptr, oi, ov| {
            let base = ptr[0];
            let mut cursor: Vec<usize> = ptr[..ptr.len() - 1]
                .iter()
                .map(|&p| (p - base) as usize)
                .collect();
            for (d, &off) in self.offsets.iter().enumerate() {
                for i in self.rows_of(off, r0, r0 + cursor.len()) {
                    let v = self.data[d * n + i];
                    if v != 0.0 {
                        let p = &mut cursor[i - r0];
                        oi[*p] = (i as i64 + off as i64) as u32;
                        ov[*p] = v;
                        *p += 1;
                    }
                }
            }
        })
    }

    /// `y = A x`, in parallel over blocks of rows, diagonal by diagonal. Diagonals ascend, so
    /// each row is summed in column order; padded zeros add exact zeros, so for finite `x` the
    /// result equals [`CsrMatrix::spmv`] (up to the sign of a zero).
    ///
    /// Panics if the lengths do not match (a programming error, not user input).
    pub fn spmv(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.ncols, "spmv: x has the wrong length");
        assert_eq!(y.len(), self.nrows, "spmv: y has the wrong length");
        let n = self.nrows;
        y.par_chunks_mut(ROW_BLOCK).enumerate().for_each(|(b, yb)| {
            let r0 = b * ROW_BLOCK;
            yb.fill(0.0);
            for (d, &off) in self.offsets.iter().enumerate() {
                let rows = self.rows_of(off, r0, r0 + yb.len());
                let band = &self.data[d * n..(d + 1) * n];
                for i in rows {
                    yb[i - r0] += band[i] * x[(i as i64 + off as i64) as usize];
                }
            }
        });
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// Number of stored diagonals.
    pub fn ndiag(&self) -> usize {
        self.offsets.len()
    }
    /// Diagonal offsets (column - row), ascending.
    pub fn offsets(&self) -> &[i32] {
        &self.offsets
    }
    /// Dense band, `ndiag * nrows`, diagonal-major.
    pub fn data(&self) -> &[f64] {
        &self.data
    }
}
