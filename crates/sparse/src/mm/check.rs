//! What the reader checks before it commits memory or hands a matrix on: fallible allocation
//! with the need in human units, the memory the rows of a declared size would take, and the
//! diagonal of a matrix meant to be symmetric positive definite.
use std::alloc::Layout;

use rayon::prelude::*;

use crate::error::human_bytes;
use crate::{CsrMatrix, SparseError};

/// The most bytes the assembly of a matrix holds per row at its peak: row pointers, row lengths
/// and the work arrays of [`CsrMatrix::from_triplets`] (counts, cursors, per-row slices and
/// their output slices), which holds the most. Real matrices have several entries per row, so
/// for them this is a small part of what their entries take.
pub(super) const ROW_BYTES: u64 = 64;

/// The most bytes a matrix with far fewer entries than rows holds per row (see
/// `assemble::from_few`): its row pointer, and the row pointer of its mirrored form while the
/// first is alive.
pub(super) const FEW_ROW_BYTES: u64 = 8;

/// Needs below this are taken for granted, as every allocation of a Rust program is.
const PROBE_FROM: u64 = 64 << 20;

fn oom(label: &str, needed: u64, what: String, why: String) -> SparseError {
    SparseError::OutOfMemory {
        file: label.to_string(),
        needed,
        what,
        why,
    }
}

/// Refuses `bytes` bytes for `what` (called before they are allocated) when they exceed
/// `limit`, the memory the system says is available (Linux: `MemAvailable` plus free swap;
/// beyond it a process is killed rather than refused), or what a fallible allocation of that
/// size gets (the allocation is released at once, untouched).
pub(super) fn ensure_memory(
    label: &str,
    bytes: u64,
    what: impl FnOnce() -> String,
    limit: Option<u64>,
) -> Result<(), SparseError> {
    if let Some(l) = limit {
        if bytes > l {
            let why = format!("more than the limit of {}", human_bytes(l));
            return Err(oom(label, bytes, what(), why));
        }
    }
    if bytes < PROBE_FROM {
        return Ok(());
    }
    if let Some(avail) = available_memory() {
        if bytes > avail {
            let why = format!("but only {} is available", human_bytes(avail));
            return Err(oom(label, bytes, what(), why));
        }
    }
    let mut probe: Vec<u8> = Vec::new();
    let fits = usize::try_from(bytes).is_ok_and(|n| probe.try_reserve_exact(n).is_ok());
    if !fits {
        let why = "more than this machine can allocate".to_string();
        return Err(oom(label, bytes, what(), why));
    }
    Ok(())
}

/// Memory the system can still give without killing anyone: `MemAvailable + SwapFree` of
/// `/proc/meminfo`. `None` where that is not known.
fn available_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = info.lines().find(|l| l.starts_with(name))?;
            let kb: u64 = line[name.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kb.saturating_mul(1024))
        };
        Some(field("MemAvailable:")?.saturating_add(field("SwapFree:").unwrap_or(0)))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The memory check for the row structures of an `n`-row matrix, `per_row` bytes a row
/// ([`ROW_BYTES`] or [`FEW_ROW_BYTES`]).
pub(super) fn ensure_rows(
    label: &str,
    n: usize,
    per_row: u64,
    limit: Option<u64>,
) -> Result<(), SparseError> {
    let bytes = (n as u64).saturating_add(1).saturating_mul(per_row);
    ensure_memory(label, bytes, || format!("{n} rows"), limit)
}

/// Element types whose all-zero bytes are a valid value.
pub(super) trait Zeroable: Copy {}
impl Zeroable for u32 {}
impl Zeroable for f64 {}

/// `n` zeros, or an error saying what they were for and what they needed, instead of an abort.
///
/// The memory comes zeroed from the allocator (fresh pages from the system for large arrays), so
/// unlike `try_reserve` and `resize` no pass writes the zeros.
pub(super) fn zeroed<T: Zeroable>(
    n: usize,
    label: &str,
    what: impl FnOnce() -> String,
) -> Result<Vec<T>, SparseError> {
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    let fail = |what: String| {
        oom(
            label,
            bytes,
            what,
            "more than this machine can allocate".into(),
        )
    };
    let Ok(layout) = Layout::array::<T>(n) else {
        return Err(fail(what()));
    };
    // SAFETY: the layout has a non-zero size (n > 0 and T is not zero-sized).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return Err(fail(what()));
    }
    // SAFETY: `p` comes from the global allocator with the layout of `[T; n]`, so a vector of
    // capacity `n` may own it; all `n` elements are initialised, to zero bytes, which is a valid
    // value of every `Zeroable` type.
    Ok(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// Grows `v` by room for `extra` more elements, doubling its capacity as `Vec` does but never
/// beyond `bound` elements (the most it can ever hold), and fallibly.
pub(super) fn grow<T>(
    v: &mut Vec<T>,
    extra: usize,
    bound: usize,
    label: &str,
    what: impl FnOnce() -> String,
) -> Result<(), SparseError> {
    let need = v.len().saturating_add(extra);
    if need <= v.capacity() {
        return Ok(());
    }
    let target = need
        .max(v.capacity().saturating_mul(2))
        .min(bound.max(need));
    if v.try_reserve_exact(target - v.len()).is_err() {
        let bytes = (target as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        let why = "more than this machine can allocate".to_string();
        return Err(oom(label, bytes, what(), why));
    }
    Ok(())
}

/// A diagonal entry that rules out a symmetric positive definite matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiagonalFault {
    /// 1-based row.
    pub row: usize,
    /// The diagonal value, duplicates summed; `None` when the row stores no diagonal entry.
    pub value: Option<f64>,
}

/// The first row whose diagonal entry is absent, zero or negative (or NaN), if any: a matrix
/// with one is not symmetric positive definite. One binary search per row, in parallel; a row
/// of a non-square matrix beyond its last column has no diagonal.
pub fn first_bad_diagonal(a: &CsrMatrix) -> Option<DiagonalFault> {
    let at = |i: usize| -> Option<f64> {
        let (cols, vals) = a.row(i);
        cols.binary_search(&(i as u32)).ok().map(|p| vals[p])
    };
    (0..a.nrows())
        .into_par_iter()
        .with_min_len(4096)
        .find_first(|&i| at(i).is_none_or(|v| v.is_nan() || v <= 0.0))
        .map(|i| DiagonalFault {
            row: i + 1,
            value: at(i),
        })
}

/// The first row (1-based) that none of the triplets is the diagonal entry of, found without
/// allocating anything of the matrix's order: `None` as soon as there are at least `n` diagonal
/// triplets (a row without one may still hide among duplicates; [`first_bad_diagonal`] finds it
/// after assembly). Otherwise only the diagonal triplets, fewer than `n`, are collected and
/// sorted.
pub(super) fn missing_diagonal(n: usize, rows: &[u32], cols: &[u32]) -> Option<usize> {
    let diagonal = || {
        rows.par_iter()
            .zip(cols.par_iter())
            .filter(|(i, j)| i == j)
            .map(|(i, _)| *i)
    };
    if diagonal().count() >= n {
        return None;
    }
    let mut d: Vec<u32> = diagonal().collect();
    d.par_sort_unstable();
    d.dedup();
    let k = d
        .iter()
        .enumerate()
        .position(|(k, &r)| r as usize != k)
        .unwrap_or(d.len());
    Some(k + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_diagonal_names_the_first_row_without_one() {
        assert_eq!(missing_diagonal(3, &[0, 1, 2], &[0, 1, 2]), None);
        assert_eq!(missing_diagonal(3, &[0, 2, 1], &[0, 2, 0]), Some(2));
        // Duplicates can hide a missing one: the check after assembly finds it.
        assert_eq!(missing_diagonal(3, &[0, 2, 2], &[0, 2, 2]), None);
        assert_eq!(missing_diagonal(100_000_000, &[0, 1], &[0, 1]), Some(3));
        assert_eq!(missing_diagonal(1, &[], &[]), Some(1));
    }

    #[test]
    fn zeroed_and_grow_refuse_instead_of_aborting() {
        let v: Result<Vec<f64>, _> = zeroed(usize::MAX / 4, "x.mtx", || "many entries".into());
        let e = v.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with("x.mtx: needs "), "{e}");
        let v: Vec<u32> = zeroed(10, "x.mtx", String::new).unwrap_or_default();
        assert_eq!(v, vec![0; 10]);
        let mut w: Vec<u64> = Vec::new();
        assert!(grow(&mut w, usize::MAX / 2, usize::MAX, "x.mtx", String::new).is_err());
        assert!(grow(&mut w, 10, 12, "x.mtx", String::new).is_ok());
        assert!(w.capacity() >= 10 && w.capacity() <= 12);
    }

    #[test]
    fn memory_beyond_the_limit_is_refused_in_human_units() {
        let e = ensure_rows("big.mtx", 4_000_000_000, ROW_BYTES, Some(1 << 30)).err();
        let e = e.map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            e,
            "big.mtx: needs 256.0 GB for 4000000000 rows, more than the limit of 1.1 GB"
        );
        assert!(ensure_rows("small.mtx", 1000, ROW_BYTES, None).is_ok());
    }
}
