//! The banner and the size line: found in a file held in memory or read from a stream (where
//! comment and blank lines before the size line are skipped without being kept), and checked
//! the same way for both.
use std::io::Read;
use std::ops::Range;

use super::stream::{Stream, KEEP};
use super::{parse_err, scan, Field, Header, Symmetry};
use crate::SparseError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Coordinate,
    Array,
}

/// Banner and size line, and where the data section starts.
#[derive(Debug)]
pub(super) struct Prelude {
    pub header: Header,
    pub format: Format,
    pub banner_line: usize,
    pub size_line: usize,
    pub size_text: String,
    /// Byte offset of the data section (in-memory input; 0 for a stream).
    pub data_start: usize,
}

/// What the banner says.
struct Banner {
    format: Format,
    field: Field,
    symmetry: Symmetry,
}

/// Lines of `bytes` with their 1-based number and byte range (newline excluded).
fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, Range<usize>)> + '_ {
    let mut p = 0;
    let mut n = 0;
    std::iter::from_fn(move || {
        if p >= bytes.len() {
            return None;
        }
        let e = memchr::memchr(b'\n', &bytes[p..]).map_or(bytes.len(), |q| p + q);
        let r = p..e;
        p = e + 1;
        n += 1;
        Some((n, r))
    })
}

fn tokens(line: &[u8]) -> Vec<&[u8]> {
    line.split(|c| c.is_ascii_whitespace())
        .filter(|t| !t.is_empty())
        .collect()
}

const BANNER: &str = "%%MatrixMarket matrix coordinate real general";
const BOM: &[u8] = b"\xEF\xBB\xBF";

fn empty_file(label: &str) -> SparseError {
    parse_err(
        label,
        0,
        "empty file: expected a Matrix Market banner".into(),
    )
}

fn no_size_line(label: &str, last: usize) -> SparseError {
    parse_err(
        label,
        last,
        "the file ends before the size line (`rows columns entries`)".into(),
    )
}

/// A blank or comment line, as met before the size line.
fn skipped(line: &[u8]) -> bool {
    let t = line.trim_ascii_start();
    t.is_empty() || t[0] == b'%'
}

/// Banner and size line of a file held in memory.
pub(super) fn prelude(bytes: &[u8], label: &str) -> Result<Prelude, SparseError> {
    // A UTF-8 byte order mark is not part of the banner.
    let skip = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
    if bytes[skip..].iter().all(|c| c.is_ascii_whitespace()) {
        return Err(empty_file(label));
    }
    let mut it = lines(bytes);
    let (banner_line, br) = it.next().ok_or_else(|| empty_file(label))?;
    let banner = banner(
        label,
        banner_line,
        &bytes[br.start.max(skip).min(br.end)..br.end],
    )?;
    // The size line: the first line that is neither blank nor a comment.
    let mut last = banner_line;
    let (size_line, sr) = loop {
        match it.next() {
            None => return Err(no_size_line(label, last)),
            Some((n, r)) => {
                last = n;
                if !skipped(&bytes[r.clone()]) {
                    break (n, r);
                }
            }
        }
    };
    let mut pre = size(label, &banner, banner_line, size_line, &bytes[sr.clone()])?;
    pre.data_start = (sr.end + 1).min(bytes.len());
    Ok(pre)
}

/// Banner and size line read from a stream, which is left at the start of the data section.
/// Blank and comment lines are skipped without being kept; a banner or size line longer than
/// [`KEEP`] bytes is judged by its first [`KEEP`] bytes. A failing read becomes the error `io`
/// makes of it.
pub(super) fn stream_prelude<R: Read>(
    s: &mut Stream<R>,
    label: &str,
    io: &dyn Fn(std::io::Error) -> SparseError,
) -> Result<Prelude, SparseError> {
    let first = s
        .next_line(KEEP)
        .map_err(io)?
        .ok_or_else(|| empty_file(label))?;
    let text = first.text.strip_prefix(BOM).unwrap_or(&first.text);
    if text.iter().all(u8::is_ascii_whitespace) && (first.blank || !first.cut) {
        // A blank first line: an empty file, unless something follows.
        loop {
            match s.next_line(0).map_err(io)? {
                None => return Err(empty_file(label)),
                Some(l) if l.blank => {}
                Some(_) => break,
            }
        }
    }
    let banner_line = first.number;
    let banner = banner(label, banner_line, text)?;
    let mut last = banner_line;
    let line = loop {
        match s.next_line(KEEP).map_err(io)? {
            None => return Err(no_size_line(label, last)),
            Some(l) => {
                last = l.number;
                let comment = l.text.trim_ascii_start().first() == Some(&b'%');
                if !l.blank && !comment {
                    break l;
                }
            }
        }
    };
    if line.cut {
        return Err(parse_err(
            label,
            line.number,
            format!(
                "size line `{}` is longer than {KEEP} bytes",
                scan::quote(&line.text)
            ),
        ));
    }
    size(label, &banner, banner_line, line.number, &line.text)
}

/// Checks the banner line (byte order mark removed).
fn banner(label: &str, banner_line: usize, line: &[u8]) -> Result<Banner, SparseError> {
    let err = |msg: String| parse_err(label, banner_line, msg);
    let tok = tokens(line);
    if tok
        .first()
        .is_none_or(|t| !t.eq_ignore_ascii_case(b"%%MatrixMarket"))
    {
        return Err(err(format!(
            "missing Matrix Market banner: expected a first line like `{BANNER}`, found `{}`",
            scan::quote(line)
        )));
    }
    if tok.len() != 5 {
        return Err(err(format!(
            "banner `{}` has {} words; expected 5, like `{BANNER}`",
            scan::quote(line),
            tok.len()
        )));
    }
    let word = |t: &[u8]| String::from_utf8_lossy(t).to_ascii_lowercase();
    let (object, format, field, symmetry) =
        (word(tok[1]), word(tok[2]), word(tok[3]), word(tok[4]));
    if object != "matrix" {
        return Err(err(format!(
            "object `{object}` is not supported; expected `matrix`"
        )));
    }
    let format = match format.as_str() {
        "coordinate" => Format::Coordinate,
        "array" => Format::Array,
        _ => {
            return Err(err(format!(
                "format `{format}` is not supported; expected `coordinate` or `array`"
            )))
        }
    };
    let field = match field.as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "complex" | "pattern" => {
            return Err(err(format!(
                "field `{field}` is not supported: autopcg reads `real` and `integer` matrices"
            )))
        }
        _ => {
            return Err(err(format!(
                "unknown field `{field}`; expected `real` or `integer`"
            )))
        }
    };
    let symmetry = match symmetry.as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" | "hermitian" => {
            return Err(err(format!(
                "symmetry `{symmetry}` is not supported: autopcg reads `general` and `symmetric` matrices"
            )))
        }
        _ => {
            return Err(err(format!(
                "unknown symmetry `{symmetry}`; expected `general` or `symmetric`"
            )))
        }
    };
    Ok(Banner {
        format,
        field,
        symmetry,
    })
}

/// Checks the size line against the banner.
fn size(
    label: &str,
    banner: &Banner,
    banner_line: usize,
    size_line: usize,
    text: &[u8],
) -> Result<Prelude, SparseError> {
    let err = |msg: String| parse_err(label, size_line, msg);
    let Banner {
        format,
        field,
        symmetry,
    } = *banner;
    let size_text = scan::quote(text);
    let tok = tokens(text);
    let want = match format {
        Format::Coordinate => 3,
        Format::Array => 2,
    };
    if tok.len() != want {
        let what = match format {
            Format::Coordinate => "3 numbers (rows columns entries)",
            Format::Array => "2 numbers (rows columns)",
        };
        return Err(err(format!(
            "size line `{size_text}` has {} token(s); expected {what}",
            tok.len()
        )));
    }
    let mut nums = [0usize; 3];
    for (k, t) in tok.iter().enumerate() {
        nums[k] = parse_size(t)
            .map_err(|why| err(format!("size `{}` in `{size_text}` {why}", scan::quote(t))))?;
    }
    let (nrows, ncols) = (nums[0], nums[1]);
    let lim = (u32::MAX - 1) as usize;
    for (v, what) in [(nrows, "rows"), (ncols, "columns")] {
        if v > lim {
            return Err(err(format!(
                "{v} {what} in `{size_text}` exceed the largest supported size {lim}"
            )));
        }
    }
    let entries = match format {
        Format::Coordinate => nums[2],
        Format::Array => {
            let n = match symmetry {
                Symmetry::General => nrows.checked_mul(ncols),
                Symmetry::Symmetric => nrows.checked_mul(nrows + 1).map(|x| x / 2),
            };
            n.ok_or_else(|| err(format!("size `{size_text}` is too large")))?
        }
    };
    Ok(Prelude {
        header: Header {
            field,
            symmetry,
            nrows,
            ncols,
            entries,
        },
        format,
        banner_line,
        size_line,
        size_text,
        data_start: 0,
    })
}

fn parse_size(t: &[u8]) -> Result<usize, &'static str> {
    if t.first() == Some(&b'-') {
        return Err("is negative");
    }
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return Err("is not a non-negative integer");
    }
    let mut v: usize = 0;
    for &c in t {
        v = v
            .checked_mul(10)
            .and_then(|x| x.checked_add(usize::from(c - b'0')))
            .ok_or("is too large")?;
    }
    Ok(v)
}
