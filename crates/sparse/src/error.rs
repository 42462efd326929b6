//! The one error type of the sparse crate: every failure names the file, line and value at fault
//! where there is one.
use std::path::PathBuf;

/// Errors from reading, writing, building or converting sparse matrices.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SparseError {
    /// The operating system refused to open, read or write a file.
    #[error("{}: {source}", path.display())]
    Io {
        /// File concerned.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A Matrix Market file is malformed. `line` is 1-based; 0 means the file as a whole
    /// (for example an empty file).
    #[error("{file}:{line}: {msg}")]
    Parse {
        /// File name as given by the caller (or a label for in-memory input).
        file: String,
        /// 1-based line number, 0 when no single line is at fault.
        line: usize,
        /// What is wrong, quoting the offending value.
        msg: String,
    },
    /// A padded format (ELL, DIA, HYB's ELL part) would need too much memory.
    #[error(
        "{format} refused: fill ratio {fill_ratio:.2} (stored slots / nonzeros) exceeds the limit \
         {limit:.2}, or {bytes} bytes exceed {max_bytes}"
    )]
    TooMuchPadding {
        /// Format name ("ELL", "DIA", "HYB").
        format: &'static str,
        /// Stored slots divided by nonzeros.
        fill_ratio: f64,
        /// Accepted ratio.
        limit: f64,
        /// Bytes the padded arrays would take.
        bytes: u64,
        /// Accepted bytes.
        max_bytes: u64,
    },
    /// Inconsistent sparse structure (unsorted or out-of-range indices, bad row pointers).
    #[error("invalid sparse structure: {0}")]
    Structure(String),
    /// Operands whose dimensions do not agree (non-square matrix, vector of the wrong length).
    #[error("dimension mismatch: {0}")]
    Dimension(String),
    /// The matrix does not fit 32-bit indices.
    #[error("matrix too large for 32-bit indices: {0}")]
    TooLarge(String),
    /// A generator or conversion parameter is out of its valid range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// A diagonal entry that rules out a symmetric positive definite matrix: absent (a row with
    /// no diagonal entry, an empty row among them), zero or negative.
    #[error("{}", diagonal_message(file, *line, *row, *value))]
    BadDiagonal {
        /// File name as given by the caller (or a label for in-memory input).
        file: String,
        /// 1-based line of the (first) entry storing the diagonal value; 0 when no line stores
        /// it (an absent entry) or the line could not be found.
        line: usize,
        /// 1-based row.
        row: usize,
        /// The diagonal value (duplicates summed); `None` when no entry stores it.
        value: Option<f64>,
    },
    /// Memory that a file's declared size would need and that the machine cannot give (or that
    /// exceeds the limit the caller set). Raised before the allocation, never as an abort.
    #[error("{file}: needs {} for {what}, {why}", human_bytes(*needed))]
    OutOfMemory {
        /// File name as given by the caller (or a label for in-memory input).
        file: String,
        /// Bytes needed.
        needed: u64,
        /// What they are for ("4000000000 rows").
        what: String,
        /// Why they cannot be had ("but only 3.1 GB is available").
        why: String,
    },
    /// An output path that names one of the inputs: writing it would destroy the input.
    #[error(
        "{}: the output is the input file {}; write the result to another file",
        output.display(),
        input.display()
    )]
    OutputIsInput {
        /// The output path as given.
        output: PathBuf,
        /// The input path it names.
        input: PathBuf,
    },
    /// A matrix that must be symmetric is not.
    #[error(
        "matrix is not symmetric: A[{row}][{col}] = {a_ij:e} but A[{col}][{row}] = {a_ji:e} (1-based)"
    )]
    NotSymmetric {
        /// 1-based row.
        row: usize,
        /// 1-based column.
        col: usize,
        /// Value at (row, col).
        a_ij: f64,
        /// Value at (col, row), 0 when absent.
        a_ji: f64,
    },
    /// A matrix that must be symmetric stores only one triangle (every entry on one side of
    /// the diagonal has no mirror): it was probably meant to be mirrored.
    #[error(
        "the matrix holds only its {part} triangle: A[{row}][{col}] = {value:e} is stored but          A[{col}][{row}] is not (1-based); a symmetric matrix needs both triangles: build it          with CsrMatrix::from_{part}_triangle to mirror this one"
    )]
    OneTriangle {
        /// The triangle it holds.
        part: crate::Triangle,
        /// 1-based row of the first entry without a mirror.
        row: usize,
        /// 1-based column of that entry.
        col: usize,
        /// Its value.
        value: f64,
    },
}

/// What [`SparseError::BadDiagonal`] prints.
fn diagonal_message(file: &str, line: usize, row: usize, value: Option<f64>) -> String {
    const WHY: &str = "a symmetric positive definite matrix has a positive diagonal";
    match (value, line) {
        (None, _) => {
            format!("{file}: row {row} has no diagonal entry (A[{row}][{row}] = 0): {WHY}")
        }
        (Some(v), 0) => {
            format!("{file}: diagonal entry A[{row}][{row}] = {v} must be positive: {WHY}")
        }
        (Some(v), l) => {
            format!("{file}:{l}: diagonal entry A[{row}][{row}] = {v} must be positive: {WHY}")
        }
    }
}

/// A byte count in decimal units with one decimal: "16.0 GB", "512.0 kB", "17 B".
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["kB", "MB", "GB", "TB", "PB", "EB"];
    if b < 1000 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1000.0;
    let mut u = 0;
    while v >= 999.95 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}
