//! The data section, parsed in parallel chunks into triplets (`coordinate`) or values (`array`),
//! with every allocation bounded by what the text can hold rather than by what the size line
//! declares.
//!
//! A file held in memory takes the fast path when its lines could not hold many more entries
//! than declared: each chunk writes straight into its window of the final arrays, sized by its
//! line count (at most one entry per 6 bytes: `1 1 1` and a newline). Otherwise (a file of
//! mostly blank or comment lines, or one declaring fewer entries than it holds) and for a stream,
//! the text goes block by block through a bounded scratch space into arrays that grow with the
//! entries actually found, never beyond the declared count: reading stops at the first entry too
//! many.
use std::io::{self, Read};
use std::ops::Range;
use std::sync::mpsc;

use rayon::prelude::*;

use super::check::{grow, zeroed};
use super::prelude::Prelude;
use super::scan::{self, ChunkInfo, Fault, Mode, Upper, Window, MIN_ENTRY_LINE};
use super::stream::{BlockError, Stream, BLOCK};
use super::{assemble, parse_err, Spot, Text, Triplets};
use crate::{Index, SparseError};

/// Chunks per thread: enough for load balance when lines differ in length.
const CHUNKS_PER_THREAD: usize = 8;

pub(super) fn chunks(bytes: &[u8], range: Range<usize>) -> Vec<Range<usize>> {
    scan::split_chunks(
        bytes,
        range,
        rayon::current_num_threads() * CHUNKS_PER_THREAD,
    )
}

/// Where the text being parsed sits in the input; it decides what a location is (see [`Text`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Origin {
    /// The text is the whole input: a location is a byte offset.
    Whole,
    /// The text is a block of a stream: a location is a line number.
    Block {
        /// 1-based number of the block's first line.
        first_line: usize,
    },
}

impl Origin {
    /// 1-based line of byte `offset` of `b`.
    fn line(self, b: &[u8], offset: usize) -> usize {
        match self {
            Origin::Whole => scan::line_number(b, offset),
            Origin::Block { first_line } => {
                first_line + scan::count_newlines(&b[..offset.min(b.len())])
            }
        }
    }

    fn fault(self, b: &[u8], label: &str, f: Fault) -> SparseError {
        parse_err(label, self.line(b, f.offset), f.msg)
    }

    fn spot(self, b: &[u8], offset: usize) -> Spot {
        Spot {
            line: self.line(b, offset),
            quote: scan::quote_line(b, offset),
        }
    }
}

/// The size line declares more entries than the file holds.
pub(super) fn too_few(label: &str, pre: &Prelude, found: usize) -> SparseError {
    parse_err(
        label,
        pre.size_line,
        format!(
            "size line `{}` declares {} entries but the file holds only {found}",
            pre.size_text, pre.header.entries
        ),
    )
}

/// The file holds more entries than the size line declares: `spot` is the first one too many,
/// `found` how many there are (`exact`) or at least are.
fn too_many(
    label: &str,
    pre: &Prelude,
    spot: Option<Spot>,
    found: usize,
    exact: bool,
) -> SparseError {
    let Spot { line, quote } = spot.unwrap_or(Spot {
        line: 0,
        quote: String::new(),
    });
    let holds = if exact { "" } else { "at least " };
    parse_err(
        label,
        line,
        format!(
            "entry `{quote}` is one more than the {} entries the size line `{}` (line {}) \
             declares; the file holds {holds}{found}",
            pre.header.entries, pre.size_text, pre.size_line
        ),
    )
}

/// The count check of a section parsed whole.
fn check_count(label: &str, pre: &Prelude, found: usize, text: &Text) -> Result<(), SparseError> {
    let declared = pre.header.entries;
    if found < declared {
        return Err(too_few(label, pre, found));
    }
    if found > declared {
        return Err(too_many(label, pre, text.nth(declared), found, true));
    }
    Ok(())
}

/// Leaves room for this many entries more than declared before taking the block path: a few
/// blank or comment lines in the data section do not count.
fn slack(declared: usize) -> usize {
    declared
        .saturating_add(declared / 8)
        .saturating_add(1 << 12)
}

/// Parses the chunks `ranges` of `b` in parallel, chunk `k` into the next `caps[k]` places of
/// the triplet arrays (which hold at least their sum); one result per chunk, in order.
fn parse_chunks(
    b: &[u8],
    ranges: &[Range<usize>],
    caps: &[usize],
    (mut r, mut c, mut v): (&mut [Index], &mut [Index], &mut [f64]),
    pre: &Prelude,
    mode: Mode,
) -> Vec<Result<ChunkInfo, Fault>> {
    let h = pre.header;
    let mut windows = Vec::with_capacity(ranges.len());
    for &n in caps {
        let (r0, r1) = r.split_at_mut(n);
        let (c0, c1) = c.split_at_mut(n);
        let (v0, v1) = v.split_at_mut(n);
        windows.push(Window {
            rows: r0,
            cols: c0,
            vals: v0,
        });
        (r, c, v) = (r1, c1, v1);
    }
    ranges
        .par_iter()
        .zip(windows.into_par_iter())
        .map(|(r, w)| scan::parse_coordinate(b, r.clone(), h.nrows, h.ncols, h.field, mode, w))
        .collect()
}

/// Parses all coordinate entries of a file held in memory and checks their count against the
/// size line.
pub(super) fn coordinate_triplets(
    bytes: &[u8],
    label: &str,
    pre: &Prelude,
    mode: Mode,
) -> Result<Triplets, SparseError> {
    let h = pre.header;
    let data = pre.data_start..bytes.len();
    let ranges = chunks(bytes, data.clone());
    let caps: Vec<usize> = ranges
        .par_iter()
        .map(|r| scan::capacity(bytes, r.clone(), MIN_ENTRY_LINE))
        .collect();
    let total: usize = caps.iter().sum();
    if total > slack(h.entries) {
        return block_triplets(bytes, data, label, pre, mode);
    }
    let what = || format!("{total} entries");
    let mut rows: Vec<Index> = zeroed(total, label, what)?;
    let mut cols: Vec<Index> = zeroed(total, label, what)?;
    let mut vals: Vec<f64> = zeroed(total, label, what)?;
    let parts = parse_chunks(
        bytes,
        &ranges,
        &caps,
        (&mut rows, &mut cols, &mut vals),
        pre,
        mode,
    );
    let mut infos = Vec::with_capacity(parts.len());
    for p in parts {
        infos.push(p.map_err(|f| Origin::Whole.fault(bytes, label, f))?);
    }
    let found: usize = infos.iter().map(|t| t.entries).sum();
    let text = Text::Bytes {
        bytes,
        data_start: pre.data_start,
    };
    check_count(label, pre, found, &text)?;
    // Close the gaps: in place when few threads would share the copy, else in parallel into
    // new arrays (the in-place moves overlap, so they must run in order).
    let mut pieces = Vec::with_capacity(caps.len());
    let mut src = 0;
    for (info, cap) in infos.iter().zip(&caps) {
        pieces.push((src, info.filled));
        src += cap;
    }
    let kept: usize = pieces.iter().map(|p| p.1).sum();
    if kept != total && rayon::current_num_threads() > 2 {
        rows = assemble::gather(&rows, &pieces, kept);
        cols = assemble::gather(&cols, &pieces, kept);
        vals = assemble::gather(&vals, &pieces, kept);
    } else {
        let mut dst = 0;
        for &(src, n) in &pieces {
            if dst != src && n > 0 {
                rows.copy_within(src..src + n, dst);
                cols.copy_within(src..src + n, dst);
                vals.copy_within(src..src + n, dst);
            }
            dst += n;
        }
        rows.truncate(dst);
        cols.truncate(dst);
        vals.truncate(dst);
    }
    let upper = infos.into_iter().flat_map(|t| t.upper).collect();
    Ok(Triplets {
        rows,
        cols,
        vals,
        upper,
    })
}

/// Triplets gathered block by block.
#[derive(Default)]
struct Acc {
    t: Triplets,
    /// Data lines seen so far (entries as the size line counts them).
    entries: usize,
    rows: Vec<Index>,
    cols: Vec<Index>,
    vals: Vec<f64>,
}

/// The block path for a file held in memory: blocks of about [`BLOCK`] bytes of whole lines.
fn block_triplets(
    bytes: &[u8],
    data: Range<usize>,
    label: &str,
    pre: &Prelude,
    mode: Mode,
) -> Result<Triplets, SparseError> {
    let mut acc = Acc::default();
    let mut a = data.start;
    while a < data.end {
        let want = a.saturating_add(BLOCK);
        let b = if want >= data.end {
            data.end
        } else {
            memchr::memchr(b'\n', &bytes[want..data.end]).map_or(data.end, |q| want + q + 1)
        };
        coordinate_block(bytes, a..b, Origin::Whole, label, pre, mode, &mut acc)?;
        a = b;
    }
    if acc.entries < pre.header.entries {
        return Err(too_few(label, pre, acc.entries));
    }
    Ok(acc.t)
}

/// Parses a stream's data section block by block, in memory bounded by a few blocks and the
/// entries found.
pub(super) fn stream_triplets<R: Read + Send>(
    s: &mut Stream<R>,
    label: &str,
    pre: &Prelude,
    mode: Mode,
    io: &dyn Fn(io::Error) -> SparseError,
) -> Result<Triplets, SparseError> {
    let mut acc = Acc::default();
    for_each_block(s, label, io, |text, first_line| {
        let origin = Origin::Block { first_line };
        coordinate_block(text, 0..text.len(), origin, label, pre, mode, &mut acc)
    })?;
    if acc.entries < pre.header.entries {
        return Err(too_few(label, pre, acc.entries));
    }
    Ok(acc.t)
}

/// Values of a stream's `array` section, block by block.
pub(super) fn stream_values<R: Read + Send>(
    s: &mut Stream<R>,
    label: &str,
    pre: &Prelude,
    io: &dyn Fn(io::Error) -> SparseError,
) -> Result<Vec<f64>, SparseError> {
    let mut out = Vec::new();
    for_each_block(s, label, io, |text, first_line| {
        let origin = Origin::Block { first_line };
        values_block(text, 0..text.len(), origin, label, pre, &mut out)
    })?;
    if out.len() < pre.header.entries {
        return Err(too_few(label, pre, out.len()));
    }
    Ok(out)
}

/// Hands the blocks of `s` to `each` in order, with their first line numbers. The next block is
/// read (for a `.gz` file: decompressed, which runs on one core) on a thread of its own while
/// `each` parses the current one on the thread pool; at most three blocks are held at a time.
/// The first error stops both.
fn for_each_block<R: Read + Send>(
    s: &mut Stream<R>,
    label: &str,
    io: &dyn Fn(io::Error) -> SparseError,
    mut each: impl FnMut(&[u8], usize) -> Result<(), SparseError>,
) -> Result<(), SparseError> {
    type Msg = Result<(Vec<u8>, usize), BlockError>;
    let (full_tx, full_rx) = mpsc::sync_channel::<Msg>(1);
    let (free_tx, free_rx) = mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        scope.spawn(move || loop {
            let msg = match s.next_block() {
                Ok(None) => break,
                Ok(Some(b)) => {
                    let mut buf = free_rx.try_recv().unwrap_or_default();
                    buf.clear();
                    buf.extend_from_slice(b.text);
                    Ok((buf, b.first_line))
                }
                Err(e) => Err(e),
            };
            let failed = msg.is_err();
            // A closed channel means the parser stopped at an error: stop too.
            if full_tx.send(msg).is_err() || failed {
                break;
            }
        });
        // Dropping the receiver on an error (returning early) ends the reading thread.
        let full_rx = full_rx;
        for msg in full_rx.iter() {
            let (buf, first_line) = msg.map_err(|e| block_err(e, label, io))?;
            each(&buf, first_line)?;
            let _ = free_tx.send(buf);
        }
        Ok(())
    })
}

fn block_err(e: BlockError, label: &str, io: &dyn Fn(io::Error) -> SparseError) -> SparseError {
    match e {
        BlockError::Io(e) => io(e),
        BlockError::LongLine { line, start } => parse_err(
            label,
            line,
            format!(
                "line `{}` does not end within {} MiB: it is no Matrix Market entry",
                scan::quote(&start),
                BLOCK >> 20
            ),
        ),
    }
}

/// Parses the coordinate entries of `b[range]` (whole lines) and appends them to `acc`; stops
/// at the first entry beyond the declared count.
fn coordinate_block(
    b: &[u8],
    range: Range<usize>,
    origin: Origin,
    label: &str,
    pre: &Prelude,
    mode: Mode,
    acc: &mut Acc,
) -> Result<(), SparseError> {
    let h = pre.header;
    let ranges = chunks(b, range);
    let caps: Vec<usize> = ranges
        .iter()
        .map(|r| scan::capacity(b, r.clone(), MIN_ENTRY_LINE))
        .collect();
    let total: usize = caps.iter().sum();
    let Acc {
        t,
        entries,
        rows,
        cols,
        vals,
    } = acc;
    if rows.len() < total {
        // With room to spare, so that the next blocks fit too.
        let room = total.saturating_add(total / 4);
        let what = || format!("a block of {room} entries");
        *rows = zeroed(room, label, what)?;
        *cols = zeroed(room, label, what)?;
        *vals = zeroed(room, label, what)?;
    }
    let parts = parse_chunks(b, &ranges, &caps, (rows, cols, vals), pre, mode);
    let mut start = 0;
    // Upper entries of a stream block get line numbers, counted forward from the last one.
    let mut at = (0, origin.line(b, 0));
    for ((part, r), cap) in parts.into_iter().zip(&ranges).zip(&caps) {
        let info = part.map_err(|f| origin.fault(b, label, f))?;
        let room = h.entries - *entries;
        if info.entries > room {
            let spot = scan::nth_data_line(b, r.clone(), room).map(|o| origin.spot(b, o));
            return Err(too_many(label, pre, spot, *entries + info.entries, false));
        }
        *entries += info.entries;
        let n = info.filled;
        let after = t.vals.len() + n;
        let what = || format!("{after} entries");
        grow(&mut t.rows, n, h.entries, label, what)?;
        grow(&mut t.cols, n, h.entries, label, what)?;
        grow(&mut t.vals, n, h.entries, label, what)?;
        t.rows.extend_from_slice(&rows[start..start + n]);
        t.cols.extend_from_slice(&cols[start..start + n]);
        t.vals.extend_from_slice(&vals[start..start + n]);
        for u in info.upper {
            let offset = match origin {
                Origin::Whole => u.offset,
                Origin::Block { .. } => {
                    at = (u.offset, at.1 + scan::count_newlines(&b[at.0..u.offset]));
                    at.1
                }
            };
            t.upper.push(Upper { offset, ..u });
        }
        start += cap;
    }
    Ok(())
}

/// All values of an `array` section of a file held in memory, in file order, checked against
/// the declared count.
pub(super) fn array_values(
    bytes: &[u8],
    label: &str,
    pre: &Prelude,
) -> Result<Vec<f64>, SparseError> {
    let ranges = chunks(bytes, pre.data_start..bytes.len());
    let parts: Vec<Result<Vec<f64>, Fault>> = ranges
        .par_iter()
        .map(|r| scan::parse_array(bytes, r.clone(), pre.header.field))
        .collect();
    let mut ok = Vec::with_capacity(parts.len());
    for p in parts {
        ok.push(p.map_err(|f| Origin::Whole.fault(bytes, label, f))?);
    }
    let found: usize = ok.iter().map(Vec::len).sum();
    let text = Text::Bytes {
        bytes,
        data_start: pre.data_start,
    };
    check_count(label, pre, found, &text)?;
    Ok(ok.concat())
}

/// Parses the values of `b[range]` and appends them to `out`; stops at the first value beyond
/// the declared count.
fn values_block(
    b: &[u8],
    range: Range<usize>,
    origin: Origin,
    label: &str,
    pre: &Prelude,
    out: &mut Vec<f64>,
) -> Result<(), SparseError> {
    let declared = pre.header.entries;
    let ranges = chunks(b, range);
    let parts: Vec<Result<Vec<f64>, Fault>> = ranges
        .par_iter()
        .map(|r| scan::parse_array(b, r.clone(), pre.header.field))
        .collect();
    for (part, r) in parts.into_iter().zip(&ranges) {
        let v = part.map_err(|f| origin.fault(b, label, f))?;
        let room = declared - out.len();
        if v.len() > room {
            let spot = scan::nth_data_line(b, r.clone(), room).map(|o| origin.spot(b, o));
            return Err(too_many(label, pre, spot, out.len() + v.len(), false));
        }
        let after = out.len() + v.len();
        let what = || format!("{after} values");
        grow(out, v.len(), declared, label, what)?;
        out.extend_from_slice(&v);
    }
    Ok(())
}
