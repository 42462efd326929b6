//! Assembly of the CSR matrix from the triplets of a coordinate section, in file order: in place
//! when the entries come by row (or, for a symmetric file, by column), through
//! [`CsrMatrix::from_triplets`] otherwise; duplicates are summed in file order either way, so the
//! result is bit for bit the same whatever the order of the entries and the number of threads.
use rayon::prelude::*;

use super::Triplets;
use crate::{CsrMatrix, Index, SparseError};

/// The `(start, len)` pieces of `src`, one after the other, copied in parallel.
pub(super) fn gather<T: Copy + Default + Send + Sync>(
    src: &[T],
    pieces: &[(usize, usize)],
    total: usize,
) -> Vec<T> {
    // Zeroed allocations are fresh pages from the system: no extra pass over them.
    let mut out = vec![T::default(); total];
    let mut windows = Vec::with_capacity(pieces.len());
    let mut rest = &mut out[..];
    for &(start, n) in pieces {
        let (head, tail) = rest.split_at_mut(n);
        windows.push((head, start));
        rest = tail;
    }
    windows
        .into_par_iter()
        .for_each(|(w, start)| w.copy_from_slice(&src[start..start + w.len()]));
    out
}

/// Joins the chunks' triplets in order (in parallel: this moves 16 bytes per entry).
pub(super) fn concat(mut parts: Vec<Triplets>) -> Triplets {
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    let total: usize = parts.iter().map(|t| t.vals.len()).sum();
    let upper = parts.iter().flat_map(|t| t.upper.iter().copied()).collect();
    let mut rows = vec![0u32; total];
    let mut cols = vec![0u32; total];
    let mut vals = vec![0f64; total];
    let mut windows = Vec::with_capacity(parts.len());
    {
        let (mut r, mut c, mut v) = (&mut rows[..], &mut cols[..], &mut vals[..]);
        for t in &parts {
            let n = t.vals.len();
            let (r0, r1) = r.split_at_mut(n);
            let (c0, c1) = c.split_at_mut(n);
            let (v0, v1) = v.split_at_mut(n);
            windows.push((r0, c0, v0));
            (r, c, v) = (r1, c1, v1);
        }
    }
    windows
        .into_par_iter()
        .zip(parts.par_iter())
        .for_each(|((r, c, v), t)| {
            r.copy_from_slice(&t.rows);
            c.copy_from_slice(&t.cols);
            v.copy_from_slice(&t.vals);
        });
    Triplets {
        rows,
        cols,
        vals,
        upper,
    }
}

/// Builds the CSR matrix from triplets in file order; the same matrix as
/// [`CsrMatrix::from_triplets`] gives, bit for bit.
///
/// Triplets already ordered by row (as CSR writers and row-major tools emit them) are assembled
/// in place: each row's entries are sorted by column, stably, and repeated positions are summed
/// in file order (as `from_triplets` sums them); the arrays then become the CSR arrays without a
/// copy. This skips the key array, atomics and scatter that general assembly needs. Triplets in
/// any other order go through `from_triplets`.
pub(super) fn assemble(
    nrows: usize,
    ncols: usize,
    rows: Vec<Index>,
    mut cols: Vec<Index>,
    mut vals: Vec<f64>,
) -> Result<CsrMatrix, SparseError> {
    if few(vals.len(), nrows) {
        return from_few(nrows, ncols, &rows, &cols, &vals);
    }
    let nnz = vals.len();
    let by_row = nnz < (u32::MAX - 1) as usize
        && rows.last().is_none_or(|&r| (r as usize) < nrows)
        && rows.par_windows(2).all(|w| w[0] <= w[1]);
    if !by_row {
        return CsrMatrix::from_triplets(nrows, ncols, &rows, &cols, &vals);
    }
    // Row pointers: one binary search per block of rows, then a linear walk.
    const PTR_BLOCK: usize = 1 << 14;
    let mut indptr = vec![0 as Index; nrows + 1];
    indptr
        .par_chunks_mut(PTR_BLOCK)
        .enumerate()
        .for_each(|(b, ptr)| {
            let r0 = b * PTR_BLOCK;
            let mut k = rows.partition_point(|&r| (r as usize) < r0);
            for (i, p) in (r0..).zip(ptr.iter_mut()) {
                while k < nnz && (rows[k] as usize) < i {
                    k += 1;
                }
                *p = k as Index;
            }
        });
    drop(rows);
    // Blocks of rows, each owning its contiguous part of the column and value arrays and of
    // the row lengths after merging repeated positions.
    const BLOCK: usize = 4096;
    let mut lens = vec![0 as Index; nrows];
    let mut blocks = Vec::with_capacity(nrows / BLOCK + 1);
    {
        let (mut c, mut v, mut l) = (&mut cols[..], &mut vals[..], &mut lens[..]);
        for r0 in (0..nrows).step_by(BLOCK) {
            let r1 = (r0 + BLOCK).min(nrows);
            let len = (indptr[r1] - indptr[r0]) as usize;
            let (c0, c1) = c.split_at_mut(len);
            let (v0, v1) = v.split_at_mut(len);
            let (l0, l1) = l.split_at_mut(r1 - r0);
            blocks.push((r0..r1, c0, v0, l0));
            (c, v, l) = (c1, v1, l1);
        }
    }
    let kept: Vec<(usize, usize)> = blocks
        .into_par_iter()
        .map(|(rs, c, v, l)| {
            let base = indptr[rs.start] as usize;
            let mut w = 0;
            for (i, li) in rs.zip(l.iter_mut()) {
                let (a, b) = (indptr[i] as usize - base, indptr[i + 1] as usize - base);
                sort_row(&mut c[a..b], &mut v[a..b]);
                let start = w;
                for k in a..b {
                    if w > start && c[w - 1] == c[k] {
                        v[w - 1] += v[k];
                    } else {
                        c[w] = c[k];
                        v[w] = v[k];
                        w += 1;
                    }
                }
                *li = (w - start) as Index;
            }
            (c.len(), w)
        })
        .collect();
    let total: usize = kept.iter().map(|k| k.1).sum();
    if total != nnz {
        // Repeated positions were merged: close the gaps they left and recount the rows.
        let mut acc: Index = 0;
        for (p, &l) in indptr.iter_mut().zip(&lens) {
            *p = acc;
            acc += l;
        }
        indptr[nrows] = acc;
        let (mut src, mut dst) = (0, 0);
        for &(len, n) in &kept {
            if src != dst {
                cols.copy_within(src..src + n, dst);
                vals.copy_within(src..src + n, dst);
            }
            src += len;
            dst += n;
        }
        cols.truncate(total);
        vals.truncate(total);
    }
    CsrMatrix::try_from_parts(nrows, ncols, indptr, cols, vals)
}

/// Sorts one row's entries by column, stably (equal columns keep their order).
fn sort_row(c: &mut [Index], v: &mut [f64]) {
    if c.windows(2).all(|w| w[0] < w[1]) {
        return;
    }
    if c.len() <= 32 {
        for k in 1..c.len() {
            let (ck, vk) = (c[k], v[k]);
            let mut m = k;
            while m > 0 && c[m - 1] > ck {
                c[m] = c[m - 1];
                v[m] = v[m - 1];
                m -= 1;
            }
            c[m] = ck;
            v[m] = vk;
        }
    } else {
        let mut perm: Vec<usize> = (0..c.len()).collect();
        perm.sort_by_key(|&k| (c[k], k));
        let cs: Vec<Index> = perm.iter().map(|&k| c[k]).collect();
        let vs: Vec<f64> = perm.iter().map(|&k| v[k]).collect();
        c.copy_from_slice(&cs);
        v.copy_from_slice(&vs);
    }
}

/// The lower triangle of `a` (diagonal included) and its mirror: an exactly symmetric matrix.
pub(super) fn mirror_lower(a: &CsrMatrix) -> Result<CsrMatrix, SparseError> {
    let n = a.nrows();
    if few(a.nnz(), n) {
        let lower: Vec<(Index, Index, f64)> = (0..n)
            .into_par_iter()
            .with_min_len(1 << 14)
            .flat_map_iter(|i| {
                let (c, v) = a.row(i);
                c.iter()
                    .zip(v)
                    .take_while(move |(&j, _)| j as usize <= i)
                    .map(move |(&j, &x)| (i as Index, j, x))
            })
            .collect();
        let (rows, cols, vals): (Vec<Index>, Vec<Index>, Vec<f64>) = (
            lower.iter().map(|t| t.0).collect(),
            lower.iter().map(|t| t.1).collect(),
            lower.iter().map(|t| t.2).collect(),
        );
        return symmetric_from_few(n, &rows, &cols, &vals);
    }
    let l = a.lower_triangle();
    join_triangles(&l, &l.transpose())
}

/// The symmetric matrix whose lower triangle (diagonal included) the triplets give, in file
/// order: bit for bit what `from_triplets` builds from the triplets and their mirrors.
///
/// When the entries come by row (row-major writers) the lower triangle is assembled in place and
/// transposed; when they come by column (the usual order of symmetric collections) the same is
/// done with the upper triangle. Any other order is mirrored and goes through `from_triplets`.
pub(super) fn symmetric_from_lower(
    n: usize,
    rows: Vec<Index>,
    cols: Vec<Index>,
    vals: Vec<f64>,
) -> Result<CsrMatrix, SparseError> {
    if few(vals.len(), n) {
        return symmetric_from_few(n, &rows, &cols, &vals);
    }
    let ordered = |x: &[Index]| x.par_windows(2).all(|w| w[0] <= w[1]);
    if ordered(&rows) {
        let l = assemble(n, n, rows, cols, vals)?;
        return join_triangles(&l, &l.transpose());
    }
    if ordered(&cols) {
        // Read by column, the lower triangle is the upper one read by row.
        let u = assemble(n, n, cols, rows, vals)?;
        return join_triangles(&u.transpose(), &u);
    }
    let block = 1 << 16;
    let parts: Vec<Triplets> = (0..vals.len().div_ceil(block))
        .into_par_iter()
        .map(|b| {
            let mut t = Triplets::default();
            for k in b * block..((b + 1) * block).min(vals.len()) {
                t.push(rows[k], cols[k], vals[k], true);
            }
            t
        })
        .collect();
    let t = concat(parts);
    CsrMatrix::from_triplets(n, n, &t.rows, &t.cols, &t.vals)
}

/// Joins a lower triangle `l` (diagonal included) and the upper triangle `u` (its transpose):
/// row `i` is row `i` of `l` followed by row `i` of `u` without its diagonal, already in column
/// order.
fn join_triangles(l: &CsrMatrix, u: &CsrMatrix) -> Result<CsrMatrix, SparseError> {
    let n = l.nrows();
    let upper_len = |i: usize| {
        let (c, _) = u.row(i);
        c.len() - usize::from(c.first() == Some(&(i as Index)))
    };
    let lens: Vec<usize> = (0..n)
        .into_par_iter()
        .with_min_len(4096)
        .map(|i| l.row_len(i) + upper_len(i))
        .collect();
    let total: usize = lens.iter().sum();
    if total >= (u32::MAX - 1) as usize {
        return Err(SparseError::TooLarge(format!(
            "{n} x {n} with {total} nonzeros once mirrored (must be below {})",
            u32::MAX - 1
        )));
    }
    let mut indptr = Vec::with_capacity(n + 1);
    indptr.push(0 as Index);
    let mut acc = 0;
    for &len in &lens {
        acc += len as Index;
        indptr.push(acc);
    }
    let mut idx = vec![0 as Index; total];
    let mut val = vec![0f64; total];
    const BLOCK: usize = 4096;
    let mut blocks = Vec::with_capacity(n / BLOCK + 1);
    {
        let (mut c, mut v) = (&mut idx[..], &mut val[..]);
        for r0 in (0..n).step_by(BLOCK) {
            let r1 = (r0 + BLOCK).min(n);
            let len = (indptr[r1] - indptr[r0]) as usize;
            let (c0, c1) = c.split_at_mut(len);
            let (v0, v1) = v.split_at_mut(len);
            blocks.push((r0..r1, c0, v0));
            (c, v) = (c1, v1);
        }
    }
    blocks.into_par_iter().for_each(|(rs, c, v)| {
        let mut w = 0;
        for i in rs {
            let (lc, lv) = l.row(i);
            let (uc, uv) = u.row(i);
            let skip = usize::from(uc.first() == Some(&(i as Index)));
            for (&j, &x) in lc.iter().zip(lv).chain(uc[skip..].iter().zip(&uv[skip..])) {
                c[w] = j;
                v[w] = x;
                w += 1;
            }
        }
    });
    CsrMatrix::try_from_parts(n, n, indptr, idx, val)
}

/// A dense `array` matrix from its values (column-major; only the lower triangle for
/// `symmetric`), every value stored, zeros included.
pub(super) fn dense(
    nrows: usize,
    ncols: usize,
    symmetric: bool,
    vals: &[f64],
) -> Result<CsrMatrix, SparseError> {
    let expected = if symmetric {
        nrows.checked_mul(nrows + 1).map(|x| x / 2)
    } else {
        nrows.checked_mul(ncols)
    };
    if expected != Some(vals.len()) || (symmetric && nrows != ncols) {
        return Err(SparseError::Dimension(format!(
            "{} values for a {nrows} x {ncols} dense matrix",
            vals.len()
        )));
    }
    let mut t = Triplets::default();
    let mut k = 0;
    for j in 0..ncols {
        let first = if symmetric { j } else { 0 };
        for i in first..nrows {
            t.push(i as Index, j as Index, vals[k], symmetric);
            k += 1;
        }
    }
    CsrMatrix::from_triplets(nrows, ncols, &t.rows, &t.cols, &t.vals)
}

/// Whether a matrix has so few entries for its rows (fewer than one per 8 rows) that the rows,
/// not the entries, decide the cost: then it is assembled by [`from_few`], whose only row-sized
/// array is the row pointer.
pub(super) fn few(nnz: usize, nrows: usize) -> bool {
    nnz < nrows / 8
}

/// The CSR matrix of triplets far fewer than its rows: the triplets are sorted by position,
/// stably (so repeated positions keep file order and are summed in it, as
/// [`CsrMatrix::from_triplets`] sums them: the result is the same bit for bit), and the row
/// pointer is counted in one pass. It needs the row pointer and what the entries take, where the
/// other paths hold several row-sized work arrays (a matrix of 10^8 rows and 5 entries took
/// seconds and gigabytes).
pub(super) fn from_few(
    nrows: usize,
    ncols: usize,
    rows: &[Index],
    cols: &[Index],
    vals: &[f64],
) -> Result<CsrMatrix, SparseError> {
    let nnz = vals.len();
    let mut perm: Vec<usize> = (0..nnz).collect();
    perm.par_sort_by_key(|&k| (rows[k], cols[k]));
    let mut out_rows: Vec<Index> = Vec::with_capacity(nnz);
    let mut idx: Vec<Index> = Vec::with_capacity(nnz);
    let mut val: Vec<f64> = Vec::with_capacity(nnz);
    for &k in &perm {
        let (r, c, v) = (rows[k], cols[k], vals[k]);
        match (out_rows.last(), idx.last(), val.last_mut()) {
            (Some(&pr), Some(&pc), Some(pv)) if (pr, pc) == (r, c) => *pv += v,
            _ => {
                out_rows.push(r);
                idx.push(c);
                val.push(v);
            }
        }
    }
    drop(perm);
    // Zeroed allocations are fresh pages from the system: only the rows touched cost.
    let mut indptr = vec![0 as Index; nrows + 1];
    for &r in &out_rows {
        indptr[r as usize + 1] += 1;
    }
    let mut acc: Index = 0;
    for p in indptr.iter_mut() {
        acc += *p;
        *p = acc;
    }
    CsrMatrix::try_from_parts(nrows, ncols, indptr, idx, val)
}

/// [`from_few`] for the symmetric matrix whose lower triangle the triplets give: each entry
/// followed by its mirror, as [`symmetric_from_lower`] builds it.
fn symmetric_from_few(
    n: usize,
    rows: &[Index],
    cols: &[Index],
    vals: &[f64],
) -> Result<CsrMatrix, SparseError> {
    let mut t = Triplets::default();
    for ((&i, &j), &v) in rows.iter().zip(cols).zip(vals) {
        t.push(i, j, v, true);
    }
    from_few(n, n, &t.rows, &t.cols, &t.vals)
}
