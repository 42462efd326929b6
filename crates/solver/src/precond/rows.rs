//! The row-parallel construction of SSOR-AI's sparse factors and product: each row is built
//! with a hash accumulator that sums the terms of every entry in a fixed order, in chunks of
//! rows whose size does not depend on the thread count; the same rows recompute the values on
//! a kept pattern.
use autopcg_sparse::CsrMatrix;
use rayon::prelude::*;

use crate::PcgError;

fn sparse_err(e: autopcg_sparse::SparseError) -> PcgError {
    PcgError::Backend(format!("building the preconditioner: {e}"))
}

/// Rows built per parallel task; fixed so that the result never depends on the thread count.
const ROW_CHUNK: usize = 2048;

/// Widest span of columns a row of the explicit product's pattern is found in with a stamp
/// per column (wider rows use the hash accumulator): 1 MiB of stamps per chunk of rows.
const PATTERN_WINDOW: usize = 1 << 18;

/// Builds an `nrows x ncols` CSR matrix row by row in parallel: `row(i, acc, out)` appends the
/// sorted entries of row `i` to `out`, using `acc` as scratch.
fn build_by_rows<F>(nrows: usize, ncols: usize, row: F) -> Result<CsrMatrix, PcgError>
where
    F: Fn(usize, &mut HashAccumulator, &mut Vec<(u32, f64)>) + Sync,
{
    let chunks: Vec<(Vec<u32>, Vec<u32>, Vec<f64>)> = (0..nrows.div_ceil(ROW_CHUNK))
        .into_par_iter()
        .map(|c| {
            let lo = c * ROW_CHUNK;
            let hi = (lo + ROW_CHUNK).min(nrows);
            let mut acc = HashAccumulator::default();
            let mut out = Vec::new();
            let mut lens = Vec::with_capacity(hi - lo);
            let mut idx = Vec::new();
            let mut val = Vec::new();
            for i in lo..hi {
                out.clear();
                row(i, &mut acc, &mut out);
                lens.push(out.len() as u32);
                idx.extend(out.iter().map(|e| e.0));
                val.extend(out.iter().map(|e| e.1));
            }
            (lens, idx, val)
        })
        .collect();
    let (indptr, chunk_nnz) =
        row_pointer(nrows, |i| chunks[i / ROW_CHUNK].0[i % ROW_CHUNK] as usize)?;
    let nnz = chunk_nnz.iter().sum();
    let mut indices = vec![0u32; nnz];
    let mut data = vec![0f64; nnz];
    chunk_slices(&mut indices, &mut data, &chunk_nnz)
        .into_par_iter()
        .zip(chunks.par_iter())
        .for_each(|((oi, od), (_, ci, cd))| {
            oi.copy_from_slice(ci);
            od.copy_from_slice(cd);
        });
    CsrMatrix::try_from_parts(nrows, ncols, indptr, indices, data).map_err(sparse_err)
}

/// A row accumulator: open addressing on column indices, summing the values of each column in
/// the order they are added.
#[derive(Default)]
pub(super) struct HashAccumulator {
    keys: Vec<u32>,
    vals: Vec<f64>,
    /// Occupied slots as `column << 32 | slot`: sorting them sorts by column.
    used: Vec<u64>,
    /// log2 of the table size.
    bits: u32,
    /// For patterns in a window of columns: `marks[c - first]` is `row + 1` once column `c`
    /// is in row `row` (a stamp per row, so the window needs no clearing between rows).
    marks: Vec<u32>,
    /// Scratch for one row's columns.
    cols: Vec<u32>,
}

impl HashAccumulator {
    const EMPTY: u32 = u32::MAX;

    /// Prepares for at most `bound` distinct columns.
    fn reset(&mut self, bound: usize) {
        let want = (2 * bound.max(4)).next_power_of_two();
        if self.keys.len() < want {
            self.keys = vec![Self::EMPTY; want];
            self.vals = vec![0.0; want];
            self.bits = want.trailing_zeros();
        }
        self.used.clear();
    }

    /// The slot of column `col`, taken for it when new (then `true`).
    #[inline]
    fn probe(&mut self, col: u32) -> (usize, bool) {
        // Fibonacci hashing: the top bits of the product spread nearby columns apart.
        let mask = self.keys.len() - 1;
        let mut h = ((col as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize;
        loop {
            let k = self.keys[h];
            if k == col {
                return (h, false);
            }
            if k == Self::EMPTY {
                self.keys[h] = col;
                self.used.push(((col as u64) << 32) | h as u64);
                return (h, true);
            }
            h = (h + 1) & mask;
        }
    }

    /// Adds `v` to column `col` (the first value of a column is taken as it is).
    #[inline]
    fn add(&mut self, col: u32, v: f64) {
        match self.probe(col) {
            (h, true) => self.vals[h] = v,
            (h, false) => self.vals[h] += v,
        }
    }

    /// Records column `col` (its value is left as it is: for patterns only).
    #[inline]
    fn insert(&mut self, col: u32) {
        self.probe(col);
    }

    /// Appends the accumulated columns, sorted, and empties the table (for patterns only).
    fn drain_sorted_columns(&mut self, out: &mut Vec<u32>) {
        self.used.sort_unstable();
        for &e in &self.used {
            out.push((e >> 32) as u32);
            self.keys[(e & 0xffff_ffff) as usize] = Self::EMPTY;
        }
        self.used.clear();
    }

    /// Appends the accumulated entries sorted by column, and empties the table.
    fn drain_sorted(&mut self, out: &mut Vec<(u32, f64)>) {
        // Columns are distinct, so an unstable sort gives a unique result.
        self.used.sort_unstable();
        for &e in &self.used {
            let h = (e & 0xffff_ffff) as usize;
            out.push(((e >> 32) as u32, self.vals[h]));
            self.keys[h] = Self::EMPTY;
        }
        self.used.clear();
    }
}

/// Builds an `nrows x ncols` matrix whose entries are all 1.0 on the pattern `row(i, acc,
/// out)` gives (the columns it appends, values ignored).
fn fill_pattern_only<F>(nrows: usize, ncols: usize, row: F) -> Result<CsrMatrix, PcgError>
where
    F: Fn(usize, &mut HashAccumulator, &mut Vec<(u32, f64)>) + Sync,
{
    build_by_rows(nrows, ncols, |i, acc, out| {
        row(i, acc, out);
        for e in out.iter_mut() {
            e.1 = 1.0;
        }
    })
}

/// Recomputes the values of `m` in place, row by row in parallel: `row(i, acc, out)` appends
/// the sorted entries of row `i`, which must have `m`'s pattern (the same rows
/// [`build_by_rows`] built it from, for new values). The values are those a new build gives,
/// bit for bit.
pub(super) fn fill_by_rows<F>(m: &mut CsrMatrix, row: F) -> Result<(), PcgError>
where
    F: Fn(usize, &mut HashAccumulator, &mut Vec<(u32, f64)>) + Sync,
{
    let nrows = m.nrows();
    let ptr = m.indptr();
    let starts: Vec<usize> = (0..=nrows.div_ceil(ROW_CHUNK))
        .map(|c| ptr[(c * ROW_CHUNK).min(nrows)] as usize)
        .collect();
    let mut parts = Vec::with_capacity(starts.len().saturating_sub(1));
    let mut rest: &mut [f64] = m.data_mut();
    for w in starts.windows(2) {
        let (head, tail) = rest.split_at_mut(w[1] - w[0]);
        parts.push(head);
        rest = tail;
    }
    let changed = parts
        .into_par_iter()
        .enumerate()
        .map(|(c, vals)| {
            let mut acc = HashAccumulator::default();
            let mut out = Vec::new();
            let mut at = 0;
            for i in c * ROW_CHUNK..((c + 1) * ROW_CHUNK).min(nrows) {
                out.clear();
                row(i, &mut acc, &mut out);
                let Some(dst) = vals.get_mut(at..at + out.len()) else {
                    return true;
                };
                for (d, e) in dst.iter_mut().zip(&out) {
                    *d = e.1;
                }
                at += out.len();
            }
            at != vals.len()
        })
        .reduce(|| false, |a, b| a || b);
    if changed {
        return Err(PcgError::Backend(
            "new preconditioner values do not fit the kept pattern (internal error)".into(),
        ));
    }
    Ok(())
}

/// `X = w L D^-1`: `X_ij = w a_ij / d_j` for `j < i`.
fn ssor_x(a: &CsrMatrix, d: &[f64], omega: f64) -> Result<CsrMatrix, PcgError> {
    let n = a.nrows();
    build_by_rows(n, n, |i, _, out| {
        let (c, v) = a.row(i);
        for (&j, &aij) in c.iter().zip(v) {
            if (j as usize) < i {
                out.push((j, omega * aij / d[j as usize]));
            }
        }
    })
}

/// The rows of `K = I - X` (`x` is `None`: read from `a`) or `K = I - X + X^2` (`x` is `X`).
fn ssor_k_rows<'a>(
    a: &'a CsrMatrix,
    d: &'a [f64],
    omega: f64,
    x: Option<&'a CsrMatrix>,
) -> impl Fn(usize, &mut HashAccumulator, &mut Vec<(u32, f64)>) + Sync + 'a {
    move |i, acc, out| match x {
        None => {
            let (c, v) = a.row(i);
            for (&j, &aij) in c.iter().zip(v) {
                if (j as usize) < i {
                    out.push((j, -(omega * aij / d[j as usize])));
                }
            }
            out.push((i as u32, 1.0));
        }
        // Row i of X^2 is sum_k X_ik X[k, :], all columns below k < i.
        Some(x) => {
            let (c, v) = x.row(i);
            let bound = 1 + c.len() + c.iter().map(|&k| x.row_len(k as usize)).sum::<usize>();
            acc.reset(bound);
            for (&j, &xij) in c.iter().zip(v) {
                acc.add(j, -xij);
            }
            for (&k, &xik) in c.iter().zip(v) {
                let (ck, vk) = x.row(k as usize);
                for (&j, &xkj) in ck.iter().zip(vk) {
                    acc.add(j, xik * xkj);
                }
            }
            acc.add(i as u32, 1.0);
            acc.drain_sorted(out);
        }
    }
}

/// The truncated inverse `K = I - X` or `K = I - X + X^2` with `X = w L D^-1`.
pub(super) fn ssor_k(
    a: &CsrMatrix,
    d: &[f64],
    omega: f64,
    order: u8,
) -> Result<CsrMatrix, PcgError> {
    let n = a.nrows();
    if order == 1 {
        return ssor_k1(a, d, omega);
    }
    let x = ssor_x(a, d, omega)?;
    build_by_rows(n, n, ssor_k_rows(a, d, omega, Some(&x)))
}

/// The row pointer of an `n`-row matrix whose row `i` has `len(i)` entries, found per chunk of
/// [`ROW_CHUNK`] rows in parallel, with each chunk's number of entries (the length of its slice
/// of the result).
fn row_pointer(
    n: usize,
    len: impl Fn(usize) -> usize + Sync,
) -> Result<(Vec<u32>, Vec<usize>), PcgError> {
    let rows = |c: usize| c * ROW_CHUNK..((c + 1) * ROW_CHUNK).min(n);
    let chunk_nnz: Vec<usize> = (0..n.div_ceil(ROW_CHUNK))
        .into_par_iter()
        .map(|c| rows(c).map(&len).sum())
        .collect();
    let mut starts = Vec::with_capacity(chunk_nnz.len());
    let mut total = 0u64;
    for &c in &chunk_nnz {
        starts.push(total);
        total += c as u64;
    }
    if total >= u64::from(u32::MAX) {
        return Err(PcgError::Backend(format!(
            "preconditioner has more than {} nonzeros, beyond 32-bit indices",
            u32::MAX - 1
        )));
    }
    let mut indptr = vec![0u32; n + 1];
    indptr[1..]
        .par_chunks_mut(ROW_CHUNK)
        .zip(starts.par_iter())
        .enumerate()
        .for_each(|(c, (out, &start))| {
            let mut at = start;
            for (o, i) in out.iter_mut().zip(rows(c)) {
                at += len(i) as u64;
                *o = at as u32;
            }
        });
    Ok((indptr, chunk_nnz))
}

/// Index and value arrays of `chunk_nnz.iter().sum()` entries, and each chunk's slices of them.
fn chunk_slices<'a>(
    indices: &'a mut [u32],
    data: &'a mut [f64],
    chunk_nnz: &[usize],
) -> Vec<(&'a mut [u32], &'a mut [f64])> {
    let mut parts = Vec::with_capacity(chunk_nnz.len());
    let (mut ri, mut rd) = (indices, data);
    for &len in chunk_nnz {
        let (hi, ti) = ri.split_at_mut(len);
        let (hd, td) = rd.split_at_mut(len);
        parts.push((hi, hd));
        ri = ti;
        rd = td;
    }
    parts
}

/// First-order `K = I - X`, written in place: row `i` of K is the part of row `i` of `a` left
/// of the diagonal, scaled, then the unit diagonal, so the row pointer is known before any
/// value is computed and every chunk of rows writes its own slice of the result (no row
/// buffers copied after). The entries, their order and their expression are
/// [`ssor_k_rows`]'s (a test compares the two).
fn ssor_k1(a: &CsrMatrix, d: &[f64], omega: f64) -> Result<CsrMatrix, PcgError> {
    let n = a.nrows();
    let (ptr, idx, val) = (a.indptr(), a.indices(), a.data());
    // Entries of row i left of the diagonal (columns are sorted).
    let left =
        |i: usize| idx[ptr[i] as usize..ptr[i + 1] as usize].partition_point(|&j| (j as usize) < i);
    let row_start = |i: usize| ptr[i] as usize;
    let (indptr, chunk_nnz) = row_pointer(n, |i| left(i) + 1)?;
    let nnz = chunk_nnz.iter().sum();
    let mut indices = vec![0u32; nnz];
    let mut data = vec![0f64; nnz];
    chunk_slices(&mut indices, &mut data, &chunk_nnz)
        .into_par_iter()
        .enumerate()
        .for_each(|(c, (oi, od))| {
            let mut q = 0;
            for i in c * ROW_CHUNK..((c + 1) * ROW_CHUNK).min(n) {
                let (lo, l) = (row_start(i), left(i));
                for (&j, &aij) in idx[lo..lo + l].iter().zip(&val[lo..lo + l]) {
                    oi[q] = j;
                    od[q] = -(omega * aij / d[j as usize]);
                    q += 1;
                }
                oi[q] = i as u32;
                od[q] = 1.0;
                q += 1;
            }
        });
    CsrMatrix::try_from_parts(n, n, indptr, indices, data).map_err(sparse_err)
}

/// `K^T diag(s)` of a first-order `k` built from `a` ([`ssor_k1`]), without transposing, when
/// `a`'s pattern is symmetric: row `i` of K^T then holds the diagonal and the columns of row `i`
/// of `a` right of it, and the value of entry `(i, j)` is K's `(j, i)`, found by a search in
/// row `j` of K, times `s[j]`. A transpose scatters every entry through per-thread column
/// counts (`threads * n` words); this reads K's short rows instead. `None` when the pattern is
/// not symmetric (an entry is not found in K, or the counts differ: with both ways found, the
/// entries correspond one to one), for the caller to transpose. Equal to `k.transpose()` with
/// its columns scaled by [`scale_columns`] (a test compares them).
pub(super) fn ssor_kt1(
    a: &CsrMatrix,
    k: &CsrMatrix,
    s: &[f64],
) -> Result<Option<CsrMatrix>, PcgError> {
    let n = a.nrows();
    let (ptr, idx) = (a.indptr(), a.indices());
    // Entries of row i right of the diagonal.
    let right = |i: usize| {
        let row = &idx[ptr[i] as usize..ptr[i + 1] as usize];
        row.len() - row.partition_point(|&j| (j as usize) <= i)
    };
    let (indptr, chunk_nnz) = row_pointer(n, |i| right(i) + 1)?;
    let nnz: usize = chunk_nnz.iter().sum();
    if nnz != k.nnz() {
        return Ok(None);
    }
    let (kp, ki, kv) = (k.indptr(), k.indices(), k.data());
    // K's entry (j, i), if stored.
    let k_at = |j: usize, i: u32| {
        let (lo, hi) = (kp[j] as usize, kp[j + 1] as usize);
        ki[lo..hi].binary_search(&i).ok().map(|q| kv[lo + q])
    };
    let mut indices = vec![0u32; nnz];
    let mut data = vec![0f64; nnz];
    let found: Result<(), ()> = chunk_slices(&mut indices, &mut data, &chunk_nnz)
        .into_par_iter()
        .enumerate()
        .try_for_each(|(c, (oi, od))| {
            let mut q = 0;
            for i in c * ROW_CHUNK..((c + 1) * ROW_CHUNK).min(n) {
                let hi = ptr[i + 1] as usize;
                let first = std::iter::once(i as u32);
                for j in first.chain(idx[hi - right(i)..hi].iter().copied()) {
                    oi[q] = j;
                    od[q] = k_at(j as usize, i as u32).ok_or(())? * s[j as usize];
                    q += 1;
                }
            }
            Ok(())
        });
    if found.is_err() {
        return Ok(None);
    }
    CsrMatrix::try_from_parts(n, n, indptr, indices, data)
        .map(Some)
        .map_err(sparse_err)
}

/// Scales column `j` of `m` by `s[j]`, in place (`K^T` into `K^T diag(s)`).
pub(super) fn scale_columns(m: &mut CsrMatrix, s: &[f64]) -> Result<(), PcgError> {
    let mut v: Vec<f64> = m
        .data()
        .par_iter()
        .zip(m.indices().par_iter())
        .map(|(&x, &j)| x * s[j as usize])
        .collect();
    m.swap_values(&mut v).map_err(sparse_err)
}

/// Recomputes the values of `k` (built by [`ssor_k`] from a matrix of `a`'s pattern) for `a`.
pub(super) fn ssor_k_values(
    k: &mut CsrMatrix,
    a: &CsrMatrix,
    d: &[f64],
    omega: f64,
    order: u8,
) -> Result<(), PcgError> {
    if order == 1 {
        return fill_by_rows(k, ssor_k_rows(a, d, omega, None));
    }
    let x = ssor_x(a, d, omega)?;
    fill_by_rows(k, ssor_k_rows(a, d, omega, Some(&x)))
}

/// The rows of `K^T diag(s) K`, given `kt`, a matrix with the pattern of `K^T` (its values are
/// not read: they may be `K^T`'s or `K^T diag(s)`'s). Entry (i, j) is the sum over k of
/// `(K_ki K_kj) s_k`, with k ascending, `K_ki` read from row k of `K`; the same expression in
/// the same order for (j, i) makes the result exactly symmetric.
pub(super) fn gram_rows<'a>(
    kt: &'a CsrMatrix,
    k: &'a CsrMatrix,
    s: &'a [f64],
) -> impl Fn(usize, &mut HashAccumulator, &mut Vec<(u32, f64)>) + Sync + 'a {
    move |i, acc, out| {
        let ck = kt.row(i).0;
        let bound = ck.iter().map(|&q| k.row_len(q as usize)).sum::<usize>();
        acc.reset(bound);
        for &q in ck {
            let sq = s[q as usize];
            let (cj, vj) = k.row(q as usize);
            // K^T's pattern is K's transposed, so (q, i) is stored in row q.
            let Ok(at) = cj.binary_search(&(i as u32)) else {
                continue;
            };
            let kqi = vj[at];
            for (&j, &kqj) in cj.iter().zip(vj) {
                acc.add(j, (kqi * kqj) * sq);
            }
        }
        acc.drain_sorted(out);
    }
}

/// Appends to `cols` the sorted columns of row `i` of the pattern of `K^T diag(s) K`, given
/// the column patterns of the rows of `K^T` (`kt_row`) and of `K` (`k_row`): the union of the
/// patterns of the rows q of K with `K_qi` stored.
fn gram_pattern_row<'m, R, C>(
    kt_row: &R,
    k_row: &C,
    i: usize,
    acc: &mut HashAccumulator,
    cols: &mut Vec<u32>,
) where
    R: Fn(usize) -> &'m [u32],
    C: Fn(usize) -> &'m [u32],
{
    let ck = kt_row(i);
    let rows = || ck.iter().map(|&q| k_row(q as usize));
    // The columns of row i lie between the first and the last column of these rows.
    let first = rows().filter_map(|c| c.first()).min();
    let last = rows().filter_map(|c| c.last()).max();
    let (Some(&first), Some(&last)) = (first, last) else {
        return;
    };
    let width = (last - first) as usize + 1;
    if width <= PATTERN_WINDOW {
        // A stamp per column of the window: cheaper than hashing each column.
        if acc.marks.len() < width {
            acc.marks.resize(width, 0);
        }
        let stamp = i as u32 + 1;
        acc.used.clear();
        for c in rows() {
            for &j in c {
                let m = &mut acc.marks[(j - first) as usize];
                if *m != stamp {
                    *m = stamp;
                    acc.used.push(u64::from(j));
                }
            }
        }
        acc.used.sort_unstable();
        cols.extend(acc.used.iter().map(|&j| j as u32));
        acc.used.clear();
        return;
    }
    acc.reset(rows().map(<[u32]>::len).sum());
    for c in rows() {
        for &j in c {
            acc.insert(j);
        }
    }
    acc.drain_sorted_columns(cols);
}

/// The pattern of `K^T diag(s) K` (values 1.0), given `kt = K^T` (rows by
/// [`gram_pattern_row`]).
pub(super) fn gram_pattern(kt: &CsrMatrix, k: &CsrMatrix) -> Result<CsrMatrix, PcgError> {
    let n = k.ncols();
    let (kt_row, k_row) = (|i: usize| kt.row(i).0, |q: usize| k.row(q).0);
    fill_pattern_only(n, n, |i, acc, out| {
        let mut cols = std::mem::take(&mut acc.cols);
        cols.clear();
        gram_pattern_row(&kt_row, &k_row, i, acc, &mut cols);
        out.extend(cols.iter().map(|&j| (j, 1.0)));
        acc.cols = cols;
    })
}

/// Folds the rows of the pattern of `K^T diag(s) K` for an `n`-row `K` whose rows' column
/// patterns `k_row` gives, and those of `K^T`, `kt_row` (the rows [`gram_pattern`] stores),
/// without keeping them: chunks of [`ROW_CHUNK`] consecutive rows run in parallel, each row's
/// sorted columns go to `row(state, i, cols)` in ascending order of `i` within a state, and
/// the states of consecutive row ranges are merged by `merge(lower, upper)`.
pub fn fold_gram_pattern<'m, R, C, T, I, F, M>(
    n: usize,
    kt_row: R,
    k_row: C,
    init: I,
    row: F,
    merge: M,
) -> T
where
    R: Fn(usize) -> &'m [u32] + Sync,
    C: Fn(usize) -> &'m [u32] + Sync,
    T: Send,
    I: Fn() -> T + Sync + Send,
    F: Fn(&mut T, usize, &[u32]) + Sync + Send,
    M: Fn(T, T) -> T + Sync + Send,
{
    (0..n.div_ceil(ROW_CHUNK))
        .into_par_iter()
        .fold(
            || (init(), HashAccumulator::default(), Vec::new()),
            |(mut state, mut acc, mut cols), c| {
                for i in c * ROW_CHUNK..((c + 1) * ROW_CHUNK).min(n) {
                    cols.clear();
                    gram_pattern_row(&kt_row, &k_row, i, &mut acc, &mut cols);
                    row(&mut state, i, &cols);
                }
                (state, acc, cols)
            },
        )
        .map(|(state, _, _)| state)
        .reduce(&init, &merge)
}

/// `K^T diag(s) K`, given `kt = K^T` (see [`gram_rows`]).
pub(super) fn gram_product(
    kt: &CsrMatrix,
    k: &CsrMatrix,
    s: &[f64],
) -> Result<CsrMatrix, PcgError> {
    let n = k.ncols();
    build_by_rows(n, n, gram_rows(kt, k, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_accumulator_sums_in_order_and_sorts() {
        let mut acc = HashAccumulator::default();
        acc.reset(3);
        for (c, v) in [(7, 1.0), (2, 2.0), (7, 3.0), (0, 4.0), (2, -2.0)] {
            acc.add(c, v);
        }
        let mut out = vec![];
        acc.drain_sorted(&mut out);
        assert_eq!(out, vec![(0, 4.0), (2, 0.0), (7, 4.0)]);
        // Reused: starts empty.
        acc.reset(1);
        acc.add(5, 1.0);
        out.clear();
        acc.drain_sorted(&mut out);
        assert_eq!(out, vec![(5, 1.0)]);
    }

    /// The in-place first-order K is the row builder's, bit for bit: stencils, an irregular
    /// random matrix, rows with no entry left of the diagonal, and sizes around the chunk.
    #[test]
    fn first_order_k_in_place_is_the_row_builders() {
        use autopcg_sparse::families;
        let cases = [
            families::poisson3d_7pt(13, 11, 17).unwrap(),
            families::poisson2d_5pt(ROW_CHUNK + 1, 3).unwrap(),
            families::random_powerlaw_spd(3 * ROW_CHUNK - 5, 9.0, 1.3, 11).unwrap(),
            CsrMatrix::identity(ROW_CHUNK).unwrap(),
            crate::precond::poisson1d(1),
        ];
        for a in &cases {
            let d = a.diagonal();
            for omega in [1.0, 0.7] {
                let n = a.nrows();
                let want = build_by_rows(n, n, ssor_k_rows(a, &d, omega, None)).unwrap();
                let got = ssor_k1(a, &d, omega).unwrap();
                assert_eq!(got.indptr(), want.indptr());
                assert_eq!(got.indices(), want.indices());
                let bits = |m: &CsrMatrix| m.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want));
                // Its transpose with scaled columns, found without transposing.
                let s: Vec<f64> = d.iter().map(|&v| 0.9 / v).collect();
                let kt = ssor_kt1(a, &got, &s).unwrap().expect("a symmetric pattern");
                let mut want = got.transpose();
                scale_columns(&mut want, &s).unwrap();
                assert_eq!(kt.indptr(), want.indptr());
                assert_eq!(kt.indices(), want.indices());
                assert_eq!(bits(&kt), bits(&want));
            }
        }
    }

    /// A pattern that is not symmetric is left to the transpose: an entry whose mirror is
    /// missing (in either triangle), or two in one triangle against one in the other.
    #[test]
    fn first_order_kt_refuses_an_asymmetric_pattern() {
        let tri = |r: &[u32], c: &[u32]| {
            let (mut rr, mut cc) = ((0..4).collect::<Vec<u32>>(), (0..4).collect::<Vec<u32>>());
            rr.extend(r);
            cc.extend(c);
            let v = vec![1.0; rr.len()];
            CsrMatrix::from_triplets(4, 4, &rr, &cc, &v).unwrap()
        };
        for a in [
            tri(&[3], &[0]),
            tri(&[0], &[3]),
            tri(&[3, 2, 0], &[0, 1, 3]),
            tri(&[3, 0, 1], &[1, 3, 3]),
            // As many entries each side, one without its mirror each side.
            tri(&[3, 1], &[0, 2]),
        ] {
            let k = ssor_k1(&a, &a.diagonal(), 1.0).unwrap();
            assert_eq!(ssor_kt1(&a, &k, &[1.0; 4]).unwrap(), None);
        }
        let sym = tri(&[3, 0], &[0, 3]);
        let k = ssor_k1(&sym, &sym.diagonal(), 1.0).unwrap();
        assert_eq!(ssor_kt1(&sym, &k, &[1.0; 4]).unwrap(), Some(k.transpose()));
    }
}
