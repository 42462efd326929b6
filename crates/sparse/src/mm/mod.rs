//! Matrix Market reading and writing.
//!
//! Reading maps a plain file into memory, reads the banner and size line, then cuts the data
//! section into chunks at line boundaries and parses them in parallel, with a hand-written index
//! parser and `lexical-core` for the values, straight into the final triplet arrays. A `.gz` file
//! is streamed instead: decompressed a block of whole lines at a time, on a thread of its own
//! while the previous block is parsed in parallel the same way, so that memory holds a few
//! blocks and the entries found, never the decompressed text. Line numbers are only worked out
//! on the error path (for a stream, by counting the newlines of the block at fault, or by
//! decompressing the file again). Triplets that come by row (or, for a symmetric file, by row or by column) are assembled in place; any
//! other order goes to [`CsrMatrix::from_triplets`]. Either way duplicates are summed in file
//! order and the result is bit for bit the same, whatever the order of the entries, the number
//! of threads and whether the file was compressed.
//!
//! Supported: `coordinate` with `real` or `integer` values and `general` or `symmetric`
//! symmetry (the stored lower triangle is mirrored), and `array` (dense, column-major) for vectors
//! and small dense matrices. `pattern`, `complex`, `skew-symmetric` and `hermitian` are refused.
//! Every malformed input gives a [`SparseError::Parse`] naming the file, the 1-based line and the
//! value at fault.
//!
//! # Memory: a declared size is never trusted
//!
//! A size line can declare anything; the reader allocates in proportion to what the file holds:
//!
//! - Entries: the triplet arrays are sized by the lines of the text, counting at most one entry
//!   per 6 bytes (`1 1 1` and a newline, the shortest entry), and never beyond the declared
//!   count: a file of mostly blank lines takes the block path, whose arrays grow with the
//!   entries found, and reading stops at the first entry beyond the declared count.
//! - Rows: the row structures of an `n`-row matrix (row pointers and the assembly's work arrays,
//!   up to 64 bytes a row; 8 for a matrix with fewer entries than one per 8 rows, which is
//!   assembled from its sorted entries with the row pointer as its only row-sized array) are
//!   only allocated after a check: refused with [`SparseError::OutOfMemory`], saying what was
//!   needed ("needs 32.0 GB for 4000000000 rows"), when they exceed
//!   [`ReadChecks::memory_limit`], the memory the system says is available, or what a fallible
//!   allocation of that size gets. With [`ReadChecks::positive_diagonal`], a matrix with fewer
//!   diagonal entries than rows is refused before anything of its order is allocated.
//! - The arrays sized by the entries are allocated fallibly: a failure is an
//!   [`SparseError::OutOfMemory`], not an abort. Those sized by the rows are covered by the check
//!   above (which memory taken meanwhile by another process can still outrun).
//! - A `.gz` file holds a few blocks of decompressed text (8 MiB each: one being decompressed,
//!   on a thread of its own, one waiting, one being parsed) whatever it expands to; blank space
//!   at the start of a line and comment lines of any length are skipped without being kept, and
//!   a data line longer than a block is refused.
//!
//! # Checks for solving
//!
//! [`ReadChecks::positive_diagonal`] refuses a matrix that cannot be symmetric positive definite
//! because of its diagonal, before any solver work: a row without a diagonal entry (an empty
//! row of a symmetric file among them) names the row, a zero or negative diagonal entry names
//! the file line storing it and its value ([`SparseError::BadDiagonal`]). [`find_entry_line`]
//! and [`diagonal_error`] find that line later for a fault found elsewhere (a solver's), by
//! reading the file again.
//!
//! Writing formats rows in parallel into per-chunk buffers (shortest round-trip decimal values, so
//! a matrix written and read back is bitwise the same) and writes them atomically
//! ([`crate::io::write_atomic`]): a failed write leaves an earlier file as it was.
use std::io::{BufReader, Read};
use std::path::Path;

use crate::{CsrMatrix, SparseError};

mod assemble;
mod check;
mod collect;
mod prelude;
mod scan;
mod stream;
mod write;

pub use check::{first_bad_diagonal, DiagonalFault};
use prelude::{Format, Prelude};
use scan::{Mode, Upper};
use stream::Stream;
pub use write::{write_matrix, write_matrix_to, write_vector, write_vector_to, WriteSymmetry};

/// Relative tolerance for symmetry checks: `|a_ij - a_ji| <= SYM_TOL * max(|a_ij|, |a_ji|)`.
pub const SYM_TOL: f64 = 1e-10;

/// Value type of the entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Floating-point values.
    Real,
    /// Integer values (converted to `f64`).
    Integer,
}

/// Symmetry declared by the banner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symmetry {
    /// Every entry is stored.
    General,
    /// Only the lower triangle (with the diagonal) is stored; the upper one is its mirror.
    Symmetric,
}

/// What the banner and size line of a file say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Value type.
    pub field: Field,
    /// Declared symmetry.
    pub symmetry: Symmetry,
    /// Number of rows.
    pub nrows: usize,
    /// Number of columns.
    pub ncols: usize,
    /// Number of stored entries the size line declares (for `array` files, the number of values).
    pub entries: usize,
}

/// How a matrix with a `general` header is treated (files with a `symmetric` header are always
/// expanded to both triangles).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SymmetryPolicy {
    /// Return the matrix as stored.
    #[default]
    AsStored,
    /// The matrix must be symmetric to a relative tolerance of [`SYM_TOL`]; it is returned as its
    /// lower triangle mirrored (so exactly symmetric). Otherwise an error names an offending entry.
    RequireSymmetric,
    /// Take the lower triangle and mirror it, ignoring what is stored above the diagonal.
    AssumeSymmetric,
}

/// Options of [`read_matrix`] and [`parse_matrix`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// Treatment of `general` matrices.
    pub symmetry: SymmetryPolicy,
    /// Refuse non-square matrices.
    pub require_square: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            symmetry: SymmetryPolicy::AsStored,
            require_square: true,
        }
    }
}

/// A matrix read from a Matrix Market file, with the header it was read with.
#[derive(Debug, Clone, PartialEq)]
pub struct MmMatrix {
    /// Banner and size line of the file.
    pub header: Header,
    /// The matrix (both triangles for symmetric files, duplicates summed).
    pub matrix: CsrMatrix,
}

/// Checks and limits of [`read_matrix_checked`] and [`parse_matrix_checked`] beyond
/// [`ReadOptions`]. Build it with `ReadChecks { positive_diagonal: true, ..Default::default() }`
/// so that fields added later keep the code compiling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadChecks {
    /// Refuse a matrix whose diagonal rules out symmetric positive definiteness: a row without a
    /// diagonal entry, or a zero or negative one ([`SparseError::BadDiagonal`], naming the row,
    /// and the file line and value of a stored entry). Requires a square matrix. A file with
    /// fewer diagonal entries than rows is refused before anything of the matrix's order is
    /// allocated.
    pub positive_diagonal: bool,
    /// The most bytes the row structures of the matrix may take (row pointers and assembly work
    /// arrays: up to 64 bytes a row, 8 for a matrix with fewer than one entry per 8 rows), beyond
    /// which the file is refused with [`SparseError::OutOfMemory`]. `None`: what the machine can
    /// give.
    pub memory_limit: Option<u64>,
}

/// A line of a file found by [`find_entry_line`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryLine {
    /// 1-based line number.
    pub line: usize,
    /// The line, trimmed (cut after 80 characters).
    pub text: String,
}

/// The banner and size line of a Matrix Market file (a `.gz` file decompressed as far as
/// them), without reading its data: what a caller sizes its work by before the whole read.
pub fn read_header(path: impl AsRef<Path>) -> Result<Header, SparseError> {
    let path = path.as_ref();
    let label = path.display().to_string();
    let mut s = open_stream(path, HEADER_BLOCK)?;
    let io = |e| stream_err(path, &label, e);
    Ok(prelude::stream_prelude(&mut s, &label, &io)?.header)
}

/// Buffer of [`read_header`]'s stream: a banner, comments and a size line fit many times.
const HEADER_BLOCK: usize = 64 << 10;

/// Reads a matrix from a Matrix Market file (a `.gz` file is decompressed as it is read).
pub fn read_matrix(path: impl AsRef<Path>, opts: &ReadOptions) -> Result<MmMatrix, SparseError> {
    read_matrix_checked(path, opts, &ReadChecks::default())
}

/// [`read_matrix`] with the checks and limits of `checks`.
pub fn read_matrix_checked(
    path: impl AsRef<Path>,
    opts: &ReadOptions,
    checks: &ReadChecks,
) -> Result<MmMatrix, SparseError> {
    let path = path.as_ref();
    let label = path.display().to_string();
    if !is_gz(path) {
        let bytes = read_bytes(path)?;
        return parse_matrix_checked(&bytes, &label, opts, checks);
    }
    let mut s = open_stream(path, stream::BLOCK)?;
    let io = |e| stream_err(path, &label, e);
    let pre = prelude::stream_prelude(&mut s, &label, &io)?;
    check_shape(&label, &pre, opts, checks)?;
    let body = match pre.format {
        Format::Coordinate => {
            let mode = mode_of(&pre, opts.symmetry);
            Body::Coordinate(collect::stream_triplets(&mut s, &label, &pre, mode, &io)?)
        }
        Format::Array => Body::Array(collect::stream_values(&mut s, &label, &pre, &io)?),
    };
    drop(s);
    let text = Text::File {
        path,
        size_line: pre.size_line,
    };
    finish_matrix(body, &text, &label, &pre, opts, checks)
}

/// Parses a matrix from the bytes of a Matrix Market file; `label` stands for the file name in
/// error messages.
pub fn parse_matrix(
    bytes: &[u8],
    label: &str,
    opts: &ReadOptions,
) -> Result<MmMatrix, SparseError> {
    parse_matrix_checked(bytes, label, opts, &ReadChecks::default())
}

/// [`parse_matrix`] with the checks and limits of `checks`.
pub fn parse_matrix_checked(
    bytes: &[u8],
    label: &str,
    opts: &ReadOptions,
    checks: &ReadChecks,
) -> Result<MmMatrix, SparseError> {
    let pre = prelude::prelude(bytes, label)?;
    check_shape(label, &pre, opts, checks)?;
    let body = match pre.format {
        Format::Coordinate => {
            let mode = mode_of(&pre, opts.symmetry);
            Body::Coordinate(collect::coordinate_triplets(bytes, label, &pre, mode)?)
        }
        Format::Array => Body::Array(collect::array_values(bytes, label, &pre)?),
    };
    let text = Text::Bytes {
        bytes,
        data_start: pre.data_start,
    };
    finish_matrix(body, &text, label, &pre, opts, checks)
}

/// What the data lines of a matrix file give: the triplets of a coordinate file or the values
/// of an array file.
enum Body {
    Coordinate(Triplets),
    Array(Vec<f64>),
}

/// The matrix of a file from its prelude and its data lines, whether the file was read whole or
/// as a stream (`text` finds its lines again for error messages).
fn finish_matrix(
    body: Body,
    text: &Text,
    label: &str,
    pre: &Prelude,
    opts: &ReadOptions,
    checks: &ReadChecks,
) -> Result<MmMatrix, SparseError> {
    let matrix = match body {
        Body::Coordinate(t) => finish_coordinate(t, text, label, pre, opts.symmetry, checks)?,
        Body::Array(vals) => finish_dense(&vals, text, label, pre, checks)?,
    };
    Ok(MmMatrix {
        header: pre.header,
        matrix,
    })
}

/// Reads a vector: an `array` file with one column, or a `coordinate` file with one column
/// (absent entries are 0, duplicates summed). A `.gz` file is decompressed as it is read.
pub fn read_vector(path: impl AsRef<Path>) -> Result<Vec<f64>, SparseError> {
    let path = path.as_ref();
    let label = path.display().to_string();
    if !is_gz(path) {
        let bytes = read_bytes(path)?;
        return parse_vector(&bytes, &label);
    }
    let mut s = open_stream(path, stream::BLOCK)?;
    let io = |e| stream_err(path, &label, e);
    let pre = prelude::stream_prelude(&mut s, &label, &io)?;
    check_vector(&label, &pre)?;
    match pre.format {
        Format::Array => collect::stream_values(&mut s, &label, &pre, &io),
        Format::Coordinate => {
            let t = collect::stream_triplets(&mut s, &label, &pre, Mode::General, &io)?;
            vector_of(&label, &pre, &t)
        }
    }
}

/// Parses a vector from the bytes of a Matrix Market file; `label` stands for the file name in
/// error messages.
pub fn parse_vector(bytes: &[u8], label: &str) -> Result<Vec<f64>, SparseError> {
    let pre = prelude::prelude(bytes, label)?;
    check_vector(label, &pre)?;
    match pre.format {
        Format::Array => collect::array_values(bytes, label, &pre),
        Format::Coordinate => {
            let t = collect::coordinate_triplets(bytes, label, &pre, Mode::General)?;
            vector_of(label, &pre, &t)
        }
    }
}

/// The line of a Matrix Market file (plain or `.gz`) that stores entry (`row`, `col`), 1-based:
/// for a `coordinate` file the first line giving that position (or, in a `symmetric` file, its
/// mirror), for an `array` file the line of that value. `Ok(None)` when no line stores it (an
/// absent entry of a sparse matrix, or a position outside the matrix).
///
/// This reads the file again, in bounded memory: it is meant for the error path, to name the
/// line of an entry that a later stage (a solver's `BadDiagonal { row, value }`, say) found at
/// fault.
pub fn find_entry_line(
    path: impl AsRef<Path>,
    row: usize,
    col: usize,
) -> Result<Option<EntryLine>, SparseError> {
    let path = path.as_ref();
    let label = path.display().to_string();
    let mut s = open_stream(path, 1 << 20)?;
    let io = |e| stream_err(path, &label, e);
    let pre = prelude::stream_prelude(&mut s, &label, &io)?;
    drop(s);
    let text = Text::File {
        path,
        size_line: pre.size_line,
    };
    let spot = locate(&text, &pre, row, col);
    Ok(spot.map(|s| EntryLine {
        line: s.line,
        text: s.quote,
    }))
}

/// The [`SparseError::BadDiagonal`] for diagonal entry `row` (1-based) of the matrix read from
/// `path` having the value `value`, naming the file line that stores it (found by
/// [`find_entry_line`]; line 0 when none or the file cannot be read again). A zero value that no
/// line stores is reported as a row without a diagonal entry.
pub fn diagonal_error(path: impl AsRef<Path>, row: usize, value: f64) -> SparseError {
    let path = path.as_ref();
    let found = find_entry_line(path, row, row).ok().flatten();
    let value = if found.is_none() && value == 0.0 {
        None
    } else {
        Some(value)
    };
    SparseError::BadDiagonal {
        file: path.display().to_string(),
        line: found.map_or(0, |f| f.line),
        row,
        value,
    }
}

pub(crate) fn parse_err(label: &str, line: usize, msg: String) -> SparseError {
    SparseError::Parse {
        file: label.to_string(),
        line,
        msg,
    }
}

fn is_gz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// The bytes of a plain file: mapped into memory, or read.
enum Input {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Input {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Input::Mapped(m) => m,
            Input::Owned(v) => v,
        }
    }
}

/// Files from this size on are mapped rather than read.
const MAP_FROM: u64 = 1 << 20;

/// The whole of a plain file in memory.
///
/// Large plain files are mapped: reading them would copy every byte out of the page cache into
/// freshly zeroed memory, which costs about as much as parsing them.
fn read_bytes(path: &Path) -> Result<Input, SparseError> {
    let io = |source| SparseError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len >= MAP_FROM {
        // SAFETY: the map is only read, as plain bytes, and dropped before this call
        // returns. Another process truncating the file meanwhile could fault the reader;
        // changing it in place gives wrong values or a parse error, never unsafety in the
        // parser, which reads bytes through bounds-checked indexing only.
        if let Ok(m) = unsafe { memmap2::Mmap::map(&file) } {
            return Ok(Input::Mapped(m));
        }
    }
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    (&file).read_to_end(&mut out).map_err(io)?;
    Ok(Input::Owned(out))
}

/// A stream over the text of `path`: decompressed when its name ends in `.gz`.
fn open_stream(path: &Path, capacity: usize) -> Result<Stream<Box<dyn Read + Send>>, SparseError> {
    let file = std::fs::File::open(path).map_err(|source| SparseError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let src = BufReader::with_capacity(1 << 20, file);
    let src: Box<dyn Read + Send> = if is_gz(path) {
        Box::new(flate2::read::MultiGzDecoder::new(src))
    } else {
        Box::new(src)
    };
    Ok(Stream::new(src, capacity))
}

/// A failed read of a stream: a corrupt `.gz` file is a parse error of the file as a whole.
fn stream_err(path: &Path, label: &str, e: std::io::Error) -> SparseError {
    let corrupt = matches!(
        e.kind(),
        std::io::ErrorKind::InvalidData
            | std::io::ErrorKind::InvalidInput
            | std::io::ErrorKind::UnexpectedEof
    );
    if corrupt && is_gz(path) {
        parse_err(label, 0, format!("not a valid gzip file: {e}"))
    } else {
        SparseError::Io {
            path: path.to_path_buf(),
            source: e,
        }
    }
}

/// Coordinate triplets in file order (each mirror right after its entry), and the entries set
/// aside above the diagonal of a symmetric file.
#[derive(Debug, Default)]
struct Triplets {
    rows: Vec<u32>,
    cols: Vec<u32>,
    vals: Vec<f64>,
    upper: Vec<Upper>,
}

impl Triplets {
    /// Appends entry (i, j, v) and, when `mirror` and it is off the diagonal, its mirror
    /// (j, i, v) right after it.
    fn push(&mut self, i: u32, j: u32, v: f64, mirror: bool) {
        self.rows.push(i);
        self.cols.push(j);
        self.vals.push(v);
        if mirror && i != j {
            self.rows.push(j);
            self.cols.push(i);
            self.vals.push(v);
        }
    }
}

/// A line found again: its 1-based number and its text, quoted.
#[derive(Debug, Clone)]
struct Spot {
    line: usize,
    quote: String,
}

/// The text of the file, as the error path finds lines in it again. A location (of an entry set
/// aside while parsing) is a byte offset into the bytes for [`Text::Bytes`], a line number for
/// [`Text::File`].
enum Text<'a> {
    /// The whole file in memory.
    Bytes { bytes: &'a [u8], data_start: usize },
    /// A file read as a stream: found again by reading it again.
    File { path: &'a Path, size_line: usize },
}

/// Bytes of a line kept when a file is read again: enough for the indices and a quote.
const SCAN_KEEP: usize = 4096;

impl Text<'_> {
    /// The line at location `loc`.
    fn at(&self, loc: usize) -> Spot {
        match self {
            Text::Bytes { bytes, .. } => Spot {
                line: scan::line_number(bytes, loc),
                quote: scan::quote_line(bytes, loc),
            },
            Text::File { .. } => self.scan(|l| l.number == loc).unwrap_or(Spot {
                line: loc,
                quote: String::new(),
            }),
        }
    }

    /// The first data line storing (`row`, `col`), 1-based (or, with `mirror`, (`col`, `row`)).
    fn find(&self, row: usize, col: usize, mirror: bool) -> Option<Spot> {
        let (r, c) = (row as u64, col as u64);
        match self {
            Text::Bytes { bytes, data_start } => {
                scan::find_entry(bytes, *data_start..bytes.len(), r, c, mirror).map(|o| self.at(o))
            }
            Text::File { .. } => self.scan(|l| {
                is_data(&l.text)
                    && scan::find_entry(&l.text, 0..l.text.len(), r, c, mirror).is_some()
            }),
        }
    }

    /// The `k`-th (0-based) data line.
    fn nth(&self, k: usize) -> Option<Spot> {
        match self {
            Text::Bytes { bytes, data_start } => {
                scan::nth_data_line(bytes, *data_start..bytes.len(), k).map(|o| self.at(o))
            }
            Text::File { .. } => {
                let mut seen = 0;
                self.scan(|l| {
                    if !is_data(&l.text) {
                        return false;
                    }
                    seen += 1;
                    seen == k + 1
                })
            }
        }
    }

    /// Reads a [`Text::File`] again and returns the first line of the data section for which
    /// `hit` holds. Best effort: `None` when the file cannot be read again.
    fn scan(&self, mut hit: impl FnMut(&stream::Line) -> bool) -> Option<Spot> {
        let Text::File { path, size_line } = self else {
            return None;
        };
        let mut s = open_stream(path, 1 << 20).ok()?;
        while let Some(l) = s.next_line(SCAN_KEEP).ok()? {
            if l.number > *size_line && hit(&l) {
                return Some(Spot {
                    line: l.number,
                    quote: scan::quote(&l.text),
                });
            }
        }
        None
    }
}

/// A data line: neither blank nor a comment.
fn is_data(line: &[u8]) -> bool {
    let t = line
        .iter()
        .position(|&c| !matches!(c, b' ' | b'\t' | b'\r'))
        .map_or(&[][..], |p| &line[p..]);
    !t.is_empty() && t[0] != b'%'
}

/// The line storing entry (`row`, `col`) (1-based) of the matrix the prelude describes.
fn locate(text: &Text, pre: &Prelude, row: usize, col: usize) -> Option<Spot> {
    let h = pre.header;
    if row == 0 || col == 0 || row > h.nrows || col > h.ncols {
        return None;
    }
    let symmetric = h.symmetry == Symmetry::Symmetric;
    match pre.format {
        Format::Coordinate => text.find(row, col, symmetric),
        Format::Array => {
            // Column-major; a symmetric file stores the lower triangle only.
            let (i, j) = if symmetric && row < col {
                (col - 1, row - 1)
            } else {
                (row - 1, col - 1)
            };
            let k = if symmetric {
                j * h.nrows - j * j.saturating_sub(1) / 2 + (i - j)
            } else {
                j * h.nrows + i
            };
            text.nth(k)
        }
    }
}

/// The shape checks that need no data: square where required.
fn check_shape(
    label: &str,
    pre: &Prelude,
    opts: &ReadOptions,
    checks: &ReadChecks,
) -> Result<(), SparseError> {
    let h = pre.header;
    let square_needed = opts.require_square
        || checks.positive_diagonal
        || h.symmetry == Symmetry::Symmetric
        || opts.symmetry != SymmetryPolicy::AsStored;
    if square_needed && h.nrows != h.ncols {
        let why = if h.symmetry == Symmetry::Symmetric {
            "a symmetric matrix must be square"
        } else if opts.symmetry != SymmetryPolicy::AsStored || checks.positive_diagonal {
            "a matrix read as symmetric must be square"
        } else {
            "a square matrix is required"
        };
        return Err(size_err(label, pre, why));
    }
    Ok(())
}

/// The error at the size line of `pre`: its text and dimensions, then `why` they are refused.
fn size_err(label: &str, pre: &Prelude, why: &str) -> SparseError {
    let h = pre.header;
    let size = format!("size `{}` is {} x {}", pre.size_text, h.nrows, h.ncols);
    parse_err(label, pre.size_line, format!("{size}: {why}"))
}

/// The vector checks of the header: one column, `general`.
fn check_vector(label: &str, pre: &Prelude) -> Result<(), SparseError> {
    let h = pre.header;
    if h.ncols != 1 {
        return Err(size_err(
            label,
            pre,
            "a vector must have exactly one column",
        ));
    }
    if h.symmetry != Symmetry::General && h.nrows != 1 {
        return Err(parse_err(
            label,
            pre.banner_line,
            "a vector file must be `general`, found `symmetric`".into(),
        ));
    }
    Ok(())
}

/// The dense vector of a one-column coordinate file.
fn vector_of(label: &str, pre: &Prelude, t: &Triplets) -> Result<Vec<f64>, SparseError> {
    let n = pre.header.nrows;
    let bytes = (n as u64).saturating_mul(8);
    check::ensure_memory(label, bytes, || format!("a vector of {n} values"), None)?;
    let mut x: Vec<f64> = check::zeroed(n, label, || format!("a vector of {n} values"))?;
    for (&i, &v) in t.rows.iter().zip(&t.vals) {
        x[i as usize] += v;
    }
    Ok(x)
}

fn mode_of(pre: &Prelude, policy: SymmetryPolicy) -> Mode {
    match (pre.header.symmetry, policy) {
        (Symmetry::Symmetric, _) => Mode::SymmetricFile,
        (Symmetry::General, SymmetryPolicy::AssumeSymmetric) => Mode::DropUpper,
        (Symmetry::General, _) => Mode::General,
    }
}

/// Builds the matrix from the triplets of a coordinate section, with the checks that need the
/// whole matrix: entries above the diagonal of a symmetric file, symmetry where required, the
/// diagonal where asked.
fn finish_coordinate(
    t: Triplets,
    text: &Text,
    label: &str,
    pre: &Prelude,
    policy: SymmetryPolicy,
    checks: &ReadChecks,
) -> Result<CsrMatrix, SparseError> {
    let h = pre.header;
    let mode = mode_of(pre, policy);
    if checks.positive_diagonal {
        // Before anything of the matrix's order is allocated.
        if let Some(row) = check::missing_diagonal(h.nrows, &t.rows, &t.cols) {
            return Err(SparseError::BadDiagonal {
                file: label.to_string(),
                line: 0,
                row,
                value: None,
            });
        }
    }
    let per_row = if assemble::few(t.vals.len(), h.nrows) {
        check::FEW_ROW_BYTES
    } else {
        check::ROW_BYTES
    };
    check::ensure_rows(label, h.nrows, per_row, checks.memory_limit)?;
    let a = match mode {
        Mode::General => assemble::assemble(h.nrows, h.ncols, t.rows, t.cols, t.vals)?,
        Mode::SymmetricFile | Mode::DropUpper => {
            assemble::symmetric_from_lower(h.nrows, t.rows, t.cols, t.vals)?
        }
    };
    if mode == Mode::SymmetricFile && !t.upper.is_empty() {
        check_upper(text, label, &a, t.upper)?;
    }
    let a = if mode == Mode::General && policy == SymmetryPolicy::RequireSymmetric {
        if let Some((i, j, aij, aji)) = a.first_asymmetry(SYM_TOL) {
            // The first line storing (i, j) is found again by scanning: the error path only.
            let spot = text.find(i + 1, j + 1, false);
            let (line, quoted) = spot.map_or((0, String::new()), |s| (s.line, s.quote));
            return Err(parse_err(
                label,
                line,
                format!(
                    "the matrix is not symmetric: entry `{quoted}` gives A({}, {}) = {aij} but \
                     A({}, {}) = {aji} (relative tolerance {SYM_TOL:e}); if the lower triangle \
                     is meant, pass --assume-symmetric to use it and ignore the upper one",
                    i + 1,
                    j + 1,
                    j + 1,
                    i + 1
                ),
            ));
        }
        assemble::mirror_lower(&a)?
    } else {
        a
    };
    if checks.positive_diagonal {
        check_diagonal(&a, text, label, pre)?;
    }
    Ok(a)
}

/// A dense matrix from the values of an `array` section.
fn finish_dense(
    vals: &[f64],
    text: &Text,
    label: &str,
    pre: &Prelude,
    checks: &ReadChecks,
) -> Result<CsrMatrix, SparseError> {
    let h = pre.header;
    check::ensure_rows(label, h.nrows, check::ROW_BYTES, checks.memory_limit)?;
    let symmetric = h.symmetry == Symmetry::Symmetric;
    let a = assemble::dense(h.nrows, h.ncols, symmetric, vals)?;
    if checks.positive_diagonal {
        check_diagonal(&a, text, label, pre)?;
    }
    Ok(a)
}

/// [`first_bad_diagonal`] as an error naming the file line of the entry at fault.
fn check_diagonal(
    a: &CsrMatrix,
    text: &Text,
    label: &str,
    pre: &Prelude,
) -> Result<(), SparseError> {
    let Some(f) = first_bad_diagonal(a) else {
        return Ok(());
    };
    let line = match f.value {
        Some(_) => locate(text, pre, f.row, f.row).map_or(0, |s| s.line),
        None => 0,
    };
    Err(SparseError::BadDiagonal {
        file: label.to_string(),
        line,
        row: f.row,
        value: f.value,
    })
}

/// Entries above the diagonal of a symmetric file are accepted only when their mirror is stored
/// too and agrees; they are then not counted a second time.
fn check_upper(
    text: &Text,
    label: &str,
    a: &CsrMatrix,
    mut upper: Vec<Upper>,
) -> Result<(), SparseError> {
    // Stable: duplicates at one position stay in file order, and are summed in that order.
    upper.sort_by_key(|u| (u.i, u.j));
    let mut k = 0;
    while k < upper.len() {
        let first = upper[k];
        let mut sum = 0.0;
        while k < upper.len() && (upper[k].i, upper[k].j) == (first.i, first.j) {
            sum += upper[k].v;
            k += 1;
        }
        let (i, j) = (first.i as usize, first.j as usize);
        let (cols, vals) = a.row(j);
        let Spot {
            line,
            quote: quoted,
        } = text.at(first.offset);
        match cols.binary_search(&first.i) {
            Err(_) => {
                return Err(parse_err(
                    label,
                    line,
                    format!(
                        "entry `{quoted}` lies above the diagonal of a symmetric matrix and its \
                         mirror ({}, {}) is not given; a symmetric file stores the lower triangle",
                        j + 1,
                        i + 1
                    ),
                ))
            }
            Ok(p) => {
                let w = vals[p];
                if (sum - w).abs() > SYM_TOL * sum.abs().max(w.abs()) {
                    return Err(parse_err(
                        label,
                        line,
                        format!(
                            "entry `{quoted}` lies above the diagonal of a symmetric matrix: \
                             A({}, {}) = {sum} disagrees with its mirror A({}, {}) = {w}",
                            i + 1,
                            j + 1,
                            j + 1,
                            i + 1
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
