//! The data section scanner: splits the bytes after the size line into chunks that end at line
//! boundaries and parses each chunk on its own (the caller runs them in parallel).
//!
//! Nothing here knows line numbers: a fault carries the byte offset of the line it concerns, and
//! the caller turns that into a 1-based line number by counting newlines, which only happens on
//! the error path.
use std::ops::Range;

use super::Field;

/// A malformed line: the byte offset (into the whole input) where the line starts, and what is
/// wrong with it, quoting the value at fault.
#[derive(Debug)]
pub(super) struct Fault {
    pub offset: usize,
    pub msg: String,
}

/// What to do with the coordinate entries of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Keep every entry as it is.
    General,
    /// Symmetric header: keep the lower triangle (the caller mirrors it); set entries above the
    /// diagonal aside so that they can be checked against their mirror once everything is parsed.
    SymmetricFile,
    /// Keep the lower triangle (the caller mirrors it), drop what lies above the diagonal.
    DropUpper,
}

/// An entry above the diagonal of a symmetric file (0-based indices, `i < j`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Upper {
    pub i: u32,
    pub j: u32,
    pub v: f64,
    pub offset: usize,
}

/// Splits `bytes[range]` (whole lines) into about `pieces` ranges, each ending just after a
/// newline (the last one at the end of the range). An empty range gives no range.
pub(super) fn split_chunks(bytes: &[u8], range: Range<usize>, pieces: usize) -> Vec<Range<usize>> {
    let (start, end) = (range.start, range.end.min(bytes.len()));
    let len = end.saturating_sub(start);
    if len == 0 {
        return Vec::new();
    }
    let target = (len / pieces.max(1)).max(1 << 16);
    let mut out = Vec::with_capacity(len / target + 1);
    let mut a = start;
    while a < end {
        let want = a.saturating_add(target);
        let b = if want >= end {
            end
        } else {
            match memchr::memchr(b'\n', &bytes[want..end]) {
                Some(q) => want + q + 1,
                None => end,
            }
        };
        out.push(a..b);
        a = b;
    }
    out
}

#[inline]
fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\r'
}

#[inline]
fn skip_blanks(b: &[u8], mut p: usize, end: usize) -> usize {
    while p < end && is_blank(b[p]) {
        p += 1;
    }
    p
}

/// End of the line that starts at or contains `p` (position of its newline, or `end`).
fn line_end(b: &[u8], p: usize, end: usize) -> usize {
    memchr::memchr(b'\n', &b[p..end]).map_or(end, |q| p + q)
}

/// The line starting at `start`, trimmed, for quoting in a message (cut after 80 characters).
pub(super) fn quote_line(b: &[u8], start: usize) -> String {
    let e = line_end(b, start, b.len());
    quote(&b[start..e])
}

/// A token or line for quoting in a message: trimmed, lossy UTF-8, cut after 80 characters.
pub(super) fn quote(t: &[u8]) -> String {
    let s = String::from_utf8_lossy(t);
    let s = s.trim();
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(80).collect();
        format!("{cut}...")
    } else {
        s.to_string()
    }
}

/// Number of whitespace-separated tokens on the line starting at `start`.
fn count_tokens(b: &[u8], start: usize) -> usize {
    let e = line_end(b, start, b.len());
    b[start..e]
        .split(|&c| is_blank(c))
        .filter(|t| !t.is_empty())
        .count()
}

/// The token starting at `p` (up to the next blank or newline).
fn token_at(b: &[u8], p: usize) -> &[u8] {
    let mut e = p;
    while e < b.len() && !is_blank(b[e]) && b[e] != b'\n' {
        e += 1;
    }
    &b[p..e]
}

#[inline]
fn is_sep(b: &[u8], p: usize, end: usize) -> bool {
    p >= end || b[p] == b'\n' || is_blank(b[p])
}

/// Scans the digits at `p`: the value (saturated to `u64::MAX` past 19 digits) and the position
/// after them (`p` itself when there is no digit).
#[inline(always)]
fn scan_digits(b: &[u8], p: usize, end: usize) -> (u64, usize) {
    let mut q = p;
    let mut v: u64 = 0;
    while q < end && b[q].is_ascii_digit() {
        v = if q - p < 19 {
            v * 10 + u64::from(b[q] - b'0')
        } else {
            u64::MAX
        };
        q += 1;
    }
    (v, q)
}

/// Parses a 1-based index at `p`, checked against `1..=limit`. Returns the 0-based index and the
/// position after it.
#[inline(always)]
fn parse_index(
    b: &[u8],
    p: usize,
    end: usize,
    limit: usize,
    what: &'static str,
    line: usize,
) -> Result<(u32, usize), Fault> {
    let (v, q) = scan_digits(b, p, end);
    if q == p || !is_sep(b, q, end) || v == 0 || v > limit as u64 {
        return Err(index_fault(b, p, q, v, limit, what, line));
    }
    Ok(((v - 1) as u32, q))
}

#[cold]
#[inline(never)]
fn index_fault(
    b: &[u8],
    p: usize,
    q: usize,
    v: u64,
    limit: usize,
    what: &str,
    line: usize,
) -> Fault {
    let msg = if q == p || !is_sep(b, q, b.len()) {
        format!(
            "{what} index `{}` is not a positive integer (line `{}`)",
            quote(token_at(b, p)),
            quote_line(b, line)
        )
    } else {
        let extra = if v == 0 { " (indices are 1-based)" } else { "" };
        format!(
            "{what} index {} is out of range 1..={limit}{extra} (line `{}`)",
            quote(&b[p..q]),
            quote_line(b, line)
        )
    };
    Fault { offset: line, msg }
}

/// Parses a value at `p` (the first byte is not blank and not a newline). Returns it and the
/// position after it.
#[inline(always)]
fn parse_value(
    b: &[u8],
    p: usize,
    end: usize,
    field: Field,
    line: usize,
) -> Result<(f64, usize), Fault> {
    match field {
        Field::Real => match lexical_core::parse_partial::<f64>(&b[p..end]) {
            Ok((v, n)) if n > 0 && is_sep(b, p + n, end) && v.is_finite() => Ok((v, p + n)),
            _ => Err(value_fault(b, p, end, field, line)),
        },
        Field::Integer => {
            let neg = b[p] == b'-';
            let d0 = if neg || b[p] == b'+' { p + 1 } else { p };
            let (v, q) = scan_digits(b, d0, end);
            // Up to 18 digits always fit an i64 (the check is on the digit count).
            if q == d0 || q - d0 > 18 || !is_sep(b, q, end) {
                return Err(value_fault(b, p, end, field, line));
            }
            let v = v as f64;
            Ok((if neg { -v } else { v }, q))
        }
    }
}

#[cold]
#[inline(never)]
fn value_fault(b: &[u8], p: usize, end: usize, field: Field, line: usize) -> Fault {
    let tok = quote(token_at(b, p));
    let why = match field {
        Field::Real => match lexical_core::parse_partial::<f64>(&b[p..end]) {
            Ok((v, n)) if n > 0 && is_sep(b, p + n, end) && !v.is_finite() => {
                "is not a finite number"
            }
            _ => "is not a number",
        },
        Field::Integer => {
            let d0 = if b[p] == b'-' || b[p] == b'+' {
                p + 1
            } else {
                p
            };
            let (_, q) = scan_digits(b, d0, end);
            if q > d0 && q - d0 > 18 && is_sep(b, q, end) {
                "is too large (integers of up to 18 digits are read)"
            } else {
                "is not an integer (the header says `integer`)"
            }
        }
    };
    Fault {
        offset: line,
        msg: format!("value `{tok}` {why} (line `{}`)", quote_line(b, line)),
    }
}

/// Skips blank and comment lines starting at `p`; returns the start of the next data token, or
/// `None` at the end of the range. `line` is set to the start of the line that token is on.
#[inline(always)]
fn next_data(b: &[u8], mut p: usize, end: usize, line: &mut usize) -> Option<usize> {
    loop {
        *line = p;
        p = skip_blanks(b, p, end);
        if p >= end {
            return None;
        }
        match b[p] {
            b'\n' => p += 1,
            b'%' => p = line_end(b, p, end) + 1,
            _ => return Some(p),
        }
    }
}

#[cold]
#[inline(never)]
fn wrong_count(b: &[u8], line: usize, expected: &str) -> Fault {
    Fault {
        offset: line,
        msg: format!(
            "expected {expected} but the line has {} token(s): `{}`",
            count_tokens(b, line),
            quote_line(b, line)
        ),
    }
}

/// Skips the blanks after a token and returns where the next one starts. After the `LAST`
/// token of a line only blanks may follow before the newline, and the start of the next line
/// is returned; between two tokens a newline or the end there means a token is missing.
#[inline(always)]
fn after_token<const LAST: bool>(
    b: &[u8],
    p: usize,
    end: usize,
    line: usize,
    expected: &'static str,
) -> Result<usize, Fault> {
    let q = skip_blanks(b, p, end);
    let at_newline = q < end && b[q] == b'\n';
    match (LAST, q >= end, at_newline) {
        (true, true, _) => Ok(end),
        (true, false, true) => Ok(q + 1),
        (false, false, false) => Ok(q),
        _ => Err(wrong_count(b, line, expected)),
    }
}

const COORD: &str = "3 tokens (row, column, value)";
const ARRAY: &str = "1 token (one value per line)";

/// Number of newlines in `b`: with [`Mode`] it bounds the entries a chunk can produce.
pub(super) fn count_newlines(b: &[u8]) -> usize {
    // memchr's counting iterator runs vectorised.
    memchr::memchr_iter(b'\n', b).count()
}

/// Shortest coordinate entry line: `1 1 1` and its newline.
pub(super) const MIN_ENTRY_LINE: usize = 6;
/// Shortest array value line: `1` and its newline.
pub(super) const MIN_VALUE_LINE: usize = 2;

/// Upper bound on the entries a range of whole lines yields: its number of lines, and at most
/// one per `min_line` bytes (every data line but the last one of the input ends with a newline,
/// so `k` data lines take at least `k * min_line - 1` bytes). The second bound keeps a range of
/// blank lines from asking for a slot per newline.
pub(super) fn capacity(b: &[u8], range: Range<usize>, min_line: usize) -> usize {
    let text = &b[range];
    let lines = count_newlines(text) + usize::from(text.last().is_some_and(|&c| c != b'\n'));
    lines.min((text.len() + 1) / min_line.max(1))
}

/// Where a chunk writes its triplets: at least [`capacity`] slots.
pub(super) struct Window<'a> {
    pub rows: &'a mut [u32],
    pub cols: &'a mut [u32],
    pub vals: &'a mut [f64],
}

/// What a chunk produced besides its triplets.
#[derive(Debug, Default)]
pub(super) struct ChunkInfo {
    /// Triplets written at the start of the window.
    pub filled: usize,
    /// Number of data lines (entries as the size line counts them).
    pub entries: usize,
    /// Entries above the diagonal of a symmetric file, in file order.
    pub upper: Vec<Upper>,
}

/// Parses the coordinate entries in `bytes[range]` into `w`, which must hold
/// [`capacity`]`(bytes, range)` slots.
pub(super) fn parse_coordinate(
    b: &[u8],
    range: Range<usize>,
    nrows: usize,
    ncols: usize,
    field: Field,
    mode: Mode,
    w: Window<'_>,
) -> Result<ChunkInfo, Fault> {
    let end = range.end;
    let mut p = range.start;
    let mut info = ChunkInfo::default();
    let mut k = 0;
    let mut line = p;
    while let Some(q) = next_data(b, p, end, &mut line) {
        let (i, q) = parse_index(b, q, end, nrows, "row", line)?;
        let q = after_token::<false>(b, q, end, line, COORD)?;
        let (j, q) = parse_index(b, q, end, ncols, "column", line)?;
        let q = after_token::<false>(b, q, end, line, COORD)?;
        let (v, q) = parse_value(b, q, end, field, line)?;
        p = after_token::<true>(b, q, end, line, COORD)?;
        info.entries += 1;
        if mode == Mode::General || i >= j {
            w.rows[k] = i;
            w.cols[k] = j;
            w.vals[k] = v;
            k += 1;
        } else if mode == Mode::SymmetricFile {
            info.upper.push(Upper {
                i,
                j,
                v,
                offset: line,
            });
        }
    }
    info.filled = k;
    Ok(info)
}

/// Parses the values of an array section in `bytes[range]`, one per line, in file order.
pub(super) fn parse_array(b: &[u8], range: Range<usize>, field: Field) -> Result<Vec<f64>, Fault> {
    let end = range.end;
    let mut p = range.start;
    // Grown as values come: a range of blank lines asks for nothing.
    let mut out = Vec::with_capacity(capacity(b, range.clone(), MIN_VALUE_LINE).min(1 << 16));
    let mut line = p;
    while let Some(q) = next_data(b, p, end, &mut line) {
        let (v, q) = parse_value(b, q, end, field, line)?;
        p = after_token::<true>(b, q, end, line, ARRAY)?;
        out.push(v);
    }
    Ok(out)
}

/// Byte offset of the line holding the `k`-th (0-based) data line of `bytes[range]`, if any.
pub(super) fn nth_data_line(b: &[u8], range: Range<usize>, k: usize) -> Option<usize> {
    let end = range.end;
    let mut p = range.start;
    let mut line = p;
    let mut seen = 0;
    while let Some(q) = next_data(b, p, end, &mut line) {
        if seen == k {
            return Some(line);
        }
        seen += 1;
        p = line_end(b, q, end) + 1;
    }
    None
}

/// Byte offset of the first data line of `bytes[range]` whose row and column (1-based, as written)
/// are `row` and `col` (or, with `mirror`, `col` and `row`).
pub(super) fn find_entry(
    b: &[u8],
    range: Range<usize>,
    row: u64,
    col: u64,
    mirror: bool,
) -> Option<usize> {
    let end = range.end;
    let mut p = range.start;
    let mut line = p;
    while let Some(q) = next_data(b, p, end, &mut line) {
        let (r, q) = scan_digits(b, q, end);
        let q = skip_blanks(b, q, end);
        let (c, _) = scan_digits(b, q, end);
        if (r, c) == (row, col) || (mirror && (c, r) == (row, col)) {
            return Some(line);
        }
        p = line_end(b, line, end) + 1;
    }
    None
}

/// 1-based number of the line containing byte `offset`.
pub(super) fn line_number(b: &[u8], offset: usize) -> usize {
    let offset = offset.min(b.len());
    1 + b[..offset].iter().filter(|&&c| c == b'\n').count()
}
