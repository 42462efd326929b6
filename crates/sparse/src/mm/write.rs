//! Matrix Market writing: rows are formatted in parallel into per-block buffers (`itoa` for
//! indices, `ryu` for values: the shortest decimal that reads back to the same `f64`) and the
//! buffers are written in order, a bounded batch at a time, into a temporary file that replaces
//! the target only once it is complete and on disk ([`write_atomic`]).
use std::io::{self, Write};
use std::ops::Range;
use std::path::Path;

use rayon::prelude::*;

use crate::io::write_atomic;
use crate::{CsrMatrix, SparseError};

/// Which entries [`write_matrix`] stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteSymmetry {
    /// Every stored entry, header `general`.
    General,
    /// Only the entries with `i >= j`, header `symmetric`. Meant for symmetric matrices: what
    /// lies above the diagonal is not written (the reader mirrors the lower triangle).
    SymmetricLower,
}

/// Target size of one formatted block, in entries.
const BLOCK_ENTRIES: usize = 1 << 15;
/// Blocks formatted per batch and thread: bounds the memory held before writing.
const BLOCKS_PER_THREAD: usize = 4;

fn is_gz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Writes `path` atomically ([`write_atomic`]: a temporary file renamed into place, so that a
/// failure leaves an earlier file as it was), gzip-compressed when it ends in `.gz`, with `body`
/// writing the text.
fn with_file(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), SparseError> {
    let gz = is_gz(path);
    write_atomic(path, |w| {
        if gz {
            // Level 1: numbers in text compress nearly as well as at higher levels, several times
            // faster.
            let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::fast());
            body(&mut gz)?;
            gz.finish()?;
            Ok(())
        } else {
            body(w)
        }
    })
}

/// Writes `a` to a Matrix Market `coordinate real` file (gzip-compressed when the name ends in
/// `.gz`).
pub fn write_matrix(
    path: impl AsRef<Path>,
    a: &CsrMatrix,
    sym: WriteSymmetry,
) -> Result<(), SparseError> {
    with_file(path.as_ref(), |w| write_matrix_to(w, a, sym))
}

/// Writes `a` in Matrix Market `coordinate real` format to `w`.
///
/// Fails with `InvalidInput` when `sym` is [`WriteSymmetry::SymmetricLower`] and `a` is not
/// square, and with `InvalidData` on a NaN or infinite value (the format has no place for them).
pub fn write_matrix_to(
    w: &mut (impl Write + ?Sized),
    a: &CsrMatrix,
    sym: WriteSymmetry,
) -> io::Result<()> {
    let lower = sym == WriteSymmetry::SymmetricLower;
    if lower && !a.is_square() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a symmetric Matrix Market file needs a square matrix, got {} x {}",
                a.nrows(),
                a.ncols()
            ),
        ));
    }
    let n = a.nrows();
    let count = if lower {
        (0..n)
            .into_par_iter()
            .with_min_len(4096)
            .map(|i| lower_len(a, i))
            .sum()
    } else {
        a.nnz()
    };
    let kind = if lower { "symmetric" } else { "general" };
    write!(
        w,
        "%%MatrixMarket matrix coordinate real {kind}\n{} {} {}\n",
        n,
        a.ncols(),
        count
    )?;
    let blocks = row_blocks(a.indptr());
    write_blocks(w, &blocks, |rows, out| format_rows(a, rows, lower, out))
}

/// Writes `x` as a Matrix Market `array real general` file with one column (gzip-compressed when
/// the name ends in `.gz`).
pub fn write_vector(path: impl AsRef<Path>, x: &[f64]) -> Result<(), SparseError> {
    with_file(path.as_ref(), |w| write_vector_to(w, x))
}

/// Writes `x` in Matrix Market `array real general` format (one column) to `w`. Fails with
/// `InvalidData` on a NaN or infinite value.
pub fn write_vector_to(w: &mut (impl Write + ?Sized), x: &[f64]) -> io::Result<()> {
    write!(
        w,
        "%%MatrixMarket matrix array real general\n{} 1\n",
        x.len()
    )?;
    let blocks: Vec<Range<usize>> = (0..x.len())
        .step_by(BLOCK_ENTRIES)
        .map(|s| s..(s + BLOCK_ENTRIES).min(x.len()))
        .collect();
    write_blocks(w, &blocks, |r, out| {
        let mut rb = ryu::Buffer::new();
        for (k, &v) in x[r.clone()].iter().enumerate() {
            if !v.is_finite() {
                return Err(not_finite(r.start + k, None, v));
            }
            out.extend_from_slice(rb.format_finite(v).as_bytes());
            out.push(b'\n');
        }
        Ok(())
    })
}

fn not_finite(i: usize, j: Option<usize>, v: f64) -> io::Error {
    let at = match j {
        Some(j) => format!("({}, {})", i + 1, j + 1),
        None => format!("{}", i + 1),
    };
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("entry {at} is {v}: Matrix Market files hold finite values only"),
    )
}

/// Number of entries with `j <= i` in row `i` (columns are sorted).
fn lower_len(a: &CsrMatrix, i: usize) -> usize {
    let (cols, _) = a.row(i);
    cols.partition_point(|&j| j as usize <= i)
}

/// Splits the rows into consecutive ranges of about [`BLOCK_ENTRIES`] entries each.
fn row_blocks(indptr: &[u32]) -> Vec<Range<usize>> {
    let n = indptr.len().saturating_sub(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let goal = indptr[start] as usize + BLOCK_ENTRIES;
        // First row whose start reaches the goal, at least one row further.
        let end = (indptr.partition_point(|&p| (p as usize) < goal)).clamp(start + 1, n);
        out.push(start..end);
        start = end;
    }
    out
}

/// Formats the blocks in parallel, a batch at a time, and writes them in order. Writing one
/// batch overlaps with formatting the next: the writer stays on the calling thread (it need not
/// be `Send`) while the pool formats.
fn write_blocks(
    w: &mut (impl Write + ?Sized),
    blocks: &[Range<usize>],
    format: impl Fn(&Range<usize>, &mut Vec<u8>) -> io::Result<()> + Sync,
) -> io::Result<()> {
    let batch = rayon::current_num_threads() * BLOCKS_PER_THREAD;
    let format_batch = |group: &[Range<usize>], bufs: &mut Vec<Vec<u8>>| -> io::Result<()> {
        bufs.resize_with(group.len(), Vec::new);
        bufs.truncate(group.len());
        bufs.par_iter_mut()
            .zip(group.par_iter())
            .try_for_each(|(buf, r)| {
                buf.clear();
                format(r, buf)
            })
    };
    let groups: Vec<&[Range<usize>]> = blocks.chunks(batch).collect();
    let (mut cur, mut next): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
    if let Some(first) = groups.first() {
        format_batch(first, &mut cur)?;
    }
    for k in 0..groups.len() {
        let mut formatted = Ok(());
        let mut written = Ok(());
        rayon::in_place_scope(|s| {
            if let Some(g) = groups.get(k + 1) {
                let (next, formatted) = (&mut next, &mut formatted);
                let format_batch = &format_batch;
                s.spawn(move |_| *formatted = format_batch(g, next));
            }
            written = cur.iter().try_for_each(|b| w.write_all(b));
        });
        written?;
        formatted?;
        std::mem::swap(&mut cur, &mut next);
    }
    Ok(())
}

fn format_rows(
    a: &CsrMatrix,
    rows: &Range<usize>,
    lower: bool,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let mut ib = itoa::Buffer::new();
    let mut jb = itoa::Buffer::new();
    let mut rb = ryu::Buffer::new();
    let p = a.indptr();
    // About 3 x 7 digits, a value of up to 24 characters and separators.
    out.reserve((p[rows.end] - p[rows.start]) as usize * 40);
    for i in rows.clone() {
        let (cols, vals) = a.row(i);
        let len = if lower { lower_len(a, i) } else { cols.len() };
        let row = ib.format(i + 1).as_bytes();
        for (&j, &v) in cols[..len].iter().zip(&vals[..len]) {
            if !v.is_finite() {
                return Err(not_finite(i, Some(j as usize), v));
            }
            out.extend_from_slice(row);
            out.push(b' ');
            out.extend_from_slice(jb.format(j + 1).as_bytes());
            out.push(b' ');
            out.extend_from_slice(rb.format_finite(v).as_bytes());
            out.push(b'\n');
        }
    }
    Ok(())
}
