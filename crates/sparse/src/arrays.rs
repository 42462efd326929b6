//! Building a [`CsrMatrix`] from a caller's arrays: CSR arrays with 32- or 64-bit, signed or
//! unsigned indices, 0- or 1-based ([`CsrMatrix::from_csr_arrays`]); `sprs` matrices of any
//! common index type ([`CsrMatrix::from_sprs_any`]); one triangle of a symmetric matrix,
//! mirrored explicitly ([`CsrMatrix::from_lower_triangle`]); and the symmetry check that tells a
//! one-triangle matrix apart from an asymmetric one ([`CsrMatrix::check_symmetric`]).
//!
//! Every check names the array, the position, the row and the value at fault. Columns may come
//! unsorted inside a row and may repeat (repeats are summed in the order given, as
//! [`CsrMatrix::from_triplets`] does); [`EntryMap`] then says where each of the caller's entries
//! went, so that new values can be given in the caller's own order.
use std::fmt;
use std::ops::Deref;

use rayon::prelude::*;
use sprs::{CsMatBase, SpIndex};

use crate::{CsrMatrix, Index, SparseError};

mod sealed {
    pub trait Sealed {}
}

/// An integer type a caller's CSR arrays may use: `u32`, `u64`, `usize`, `i32`, `i64`.
pub trait CsrIndex: sealed::Sealed + Copy + Send + Sync + fmt::Display {
    /// The value as a `u64`; `None` when it is negative.
    fn to_u64(self) -> Option<u64>;
}

macro_rules! csr_index {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl CsrIndex for $t {
            #[inline]
            fn to_u64(self) -> Option<u64> {
                u64::try_from(self).ok()
            }
        }
    )*};
}
csr_index!(u32, u64, usize, i32, i64);

/// Where a caller's indices start: C counts from 0, Fortran from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexBase {
    /// The first row and column are 0 (C, C++, Rust, Python).
    #[default]
    Zero,
    /// The first row and column are 1 (Fortran, Matlab, Matrix Market).
    One,
}

impl IndexBase {
    /// 0 or 1.
    pub fn offset(self) -> u64 {
        match self {
            IndexBase::Zero => 0,
            IndexBase::One => 1,
        }
    }
}

impl fmt::Display for IndexBase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-based", self.offset())
    }
}

/// One triangle of a square matrix (the diagonal included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Triangle {
    /// Entries (i, j) with j <= i.
    Lower,
    /// Entries (i, j) with j >= i.
    Upper,
}

impl Triangle {
    /// True when entry (i, j) lies in this triangle.
    pub fn holds(self, i: usize, j: usize) -> bool {
        match self {
            Triangle::Lower => j <= i,
            Triangle::Upper => j >= i,
        }
    }
}

impl fmt::Display for Triangle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Triangle::Lower => "lower",
            Triangle::Upper => "upper",
        })
    }
}

/// No second stored entry (the diagonal, or full storage).
const NO_MIRROR: u32 = u32::MAX;

/// Where each entry of a caller's arrays went in the matrix built from them: entry `k` of the
/// caller adds to stored entry `slot(k)` of the matrix, and, when the caller gave one triangle,
/// to the mirror of that entry as well. With sorted, unrepeated columns and both triangles it is
/// the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryMap {
    input_len: usize,
    output_len: usize,
    /// `None`: the identity.
    slot: Option<Vec<u32>>,
    /// `None`: no entry has a mirror; else [`NO_MIRROR`] where it has none.
    mirror: Option<Vec<u32>>,
}

impl EntryMap {
    /// The identity on `n` entries.
    pub fn identity(n: usize) -> Self {
        EntryMap {
            input_len: n,
            output_len: n,
            slot: None,
            mirror: None,
        }
    }

    /// True when the caller's order is the matrix's order.
    pub fn is_identity(&self) -> bool {
        self.slot.is_none() && self.mirror.is_none()
    }

    /// Entries of the caller's arrays.
    pub fn input_len(&self) -> usize {
        self.input_len
    }

    /// Stored entries of the matrix.
    pub fn output_len(&self) -> usize {
        self.output_len
    }

    /// The stored entries (one, or two for a mirrored off-diagonal entry) that caller entry `k`
    /// goes to.
    pub fn slots(&self, k: usize) -> (usize, Option<usize>) {
        let s = self.slot.as_ref().map_or(k, |s| s[k] as usize);
        let m = self
            .mirror
            .as_ref()
            .and_then(|m| (m[k] != NO_MIRROR).then_some(m[k] as usize));
        (s, m)
    }

    /// The matrix's values from values in the caller's order (repeats summed in the caller's
    /// order, mirrors copied). Errors when `input` has another length than the caller's arrays.
    pub fn values(&self, input: &[f64]) -> Result<Vec<f64>, SparseError> {
        if input.len() != self.input_len {
            return Err(SparseError::Dimension(format!(
                "{} values given for {} entries",
                input.len(),
                self.input_len
            )));
        }
        if self.is_identity() {
            return Ok(input.to_vec());
        }
        let mut out = vec![0.0; self.output_len];
        for (k, &v) in input.iter().enumerate() {
            let (s, m) = self.slots(k);
            out[s] += v;
            if let Some(m) = m {
                out[m] += v;
            }
        }
        Ok(out)
    }

    /// `self` then `next`: caller entry `k` goes where `next` sends `self`'s slot of `k`.
    /// `self` must have no mirrors (it is the sorting step).
    fn then(&self, next: &EntryMap) -> EntryMap {
        debug_assert!(self.mirror.is_none());
        if self.is_identity() {
            return EntryMap {
                input_len: self.input_len,
                ..next.clone()
            };
        }
        let (slot, mirror): (Vec<u32>, Vec<u32>) = (0..self.input_len)
            .into_par_iter()
            .map(|k| {
                let (s, _) = self.slots(k);
                let (t, m) = next.slots(s);
                (t as u32, m.map_or(NO_MIRROR, |m| m as u32))
            })
            .unzip();
        EntryMap {
            input_len: self.input_len,
            output_len: next.output_len,
            slot: Some(slot),
            mirror: next.mirror.is_some().then_some(mirror),
        }
    }
}

/// Index of stored entry (i, j) of `a`, which must exist.
fn slot_of(a: &CsrMatrix, i: usize, j: usize) -> Option<u32> {
    let p = a.indptr()[i] as usize;
    let (c, _) = a.row(i);
    c.binary_search(&(j as u32)).ok().map(|q| (p + q) as u32)
}

/// What the row pass over a caller's arrays found in one row.
enum RowCheck {
    /// Columns strictly increasing.
    Sorted,
    /// Columns unsorted or repeated.
    Unsorted,
}

impl CsrMatrix {
    /// Builds a matrix from a caller's CSR arrays: `indptr` of `nrows + 1` entries starting at
    /// the base, `indices` and `values` of `indptr[nrows] - base` entries; indices 0- or
    /// 1-based ([`IndexBase`]) of any [`CsrIndex`] type. Columns may be unsorted inside a row
    /// and may repeat (summed in the order given). Errors name the array, position, row and
    /// value at fault: a wrong length, a decreasing row pointer, a negative or out-of-range
    /// index, a non-finite value, or a size beyond 32-bit indices.
    ///
    /// ```
    /// use autopcg_sparse::{CsrMatrix, IndexBase};
    /// // [[4, -1], [-1, 4]], 1-based with 64-bit indices, as Fortran would give it.
    /// let a = CsrMatrix::from_csr_arrays(2, 2, &[1i64, 3, 5], &[1i64, 2, 1, 2],
    ///                                    &[4.0, -1.0, -1.0, 4.0], IndexBase::One).unwrap();
    /// assert_eq!(a.get(1, 0), -1.0);
    /// ```
    pub fn from_csr_arrays<P: CsrIndex, I: CsrIndex>(
        nrows: usize,
        ncols: usize,
        indptr: &[P],
        indices: &[I],
        values: &[f64],
        base: IndexBase,
    ) -> Result<Self, SparseError> {
        Self::from_csr_arrays_mapped(nrows, ncols, indptr, indices, values, base, None)
            .map(|(a, _)| a)
    }

    /// [`CsrMatrix::from_csr_arrays`], also returning where each given entry went
    /// ([`EntryMap`]), and, with `triangle`, taking one triangle of a symmetric matrix and
    /// mirroring it ([`CsrMatrix::from_lower_triangle`]); an entry outside that triangle is then
    /// an error naming it.
    pub fn from_csr_arrays_mapped<P: CsrIndex, I: CsrIndex>(
        nrows: usize,
        ncols: usize,
        indptr: &[P],
        indices: &[I],
        values: &[f64],
        base: IndexBase,
        triangle: Option<Triangle>,
    ) -> Result<(Self, EntryMap), SparseError> {
        let ptr = checked_indptr(nrows, ncols, indptr, indices.len(), values.len(), base)?;
        if triangle.is_some() && nrows != ncols {
            return Err(SparseError::Dimension(format!(
                "a triangle of a {nrows} x {ncols} matrix: a symmetric matrix is square"
            )));
        }
        let off = base.offset();
        // One pass over the rows: every index and value checked, sortedness noted; the first
        // fault (lowest row) is reported.
        let checks: Vec<Result<RowCheck, (usize, String)>> = (0..nrows)
            .into_par_iter()
            .with_min_len(1024)
            .map(|i| {
                let mut sorted = true;
                let mut last = None;
                for k in ptr[i]..ptr[i + 1] {
                    let raw = indices[k];
                    let col = raw
                        .to_u64()
                        .and_then(|c| c.checked_sub(off))
                        .filter(|&c| c < ncols as u64);
                    let Some(col) = col else {
                        return Err((
                            i,
                            format!(
                                "indices[{k}] = {raw} in row {} is outside the columns {off}..={} \
                                 ({base} indices)",
                                i as u64 + off,
                                ncols as u64 + off - 1
                            ),
                        ));
                    };
                    let v = values[k];
                    if !v.is_finite() {
                        return Err((
                            i,
                            format!(
                                "values[{k}] = {v} (row {}, column {}, {base}) is not finite",
                                i as u64 + off,
                                raw
                            ),
                        ));
                    }
                    if let Some(t) = triangle {
                        if !t.holds(i, col as usize) {
                            return Err((
                                i,
                                format!(
                                    "indices[{k}] = {raw} in row {} ({base}) lies outside the {t} \
                                     triangle the matrix was given as",
                                    i as u64 + off
                                ),
                            ));
                        }
                    }
                    if last.is_some_and(|l| col <= l) {
                        sorted = false;
                    }
                    last = Some(col);
                }
                Ok(if sorted {
                    RowCheck::Sorted
                } else {
                    RowCheck::Unsorted
                })
            })
            .collect();
        let mut all_sorted = true;
        for c in &checks {
            match c {
                Ok(RowCheck::Sorted) => {}
                Ok(RowCheck::Unsorted) => all_sorted = false,
                Err((_, msg)) => return Err(SparseError::Structure(msg.clone())),
            }
        }
        drop(checks);
        let nnz = values.len();
        let cols: Vec<Index> = indices
            .par_iter()
            .with_min_len(1 << 14)
            .map(|c| c.to_u64().map_or(0, |c| (c - off) as Index))
            .collect();
        let (a, map) = if all_sorted {
            let p: Vec<Index> = ptr.iter().map(|&p| p as Index).collect();
            let a = CsrMatrix::try_from_parts(nrows, ncols, p, cols, values.to_vec())?;
            (a, EntryMap::identity(nnz))
        } else {
            let mut rows = vec![0 as Index; nnz];
            rows.par_chunks_mut(1 << 14)
                .enumerate()
                .for_each(|(b, out)| {
                    let k0 = b << 14;
                    let mut i = ptr.partition_point(|&p| p <= k0) - 1;
                    for (t, r) in out.iter_mut().enumerate() {
                        while ptr[i + 1] <= k0 + t {
                            i += 1;
                        }
                        *r = i as Index;
                    }
                });
            let a = CsrMatrix::from_triplets(nrows, ncols, &rows, &cols, values)?;
            let slot: Vec<u32> = (0..nnz)
                .into_par_iter()
                .map(|k| slot_of(&a, rows[k] as usize, cols[k] as usize).unwrap_or(0))
                .collect();
            let out = a.nnz();
            (
                a,
                EntryMap {
                    input_len: nnz,
                    output_len: out,
                    slot: Some(slot),
                    mirror: None,
                },
            )
        };
        match triangle {
            None => Ok((a, map)),
            Some(t) => {
                let (full, mirror_map) = mirror_triangle(&a, t)?;
                Ok((full, map.then(&mirror_map)))
            }
        }
    }

    /// Builds a matrix from a `sprs` matrix of any common index type (`CsMat<f64>` with
    /// `usize` indices, `CsMatI<f64, I, Iptr>` with `u32`, `u64`, `i32`, `i64`), in CSR or CSC
    /// storage, owned or a view. The checks are [`CsrMatrix::from_csr_arrays`]'s.
    ///
    /// ```
    /// let m: sprs::CsMat<f64> = sprs::CsMat::eye(3);
    /// let a = autopcg_sparse::CsrMatrix::from_sprs_any(&m).unwrap();
    /// assert_eq!(a.nnz(), 3);
    /// ```
    pub fn from_sprs_any<I, Iptr, IpS, IS, DS>(
        m: &CsMatBase<f64, I, IpS, IS, DS, Iptr>,
    ) -> Result<Self, SparseError>
    where
        I: SpIndex + CsrIndex,
        Iptr: SpIndex + CsrIndex,
        IpS: Deref<Target = [Iptr]>,
        IS: Deref<Target = [I]>,
        DS: Deref<Target = [f64]>,
    {
        let ptr = m.proper_indptr();
        if m.is_csr() {
            Self::from_csr_arrays(
                m.rows(),
                m.cols(),
                &ptr,
                m.indices(),
                m.data(),
                IndexBase::Zero,
            )
        } else {
            // CSC arrays are the CSR arrays of the transpose.
            Self::from_csr_arrays(
                m.cols(),
                m.rows(),
                &ptr,
                m.indices(),
                m.data(),
                IndexBase::Zero,
            )
            .map(|t| t.transpose())
        }
    }

    /// The symmetric matrix whose lower triangle (diagonal included) is `lower`: every
    /// off-diagonal entry is mirrored above the diagonal. Errors when `lower` is not square or
    /// stores an entry above its diagonal (named).
    ///
    /// ```
    /// use autopcg_sparse::CsrMatrix;
    /// let l = CsrMatrix::from_triplets(2, 2, &[0, 1, 1], &[0, 0, 1], &[4.0, -1.0, 4.0]).unwrap();
    /// let a = CsrMatrix::from_lower_triangle(&l).unwrap();
    /// assert_eq!((a.nnz(), a.get(0, 1)), (4, -1.0));
    /// ```
    pub fn from_lower_triangle(lower: &CsrMatrix) -> Result<CsrMatrix, SparseError> {
        mirror_triangle(lower, Triangle::Lower).map(|(a, _)| a)
    }

    /// The symmetric matrix whose upper triangle (diagonal included) is `upper`; see
    /// [`CsrMatrix::from_lower_triangle`].
    pub fn from_upper_triangle(upper: &CsrMatrix) -> Result<CsrMatrix, SparseError> {
        mirror_triangle(upper, Triangle::Upper).map(|(a, _)| a)
    }

    /// Which triangle the matrix is confined to, when it stores entries on one side of the
    /// diagonal only (`None` for a diagonal matrix, or one with entries on both sides).
    pub fn one_triangle(&self) -> Option<Triangle> {
        let (below, above) = (0..self.nrows())
            .into_par_iter()
            .with_min_len(1024)
            .map(|i| {
                let (c, _) = self.row(i);
                let d = c.partition_point(|&j| (j as usize) < i);
                let a = c.len() - c.partition_point(|&j| (j as usize) <= i);
                (d > 0, a > 0)
            })
            .reduce(|| (false, false), |x, y| (x.0 || y.0, x.1 || y.1));
        match (below, above) {
            (true, false) => Some(Triangle::Lower),
            (false, true) => Some(Triangle::Upper),
            _ => None,
        }
    }

    /// Checks that the matrix is square and symmetric to a relative tolerance `rel_tol` (see
    /// [`CsrMatrix::first_asymmetry`]). A matrix holding only one triangle gets
    /// [`SparseError::OneTriangle`], which names the constructor that mirrors it; any other
    /// asymmetry [`SparseError::NotSymmetric`] with the first entry at fault.
    pub fn check_symmetric(&self, rel_tol: f64) -> Result<(), SparseError> {
        self.check_symmetric_values(self.data(), rel_tol)
    }

    /// [`CsrMatrix::check_symmetric`] of this pattern holding `values` (one per stored entry,
    /// in CSR order, as [`CsrMatrix::data`] holds its own) instead of its own values: what a
    /// value update of the same pattern checks before it takes them. A length other than
    /// [`CsrMatrix::nnz`] is a [`SparseError::Dimension`].
    pub fn check_symmetric_values(&self, values: &[f64], rel_tol: f64) -> Result<(), SparseError> {
        if values.len() != self.nnz() {
            return Err(SparseError::Dimension(format!(
                "{} values for a pattern of {} stored entries",
                values.len(),
                self.nnz()
            )));
        }
        if !self.is_square() {
            return Err(SparseError::Dimension(format!(
                "a {} x {} matrix is not square, so not symmetric",
                self.nrows(),
                self.ncols()
            )));
        }
        let Some((i, j, a_ij, a_ji)) = self.first_asymmetry_of(values, rel_tol) else {
            return Ok(());
        };
        if let Some(part) = self.one_triangle() {
            return Err(SparseError::OneTriangle {
                part,
                row: i + 1,
                col: j + 1,
                value: a_ij,
            });
        }
        Err(SparseError::NotSymmetric {
            row: i + 1,
            col: j + 1,
            a_ij,
            a_ji,
        })
    }
}

/// The checked row pointer of a caller's arrays, 0-based, as `usize`.
fn checked_indptr<P: CsrIndex>(
    nrows: usize,
    ncols: usize,
    indptr: &[P],
    nindices: usize,
    nvalues: usize,
    base: IndexBase,
) -> Result<Vec<usize>, SparseError> {
    let lim = u64::from(u32::MAX - 1);
    if nrows as u64 > lim || ncols as u64 > lim {
        return Err(SparseError::TooLarge(format!(
            "{nrows} x {ncols} (each must be below {lim})"
        )));
    }
    if indptr.len() != nrows + 1 {
        return Err(SparseError::Dimension(format!(
            "the row pointer has {} entries; a matrix of {nrows} rows needs {}",
            indptr.len(),
            nrows + 1
        )));
    }
    let off = base.offset();
    let mut out = Vec::with_capacity(nrows + 1);
    let mut last = 0u64;
    for (i, &p) in indptr.iter().enumerate() {
        let v = p.to_u64().and_then(|v| v.checked_sub(off));
        let Some(v) = v else {
            return Err(SparseError::Structure(format!(
                "indptr[{i}] = {p} is below {off}, the first entry of {base} indices"
            )));
        };
        if i == 0 && v != 0 {
            return Err(SparseError::Structure(format!(
                "indptr[0] = {p}: the row pointer of {base} indices starts at {off}"
            )));
        }
        if v < last {
            return Err(SparseError::Structure(format!(
                "indptr[{i}] = {p} is below indptr[{}] = {}: row {} would have a negative length",
                i - 1,
                indptr[i - 1],
                i as u64 - 1 + off
            )));
        }
        if v > lim {
            return Err(SparseError::TooLarge(format!(
                "indptr[{i}] = {p}: more than {lim} entries"
            )));
        }
        last = v;
        out.push(v as usize);
    }
    let nnz = out[nrows];
    if nindices != nnz || nvalues != nnz {
        return Err(SparseError::Dimension(format!(
            "indptr[{nrows}] = {} gives {nnz} entries, but indices has {nindices} and values \
             {nvalues}",
            indptr[nrows]
        )));
    }
    Ok(out)
}

/// The symmetric matrix of which `part` is the given triangle, and where each of its entries
/// went (itself and its mirror).
fn mirror_triangle(t: &CsrMatrix, part: Triangle) -> Result<(CsrMatrix, EntryMap), SparseError> {
    let n = t.nrows();
    if !t.is_square() {
        return Err(SparseError::Dimension(format!(
            "the {part} triangle of a {n} x {} matrix: a symmetric matrix is square",
            t.ncols()
        )));
    }
    if let Some((i, j, v)) = (0..n)
        .into_par_iter()
        .with_min_len(1024)
        .filter_map(|i| {
            let (c, v) = t.row(i);
            c.iter()
                .zip(v)
                .find(|(&j, _)| !part.holds(i, j as usize))
                .map(|(&j, &v)| (i, j as usize, v))
        })
        .min_by_key(|&(i, j, _)| (i, j))
    {
        return Err(SparseError::Structure(format!(
            "A[{}][{}] = {v:e} (1-based) lies outside the {part} triangle the matrix was given as",
            i + 1,
            j + 1
        )));
    }
    let nnz = t.nnz();
    let mut rows = Vec::with_capacity(2 * nnz);
    let mut cols = Vec::with_capacity(2 * nnz);
    let mut vals = Vec::with_capacity(2 * nnz);
    for i in 0..n {
        let (c, v) = t.row(i);
        for (&j, &x) in c.iter().zip(v) {
            rows.push(i as Index);
            cols.push(j);
            vals.push(x);
            if j as usize != i {
                rows.push(j);
                cols.push(i as Index);
                vals.push(x);
            }
        }
    }
    if rows.len() as u64 > u64::from(u32::MAX - 1) {
        return Err(SparseError::TooLarge(format!(
            "{} entries once the {part} triangle is mirrored",
            rows.len()
        )));
    }
    let full = CsrMatrix::from_triplets(n, n, &rows, &cols, &vals)?;
    drop((rows, cols, vals));
    let ptr = t.indptr();
    let idx = t.indices();
    let (slot, mirror): (Vec<u32>, Vec<u32>) = (0..n)
        .into_par_iter()
        .with_min_len(1024)
        .flat_map_iter(|i| {
            let full = &full;
            idx[ptr[i] as usize..ptr[i + 1] as usize]
                .iter()
                .map(move |&j| {
                    let j = j as usize;
                    let s = slot_of(full, i, j).unwrap_or(0);
                    let m = if i == j {
                        NO_MIRROR
                    } else {
                        slot_of(full, j, i).unwrap_or(0)
                    };
                    (s, m)
                })
        })
        .unzip();
    let out = full.nnz();
    Ok((
        full,
        EntryMap {
            input_len: nnz,
            output_len: out,
            slot: Some(slot),
            mirror: Some(mirror),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poisson1d(n: usize) -> CsrMatrix {
        let mut r = Vec::new();
        let mut c = Vec::new();
        let mut v = Vec::new();
        for i in 0..n as u32 {
            for (j, x) in [(i.wrapping_sub(1), -1.0), (i, 2.0), (i + 1, -1.0)] {
                if (j as usize) < n {
                    r.push(i);
                    c.push(j);
                    v.push(x);
                }
            }
        }
        CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap()
    }

    #[test]
    fn every_index_type_and_base_gives_the_same_matrix() {
        let a = poisson1d(5);
        let p32: Vec<u32> = a.indptr().to_vec();
        let c32: Vec<u32> = a.indices().to_vec();
        let v = a.data();
        let one = |x: &u32| i64::from(*x) + 1;
        let p1: Vec<i64> = p32.iter().map(one).collect();
        let c1: Vec<i64> = c32.iter().map(one).collect();
        let p_i32: Vec<i32> = p32.iter().map(|&x| x as i32).collect();
        let c_usize: Vec<usize> = c32.iter().map(|&x| x as usize).collect();
        let p_u64: Vec<u64> = p32.iter().map(|&x| u64::from(x)).collect();
        let z = IndexBase::Zero;
        assert_eq!(
            CsrMatrix::from_csr_arrays(5, 5, &p32, &c32, v, z).unwrap(),
            a
        );
        assert_eq!(
            CsrMatrix::from_csr_arrays(5, 5, &p1, &c1, v, IndexBase::One).unwrap(),
            a
        );
        assert_eq!(
            CsrMatrix::from_csr_arrays(5, 5, &p_i32, &c_usize, v, z).unwrap(),
            a
        );
        assert_eq!(
            CsrMatrix::from_csr_arrays(5, 5, &p_u64, &c32, v, z).unwrap(),
            a
        );
    }

    #[test]
    fn unsorted_and_repeated_columns_are_sorted_and_summed_with_a_map() {
        // Row 0: columns 1, 0, 1 (repeat); row 1: 0, 1.
        let (a, map) = CsrMatrix::from_csr_arrays_mapped(
            2,
            2,
            &[0u32, 3, 5],
            &[1u32, 0, 1, 0, 1],
            &[-0.5, 4.0, -0.5, -1.0, 4.0],
            IndexBase::Zero,
            None,
        )
        .unwrap();
        assert_eq!(a.indices(), &[0, 1, 0, 1]);
        assert_eq!(a.data(), &[4.0, -1.0, -1.0, 4.0]);
        assert!(!map.is_identity());
        assert_eq!(
            map.values(&[-1.0, 5.0, -1.0, -2.0, 5.0]).unwrap(),
            vec![5.0, -2.0, -2.0, 5.0]
        );
        assert!(map.values(&[1.0]).is_err());
        let (_, id) = CsrMatrix::from_csr_arrays_mapped(
            2,
            2,
            &[0u32, 1, 2],
            &[0u32, 1],
            &[1.0, 1.0],
            IndexBase::Zero,
            None,
        )
        .unwrap();
        assert!(id.is_identity());
    }

    #[test]
    fn faults_are_named() {
        let z = IndexBase::Zero;
        let e = |r: Result<CsrMatrix, SparseError>| r.unwrap_err().to_string();
        let m = e(CsrMatrix::from_csr_arrays(
            2,
            2,
            &[0i32, 1],
            &[0i32],
            &[1.0],
            z,
        ));
        assert!(m.contains("3"), "{m}");
        let m = e(CsrMatrix::from_csr_arrays(
            2,
            2,
            &[0i32, 2, 1],
            &[0i32, 1],
            &[1.0, 1.0],
            z,
        ));
        assert!(m.contains("indptr[2] = 1") && m.contains("row 1"), "{m}");
        let m = e(CsrMatrix::from_csr_arrays(
            2,
            2,
            &[0i32, 1, 2],
            &[0i32, -1],
            &[1.0, 1.0],
            z,
        ));
        assert!(m.contains("indices[1] = -1 in row 1"), "{m}");
        let m = e(CsrMatrix::from_csr_arrays(
            2,
            2,
            &[1i64, 2, 3],
            &[1i64, 3],
            &[1.0, 1.0],
            IndexBase::One,
        ));
        assert!(
            m.contains("indices[1] = 3 in row 2") && m.contains("1..=2"),
            "{m}"
        );
        let m = e(CsrMatrix::from_csr_arrays(
            2,
            2,
            &[0i64, 2, 3],
            &[1i64, 2, 2],
            &[1.0, 1.0, 1.0],
            IndexBase::One,
        ));
        assert!(m.contains("indptr[0] = 0"), "{m}");
        let m = e(CsrMatrix::from_csr_arrays(
            2,
            2,
            &[0u32, 1, 2],
            &[0u32, 1],
            &[1.0, f64::NAN],
            z,
        ));
        assert!(m.contains("values[1] = NaN (row 1, column 1"), "{m}");
        let m = e(CsrMatrix::from_csr_arrays(
            2,
            2,
            &[0u32, 1, 2],
            &[0u32, 1],
            &[1.0],
            z,
        ));
        assert!(m.contains("values 1"), "{m}");
    }

    #[test]
    fn a_lower_triangle_is_mirrored_and_new_values_follow() {
        let a = poisson1d(6);
        let l = a.lower_triangle();
        assert_eq!(CsrMatrix::from_lower_triangle(&l).unwrap(), a);
        assert_eq!(CsrMatrix::from_upper_triangle(&l.transpose()).unwrap(), a);
        assert!(CsrMatrix::from_lower_triangle(&a)
            .unwrap_err()
            .to_string()
            .contains("A[1][2]"));
        // Through the arrays, 1-based, with the map carrying new values to both triangles.
        let p: Vec<i32> = l.indptr().iter().map(|&x| x as i32 + 1).collect();
        let c: Vec<i32> = l.indices().iter().map(|&x| x as i32 + 1).collect();
        let (full, map) = CsrMatrix::from_csr_arrays_mapped(
            6,
            6,
            &p,
            &c,
            l.data(),
            IndexBase::One,
            Some(Triangle::Lower),
        )
        .unwrap();
        assert_eq!(full, a);
        let doubled: Vec<f64> = l.data().iter().map(|v| 2.0 * v).collect();
        let want: Vec<f64> = a.data().iter().map(|v| 2.0 * v).collect();
        assert_eq!(map.values(&doubled).unwrap(), want);
        // The full matrix given as a lower triangle is refused, naming the entry.
        let p: Vec<u32> = a.indptr().to_vec();
        let e = CsrMatrix::from_csr_arrays_mapped(
            6,
            6,
            &p,
            a.indices(),
            a.data(),
            IndexBase::Zero,
            Some(Triangle::Lower),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("indices[1] = 1 in row 0"), "{e}");
    }

    #[test]
    fn sprs_matrices_of_every_common_index_type() {
        let a = poisson1d(4);
        let s = a.as_sprs();
        let conv = |x: &u32| *x as usize;
        let m: sprs::CsMat<f64> = sprs::CsMat::new(
            (4, 4),
            s.indptr().raw_storage().iter().map(conv).collect(),
            s.indices().iter().map(conv).collect(),
            s.data().to_vec(),
        );
        assert_eq!(CsrMatrix::from_sprs_any(&m).unwrap(), a);
        assert_eq!(CsrMatrix::from_sprs_any(&m.view()).unwrap(), a);
        let csc = m.to_csc();
        assert_eq!(CsrMatrix::from_sprs_any(&csc).unwrap(), a);
        let m64: sprs::CsMatI<f64, i64, i64> = sprs::CsMatI::new(
            (4, 4),
            s.indptr().raw_storage().iter().map(|&x| x as i64).collect(),
            s.indices().iter().map(|&x| x as i64).collect(),
            s.data().to_vec(),
        );
        assert_eq!(CsrMatrix::from_sprs_any(&m64).unwrap(), a);
        assert_eq!(CsrMatrix::from_sprs_any(s).unwrap(), a);
        // A view of the middle rows (its row pointer does not start at 0).
        let mid = m.slice_outer(1..3);
        let b = CsrMatrix::from_sprs_any(&mid).unwrap();
        assert_eq!((b.nrows(), b.nnz()), (2, 6));
    }

    /// Other values of the same pattern are checked as the matrix's own would be: the first
    /// entry at fault named with the new values, the tolerance relative, and a wrong number of
    /// values refused.
    #[test]
    fn other_values_of_the_pattern_are_checked_as_its_own() {
        let a = poisson1d(6);
        assert!(a.check_symmetric_values(a.data(), 0.0).is_ok());
        // Entry (2, 3), 0-based, is the 8th stored: rows hold 2, 3, 3 entries before row 3.
        let k = a.indptr()[2] as usize + 2;
        assert_eq!(a.indices()[k], 3);
        let mut v = a.data().to_vec();
        v[k] = -3.0;
        match a.check_symmetric_values(&v, 1e-10) {
            Err(SparseError::NotSymmetric {
                row,
                col,
                a_ij,
                a_ji,
            }) => assert_eq!((row, col, a_ij, a_ji), (3, 4, -3.0, -1.0)),
            other => panic!("{other:?}"),
        }
        assert!(a.check_symmetric_values(&v, 3.0).is_ok());
        assert!(a.check_symmetric(1e-10).is_ok(), "the matrix's own values");
        assert!(matches!(
            a.check_symmetric_values(&v[1..], 1e-10),
            Err(SparseError::Dimension(_))
        ));
    }

    #[test]
    fn one_triangle_is_told_apart_from_asymmetry() {
        let a = poisson1d(5);
        assert!(a.check_symmetric(0.0).is_ok());
        let l = a.lower_triangle();
        match l.check_symmetric(1e-10) {
            Err(SparseError::OneTriangle { part, row, col, .. }) => {
                assert_eq!((part, row, col), (Triangle::Lower, 2, 1));
            }
            other => panic!("{other:?}"),
        }
        let msg = l
            .transpose()
            .check_symmetric(1e-10)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("from_upper_triangle"), "{msg}");
        let mut b = a.clone();
        b.data_mut()[1] = -2.0;
        assert!(matches!(
            b.check_symmetric(1e-10),
            Err(SparseError::NotSymmetric { row: 1, col: 2, .. })
        ));
        assert_eq!(CsrMatrix::identity(3).unwrap().one_triangle(), None);
    }
}
