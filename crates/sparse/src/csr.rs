//! CSR, the canonical format: a thin wrapper over `sprs::CsMatI<f64, u32, u32>` (32-bit column
//! indices and row pointers, sorted columns, no duplicate entries) with the parallel operations
//! the rest of autopcg needs: building from unsorted triplets, SpMV, diagonal, transpose and a
//! symmetry check.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rayon::prelude::*;
use sprs::CsMatI;

use crate::{Index, SparseError};

/// Compressed sparse row matrix of `f64` with 32-bit indices.
///
/// Invariants (checked on construction): `indptr` has `nrows + 1` non-decreasing entries starting
/// at 0, column indices are in range and strictly increasing inside each row.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrMatrix {
    inner: CsMatI<f64, Index, Index>,
}

/// What [`CsrMatrix::diagonal_positions`] gives a row without a stored diagonal entry (no
/// position can be this large: see `check_fits`).
pub const NO_ENTRY: Index = u32::MAX;

/// Most parts a parallel transpose splits the rows into (each holds a count per column).
const MAX_TRANSPOSE_PARTS: usize = 64;

/// Entries per part of the parallel symmetry check's pass over the upper half (see
/// `CsrMatrix::symmetric_by_upper_half`): a few thousand binary searches, tens of
/// microseconds on one core, so that a matrix of 1e5 entries already spreads over the cores.
const SYMMETRY_PART_NNZ: usize = 1 << 13;

/// Columns per task when the parallel transpose turns counts into slots.
const TRANSPOSE_COL_BLOCK: usize = 1 << 14;

fn check_fits(nrows: usize, ncols: usize, nnz: usize) -> Result<(), SparseError> {
    // Keep one value free below u32::MAX so that it can serve as a padding sentinel.
    let lim = (u32::MAX - 1) as usize;
    if nrows > lim || ncols > lim || nnz > lim {
        return Err(SparseError::TooLarge(format!(
            "{nrows} x {ncols} with {nnz} nonzeros (each must be below {lim})"
        )));
    }
    Ok(())
}

/// True when CSR arrays of `nnz` values are well formed for `ncols` columns: the row pointer
/// starts at 0, never decreases and ends at the number of columns stored, which is `nnz`; in
/// every row the columns strictly increase and stay below `ncols`. Checked by all threads, in
/// chunks of rows (the check of sprs runs on one thread, and a large matrix is built often:
/// a preconditioner's factors, a transpose).
fn well_formed(ncols: usize, indptr: &[Index], indices: &[Index], nnz: usize) -> bool {
    const ROWS: usize = 8192;
    let n = indptr.len().saturating_sub(1);
    if indptr.first() != Some(&0) || indptr[n] as usize != indices.len() || indices.len() != nnz {
        return false;
    }
    (0..n.div_ceil(ROWS)).into_par_iter().all(|c| {
        (c * ROWS..((c + 1) * ROWS).min(n)).all(|i| {
            let (lo, hi) = (indptr[i] as usize, indptr[i + 1] as usize);
            lo <= hi
                && hi <= indices.len()
                && indices[lo..hi].windows(2).all(|w| w[0] < w[1])
                && indices[lo..hi].last().is_none_or(|&j| (j as usize) < ncols)
        })
    })
}

impl CsrMatrix {
    /// Builds a matrix from raw CSR arrays, validating the structure.
    pub fn try_from_parts(
        nrows: usize,
        ncols: usize,
        indptr: Vec<Index>,
        indices: Vec<Index>,
        data: Vec<f64>,
    ) -> Result<Self, SparseError> {
        check_fits(nrows, ncols, data.len())?;
        if indptr.len() != nrows + 1 {
            return Err(SparseError::Structure(format!(
                "row pointer has {} entries, expected {}",
                indptr.len(),
                nrows + 1
            )));
        }
        if well_formed(ncols, &indptr, &indices, data.len()) {
            // SAFETY: `well_formed` checked what `CsMatI::try_new` checks (row pointers from 0
            // to nnz, never decreasing; columns strictly increasing in each row and below
            // ncols; as many values as columns), and `check_fits` that u32 holds every index.
            return Ok(CsrMatrix {
                inner: unsafe {
                    CsMatI::new_unchecked(
                        sprs::CompressedStorage::CSR,
                        (nrows, ncols),
                        indptr,
                        indices,
                        data,
                    )
                },
            });
        }
        // Malformed: sprs's check says what is wrong.
        CsMatI::try_new((nrows, ncols), indptr, indices, data)
            .map(|inner| CsrMatrix { inner })
            .map_err(|(_, _, _, e)| SparseError::Structure(e.to_string()))
    }

    /// Wraps an existing `sprs` CSR matrix (must be in CSR storage).
    pub fn from_sprs(m: CsMatI<f64, Index, Index>) -> Result<Self, SparseError> {
        if !m.is_csr() {
            return Err(SparseError::Structure(
                "expected CSR storage, got CSC".into(),
            ));
        }
        check_fits(m.rows(), m.cols(), m.nnz())?;
        Ok(CsrMatrix { inner: m })
    }

    /// Builds a matrix from coordinate triplets in any order; duplicates are summed in the
    /// order they appear (so the result is deterministic). Runs in parallel.
    pub fn from_triplets(
        nrows: usize,
        ncols: usize,
        rows: &[Index],
        cols: &[Index],
        vals: &[f64],
    ) -> Result<Self, SparseError> {
        let nnz = vals.len();
        if rows.len() != nnz || cols.len() != nnz {
            return Err(SparseError::Dimension(format!(
                "triplet arrays of lengths {}, {}, {}",
                rows.len(),
                cols.len(),
                nnz
            )));
        }
        check_fits(nrows, ncols, nnz)?;
        if let Some(k) = (0..nnz)
            .into_par_iter()
            .find_any(|&k| rows[k] as usize >= nrows || cols[k] as usize >= ncols)
        {
            return Err(SparseError::Structure(format!(
                "entry ({}, {}) outside a {nrows} x {ncols} matrix (0-based)",
                rows[k], cols[k]
            )));
        }

        // 1. Row counts.
        let counts: Vec<AtomicU32> = (0..nrows).map(|_| AtomicU32::new(0)).collect();
        rows.par_iter().for_each(|&r| {
            counts[r as usize].fetch_add(1, Ordering::Relaxed);
        });
        let mut indptr = Vec::with_capacity(nrows + 1);
        indptr.push(0u32);
        let mut acc = 0u32;
        for c in &counts {
            acc += c.load(Ordering::Relaxed);
            indptr.push(acc);
        }
        // 2. Scatter (column, original position) into row slots; order inside a row is fixed
        //    afterwards by sorting on (column, position).
        let cursor: Vec<AtomicU32> = indptr[..nrows].iter().map(|&p| AtomicU32::new(p)).collect();
        let slots: Vec<AtomicU64> = (0..nnz).map(|_| AtomicU64::new(0)).collect();
        (0..nnz).into_par_iter().for_each(|k| {
            let s = cursor[rows[k] as usize].fetch_add(1, Ordering::Relaxed) as usize;
            slots[s].store(((cols[k] as u64) << 32) | k as u64, Ordering::Relaxed);
        });
        let mut keys: Vec<u64> = slots.into_iter().map(AtomicU64::into_inner).collect();
        drop(cursor);
        // 3. Sort each row by (column, position); count distinct columns.
        let mut row_keys: Vec<&mut [u64]> = Vec::with_capacity(nrows);
        {
            let mut rest: &mut [u64] = &mut keys;
            for i in 0..nrows {
                let len = (indptr[i + 1] - indptr[i]) as usize;
                let (head, tail) = rest.split_at_mut(len);
                row_keys.push(head);
                rest = tail;
            }
        }
        let distinct: Vec<u32> = row_keys
            .par_iter_mut()
            .map(|r| {
                r.sort_unstable();
                let mut d = 0u32;
                let mut last = u64::MAX;
                for &k in r.iter() {
                    let c = k >> 32;
                    if c != last {
                        d += 1;
                        last = c;
                    }
                }
                d
            })
            .collect();
        drop(row_keys);
        // 4. Compact, summing duplicates in input order.
        let mut new_ptr = Vec::with_capacity(nrows + 1);
        new_ptr.push(0u32);
        let mut acc = 0u32;
        for d in &distinct {
            acc += d;
            new_ptr.push(acc);
        }
        let out_nnz = acc as usize;
        let mut indices = vec![0u32; out_nnz];
        let mut data = vec![0f64; out_nnz];
        let mut outs: Vec<(&mut [u32], &mut [f64])> = Vec::with_capacity(nrows);
        {
            let (mut ri, mut rd): (&mut [u32], &mut [f64]) = (&mut indices, &mut data);
            for i in 0..nrows {
                let len = (new_ptr[i + 1] - new_ptr[i]) as usize;
                let (hi, ti) = ri.split_at_mut(len);
                let (hd, td) = rd.split_at_mut(len);
                outs.push((hi, hd));
                ri = ti;
                rd = td;
            }
        }
        outs.par_iter_mut().enumerate().for_each(|(i, (oi, od))| {
            let r = &keys[indptr[i] as usize..indptr[i + 1] as usize];
            let mut w = usize::MAX;
            let mut last = u64::MAX;
            for &k in r {
                let c = k >> 32;
                let v = vals[(k & 0xffff_ffff) as usize];
                if c != last {
                    w = w.wrapping_add(1);
                    oi[w] = c as u32;
                    od[w] = v;
                    last = c;
                } else {
                    od[w] += v;
                }
            }
        });
        drop(outs);
        // The arrays are valid by construction; sprs checks them again in linear time so that
        // a bug here cannot produce an invalid matrix.
        Self::try_from_parts(nrows, ncols, new_ptr, indices, data)
    }

    /// The n x n identity.
    pub fn identity(n: usize) -> Result<Self, SparseError> {
        check_fits(n, n, n)?;
        let idx: Vec<u32> = (0..n as u32).collect();
        let ptr: Vec<u32> = (0..=n as u32).collect();
        Self::try_from_parts(n, n, ptr, idx, vec![1.0; n])
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.inner.rows()
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.inner.cols()
    }
    /// Number of stored entries (explicit zeros included).
    pub fn nnz(&self) -> usize {
        self.inner.nnz()
    }
    /// Row pointer, `nrows + 1` entries.
    pub fn indptr(&self) -> &[Index] {
        self.inner.indptr().into_raw_storage()
    }
    /// Column index of each stored entry.
    pub fn indices(&self) -> &[Index] {
        self.inner.indices()
    }
    /// Value of each stored entry.
    pub fn data(&self) -> &[f64] {
        self.inner.data()
    }
    /// Mutable values (the structure stays fixed).
    pub fn data_mut(&mut self) -> &mut [f64] {
        self.inner.data_mut()
    }

    /// Exchanges the values with `values` (one per stored entry, in CSR order) without
    /// copying: afterwards the matrix holds the given values and `values` the old ones. A
    /// length other than [`CsrMatrix::nnz`] is an error and changes nothing.
    pub fn swap_values(&mut self, values: &mut Vec<f64>) -> Result<(), SparseError> {
        if values.len() != self.nnz() {
            return Err(SparseError::Structure(format!(
                "{} values for a matrix with {} stored entries",
                values.len(),
                self.nnz()
            )));
        }
        let shape = (self.nrows(), self.ncols());
        let inner = std::mem::replace(&mut self.inner, CsMatI::zero((0, 0)));
        let (indptr, indices, mut data) = inner.into_raw_storage();
        std::mem::swap(&mut data, values);
        // SAFETY: the row pointers and column indices are those of a checked matrix, unchanged,
        // and the new values have the same length, so every invariant still holds.
        self.inner = unsafe {
            CsMatI::new_unchecked(sprs::CompressedStorage::CSR, shape, indptr, indices, data)
        };
        Ok(())
    }
    /// A matrix of this pattern holding `values` (one per stored entry, in CSR order): the row
    /// pointers and column indices are copied by all threads (a large copy into new memory is
    /// mostly the first touch of its pages, which then runs in parallel too). A length other
    /// than [`CsrMatrix::nnz`] is an error.
    pub fn with_values(&self, values: Vec<f64>) -> Result<CsrMatrix, SparseError> {
        if values.len() != self.nnz() {
            return Err(SparseError::Structure(format!(
                "{} values for a matrix with {} stored entries",
                values.len(),
                self.nnz()
            )));
        }
        fn par_copy(src: &[Index]) -> Vec<Index> {
            const CHUNK: usize = 1 << 16;
            let mut dst = vec![0 as Index; src.len()];
            dst.par_chunks_mut(CHUNK)
                .zip(src.par_chunks(CHUNK))
                .for_each(|(d, s)| d.copy_from_slice(s));
            dst
        }
        let shape = (self.nrows(), self.ncols());
        let (indptr, indices) =
            rayon::join(|| par_copy(self.indptr()), || par_copy(self.indices()));
        // SAFETY: the row pointers and column indices are copies of a checked matrix's, and
        // the values have its length, so every invariant holds.
        Ok(CsrMatrix {
            inner: unsafe {
                CsMatI::new_unchecked(sprs::CompressedStorage::CSR, shape, indptr, indices, values)
            },
        })
    }

    /// For each row `i < min(nrows, ncols)`, the position of its diagonal entry among the
    /// stored entries (an index into [`CsrMatrix::data`]), or [`NO_ENTRY`] when row `i` stores
    /// none.
    pub fn diagonal_positions(&self) -> Vec<Index> {
        let (ptr, idx) = (self.indptr(), self.indices());
        let pos = |i: usize| {
            let lo = ptr[i] as usize;
            idx[lo..ptr[i + 1] as usize]
                .binary_search(&(i as Index))
                .map_or(NO_ENTRY, |k| (lo + k) as Index)
        };
        let m = self.nrows().min(self.ncols());
        if m <= 1 << 14 {
            (0..m).map(pos).collect()
        } else {
            (0..m).into_par_iter().with_min_len(4096).map(pos).collect()
        }
    }
    /// Column indices and values of row `i`.
    pub fn row(&self, i: usize) -> (&[Index], &[f64]) {
        let p = self.indptr();
        let (a, b) = (p[i] as usize, p[i + 1] as usize);
        (&self.indices()[a..b], &self.data()[a..b])
    }
    /// Length of row `i`.
    pub fn row_len(&self, i: usize) -> usize {
        let p = self.indptr();
        (p[i + 1] - p[i]) as usize
    }
    /// The underlying `sprs` matrix.
    pub fn as_sprs(&self) -> &CsMatI<f64, Index, Index> {
        &self.inner
    }
    /// Consumes the wrapper, returning the `sprs` matrix.
    pub fn into_sprs(self) -> CsMatI<f64, Index, Index> {
        self.inner
    }
    /// True when the matrix is square.
    pub fn is_square(&self) -> bool {
        self.nrows() == self.ncols()
    }

    /// Diagonal entries (0 where none is stored), length `min(nrows, ncols)`.
    pub fn diagonal(&self) -> Vec<f64> {
        let m = self.nrows().min(self.ncols());
        (0..m)
            .into_par_iter()
            .map(|i| {
                let (c, v) = self.row(i);
                match c.binary_search(&(i as u32)) {
                    Ok(k) => v[k],
                    Err(_) => 0.0,
                }
            })
            .collect()
    }

    /// Value at (i, j), 0 when not stored.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        let (c, v) = self.row(i);
        match c.binary_search(&(j as u32)) {
            Ok(k) => v[k],
            Err(_) => 0.0,
        }
    }

    /// The transpose, as a new CSR matrix (built in parallel; see
    /// [`CsrMatrix::transpose_with_sources`]).
    pub fn transpose(&self) -> CsrMatrix {
        self.transpose_with_sources().0
    }

    /// The transpose, and for each of its stored entries the position of the same entry in
    /// `self` (so that new values of the same pattern transpose as `t[p] = a[sources[p]]`).
    ///
    /// Built in parallel in three passes: each part (a range of rows with about the same
    /// number of entries) counts its entries per column; a prefix over columns, and inside each
    /// column over parts, gives every part its first slot in each row of the transpose; each
    /// part then writes its rows in order. Inside a row of the transpose the entries come by
    /// ascending source row whatever the number of parts, so the result is the same for any
    /// thread count: the serial counting transpose's.
    pub fn transpose_with_sources(&self) -> (CsrMatrix, Vec<Index>) {
        let (nrows, ncols, nnz) = (self.nrows(), self.ncols(), self.nnz());
        let ptr = self.indptr();
        let idx = self.indices();
        // One part per thread: the counts take `parts * ncols` words while they live.
        let parts = rayon::current_num_threads().clamp(1, MAX_TRANSPOSE_PARTS);
        // Part p holds rows bounds[p]..bounds[p + 1], split where the entries reach p / parts.
        let bounds: Vec<usize> = (0..=parts)
            .map(|p| {
                if p == parts {
                    return nrows;
                }
                let target = (p as u128 * nnz as u128 / parts as u128) as usize;
                ptr.partition_point(|&x| (x as usize) < target).min(nrows)
            })
            .collect();
        let entries = |p: usize| ptr[bounds[p]] as usize..ptr[bounds[p + 1]] as usize;
        // 1. Entries per column, per part.
        let mut cursor: Vec<Vec<Index>> = (0..parts)
            .into_par_iter()
            .map(|p| {
                let mut c = vec![0 as Index; ncols];
                for &j in &idx[entries(p)] {
                    c[j as usize] += 1;
                }
                c
            })
            .collect();
        // 2. Row pointer of the transpose, and each part's first slot in each of its rows.
        let nblocks = ncols.div_ceil(TRANSPOSE_COL_BLOCK);
        let block_totals: Vec<u64> = (0..nblocks)
            .into_par_iter()
            .map(|b| {
                let cols = b * TRANSPOSE_COL_BLOCK..((b + 1) * TRANSPOSE_COL_BLOCK).min(ncols);
                cursor
                    .iter()
                    .map(|c| c[cols.clone()].iter().map(|&x| u64::from(x)).sum::<u64>())
                    .sum()
            })
            .collect();
        let mut block_start = Vec::with_capacity(nblocks);
        let mut acc = 0u64;
        for t in &block_totals {
            block_start.push(acc);
            acc += t;
        }
        let mut t_ptr = vec![0 as Index; ncols + 1];
        {
            let mut by_block: Vec<Vec<&mut [Index]>> =
                (0..nblocks).map(|_| Vec::with_capacity(parts)).collect();
            for c in cursor.iter_mut() {
                for (b, s) in c.chunks_mut(TRANSPOSE_COL_BLOCK).enumerate() {
                    by_block[b].push(s);
                }
            }
            by_block
                .into_par_iter()
                .zip(t_ptr[1..].par_chunks_mut(TRANSPOSE_COL_BLOCK))
                .zip(block_start.par_iter())
                .for_each(|((mut counts, out), &first)| {
                    // Below u32::MAX: the total is nnz.
                    let mut next = first as Index;
                    for (j, o) in out.iter_mut().enumerate() {
                        for c in counts.iter_mut() {
                            let here = c[j];
                            c[j] = next;
                            next += here;
                        }
                        *o = next;
                    }
                });
        }
        // 3. Each part writes its entries, row by row: (source row, source position) per slot.
        let slots: Vec<AtomicU64> = (0..nnz)
            .into_par_iter()
            .map(|_| AtomicU64::new(0))
            .collect();
        cursor.par_iter_mut().enumerate().for_each(|(p, cur)| {
            for i in bounds[p]..bounds[p + 1] {
                let first = ptr[i] as usize;
                for (e, &j) in (first..).zip(&idx[first..ptr[i + 1] as usize]) {
                    let j = j as usize;
                    let s = cur[j] as usize;
                    cur[j] += 1;
                    slots[s].store(((i as u64) << 32) | e as u64, Ordering::Relaxed);
                }
            }
        });
        drop(cursor);
        let (t_idx, sources): (Vec<Index>, Vec<Index>) = slots
            .par_iter()
            .map(|s| {
                let v = s.load(Ordering::Relaxed);
                ((v >> 32) as Index, v as Index)
            })
            .unzip();
        drop(slots);
        let data = self.data();
        let t_data: Vec<f64> = sources.par_iter().map(|&e| data[e as usize]).collect();
        // The arrays are valid by construction; the structure is checked again (linear time)
        // so that a bug here cannot produce an invalid matrix.
        let t = Self::try_from_parts(ncols, nrows, t_ptr, t_idx, t_data)
            .expect("the transpose of a valid matrix is valid");
        (t, sources)
    }

    /// `y = A x`, in parallel over rows.
    ///
    /// Panics if the lengths do not match (a programming error, not user input).
    pub fn spmv(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.ncols(), "spmv: x has the wrong length");
        assert_eq!(y.len(), self.nrows(), "spmv: y has the wrong length");
        let ptr = self.indptr();
        let idx = self.indices();
        let val = self.data();
        y.par_iter_mut()
            .with_min_len(1024)
            .enumerate()
            .for_each(|(i, yi)| {
                let (a, b) = (ptr[i] as usize, ptr[i + 1] as usize);
                let mut s = 0.0;
                for k in a..b {
                    s += val[k] * x[idx[k] as usize];
                }
                *yi = s;
            });
    }

    /// `A x` as a new vector.
    pub fn mul_vec(&self, x: &[f64]) -> Vec<f64> {
        let mut y = vec![0.0; self.nrows()];
        self.spmv(x, &mut y);
        y
    }

    /// First entry (0-based row, col, a_ij, a_ji) whose mirror differs by more than
    /// `rel_tol * max(|a_ij|, |a_ji|)`, or `None` when the matrix is symmetric to that tolerance.
    /// A missing mirror counts as 0; explicit zeros need no mirror.
    pub fn first_asymmetry(&self, rel_tol: f64) -> Option<(usize, usize, f64, f64)> {
        self.first_asymmetry_of(self.data(), rel_tol)
    }

    /// [`CsrMatrix::first_asymmetry`] of this pattern holding `values` (one per stored entry,
    /// in CSR order; the caller checked their number) instead of its own.
    pub(crate) fn first_asymmetry_of(
        &self,
        values: &[f64],
        rel_tol: f64,
    ) -> Option<(usize, usize, f64, f64)> {
        if !self.is_square() {
            return Some((0, 0, f64::NAN, f64::NAN));
        }
        // The search of every entry's mirror, which finds the first at fault, runs only when
        // the upper half's pass cannot tell the matrix symmetric.
        if self.symmetric_by_upper_half(values, rel_tol, SYMMETRY_PART_NNZ) {
            return None;
        }
        self.first_asymmetry_searched(values, rel_tol)
    }

    /// [`CsrMatrix::first_asymmetry_of`] of a square matrix with each entry's mirror searched
    /// for, rows in parallel.
    fn first_asymmetry_searched(
        &self,
        val: &[f64],
        rel_tol: f64,
    ) -> Option<(usize, usize, f64, f64)> {
        let (ptr, idx) = (self.indptr(), self.indices());
        (0..self.nrows())
            .into_par_iter()
            .with_min_len(256)
            .filter_map(|i| {
                let (lo, hi) = (ptr[i] as usize, ptr[i + 1] as usize);
                for (&j, &a) in idx[lo..hi].iter().zip(&val[lo..hi]) {
                    let j = j as usize;
                    if j == i {
                        continue;
                    }
                    let (jlo, jhi) = (ptr[j] as usize, ptr[j + 1] as usize);
                    let b = match idx[jlo..jhi].binary_search(&(i as Index)) {
                        Ok(k) => val[jlo + k],
                        Err(_) => 0.0,
                    };
                    if (a - b).abs() > rel_tol * a.abs().max(b.abs()) {
                        return Some((i, j, a, b));
                    }
                }
                None
            })
            .min_by_key(|&(i, j, _, _)| (i, j))
    }

    /// Whether the square matrix is symmetric by the test of [`CsrMatrix::first_asymmetry`],
    /// found from the entries right of the diagonal alone when it is: each entry `(i, j)`,
    /// `j > i`, is tested against its mirror `(j, i)` (0 when absent), and the mirrors found
    /// are counted. When every test passes and the mirrors found are all the entries left of
    /// the diagonal (distinct entries have distinct mirrors), every entry has been tested.
    /// `false` when a test fails, or when some entry left of the diagonal is no mirror (an
    /// explicit zero may be one; the search decides). Rows go to threads in parts of about
    /// `part_nnz` entries, so that a small matrix with long rows still spreads.
    fn symmetric_by_upper_half(&self, val: &[f64], rel_tol: f64, part_nnz: usize) -> bool {
        let (ptr, idx) = (self.indptr(), self.indices());
        let (n, nnz) = (self.nrows(), self.nnz());
        let parts = nnz.div_ceil(part_nnz.max(1)).clamp(1, n.max(1));
        // Part p holds the rows starting from the first whose entries begin at or past
        // p * nnz / parts.
        let start = |p: usize| match p {
            p if p >= parts => n,
            p => ptr[..n]
                .partition_point(|&x| (x as u128) * (parts as u128) < (p as u128) * (nnz as u128)),
        };
        let differ = |a: f64, b: f64| (a - b).abs() > rel_tol * a.abs().max(b.abs());
        let counted = (0..parts)
            .into_par_iter()
            .map(|p| {
                let (mut mirrors, mut lower) = (0usize, 0usize);
                for i in start(p)..start(p + 1) {
                    let (lo, hi) = (ptr[i] as usize, ptr[i + 1] as usize);
                    let row = &idx[lo..hi];
                    let d = row.partition_point(|&j| (j as usize) < i);
                    lower += d;
                    let first_upper = d + usize::from(row.get(d) == Some(&(i as Index)));
                    for e in lo + first_upper..hi {
                        let j = idx[e] as usize;
                        let (jlo, jhi) = (ptr[j] as usize, ptr[j + 1] as usize);
                        let b = match idx[jlo..jhi].binary_search(&(i as Index)) {
                            Ok(k) => {
                                mirrors += 1;
                                val[jlo + k]
                            }
                            Err(_) => 0.0,
                        };
                        if differ(val[e], b) {
                            return None;
                        }
                    }
                }
                Some((mirrors, lower))
            })
            .try_reduce(|| (0, 0), |x, y| Some((x.0 + y.0, x.1 + y.1)));
        counted.is_some_and(|(mirrors, lower)| mirrors == lower)
    }

    /// Strict lower triangle plus the diagonal (`i >= j` entries), as a new matrix.
    pub fn lower_triangle(&self) -> CsrMatrix {
        self.filter(|i, j| j <= i)
    }

    /// Keeps the entries (i, j) for which `keep(i, j)` holds.
    pub fn filter(&self, keep: impl Fn(usize, usize) -> bool + Sync) -> CsrMatrix {
        let rows: Vec<(Vec<u32>, Vec<f64>)> = (0..self.nrows())
            .into_par_iter()
            .map(|i| {
                let (c, v) = self.row(i);
                c.iter()
                    .zip(v)
                    .filter(|(&j, _)| keep(i, j as usize))
                    .map(|(&j, &x)| (j, x))
                    .unzip()
            })
            .collect();
        let mut ptr = Vec::with_capacity(self.nrows() + 1);
        ptr.push(0u32);
        let mut acc = 0u32;
        for (c, _) in &rows {
            acc += c.len() as u32;
            ptr.push(acc);
        }
        let mut idx = Vec::with_capacity(acc as usize);
        let mut val = Vec::with_capacity(acc as usize);
        for (c, v) in rows {
            idx.extend_from_slice(&c);
            val.extend_from_slice(&v);
        }
        CsrMatrix {
            inner: CsMatI::new((self.nrows(), self.ncols()), ptr, idx, val),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parallel check accepts what sprs accepts and refuses, with sprs's message, what it
    /// refuses; rows span several chunks of the check.
    #[test]
    fn parts_are_checked_as_sprs_checks_them() {
        let parts = |p: &[u32], i: &[u32], nnz: usize, ncols: usize| {
            CsrMatrix::try_from_parts(p.len() - 1, ncols, p.to_vec(), i.to_vec(), vec![1.0; nnz])
        };
        assert!(parts(&[0, 2, 3], &[0, 2, 1], 3, 3).is_ok());
        assert!(parts(&[0, 0, 0], &[], 0, 3).is_ok());
        assert!(parts(&[0], &[], 0, 0).is_ok());
        for (p, i, nnz, ncols) in [
            (&[0u32, 2, 3][..], &[2u32, 0, 1][..], 3, 3), // unsorted row
            (&[0, 2, 3], &[0, 0, 1], 3, 3),               // repeated column
            (&[0, 2, 3], &[0, 3, 1], 3, 3),               // column out of range
            (&[0, 2, 1], &[0, 1], 2, 3),                  // decreasing row pointer
            (&[0, 2, 3], &[0, 1, 2], 2, 3),               // values and columns differ
            (&[1, 2, 3], &[0, 1, 2], 3, 3),               // pointer not from 0
        ] {
            let got = parts(p, i, nnz, ncols);
            assert!(
                matches!(got, Err(SparseError::Structure(_))),
                "{p:?} {i:?}: {got:?}"
            );
        }
        // A long matrix: one bad row in a late chunk of the check.
        let n = 50_000usize;
        let p: Vec<u32> = (0..=n as u32).collect();
        let mut i: Vec<u32> = (0..n as u32).collect();
        assert!(parts(&p, &i, n, n).is_ok());
        i[40_001] = n as u32;
        assert!(parts(&p, &i, n, n).is_err());
    }

    #[test]
    fn triplets_sum_duplicates_in_order_and_sort_columns() {
        let rows = [1, 0, 1, 0, 1];
        let cols = [2, 1, 0, 1, 2];
        let vals = [1.0, 2.0, 3.0, 4.0, 5.0];
        let a = CsrMatrix::from_triplets(2, 3, &rows, &cols, &vals).unwrap();
        assert_eq!(a.indptr(), &[0, 1, 3]);
        assert_eq!(a.indices(), &[1, 0, 2]);
        assert_eq!(a.data(), &[6.0, 3.0, 6.0]);
    }

    #[test]
    fn swap_values_exchanges_values_and_refuses_another_length() {
        let mut a =
            CsrMatrix::from_triplets(2, 3, &[0, 1, 1], &[1, 0, 2], &[1.0, 2.0, 3.0]).unwrap();
        let mut v = vec![7.0, 8.0, 9.0];
        a.swap_values(&mut v).unwrap();
        assert_eq!(a.data(), &[7.0, 8.0, 9.0]);
        assert_eq!(v, vec![1.0, 2.0, 3.0]);
        assert_eq!((a.nrows(), a.ncols()), (2, 3));
        assert_eq!(a.indptr(), &[0, 1, 3]);
        assert_eq!(a.indices(), &[1, 0, 2]);
        assert_eq!(a.get(1, 2), 9.0);
        let mut short = vec![1.0];
        assert!(a.swap_values(&mut short).is_err());
        assert_eq!(a.data(), &[7.0, 8.0, 9.0]);
        assert_eq!(short, vec![1.0]);
    }

    #[test]
    fn with_values_copies_the_pattern_and_keeps_the_original() {
        let a = CsrMatrix::from_triplets(2, 3, &[0, 1, 1], &[1, 0, 2], &[1.0, 2.0, 3.0]).unwrap();
        let b = a.with_values(vec![7.0, 8.0, 9.0]).unwrap();
        assert_eq!((b.nrows(), b.ncols()), (2, 3));
        assert_eq!((b.indptr(), b.indices()), (a.indptr(), a.indices()));
        assert_eq!(b.data(), &[7.0, 8.0, 9.0]);
        assert_eq!(b.get(1, 2), 9.0);
        assert_eq!(a.data(), &[1.0, 2.0, 3.0]);
        let e = a.with_values(vec![1.0]).unwrap_err().to_string();
        assert!(
            e.contains("1 values for a matrix with 3 stored entries"),
            "{e}"
        );
        // Larger than one copy chunk: every row pointer and index arrives.
        let n = 200_000;
        let r: Vec<u32> = (0..n).collect();
        let big = CsrMatrix::from_triplets(n as usize, n as usize, &r, &r, &vec![1.0; n as usize])
            .unwrap();
        let c = big.with_values(vec![2.0; n as usize]).unwrap();
        assert_eq!((c.indptr(), c.indices()), (big.indptr(), big.indices()));
    }

    #[test]
    fn diagonal_positions_point_at_the_diagonal_or_say_none() {
        let a =
            CsrMatrix::from_triplets(3, 4, &[0, 0, 1, 2, 2], &[0, 3, 2, 1, 2], &[1.0; 5]).unwrap();
        assert_eq!(a.diagonal_positions(), vec![0, NO_ENTRY, 4]);
        let big = CsrMatrix::identity(40_000).unwrap();
        let pos = big.diagonal_positions();
        assert_eq!(pos.len(), 40_000);
        assert!(pos.iter().enumerate().all(|(i, &p)| p as usize == i));
    }

    #[test]
    fn triplets_out_of_range_is_an_error() {
        let e = CsrMatrix::from_triplets(2, 2, &[0, 2], &[0, 0], &[1.0, 1.0]).unwrap_err();
        assert!(matches!(e, SparseError::Structure(_)), "{e}");
    }

    #[test]
    fn empty_rows_and_empty_matrix() {
        let a = CsrMatrix::from_triplets(3, 3, &[2], &[1], &[4.0]).unwrap();
        assert_eq!(a.indptr(), &[0, 0, 0, 1]);
        let e = CsrMatrix::from_triplets(0, 0, &[], &[], &[]).unwrap();
        assert_eq!(e.nnz(), 0);
    }

    #[test]
    fn spmv_transpose_diagonal_symmetry() {
        let a = CsrMatrix::from_triplets(
            3,
            3,
            &[0, 0, 1, 1, 2, 2],
            &[0, 1, 0, 1, 1, 2],
            &[4.0, -1.0, -1.0, 4.0, -2.0, 4.0],
        )
        .unwrap();
        assert_eq!(a.mul_vec(&[1.0, 1.0, 1.0]), vec![3.0, 3.0, 2.0]);
        assert_eq!(a.diagonal(), vec![4.0, 4.0, 4.0]);
        let t = a.transpose();
        assert_eq!(t.get(1, 2), -2.0);
        assert_eq!(a.first_asymmetry(1e-12), Some((2, 1, -2.0, 0.0)));
        assert_eq!(a.lower_triangle().nnz(), 5);
    }

    /// The symmetry check finds what the search of every mirror finds, entry and values, on
    /// matrices symmetric, nearly symmetric, with one-sided and explicit-zero entries, and
    /// with one triangle only; the upper half's pass, in parts of any size, never calls a
    /// matrix at fault symmetric.
    #[test]
    fn symmetry_check_finds_what_the_search_finds() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (mut seen_fault, mut seen_clean_parts) = (0, 0);
        for case in 0..400 {
            let n = rng.random_range(1..40usize);
            let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
            let density = rng.random_range(0.02..0.5);
            // Half the matrices are symmetric but for explicit zeros; the others have pairs
            // with one side missing, a side zero or a side perturbed.
            let fault = if case % 2 == 0 {
                0.0
            } else {
                rng.random_range(0.01..0.3)
            };
            for i in 0..n {
                for j in i..n {
                    if i != j && !rng.random_bool(density) {
                        continue;
                    }
                    let x: f64 = if rng.random_bool(0.1) {
                        0.0
                    } else {
                        rng.random_range(-2.0..2.0)
                    };
                    let faulty = i != j && rng.random_bool(fault);
                    let (lower, upper) = match (faulty, rng.random_range(0..4)) {
                        _ if i == j => (true, false),
                        (true, 0) => (true, false),
                        (true, 1) => (false, true),
                        _ => (true, true),
                    };
                    let y = match (faulty, rng.random_range(0..4)) {
                        (true, 2) => x * (1.0 + 1e-9),
                        (true, 3) => 0.0,
                        _ => x,
                    };
                    if lower {
                        r.push(j as u32);
                        c.push(i as u32);
                        v.push(x);
                    }
                    if upper {
                        r.push(i as u32);
                        c.push(j as u32);
                        v.push(y);
                    }
                }
            }
            let mut a = CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap();
            if case % 10 == 0 {
                a = a.lower_triangle();
            }
            for tol in [0.0, 1e-12, 1e-6] {
                let want = a.first_asymmetry_searched(a.data(), tol);
                seen_fault += usize::from(want.is_some());
                let got = a.first_asymmetry(tol);
                assert_eq!(
                    got.map(|(i, j, x, y)| (i, j, x.to_bits(), y.to_bits())),
                    want.map(|(i, j, x, y)| (i, j, x.to_bits(), y.to_bits())),
                    "case {case}, tol {tol}"
                );
                // Split into parts of a few entries, as a large matrix is.
                for part in [1, 7, 64] {
                    if want.is_none() {
                        seen_clean_parts +=
                            usize::from(a.symmetric_by_upper_half(a.data(), tol, part));
                    } else {
                        assert!(
                            !a.symmetric_by_upper_half(a.data(), tol, part),
                            "case {case}"
                        );
                    }
                }
            }
        }
        // Both outcomes were tested often.
        assert!(
            (300..900).contains(&seen_fault),
            "{seen_fault} faults of 1200"
        );
        // The upper half's pass found most of the symmetric ones symmetric itself (the others
        // hold an explicit zero without a mirror).
        assert!(
            seen_clean_parts > 3 * (1200 - seen_fault) / 2,
            "{seen_clean_parts}"
        );
    }

    /// The symmetry check's times: the upper half's pass against the search of every entry's
    /// mirror, and the check itself, on symmetric matrices of growing size (the two small
    /// real matrices, 3D Poisson, 2D FEM), median of 21 calls after one untimed call.
    /// `cargo test --release -p autopcg-sparse --lib -- --ignored --nocapture
    /// symmetry_check_times`
    #[test]
    #[ignore = "timing; run in release with --ignored --nocapture"]
    fn symmetry_check_times() {
        use crate::families::{fem_p1_2d, poisson3d_7pt};
        let median = |f: &dyn Fn() -> bool| {
            assert!(f(), "symmetric");
            let mut t: Vec<f64> = (0..21)
                .map(|_| {
                    let s = std::time::Instant::now();
                    std::hint::black_box(f());
                    s.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        // Tests run from the package folder.
        let dir = "../../matrices/";
        let mut cases: Vec<(String, CsrMatrix)> = ["bcsstk13", "s3rmt3m3"]
            .iter()
            .map(|m| {
                let path = format!("{dir}{m}.mtx");
                let a = crate::mm::read_matrix(&path, &Default::default())
                    .unwrap()
                    .matrix;
                (m.to_string(), a)
            })
            .collect();
        for k in [32, 48, 64, 100] {
            cases.push((format!("poisson3d {k}^3"), poisson3d_7pt(k, k, k).unwrap()));
        }
        for p in [20_000, 60_000, 200_000] {
            cases.push((format!("fem2d {p}"), fem_p1_2d(p, 1).unwrap()));
        }
        println!(
            "symmetry check, ms ({} threads): nnz upper-half every-mirror check",
            rayon::current_num_threads()
        );
        for (what, a) in &cases {
            let half = median(&|| a.symmetric_by_upper_half(a.data(), 1e-10, SYMMETRY_PART_NNZ));
            let searched = median(&|| a.first_asymmetry_searched(a.data(), 1e-10).is_none());
            let checked = median(&|| a.first_asymmetry(1e-10).is_none());
            println!(
                "{what:>18} {:>9} {half:9.3} {searched:9.3} {checked:9.3}",
                a.nnz()
            );
        }
    }
}
