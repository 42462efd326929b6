//! Crate-private helpers shared by the format conversions: splitting row-ordered arrays into
//! blocks of rows that can be filled in parallel, assembling a CSR matrix from per-row lengths,
//! row pointers of row-sorted triplets, and the padding check of the padded formats.
use rayon::prelude::*;

use crate::{CsrMatrix, Index, PaddingLimits, SparseError};

/// Rows per parallel work item in the conversions and reference kernels.
pub(crate) const ROW_BLOCK: usize = 4096;

/// Largest entry count a 32-bit row pointer can hold (one value is kept free, as in CSR).
const MAX_NNZ: u64 = (u32::MAX - 1) as u64;

/// Stored slots divided by nonzeros. An empty store of an empty matrix has no padding (1.0);
/// slots without any nonzero are infinitely padded.
pub(crate) fn fill_ratio(slots: u128, nnz: usize) -> f64 {
    if nnz == 0 {
        if slots == 0 {
            1.0
        } else {
            f64::INFINITY
        }
    } else {
        slots as f64 / nnz as f64
    }
}

/// Refuses a padded layout of `slots` stored slots holding `nnz` nonzeros in `bytes` bytes when
/// either limit is exceeded. Called before anything padded is allocated. A NaN limit refuses.
pub(crate) fn check_padding(
    format: &'static str,
    slots: u128,
    nnz: usize,
    bytes: u128,
    limits: &PaddingLimits,
) -> Result<(), SparseError> {
    if limits.allows(slots, nnz, bytes) {
        Ok(())
    } else {
        Err(SparseError::TooMuchPadding {
            format,
            fill_ratio: fill_ratio(slots, nnz),
            limit: limits.max_fill_ratio,
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            max_bytes: limits.max_bytes,
        })
    }
}

/// `a * b` as a `usize`, or a [`SparseError::TooLarge`] naming `what`.
pub(crate) fn checked_slots(a: usize, b: usize, what: &str) -> Result<usize, SparseError> {
    a.checked_mul(b)
        .ok_or_else(|| SparseError::TooLarge(format!("{what}: {a} x {b} slots overflow")))
}

/// Splits `data`, laid out row by row with row pointer `ptr` (`nrows + 1` entries), into one
/// slice per block of [`ROW_BLOCK`] rows. Block `b` covers rows `b * ROW_BLOCK ..` and the
/// entries `ptr[b * ROW_BLOCK] .. ptr[min((b + 1) * ROW_BLOCK, nrows)]`.
pub(crate) fn split_row_blocks<'a, T>(mut data: &'a mut [T], ptr: &[Index]) -> Vec<&'a mut [T]> {
    let nrows = ptr.len().saturating_sub(1);
    let nblocks = nrows.div_ceil(ROW_BLOCK);
    let mut out = Vec::with_capacity(nblocks);
    for b in 0..nblocks {
        let r0 = b * ROW_BLOCK;
        let r1 = (r0 + ROW_BLOCK).min(nrows);
        let len = (ptr[r1] - ptr[r0]) as usize;
        let (head, tail) = std::mem::take(&mut data).split_at_mut(len);
        out.push(head);
        data = tail;
    }
    out
}

/// Cuts a segment-major layout (segment `k` holds row `i` at `k * nrows + i`, as the ELL
/// columns and the DIA diagonals do) into row blocks: `out[b][k]` is the part of segment `k`
/// covering the rows of block `b` (rows `b * ROW_BLOCK ..`). Lets each block write all its
/// segments in parallel with the others.
pub(crate) fn segments_by_block<T>(data: &mut [T], nrows: usize) -> Vec<Vec<&mut [T]>> {
    if nrows == 0 {
        return Vec::new();
    }
    let nseg = data.len() / nrows;
    let mut out: Vec<Vec<&mut [T]>> = (0..nrows.div_ceil(ROW_BLOCK))
        .map(|_| Vec::with_capacity(nseg))
        .collect();
    for seg in data.chunks_mut(nrows) {
        for (b, part) in seg.chunks_mut(ROW_BLOCK).enumerate() {
            out[b].push(part);
        }
    }
    out
}

/// Row lengths computed block by block: `f(r0, out)` writes the lengths of rows
/// `r0 .. r0 + out.len()` into `out`.
pub(crate) fn row_lengths_by_block(nrows: usize, f: impl Fn(usize, &mut [u32]) + Sync) -> Vec<u32> {
    let mut lens = vec![0u32; nrows];
    lens.par_chunks_mut(ROW_BLOCK)
        .enumerate()
        .for_each(|(b, out)| f(b * ROW_BLOCK, out));
    lens
}

/// Row pointer from row lengths; errors when the total does not fit 32-bit indices.
pub(crate) fn pointers_from_lengths(lens: &[u32]) -> Result<Vec<Index>, SparseError> {
    let mut ptr = Vec::with_capacity(lens.len() + 1);
    ptr.push(0);
    let mut acc = 0u64;
    for &l in lens {
        acc += u64::from(l);
        if acc > MAX_NNZ {
            return Err(SparseError::TooLarge(format!(
                "more than {MAX_NNZ} entries after conversion"
            )));
        }
        ptr.push(acc as Index);
    }
    Ok(ptr)
}

/// Assembles a CSR matrix from its row lengths and a block filler. `fill(r0, ptr, idx, val)`
/// receives the rows `r0 .. r0 + ptr.len() - 1`, their row pointers `ptr` (absolute, so the
/// entries of row `r0 + t` sit at `ptr[t] - ptr[0] .. ptr[t + 1] - ptr[0]` of the block), and
/// must write every entry's column (ascending inside a row) and value. The result is validated.
pub(crate) fn assemble_csr(
    nrows: usize,
    ncols: usize,
    lens: &[u32],
    fill: impl Fn(usize, &[Index], &mut [Index], &mut [f64]) + Sync,
) -> Result<CsrMatrix, SparseError> {
    let ptr = pointers_from_lengths(lens)?;
    let nnz = ptr[nrows] as usize;
    let mut idx = vec![0 as Index; nnz];
    let mut val = vec![0.0f64; nnz];
    {
        let bi = split_row_blocks(&mut idx, &ptr);
        let bv = split_row_blocks(&mut val, &ptr);
        bi.into_par_iter()
            .zip(bv)
            .enumerate()
            .for_each(|(b, (oi, ov))| {
                let r0 = b * ROW_BLOCK;
                let r1 = (r0 + ROW_BLOCK).min(nrows);
                fill(r0, &ptr[r0..=r1], oi, ov);
            });
    }
    CsrMatrix::try_from_parts(nrows, ncols, ptr, idx, val)
}

/// Row pointer (`nrows + 1` entries) of entries whose row indices `rows` are sorted ascending
/// and below `nrows` (the caller checks both).
pub(crate) fn sorted_row_pointers(rows: &[Index], nrows: usize) -> Vec<Index> {
    let mut ptr = vec![0 as Index; nrows + 1];
    ptr.par_chunks_mut(ROW_BLOCK)
        .enumerate()
        .for_each(|(b, out)| {
            let r0 = b * ROW_BLOCK;
            let mut p = rows.partition_point(|&r| (r as usize) < r0);
            for (t, slot) in out.iter_mut().enumerate() {
                let r = r0 + t;
                while p < rows.len() && (rows[p] as usize) < r {
                    p += 1;
                }
                *slot = p as Index;
            }
        });
    ptr
}

/// Range of the entries of rows `r0 .. r1` in row-sorted `rows`.
pub(crate) fn sorted_row_range(rows: &[Index], r0: usize, r1: usize) -> std::ops::Range<usize> {
    let a = rows.partition_point(|&r| (r as usize) < r0);
    let b = a + rows[a..].partition_point(|&r| (r as usize) < r1);
    a..b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_row_pointers_cover_empty_rows() {
        let rows = [1, 1, 3, 3, 3];
        assert_eq!(sorted_row_pointers(&rows, 5), vec![0, 0, 2, 2, 5, 5]);
        assert_eq!(sorted_row_pointers(&[], 2), vec![0, 0, 0]);
        assert_eq!(sorted_row_range(&rows, 2, 4), 2..5);
        assert_eq!(sorted_row_range(&rows, 0, 1), 0..0);
    }

    #[test]
    fn padding_check_limits_and_empty() {
        let lim = PaddingLimits {
            max_fill_ratio: 2.0,
            max_bytes: 100,
        };
        assert!(check_padding("ELL", 0, 0, 0, &lim).is_ok());
        assert!(check_padding("ELL", 4, 2, 48, &lim).is_ok());
        assert!(check_padding("ELL", 5, 2, 60, &lim).is_err());
        assert!(check_padding("ELL", 4, 2, 101, &lim).is_err());
        assert!(check_padding("ELL", 1, 0, 12, &lim).is_err());
        // The public form is the same check.
        assert!(lim.check("DIA", 4, 2, 48).is_ok());
        match lim.check("DIA", 5, 2, 60) {
            Err(SparseError::TooMuchPadding { format, .. }) => assert_eq!(format, "DIA"),
            other => panic!("expected TooMuchPadding, got {other:?}"),
        }
    }
}
